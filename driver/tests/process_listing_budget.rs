//! The listing budget of the orphan reconciler's round against the process driver.
//!
//! A `remove` is on the path of every delete: it reads the sandbox directory
//! once to decide (fence, tombstone, generations) and once to delete.
//!
//! Every round (every 10 s on the leader) calls `list` and `collect_tombstones`.
//! Removed sandboxes keep their directory (fence and tombstone) for the tombstone
//! retention, 7 days by default, so a round's cost grows with every sandbox removed
//! that week: it must stay at one listing per sandbox directory for `list` (its
//! tombstone and generations come from the same listing), and the collection's
//! scan of every sandbox directory must not run every round. The counters are
//! process-wide, so this file holds one test, run alone in its own binary.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_driver::process::records::sandbox_dir_listings;
use palisade_driver::process::{ProcessDriver, ProcessDriverTimeouts};
use palisade_driver::{ComputeDriver, ExecutionStatus, Fence, LaunchSpec};

const CLUSTER: &str = "0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10";
const SANDBOXES: usize = 6;
const REMOVED: usize = 4;
/// Listings of one `remove` of a sandbox whose executions are all gone.
const REMOVE_LISTINGS: u64 = 2;

fn fence(sandbox_id: &str, operation_index: u64) -> Fence {
    Fence {
        cluster_id: CLUSTER.to_owned(),
        term: 3,
        sandbox_id: sandbox_id.to_owned(),
        generation: 1,
        operation_index,
    }
}

/// Runs `step` and returns how many sandbox directories it listed.
async fn listings_of<T>(step: impl Future<Output = T>) -> (T, u64) {
    let before = sandbox_dir_listings();
    let result = step.await;
    (result, sandbox_dir_listings() - before)
}

fn driver(dir: &Path, tombstone_retention: Duration) -> ProcessDriver {
    // No shim program: a launch gets through its deciding step (the generation's
    // directory is claimed) and then fails to start the launch server.
    ProcessDriver::new(
        dir.to_path_buf(),
        PathBuf::from("/nonexistent/palisade-test-shim"),
    )
    .expect("driver directory")
    .with_timeouts(ProcessDriverTimeouts {
        shim_start_timeout: Duration::from_secs(5),
        tombstone_retention,
        ..ProcessDriverTimeouts::default()
    })
}

#[tokio::test]
async fn a_reconciler_round_lists_each_sandbox_directory_once() {
    let root = tempfile::tempdir().expect("temporary directory");
    let dir = root.path().join("driver");
    let driver = driver(&dir, ProcessDriverTimeouts::default().tombstone_retention);
    let ids: Vec<String> = (0..SANDBOXES).map(|n| format!("sandbox-{n}")).collect();
    for id in &ids {
        let spec = LaunchSpec {
            sandbox_id: id.clone(),
            generation: 1,
            command: vec!["sleep".to_owned(), "1000".to_owned()],
            env: Default::default(),
            ..Default::default()
        };
        let launched = driver.launch(&spec, &fence(id, 10)).await;
        assert!(launched.is_err(), "no shim program, yet {launched:?}");
    }
    // `remove` of a sandbox none of whose executions runs: one listing for the
    // fence, the tombstone and the generations, one for the deletion.
    for id in &ids[..REMOVED] {
        let (removed, listings) = listings_of(driver.remove(id, &fence(id, 20))).await;
        removed.expect("remove");
        assert_eq!(
            listings, REMOVE_LISTINGS,
            "sandbox directory listings of one `remove`"
        );
    }

    // `list`: one listing per sandbox directory, tombstoned ones included.
    let (listed, listings) = listings_of(driver.list()).await;
    let listed = listed.expect("list");
    let expected: Vec<(String, u64, ExecutionStatus)> = ids[REMOVED..]
        .iter()
        .map(|id| (id.clone(), 1, ExecutionStatus::Absent))
        .collect();
    assert_eq!(
        listed, expected,
        "what the removals left is not listed; the claimed, never started generations are"
    );
    assert_eq!(
        listings, SANDBOXES as u64,
        "sandbox directory listings of one `list`"
    );

    // The reconciler's collection: the first round scans (each sandbox directory
    // once: no tombstone is old enough to look at twice), the next rounds do not.
    let (collected, first) = listings_of(ComputeDriver::collect_tombstones(&driver)).await;
    assert_eq!(collected.expect("collect"), 0, "no tombstone is old enough");
    assert_eq!(first, SANDBOXES as u64, "listings of the first collection");
    let (collected, next) = listings_of(ComputeDriver::collect_tombstones(&driver)).await;
    assert_eq!(collected.expect("collect"), 0);
    assert_eq!(next, 0, "listings of a collection in the next round");

    // Spacing the scans never delays a due collection past an eighth of the
    // retention: with none, every round collects what is due, at once.
    let collecting = driver_with_no_retention(&dir);
    let (collected, _) = listings_of(ComputeDriver::collect_tombstones(&collecting)).await;
    assert_eq!(collected.expect("collect"), REMOVED);
    let (listed, listings) = listings_of(collecting.list()).await;
    assert_eq!(listed.expect("list"), expected);
    assert_eq!(
        listings,
        (SANDBOXES - REMOVED) as u64,
        "listings once the tombstones are collected"
    );
}

fn driver_with_no_retention(dir: &Path) -> ProcessDriver {
    driver(dir, Duration::ZERO)
}
