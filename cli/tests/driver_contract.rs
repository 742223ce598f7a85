//! ONE contract suite for every real compute driver: each test below runs
//! against the process driver (real shims from the `palisade` binary) and the
//! Docker driver (a real Docker Engine). Launch is idempotent per generation,
//! stop is SIGTERM then SIGKILL after the grace, exit codes read 0 / 1 / 127 /
//! 128 + signal, inspect after stop keeps the exit, remove confirms absence,
//! list shows what runs, a lower fence and a tombstone are refused, and an
//! unavailable authority (the Docker Engine down or hanging; the process
//! driver's sandbox lock held by a stuck gateway) makes every call
//! `Uncertain`, never `Absent`, until it is back, when work resumes.
//!
//! The Docker variants need an engine: `./scripts/test` starts a private one
//! (`scripts/ensure-docker`) and exports PALISADE_TEST_DOCKER_HOST and
//! PALISADE_TEST_DOCKER_IMAGE. Without them a Docker variant FAILS when
//! PALISADE_REQUIRE_DOCKER=1 (as under ./scripts/test) and otherwise says on
//! stderr that it did not run.
#![cfg(target_os = "linux")]

mod support;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_driver::docker::{DockerConfig, DockerDriver, DockerTimeouts, LABEL_DRIVER_ID};
use palisade_driver::process::{ProcessDriver, ProcessDriverTimeouts};
use palisade_driver::{ComputeDriver, DriverError, ExecutionStatus, Fence, LaunchSpec};
use support::docker::{TestEngine, UnixProxy};

const CLUSTER_ID: &str = "cluster-contract";
/// How long a status may take to settle on a loaded machine.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Process,
    Docker,
}

/// One driver under test, with its own fence (and execution) directory.
struct Harness {
    kind: Kind,
    root: tempfile::TempDir,
    driver: Arc<dyn ComputeDriver>,
    engine: Option<TestEngine>,
    operations: AtomicU64,
}

impl Harness {
    /// The harness of `kind`, or `None` when Docker is not available and not
    /// required (then the test says so on stderr).
    fn new(kind: Kind) -> Option<Harness> {
        let root = tempfile::tempdir().expect("temporary directory");
        let (driver, engine): (Arc<dyn ComputeDriver>, _) = match kind {
            Kind::Process => (
                Arc::new(process_driver(
                    &root.path().join("driver"),
                    Duration::from_secs(10),
                )),
                None,
            ),
            Kind::Docker => {
                let engine = TestEngine::from_env()?;
                let driver = docker_driver(
                    &engine,
                    &engine.host,
                    &root.path().join("driver"),
                    Duration::from_secs(60),
                );
                (Arc::new(driver), Some(engine))
            }
        };
        Some(Harness {
            kind,
            root,
            driver,
            engine,
            operations: AtomicU64::new(1),
        })
    }

    fn driver_dir(&self) -> PathBuf {
        self.root.path().join("driver")
    }

    /// A fresh sandbox id (tests share one engine).
    fn sandbox(&self, name: &str) -> String {
        format!("{name}-{}", uuid::Uuid::new_v4().simple())
    }

    /// The fence of a leader of term 1 for its next operation.
    fn fence(&self, sandbox_id: &str, generation: u64) -> Fence {
        Fence {
            cluster_id: CLUSTER_ID.to_owned(),
            term: 1,
            sandbox_id: sandbox_id.to_owned(),
            generation,
            operation_index: self.operations.fetch_add(1, Ordering::SeqCst),
        }
    }

    fn spec(&self, sandbox_id: &str, generation: u64, command: &[&str]) -> LaunchSpec {
        LaunchSpec {
            sandbox_id: sandbox_id.to_owned(),
            generation,
            command: command.iter().map(|word| (*word).to_owned()).collect(),
            env: BTreeMap::from([("PALISADE_CONTRACT".to_owned(), "1".to_owned())]),
            ..Default::default()
        }
    }

    async fn launch(
        &self,
        spec: &LaunchSpec,
    ) -> Result<palisade_driver::ExecutionHandle, DriverError> {
        self.driver
            .launch(spec, &self.fence(&spec.sandbox_id, spec.generation))
            .await
    }

