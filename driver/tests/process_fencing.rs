//! The process driver's fences, tombstones and identity, without a real shim: every
//! test here either never gets as far as starting a shim (it is fenced first), or
//! uses a stand-in shim program (a missing file, or a script that dies). The tests
//! with real shims and commands live in `cli/tests/process_driver.rs`, where the
//! `palisade` binary exists.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use palisade_driver::process::{ProcessDriver, ProcessDriverTimeouts};
use palisade_driver::{ComputeDriver, DriverError, ExecutionStatus, Fence, LaunchSpec};

const CLUSTER: &str = "cluster-a";
const SANDBOX: &str = "sandbox-1";

struct Fixture {
    root: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            root: tempfile::tempdir().expect("temporary directory"),
        }
    }

    fn driver_dir(&self) -> PathBuf {
        self.root.path().join("driver")
    }

    /// A driver whose shim program does not exist: any launch that gets past its
    /// fence and tombstone checks fails to start the launch server (Rejected).
    fn driver(&self) -> ProcessDriver {
        self.driver_with_shim(PathBuf::from("/nonexistent/palisade-test-shim"))
    }

    fn driver_with_shim(&self, shim_program: PathBuf) -> ProcessDriver {
        ProcessDriver::new(self.driver_dir(), shim_program)
            .expect("driver directory")
            .with_timeouts(ProcessDriverTimeouts {
                shim_start_timeout: Duration::from_secs(5),
                lock_timeout: Duration::from_millis(300),
                ..ProcessDriverTimeouts::default()
            })
    }

    /// A script used as the shim program.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.root.path().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }
}

fn fence(term: u64, generation: u64, operation_index: u64) -> Fence {
    Fence {
        cluster_id: CLUSTER.to_owned(),
        term,
        sandbox_id: SANDBOX.to_owned(),
        generation,
        operation_index,
    }
}

fn spec(generation: u64) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: SANDBOX.to_owned(),
        generation,
        command: vec!["sleep".to_owned(), "1000".to_owned()],
        env: Default::default(),
        ..Default::default()
    }
}

/// What a gateway leaves behind when it dies after claiming a generation and before
/// starting its shim.
fn interrupted_launch(driver: &ProcessDriver, spec: &LaunchSpec) {
    let dir = driver.execution_dir(&spec.sandbox_id, spec.generation);
    fs::create_dir_all(dir.join("work")).expect("mkdir");
    fs::write(
        dir.join("spec.json"),
        serde_json::to_vec(spec).expect("json"),
    )
    .expect("spec");
}

fn generation_dirs(sandbox_dir: &Path) -> Vec<String> {
    match fs::read_dir(sandbox_dir) {
        Ok(entries) => entries
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.parse::<u64>().is_ok() || name.starts_with(".staging-"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn a_lower_fence_is_refused_an_equal_one_admitted_another_cluster_refused() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    // Stops of an execution that does not exist still admit and record the fence.
    driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(5, 1, 40))
        .await
        .expect("first fence");
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(5, 1, 40))
    );
    // The same operation again (a retry by the same leader) is admitted.
    driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(5, 1, 40))
        .await
        .expect("equal fence");
    for (late, why) in [
        (fence(4, 1, 99), "a lower term, whatever its operation"),
        (fence(5, 1, 39), "an earlier operation of the same term"),
        (
            Fence {
                cluster_id: "cluster-b".to_owned(),
                ..fence(9, 1, 90)
            },
            "another cluster",
        ),
    ] {
        let error = driver
            .stop(SANDBOX, 1, Duration::ZERO, &late)
            .await
            .expect_err(why);
        assert!(error.is_fenced(), "{why}: {error}");
        assert!(!error.is_definite_no_effect(), "{why}: nothing to record");
    }
    // A late launch of a deposed leader is refused before it claims anything.
    let error = driver
        .launch(&spec(1), &fence(4, 1, 38))
        .await
        .expect_err("fenced");
    assert!(error.is_fenced(), "{error}");
    assert!(generation_dirs(&driver.sandbox_dir(SANDBOX)).is_empty());
    let error = driver
        .remove(SANDBOX, &fence(4, 1, 41))
        .await
        .expect_err("fenced");
    assert!(error.is_fenced(), "{error}");
    assert_eq!(driver.tombstone_of(SANDBOX).await.expect("read"), None);

    // A higher fence is admitted and recorded, by any driver on the directory.
    let other_gateway = fixture.driver();
    other_gateway
        .stop(SANDBOX, 1, Duration::ZERO, &fence(6, 1, 50))
        .await
        .expect("higher fence");
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(6, 1, 50))
    );
    // Fences are per sandbox.
    let elsewhere = Fence {
        sandbox_id: "sandbox-2".to_owned(),
        ..fence(1, 1, 1)
    };
    driver
        .stop("sandbox-2", 1, Duration::ZERO, &elsewhere)
        .await
        .expect("another sandbox");
}

