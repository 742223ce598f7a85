//! The openraft type configuration of Palisade and the aliases built on it.

use std::sync::Arc;

use palisade_lifecycle::{Command, Response};

openraft::declare_raft_types!(
    /// Palisade's Raft types: lifecycle commands in, lifecycle responses out,
    /// `u64` node ids, and the standard leader id (one leader per term), so
    /// that "the term I started in" fences a deposed leader.
    ///
    /// A command is held behind an `Arc` because openraft's log reader
    /// answers owned entries: the leader's state machine and each
    /// follower's replication stream take a copy of every entry the log
    /// keeps in memory, and deep copies of the commands (their strings and
    /// maps) were ~2 % of a three-replica cluster's CPU at 256 clients.
    /// An `Arc<T>` encodes exactly as `T` (serde's `rc`), so neither the
    /// log's nor the peers' bytes change.
    pub TypeConfig:
        D = Arc<Command>,
        R = Response,
        NodeId = u64,
        Node = openraft::impls::BasicNode,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        AsyncRuntime = crate::runtime::PalisadeRuntime,
);

/// A node id.
pub type NodeId = u64;
/// A node's address record in the membership.
pub type Node = openraft::impls::BasicNode;
/// The Raft handle of a Palisade replica.
pub type Raft = openraft::Raft<TypeConfig, crate::state_machine::LifecycleStateMachine>;
/// A log id.
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A log entry.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A vote.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// Bytes of a serialized snapshot, in a file (never all in memory: see
/// `palisade_storage::snapshot_bytes`).
pub type SnapshotData = palisade_storage::SnapshotBytes;
/// A snapshot.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// Stored membership.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// The committed leader id (term + node).
pub type LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>;