    /// Waits until the execution reads as exited; returns its code.
    async fn exit_code(&self, sandbox_id: &str, generation: u64) -> i32 {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.driver.inspect(sandbox_id, generation).await {
                Ok(ExecutionStatus::Exited { code }) => return code,
                Ok(ExecutionStatus::Running { .. }) => {}
                other => panic!("{:?}: {sandbox_id}/{generation} reads {other:?}", self.kind),
            }
            assert!(
                Instant::now() < deadline,
                "{sandbox_id}/{generation} never exited"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many executions of `sandbox_id` the authority itself holds (containers
    /// on the engine, generation directories on disk), however the driver reports.
    fn executions_of(&self, sandbox_id: &str) -> usize {
        match &self.engine {
            Some(engine) => engine
                .containers(&format!("dev.palisade.sandbox-id={sandbox_id}"))
                .len(),
            None => std::fs::read_dir(self.driver_dir().join(sandbox_id))
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|entry| entry.file_name().to_string_lossy().parse::<u64>().is_ok())
                        .count()
                })
                .unwrap_or(0),
        }
    }

    async fn remove(&self, sandbox_id: &str) {
        self.driver
            .remove(sandbox_id, &self.fence(sandbox_id, 0))
            .await
            .expect("remove");
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // Whatever a failed test left on the engine goes with it.
        if let Some(engine) = &self.engine {
            engine.remove_labelled(&format!("{LABEL_DRIVER_ID}={}", self.driver.identity()));
        }
    }
}

fn process_driver(dir: &std::path::Path, lock_timeout: Duration) -> ProcessDriver {
    ProcessDriver::new(
        dir.to_path_buf(),
        PathBuf::from(env!("CARGO_BIN_EXE_palisade")),
    )
    .expect("driver directory")
    .with_timeouts(ProcessDriverTimeouts {
        lock_timeout,
        ..ProcessDriverTimeouts::default()
    })
}

fn docker_driver(
    engine: &TestEngine,
    host: &str,
    dir: &std::path::Path,
    call_timeout: Duration,
) -> DockerDriver {
    DockerDriver::new(DockerConfig {
        host: Some(host.to_owned()),
        default_image: engine.image.clone(),
        network: "none".to_owned(),
        driver_dir: dir.to_path_buf(),
        timeouts: DockerTimeouts {
            call_timeout,
            lock_timeout: Duration::from_secs(2),
            ..DockerTimeouts::default()
        },
    })
    .expect("docker driver")
}

/// Runs `$body` (an async fn taking the harness) once per driver kind.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod process {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let harness = super::Harness::new(super::Kind::Process).expect("process driver");
                    super::$name(&harness).await;
                }
            )*
        }
        mod docker {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(harness) = super::Harness::new(super::Kind::Docker) else { return };
                    super::$name(&harness).await;
                }
            )*
        }
    };
}

contract!(
    launch_is_idempotent_per_generation,
    stop_is_sigterm_then_sigkill_and_inspect_keeps_the_exit,
    exit_codes_read_0_1_127_and_128_plus_signal,
    remove_confirms_absence_and_list_shows_executions,
    a_lower_fence_is_refused_with_no_effect,
    a_tombstone_refuses_later_launches,
    an_unavailable_authority_is_uncertain_never_absent_and_work_resumes,
);

async fn launch_is_idempotent_per_generation(harness: &Harness) {
    let sandbox = harness.sandbox("idem");
    let spec = harness.spec(&sandbox, 1, &["sleep", "1000"]);
    let fence = harness.fence(&sandbox, 1);
    // Two launches at once (two gateways, or a retry racing the first) and a
    // third after: one execution, one handle.
    let (first, second) = tokio::join!(
        harness.driver.launch(&spec, &fence),
        harness.driver.launch(&spec, &fence)
    );
    let first = first.expect("first launch");
    assert_eq!(second.expect("second launch"), first);
    assert_eq!(
        harness.driver.launch(&spec, &fence).await.expect("again"),
        first
    );
    assert_eq!(
        harness.driver.inspect(&sandbox, 1).await.expect("inspect"),
        ExecutionStatus::Running {
            handle: first.clone()
        }
    );
    assert_eq!(harness.executions_of(&sandbox), 1);
    // A generation that ended is returned as it is, not run again.
    let ended = harness.spec(&sandbox, 2, &["sh", "-c", "exit 3"]);
    let handle = harness.launch(&ended).await.expect("launch 2");
    assert_eq!(harness.exit_code(&sandbox, 2).await, 3);
    assert_eq!(
        harness.launch(&ended).await.expect("launch 2 again"),
        handle
    );
    assert_eq!(harness.exit_code(&sandbox, 2).await, 3);
    assert_eq!(harness.executions_of(&sandbox), 2);
    harness.remove(&sandbox).await;
}

