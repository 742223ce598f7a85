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
//! - **Payloads are openraft's own serde types, as JSON.** Each reply payload
//!   is the whole `Result` the remote `Raft` method returned, so a remote
//!   openraft error (a fatal stop, `ForwardToLeader`, ...) crosses the wire
//!   intact and is rebuilt here. Transport-level refusals (not a member,
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

use std::collections::HashMap;
use std::error::Error as _;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{
    ClientWriteError, Fatal, ForwardReason, NetworkError, RPCError, RaftError, ReplicationClosed,
    StreamingError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteResponse, SnapshotResponse,
    StreamAppendResult, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use palisade_lifecycle::Command;
use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use palisade_proto::peer::{PeerMessage, SnapshotChunk};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::hooks::{FaultPoint, FaultPoints, LinkFaults, LinkVerdict, PeerRpc};
use crate::types::{Node, NodeId, Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Largest piece of snapshot data sent in one `SnapshotChunk`. openraft's
/// `snapshot_max_chunk_size` can only make chunks smaller.
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 1024 * 1024;

/// Largest snapshot a replica sends or accepts. The receiver holds the whole
/// snapshot in memory until it is installed, so this bounds that memory.
pub const SNAPSHOT_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Snapshot chunks queued ahead of the transport: enough to keep the
/// connection busy, few enough that a stalled peer holds little memory.
const SNAPSHOT_CHUNKS_QUEUED_MAX: usize = 2;

/// Largest encoded peer message, either way. AppendEntries batches are
/// bounded by openraft's `max_payload_entries` and commands by the
/// lifecycle limits; this only keeps a confused peer from making us buffer
/// without bound (tonic's own default, 4 MiB, is too tight for a batch).
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// First pause openraft makes before retrying an unreachable peer.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(50);

/// Longest pause between retries to an unreachable peer: a replica that
/// comes back is caught up at most this long after it can be reached.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Factor by which the pause grows after each failed retry.
pub const BACKOFF_GROWTH: u32 = 2;

/// Time allowed to open a TCP connection to a peer. An RPC's own deadline
/// cuts it shorter when the RPC has less time left.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Interval of HTTP/2 pings on an idle peer connection, so that a
/// connection silently lost in a partition is noticed and reopened.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// How long a ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Wire contract, shared with `peer_service`.
// ---------------------------------------------------------------------------

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

/// The pauses openraft makes between retries to an unreachable peer:
/// [`BACKOFF_INITIAL`], growing by [`BACKOFF_GROWTH`] up to [`BACKOFF_MAX`].
/// No jitter: a leader has one stream per follower, so there is no herd of
/// retries to spread, and a fixed sequence keeps tests deterministic.
pub fn backoff_delays() -> impl Iterator<Item = Duration> + Send + 'static {
    std::iter::successors(Some(BACKOFF_INITIAL), |delay| {
        Some(delay.saturating_mul(BACKOFF_GROWTH).min(BACKOFF_MAX))
    })
}

// ---------------------------------------------------------------------------
// Channels.
// ---------------------------------------------------------------------------

/// This replica's outgoing peer connections: cheap to clone, shared by the
/// Raft network factory and by the gateway (for [`forward_write`]).
///
/// [`forward_write`]: PeerClients::forward_write
#[derive(Clone, Debug)]
pub struct PeerClients {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// This replica's node id, sent as `from_node` on every message.
    node_id: NodeId,
    /// One channel per peer. A `std` mutex: it is held only to look up or
    /// insert an entry, never across an await. Bounded by the number of node
    /// ids ever seen in the membership (an entry is replaced, not added, when
    /// a node's address changes).
    channels: Mutex<HashMap<NodeId, CachedChannel>>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    link_faults: Option<Arc<dyn LinkFaults>>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    fault_points: Option<Arc<dyn FaultPoints>>,
}

#[derive(Debug)]
struct CachedChannel {
    addr: String,
    channel: Channel,
}

impl PeerClients {
    /// Outgoing connections of the replica `node_id`. Connects nothing yet:
    /// each peer's connection opens on its first message.
    pub fn new(node_id: NodeId) -> Self {
        Self {
            shared: Arc::new(Shared {
                node_id,
                channels: Mutex::new(HashMap::new()),
                link_faults: None,
                fault_points: None,
            }),
        }
    }

    /// The same connections with fault-injection hooks, for tests and the
    /// chaos harness: `link_faults` decides the fate of every outgoing
    /// message, `fault_points` is awaited before every forwarded write.
    /// Call it right after [`PeerClients::new`], before any clone is made.
    pub fn with_hooks(
        self,
        link_faults: Option<Arc<dyn LinkFaults>>,
        fault_points: Option<Arc<dyn FaultPoints>>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                node_id: self.shared.node_id,
                channels: Mutex::new(HashMap::new()),
                link_faults,
                fault_points,
            }),
        }
    }

    /// The link-fault verdict for a message to `to` (deliver, without hooks).
    fn verdict(&self, to: NodeId, rpc: PeerRpc) -> LinkVerdict {
        link_verdict(self.shared.link_faults.as_ref(), self.node_id(), to, rpc)
    }

    /// This replica's node id.
    pub fn node_id(&self) -> NodeId {
        self.shared.node_id
    }

    /// The openraft network factory that sends over these connections; pass
    /// it to `Raft::new`.
    pub fn network_factory(&self) -> PeerNetworkFactory {
        PeerNetworkFactory {
            clients: self.clone(),
        }
    }

    /// A gRPC client for `target` at `addr`, on the cached channel. Must run
    /// inside a tokio runtime: a new channel spawns its connection task.
    fn rpc_client(&self, target: NodeId, addr: &str) -> Result<RaftPeerClient<Channel>, String> {
        let channel = {
            let mut channels = self
                .shared
                .channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match channels.get(&target) {
                Some(cached) if cached.addr == addr => cached.channel.clone(),
                _ => {
                    let channel = endpoint(addr)
                        .map_err(|error| {
                            format!("node {target} has an invalid address {addr:?}: {error}")
                        })?
                        .connect_lazy();
                    channels.insert(
                        target,
                        CachedChannel {
                            addr: addr.to_owned(),
                            channel: channel.clone(),
                        },
                    );
                    channel
                }
            }
        };
        Ok(RaftPeerClient::new(channel)
            .max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(PEER_MESSAGE_BYTES_MAX))
    }

    /// Forwards a client write to the leader `leader` at `leader_addr`,
    /// which proposes it with `Raft::client_write` and answers once it is
    /// applied. Gives up after `timeout`.
    ///
    /// On [`ForwardError::NotLeader`] nothing was written: retry at the
    /// leader it names. Every error for which
    /// [`ForwardError::outcome_unknown`] holds may or may not have been
    /// committed: retry with the same request id, never assume failure.
    pub async fn forward_write(
        &self,
        leader: NodeId,
        leader_addr: &str,
        command: Command,
        timeout: Duration,
    ) -> Result<ClientWriteResponse<TypeConfig>, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable {
            target: leader,
            addr: leader_addr.to_owned(),
            reason,
        };
        if let Some(fault_points) = &self.shared.fault_points {
            let point = FaultPoint::Forwarding {
                leader,
                command: command.name(),
            };
            fault_points.at(self.node_id(), point).await;
        }
        let mut client = self.rpc_client(leader, leader_addr).map_err(unreachable)?;
        let verdict = self.verdict(leader, PeerRpc::ForwardWrite);
        match verdict {
            LinkVerdict::Drop => {
                return Err(ForwardError::NotDelivered {
                    target: leader,
                    addr: leader_addr.to_owned(),
                    reason: "link fault: message dropped".into(),
                });
            }
            LinkVerdict::Delay(delay) => tokio::time::sleep(delay.min(timeout)).await,
            LinkVerdict::Duplicate => {
                let mut duplicate = tonic::Request::new(PeerMessage {
                    from_node: self.node_id(),
                    to_node: leader,
                    payload: encode(&command),
                });
                duplicate.set_timeout(timeout);
                let mut copy = client.clone();
                let _ = tokio::time::timeout(timeout, copy.forward_write(duplicate)).await;
            }
            LinkVerdict::Deliver | LinkVerdict::DropReply => {}
        }
        let mut request = tonic::Request::new(PeerMessage {
            from_node: self.node_id(),
            to_node: leader,
            payload: encode(&command),
        });
        request.set_timeout(timeout);
        let reply = match tokio::time::timeout(timeout, client.forward_write(request)).await {
            Err(_elapsed) => {
                return Err(ForwardError::Timeout {
                    target: leader,
                    after: timeout,
                });
            }
            // No connection could be opened: the request never left.
            Ok(Err(status)) if is_connect_failure(&status) => {
                return Err(ForwardError::NotDelivered {
                    target: leader,
                    addr: leader_addr.to_owned(),
                    reason: describe_status(&status),
                });
            }
            Ok(Err(status)) => {
                return Err(match classify(&status) {
                    Failure::Timeout => ForwardError::Timeout {
                        target: leader,
                        after: timeout,
                    },
                    // Refusals come before the command is looked at.
                    Failure::Refused => ForwardError::Refused {
                        target: leader,
                        code: status.code(),
                        message: status.message().to_owned(),
                    },
                    Failure::Unreachable | Failure::Network => {
                        unreachable(describe_status(&status))
                    }
                });
            }
            Ok(Ok(response)) => response.into_inner(),
        };
        if verdict == LinkVerdict::DropReply {
            return Err(unreachable("link fault: the answer was lost".into()));
        }
        if reply.from_node != leader {
            return Err(ForwardError::Refused {
                target: leader,
                code: Code::FailedPrecondition,
                message: format!(
                    "{leader_addr} answered as node {}, not node {leader}",
                    reply.from_node
                ),
            });
        }
        let reply: ForwardWriteReply = decode(&reply.payload).map_err(|error| {
            // The leader may have applied the write; only its answer is unreadable.
            unreachable(format!("undecodable ForwardWrite reply: {error}"))
        })?;
        match reply {
            Ok(response) => Ok(response),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(ForwardError::NotLeader {
                    target: leader,
                    leader_id: forward.leader_id,
                    leader_node: forward.leader_node,
                    reason: forward.reason,
                })
            }
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(forward))) => {
                Err(ForwardError::Discarded {
                    target: leader,
                    leader_id: forward.leader_id,
                    leader_node: forward.leader_node,
                })
            }
            Err(RaftError::APIError(error)) => Err(ForwardError::Rejected {
                target: leader,
                error,
            }),
            Err(RaftError::Fatal(error)) => Err(ForwardError::RemoteFatal {
                target: leader,
                error,
            }),
        }
    }
}

