//! The server side of the peer transport: [`PeerService`] implements
//! `palisade.peer.v1.RaftPeer` by handing each message to this replica's
//! [`Raft`] and sending back what it answered.
//!
//! # What it owns
//!
//! - Who the sender is. Behind the peer port's mutual TLS
//!   ([`PeerService::with_certificate_identity`]) it is the node its client
//!   certificate names; a message claiming another `from_node` is refused
//!   with PERMISSION_DENIED ([`crate::tls`]).
//! - What may be forwarded: only commands a client may propose
//!   ([`Command::is_client_proposable`]); completions, observations,
//!   `Tick`, `InitializeCluster` and the like are leader-internal and are
//!   refused from the wire with PERMISSION_DENIED.
//! - Who may talk to this replica. A message is refused with
//!   FAILED_PRECONDITION when its `to_node` is not this replica (the
//!   membership maps that node to our address), and with PERMISSION_DENIED
//!   when its `from_node` is neither a voter nor a learner of this replica's
//!   effective or committed membership. Two exceptions: a message from this
//!   replica itself, and any message while this replica has no membership at
//!   all — a pristine replica must accept the first Vote/AppendEntries from
//!   whichever node initialized the cluster, and learns the membership from
//!   it. A replica learns of a new member when it replicates the membership
//!   entry that adds it; until then that member's messages are refused and
//!   its sender backs off and retries — except replication (AppendEntries,
//!   a snapshot) carrying an elected leader's vote of this replica's term
//!   or a later one: a replica may hold a membership from before its leader
//!   joined, and only that leader can bring it the newer one.
//! - Reassembling snapshots: chunks are written to a spool file as they
//!   arrive (never all in memory), up to the size the first chunk announced
//!   (at most [`SNAPSHOT_BYTES_MAX`]), and installed only when exactly that
//!   many bytes arrived, so a transfer cut short is never installed (its
//!   spool file has no name and goes with it).
//!
//! # Decisions
//!
//! - The membership check reads openraft's server metrics (a watch channel:
//!   no round trip to the Raft core per message). Only when the metrics show
//!   no membership does it ask the core itself, because right after a
//!   restart the metrics may not be published yet and must not be mistaken
//!   for "pristine".
//! - Replies carry the whole `Result` of the `Raft` call, serialized (see
//!   [`network`](crate::network)), so the sender rebuilds openraft's own
//!   errors. gRPC statuses are kept for refusals by the transport itself.
//! - Streams end when the Raft stops. A leader's replication stream sits
//!   idle between writes; if it outlived the Raft, the tonic server's
//!   graceful shutdown would wait for it forever. So shut a replica down
//!   Raft first (`raft.shutdown()`), then its server.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::async_runtime::WatchReceiver as _;
use openraft::metrics::RaftServerMetrics;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use openraft::type_config::alias::WatchReceiverOf;
use palisade_lifecycle::Command;
use palisade_proto::peer::raft_peer_server::{RaftPeer, RaftPeerServer};
use palisade_proto::peer::{PeerMessage, SnapshotChunk};
use palisade_storage::SnapshotSpool;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status, Streaming};

use crate::network::{
    AppendReply, DecodeError, Encoding, ForwardWriteReply, PEER_MESSAGE_BYTES_MAX, ReadIndexReply,
    SNAPSHOT_BYTES_MAX, SnapshotHeader, SnapshotReply, StreamAppendReply, TransferLeaderReply,
    VoteReply, decode, encode, encoding_of,
};
use crate::types::{NodeId, Raft, Snapshot, SnapshotData, StoredMembership, TypeConfig, Vote};

/// Snapshots this replica receives at once. Each is spooled to disk until
/// installed; two let a new leader's transfer start while a deposed
/// leader's is still winding down.
pub const SNAPSHOT_RECEIVES_CONCURRENT_MAX: usize = 2;

/// Longest wait for the next chunk of a snapshot being received before the
/// transfer is abandoned (and its memory freed).
pub const SNAPSHOT_CHUNK_WAIT_MAX: Duration = Duration::from_secs(30);

/// The `palisade.peer.v1.RaftPeer` service of one replica.
#[derive(Clone)]
pub struct PeerService {
    raft: Raft,
    senders: SenderCheck,
    /// Mutual TLS: the sender's node id is the one its certificate names,
    /// and a message claiming another `from_node` is refused. Off only in
    /// the plaintext (`--insecure`) mode, where `from_node` is believed.
    identity_from_certificate: bool,
    /// Bounds concurrent snapshot receptions (and so their disk use).
    snapshot_receives: Arc<Semaphore>,
    /// Where snapshots being received are written (the replica's snapshot
    /// directory); `None`: the system's temporary directory.
    spool_dir: Option<std::path::PathBuf>,
}

