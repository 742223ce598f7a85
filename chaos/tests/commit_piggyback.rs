//! At low load a follower learns each commit on the request that carries
//! the next entries, not on a request of its own (the `openraft` patch in
//! `vendor/openraft`, see `vendor/README.md`).
//!
//! Upstream openraft sends every follower an entry-less AppendEntries as
//! soon as the commit index moves and no entries are waiting, so one client
//! writing in sequence cost each follower two streamed requests per entry
//! (the entry, then its commit), each received, decoded and answered. With
//! the patch a commit waits up to a millisecond for the next entries, which
//! a client writing in sequence produces well within it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;
use palisade_raft::NodeId;
use palisade_raft::hooks::{LinkFaults, LinkVerdict, PeerRpc};

mod support;

/// Creates sent one after another.
const CREATES: usize = 150;
/// Most streamed AppendEntries requests a follower may receive per log
/// entry. One per entry when every commit rides on the next entries;
/// upstream's entry-less request per commit makes it two. Set between the
/// two, so that a loaded machine whose client now and then pauses longer
/// than the wait does not fail the test, while upstream's behaviour does.
const REQUESTS_PER_ENTRY_MAX: f64 = 1.5;

/// Delivers every message (the chaos link table's verdicts, with no fault
/// set) and counts the streamed AppendEntries requests each replica is sent.
#[derive(Debug)]
struct CountingLinks {
    inner: LinkTable,
    stream_appends_to: Mutex<BTreeMap<NodeId, u64>>,
}

impl CountingLinks {
    fn stream_appends_to(&self) -> BTreeMap<NodeId, u64> {
        self.stream_appends_to.lock().unwrap().clone()
    }
}

impl LinkFaults for CountingLinks {
    fn verdict(&self, from: NodeId, to: NodeId, rpc: PeerRpc) -> LinkVerdict {
        if rpc == PeerRpc::StreamAppend {
            *self
                .stream_appends_to
                .lock()
                .unwrap()
                .entry(to)
                .or_default() += 1;
        }
        self.inner.verdict(from, to, rpc)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_learns_commits_on_the_next_entries_at_low_load() {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(CountingLinks {
        inner: LinkTable::new(7),
        stream_appends_to: Mutex::new(BTreeMap::new()),
    });
    let (triggers, _fired) = Triggers::new();
    let cluster = Cluster::start(
        ClusterConfig::chaos(3),
        host,
        links.clone(),
        Arc::new(triggers),
    )
    .expect("cluster starts");
    let (leader, mut client) = cluster
        .connect_to_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected and answers");
    // One create first, so that the connection and the replication streams
    // are warm before counting.
    support::create(&mut client, "warm-up").await;

    let raft = cluster.raft(leader).expect("the leader runs");
    let last_log_index = || raft.metrics().borrow_watched().last_log_index.unwrap_or(0);
    let index_before = last_log_index();
    let requests_before = links.stream_appends_to();
    for n in 0..CREATES {
        support::create(&mut client, &format!("sandbox-{n}")).await;
    }
    let entries = last_log_index() - index_before;
    let requests_after = links.stream_appends_to();
    cluster.shutdown().await;

    assert!(
        entries >= 2 * CREATES as u64,
        "each create is at least two log entries: {entries} for {CREATES} creates"
    );
    for follower in cluster.node_ids().into_iter().filter(|&n| n != leader) {
        let requests = requests_after.get(&follower).copied().unwrap_or(0)
            - requests_before.get(&follower).copied().unwrap_or(0);
        let per_entry = requests as f64 / entries as f64;
        eprintln!(
            "follower {follower}: {requests} streamed requests for {entries} entries ({per_entry:.2} per entry)"
        );
        assert!(
            per_entry <= REQUESTS_PER_ENTRY_MAX,
            "follower {follower} was sent {requests} streamed AppendEntries requests for \
             {entries} log entries ({per_entry:.2} per entry, at most {REQUESTS_PER_ENTRY_MAX}): \
             commits went out on requests of their own"
        );
    }
}