#[tokio::test]
async fn a_fence_naming_another_target_is_a_rejected_caller_bug() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let other_sandbox = Fence {
        sandbox_id: "sandbox-2".to_owned(),
        ..fence(1, 1, 1)
    };
    for result in [
        driver
            .stop(SANDBOX, 1, Duration::ZERO, &other_sandbox)
            .await,
        driver
            .stop(SANDBOX, 2, Duration::ZERO, &fence(1, 1, 1))
            .await,
        driver.remove(SANDBOX, &other_sandbox).await,
        driver.launch(&spec(2), &fence(1, 1, 1)).await.map(|_| ()),
    ] {
        let error = result.expect_err("mismatched fence");
        assert!(error.is_definite_no_effect(), "{error}");
    }
    assert_eq!(driver.fence_of(SANDBOX).await.expect("fence"), None);
}

#[tokio::test]
async fn remove_leaves_a_tombstone_that_refuses_every_later_launch() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .remove(SANDBOX, &fence(3, 1, 20))
        .await
        .expect("remove of an unknown sandbox");
    let tombstone = driver
        .tombstone_of(SANDBOX)
        .await
        .expect("read")
        .expect("tombstone");
    assert_eq!(tombstone.fence, fence(3, 1, 20));
    // Removing again (a retry) keeps the first tombstone.
    driver
        .remove(SANDBOX, &fence(3, 1, 20))
        .await
        .expect("again");
    assert_eq!(
        driver.tombstone_of(SANDBOX).await.expect("read"),
        Some(tombstone)
    );

    // Even a higher fence cannot launch a removed sandbox, and the refused launch
    // leaves nothing behind.
    let error = driver
        .launch(&spec(2), &fence(7, 2, 70))
        .await
        .expect_err("tombstoned");
    assert!(error.is_fenced(), "{error}");
    assert!(generation_dirs(&driver.sandbox_dir(SANDBOX)).is_empty());
    assert!(driver.list().await.expect("list").is_empty());
    assert_eq!(
        driver.inspect(SANDBOX, 2).await.expect("inspect"),
        ExecutionStatus::Absent
    );
}

#[tokio::test]
async fn a_claimed_generation_is_deleted_by_remove_and_not_launched_after() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    // Launch claimed first (and its gateway died before starting a shim) ...
    interrupted_launch(&driver, &spec(1));
    assert_eq!(
        driver.list().await.expect("list"),
        vec![(SANDBOX.to_owned(), 1, ExecutionStatus::Absent)]
    );
    // ... then remove: the generation is listed, marked stopping, and deleted.
    driver
        .remove(SANDBOX, &fence(2, 1, 30))
        .await
        .expect("remove");
    assert!(generation_dirs(&driver.sandbox_dir(SANDBOX)).is_empty());
    // The tombstone and the fence stay, as records beside the lock.
    assert_eq!(
        driver
            .tombstone_of(SANDBOX)
            .await
            .expect("tombstone")
            .map(|tombstone| tombstone.fence),
        Some(fence(2, 1, 30))
    );
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(2, 1, 30))
    );
    // The launch, resumed by a leader of a later term, is refused.
    let error = driver
        .launch(&spec(1), &fence(3, 1, 10))
        .await
        .expect_err("tombstoned");
    assert!(error.is_fenced(), "{error}");
    assert!(generation_dirs(&driver.sandbox_dir(SANDBOX)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_racing_a_remove_leaves_nothing_whichever_comes_first() {
    let fixture = Fixture::new();
    let (launching, removing) = (fixture.driver(), fixture.driver());
    for round in 0..40_u64 {
        let sandbox_id = format!("race-{round}");
        let spec = LaunchSpec {
            sandbox_id: sandbox_id.clone(),
            ..spec(1)
        };
        let launch_fence = Fence {
            sandbox_id: sandbox_id.clone(),
            ..fence(1, 1, 10)
        };
        let remove_fence = Fence {
            sandbox_id: sandbox_id.clone(),
            ..fence(1, 1, 11)
        };
        let (launched, removed) = tokio::join!(
            launching.launch(&spec, &launch_fence),
            removing.remove(&sandbox_id, &remove_fence)
        );
        removed.expect("remove");
        // Launch first: it claimed, then failed to start the (missing) shim, and the
        // removal deleted the claim. Remove first: the launch saw the tombstone, or
        // the lower fence.
        match launched {
            Err(DriverError::Fenced { .. }) | Err(DriverError::Rejected { .. }) => {}
            Err(DriverError::Uncertain { message }) => {
                assert!(message.contains("vanished"), "round {round}: {message}")
            }
            Ok(handle) => panic!("round {round}: launched {handle} with no shim program"),
            Err(error @ DriverError::Unsupported { .. }) => panic!("round {round}: {error}"),
        }
        assert!(
            generation_dirs(&removing.sandbox_dir(&sandbox_id)).is_empty(),
            "round {round}: a generation survived its removal"
        );
        // A repeated launch now answers for sure.
        let again = launching
            .launch(&spec, &launch_fence)
            .await
            .expect_err("removed");
        assert!(again.is_fenced(), "round {round}: {again}");
    }
    assert!(removing.list().await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_identity_is_created_once_and_shared() {
    let fixture = Fixture::new();
    let dir = fixture.driver_dir();
    let creators: Vec<_> = (0..8)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                ProcessDriver::new(dir, PathBuf::from("/nonexistent"))
                    .expect("driver")
                    .identity()
                    .to_owned()
            })
        })
        .collect();
    let identities: Vec<String> = creators
        .into_iter()
        .map(|creator| creator.join().expect("thread"))
        .collect();
    assert!(!identities[0].is_empty());
    assert!(identities.iter().all(|identity| *identity == identities[0]));
    assert_eq!(fixture.driver().identity(), identities[0], "and it stays");
    let elsewhere = tempfile::tempdir().expect("temporary directory");
    let other_host =
        ProcessDriver::new(elsewhere.path().to_path_buf(), PathBuf::from("x")).expect("driver");
    assert_ne!(other_host.identity(), identities[0]);
}