impl PeerService {
    /// The peer service of the replica `raft` runs.
    pub fn new(raft: Raft) -> Self {
        let senders = SenderCheck {
            node_id: *raft.node_id(),
            metrics: raft.server_metrics(),
            raft: raft.clone(),
        };
        Self {
            raft,
            senders,
            identity_from_certificate: false,
            snapshot_receives: Arc::new(Semaphore::new(SNAPSHOT_RECEIVES_CONCURRENT_MAX)),
            spool_dir: None,
        }
    }

    /// The same service, writing snapshots being received into files in
    /// `dir` (give the replica's snapshot directory: a large snapshot then
    /// lands on the data volume, not on a small or memory-backed `/tmp`).
    pub fn with_spool_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }

    /// The same service, taking each sender's node id from its TLS client
    /// certificate ([`crate::tls::node_id_of_certificate`]). Serve it only
    /// behind a TLS listener that demands certificates of the cluster CA.
    pub fn with_certificate_identity(mut self) -> Self {
        self.identity_from_certificate = true;
        self
    }

    /// The node id the request's client certificate names, when identity
    /// comes from certificates; `None` in the plaintext mode.
    fn certified_sender<T>(&self, request: &Request<T>) -> Result<Option<NodeId>, Status> {
        if !self.identity_from_certificate {
            return Ok(None);
        }
        let certificates = request.peer_certs().ok_or_else(|| {
            Status::unauthenticated("the peer port needs a client certificate of the cluster CA")
        })?;
        let first = certificates.first().ok_or_else(|| {
            Status::unauthenticated("the peer port needs a client certificate of the cluster CA")
        })?;
        crate::tls::node_id_of_certificate(first.as_ref())
            .map(Some)
            .map_err(|problem| {
                Status::permission_denied(format!("not a cluster member's certificate: {problem}"))
            })
    }

    /// The tonic service to add to a server, with the same message size
    /// limit as the peers' clients.
    pub fn into_server(self) -> RaftPeerServer<Self> {
        RaftPeerServer::new(self)
            .max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(PEER_MESSAGE_BYTES_MAX)
    }

    fn node_id(&self) -> NodeId {
        self.senders.node_id
    }

    /// Admits the sender and decodes the payload; returns who to answer,
    /// and how.
    async fn open<T: DeserializeOwned>(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<(Requester, T), Status> {
        let certified = self.certified_sender(&request)?;
        let message = request.into_inner();
        check_claim(certified, message.from_node)?;
        self.senders
            .admit(message.from_node, message.to_node, None)
            .await?;
        let body = decode(&message.payload).map_err(|error| undecodable("payload", &error))?;
        Ok((Requester::of(&message), body))
    }

    /// [`PeerService::open`] for a leader's AppendEntries: decoded first, so
    /// that the leader's vote can admit a sender this replica's membership
    /// does not know yet (see [`SenderCheck::admit`]).
    async fn open_append(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<(Requester, AppendEntriesRequest<TypeConfig>), Status> {
        let certified = self.certified_sender(&request)?;
        let message = request.into_inner();
        check_claim(certified, message.from_node)?;
        let body: AppendEntriesRequest<TypeConfig> =
            decode(&message.payload).map_err(|error| undecodable("payload", &error))?;
        self.senders
            .admit(message.from_node, message.to_node, Some(&body.vote))
            .await?;
        Ok((Requester::of(&message), body))
    }

    /// Collects a snapshot transfer: the sender's id, the header, and exactly
    /// the announced bytes. A stream that breaks or ends early is an error.
    async fn receive_snapshot(
        &self,
        mut chunks: Streaming<SnapshotChunk>,
        certified: Option<NodeId>,
    ) -> Result<(Requester, SnapshotHeader, SnapshotData), Status> {
        let first = next_chunk(&mut chunks)
            .await?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        let (from, to) = (first.from_node, first.to_node);
        check_claim(certified, from)?;
        let header: SnapshotHeader =
            decode(&first.header).map_err(|error| undecodable("snapshot header", &error))?;
        let header_encoding = encoding_of(&first.header);
        self.senders.admit(from, to, Some(&header.vote)).await?;
        if header.size_bytes > SNAPSHOT_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "snapshot of {} bytes exceeds this replica's {SNAPSHOT_BYTES_MAX}-byte limit",
                header.size_bytes
            )));
        }
        let size = header.size_bytes;
        let spool_dir = self.spool_dir.clone();
        let mut spool =
            crate::runtime::blocking(move || SnapshotSpool::new_in(spool_dir.as_deref()))
                .await
                .and_then(|spool| spool)
                .map_err(|error| {
                    Status::resource_exhausted(format!("cannot spool a snapshot to disk: {error}"))
                })?;

        let mut chunk = Some(first);
        let mut is_first = true;
        while let Some(piece) = chunk {
            if !is_first {
                if piece.from_node != from || piece.to_node != to {
                    return Err(Status::invalid_argument(
                        "snapshot chunks from different senders in one stream",
                    ));
                }
                if !piece.header.is_empty() {
                    return Err(Status::invalid_argument("snapshot header on a later chunk"));
                }
            }
            if piece.data.len() as u64 > size - spool.len() {
                return Err(Status::invalid_argument(format!(
                    "snapshot stream carries more than the announced {size} bytes"
                )));
            }
            // Written off the runtime's threads (Raft heartbeats run there).
            spool = crate::runtime::blocking(move || spool.write(&piece.data).map(|()| spool))
                .await
                .and_then(|written| written)
                .map_err(|error| {
                    Status::resource_exhausted(format!("cannot spool a snapshot to disk: {error}"))
                })?;
            is_first = false;
            chunk = next_chunk(&mut chunks).await?;
        }
        if spool.len() != size {
            return Err(Status::invalid_argument(format!(
                "snapshot stream ended after {} of {size} bytes; nothing installed",
                spool.len()
            )));
        }
        let data = spool.finish().map_err(|error| {
            Status::resource_exhausted(format!("cannot spool a snapshot to disk: {error}"))
        })?;

        let requester = Requester {
            node: from,
            encoding: header_encoding,
        };
        Ok((requester, header, data))
    }

    /// Resolves once this replica's Raft core has stopped (its metrics
    /// channel closes with it).
    fn raft_stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut metrics = self.raft.server_metrics();
        async move { while metrics.changed().await.is_ok() {} }
    }

    /// The answer to `to`, in the encoding of its request.
    fn reply<T: Serialize>(&self, to: Requester, body: &T) -> Response<PeerMessage> {
        Response::new(PeerMessage {
            from_node: self.node_id(),
            to_node: to.node,
            payload: encode(body, to.encoding),
        })
    }
}

