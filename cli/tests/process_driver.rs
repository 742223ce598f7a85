//! The process driver against real processes: shims started through the `palisade`
//! binary (`palisade shim ...`), commands run by `sh` and `sleep`, state read back from
//! `/proc`. Each test owns a temporary driver directory and tags its commands with a
//! unique environment variable, so it can count exactly its own processes.
#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use palisade_driver::process::ProcessDriver;
use palisade_driver::{
    ComputeDriver, DriverError, ExecutionHandle, ExecutionIdentity, ExecutionStatus, Fence,
    LaunchSpec,
};
use palisade_testkit::processes::{alive, signal};

const MARKER_VARIABLE: &str = "PALISADE_TEST_MARKER";
const CLUSTER_ID: &str = "cluster-test";
/// How long a test waits for processes to appear or a status to change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// A driver directory plus the marker of this test's processes; kills leftovers on
/// drop, so a failing test does not leave sleeps behind.
struct Fixture {
    root: tempfile::TempDir,
    marker: String,
    operations: AtomicU64,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            root: tempfile::tempdir().expect("temporary directory"),
            marker: uuid::Uuid::new_v4().to_string(),
            operations: AtomicU64::new(1),
        }
    }

    fn driver_dir(&self) -> PathBuf {
        self.root.path().join("driver")
    }

    /// A driver as one gateway process would build it; call again for "another
    /// gateway" or "the same gateway after a restart".
    fn driver(&self) -> ProcessDriver {
        ProcessDriver::new(
            self.driver_dir(),
            PathBuf::from(env!("CARGO_BIN_EXE_palisade")),
        )
        .expect("driver directory")
    }

    /// A fence of a leader of term 1 for a new operation: every call of a test gets
    /// a higher one than the last, as a leader's successive operations do.
    fn fence(&self, sandbox_id: &str, generation: u64) -> Fence {
        Fence {
            cluster_id: CLUSTER_ID.to_owned(),
            term: 1,
            sandbox_id: sandbox_id.to_owned(),
            generation,
            operation_index: self.operations.fetch_add(1, Ordering::SeqCst),
        }
    }

    fn fence_for(&self, spec: &LaunchSpec) -> Fence {
        self.fence(&spec.sandbox_id, spec.generation)
    }

    fn spec(&self, sandbox_id: &str, generation: u64, command: &[&str]) -> LaunchSpec {
        LaunchSpec {
            sandbox_id: sandbox_id.to_owned(),
            generation,
            command: command.iter().map(|word| (*word).to_owned()).collect(),
            env: BTreeMap::from([(MARKER_VARIABLE.to_owned(), self.marker.clone())]),
            ..Default::default()
        }
    }

    /// Live processes of this test's commands: those carrying its marker, and
    /// idle commands (forks of their shim that never exec, so without the
    /// spec's environment) working in its driver directory. Zombies have
    /// neither an environment nor a working directory.
    fn processes(&self) -> Vec<i32> {
        let needle = format!("{MARKER_VARIABLE}={}", self.marker);
        let driver_dir = self.driver_dir();
        pids()
            .filter(|pid| {
                let marked = fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|byte| *byte == 0)
                        .any(|entry| entry == needle.as_bytes())
                });
                let idle_here = fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "palisade-idle")
                    && fs::read_link(format!("/proc/{pid}/cwd"))
                        .is_ok_and(|cwd| cwd.starts_with(&driver_dir));
                marked || idle_here
            })
            .collect()
    }

    async fn wait_for_processes(&self, count: usize) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while self.processes().len() != count {
            assert!(
                Instant::now() < deadline,
                "expected {count} processes, have {:?}",
                self.processes()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let root = self.root.path().to_string_lossy().into_owned();
        let shims = pids().filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&root))
        });
        for pid in shims.chain(self.processes()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
}

/// (parent pid, session id) of a process.
fn parent_and_session(pid: u32) -> (i32, i32) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 1..]
        .split_whitespace()
        .collect();
    (
        fields[1].parse().expect("ppid"),
        fields[3].parse().expect("session"),
    )
}

fn shim_pid(handle: &ExecutionHandle) -> u32 {
    match &handle.identity {
        ExecutionIdentity::Process { pid, .. } => *pid,
        other => panic!("not a process handle: {other:?}"),
    }
}

