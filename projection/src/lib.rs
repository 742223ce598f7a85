//! Palisade's read projection: the replicated lifecycle state, kept in
//! PostgreSQL for SQL consumers (dashboards, audit, billing) and for large
//! `ListSandboxes` queries.
//!
//! This crate owns the projection's schema (`migrations/`), the projector
//! that keeps it up to date, the queries the gateway serves from it, and
//! the in-process harness that runs it against a real PostgreSQL (the
//! server itself is `palisade_testkit::TestPostgres`). It is its own
//! crate so that sqlx stays out of `palisade-storage`'s build; it sits
//! between `palisade-raft` and `palisade-gateway`.
//!
//! # Key decision: exactly once by log index, from the log
//!
//! The projection is a function of the committed Raft log, like every
//! replica's state. The projector reads committed entries from its
//! replica's log (never from the write path: PostgreSQL being down or slow
//! never holds up a write), replays them through the pure
//! [`palisade_lifecycle::apply()`] on a shadow copy of the state to learn
//! each entry's outcome and the rows it changed, and writes each batch in
//! one transaction that also advances a checkpoint row with a guarded
//! update (`WHERE applied_index < $new AND applied_index = $from`). A
//! batch is therefore applied entirely or not at all, and at most once:
//! replay after a crash, a restart or a leader handoff starts from the
//! checkpoint, and two projectors racing serialize on the checkpoint row
//! — the loser rolls back and reloads. Every entry's command lands in the
//! append-only `lifecycle_events` table under its log index (the primary
//! key), exactly once. The table keeps the last
//! [`ProjectionConfig::events_kept_entries`] entries' rows: older ones are
//! deleted as the projection advances, so it stays bounded.
//!
//! The leader projects; the others stand by (see [`projector`] for why,
//! and how the shadow state is obtained at start-up). When the log was
//! compacted past the checkpoint (PostgreSQL was away for long), the
//! projector resyncs all rows from the replica's current state in one
//! transaction and records the gap in `projection_resyncs`.
//!
//! Owned records go with their sandbox in one set-based statement
//! ([`store::REMOVE_SANDBOXES_SQL`]), however many there are.
//!
//! # Layout
//!
//! - [`source`]: what the projector reads — [`ReplicaSource`], and
//!   [`RaftReplica`], the production source (redb log + state handle).
//! - `changes` (private): the pure part — shadow state, changed rows,
//!   events; and [`ProjectedRows`], the projection as rows.
//! - [`store`]: every SQL statement, the migrations, the checkpoint.
//! - [`projector`]: the projecting loop, retries, resync, leadership.
//! - [`query`]: [`Projection`], the gateway's handle: status,
//!   read-your-writes waits, `list_sandboxes`.
//! - [`status`]: [`ProjectionStatus`] and lag measurement.
//! - [`memory`], [`workload`]: an in-process replica and a seeded random
//!   lifecycle workload, for tests, the benchmark and the chaos harness.
#![deny(missing_docs)]

mod changes;
pub mod error;
pub mod memory;
pub mod projector;
pub mod query;
pub mod source;
pub mod status;
pub mod store;
pub mod workload;

pub use changes::{
    ProjectedRows, SHADOW_INTERVAL_CLOCK_MS, SHADOW_RECEIPTS_HORIZON_MS, SessionRow,
};
pub use error::ProjectionError;
pub use memory::MemoryReplica;
pub use projector::{ProjectionConfig, Projector, spawn};
pub use query::{Projection, SandboxPage, SandboxQuery};
pub use source::{LogRecord, Payload, RaftReplica, ReplicaSource};
pub use status::{ProjectionStatus, ProjectorState};
pub use store::{BatchStage, Checkpoint, StageHook};