/// Who sent a request, and in which encoding: its reply goes back in the
/// same one, which the requester is sure to read (see `network::wire`).
#[derive(Debug, Clone, Copy)]
struct Requester {
    node: NodeId,
    encoding: Encoding,
}

impl Requester {
    fn of(message: &PeerMessage) -> Self {
        Requester {
            node: message.from_node,
            encoding: encoding_of(&message.payload),
        }
    }
}

/// Refuses a message whose `from_node` is not the node its sender's
/// certificate names (`certified`; `None`: plaintext mode, nothing to
/// check).
fn check_claim(certified: Option<NodeId>, claimed: NodeId) -> Result<(), Status> {
    match certified {
        Some(node) if node != claimed => {
            tracing::warn!(
                certified = node,
                claimed,
                "refused a peer message claiming another node's identity"
            );
            Err(Status::permission_denied(format!(
                "the sender's certificate is node {node}'s, but the message claims to come from \
                 node {claimed}; refused"
            )))
        }
        _ => Ok(()),
    }
}

fn undecodable(what: &str, error: &DecodeError) -> Status {
    Status::invalid_argument(format!(
        "undecodable {what} (is the sender another Palisade version?): {error}"
    ))
}

/// Decides whether a message's sender may talk to this replica.
#[derive(Clone)]
struct SenderCheck {
    node_id: NodeId,
    metrics: WatchReceiverOf<TypeConfig, RaftServerMetrics<TypeConfig>>,
    raft: Raft,
}

/// Where the sender stands in this replica's membership.
enum Standing {
    Member,
    Stranger,
    /// This replica has no membership at all.
    NoMembership,
}

