//! What ties a replica to its metrics ([`palisade_metrics`]): the log
//! store's timings, a watcher of Raft's server metrics (term, leader,
//! leader changes, the leader history the status page shows), and the
//! gauges read when a scrape comes in (the state's, and the commit index).
//!
//! Leader changes are watched, not polled: a leader change between two
//! scrapes must still be counted. The watcher waits on openraft's *server*
//! metrics (vote, state, leader, membership), which change at elections and
//! membership changes only, not on its full metrics, which change with
//! every append, commit and apply: a task woken that often cost a busy
//! leader a cross-thread wake-up per change (4 % of a 16-client run's CPU
//! in `perf`). The commit index, which does change per entry, is read at
//! scrape time instead.

use openraft::async_runtime::WatchReceiver as _;
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_metrics::Metrics;
use palisade_raft::{NodeId, Raft};
use tonic::codegen::BoxFuture;

use crate::executor::Executor;
use crate::replica::Replica;

/// Feeds the log store's write timings into the metrics.
pub struct LogTimings(pub palisade_metrics::LogMetrics);

impl palisade_storage::LogTimings for LogTimings {
    fn appended(&self, elapsed: Duration) {
        self.0.append_seconds.observe(elapsed.as_secs_f64());
    }

    fn committed(&self, elapsed: Duration) {
        self.0.fsync_seconds.observe(elapsed.as_secs_f64());
    }
}

/// How many leader changes the status page remembers.
pub const LEADER_HISTORY_MAX: usize = 32;

/// One change of leader, as this replica saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// Wall-clock time this replica learned of it (ms since the epoch).
    pub seen_at_ms: i64,
    /// The new leader's term.
    pub term: u64,
    /// The new leader.
    pub leader: NodeId,
}

/// The last [`LEADER_HISTORY_MAX`] leader changes, oldest first.
/// `std::sync::Mutex`: pushed to by the watcher, read by the page; never
/// held across an await.
#[derive(Debug, Clone, Default)]
pub struct LeaderHistory(Arc<Mutex<VecDeque<LeaderChange>>>);

impl LeaderHistory {
    fn push(&self, change: LeaderChange) {
        let mut history = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if history.len() == LEADER_HISTORY_MAX {
            history.pop_front();
        }
        history.push_back(change);
    }

    /// The changes, oldest first.
    pub fn changes(&self) -> Vec<LeaderChange> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Watches Raft's server metrics until Raft stops: term, leader gauges,
/// leader changes and the leader history.
pub fn spawn_raft_watcher(
    raft: Raft,
    node_id: NodeId,
    metrics: Arc<Metrics>,
    history: LeaderHistory,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut receiver = raft.server_metrics();
        // The last leader known (a change to "no leader" is not a change:
        // an election that re-elects the same node changed nothing).
        let mut last_leader: Option<NodeId> = None;
        let mut last_members: BTreeSet<NodeId> = BTreeSet::new();
        let mut last_shown: Option<Option<NodeId>> = None;
        loop {
            {
                let watched = receiver.borrow_watched();
                let term = watched.vote.leader_id.term;
                metrics.raft.term.set(term as i64);
                metrics
                    .raft
                    .is_leader
                    .set(i64::from(watched.current_leader == Some(node_id)));
                if let Some(leader) = watched.current_leader
                    && last_leader != Some(leader)
                {
                    last_leader = Some(leader);
                    metrics.raft.leader_changes.inc();
                    history.push(LeaderChange {
                        seen_at_ms: now_ms(),
                        term,
                        leader,
                    });
                }
                let members: BTreeSet<NodeId> = watched
                    .membership_config
                    .membership()
                    .nodes()
                    .map(|(id, _)| *id)
                    .collect();
                if last_shown != Some(watched.current_leader) || members != last_members {
                    metrics.set_leader(watched.current_leader, members.iter().copied());
                    last_shown = Some(watched.current_leader);
                    last_members = members;
                }
            }
            if receiver.changed().await.is_err() {
                return;
            }
        }
    })
}

/// Counts in `counter` up to `total` (a running total kept elsewhere).
fn count_up_to(
    counter: &palisade_metrics::prometheus_client::metrics::counter::Counter,
    total: u64,
) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

/// The replica as the metrics listener sees it.
pub struct ReplicaSource {
    /// The replica.
    pub replica: Replica,
    /// Its executor.
    pub executor: Arc<Executor>,
    /// Leader changes this replica saw.
    pub history: LeaderHistory,
}

impl palisade_metrics::http::Source for ReplicaSource {
    fn refresh(&self, metrics: &Metrics) {
        let replica = &self.replica;
        metrics
            .raft
            .applied_index
            .set(replica.state.applied_index() as i64);
        let committed = replica.raft.metrics().borrow_watched().local_committed;
        metrics
            .raft
            .commit_index
            .set(committed.map_or(0, |id| id.index) as i64);
        // Every number here is kept up to date elsewhere (the census and
        // the size estimate at apply, the receipts' own count): a scrape
        // is O(series) and never scans the state under its lock.
        let census = replica.state.census();
        let receipts = replica.state.read(|applied| applied.state.receipts.len());
        metrics.state.receipts.set(receipts as i64);
        metrics.state.sandboxes.set(census.sandboxes() as i64);
        metrics.state.bytes.set(replica.state.state_bytes() as i64);
        let pending = census.pending() as usize;
        // Only the leader's executor has a queue: what is pending and not
        // already being performed.
        let queue = if replica.leading_term().is_some() {
            pending.saturating_sub(self.executor.effects_in_flight())
        } else {
            0
        };
        metrics.executor.queue_depth.set(queue as i64);
        let (found, reaped) = self.executor.orphan_counts();
        count_up_to(&metrics.executor.orphans_found, found);
        count_up_to(&metrics.executor.orphans_reaped, reaped);
        if let Some(projection) = &replica.projection {
            let status = projection.status();
            metrics
                .projection
                .lag_entries
                .set(status.lag_entries as i64);
            metrics
                .projection
                .lag_seconds
                .set(status.lag_ms as f64 / 1000.0);
        }
    }

    fn status_page(&self) -> BoxFuture<String, std::convert::Infallible> {
        let replica = self.replica.clone();
        let executor = self.executor.clone();
        let history = self.history.clone();
        Box::pin(async move { Ok(crate::status_page::render(&replica, &executor, &history).await) })
    }
}
