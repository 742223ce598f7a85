//! A follower left far behind catches up (issue 13, "a follower stuck
//! behind for good").
//!
//! Three `palisade gateway run` processes (noop driver) snapshot every 1,000
//! entries and keep only 200 entries behind a snapshot, so the log the
//! paused follower needs is purged many times over. One follower is frozen
//! with SIGSTOP while 20,000 entries are written; it is resumed while the
//! writes go on, and must be at the leader's applied index (as it was when
//! the follower was resumed) within 10 s. A second round does the same with
//! the CPU saturated by busy-loop threads while the follower catches up.
//!
//! Run it with (about 2 minutes in a debug build on two cores):
//!
//! ```sh
//! cargo test -p palisade-cli --test follower_catch_up -- --ignored --nocapture
//! ```
//!
//! The suite's regression test for the cause is
//! `raft/tests/append_stream_abandoned.rs`.
//!
//! On openraft 0.10.0-alpha.37 without Palisade's fix, the leader's
//! replication stream to that follower kept reading a purged range
//! (`limited_get_log_entries(..) returned empty`) and the follower never
//! caught up.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use palisade_proto::v1;
use support::KeepLogsOnFailure;
use support::cluster::*;
use tokio::time::Instant;

/// Entries written while the follower is frozen.
const ENTRIES_WHILE_PAUSED: u64 = 20_000;
/// How long the resumed follower may take to reach the leader's applied index.
const CATCH_UP_MAX: Duration = Duration::from_secs(10);
/// Concurrent writers (each one create or delete in flight).
const WRITERS: u64 = 96;
/// Writers that keep going while the follower catches up.
const WRITERS_DURING_CATCH_UP: u64 = 4;

/// Writers creating and deleting workspaces (one log entry each) on the
/// leader, until told to stop or thinned out to `WRITERS_DURING_CATCH_UP`.
struct Writers {
    stop: Arc<AtomicBool>,
    thin: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    async fn start(leader_uri: &str, round: u64) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let thin = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let mut client = direct_client(leader_uri, Duration::from_secs(30)).await;
            let (stop, thin, acknowledged) = (stop.clone(), thin.clone(), acknowledged.clone());
            tasks.push(tokio::spawn(async move {
                let name = format!("r{round}-w{writer}");
                let thinned_out =
                    |writer: u64| writer >= WRITERS_DURING_CATCH_UP && thin.load(Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) && !thinned_out(writer) {
                    let created = client
                        .create_workspace(v1::CreateWorkspaceRequest { name: name.clone() })
                        .await;
                    let deleted = client
                        .delete_workspace(v1::DeleteWorkspaceRequest { name: name.clone() })
                        .await;
                    if let Err(status) = created.map(|_| ()).and(deleted.map(|_| ())) {
                        panic!("writer {writer}: {status}");
                    }
                    acknowledged.fetch_add(2, Ordering::Relaxed);
                }
            }));
        }
        Writers {
            stop,
            thin,
            acknowledged,
            tasks,
        }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a writer failed");
        }
    }
}

async fn applied_index(uri: &str) -> u64 {
    cluster_info(uri).await.map_or(0, |info| info.applied_index)
}

/// Freezes `follower`, writes `ENTRIES_WHILE_PAUSED` entries through the
/// leader, resumes it (the writes go on, fewer) and returns how long it took
/// to reach the leader's applied index as of the resume. With `busy`,
/// busy-loop threads saturate the CPU from the resume on.
async fn pause_write_resume(
    cluster: &Cluster,
    leader: u64,
    follower: u64,
    round: u64,
    stutter: bool,
    busy: bool,
) -> Duration {
    let leader_uri = cluster.replica(leader).uri();
    let follower_uri = cluster.replica(follower).uri();
    let start_index = cluster_info(&leader_uri)
        .await
        .expect("the leader answers")
        .commit_index;
    cluster.replica(follower).pause();
    let writers = Writers::start(&leader_uri, round).await;
    let written = Instant::now();
    let mut stutter_step = 0u64;
    loop {
        if stutter {
            // Let it run a little now and then: its replies come late, the
            // leader's replication sessions time out and start over while
            // the follower is still reading the old ones.
            stutter_step += 1;
            if stutter_step.is_multiple_of(4) {
                cluster.replica(follower).resume();
                tokio::time::sleep(Duration::from_millis(60)).await;
                cluster.replica(follower).pause();
            }
        }
        let commit = cluster_info(&leader_uri)
            .await
            .map_or(0, |i| i.commit_index);
        if commit >= start_index + ENTRIES_WHILE_PAUSED {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(300),
            "only {} entries written in 300 s",
            commit - start_index
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "round {round}: {} entries written in {:?} ({} acknowledged) while node {follower} was frozen",
        ENTRIES_WHILE_PAUSED,
        written.elapsed(),
        writers.acknowledged.load(Ordering::Relaxed)
    );
    writers.thin.store(true, Ordering::Relaxed);

    let burning = Arc::new(AtomicBool::new(busy));
    let burners: Vec<_> = (0..if busy { 4 } else { 0 })
        .map(|_| {
            let burning = burning.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while burning.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();

    let target = applied_index(&leader_uri).await;
    cluster.replica(follower).resume();
    let resumed = Instant::now();
    let mut applied = 0;
    while resumed.elapsed() < CATCH_UP_MAX {
        applied = applied_index(&follower_uri).await;
        if applied >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = resumed.elapsed();
    burning.store(false, Ordering::Relaxed);
    for burner in burners {
        burner.join().expect("a busy-loop thread");
    }
    writers.finish().await;
    assert!(
        applied >= target,
        "round {round}: node {follower} applied {applied}, not the leader's {target}, \
         {CATCH_UP_MAX:?} after it was resumed (busy CPU: {busy})"
    );
    eprintln!("round {round}: node {follower} caught up in {took:?} (busy CPU: {busy})");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "about 2 minutes in a debug build (40,000 entries): run it on purpose"]
async fn a_frozen_follower_catches_up_after_20000_entries_and_purges() {
    let cluster = Cluster::start(
        3,
        &[
            "--driver",
            "noop",
            "--snapshot-interval-entries",
            "1000",
            "--log-kept-after-snapshot-entries",
            "200",
        ],
    );
    let _keep_logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "follower_catch_up",
    };
    let (leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");

    pause_write_resume(&cluster, leader, follower, 1, false, false).await;
    pause_write_resume(&cluster, leader, follower, 2, true, true).await;

    let (still_leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    assert_eq!(still_leader, leader, "leadership moved during the test");
}