fn standing(
    effective: &StoredMembership,
    committed: &StoredMembership,
    sender: NodeId,
) -> Standing {
    let knows = |stored: &StoredMembership| stored.membership().get_node(&sender).is_some();
    let is_empty = |stored: &StoredMembership| stored.membership().nodes().next().is_none();
    if knows(effective) || knows(committed) {
        Standing::Member
    } else if is_empty(effective) && is_empty(committed) {
        Standing::NoMembership
    } else {
        Standing::Stranger
    }
}

/// Whether `leader_vote`, carried by a replication message (AppendEntries,
/// a snapshot) from a node this replica's membership does not list, shows
/// an elected leader of this replica's term or a later one.
///
/// Such a message is admitted: this replica's membership can be older than
/// the leader (a replica re-added empty installs a snapshot, or replicates
/// a log prefix, from before the leader joined) and it learns of the
/// leader's membership only from the leader itself; refusing it left the
/// replica stuck behind for good (chaos seed 87 at 1,000 operations). It is
/// safe: only a quorum of voters elects a leader (a node removed from the
/// membership gets no votes: its vote requests are still refused), openraft
/// itself refuses a leader of an older term, and with TLS the sender's id
/// is its certificate's.
fn elected_leader_at_least_as_new(leader_vote: &Vote, own_vote: &Vote) -> bool {
    use openraft::vote::RaftLeaderId as _;
    leader_vote.is_committed() && leader_vote.leader_id().term() >= own_vote.leader_id().term()
}

impl SenderCheck {
    /// Admits a message from `from_node` to `to_node` (see the module doc);
    /// `leader_vote` is the vote a replication message carries.
    async fn admit(
        &self,
        from_node: NodeId,
        to_node: NodeId,
        leader_vote: Option<&Vote>,
    ) -> Result<(), Status> {
        if to_node != self.node_id {
            return Err(Status::failed_precondition(format!(
                "this is node {}, not node {to_node}: the membership maps node {to_node} to \
                 this replica's address; correct that node's address",
                self.node_id
            )));
        }
        if from_node == self.node_id {
            return Ok(());
        }
        let (seen, own_vote) = {
            let metrics = self.metrics.borrow_watched();
            (
                standing(
                    &metrics.membership_config,
                    &metrics.committed_membership_config,
                    from_node,
                ),
                metrics.vote,
            )
        };
        let standing = match seen {
            Standing::NoMembership => {
                // Pristine, or just restarted with metrics not yet published:
                // ask the Raft core, which knows.
                self.raft
                    .with_raft_state(move |state| {
                        let memberships = &state.membership_state;
                        standing(memberships.effective(), memberships.committed(), from_node)
                    })
                    .await
                    .map_err(|fatal| {
                        Status::unavailable(format!(
                            "node {}'s Raft has stopped: {fatal}",
                            self.node_id
                        ))
                    })?
            }
            known => known,
        };
        match standing {
            Standing::Member | Standing::NoMembership => Ok(()),
            Standing::Stranger
                if leader_vote
                    .is_some_and(|vote| elected_leader_at_least_as_new(vote, &own_vote)) =>
            {
                tracing::info!(
                    node_id = self.node_id,
                    from_node,
                    "admitted replication from a leader this replica's membership does not list yet"
                );
                Ok(())
            }
            Standing::Stranger => {
                tracing::warn!(
                    node_id = self.node_id,
                    from_node,
                    "refused a peer message from a non-member"
                );
                Err(Status::permission_denied(format!(
                    "node {from_node} is neither a voter nor a learner of node {}'s membership; \
                     add it as a learner first",
                    self.node_id
                )))
            }
        }
    }
}