async fn wait_for_status(
    driver: &ProcessDriver,
    sandbox_id: &str,
    generation: u64,
    expected: ExecutionStatus,
) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let status = driver
            .inspect(sandbox_id, generation)
            .await
            .expect("inspect");
        if status == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {expected:?}, still {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn running(handle: &ExecutionHandle) -> ExecutionStatus {
    ExecutionStatus::Running {
        handle: handle.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_starts_one_detached_shim_however_often_it_is_called() {
    let fixture = Fixture::new();
    let spec = fixture.spec("sandbox-a", 1, &["sleep", "1000"]);
    // Two gateways launching the same generation at once, one of them twice.
    let (first, second) = (fixture.driver(), fixture.driver());
    // The same operation (one fence), repeated.
    let fence = fixture.fence_for(&spec);
    let (a, b, c) = tokio::join!(
        first.launch(&spec, &fence),
        second.launch(&spec, &fence),
        first.launch(&spec, &fence)
    );
    let handle = a.expect("launch");
    assert_eq!(b.expect("launch"), handle);
    assert_eq!(c.expect("launch"), handle);
    assert_eq!(handle.generation, 1);
    assert!(
        handle
            .to_string()
            .starts_with(&format!("pid={} start=", shim_pid(&handle)))
    );

    fixture.wait_for_processes(1).await;
    // The shim is a real process, in a session of its own, and not our child: killing
    // this gateway could not take it down.
    let pid = shim_pid(&handle);
    let (parent, session) = parent_and_session(pid);
    assert_ne!(parent, std::process::id() as i32);
    assert_eq!(session, pid as i32);

    // Launching later returns the same execution and starts nothing.
    assert_eq!(
        first
            .launch(&spec, &fixture.fence_for(&spec))
            .await
            .expect("launch"),
        handle
    );
    assert_eq!(
        first.inspect("sandbox-a", 1).await.expect("inspect"),
        running(&handle)
    );
    assert_eq!(fixture.processes().len(), 1);

    first
        .remove("sandbox-a", &fixture.fence("sandbox-a", 0))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
}

#[tokio::test]
async fn stop_terminates_the_whole_process_group() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let spec = fixture.spec(
        "sandbox-b",
        1,
        &["sh", "-c", "sleep 1000 & sleep 1000 & wait"],
    );
    driver
        .launch(&spec, &fixture.fence_for(&spec))
        .await
        .expect("launch");
    fixture.wait_for_processes(3).await; // sh and two grandchildren

    let started = Instant::now();
    driver
        .stop(
            "sandbox-b",
            1,
            Duration::from_secs(30),
            &fixture.fence("sandbox-b", 1),
        )
        .await
        .expect("stop");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "SIGTERM was enough"
    );
    assert!(fixture.processes().is_empty());
    assert_eq!(
        driver.inspect("sandbox-b", 1).await.expect("inspect"),
        ExecutionStatus::Exited {
            code: 128 + libc::SIGTERM
        }
    );
    // Stopping again, or stopping what never existed, succeeds.
    driver
        .stop(
            "sandbox-b",
            1,
            Duration::ZERO,
            &fixture.fence("sandbox-b", 1),
        )
        .await
        .expect("stop again");
    driver
        .stop(
            "sandbox-b",
            9,
            Duration::ZERO,
            &fixture.fence("sandbox-b", 9),
        )
        .await
        .expect("stop unknown");
    driver
        .stop(
            "no-such-sandbox",
            1,
            Duration::ZERO,
            &fixture.fence("no-such-sandbox", 1),
        )
        .await
        .expect("stop unknown");
}

#[tokio::test]
async fn stop_kills_a_group_that_ignores_sigterm_after_the_grace() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    // `trap "" TERM` makes sh ignore SIGTERM, and its children inherit that.
    let script = r#"trap "" TERM; sleep 1000 & sleep 1000 & wait"#;
    driver
        .launch(
            &fixture.spec("sandbox-c", 1, &["sh", "-c", script]),
            &fixture.fence("sandbox-c", 1),
        )
        .await
        .expect("launch");
    fixture.wait_for_processes(3).await;

    let grace = Duration::from_secs(1);
    let started = Instant::now();
    driver
        .stop("sandbox-c", 1, grace, &fixture.fence("sandbox-c", 1))
        .await
        .expect("stop");
    let took = started.elapsed();
    assert!(
        took >= grace,
        "SIGKILL came before the grace ended: {took:?}"
    );
    assert!(took < grace + Duration::from_secs(10), "stop took {took:?}");
    assert!(fixture.processes().is_empty());
    assert_eq!(
        driver.inspect("sandbox-c", 1).await.expect("inspect"),
        ExecutionStatus::Exited {
            code: 128 + libc::SIGKILL
        }
    );
}

#[tokio::test]
async fn descendants_that_leave_the_process_group_are_killed_with_the_execution() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    // The background child makes itself a session (and group) leader, out of reach of
    // a group signal; the shim, as subreaper, adopts and kills it.
    let script = "setsid sleep 1000 & exec sleep 1000";
    driver
        .launch(
            &fixture.spec("sandbox-d", 1, &["sh", "-c", script]),
            &fixture.fence("sandbox-d", 1),
        )
        .await
        .expect("launch");
    fixture.wait_for_processes(2).await;

    driver
        .stop(
            "sandbox-d",
            1,
            Duration::from_secs(5),
            &fixture.fence("sandbox-d", 1),
        )
        .await
        .expect("stop");
    assert!(fixture.processes().is_empty());
}

