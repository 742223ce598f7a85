//! The wire contract shared with [`peer_service`](crate::peer_service): what
//! each `payload` holds, how it is encoded, and the size limits both sides
//! enforce. Changing anything here changes what the other replicas must
//! understand.

use openraft::errors::{ClientWriteError, Fatal, RaftError};
use openraft::raft::{
    AppendEntriesResponse, ClientWriteResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderResponse, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::{SnapshotMeta, TypeConfig, Vote};

/// Largest piece of snapshot data sent in one `SnapshotChunk`. openraft's
/// `snapshot_max_chunk_size` can only make chunks smaller.
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 1024 * 1024;

/// Largest snapshot a replica sends or accepts. Snapshots are files on
/// both ends (`palisade_storage::snapshot_bytes`), so this bounds the disk
/// a transfer may fill on the receiver, not its memory.
pub const SNAPSHOT_BYTES_MAX: u64 = 16 * 1024 * 1024 * 1024;

/// Largest encoded peer message, either way. AppendEntries batches are
/// bounded by openraft's `max_payload_entries` and commands by the
/// lifecycle limits; this only keeps a confused peer from making us buffer
/// without bound (tonic's own default, 4 MiB, is too tight for a batch).
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// `AppendEntries` reply payload.
pub(crate) type AppendReply = Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>;
/// One `StreamAppend` reply payload (one per request, in order).
pub(crate) type StreamAppendReply = Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>;
/// `Vote` and `PreVote` reply payload.
pub(crate) type VoteReply = Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>;
/// `InstallSnapshot` reply payload.
pub(crate) type SnapshotReply = Result<SnapshotResponse<TypeConfig>, Fatal<TypeConfig>>;
/// `TransferLeader` reply payload.
pub(crate) type TransferLeaderReply = Result<TransferLeaderResponse<TypeConfig>, Fatal<TypeConfig>>;
/// `ReadIndex` reply payload: the read index, or why the leader could not
/// confirm its leadership.
pub(crate) type ReadIndexReply = Result<u64, String>;
/// `ForwardWrite` reply payload.
pub(crate) type ForwardWriteReply =
    Result<ClientWriteResponse<TypeConfig>, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>;

/// The `header` of a snapshot transfer's first chunk.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotHeader {
    /// The sending leader's vote, passed to `Raft::install_full_snapshot`.
    pub(crate) vote: Vote,
    /// What the snapshot covers.
    pub(crate) meta: SnapshotMeta,
    /// Total bytes of snapshot data that follow; the receiver installs only
    /// when it got exactly this many, so a cut transfer is never installed.
    pub(crate) size_bytes: u64,
}

/// Encodes a payload.
///
/// Panics only on a programmer error: every payload is an openraft or
/// lifecycle type with derived `Serialize`, whose maps have string or
/// integer keys, and serde_json cannot fail on such values.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value)
        .expect("peer payloads are derived-Serialize types with string or integer map keys")
}

/// Decodes a payload; an error means the peer speaks another version.
pub(crate) fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(payload)
}
