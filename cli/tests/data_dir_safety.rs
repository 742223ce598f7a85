//! A founding replica whose data directory was wiped must not found the
//! cluster again (`gateway/src/founding.rs`): restarted with the same
//! flags, it refuses, says what to do and exits non-zero, and the cluster
//! keeps serving; following its instructions brings it back. A founder
//! that was merely slow to start (never ran) still founds and joins.
//! Real `palisade gateway run` processes, noop driver.

mod support;

use std::time::Duration;

use support::cluster::*;
use tokio::time::Instant;

const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until `leader` reports having heard from `node`.
async fn wait_heard_from(cluster: &Cluster, leader: u64, node: u64) {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        if let Some(info) = cluster_info(&cluster.replica(leader).uri()).await
            && info.members_heard_from.contains(&node)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {leader} never reported hearing from node {node}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_founder_refuses_to_found_again_and_can_be_re_added() {
    let mut cluster = Cluster::start(3, &["--driver", "noop"]);
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    cli_json_async(&endpoints, &["workspace", "create", "before"]).await;
    let wiped = *all.iter().find(|id| **id != leader).expect("a follower");
    let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != wiped).collect();
    cluster.wait_caught_up(&all).await;
    wait_heard_from(&cluster, leader, wiped).await;

    // Its disk is replaced: same node id, same flags, an empty directory.
    let replica = cluster.replica_mut(wiped);
    replica.kill();
    std::fs::remove_dir_all(&replica.data_dir).expect("wipe the data directory");
    replica.start().expect("restart the wiped replica");
    let status = replica
        .wait_exit(PHASE_TIMEOUT)
        .expect("the wiped replica exits on its own");
    let log = replica.log();
    println!(
        "the wiped replica said: {}",
        log.lines().last().unwrap_or_default()
    );
    assert!(!status.success(), "it exited with {status}: {log}");
    assert!(log.contains("refusing to found the cluster again"), "{log}");
    assert!(
        log.contains(&format!("palisade cluster remove {wiped}")),
        "{log}"
    );
    assert!(log.contains("without --initial-cluster"), "{log}");

    // The cluster keeps serving, its membership untouched.
    let survivors_endpoints = cluster.cli_endpoints(&survivors);
    cli_json_async(&survivors_endpoints, &["workspace", "create", "during"]).await;
    let info = cluster_info(&cluster.replica(leader).uri())
        .await
        .expect("the leader answers");
    assert_eq!(info.members.len(), 3, "{info:?}");

    // What the message says to do brings it back.
    cli_json_async(
        &survivors_endpoints,
        &["cluster", "remove", &wiped.to_string()],
    )
    .await;
    let replica = cluster.replica_mut(wiped);
    std::fs::remove_dir_all(&replica.data_dir).ok();
    replica.initial_cluster = String::new();
    replica.start().expect("start it without --initial-cluster");
    let address = replica.listen.clone();
    cli_json_async(
        &survivors_endpoints,
        &["cluster", "add-learner", &wiped.to_string(), &address],
    )
    .await;
    cli_json_async(
        &survivors_endpoints,
        &["cluster", "promote", &wiped.to_string()],
    )
    .await;
    cluster.wait_for_leader(&all).await;
    cluster.wait_caught_up(&all).await;
    let back = cluster_info(&cluster.replica(wiped).uri())
        .await
        .expect("the re-added replica answers");
    let voters = back
        .members
        .iter()
        .filter(|member| member.role == "voter")
        .count();
    assert_eq!(voters, 3, "{back:?}");
    cli_json_async(&endpoints, &["workspace", "create", "after"]).await;
}

/// A founder that never ran, started after the others founded the cluster
/// (hosts booting one after another), is not mistaken for a wiped one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_founder_that_starts_late_still_founds_and_joins() {
    let mut cluster = Cluster::prepare(3, &["--driver", "noop"]);
    for early in [1, 2] {
        cluster.replica_mut(early).start().expect("start a founder");
    }
    cluster.wait_for_leader(&[1, 2]).await;
    let early = cluster.cli_endpoints(&[1, 2]);
    cli_json_async(&early, &["workspace", "create", "early"]).await;

    cluster
        .replica_mut(3)
        .start()
        .expect("start the late founder");
    cluster.wait_for_leader(&[1, 2, 3]).await;
    cluster.wait_caught_up(&[1, 2, 3]).await;
    assert!(
        cluster.replica_mut(3).try_exit_status().is_none(),
        "the late founder exited: {}",
        cluster.replica(3).log()
    );
    let info = cluster_info(&cluster.replica(3).uri())
        .await
        .expect("the late founder answers");
    assert_eq!(info.members.len(), 3, "{info:?}");
}