#[tokio::test]
async fn exit_codes_are_recorded_and_leftovers_killed() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .launch(
            &fixture.spec("sandbox-e", 1, &["sh", "-c", "exit 0"]),
            &fixture.fence("sandbox-e", 1),
        )
        .await
        .expect("launch");
    // The command exits 3 while a background child still runs: the execution is over
    // when its command is, so the shim kills the child.
    let second = fixture.spec("sandbox-e", 2, &["sh", "-c", "sleep 1000 & exit 3"]);
    let handle = driver
        .launch(&second, &fixture.fence_for(&second))
        .await
        .expect("launch");

    wait_for_status(&driver, "sandbox-e", 1, ExecutionStatus::Exited { code: 0 }).await;
    wait_for_status(&driver, "sandbox-e", 2, ExecutionStatus::Exited { code: 3 }).await;
    assert!(fixture.processes().is_empty());

    // Launching an exited generation returns it as it is; nothing runs again.
    assert_eq!(
        driver
            .launch(&second, &fixture.fence_for(&second))
            .await
            .expect("launch"),
        handle
    );
    assert!(fixture.processes().is_empty());
    assert_eq!(
        driver.inspect("sandbox-e", 2).await.expect("inspect"),
        ExecutionStatus::Exited { code: 3 }
    );
    driver
        .remove("sandbox-e", &fixture.fence("sandbox-e", 0))
        .await
        .expect("remove");
}

#[tokio::test]
async fn a_command_that_cannot_start_is_rejected_with_no_effect() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    for (generation, program) in [
        (1, "/nonexistent/palisade-test-program"),
        (2, "palisade-no-such-command"),
    ] {
        let spec = fixture.spec("sandbox-f", generation, &[program, "arg"]);
        let error = driver
            .launch(&spec, &fixture.fence_for(&spec))
            .await
            .expect_err("must be rejected");
        assert!(error.is_definite_no_effect(), "{error}");
        assert!(error.to_string().contains(program), "{error}");
        assert_eq!(
            driver
                .inspect("sandbox-f", generation)
                .await
                .expect("inspect"),
            ExecutionStatus::Exited { code: 127 }
        );
        // Idempotent: the same answer again, without a new attempt.
        assert!(matches!(
            driver.launch(&spec, &fixture.fence_for(&spec)).await,
            Err(DriverError::Rejected { .. })
        ));
    }
    // Invalid input never reaches the filesystem.
    let error = driver
        .launch(
            &fixture.spec("../escape", 1, &["true"]),
            &fixture.fence("../escape", 1),
        )
        .await
        .expect_err("must be rejected");
    assert!(error.is_definite_no_effect());
    assert!(!fixture.root.path().join("escape").exists());
    driver
        .remove("sandbox-f", &fixture.fence("sandbox-f", 0))
        .await
        .expect("remove");
}

#[tokio::test]
async fn a_restarted_gateway_adopts_running_executions() {
    let fixture = Fixture::new();
    // An empty command means the default idle command.
    let spec = fixture.spec("sandbox-g", 4, &[]);
    let handle = {
        let gateway_before_restart = fixture.driver();
        gateway_before_restart
            .launch(&spec, &fixture.fence_for(&spec))
            .await
            .expect("launch")
    };
    fixture.wait_for_processes(1).await;

    let gateway_after_restart = fixture.driver();
    assert_eq!(
        gateway_after_restart
            .inspect("sandbox-g", 4)
            .await
            .expect("inspect"),
        running(&handle)
    );
    assert_eq!(
        gateway_after_restart
            .launch(&spec, &fixture.fence_for(&spec))
            .await
            .expect("launch"),
        handle
    );
    gateway_after_restart
        .stop(
            "sandbox-g",
            4,
            Duration::from_secs(5),
            &fixture.fence("sandbox-g", 4),
        )
        .await
        .expect("stop");
    assert!(fixture.processes().is_empty());
    assert_eq!(
        gateway_after_restart
            .inspect("sandbox-g", 4)
            .await
            .expect("inspect"),
        ExecutionStatus::Exited {
            code: 128 + libc::SIGTERM
        }
    );
}

