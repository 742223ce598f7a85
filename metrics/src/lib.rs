//! Palisade's observability: the Prometheus metrics of one replica, the
//! gRPC layer that measures every public request and gives it a trace id,
//! and the HTTP listener (`--metrics-listen`) that serves `/metrics` and
//! the status page.
//!
//! # Key decision: one registry per replica, handles at the call sites
//!
//! Every metric is a `prometheus-client` handle (an `Arc` inside) owned by
//! one [`Metrics`] per replica and registered once in its registry: no
//! global registry, so replicas that share a process (tests, the chaos
//! harness) never mix their numbers. Call sites (the log store, the state
//! machine, the executor) get clones of the few handles they record into
//! and pay one atomic add per event. What is a property of the replica's
//! state rather than an event (term, indexes, receipts held, state size,
//! projection lag) is read when a scrape comes in, through
//! [`http::Source::refresh`], so no background task polls it. Names follow
//! the Prometheus conventions: base units (`_seconds`, `_bytes`), counters
//! end in `_total` (the encoder appends it), and the exposition is the
//! OpenMetrics text format, which Prometheus scrapes natively.
//!
//! # Layout
//!
//! - [`Metrics`] and its groups ([`RaftMetrics`], [`LogMetrics`],
//!   [`RpcMetrics`], [`ExecutorMetrics`], [`ProjectionMetrics`],
//!   [`StateMetrics`]): the metric families and their help texts.
//! - [`rpc`]: the tower layer around the public gRPC services: latency and
//!   counts by method and status code, in-flight requests, and the trace
//!   context of each request.
//! - [`trace`]: W3C trace context (`traceparent`), carried across replicas
//!   in gRPC metadata and remembered by request id for the executor.
//! - [`http`]: the listener serving `/metrics` and `/` (the status page).
#![deny(missing_docs)]

pub mod http;
pub mod rpc;
pub mod trace;

/// The metrics library, for call sites that name its types.
pub use prometheus_client;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

/// Latency buckets, in seconds: 100 µs to ~6.5 s, doubling. Wide enough
/// for an fsync on a fast disk and for a slow driver call.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 17)
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// A gauge holding a float (seconds, ratios).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// One label: a node id.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// The member's node id.
    pub node_id: String,
}

/// One label: why something happened (a proposal failed, a request was shed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The reason, a short snake_case word.
    pub reason: String,
}

/// Labels of a gRPC request, as go-grpc-prometheus names them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// `palisade.v1.Palisade`, `palisade.v1.ClusterAdmin`, ... (the
    /// service's static name: no allocation per request).
    pub grpc_service: Cow<'static, str>,
    /// `CreateSandbox`, ...
    pub grpc_method: String,
    /// The status code's name: `OK`, `UNAVAILABLE`, ... (static).
    pub grpc_code: Cow<'static, str>,
}

/// Labels of an executor effect.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EffectLabels {
    /// `create`, `start`, `stop`, `delete`, `inspect`.
    pub operation: String,
    /// The compute driver's name.
    pub driver: String,
}

/// Labels of a driver error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverErrorLabels {
    /// The operation that failed.
    pub operation: String,
    /// `rejected` (certainly no effect), `uncertain` (may have had one),
    /// `fenced` (a newer leader acted).
    pub kind: String,
}

/// Consensus: term, leadership, indexes, proposals, apply.
#[derive(Clone)]
pub struct RaftMetrics {
    /// The current Raft term.
    pub term: Gauge,
    /// 1 for the member this replica knows as leader, 0 for the others.
    pub leader: Family<NodeLabel, Gauge>,
    /// 1 while this replica leads.
    pub is_leader: Gauge,
    /// Times the leader this replica knows of changed (to another node or
    /// to none).
    pub leader_changes: Counter,
    /// Highest log index this replica knows committed.
    pub commit_index: Gauge,
    /// Highest log index applied to this replica's state machine.
    pub applied_index: Gauge,
    /// Log entries carrying a command applied by this state machine.
    pub proposals_committed: Counter,
    /// Proposals this replica made (or forwarded) that did not commit in
    /// its request, by reason.
    pub proposals_failed: Family<ReasonLabel, Counter>,
    /// Time to apply one command to the state machine.
    pub apply_seconds: Histogram,
}

