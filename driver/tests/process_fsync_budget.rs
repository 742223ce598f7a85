//! The fsync budget of the process driver's fenced steps, on the gateway side.
//!
//! Each fsync is a flush of the disk's cache on the path of an effect (2–8 ms on
//! the virtual disks this runs on), so fencing must not add any beyond the one that
//! makes the fence durable with the step's own records: `launch` shares the fsync
//! of the generation it claims, `remove` the one of its tombstone, `stop` pays one
//! (see the "What is fsynced" section of `palisade_driver::process`). What an effect
//! waits for is its *rounds* of fsyncs: fsyncs that may go in any order are issued
//! at once and waited for as one (a first launch's four fsyncs are two rounds).
//! And the launch path starts no thread for its fsyncs: those issued at once used
//! to go to a thread started for each and ended after it, two thread lifecycles on
//! the path of every create (a stack mapped and unmapped, a dozen more system calls
//! each, and an interrupt to every core running the gateway); under a tokio
//! runtime, as in the gateway, they go to its blocking pool, whose threads are kept.
//! The counters are process-wide, so this file holds one test, run alone in its own
//! binary.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::Duration;

use palisade_driver::process::records::{
    fsync_rounds_issued, fsync_threads_started, fsyncs_issued,
};
use palisade_driver::process::{ProcessDriver, ProcessDriverTimeouts};
use palisade_driver::{ComputeDriver, Fence, LaunchSpec};

const CLUSTER: &str = "0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10";
const SANDBOX: &str = "sandbox-budget";

fn fence(generation: u64, operation_index: u64) -> Fence {
    Fence {
        cluster_id: CLUSTER.to_owned(),
        term: 3,
        sandbox_id: SANDBOX.to_owned(),
        generation,
        operation_index,
    }
}

/// The fsyncs a step made, and the rounds it waited for them in.
#[derive(Debug, PartialEq, Eq)]
struct Fsyncs {
    fsyncs: u64,
    rounds: u64,
}

/// Runs `step` and returns the fsyncs it made.
async fn fsyncs_of<T>(step: impl Future<Output = T>) -> (T, Fsyncs) {
    let (before, rounds_before) = (fsyncs_issued(), fsync_rounds_issued());
    let result = step.await;
    let fsyncs = Fsyncs {
        fsyncs: fsyncs_issued() - before,
        rounds: fsync_rounds_issued() - rounds_before,
    };
    (result, fsyncs)
}

fn fsyncs(fsyncs: u64, rounds: u64) -> Fsyncs {
    Fsyncs { fsyncs, rounds }
}

#[tokio::test]
async fn fenced_steps_stay_within_their_fsync_budget() {
    let threads_before = fsync_threads_started();
    let root = tempfile::tempdir().expect("temporary directory");
    // No shim program: the launch gets through its deciding step (fence, claim,
    // tombstone check) and then fails to start the launch server. The shim's own fsyncs
    // (claim content, the execution directory before the command runs, exit.json
    // content) happen in the shim's process and are not counted here.
    let driver = ProcessDriver::new(
        root.path().join("driver"),
        PathBuf::from("/nonexistent/palisade-test-shim"),
    )
    .expect("driver directory")
    .with_timeouts(ProcessDriverTimeouts {
        shim_start_timeout: Duration::from_secs(5),
        ..ProcessDriverTimeouts::default()
    });
    let spec = LaunchSpec {
        sandbox_id: SANDBOX.to_owned(),
        generation: 1,
        command: vec!["sleep".to_owned(), "1000".to_owned()],
        env: Default::default(),
        ..Default::default()
    };

    let (launched, launch) = fsyncs_of(driver.launch(&spec, &fence(1, 10))).await;
    assert!(launched.is_err(), "no shim program, yet {launched:?}");
    // The new sandbox directory's entry, spec.json, the staging directory (one
    // round, before the rename), and the sandbox directory after the rename (the
    // generation and the fence together).
    assert_eq!(launch, fsyncs(4, 2), "fsyncs of a first launch");
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(1, 10))
    );

    let (stopped, stop) =
        fsyncs_of(driver.stop(SANDBOX, 1, Duration::from_millis(10), &fence(1, 20))).await;
    stopped.expect("stop");
    // The fence (stop-requested is not fsynced).
    assert_eq!(stop, fsyncs(1, 1), "fsyncs of a stop");

    let (removed, remove) = fsyncs_of(driver.remove(SANDBOX, &fence(1, 30))).await;
    removed.expect("remove");
    // The fence and the tombstone, together; deleting the files is not fsynced.
    assert_eq!(remove, fsyncs(1, 1), "fsyncs of a remove");
    assert_eq!(
        driver
            .tombstone_of(SANDBOX)
            .await
            .expect("tombstone")
            .map(|tombstone| tombstone.fence),
        Some(fence(1, 30))
    );
    assert_eq!(
        driver.fence_of(SANDBOX).await.expect("fence"),
        Some(fence(1, 30))
    );

    // Retries pay for the fence again (its first recorder may have died before
    // making it durable), once.
    let (stopped, stop_again) =
        fsyncs_of(driver.stop(SANDBOX, 1, Duration::from_millis(10), &fence(1, 30))).await;
    stopped.expect("stop after remove");
    assert_eq!(stop_again, fsyncs(1, 1), "fsyncs of a repeated fence");

    // A sandbox whose first fenced step is a remove: its new directory's entry in
    // the driver directory is made durable with the fence and the tombstone, in
    // the same round.
    let never_launched = "sandbox-budget-never-launched";
    let first_fence = Fence {
        sandbox_id: never_launched.to_owned(),
        ..fence(0, 40)
    };
    let (removed, first_remove) = fsyncs_of(driver.remove(never_launched, &first_fence)).await;
    removed.expect("remove of a sandbox never launched");
    assert_eq!(
        first_remove,
        fsyncs(2, 1),
        "fsyncs of a first fenced remove"
    );
    assert_eq!(
        fsync_threads_started() - threads_before,
        0,
        "threads started for the fsyncs issued together"
    );
}
