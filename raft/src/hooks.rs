//! Fault-injection hooks for tests and the chaos harness (`palisade-chaos`):
//! where a replica lets a harness interfere. Production replicas run
//! without any (every hook is optional and absent by default), and an
//! absent hook costs one `Option` check.
//!
//! - [`LinkFaults`]: consulted by the peer transport
//!   ([`PeerClients`](crate::network::PeerClients)) before each message to
//!   another replica: deliver it, drop it (reported as unreachable), delay
//!   it, deliver it twice, or deliver it and lose the answer. Partitions and
//!   message loss are built on it.
//! - [`FaultPoints`]: awaited at chosen points inside a request, so that a
//!   harness can hand leadership off, crash the replica, or hold the task
//!   exactly there: after a `Begin*` entry committed (before the effect),
//!   after the driver effect (before `Complete*` is proposed), while a
//!   follower forwards a write to the leader, while a snapshot is
//!   installed, and between a snapshot build's copy and its save.
//!
//! The traits live here, at the bottom of the crates that call them
//! (`palisade-raft` for the transport and the state machine,
//! `palisade-gateway` for the executor), so that no production crate
//! depends on the harness.

use std::fmt::Debug;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::types::NodeId;

/// The kinds of peer messages, as [`LinkFaults`] sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerRpc {
    /// A unary AppendEntries.
    AppendEntries,
    /// One request on a streamed AppendEntries.
    StreamAppend,
    /// A vote or pre-vote request.
    Vote,
    /// A snapshot transfer.
    InstallSnapshot,
    /// A leadership transfer.
    TransferLeader,
    /// A client write forwarded to the leader.
    ForwardWrite,
    /// A read-index request to the leader.
    ReadIndex,
}

/// What happens to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkVerdict {
    /// Delivered normally.
    Deliver,
    /// Not delivered; the sender sees the peer as unreachable.
    Drop,
    /// Delivered after this delay (counted against the message's deadline).
    Delay(Duration),
    /// Delivered twice; the sender sees one of the answers. (Streamed
    /// AppendEntries requests, snapshots and read-index requests are
    /// delivered once: a stream cannot carry a duplicate without breaking
    /// its request/response pairing, and a duplicate read changes nothing.)
    Duplicate,
    /// Delivered, and its answer lost: the sender sees the peer as
    /// unreachable although the message took effect. (On a stream, and for
    /// a snapshot, this cuts it, like [`LinkVerdict::Drop`].)
    DropReply,
}

/// Decides the fate of each peer message. Called before every message,
/// from any task: keep it quick and non-blocking.
pub trait LinkFaults: Send + Sync + Debug + 'static {
    /// The verdict for a message of kind `rpc` from `from` to `to`.
    fn verdict(&self, from: NodeId, to: NodeId, rpc: PeerRpc) -> LinkVerdict;
}

/// A point inside a request where a harness may interfere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultPoint {
    /// The executor took up an operation whose `Begin*` entry committed,
    /// and is about to perform its driver effect.
    BeginCommitted {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind (`Create`, `Stop`, `Start`, `Delete`).
        operation: String,
        /// Target generation.
        generation: u64,
        /// The term the executor runs in.
        term: u64,
    },
    /// The executor confirmed its leadership in its term and re-read the
    /// pending operation, and is about to call the driver: the
    /// check-then-act window that only the driver's own fence closes.
    BeforeEffect {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        operation: String,
        /// Target generation.
        generation: u64,
        /// The term the executor runs in.
        term: u64,
    },
    /// The executor performed the driver effect and is about to propose
    /// the matching `Complete*` entry.
    EffectDone {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        operation: String,
        /// Target generation.
        generation: u64,
        /// The term the executor runs in.
        term: u64,
    },
    /// A follower is about to forward a client write to the leader.
    Forwarding {
        /// The leader it forwards to.
        leader: NodeId,
        /// The command's name (`BeginCreate`, ...).
        command: &'static str,
    },
    /// The state machine received a snapshot and is about to install it.
    SnapshotInstall {
        /// Last log index the snapshot covers.
        last_index: u64,
    },
    /// A snapshot build copied the state and is about to serialize and
    /// save it: held here, the build finishes after whatever happens
    /// meanwhile (a newer snapshot installed from the leader).
    SnapshotBuild {
        /// Last log index the copy covers.
        last_index: u64,
    },
}

impl FaultPoint {
    /// Short name of the point: `begin-committed`, `before-effect`,
    /// `effect-done`, `forwarding`, `snapshot-install`, `snapshot-build`.
    pub fn name(&self) -> &'static str {
        match self {
            FaultPoint::BeginCommitted { .. } => "begin-committed",
            FaultPoint::BeforeEffect { .. } => "before-effect",
            FaultPoint::EffectDone { .. } => "effect-done",
            FaultPoint::Forwarding { .. } => "forwarding",
            FaultPoint::SnapshotInstall { .. } => "snapshot-install",
            FaultPoint::SnapshotBuild { .. } => "snapshot-build",
        }
    }
}

/// Awaited at every [`FaultPoint`]. The returned future runs in the task
/// that reached the point: it may sleep (holding that task there), trigger
/// a leadership transfer, or never finish (the harness crashes the replica
/// meanwhile). Most calls should return a ready future.
pub trait FaultPoints: Send + Sync + Debug + 'static {
    /// Node `node` reached `point`.
    fn at(&self, node: NodeId, point: FaultPoint) -> BoxFuture<'static, ()>;

    /// Node `node` is applying the command at log index `index`: called
    /// inside the state machine's critical section, after the command
    /// changed the state and before the applied index moved (a half-applied
    /// state). Synchronous and must be quick; a harness may panic here to
    /// test fail-stop (a panic in apply). Does nothing by default.
    fn applying(&self, node: NodeId, index: u64) {
        let _ = (node, index);
    }
}

/// What happens to one append to the Raft log ([`StorageFaults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFault {
    /// Written normally.
    Proceed,
    /// Nothing written; the append fails with this error (an fsync error,
    /// a full disk). openraft stops the replica's Raft on a storage error:
    /// the replica fail-stops.
    Fail(std::io::ErrorKind),
    /// Only the first `keep` entries of the batch are written and made
    /// durable; the append never completes (the write was cut short, and
    /// the harness crashes the replica before it would have finished).
    Torn {
        /// Entries of the batch that reach the disk.
        keep: usize,
    },
}

/// Consulted before every append to a replica's Raft log, when the
/// replica runs with [`crate::faulty_log::FaultyLogStore`]. Quick and
/// non-blocking.
pub trait StorageFaults: Send + Sync + Debug + 'static {
    /// The fate of an append of `entries` entries on node `node`.
    fn append(&self, node: NodeId, entries: usize) -> AppendFault;
}