impl PeerClients {
    /// Asks the leader `leader` at `leader_addr` for a read index: the leader
    /// confirms with a quorum that it still leads and answers the log index
    /// this replica must apply before a linearizable read. Gives up after
    /// `timeout`. Reads change nothing, so every error is safe to retry.
    pub async fn read_index(
        &self,
        leader: NodeId,
        leader_addr: &str,
        timeout: Duration,
    ) -> Result<u64, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable {
            target: leader,
            addr: leader_addr.to_owned(),
            reason,
        };
        let mut client = self.rpc_client(leader, leader_addr).map_err(unreachable)?;
        let verdict = self.verdict(leader, PeerRpc::ReadIndex);
        match verdict {
            LinkVerdict::Drop => return Err(unreachable("link fault: message dropped".into())),
            LinkVerdict::Delay(delay) => tokio::time::sleep(delay.min(timeout)).await,
            _ => {}
        }
        let mut request = tonic::Request::new(PeerMessage {
            from_node: self.node_id(),
            to_node: leader,
            payload: encode(&()),
        });
        request.set_timeout(timeout);
        let reply = match tokio::time::timeout(timeout, client.read_index(request)).await {
            Err(_elapsed) => {
                return Err(ForwardError::Timeout {
                    target: leader,
                    after: timeout,
                });
            }
            Ok(Err(status)) => return Err(unreachable(describe_status(&status))),
            Ok(Ok(response)) => response.into_inner(),
        };
        if verdict == LinkVerdict::DropReply {
            return Err(unreachable("link fault: the answer was lost".into()));
        }
        if reply.from_node != leader {
            return Err(ForwardError::Refused {
                target: leader,
                code: Code::FailedPrecondition,
                message: format!(
                    "{leader_addr} answered as node {}, not node {leader}",
                    reply.from_node
                ),
            });
        }
        let reply: ReadIndexReply = decode(&reply.payload)
            .map_err(|error| unreachable(format!("undecodable ReadIndex reply: {error}")))?;
        reply.map_err(|refusal| ForwardError::Refused {
            target: leader,
            code: Code::Unavailable,
            message: refusal,
        })
    }
}