#[tokio::test]
async fn an_execution_recorded_by_another_driver_identity_is_uncertain_never_absent() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    interrupted_launch(&driver, &spec(1));
    // A claim by a shim of another driver directory (another host): its pid and boot
    // mean nothing here, so this driver must not conclude the execution is gone.
    let claim = serde_json::json!({
        "generation": 1,
        "pid": 1,
        "start_time": 1,
        "boot_id": "another-host-boot",
        "driver_id": "another-driver",
    });
    fs::write(
        driver.execution_dir(SANDBOX, 1).join("shim.json"),
        serde_json::to_vec(&claim).expect("json"),
    )
    .expect("claim");

    let uncertain = |result: Result<(), DriverError>, call: &str| match result {
        Err(DriverError::Uncertain { message }) => {
            assert!(message.contains("another-driver"), "{call}: {message}")
        }
        other => panic!("{call}: expected Uncertain, got {other:?}"),
    };
    uncertain(driver.inspect(SANDBOX, 1).await.map(|_| ()), "inspect");
    uncertain(
        driver.launch(&spec(1), &fence(1, 1, 4)).await.map(|_| ()),
        "launch",
    );
    uncertain(
        driver
            .stop(SANDBOX, 1, Duration::ZERO, &fence(1, 1, 5))
            .await,
        "stop",
    );
    uncertain(driver.remove(SANDBOX, &fence(1, 1, 6)).await, "remove");
    assert!(
        driver.list().await.expect("list").is_empty(),
        "not listed as anything"
    );
    assert!(driver.execution_dir(SANDBOX, 1).join("spec.json").exists());
}

#[tokio::test]
async fn tombstones_are_collected_only_after_their_retention() {
    let fixture = Fixture::new();
    let keeping = fixture.driver();
    keeping
        .remove(SANDBOX, &fence(1, 1, 1))
        .await
        .expect("remove");
    // A sandbox that was never removed is never collected.
    let live = Fence {
        sandbox_id: "sandbox-live".to_owned(),
        ..fence(1, 1, 2)
    };
    keeping
        .stop("sandbox-live", 1, Duration::ZERO, &live)
        .await
        .expect("stop");
    assert_eq!(keeping.collect_tombstones().await.expect("collect"), 0);
    assert!(keeping.tombstone_of(SANDBOX).await.expect("read").is_some());

    let collecting = fixture.driver().with_timeouts(ProcessDriverTimeouts {
        tombstone_retention: Duration::ZERO,
        ..ProcessDriverTimeouts::default()
    });
    assert_eq!(collecting.collect_tombstones().await.expect("collect"), 1);
    assert!(!keeping.sandbox_dir(SANDBOX).exists());
    assert!(keeping.sandbox_dir("sandbox-live").exists());
    assert_eq!(keeping.fence_of(SANDBOX).await.expect("read"), None);
}