/// Waits until the clock `/proc` counts start times in (clock ticks since boot,
/// 10 ms apart) is past the start time in every one of `records`, so that a
/// process started now stands for a later one that took a recycled pid. One
/// started within the same tick as the recorded process would be the same
/// identity (pid and start time) to the driver, and to any reader of `/proc`: a
/// quick shim and a quick test met within one tick in about 1 run in 6.
async fn wait_past_start_times(records: &[PathBuf]) {
    let latest = records
        .iter()
        .map(|record| {
            let value: serde_json::Value =
                serde_json::from_slice(&fs::read(record).expect("record")).expect("json");
            value["start_time"].as_u64().expect("a start time")
        })
        .max()
        .expect("records");
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Seconds since boot, on the clock start times count on (boot time).
        let uptime: f64 = fs::read_to_string("/proc/uptime")
            .expect("/proc/uptime")
            .split_whitespace()
            .next()
            .and_then(|seconds| seconds.parse().ok())
            .expect("seconds since boot");
        if (uptime * ticks_per_second) as u64 > latest + 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the clock did not pass start time {latest}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Rewrites the `pid` of a JSON record, keeping its start time.
fn repoint(record: &Path, pid: u32) {
    let mut value: serde_json::Value =
        serde_json::from_slice(&fs::read(record).expect("record")).expect("json");
    value["pid"] = pid.into();
    fs::write(record, serde_json::to_vec(&value).expect("json")).expect("write record");
}

/// A process in a session and group of its own, like a shim or a command leader;
/// killed when dropped, so a failing test does not leave it behind.
struct Decoy(std::process::Child);

impl Decoy {
    fn spawn() -> Self {
        let mut decoy = std::process::Command::new("sleep");
        decoy
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            decoy.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        Decoy(decoy.spawn().expect("decoy"))
    }

    fn is_running(&mut self) -> bool {
        self.0.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_recycled_pid_is_never_signalled() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .launch(
            &fixture.spec("sandbox-h", 1, &["sh", "-c", "exit 0"]),
            &fixture.fence("sandbox-h", 1),
        )
        .await
        .expect("launch");
    wait_for_status(&driver, "sandbox-h", 1, ExecutionStatus::Exited { code: 0 }).await;

    // Pretend the shim and the command died without recording an exit and their pids
    // now belong to unrelated processes: the records keep the old start times.
    let dir = driver.execution_dir("sandbox-h", 1);
    wait_past_start_times(&[dir.join("shim.json"), dir.join("command.json")]).await;
    let mut decoys = [Decoy::spawn(), Decoy::spawn()];
    repoint(&dir.join("shim.json"), decoys[0].0.id());
    repoint(&dir.join("command.json"), decoys[1].0.id());
    fs::remove_file(dir.join("exit.json")).expect("remove exit record");

    assert_eq!(
        driver.inspect("sandbox-h", 1).await.expect("inspect"),
        ExecutionStatus::Absent
    );
    driver
        .stop(
            "sandbox-h",
            1,
            Duration::ZERO,
            &fixture.fence("sandbox-h", 1),
        )
        .await
        .expect("stop");
    driver
        .remove("sandbox-h", &fixture.fence("sandbox-h", 0))
        .await
        .expect("remove");
    for decoy in &mut decoys {
        assert!(decoy.is_running(), "a decoy was signalled");
    }
}

#[tokio::test]
async fn remove_stops_every_execution_and_deletes_its_files() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .launch(
            &fixture.spec("sandbox-i", 1, &["sh", "-c", "echo hello; exit 0"]),
            &fixture.fence("sandbox-i", 1),
        )
        .await
        .expect("launch");
    wait_for_status(&driver, "sandbox-i", 1, ExecutionStatus::Exited { code: 0 }).await;
    let log = driver.execution_dir("sandbox-i", 1).join("stdout.log");
    assert_eq!(fs::read_to_string(log).expect("stdout.log"), "hello\n");
    driver
        .launch(
            &fixture.spec(
                "sandbox-i",
                2,
                &["sh", "-c", "sleep 1000 & sleep 1000 & wait"],
            ),
            &fixture.fence("sandbox-i", 2),
        )
        .await
        .expect("launch");
    fixture.wait_for_processes(3).await;

    driver
        .remove("sandbox-i", &fixture.fence("sandbox-i", 0))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
    // Only the tombstone and the fence remain of the sandbox.
    let mut left: Vec<String> = fs::read_dir(driver.sandbox_dir("sandbox-i"))
        .expect("sandbox directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    left.sort();
    // One fence record (the remove's; the launches' were superseded and deleted),
    // the lock and one tombstone record.
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left[0].starts_with("fence."), "{left:?}");
    assert_eq!(left[1], "sandbox.lock");
    assert!(left[2].starts_with("tombstone."), "{left:?}");
    assert_eq!(
        driver
            .fence_of("sandbox-i")
            .await
            .expect("fence")
            .map(|fence| fence.generation),
        Some(0)
    );
    assert!(
        driver
            .tombstone_of("sandbox-i")
            .await
            .expect("tombstone")
            .is_some()
    );
    for generation in [1, 2] {
        assert_eq!(
            driver
                .inspect("sandbox-i", generation)
                .await
                .expect("inspect"),
            ExecutionStatus::Absent
        );
    }
    assert!(driver.list().await.expect("list").is_empty());
    driver
        .remove("sandbox-i", &fixture.fence("sandbox-i", 0))
        .await
        .expect("remove again");
}

#[tokio::test]
async fn list_returns_every_execution() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .launch(
            &fixture.spec("sandbox-j", 1, &["sh", "-c", "exit 0"]),
            &fixture.fence("sandbox-j", 1),
        )
        .await
        .expect("launch");
    wait_for_status(&driver, "sandbox-j", 1, ExecutionStatus::Exited { code: 0 }).await;
    let idle = driver
        .launch(
            &fixture.spec("sandbox-j", 2, &[]),
            &fixture.fence("sandbox-j", 2),
        )
        .await
        .expect("launch");
    let other = driver
        .launch(
            &fixture.spec("sandbox-k", 7, &["sleep", "1000"]),
            &fixture.fence("sandbox-k", 7),
        )
        .await
        .expect("launch");
    // Things in the directory that are not executions are not listed.
    fs::create_dir_all(fixture.driver_dir().join(".trash")).expect("mkdir");
    fs::create_dir_all(fixture.driver_dir().join("sandbox-k").join(".staging-8-x")).expect("mkdir");

    assert_eq!(
        driver.list().await.expect("list"),
        vec![
            (
                "sandbox-j".to_owned(),
                1,
                ExecutionStatus::Exited { code: 0 }
            ),
            ("sandbox-j".to_owned(), 2, running(&idle)),
            ("sandbox-k".to_owned(), 7, running(&other)),
        ]
    );
    driver
        .remove("sandbox-j", &fixture.fence("sandbox-j", 0))
        .await
        .expect("remove");
    driver
        .remove("sandbox-k", &fixture.fence("sandbox-k", 0))
        .await
        .expect("remove");
    assert!(driver.list().await.expect("list").is_empty());
    assert!(fixture.processes().is_empty());
}