/// The tonic endpoint for a peer address (`host:port`, or a full URI).
fn endpoint(addr: &str) -> Result<Endpoint, tonic::transport::Error> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)?
        .connect_timeout(CONNECT_TIMEOUT)
        // Raft messages are small and latency-bound.
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

/// Why a forwarded write failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The target refused the write before appending it: nothing was
    /// written. It is not the leader (any more), or it is handing leadership
    /// over, or it is a leader not yet (or no longer) acknowledged by a
    /// quorum (`reason` says which). Retry at `leader_id` when known, else
    /// shortly at the same or another replica.
    #[error(
        "node {target} does not take writes now ({reason:?}); {}",
        leader_hint(.leader_id, .leader_node)
    )]
    NotLeader {
        /// The node the write was sent to.
        target: NodeId,
        /// The leader it knows of, if any.
        leader_id: Option<NodeId>,
        /// That leader's address record, if known.
        leader_node: Option<Node>,
        /// Why it refused.
        reason: ForwardReason,
    },
    /// The leader appended the write, then lost its log entry to another
    /// leader's log: the write may still commit. Outcome unknown.
    #[error(
        "node {target} lost leadership after appending the write; its outcome is unknown, \
         retry with the same request id; {}",
        leader_hint(.leader_id, .leader_node)
    )]
    Discarded {
        /// The node the write was sent to.
        target: NodeId,
        /// The leader it knows of now, if any.
        leader_id: Option<NodeId>,
        /// That leader's address record, if known.
        leader_node: Option<Node>,
    },
    /// No answer within the deadline. Outcome unknown.
    #[error(
        "node {target} did not answer within {after:?}; the write's outcome is unknown, \
         retry with the same request id"
    )]
    Timeout {
        /// The node the write was sent to.
        target: NodeId,
        /// The deadline that passed.
        after: Duration,
    },
    /// The target could not be reached, or the connection broke. Outcome
    /// unknown (the write may have been sent before the break).
    #[error(
        "node {target} at {addr} is unreachable ({reason}); the write's outcome is unknown, \
         retry with the same request id"
    )]
    Unreachable {
        /// The node the write was sent to.
        target: NodeId,
        /// Its address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// No connection to the target could be opened (refused, no route,
    /// connect timeout): the write was never sent, so nothing was written.
    /// The target is likely down; retry once a leader is known again.
    #[error("node {target} at {addr} cannot be reached ({reason}); the write was not sent")]
    NotDelivered {
        /// The node the write was sent to.
        target: NodeId,
        /// Its address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// The target refused the message before looking at the command (this
    /// replica is not in its membership, the address points at another
    /// node, ...): nothing was written. A configuration problem.
    #[error("node {target} refused the forwarded write ({code:?}): {message}")]
    Refused {
        /// The node the write was sent to.
        target: NodeId,
        /// The gRPC status code of the refusal.
        code: Code,
        /// Its message.
        message: String,
    },
    /// The target's Raft has stopped (shutdown, storage failure). Outcome
    /// unknown: it may have stopped after appending the write.
    #[error(
        "node {target}'s Raft has stopped ({error}); the write's outcome is unknown, \
         retry with the same request id at another replica"
    )]
    RemoteFatal {
        /// The node the write was sent to.
        target: NodeId,
        /// Why it stopped.
        error: Fatal<TypeConfig>,
    },
    /// openraft rejected the write for another reason (a membership change
    /// or precondition error; not expected for a plain command). Nothing
    /// was written.
    #[error("node {target} rejected the write: {error}")]
    Rejected {
        /// The node the write was sent to.
        target: NodeId,
        /// openraft's reason.
        error: ClientWriteError<TypeConfig>,
    },
}