async fn stop_is_sigterm_then_sigkill_and_inspect_keeps_the_exit(harness: &Harness) {
    let sandbox = harness.sandbox("stop");
    // SIGTERM ends `sleep`: 128 + 15.
    harness
        .launch(&harness.spec(&sandbox, 1, &["sleep", "1000"]))
        .await
        .expect("launch");
    harness
        .driver
        .stop(
            &sandbox,
            1,
            Duration::from_secs(10),
            &harness.fence(&sandbox, 1),
        )
        .await
        .expect("stop");
    assert_eq!(
        harness.driver.inspect(&sandbox, 1).await.expect("inspect"),
        ExecutionStatus::Exited { code: 143 }
    );
    // A command that ignores SIGTERM is killed after the grace: 128 + 9.
    harness
        .launch(&harness.spec(
            &sandbox,
            2,
            &["sh", "-c", "trap '' TERM; while :; do sleep 1; done"],
        ))
        .await
        .expect("launch 2");
    tokio::time::sleep(Duration::from_millis(500)).await; // the trap is set
    let started = Instant::now();
    harness
        .driver
        .stop(
            &sandbox,
            2,
            Duration::from_secs(1),
            &harness.fence(&sandbox, 2),
        )
        .await
        .expect("stop 2");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the grace was given"
    );
    assert_eq!(
        harness
            .driver
            .inspect(&sandbox, 2)
            .await
            .expect("inspect 2"),
        ExecutionStatus::Exited { code: 137 }
    );
    // Stopping again, or stopping what never ran, succeeds and changes nothing.
    harness
        .driver
        .stop(
            &sandbox,
            2,
            Duration::from_secs(1),
            &harness.fence(&sandbox, 2),
        )
        .await
        .expect("stop 2 again");
    harness
        .driver
        .stop(
            &sandbox,
            9,
            Duration::from_secs(1),
            &harness.fence(&sandbox, 9),
        )
        .await
        .expect("stop of nothing");
    assert_eq!(
        harness
            .driver
            .inspect(&sandbox, 1)
            .await
            .expect("inspect 1"),
        ExecutionStatus::Exited { code: 143 }
    );
    harness.remove(&sandbox).await;
}

async fn exit_codes_read_0_1_127_and_128_plus_signal(harness: &Harness) {
    let sandbox = harness.sandbox("codes");
    let cases: [(&[&str], i32); 4] = [
        (&["true"], 0),
        (&["false"], 1),
        (&["palisade-no-such-command"], 127),
        (&["sh", "-c", "kill -USR1 $$; sleep 5"], 128 + 10),
    ];
    for (generation, (command, code)) in (1..).zip(cases) {
        let spec = harness.spec(&sandbox, generation, command);
        match harness.launch(&spec).await {
            Ok(_) => {}
            // A program that is not there may be refused at launch (the process
            // driver knows before it runs anything); it still reads as 127.
            Err(DriverError::Rejected { .. }) if code == 127 => {}
            Err(error) => panic!("{command:?}: {error}"),
        }
        assert_eq!(
            harness.exit_code(&sandbox, generation).await,
            code,
            "{:?}: {command:?}",
            harness.kind
        );
    }
    harness.remove(&sandbox).await;
}

