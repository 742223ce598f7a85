//! A replica that ends on its own — here, one whose restart cannot open its
//! data directory — is recorded with its error, so a campaign reports it
//! (`replica-stopped`) and the membership check quotes it, instead of a
//! bare "not running at the end" (chaos seed 42 at 1,000 operations).

use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_restart_is_recorded_with_its_error() {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(LinkTable::new(42));
    let (triggers, _fired) = Triggers::new();
    let cluster = Cluster::start(ClusterConfig::chaos(3), host, links, Arc::new(triggers))
        .expect("cluster starts");
    cluster
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected");
    assert!(cluster.unexpected_stops().is_empty());

    // A crash is not a stop on its own.
    cluster.crash(3).await;
    assert!(cluster.unexpected_stops().is_empty());

    // Its data directory becomes a file: the restart cannot open it.
    let data_dir = cluster.data_dir(3).expect("replica 3 has a directory");
    std::fs::remove_dir_all(&data_dir).expect("remove the data directory");
    std::fs::write(&data_dir, b"not a directory").expect("write a file in its place");
    cluster.restart(3).expect("the restart itself is asked for");

    let deadline = Instant::now() + Duration::from_secs(20);
    while !cluster.has_stopped(3) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        cluster.has_stopped(3),
        "replica 3 should have stopped on its own"
    );
    assert!(cluster.is_running(3), "the harness still holds its slot");
    let stops = cluster.unexpected_stops();
    assert_eq!(stops.len(), 1, "one stop recorded: {stops:?}");
    assert_eq!(stops[0].0, 3);
    let why = cluster.why_stopped(3).expect("why it stopped");
    assert!(
        why.contains(&*data_dir.to_string_lossy()) || why.to_lowercase().contains("directory"),
        "the record quotes the start error: {why}"
    );

    // A stop the storage nemesis expects is taken out of the record.
    assert_eq!(cluster.expect_stop(3), vec![why]);
    assert!(cluster.unexpected_stops().is_empty());
    cluster.shutdown().await;
}