/// What a gateway leaves behind when it dies after creating an execution's directory
/// and before starting its shim.
fn interrupted_launch(driver: &ProcessDriver, spec: &LaunchSpec) {
    let dir = driver.execution_dir(&spec.sandbox_id, spec.generation);
    fs::create_dir_all(dir.join("work")).expect("mkdir");
    fs::write(
        dir.join("spec.json"),
        serde_json::to_vec(spec).expect("json"),
    )
    .expect("spec");
}

#[tokio::test]
async fn an_interrupted_launch_is_finished_or_stopped_by_the_next_gateway() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let first = fixture.spec("sandbox-l", 1, &["sleep", "1000"]);
    interrupted_launch(&driver, &first);
    assert_eq!(
        driver.inspect("sandbox-l", 1).await.expect("inspect"),
        ExecutionStatus::Absent
    );
    // The next leader resumes the pending launch: it starts the execution once.
    let handle = driver
        .launch(&first, &fixture.fence_for(&first))
        .await
        .expect("launch");
    fixture.wait_for_processes(1).await;
    assert_eq!(
        driver.inspect("sandbox-l", 1).await.expect("inspect"),
        running(&handle)
    );

    // If a stop comes first instead, the command never starts, even when a launch of
    // that generation is retried afterwards.
    let second = fixture.spec("sandbox-l", 2, &["sleep", "1000"]);
    interrupted_launch(&driver, &second);
    driver
        .stop(
            "sandbox-l",
            2,
            Duration::ZERO,
            &fixture.fence("sandbox-l", 2),
        )
        .await
        .expect("stop");
    driver
        .launch(&second, &fixture.fence_for(&second))
        .await
        .expect("launch");
    assert_eq!(
        driver.inspect("sandbox-l", 2).await.expect("inspect"),
        ExecutionStatus::Exited {
            code: 128 + libc::SIGTERM
        }
    );
    assert_eq!(fixture.processes().len(), 1, "only generation 1 runs");

    // A different spec for an existing generation is a caller bug, refused.
    let conflicting = fixture.spec("sandbox-l", 1, &["sleep", "2000"]);
    let error = driver
        .launch(&conflicting, &fixture.fence_for(&conflicting))
        .await
        .expect_err("conflict");
    assert!(error.is_definite_no_effect(), "{error}");
    driver
        .remove("sandbox-l", &fixture.fence("sandbox-l", 0))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
}

/// Waits a little and checks that nothing of the test runs: neither a command
/// (found by its marker) nor anything started from the driver directory (shims, and
/// commands still held at their barrier, which run with the shim's command line).
async fn assert_nothing_runs(fixture: &Fixture) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fixture.processes().is_empty(), "{:?}", fixture.processes());
    let root = fixture.root.path().to_string_lossy().into_owned();
    // Shims: launched by hand their command line names their directory; forked
    // by a launch server, their standard error is its `shim.log`.
    let from_driver_dir: Vec<i32> = pids()
        .filter(|pid| {
            (fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&root))
                || fs::read_link(format!("/proc/{pid}/fd/2"))
                    .is_ok_and(|stderr| stderr.starts_with(&root)))
                && fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
        })
        .collect();
    assert!(from_driver_dir.is_empty(), "{from_driver_dir:?}");
}

fn fence_of_term(sandbox_id: &str, generation: u64, term: u64, operation_index: u64) -> Fence {
    Fence {
        cluster_id: CLUSTER_ID.to_owned(),
        term,
        sandbox_id: sandbox_id.to_owned(),
        generation,
        operation_index,
    }
}

#[tokio::test]
async fn a_deposed_leaders_stop_is_fenced_and_signals_nothing() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let spec = fixture.spec("sandbox-m", 1, &["sleep", "1000"]);
    let handle = driver
        .launch(&spec, &fence_of_term("sandbox-m", 1, 2, 20))
        .await
        .expect("launch");
    fixture.wait_for_processes(1).await;
    // A leader of term 1, paused before its stop, acts late.
    let error = driver
        .stop(
            "sandbox-m",
            1,
            Duration::ZERO,
            &fence_of_term("sandbox-m", 1, 1, 15),
        )
        .await
        .expect_err("fenced");
    assert!(error.is_fenced(), "{error}");
    assert_eq!(
        driver.inspect("sandbox-m", 1).await.expect("inspect"),
        running(&handle)
    );
    assert!(
        !driver
            .execution_dir("sandbox-m", 1)
            .join("stop-requested")
            .exists()
    );
    // Another gateway of the same host sees the same fence.
    let error = fixture
        .driver()
        .remove("sandbox-m", &fence_of_term("sandbox-m", 1, 1, 16))
        .await
        .expect_err("fenced");
    assert!(error.is_fenced(), "{error}");
    assert_eq!(fixture.processes().len(), 1);
    driver
        .remove("sandbox-m", &fence_of_term("sandbox-m", 1, 2, 21))
        .await
        .expect("remove");
    assert_nothing_runs(&fixture).await;
}

