//! The cluster feature level in a mixed cluster (issue 20, item 6): real
//! replica processes, one of them playing an older release with the
//! TEST-ONLY lower supported level (`PALISADE_TEST_SUPPORTED_FEATURE_LEVEL`,
//! read only by `test-hooks` builds):
//!
//! - while that replica is a voter the level stays at 1, the cluster
//!   serves requests, and that replica keeps up (its peers send it JSON,
//!   not the binary encoding its level refuses);
//! - once it runs at the full level again, the leader raises the level
//!   (`cluster status -o json` shows `feature_level` 2 on every replica);
//! - the replica then cannot start with the lower level again: it exits
//!   with a message naming both levels, not a decode panic.

mod support;

use std::time::Duration;

use palisade_raft::feature_level::SUPPORTED;
use support::cluster::{Cluster, cli_json_async};
use tokio::time::Instant;

const LOWER_LEVEL_ENV: &str = "PALISADE_TEST_SUPPORTED_FEATURE_LEVEL";

/// Every replica's (node_id, feature_level, supported_feature_level), as
/// `cluster status -o json` prints them.
async fn levels(endpoints: &str) -> Vec<(u64, u64, u64)> {
    let status = cli_json_async(endpoints, &["cluster", "status"]).await;
    status["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter(|view| view.get("error").is_none())
        .map(|view| {
            (
                view["node_id"].as_u64().unwrap(),
                view["feature_level"].as_u64().unwrap(),
                view["supported_feature_level"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn create(endpoints: &str, name: &str) {
    let created = cli_json_async(endpoints, &["sandbox", "create", name]).await;
    assert_eq!(created["name"], name, "{created}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_level_rises_only_when_every_voter_supports_it_and_a_downgrade_is_refused() {
    const { assert!(SUPPORTED >= 2, "this build has a level above the base") };
    let mut cluster = Cluster::prepare(3, &["--driver", "noop"]);
    cluster
        .replica_mut(3)
        .env
        .push((LOWER_LEVEL_ENV.into(), "1".into()));
    cluster.start_all().expect("start the replicas");
    let ids = cluster.node_ids();
    cluster.wait_for_leader(&ids).await;
    let endpoints = cluster.cli_endpoints(&ids);

    // Mixed: node 3 supports level 1 only. The cluster serves, and over
    // several of the leader's polls (one a second) the level stays at 1.
    create(&endpoints, "before").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    create(&endpoints, "mixed").await;
    let seen = levels(&endpoints).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (node_id, level, supported) in &seen {
        assert_eq!(
            *level, 1,
            "node {node_id} applied a raise in a mixed cluster: {seen:?}"
        );
        let expected = if *node_id == 3 { 1 } else { SUPPORTED as u64 };
        assert_eq!(*supported, expected, "{seen:?}");
    }
    // Node 3 follows the log: nothing it cannot decode (a binary payload,
    // which its level refuses) was sent to it.
    cluster.wait_caught_up(&ids).await;

    // Node 3 restarted at the full level: the leader raises the level.
    cluster.replica_mut(3).terminate();
    cluster.replica_mut(3).env.clear();
    cluster.replica_mut(3).start().expect("restart node 3");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = levels(&endpoints).await;
        if seen.len() == 3 && seen.iter().all(|(_, level, _)| *level == SUPPORTED as u64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the level did not rise once every voter supports it: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    create(&endpoints, "raised").await;

    // A downgrade of node 3 to the lower level is refused at start, with
    // both levels named; the others go on serving.
    cluster.replica_mut(3).terminate();
    let replica = cluster.replica_mut(3);
    replica.env.push((LOWER_LEVEL_ENV.into(), "1".into()));
    let log_offset = replica.log_len();
    replica.start().expect("spawn node 3 at the lower level");
    let status = replica
        .wait_exit(Duration::from_secs(60))
        .expect("a replica below the cluster's feature level exits");
    assert!(!status.success(), "{status:?}");
    let log = replica.log_since(log_offset);
    assert!(
        log.contains(&format!("is at cluster feature level {SUPPORTED}"))
            && log.contains("supports feature levels up to 1"),
        "no clear message naming both levels: {log}"
    );
    assert!(!log.contains("panicked"), "a panic, not a refusal: {log}");
    let running: Vec<u64> = vec![1, 2];
    let endpoints = cluster.cli_endpoints(&running);
    create(&endpoints, "after-refusal").await;
}