#[tokio::test]
async fn a_sandbox_lock_held_too_long_makes_calls_uncertain() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(1, 1, 1))
        .await
        .expect("creates the sandbox directory");
    // Another process (here: this test) holds the sandbox's lock.
    let held = fs::File::open(driver.sandbox_dir(SANDBOX).join("sandbox.lock")).expect("lock");
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let started = Instant::now();
    let error = driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(2, 1, 2))
        .await
        .expect_err("lock held");
    assert!(matches!(error, DriverError::Uncertain { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(2, 1, 2))
        .await
        .expect("lock free again");
}

/// A launch server that dies or fails before it serves (here: scripts in its
/// place) was sent nothing, so the launch is rejected, with its reason. (A
/// launch that never hears back is decided by observation:
/// `cli/tests/process_driver.rs`, which runs the real binary.)
#[tokio::test]
async fn a_launch_server_that_never_served_rejects_the_launch_with_its_reason() {
    let fixture = Fixture::new();
    let killed = fixture.driver_with_shim(fixture.script("killed-shim", "kill -KILL $$"));
    let error = killed
        .launch(&spec(1), &fence(1, 1, 1))
        .await
        .expect_err("killed");
    assert!(error.is_definite_no_effect(), "{error}");
    assert!(error.to_string().contains("signal: 9"), "{error}");
    let failing =
        fixture.driver_with_shim(fixture.script("failing-shim", "echo broken >&2; exit 1"));
    let error = failing
        .launch(&spec(2), &fence(1, 2, 2))
        .await
        .expect_err("failing");
    assert!(error.is_definite_no_effect(), "{error}");
    assert!(error.to_string().contains("broken"), "{error}");
}

/// Hex of a cluster id, as fence and tombstone record names hold it.
fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

#[tokio::test]
async fn records_left_by_a_crash_or_an_older_release_still_fence() {
    let fixture = Fixture::new();
    let driver = fixture.driver();
    let sandbox_dir = driver.sandbox_dir(SANDBOX);
    fs::create_dir_all(&sandbox_dir).expect("sandbox directory");
    // A crash between recording a fence and deleting the one it superseded leaves
    // both; the first fencing release wrote fence.json, here the highest of all.
    fs::write(
        sandbox_dir.join(format!("fence.4.10.1.{}", hex(CLUSTER))),
        b"",
    )
    .expect("lower record");
    fs::write(
        sandbox_dir.join(format!("fence.5.11.1.{}", hex(CLUSTER))),
        b"",
    )
    .expect("higher record");
    fs::write(
        sandbox_dir.join("fence.json"),
        serde_json::to_vec(&fence(6, 1, 3)).expect("json"),
    )
    .expect("legacy record");
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(6, 1, 3))
    );
    let error = driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(5, 1, 99))
        .await
        .expect_err("lower than the legacy record");
    assert!(error.is_fenced(), "{error}");

    // A higher fence supersedes (and deletes) every one of them.
    driver
        .stop(SANDBOX, 1, Duration::ZERO, &fence(7, 1, 1))
        .await
        .expect("higher fence");
    let mut fences: Vec<String> = fs::read_dir(&sandbox_dir)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with("fence"))
        .collect();
    fences.sort();
    assert_eq!(fences, [format!("fence.7.1.1.{}", hex(CLUSTER))]);

    // A tombstone of the older release still refuses launches.
    fs::write(
        sandbox_dir.join("tombstone.json"),
        serde_json::to_vec(&palisade_driver::process::TombstoneRecord {
            fence: fence(7, 1, 1),
            removed_at_unix_ms: 1,
        })
        .expect("json"),
    )
    .expect("legacy tombstone");
    let error = driver
        .launch(&spec(2), &fence(8, 2, 1))
        .await
        .expect_err("tombstoned");
    assert!(error.is_fenced(), "{error}");
    assert!(generation_dirs(&sandbox_dir).is_empty());

    // A record name that does not parse is not silently skipped.
    fs::write(sandbox_dir.join("fence.garbage"), b"").expect("malformed record");
    let error = driver.fence_of(SANDBOX).await.expect_err("malformed");
    assert!(matches!(error, DriverError::Uncertain { .. }), "{error}");
}