impl Default for RaftMetrics {
    fn default() -> Self {
        Self {
            term: Gauge::default(),
            leader: Family::default(),
            is_leader: Gauge::default(),
            leader_changes: Counter::default(),
            commit_index: Gauge::default(),
            applied_index: Gauge::default(),
            proposals_committed: Counter::default(),
            proposals_failed: Family::default(),
            apply_seconds: latency_histogram(),
        }
    }
}

/// The durable Raft log.
#[derive(Clone)]
pub struct LogMetrics {
    /// Time to append a batch of entries durably (encode, write, fsync).
    pub append_seconds: Histogram,
    /// Time of the durable commit (the fsync) alone.
    pub fsync_seconds: Histogram,
}

impl Default for LogMetrics {
    fn default() -> Self {
        Self {
            append_seconds: latency_histogram(),
            fsync_seconds: latency_histogram(),
        }
    }
}

/// The public gRPC API.
#[derive(Clone)]
pub struct RpcMetrics {
    /// Requests finished, by method and status code.
    pub handled: Family<RpcLabels, Counter>,
    /// Request latency, by method and status code.
    pub handling_seconds: Family<RpcLabels, Histogram>,
    /// Requests being handled now.
    pub in_flight: Gauge,
    /// Requests refused before any work because the replica would not take
    /// them (draining, over a limit), by reason.
    pub shed: Family<ReasonLabel, Counter>,
    /// WatchSandboxes streams open now (`--watchers-max` caps it).
    pub watch_streams: Gauge,
    /// Applied sandbox changes converted to their API event for watchers:
    /// once per change for all watchers (more only for a watcher behind
    /// the shared feed, which converts what it missed itself).
    pub watch_events_encoded: Counter,
    /// Changes whose sending to a watch stream waited for the watchers'
    /// send budget (`--watch-events-per-second-max`).
    pub watch_events_delayed: Counter,
}

impl Default for RpcMetrics {
    fn default() -> Self {
        Self {
            handled: Family::default(),
            handling_seconds: Family::new_with_constructor(latency_histogram),
            in_flight: Gauge::default(),
            shed: Family::default(),
            watch_streams: Gauge::default(),
            watch_events_encoded: Counter::default(),
            watch_events_delayed: Counter::default(),
        }
    }
}

/// The leader's effect executor and its driver.
#[derive(Clone)]
pub struct ExecutorMetrics {
    /// Operations waiting for an effect (pending in the state, not yet
    /// being performed).
    pub queue_depth: Gauge,
    /// Time of one driver effect, by operation and driver.
    pub effect_seconds: Family<EffectLabels, Histogram>,
    /// Driver calls that failed, by operation and kind.
    pub driver_errors: Family<DriverErrorLabels, Counter>,
    /// Orphan executions found (first sightings).
    pub orphans_found: Counter,
    /// Orphan executions reaped.
    pub orphans_reaped: Counter,
}

impl Default for ExecutorMetrics {
    fn default() -> Self {
        Self {
            queue_depth: Gauge::default(),
            effect_seconds: Family::new_with_constructor(latency_histogram),
            driver_errors: Family::default(),
            orphans_found: Counter::default(),
            orphans_reaped: Counter::default(),
        }
    }
}

/// The PostgreSQL read projection (present only with `--postgres-url`).
#[derive(Clone, Default)]
pub struct ProjectionMetrics {
    /// Entries applied here and not yet projected.
    pub lag_entries: Gauge,
    /// Age of the oldest entry not yet projected.
    pub lag_seconds: FloatGauge,
}

/// The replicated state's size.
#[derive(Clone, Default)]
pub struct StateMetrics {
    /// Request receipts held for retries.
    pub receipts: Gauge,
    /// Sandboxes held.
    pub sandboxes: Gauge,
    /// Size of the state, serialized as in a snapshot: the state machine's
    /// tracked estimate (exact when last encoded, plus an upper bound of
    /// what was applied since), read without encoding the state.
    pub bytes: Gauge,
}

/// How many finished write requests the status page lists.
pub const RECENT_REQUESTS_MAX: usize = 25;

/// One finished public write request, for the status page.
#[derive(Debug, Clone)]
pub struct RecentRequest {
    /// When it finished (ms since the epoch, this replica's clock).
    pub finished_at_ms: i64,
    /// `CreateSandbox`, ...
    pub method: String,
    /// Its status code's name.
    pub code: &'static str,
    /// How long it took.
    pub seconds: f64,
    /// Its trace id.
    pub trace_id: String,
}

/// Whether a method changes something (the status page lists those):
/// reads and watches are left out, they would crowd out every write.
pub fn is_write_method(method: &str) -> bool {
    !["Get", "List", "Watch", "Check"]
        .iter()
        .any(|prefix| method.starts_with(prefix))
}

