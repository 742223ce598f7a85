//! End to end, in process: a leader writes its receipt retention into the
//! replicated configuration (clamped to at least a day at apply), and its
//! ticks bring a replicated clock that every replica holds alike (issue 14).

use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;

const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: i64 = 3_600_000;

/// Starts three replicas whose leaders are configured with `retention`, and
/// waits until every replica has a replicated clock and `expected_ms` as its
/// retention. Panics with what the replicas hold if they never do.
async fn replicas_converge_on(retention: Duration, expected_ms: i64) {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(LinkTable::new(14));
    let (triggers, _fired) = Triggers::new();
    let mut config = ClusterConfig::chaos(3);
    config.executor.receipt_retention = retention;
    config.executor.tick_interval = Duration::from_millis(100);
    let cluster = Cluster::start(config, host, links, Arc::new(triggers)).expect("cluster starts");
    cluster
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut views;
    loop {
        views = cluster
            .node_ids()
            .into_iter()
            .filter_map(|node_id| cluster.node(node_id))
            .map(|node| {
                node.replica
                    .state
                    .read(|applied| (applied.state.clock_ms, applied.state.receipt_retention_ms()))
            })
            .collect::<Vec<_>>();
        let converged = views.len() == 3
            && views
                .iter()
                .all(|&(clock_ms, retention_ms)| clock_ms > 0 && retention_ms == expected_ms);
        if converged || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.shutdown().await;
    assert!(
        views.len() == 3
            && views
                .iter()
                .all(|&(clock_ms, retention_ms)| clock_ms > 0 && retention_ms == expected_ms),
        "every replica should hold a clock and a retention of {expected_ms} ms; \
         (clock_ms, retention_ms) per replica: {views:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_retention_becomes_replicated_configuration() {
    replicas_converge_on(48 * HOUR, 48 * HOUR_MS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_retention_below_a_day_is_raised_to_a_day() {
    replicas_converge_on(HOUR, 24 * HOUR_MS).await;
}