#[tokio::test]
async fn a_launch_after_remove_is_fenced_and_starts_nothing() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let first = fixture.spec("sandbox-n", 1, &["sleep", "1000"]);
    driver
        .launch(&first, &fixture.fence_for(&first))
        .await
        .expect("launch");
    fixture.wait_for_processes(1).await;
    driver
        .remove("sandbox-n", &fixture.fence("sandbox-n", 1))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
    assert!(
        driver
            .tombstone_of("sandbox-n")
            .await
            .expect("read")
            .is_some()
    );
    // A later launch, whatever its fence: of the removed generation (a retry) or of
    // a new one (a start resumed by a newer leader).
    for generation in [1, 2] {
        let late = fixture.spec("sandbox-n", generation, &["sleep", "1000"]);
        let error = driver
            .launch(&late, &fence_of_term("sandbox-n", generation, 9, 900))
            .await
            .expect_err("tombstoned");
        assert!(error.is_fenced(), "{error}");
    }
    assert!(driver.list().await.expect("list").is_empty());
    assert_nothing_runs(&fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_racing_a_remove_leaves_nothing_running_in_either_order() {
    let fixture = Fixture::new();
    let (launching, removing) = (fixture.driver(), fixture.driver());
    // Delays of the remove, so that it lands before the launch's claim, between the
    // claim and the shim's claim, and after the command started.
    let remove_delays_ms = [0, 5, 20, 60];
    for round in 0..12_u64 {
        let sandbox_id = format!("race-{round}");
        let spec = fixture.spec(&sandbox_id, 1, &["sleep", "1000"]);
        if round % 3 == 0 {
            // The launch claimed first: its gateway died before starting a shim,
            // and the next leader's launch and a delete now run at once.
            let dir = launching.execution_dir(&sandbox_id, 1);
            fs::create_dir_all(dir.join("work")).expect("mkdir");
            fs::write(
                dir.join("spec.json"),
                serde_json::to_vec(&spec).expect("json"),
            )
            .expect("spec");
        }
        let launch_fence = fence_of_term(&sandbox_id, 1, 1, 10);
        let remove_fence = fence_of_term(&sandbox_id, 1, 1, 11);
        let delay =
            Duration::from_millis(remove_delays_ms[round as usize % remove_delays_ms.len()]);
        let (launched, removed) = tokio::join!(launching.launch(&spec, &launch_fence), async {
            tokio::time::sleep(delay).await;
            removing.remove(&sandbox_id, &remove_fence).await
        });
        removed.unwrap_or_else(|error| panic!("round {round}: remove: {error}"));
        match launched {
            // The launch came first and its execution was then stopped by the
            // removal, or it came second and was refused, or it lost its directory
            // to the removal midway.
            Ok(_) | Err(DriverError::Fenced { .. }) | Err(DriverError::Uncertain { .. }) => {}
            Err(error) => panic!("round {round}: {error}"),
        }
        // The removal was acknowledged: nothing of the sandbox may run, now or later.
        assert_nothing_runs(&fixture).await;
        let again = launching
            .launch(&spec, &launch_fence)
            .await
            .expect_err("removed");
        assert!(again.is_fenced(), "round {round}: {again}");
        assert_nothing_runs(&fixture).await;
    }
    assert!(removing.list().await.expect("list").is_empty());
}

#[tokio::test]
async fn a_shim_killed_before_recording_its_command_never_runs_it() {
    if !cfg!(debug_assertions) {
        eprintln!("the shim's test hook exists in debug builds only; skipped");
        return;
    }
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let mut spec = fixture.spec("sandbox-o", 1, &["sh", "-c", "touch ran; sleep 1000"]);
    spec.env.insert(
        palisade_driver::process::TEST_DIE_BEFORE_RECORD_VARIABLE.to_owned(),
        "1".to_owned(),
    );
    // The shim claims the execution, starts the command behind its barrier, and
    // dies (SIGKILL) before recording it.
    let handle = driver
        .launch(&spec, &fixture.fence_for(&spec))
        .await
        .expect("the launch returns the dead shim's handle");
    assert_eq!(handle.generation, 1);
    let dir = driver.execution_dir("sandbox-o", 1);
    assert_nothing_runs(&fixture).await;
    assert!(
        !driver.work_dir("sandbox-o").join("ran").exists(),
        "the command ran"
    );
    assert!(!dir.join("command.json").exists());
    assert_eq!(
        driver.inspect("sandbox-o", 1).await.expect("inspect"),
        ExecutionStatus::Absent
    );
    driver
        .remove("sandbox-o", &fixture.fence("sandbox-o", 1))
        .await
        .expect("remove");
}

#[tokio::test]
async fn output_logs_are_rotated_at_their_cap() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let cap = palisade_driver::process::LOG_FILE_BYTES_MAX;
    let written: u64 = 2 * cap + 12_345;
    let script = format!("yes palisade | head -c {written}; echo to-stderr >&2");
    let spec = fixture.spec("sandbox-p", 1, &["sh", "-c", &script]);
    driver
        .launch(&spec, &fixture.fence_for(&spec))
        .await
        .expect("launch");
    wait_for_status(&driver, "sandbox-p", 1, ExecutionStatus::Exited { code: 0 }).await;
    let dir = driver.execution_dir("sandbox-p", 1);
    let size = |name: &str| fs::metadata(dir.join(name)).map_or(0, |metadata| metadata.len());
    // Rotated exactly at the cap: one full rotated file, the rest in the current one,
    // the oldest cap's worth dropped.
    assert_eq!(size("stdout.log.1"), cap);
    assert_eq!(size("stdout.log"), written - 2 * cap);
    // `yes` repeats one line; the files hold exactly the stream's last two caps.
    let line = b"palisade\n";
    let stream = |from: u64, to: u64| -> Vec<u8> {
        (from..to)
            .map(|offset| line[(offset % line.len() as u64) as usize])
            .collect()
    };
    assert!(fs::read(dir.join("stdout.log.1")).expect("rotated") == stream(cap, 2 * cap));
    assert!(fs::read(dir.join("stdout.log")).expect("current") == stream(2 * cap, written));
    assert_eq!(
        fs::read_to_string(dir.join("stderr.log")).expect("stderr.log"),
        "to-stderr\n"
    );
    assert!(!dir.join("stderr.log.1").exists());
    driver
        .remove("sandbox-p", &fixture.fence("sandbox-p", 1))
        .await
        .expect("remove");
}