impl ForwardError {
    /// Whether the write may have been (or may still be) committed: the
    /// caller must resolve it by retrying with the same request id.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            ForwardError::Discarded { .. }
            | ForwardError::Timeout { .. }
            | ForwardError::Unreachable { .. }
            | ForwardError::RemoteFatal { .. } => true,
            ForwardError::NotLeader { .. }
            | ForwardError::NotDelivered { .. }
            | ForwardError::Refused { .. }
            | ForwardError::Rejected { .. } => false,
        }
    }
}

fn leader_hint(leader_id: &Option<NodeId>, leader_node: &Option<Node>) -> String {
    match (leader_id, leader_node) {
        (Some(id), Some(node)) => format!("the leader is node {id} at {}", node.addr),
        (Some(id), None) => format!("the leader is node {id}"),
        (None, _) => "no leader is known yet; retry shortly".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// openraft network.
// ---------------------------------------------------------------------------

/// openraft's network factory: hands out a [`PeerClient`] per target, all on
/// the channels cached by [`PeerClients`].
#[derive(Clone, Debug)]
pub struct PeerNetworkFactory {
    clients: PeerClients,
}

impl PeerNetworkFactory {
    /// A factory sending over `clients`.
    pub fn new(clients: PeerClients) -> Self {
        Self { clients }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        let client = self.clients.rpc_client(target, &node.addr);
        if let Err(reason) = &client {
            tracing::error!(target_node = target, %reason, "cannot build a peer client");
        }
        PeerClient {
            peer: Peer {
                local: self.clients.node_id(),
                target,
                addr: node.addr.clone(),
            },
            client,
            link_faults: self.clients.shared.link_faults.clone(),
        }
    }
}

/// The verdict of `link_faults` (deliver, without hooks).
fn link_verdict(
    link_faults: Option<&Arc<dyn LinkFaults>>,
    from: NodeId,
    to: NodeId,
    rpc: PeerRpc,
) -> LinkVerdict {
    link_faults.map_or(LinkVerdict::Deliver, |faults| faults.verdict(from, to, rpc))
}

/// Sends openraft's messages to one target node.
#[derive(Debug)]
pub struct PeerClient {
    peer: Peer,
    /// `Err` when the target's address does not parse: every RPC then fails
    /// as `Unreachable` with that reason (openraft cannot take an error from
    /// `new_client`).
    client: Result<RaftPeerClient<Channel>, String>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    link_faults: Option<Arc<dyn LinkFaults>>,
}

/// Who talks to whom; builds the errors openraft expects.
#[derive(Clone, Debug)]
struct Peer {
    local: NodeId,
    target: NodeId,
    addr: String,
}

/// How a failed RPC is reported to openraft.
enum Failure {
    /// The deadline passed.
    Timeout,
    /// The peer is down or refuses to talk: back off before retrying.
    Unreachable,
    /// The peer refused this replica's message outright (membership,
    /// routing, version): back off too, it will not fix itself at once.
    Refused,
    /// Something else broke in transit: retrying at once may work.
    Network,
}

fn classify(status: &Status) -> Failure {
    match status.code() {
        Code::DeadlineExceeded => Failure::Timeout,
        // tonic reports its own `grpc-timeout` deadline as CANCELLED.
        Code::Cancelled if is_deadline(status) => Failure::Timeout,
        Code::Unavailable | Code::ResourceExhausted => Failure::Unreachable,
        Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::InvalidArgument
        | Code::Unimplemented => Failure::Refused,
        _ => Failure::Network,
    }
}

/// True when tonic could not open a connection for the RPC (it then never
/// reached the peer), as opposed to a connection that broke after sending.
fn is_connect_failure(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        source = error.source();
    }
    false
}

fn is_deadline(status: &Status) -> bool {
    let expired = tonic::TimeoutExpired(()).to_string();
    if status.message() == expired {
        return true;
    }
    let mut source = status.source();
    while let Some(error) = source {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = error.source();
    }
    false
}

fn describe_status(status: &Status) -> String {
    match status.source() {
        Some(source) => format!("{:?}: {} ({source})", status.code(), status.message()),
        None => format!("{:?}: {}", status.code(), status.message()),
    }
}

impl Peer {
    fn timeout(&self, action: RPCTypes, after: Duration) -> Timeout<TypeConfig> {
        Timeout {
            action,
            id: self.local,
            target: self.target,
            timeout: after,
        }
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> Unreachable<TypeConfig> {
        Unreachable::from_string(format!("node {} at {}: {reason}", self.target, self.addr))
    }

    fn status_error(
        &self,
        action: RPCTypes,
        after: Duration,
        status: &Status,
    ) -> RPCError<TypeConfig> {
        match classify(status) {
            Failure::Timeout => RPCError::Timeout(self.timeout(action, after)),
            Failure::Unreachable | Failure::Refused => {
                RPCError::Unreachable(self.unreachable(describe_status(status)))
            }
            Failure::Network => RPCError::Network(NetworkError::from_string(format!(
                "node {} at {}: {}",
                self.target,
                self.addr,
                describe_status(status)
            ))),
        }
    }

    /// A remote Raft that stopped cannot answer until it restarts: to
    /// openraft that peer is unreachable.
    fn remote_fatal(&self, fatal: &Fatal<TypeConfig>) -> RPCError<TypeConfig> {
        RPCError::Unreachable(self.unreachable(format_args!("its Raft has stopped: {fatal}")))
    }

    fn remote_raft_error(&self, error: RaftError<TypeConfig>) -> RPCError<TypeConfig> {
        match error {
            RaftError::Fatal(fatal) => self.remote_fatal(&fatal),
            RaftError::APIError(never) => match never {},
        }
    }

    fn message(&self, payload: Vec<u8>) -> PeerMessage {
        PeerMessage {
            from_node: self.local,
            to_node: self.target,
            payload,
        }
    }

    /// Checks who answered and decodes the payload.
    fn open<T: DeserializeOwned>(&self, reply: &PeerMessage) -> Result<T, RPCError<TypeConfig>> {
        if reply.from_node != self.target {
            return Err(RPCError::Unreachable(self.unreachable(format_args!(
                "the address answered as node {}: fix the membership's address of node {}",
                reply.from_node, self.target
            ))));
        }
        decode(&reply.payload).map_err(|error| {
            RPCError::Unreachable(self.unreachable(format_args!(
                "undecodable reply (another version?): {error}"
            )))
        })
    }
}

impl PeerClient {
    fn client(&self) -> Result<RaftPeerClient<Channel>, Unreachable<TypeConfig>> {
        self.client
            .clone()
            .map_err(|reason| self.peer.unreachable(reason))
    }

    /// Applies the link-fault verdict for one message: a drop is an error
    /// (unreachable), a delay is slept here (a delay past `deadline` is a
    /// timeout); other verdicts are returned for the caller to apply.
    async fn verdict(
        &self,
        rpc: PeerRpc,
        deadline: Duration,
    ) -> Result<LinkVerdict, RPCError<TypeConfig>> {
        let verdict = link_verdict(
            self.link_faults.as_ref(),
            self.peer.local,
            self.peer.target,
            rpc,
        );
        match verdict {
            LinkVerdict::Drop => Err(RPCError::Unreachable(
                self.peer.unreachable("link fault: message dropped"),
            )),
            LinkVerdict::Delay(delay) if delay >= deadline => {
                tokio::time::sleep(deadline).await;
                Err(RPCError::Timeout(self.peer.timeout(
                    match rpc {
                        PeerRpc::Vote => RPCTypes::Vote,
                        PeerRpc::TransferLeader => RPCTypes::TransferLeader,
                        PeerRpc::InstallSnapshot => RPCTypes::InstallSnapshot,
                        _ => RPCTypes::AppendEntries,
                    },
                    deadline,
                )))
            }
            LinkVerdict::Delay(delay) => {
                tokio::time::sleep(delay).await;
                Ok(LinkVerdict::Deliver)
            }
            other => Ok(other),
        }
    }

    /// One unary RPC within `deadline`: the request carries it as
    /// `grpc-timeout` so the receiver abandons the work too, and a local
    /// timer guarantees the answer (or a `Timeout`) comes back in time.
    async fn unary<Reply, Call, Fut>(
        &self,
        action: RPCTypes,
        deadline: Duration,
        payload: Vec<u8>,
        call: Call,
    ) -> Result<Reply, RPCError<TypeConfig>>
    where
        Reply: DeserializeOwned,
        Call: Fn(RaftPeerClient<Channel>, tonic::Request<PeerMessage>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<PeerMessage>, Status>>,
    {
        let client = self.client()?;
        let rpc = match action {
            RPCTypes::Vote => PeerRpc::Vote,
            RPCTypes::TransferLeader => PeerRpc::TransferLeader,
            _ => PeerRpc::AppendEntries,
        };
        let verdict = self.verdict(rpc, deadline).await?;
        if verdict == LinkVerdict::Duplicate {
            let mut duplicate = tonic::Request::new(self.peer.message(payload.clone()));
            duplicate.set_timeout(deadline);
            let _ = tokio::time::timeout(deadline, call(client.clone(), duplicate)).await;
        }
        let mut request = tonic::Request::new(self.peer.message(payload));
        request.set_timeout(deadline);
        let answer = tokio::time::timeout(deadline, call(client, request)).await;
        if verdict == LinkVerdict::DropReply {
            return Err(RPCError::Unreachable(
                self.peer.unreachable("link fault: the answer was lost"),
            ));
        }
        match answer {
            Err(_elapsed) => Err(RPCError::Timeout(self.peer.timeout(action, deadline))),
            Ok(Err(status)) => Err(self.peer.status_error(action, deadline, &status)),
            Ok(Ok(response)) => self.peer.open(response.get_ref()),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let reply: AppendReply = self
            .unary(
                RPCTypes::AppendEntries,
                option.soft_ttl(),
                encode(&rpc),
                |mut client, request| async move { client.append_entries(request).await },
            )
            .await?;
        reply.map_err(|error| self.peer.remote_raft_error(error))
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            // openraft waits out its backoff (after the peer was unreachable)
            // while producing the next request. Take the first request before
            // connecting, so that a peer that refuses connections is retried
            // after the backoff; connecting first would fail before the
            // request stream is ever polled, and replication would retry in a
            // hot loop for as long as the peer is down.
            let mut input = input;
            let Some(first) = input.next().await else {
                return Ok(Box::pin(futures::stream::empty()) as BoxStream<'s, _>);
            };
            let input = futures::stream::once(futures::future::ready(first)).chain(input);
            let deadline = option.soft_ttl();
            let mut client = self.client()?;
            if let LinkVerdict::Drop | LinkVerdict::DropReply =
                self.verdict(PeerRpc::StreamAppend, deadline).await?
            {
                return Err(RPCError::Unreachable(
                    self.peer.unreachable("link fault: stream cut"),
                ));
            }

            // The request side counts what it hands to the transport, so the
            // response side knows when an answer is owed (and its deadline
            // runs) and when the peer is merely idle.
            let (progress_tx, progress_rx) = watch::channel(RequestProgress::default());
            let progress_tx = Arc::new(progress_tx);
            let counter = Arc::clone(&progress_tx);
            let peer = self.peer.clone();
            // Link faults (tests and chaos only): each request may be delayed,
            // or cut the stream (it and every later one are not sent, and the
            // response side reports the peer unreachable).
            let gate = Arc::new(StreamGate {
                link_faults: self.link_faults.clone(),
                local: self.peer.local,
                target: self.peer.target,
                cut: AtomicBool::new(false),
                progress: Arc::clone(&progress_tx),
            });
            let judge = Arc::clone(&gate);
            let judged = input.then(move |request| {
                let verdict = judge.verdict();
                async move {
                    if let LinkVerdict::Delay(delay) = verdict {
                        tokio::time::sleep(delay).await;
                    }
                    (verdict, request)
                }
            });
            let requests = tokio_stream::StreamExt::map_while(judged, move |(verdict, request)| {
                gate.admit(verdict, request)
            })
            .map(move |request| {
                counter.send_modify(|progress| progress.sent += 1);
                peer.message(encode(&request))
            })
            .chain(
                futures::stream::once(async move {
                    progress_tx.send_modify(|progress| progress.input_done = true);
                })
                .filter_map(|()| futures::future::ready(None)),
            );

            let setup = client.stream_append(tonic::Request::new(requests));
            let responses = match tokio::time::timeout(deadline, setup).await {
                Err(_elapsed) => {
                    return Err(RPCError::Timeout(
                        self.peer.timeout(RPCTypes::AppendEntries, deadline),
                    ));
                }
                Ok(Err(status)) => {
                    return Err(self
                        .peer
                        .status_error(RPCTypes::AppendEntries, deadline, &status));
                }
                Ok(Ok(response)) => response.into_inner(),
            };

            let reader = AppendResponses {
                peer: self.peer.clone(),
                responses,
                progress: progress_rx,
                input_done: false,
                answered: 0,
                deadline,
                finished: false,
            };
            let output = futures::stream::unfold(reader, |mut reader| async move {
                let item = reader.next().await?;
                Some((item, reader))
            });
            Ok(Box::pin(output) as BoxStream<'s, _>)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let reply: VoteReply = self
            .unary(
                RPCTypes::Vote,
                option.soft_ttl(),
                encode(&rpc),
                |mut client, request| async move { client.vote(request).await },
            )
            .await?;
        reply.map_err(|error| self.peer.remote_raft_error(error))
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        // openraft has no PreVote RPC type; a pre-vote is a kind of vote.
        let reply: VoteReply = self
            .unary(
                RPCTypes::Vote,
                option.soft_ttl(),
                encode(&rpc),
                |mut client, request| async move { client.pre_vote(request).await },
            )
            .await?;
        reply.map_err(|error| self.peer.remote_raft_error(error))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let deadline = option.soft_ttl();
        let timeout =
            || StreamingError::Timeout(self.peer.timeout(RPCTypes::InstallSnapshot, deadline));
        let size_bytes = snapshot.snapshot.len() as u64;
        if size_bytes > SNAPSHOT_BYTES_MAX {
            // Every replica would refuse it; say why instead of streaming it.
            tracing::error!(
                target_node = self.peer.target,
                size_bytes,
                limit = SNAPSHOT_BYTES_MAX,
                "snapshot too large to send"
            );
            return Err(StreamingError::Unreachable(self.peer.unreachable(
                format_args!(
                    "snapshot of {size_bytes} bytes exceeds the {SNAPSHOT_BYTES_MAX}-byte limit"
                ),
            )));
        }
        let chunk_bytes = option
            .snapshot_chunk_size()
            .map_or(SNAPSHOT_CHUNK_BYTES_MAX, |size| {
                size.clamp(1, SNAPSHOT_CHUNK_BYTES_MAX)
            });
        let mut client = self.client()?;
        if let LinkVerdict::Drop | LinkVerdict::DropReply = self
            .verdict(PeerRpc::InstallSnapshot, deadline)
            .await
            .map_err(StreamingError::from)?
        {
            return Err(StreamingError::Unreachable(
                self.peer.unreachable("link fault: snapshot cut"),
            ));
        }

        let header = encode(&SnapshotHeader {
            vote,
            meta: snapshot.meta.clone(),
            size_bytes,
        });
        let (chunk_tx, chunk_rx) = mpsc::channel::<SnapshotChunk>(SNAPSHOT_CHUNKS_QUEUED_MAX);
        let call = client.install_snapshot(tonic::Request::new(ReceiverStream::new(chunk_rx)));

        let peer = &self.peer;
        let data = &snapshot.snapshot;
        let send_chunks = async move {
            let mut header = Some(header);
            let mut pieces = data.chunks(chunk_bytes);
            // The first chunk carries the header, even for an empty snapshot.
            let mut piece = Some(pieces.next().unwrap_or_default());
            while let Some(bytes) = piece {
                let chunk = SnapshotChunk {
                    from_node: peer.local,
                    to_node: peer.target,
                    header: header.take().unwrap_or_default(),
                    data: bytes.to_vec(),
                };
                match tokio::time::timeout(deadline, chunk_tx.send(chunk)).await {
                    Err(_elapsed) => return Err(SendStalled),
                    // The call ended early (refused, or the stream broke):
                    // its result says why.
                    Ok(Err(_closed)) => return Ok(()),
                    Ok(Ok(())) => {}
                }
                piece = pieces.next();
            }
            // Dropping the sender ends the request stream: the receiver
            // checks it got `size_bytes` and installs.
            drop(chunk_tx);
            Ok(())
        };

        let exchange = async move {
            tokio::pin!(call);
            tokio::pin!(send_chunks);
            let reply = tokio::select! {
                // The receiver answered before it had every byte: a refusal.
                reply = &mut call => reply,
                sent = &mut send_chunks => match sent {
                    // Returning drops `call`, which resets the stream: the
                    // receiver sees an error, not an end, and installs nothing.
                    Err(SendStalled) => return Err(timeout()),
                    // Installing takes place before the answer.
                    Ok(()) => match tokio::time::timeout(deadline, call).await {
                        Err(_elapsed) => return Err(timeout()),
                        Ok(reply) => reply,
                    },
                },
            };
            let reply = reply.map_err(|status| {
                StreamingError::from(peer.status_error(
                    RPCTypes::InstallSnapshot,
                    deadline,
                    &status,
                ))
            })?;
            let reply: SnapshotReply = peer.open(reply.get_ref())?;
            reply.map_err(|fatal| StreamingError::from(peer.remote_fatal(&fatal)))
        };

        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            result = exchange => result,
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let reply: TransferLeaderReply = self
            .unary(
                RPCTypes::TransferLeader,
                option.soft_ttl(),
                encode(&req),
                |mut client, request| async move { client.transfer_leader(request).await },
            )
            .await?;
        reply.map_err(|fatal| self.peer.remote_fatal(&fatal))
    }

    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(backoff_delays()))
    }
}

/// Applies link faults to the requests of one `StreamAppend` (tests and
/// chaos only): a request may cut the stream — it and every later one are
/// not sent, and the response side reports the peer unreachable.
struct StreamGate {
    link_faults: Option<Arc<dyn LinkFaults>>,
    local: NodeId,
    target: NodeId,
    cut: AtomicBool,
    progress: Arc<watch::Sender<RequestProgress>>,
}

impl StreamGate {
    fn verdict(&self) -> LinkVerdict {
        link_verdict(
            self.link_faults.as_ref(),
            self.local,
            self.target,
            PeerRpc::StreamAppend,
        )
    }

    /// The request, unless the stream is cut (by this verdict or before).
    fn admit<T>(&self, verdict: LinkVerdict, request: T) -> Option<T> {
        if matches!(verdict, LinkVerdict::Drop | LinkVerdict::DropReply)
            || self.cut.load(Ordering::Relaxed)
        {
            self.cut.store(true, Ordering::Relaxed);
            self.progress.send_modify(|progress| progress.cut = true);
            return None;
        }
        Some(request)
    }
}

/// A snapshot chunk could not be handed to the transport in time.
struct SendStalled;

/// What the request side of a `StreamAppend` has handed to the transport.
#[derive(Clone, Copy, Debug, Default)]
struct RequestProgress {
    sent: u64,
    input_done: bool,
    /// A link fault cut the stream (tests and chaos only).
    cut: bool,
}

/// The response side of a `StreamAppend`, with its progress deadline.
struct AppendResponses {
    peer: Peer,
    responses: tonic::Streaming<PeerMessage>,
    progress: watch::Receiver<RequestProgress>,
    /// The request side is finished (or gone): no more requests will come.
    input_done: bool,
    answered: u64,
    deadline: Duration,
    finished: bool,
}

impl AppendResponses {
    async fn next(
        &mut self,
    ) -> Option<Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> {
        if self.finished {
            return None;
        }
        let item = match self.next_message().await {
            Ok(Some(message)) => {
                self.answered += 1;
                match self.peer.open::<StreamAppendReply>(&message) {
                    Ok(Ok(result)) => {
                        // The peer ends the stream after a conflict or a
                        // higher vote; openraft stops reading there too.
                        self.finished = result.is_err();
                        return Some(Ok(result));
                    }
                    Ok(Err(fatal)) => Err(self.peer.remote_fatal(&fatal)),
                    Err(error) => Err(error),
                }
            }
            Ok(None) if self.progress.borrow().cut => Err(RPCError::Unreachable(
                self.peer.unreachable("link fault: stream cut"),
            )),
            Ok(None) => {
                let unanswered = self.progress.borrow().sent.saturating_sub(self.answered);
                if unanswered == 0 {
                    self.finished = true;
                    return None;
                }
                Err(RPCError::Network(NetworkError::from_string(format!(
                    "node {} at {} ended the append stream with {unanswered} requests unanswered",
                    self.peer.target, self.peer.addr
                ))))
            }
            Err(error) => Err(error),
        };
        self.finished = true;
        Some(item)
    }

    /// The next response. While an answer is owed it must come within the
    /// deadline; while the request side is merely idle, waiting is free.
    async fn next_message(&mut self) -> Result<Option<PeerMessage>, RPCError<TypeConfig>> {
        loop {
            let sent = {
                let progress = self.progress.borrow_and_update();
                self.input_done |= progress.input_done;
                progress.sent
            };
            if sent > self.answered {
                return match tokio::time::timeout(self.deadline, self.responses.message()).await {
                    Err(_elapsed) => Err(RPCError::Timeout(
                        self.peer.timeout(RPCTypes::AppendEntries, self.deadline),
                    )),
                    Ok(message) => message.map_err(|status| self.status_error(&status)),
                };
            }
            if self.input_done {
                // Everything is answered and nothing more will be asked: only
                // the end of the stream is due. If it does not come, end here;
                // nothing is lost.
                return match tokio::time::timeout(self.deadline, self.responses.message()).await {
                    Err(_elapsed) => Ok(None),
                    Ok(message) => message.map_err(|status| self.status_error(&status)),
                };
            }
            // `message()` only polls the stream, so dropping it when the
            // request side moves first loses nothing.
            tokio::select! {
                message = self.responses.message() => {
                    return message.map_err(|status| self.status_error(&status));
                }
                changed = self.progress.changed() => {
                    if changed.is_err() {
                        // The transport dropped the request side.
                        self.input_done = true;
                    }
                }
            }
        }
    }

    fn status_error(&self, status: &Status) -> RPCError<TypeConfig> {
        self.peer
            .status_error(RPCTypes::AppendEntries, self.deadline, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let delays: Vec<u64> = backoff_delays()
            .take(8)
            .map(|delay| delay.as_millis() as u64)
            .collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn statuses_map_to_openraft_failure_kinds() {
        let kind = |status: Status| match classify(&status) {
            Failure::Timeout => "timeout",
            Failure::Unreachable => "unreachable",
            Failure::Refused => "refused",
            Failure::Network => "network",
        };
        assert_eq!(kind(Status::deadline_exceeded("late")), "timeout");
        // What tonic reports when the request's own grpc-timeout fires.
        let expired = tonic::TimeoutExpired(()).to_string();
        assert_eq!(kind(Status::cancelled(expired)), "timeout");
        assert_eq!(kind(Status::cancelled("peer reset the stream")), "network");
        assert_eq!(
            kind(Status::unavailable("tcp connect error")),
            "unreachable"
        );
        assert_eq!(kind(Status::resource_exhausted("busy")), "unreachable");
        assert_eq!(kind(Status::permission_denied("not a member")), "refused");
        assert_eq!(kind(Status::failed_precondition("misrouted")), "refused");
        assert_eq!(kind(Status::invalid_argument("undecodable")), "refused");
        assert_eq!(kind(Status::internal("h2 protocol error")), "network");
    }

    #[test]
    fn addresses_become_http_uris() {
        assert!(endpoint("127.0.0.1:7001").is_ok());
        assert!(endpoint("http://replica-2.palisade:7001").is_ok());
        assert!(endpoint("not an address").is_err());
    }
}