/// Every metric of one replica, registered in its own registry.
pub struct Metrics {
    registry: Registry,
    /// The last finished write requests, newest last. `std` mutex: one
    /// push per write request, never held across an await.
    recent: std::sync::Mutex<std::collections::VecDeque<RecentRequest>>,
    /// Consensus.
    pub raft: RaftMetrics,
    /// The durable log.
    pub log: LogMetrics,
    /// The public gRPC API.
    pub rpc: RpcMetrics,
    /// The effect executor.
    pub executor: ExecutorMetrics,
    /// The projection; registered only when there is one.
    pub projection: ProjectionMetrics,
    /// The state's size.
    pub state: StateMetrics,
}

impl Metrics {
    /// A replica's metrics. `with_projection`: register the projection's
    /// metrics (only a replica with `--postgres-url` has them, so their
    /// absence says "no projection", not "no lag").
    pub fn new(with_projection: bool) -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("palisade"),
            recent: Default::default(),
            raft: RaftMetrics::default(),
            log: LogMetrics::default(),
            rpc: RpcMetrics::default(),
            executor: ExecutorMetrics::default(),
            projection: ProjectionMetrics::default(),
            state: StateMetrics::default(),
        };
        metrics.register(with_projection);
        metrics
    }

    fn register(&mut self, with_projection: bool) {
        let registry = &mut self.registry;
        let raft = &self.raft;
        registry.register("raft_term", "The current Raft term", raft.term.clone());
        registry.register(
            "raft_leader",
            "1 for the member this replica knows as the leader, 0 for the other members",
            raft.leader.clone(),
        );
        registry.register(
            "raft_is_leader",
            "1 while this replica is the leader",
            raft.is_leader.clone(),
        );
        registry.register(
            "raft_leader_changes",
            "Times the leader this replica knows of changed",
            raft.leader_changes.clone(),
        );
        registry.register(
            "raft_commit_index",
            "Highest log index this replica knows committed",
            raft.commit_index.clone(),
        );
        registry.register(
            "raft_applied_index",
            "Highest log index applied to this replica's state machine",
            raft.applied_index.clone(),
        );
        registry.register(
            "raft_proposals_committed",
            "Log entries carrying a command that this replica applied",
            raft.proposals_committed.clone(),
        );
        registry.register(
            "raft_proposals_failed",
            "Proposals through this replica that did not commit within their request, by reason",
            raft.proposals_failed.clone(),
        );
        registry.register(
            "raft_apply_seconds",
            "Time to apply one command to the state machine",
            raft.apply_seconds.clone(),
        );
        registry.register(
            "raft_log_append_seconds",
            "Time from an append of a batch of entries to its durable commit (encode, the writer's queue, write, fsync)",
            self.log.append_seconds.clone(),
        );
        registry.register(
            "raft_log_fsync_seconds",
            "Time of the durable commit (fsync) of a log write",
            self.log.fsync_seconds.clone(),
        );
        let rpc = &self.rpc;
        registry.register(
            "grpc_server_handled",
            "Public gRPC requests finished, by method and status code",
            rpc.handled.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "Public gRPC request latency, by method and status code",
            rpc.handling_seconds.clone(),
        );
        registry.register(
            "grpc_server_in_flight_requests",
            "Public gRPC requests being handled",
            rpc.in_flight.clone(),
        );
        registry.register(
            "grpc_server_shed",
            "Public gRPC requests refused before any work (draining, over a limit), by reason",
            rpc.shed.clone(),
        );
        registry.register(
            "watch_streams",
            "WatchSandboxes streams open",
            rpc.watch_streams.clone(),
        );
        registry.register(
            "watch_events_encoded",
            "Sandbox changes converted to API events for watchers (once per change, shared by all watchers)",
            rpc.watch_events_encoded.clone(),
        );
        registry.register(
            "watch_events_delayed",
            "Sandbox changes whose sending to a watch stream waited for the watchers' send budget (--watch-events-per-second-max)",
            rpc.watch_events_delayed.clone(),
        );
        let executor = &self.executor;
        registry.register(
            "executor_queue_depth",
            "Operations waiting for their effect on the leader's executor",
            executor.queue_depth.clone(),
        );
        registry.register(
            "executor_effect_seconds",
            "Time of one driver effect, by operation and driver",
            executor.effect_seconds.clone(),
        );
        registry.register(
            "driver_errors",
            "Failed driver calls, by operation and kind (rejected, uncertain, fenced)",
            executor.driver_errors.clone(),
        );
        registry.register(
            "orphans_found",
            "Orphan executions the reconciler found (first sightings)",
            executor.orphans_found.clone(),
        );
        registry.register(
            "orphans_reaped",
            "Orphan executions the reconciler reaped",
            executor.orphans_reaped.clone(),
        );
        if with_projection {
            registry.register(
                "projection_lag_entries",
                "Entries applied on this replica and not yet in the PostgreSQL projection",
                self.projection.lag_entries.clone(),
            );
            registry.register(
                "projection_lag_seconds",
                "Age of the oldest entry not yet in the PostgreSQL projection",
                self.projection.lag_seconds.clone(),
            );
        }
        registry.register(
            "receipts",
            "Request receipts held for retries",
            self.state.receipts.clone(),
        );
        registry.register("sandboxes", "Sandboxes held", self.state.sandboxes.clone());
        registry.register(
            "state_bytes",
            "Size of the replicated state serialized as in a snapshot: exact when last encoded (snapshot, cluster status), plus an upper bound of what was applied since",
            self.state.bytes.clone(),
        );
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encoding metrics into a String does not fail");
        text
    }

    /// Remembers a finished write request for the status page.
    pub fn request_finished(&self, request: RecentRequest) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() == RECENT_REQUESTS_MAX {
            recent.pop_front();
        }
        recent.push_back(request);
    }

    /// The last finished write requests, newest first.
    pub fn recent_requests(&self) -> Vec<RecentRequest> {
        self.recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .rev()
            .cloned()
            .collect()
    }

    /// Records that a proposal failed, for `reason`.
    pub fn proposal_failed(&self, reason: &str) {
        self.raft
            .proposals_failed
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Records a request refused before any work, for `reason`.
    pub fn request_shed(&self, reason: &str) {
        self.rpc
            .shed
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Sets the leader gauges: 1 for `leader`, 0 for the other `members`.
    pub fn set_leader(&self, leader: Option<u64>, members: impl IntoIterator<Item = u64>) {
        self.raft.leader.clear();
        for member in members {
            self.raft
                .leader
                .get_or_create(&NodeLabel {
                    node_id: member.to_string(),
                })
                .set(i64::from(Some(member) == leader));
        }
    }

    /// Records the time of one driver effect.
    pub fn effect_observed(&self, operation: &str, driver: &str, seconds: f64) {
        self.executor
            .effect_seconds
            .get_or_create(&EffectLabels {
                operation: operation.to_string(),
                driver: driver.to_string(),
            })
            .observe(seconds);
    }

    /// Records a failed driver call.
    pub fn driver_error(&self, operation: &str, kind: &str) {
        self.executor
            .driver_errors
            .get_or_create(&DriverErrorLabels {
                operation: operation.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition parses as Prometheus text, with conventional names.
    #[test]
    fn exposition_parses_with_conventional_names() {
        let metrics = Metrics::new(true);
        metrics.raft.leader_changes.inc();
        metrics.set_leader(Some(2), [1, 2, 3]);
        metrics.log.fsync_seconds.observe(0.002);
        metrics.proposal_failed("outcome_pending");
        let text = metrics.encode();
        let lines = text.lines().map(|line| Ok(line.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let value = |name: &str, label: Option<(&str, &str)>| {
            scrape
                .samples
                .iter()
                .find(|sample| {
                    sample.metric == name
                        && label.is_none_or(|(key, value)| sample.labels.get(key) == Some(value))
                })
                .map(|sample| sample.value.clone())
        };
        // The parser reads an OpenMetrics counter's `_total` sample as
        // untyped; its value is what counts.
        assert_eq!(
            value("palisade_raft_leader_changes_total", None),
            Some(prometheus_parse::Value::Untyped(1.0))
        );
        assert_eq!(
            value("palisade_raft_leader", Some(("node_id", "2"))),
            Some(prometheus_parse::Value::Gauge(1.0))
        );
        assert_eq!(
            value("palisade_raft_leader", Some(("node_id", "3"))),
            Some(prometheus_parse::Value::Gauge(0.0))
        );
        assert!(value("palisade_raft_log_fsync_seconds", None).is_some());
        assert!(text.contains("palisade_projection_lag_seconds"));
        assert!(!Metrics::new(false).encode().contains("projection_lag"));
    }
}