/// The response stream of `StreamAppend`.
type AppendReplies = Pin<Box<dyn Stream<Item = Result<PeerMessage, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RaftPeer for PeerService {
    async fn append_entries(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let (from, rpc) = self.open_append(request).await?;
        let reply: AppendReply = self.raft.append_entries(rpc).await;
        Ok(self.reply(from, &reply))
    }

    type StreamAppendStream = AppendReplies;

    async fn stream_append(
        &self,
        request: Request<Streaming<PeerMessage>>,
    ) -> Result<Response<AppendReplies>, Status> {
        // Why a request was refused mid-stream; reported after the answers
        // to the requests before it. A `std` mutex: never held across an
        // await.
        let refusal: Arc<Mutex<Option<Status>>> = Arc::default();
        // The sender, fixed by the first request; every reply goes to it.
        let requester: Arc<OnceLock<NodeId>> = Arc::default();
        // Whether the last request was in the binary encoding: the replies
        // follow (a sender moves from JSON to binary when the cluster's
        // level rises, never back).
        let binary_requests: Arc<AtomicBool> = Arc::default();
        let certified = self.certified_sender(&request)?;

        let requests = AppendRequests {
            certified,
            incoming: request.into_inner(),
            senders: self.senders.clone(),
            refusal: Arc::clone(&refusal),
            requester: Arc::clone(&requester),
            binary_requests: Arc::clone(&binary_requests),
            raft_stopped: Box::pin(self.raft_stopped()),
        };
        let input = futures::stream::unfold(requests, |mut requests| async move {
            let request = requests.next().await?;
            Some((request, requests))
        });

        let node_id = self.node_id();
        let replies = self
            .raft
            .stream_append(input)
            .map(move |reply: StreamAppendReply| {
                Ok(PeerMessage {
                    from_node: node_id,
                    // A reply exists only for an admitted request, which set it.
                    to_node: requester.get().copied().unwrap_or_default(),
                    payload: encode(
                        &reply,
                        if binary_requests.load(Ordering::Relaxed) {
                            Encoding::BinaryV1
                        } else {
                            Encoding::Json
                        },
                    ),
                })
            });
        // No stream outlives the Raft: an idle replication stream would
        // otherwise keep the server's graceful shutdown waiting forever.
        let replies = replies.take_until(self.raft_stopped());
        let refused = futures::stream::once(async move {
            refusal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        })
        .filter_map(|status| futures::future::ready(status.map(Err)));
        Ok(Response::new(Box::pin(replies.chain(refused))))
    }

    async fn vote(&self, request: Request<PeerMessage>) -> Result<Response<PeerMessage>, Status> {
        let (from, rpc) = self.open::<VoteRequest<TypeConfig>>(request).await?;
        let reply: VoteReply = self.raft.vote(rpc).await;
        Ok(self.reply(from, &reply))
    }

    async fn pre_vote(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let (from, rpc) = self.open::<VoteRequest<TypeConfig>>(request).await?;
        let reply: VoteReply = self.raft.pre_vote(rpc).await;
        Ok(self.reply(from, &reply))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<PeerMessage>, Status> {
        let _permit = Arc::clone(&self.snapshot_receives)
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "node {} is already receiving {SNAPSHOT_RECEIVES_CONCURRENT_MAX} snapshots; \
                     retry later",
                    self.node_id()
                ))
            })?;
        let stopped = self.raft_stopped();
        let certified = self.certified_sender(&request)?;
        let received = tokio::select! {
            // `biased`: deterministic for `--sim`.
            biased;
            received = self.receive_snapshot(request.into_inner(), certified) => received?,
            () = stopped => {
                return Err(Status::unavailable(format!(
                    "node {}'s Raft has stopped",
                    self.node_id()
                )));
            }
        };
        let (from, header, data) = received;
        let snapshot = Snapshot {
            meta: header.meta,
            snapshot: data,
        };
        let reply: SnapshotReply = self.raft.install_full_snapshot(header.vote, snapshot).await;
        Ok(self.reply(from, &reply))
    }

    async fn transfer_leader(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let (from, rpc) = self
            .open::<TransferLeaderRequest<TypeConfig>>(request)
            .await?;
        let reply: TransferLeaderReply = self.raft.handle_transfer_leader(rpc).await;
        Ok(self.reply(from, &reply))
    }

    async fn forward_write(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let traceparent = request
            .metadata()
            .get(palisade_metrics::trace::TRACEPARENT)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let (from, command) = self.open::<Command>(request).await?;
        // Planted bug (f), test-only: accepts it anyway
        // (`palisade_lifecycle::planted`).
        if !command.is_client_proposable()
            && !palisade_lifecycle::planted::accept_forwarded_internal()
        {
            tracing::warn!(
                node_id = self.node_id(),
                from_node = from.node,
                command = command.name(),
                "refused a forwarded leader-internal command"
            );
            return Err(Status::permission_denied(format!(
                "{} is a leader-internal command: only the leader's own executor proposes it, \
                 it is never accepted from the wire",
                command.name()
            )));
        }
        // The request's trace, from the replica that took it (or a new one
        // if it sent none): the applied command's and the effect's lines
        // on this leader carry it ([`palisade_metrics::trace`]).
        let context =
            palisade_metrics::trace::TraceContext::from_header_or_new(traceparent.as_deref());
        if let Some(request) = command.request() {
            palisade_metrics::trace::remember(&request.id, &context);
        }
        let span = tracing::info_span!(
            "forwarded_write",
            trace_id = %context.trace_id,
            node_id = self.node_id(),
            from_node = from.node,
            command = command.name(),
        );
        palisade_metrics::trace::link_span(&span, &context);
        let raft = self.raft.clone();
        let reply: ForwardWriteReply = palisade_metrics::trace::scope(
            context,
            tracing::Instrument::instrument(
                async move {
                    tracing::debug!("forwarded write received");
                    let reply = raft.client_write(command.into()).await;
                    match &reply {
                        Ok(written) => tracing::debug!(
                            index = written.log_id.index,
                            "forwarded write committed and applied"
                        ),
                        Err(error) => tracing::debug!(%error, "forwarded write not committed"),
                    }
                    reply
                },
                span,
            ),
        )
        .await;
        Ok(self.reply(from, &reply))
    }

    async fn read_index(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let (from, ()) = self.open::<()>(request).await?;
        // Leadership confirmed is enough: the asking follower waits for its
        // own state to apply the index; this leader's apply is not its wait.
        let reply: ReadIndexReply = self
            .raft
            .get_read_linearizer(openraft::ReadPolicy::ReadIndex)
            .await
            .map(|linearizer| linearizer.read_log_id().index())
            .map_err(|error| error.to_string());
        Ok(self.reply(from, &reply))
    }

    async fn supported_feature_level(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        let (from, ()) = self.open::<()>(request).await?;
        Ok(self.reply(from, &crate::feature_level::supported()))
    }
}