async fn remove_confirms_absence_and_list_shows_executions(harness: &Harness) {
    let (a, b) = (harness.sandbox("list-a"), harness.sandbox("list-b"));
    let running = harness
        .launch(&harness.spec(&a, 1, &["sleep", "1000"]))
        .await
        .expect("launch a");
    harness
        .launch(&harness.spec(&b, 4, &["sh", "-c", "exit 5"]))
        .await
        .expect("launch b");
    assert_eq!(harness.exit_code(&b, 4).await, 5);
    let listed = harness.driver.list().await.expect("list");
    let mut expected = vec![
        (a.clone(), 1, ExecutionStatus::Running { handle: running }),
        (b.clone(), 4, ExecutionStatus::Exited { code: 5 }),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(listed, expected, "{:?}", harness.kind);

    // Remove stops what runs and confirms that nothing is left.
    harness.remove(&a).await;
    assert_eq!(harness.executions_of(&a), 0);
    assert_eq!(
        harness.driver.inspect(&a, 1).await.expect("inspect"),
        ExecutionStatus::Absent
    );
    // Removing again, or removing a sandbox never seen, succeeds.
    harness.remove(&a).await;
    harness.remove(&harness.sandbox("never")).await;
    let listed = harness.driver.list().await.expect("list");
    assert_eq!(
        listed,
        vec![(b.clone(), 4, ExecutionStatus::Exited { code: 5 })]
    );
    harness.remove(&b).await;
    assert_eq!(harness.driver.list().await.expect("list"), Vec::new());
}

async fn a_lower_fence_is_refused_with_no_effect(harness: &Harness) {
    let sandbox = harness.sandbox("fence");
    let fence = |term, generation, operation_index| Fence {
        cluster_id: CLUSTER_ID.to_owned(),
        term,
        sandbox_id: sandbox.clone(),
        generation,
        operation_index,
    };
    let spec = harness.spec(&sandbox, 1, &["sleep", "1000"]);
    harness
        .driver
        .launch(&spec, &fence(5, 1, 50))
        .await
        .expect("launch of term 5");
    // A deposed leader (term 4) may neither stop it nor launch the next generation.
    let error = harness
        .driver
        .stop(&sandbox, 1, Duration::ZERO, &fence(4, 1, 99))
        .await
        .expect_err("a lower term");
    assert!(error.is_fenced(), "{error}");
    let error = harness
        .driver
        .launch(
            &harness.spec(&sandbox, 2, &["sleep", "1000"]),
            &fence(5, 2, 49),
        )
        .await
        .expect_err("an earlier operation");
    assert!(error.is_fenced(), "{error}");
    let error = harness
        .driver
        .stop(
            &sandbox,
            1,
            Duration::ZERO,
            &Fence {
                cluster_id: "another-cluster".to_owned(),
                ..fence(9, 1, 90)
            },
        )
        .await
        .expect_err("another cluster");
    assert!(error.is_fenced(), "{error}");
    // Nothing happened: generation 1 still runs, generation 2 does not exist.
    assert!(matches!(
        harness.driver.inspect(&sandbox, 1).await.expect("inspect"),
        ExecutionStatus::Running { .. }
    ));
    assert_eq!(
        harness
            .driver
            .inspect(&sandbox, 2)
            .await
            .expect("inspect 2"),
        ExecutionStatus::Absent
    );
    assert_eq!(harness.executions_of(&sandbox), 1);
    // The current leader's (equal or higher) fence is admitted.
    harness
        .driver
        .stop(&sandbox, 1, Duration::ZERO, &fence(5, 1, 50))
        .await
        .expect("an equal fence");
    harness
        .driver
        .remove(&sandbox, &fence(6, 1, 60))
        .await
        .expect("remove");
}

async fn a_tombstone_refuses_later_launches(harness: &Harness) {
    let sandbox = harness.sandbox("tomb");
    harness
        .launch(&harness.spec(&sandbox, 1, &["sleep", "1000"]))
        .await
        .expect("launch");
    harness.remove(&sandbox).await;
    // A late launch, even with a higher fence, of the removed generation or a new one.
    for generation in [1, 2] {
        let spec = harness.spec(&sandbox, generation, &["sleep", "1000"]);
        let late = Fence {
            term: 7,
            ..harness.fence(&sandbox, generation)
        };
        let error = harness
            .driver
            .launch(&spec, &late)
            .await
            .expect_err("the sandbox was removed");
        assert!(error.is_fenced(), "{error}");
    }
    assert_eq!(harness.executions_of(&sandbox), 0, "nothing was created");
    assert_eq!(
        harness.driver.inspect(&sandbox, 2).await.expect("inspect"),
        ExecutionStatus::Absent
    );
}

async fn an_unavailable_authority_is_uncertain_never_absent_and_work_resumes(harness: &Harness) {
    let sandbox = harness.sandbox("down");
    let handle = harness
        .launch(&harness.spec(&sandbox, 1, &["sleep", "1000"]))
        .await
        .expect("launch");
    match harness.kind {
        Kind::Process => {
            // A gateway stuck while holding the sandbox's lock: every fenced call of
            // another gateway is uncertain, never refused or done half.
            let stuck =
                std::fs::File::open(harness.driver_dir().join(&sandbox).join("sandbox.lock"))
                    .expect("the lock file");
            // SAFETY: flock on a descriptor we own.
            assert_eq!(unsafe { libc::flock(stuck.as_raw_fd(), libc::LOCK_EX) }, 0);
            let other = process_driver(&harness.driver_dir(), Duration::from_millis(300));
            let uncertain = |result: Result<(), DriverError>, what: &str| {
                assert!(
                    matches!(result, Err(DriverError::Uncertain { .. })),
                    "{what}: {result:?}"
                );
            };
            uncertain(
                other
                    .launch(
                        &harness.spec(&sandbox, 2, &["sleep", "1"]),
                        &harness.fence(&sandbox, 2),
                    )
                    .await
                    .map(drop),
                "launch",
            );
            uncertain(
                other
                    .stop(&sandbox, 1, Duration::ZERO, &harness.fence(&sandbox, 1))
                    .await,
                "stop",
            );
            uncertain(
                other.remove(&sandbox, &harness.fence(&sandbox, 1)).await,
                "remove",
            );
            drop(stuck);
            // Back: the same driver's calls go through.
            other
                .stop(
                    &sandbox,
                    1,
                    Duration::from_secs(5),
                    &harness.fence(&sandbox, 1),
                )
                .await
                .expect("stop once the lock is free");
        }
        Kind::Docker => {
            let engine = harness.engine.as_ref().expect("engine");
            // The gateway reaches the engine through a proxy the test can take down.
            let proxy = UnixProxy::start(&engine.socket_path());
            let through = docker_driver(
                engine,
                &proxy.host(),
                &harness.driver_dir(),
                Duration::from_secs(2),
            );
            assert_eq!(
                through
                    .inspect(&sandbox, 1)
                    .await
                    .expect("inspect through the proxy"),
                ExecutionStatus::Running {
                    handle: handle.clone()
                }
            );
            for mode in ["refusing", "hanging"] {
                if mode == "refusing" {
                    proxy.refuse();
                } else {
                    proxy.hang();
                }
                let results: Vec<(&str, Result<(), DriverError>)> = vec![
                    (
                        "launch",
                        through
                            .launch(
                                &harness.spec(&sandbox, 2, &["sleep", "1"]),
                                &harness.fence(&sandbox, 2),
                            )
                            .await
                            .map(drop),
                    ),
                    ("inspect", through.inspect(&sandbox, 1).await.map(drop)),
                    ("list", through.list().await.map(drop)),
                    (
                        "stop",
                        through
                            .stop(&sandbox, 1, Duration::ZERO, &harness.fence(&sandbox, 1))
                            .await,
                    ),
                    (
                        "remove",
                        through.remove(&sandbox, &harness.fence(&sandbox, 1)).await,
                    ),
                ];
                for (what, result) in results {
                    assert!(
                        matches!(result, Err(DriverError::Uncertain { .. })),
                        "engine {mode}: {what} answered {result:?}"
                    );
                }
            }
            // The engine answers again: the same driver resumes. (The remove above
            // wrote its tombstone before it failed to reach the engine: finishing it
            // is what the executor would do.)
            proxy.pass();
            through
                .remove(&sandbox, &harness.fence(&sandbox, 1))
                .await
                .expect("remove once the engine answers");
            assert_eq!(
                through.inspect(&sandbox, 1).await.expect("inspect"),
                ExecutionStatus::Absent
            );
            assert_eq!(harness.executions_of(&sandbox), 0);
            return;
        }
    }
    harness.remove(&sandbox).await;
}