#[tokio::test]
async fn an_execution_recorded_under_another_driver_identity_is_uncertain() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let spec = fixture.spec("sandbox-q", 1, &["sleep", "1000"]);
    driver
        .launch(&spec, &fixture.fence_for(&spec))
        .await
        .expect("launch");
    fixture.wait_for_processes(1).await;
    // As if the directory had been restored from another host: the claim names
    // another identity, so its pid, start time and boot mean nothing here.
    let claim = driver.execution_dir("sandbox-q", 1).join("shim.json");
    let original = fs::read(&claim).expect("claim");
    let mut value: serde_json::Value = serde_json::from_slice(&original).expect("json");
    assert_eq!(value["driver_id"], driver.identity());
    value["driver_id"] = "a-driver-on-another-host".into();
    fs::write(&claim, serde_json::to_vec(&value).expect("json")).expect("write claim");

    let uncertain = |result: Result<(), DriverError>| {
        assert!(
            matches!(result, Err(DriverError::Uncertain { .. })),
            "{result:?}"
        )
    };
    uncertain(driver.inspect("sandbox-q", 1).await.map(|_| ()));
    uncertain(
        driver
            .stop(
                "sandbox-q",
                1,
                Duration::ZERO,
                &fixture.fence("sandbox-q", 1),
            )
            .await,
    );
    uncertain(
        driver
            .remove("sandbox-q", &fixture.fence("sandbox-q", 1))
            .await,
    );
    assert!(driver.list().await.expect("list").is_empty());
    assert_eq!(fixture.processes().len(), 1, "nothing was signalled");

    fs::write(&claim, original).expect("restore the claim");
    driver
        .remove("sandbox-q", &fixture.fence("sandbox-q", 1))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
}

/// `palisade shim launch` returns only once its shim said what it did (here:
/// recorded and started the command), so the driver's launch observes the report
/// at once instead of polling for it.
#[tokio::test]
async fn the_launcher_exits_once_its_shim_reported() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    for generation in 1..=3 {
        let spec = fixture.spec("sandbox-r", generation, &["sleep", "1000"]);
        // An execution directory with its spec, as a launch leaves it just before
        // it starts the launcher.
        interrupted_launch(&driver, &spec);
        let dir = driver.execution_dir(&spec.sandbox_id, spec.generation);
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
            .args(
                palisade_driver::process::ShimArgs::Launch {
                    execution_dir: dir.clone(),
                }
                .to_argv(),
            )
            .env_clear()
            .stdin(Stdio::null())
            .status()
            .expect("launcher");
        assert!(status.success(), "launcher: {status}");
        assert!(
            dir.join("command.json").is_file(),
            "the launcher of generation {generation} exited before its shim recorded the command"
        );
        driver
            .stop(
                "sandbox-r",
                generation,
                Duration::ZERO,
                &fixture.fence_for(&spec),
            )
            .await
            .expect("stop");
    }
    driver
        .remove("sandbox-r", &fixture.fence("sandbox-r", 0))
        .await
        .expect("remove");
    assert!(fixture.processes().is_empty());
}