/// The request side of one `StreamAppend`: admitted, decoded requests.
struct AppendRequests {
    /// The node the stream's client certificate names (TLS mode).
    certified: Option<NodeId>,
    incoming: Streaming<PeerMessage>,
    senders: SenderCheck,
    refusal: Arc<Mutex<Option<Status>>>,
    requester: Arc<OnceLock<NodeId>>,
    /// Set from each request's encoding; the replies follow it.
    binary_requests: Arc<AtomicBool>,
    /// Ends the input when the Raft stops: openraft's reader task holds the
    /// input until it ends, and with it the HTTP/2 stream.
    raft_stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl AppendRequests {
    async fn next(&mut self) -> Option<AppendEntriesRequest<TypeConfig>> {
        let received = tokio::select! {
            // `biased`: deterministic for `--sim`.
            biased;
            received = self.incoming.message() => received,
            () = &mut self.raft_stopped => return None,
        };
        let message = match received {
            Ok(Some(message)) => message,
            Ok(None) => return None,
            Err(status) => {
                tracing::debug!(%status, "append stream from a peer broke");
                return None;
            }
        };
        let admitted = match self.requester.get() {
            Some(&first) if first != message.from_node => Err(Status::invalid_argument(format!(
                "append stream opened by node {first} carried a message from node {}",
                message.from_node
            ))),
            _ => check_claim(self.certified, message.from_node),
        };
        let decoded = admitted.and_then(|()| {
            decode::<AppendEntriesRequest<TypeConfig>>(&message.payload)
                .map_err(|error| undecodable("AppendEntries request", &error))
        });
        let request = match decoded {
            Ok(request) => self
                .senders
                .admit(message.from_node, message.to_node, Some(&request.vote))
                .await
                .map(|()| request),
            Err(refused) => Err(refused),
        };
        match request {
            Ok(request) => {
                self.requester.get_or_init(|| message.from_node);
                self.binary_requests.store(
                    encoding_of(&message.payload) == Encoding::BinaryV1,
                    Ordering::Relaxed,
                );
                Some(request)
            }
            Err(status) => {
                *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
                None
            }
        }
    }
}

/// The next snapshot chunk; `None` at the end of the stream. A stream that
/// broke (the sender gave up) is an error, never an end.
async fn next_chunk(
    chunks: &mut Streaming<SnapshotChunk>,
) -> Result<Option<SnapshotChunk>, Status> {
    match tokio::time::timeout(SNAPSHOT_CHUNK_WAIT_MAX, chunks.message()).await {
        Err(_elapsed) => Err(Status::deadline_exceeded(format!(
            "no snapshot chunk for {SNAPSHOT_CHUNK_WAIT_MAX:?}; transfer abandoned"
        ))),
        Ok(chunk) => chunk,
    }
}
