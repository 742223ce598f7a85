//! The client side of the peer transport (`palisade.peer.v1.RaftPeer` over
//! tonic): how this replica sends openraft's messages, and forwarded client
//! writes, to the other replicas.
//!
//! # What it owns
//!
//! - [`PeerClients`]: the cheap-to-clone handle on this replica's outgoing
//!   connections. It caches ONE lazily connected `tonic` [`Channel`] per
//!   peer, keyed by node id and replaced when the node's address changes.
//!   Every Raft stream to a peer (replication, heartbeats, votes, snapshots)
//!   and every forwarded write multiplexes over that one HTTP/2 connection;
//!   a channel reconnects by itself after the peer comes back.
//! - [`PeerNetworkFactory`]: openraft's [`RaftNetworkFactory`], handing out
//!   [`PeerClient`]s built on those channels.
//! - [`PeerClient`]: openraft's [`RaftNetworkV2`] for one target node.
//! - [`PeerClients::forward_write`] and [`ForwardError`]: a follower's way to
//!   hand a client write to the leader.
//! - [`PeerClients::with_hooks`]: the fault-injection hooks of tests and the
//!   chaos harness ([`crate::hooks`]): a link-fault verdict before every
//!   message, a fault point before every forwarded write. Absent in
//!   production.
//! - The wire contract shared with [`peer_service`](crate::peer_service):
//!   what each `payload` holds and the limits both sides enforce.
//!
//! # Decisions
//!
//! - **Payloads are openraft's own serde types**, in the binary encoding
//!   once the cluster's feature level allows it, JSON before (`wire`).
//!   Each reply payload is the whole `Result` the remote `Raft` method
//!   returned, so a remote openraft error (a fatal stop, `ForwardToLeader`,
//!   ...) crosses the wire intact and is rebuilt here. Transport-level refusals (not a member,
//!   misrouted, undecodable) travel as gRPC statuses instead.
//! - **Both ends check identity.** Every message carries `from_node` and
//!   `to_node`; the receiver refuses a message meant for another node or
//!   sent by a non-member, and this side refuses a reply whose `from_node`
//!   is not the node it meant to reach (an address now served by another
//!   replica). openraft asks the network to "ensure connection to the
//!   correct node"; this is how.
//! - **Deadlines come from openraft.** Unary RPCs use `RPCOption::soft_ttl()`
//!   both as the gRPC deadline (`grpc-timeout`, so the receiver gives up
//!   too) and as a local timer, so an answer is always back before
//!   openraft's hard limit. Streams (append, snapshot) use it as a progress
//!   deadline: a response must follow a request, a chunk must be accepted,
//!   within `soft_ttl`, but a healthy long stream is never cut.
//! - **AppendEntries is streamed** (`StreamAppend`, a bidi stream): openraft
//!   pipelines requests and the follower's `Raft::stream_append` answers in
//!   order, so a write does not wait for the previous batch's round trip.
//!   The unary `append_entries` is kept for openraft's other callers.
//! - **Errors keep openraft's meaning.** A peer that cannot be reached, or
//!   refuses us, or whose Raft stopped, is `Unreachable` (openraft backs off
//!   with [`backoff_delays`]); a deadline is `Timeout`; other transport
//!   failures are `Network` (openraft retries at once).
//!
//! # Layout
//!
//! - `wire`: the wire contract: payload types, their encoding, size limits.
//! - `channels`: [`PeerClients`] and its cached channels, connection
//!   settings, the retry backoff, the link-fault hook, and how gRPC
//!   statuses are classified.
//! - `forward`: forwarded writes and read indexes, [`ForwardError`].
//! - `client`: [`PeerNetworkFactory`] and [`PeerClient`], openraft's network.
//! - `append_stream`: the streamed AppendEntries.
//!
//! [`Channel`]: tonic::transport::Channel
//! [`RaftNetworkFactory`]: openraft::RaftNetworkFactory
//! [`RaftNetworkV2`]: openraft::RaftNetworkV2

mod append_stream;
mod channels;
mod client;
mod forward;
mod wire;

pub use channels::{
    BACKOFF_GROWTH, BACKOFF_INITIAL, BACKOFF_MAX, CONNECT_TIMEOUT, KEEPALIVE_INTERVAL,
    KEEPALIVE_TIMEOUT, PeerClients, backoff_delays,
};
pub use client::{PeerClient, PeerNetworkFactory};
pub use forward::ForwardError;
pub(crate) use wire::{
    AppendReply, DecodeError, Encoding, ForwardWriteReply, ReadIndexReply, SnapshotHeader,
    SnapshotReply, StreamAppendReply, TransferLeaderReply, VoteReply, decode, encode, encoding_of,
};
pub use wire::{PEER_MESSAGE_BYTES_MAX, SNAPSHOT_BYTES_MAX, SNAPSHOT_CHUNK_BYTES_MAX};