/// `pid`'s descriptors, as `N -> TARGET` (`socket:[..]`, `pipe:[..]`, a path).
fn descriptors(pid: u32) -> Vec<String> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let target = fs::read_link(&path).ok()?;
            Some(format!(
                "{} -> {}",
                path.file_name()?.to_string_lossy(),
                target.to_string_lossy()
            ))
        })
        .collect()
}

async fn wait_until_dead(pid: u32, what: &str) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "{what} (pid {pid}) still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every launch forks its shim from the driver's launch server (one process,
/// started by the first launch), in a session of its own: killed, the server
/// is replaced by the next launch and its sandboxes go on; no shim keeps its
/// socket or anything the gateway left open; and it ends with the driver that
/// started it.
#[tokio::test]
async fn the_launch_server_is_replaced_when_killed_and_ends_with_its_driver() {
    let fixture = Fixture::new();
    // A descriptor the gateway leaves open across exec (as a job server's or a
    // supervisor's pipe is): the launch server inherits it, its shims must not.
    let mut stray = [0 as libc::c_int; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(stray.as_mut_ptr()) }, 0, "pipe");
    let stray_pipe = fs::read_link(format!("/proc/self/fd/{}", stray[0]))
        .expect("the stray pipe")
        .to_string_lossy()
        .into_owned();
    let driver = fixture.driver();
    assert_eq!(driver.launch_server_pid().await, None, "no launch yet");
    // An idle sandbox (its shim pumps no command output).
    let first = fixture.spec("sandbox-s", 1, &[]);
    let handle = driver
        .launch(&first, &fixture.fence_for(&first))
        .await
        .expect("launch");
    let server = driver
        .launch_server_pid()
        .await
        .expect("a launch server after a launch");
    let shim = shim_pid(&handle);
    let (parent, session) = parent_and_session(shim);
    assert_eq!(
        parent, server as i32,
        "the shim is the launch server's child (no launcher between them)"
    );
    assert_eq!(session, shim as i32, "the shim leads a session of its own");
    // (A launch's own pipes cannot be left to the shim: the driver reads them to
    // their end, so a launch whose shim kept one would never finish.)
    let handed_down: Vec<String> = descriptors(shim)
        .into_iter()
        .filter(|fd| fd.contains(" -> socket:") || fd.ends_with(&format!(" -> {stray_pipe}")))
        .collect();
    assert!(
        handed_down.is_empty(),
        "the shim holds the launch server's socket or the gateway's descriptors: \
         {handed_down:?}"
    );

    signal(server, libc::SIGKILL);
    wait_until_dead(server, "the killed launch server").await;
    let second = fixture.spec("sandbox-s", 2, &[]);
    let next = driver
        .launch(&second, &fixture.fence_for(&second))
        .await
        .expect("a launch after the server was killed starts another");
    let replacement = driver
        .launch_server_pid()
        .await
        .expect("a new launch server");
    assert_ne!(replacement, server);
    fixture.wait_for_processes(2).await;
    assert_eq!(
        driver.inspect("sandbox-s", 1).await.expect("inspect"),
        running(&handle),
        "the first sandbox outlived its launch server"
    );
    assert_eq!(
        driver.inspect("sandbox-s", 2).await.expect("inspect"),
        running(&next)
    );

    drop(driver);
    wait_until_dead(replacement, "the launch server of a dropped driver").await;
    // SAFETY: closes the two descriptors this test opened.
    unsafe {
        libc::close(stray[0]);
        libc::close(stray[1]);
    }
    let driver = fixture.driver();
    driver
        .remove("sandbox-s", &fixture.fence("sandbox-s", 0))
        .await
        .expect("remove");
    assert_nothing_runs(&fixture).await;
}

/// A launch whose shim started its command but never said so (its status
/// pipe closed without the byte, as when a launcher was killed at that
/// moment) is decided by what the execution directory holds: the shim's
/// claim and command, so the launch answers the running shim's handle, never
/// a rejection; the repeated launch finds the same shim and nothing runs
/// twice.
#[tokio::test]
async fn a_launch_whose_status_is_lost_after_its_shim_started_is_decided_by_observation() {
    if !cfg!(debug_assertions) {
        eprintln!("the shim's test hook exists in debug builds only; skipped");
        return;
    }
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let mut spec = fixture.spec("sandbox-t", 1, &["sleep", "1000"]);
    spec.env.insert(
        palisade_driver::process::TEST_LOSE_LAUNCH_STATUS_VARIABLE.to_owned(),
        "1".to_owned(),
    );
    let fence = fixture.fence_for(&spec);
    let first = driver
        .launch(&spec, &fence)
        .await
        .expect("the shim's claim and command decide a launch that never heard back");
    let handle = driver
        .launch(&spec, &fence)
        .await
        .expect("the repeated launch finds the shim");
    assert_eq!(handle, first, "one shim, found twice");
    fixture.wait_for_processes(1).await;
    assert_eq!(
        driver.inspect("sandbox-t", 1).await.expect("inspect"),
        running(&handle)
    );
    driver
        .remove("sandbox-t", &fixture.fence("sandbox-t", 0))
        .await
        .expect("remove");
    assert_nothing_runs(&fixture).await;
}
