//! openraft's network: [`PeerNetworkFactory`] hands out a [`PeerClient`] per
//! target, which sends openraft's RPCs (append entries, votes, snapshots,
//! leader transfer) over the cached channels within openraft's deadlines,
//! and reports every failure as the kind of error openraft expects. The
//! streamed append is in `append_stream`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{
    Fatal, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Timeout,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use palisade_proto::peer::{PeerMessage, SnapshotChunk};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::transport::Channel;

use super::channels::{
    Failure, PeerClients, backoff_delays, classify, describe_status, link_verdict,
};
use super::wire::{
    AppendReply, SNAPSHOT_BYTES_MAX, SNAPSHOT_CHUNK_BYTES_MAX, SnapshotHeader, SnapshotReply,
    TransferLeaderReply, VoteReply, decode, encode,
};
use crate::feature_level::ClusterLevel;
use crate::hooks::{LinkFaults, LinkVerdict, PeerRpc};
use crate::types::{Node, NodeId, Snapshot, TypeConfig, Vote};

/// Snapshot chunks queued ahead of the transport: enough to keep the
/// connection busy, few enough that a stalled peer holds little memory.
const SNAPSHOT_CHUNKS_QUEUED_MAX: usize = 2;

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
            cluster_level: self.clients.shared.cluster_level.clone(),
        }
    }
}

/// Sends openraft's messages to one target node.
#[derive(Debug)]
pub struct PeerClient {
    pub(super) peer: Peer,
    /// `Err` when the target's address does not parse: every RPC then fails
    /// as `Unreachable` with that reason (openraft cannot take an error from
    /// `new_client`).
    pub(super) client: Result<RaftPeerClient<Channel>, String>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    pub(super) link_faults: Option<Arc<dyn LinkFaults>>,
    /// Says how requests are encoded ([`ClusterLevel::peer_encoding`]).
    pub(super) cluster_level: ClusterLevel,
}

/// Who talks to whom; builds the errors openraft expects.
#[derive(Clone, Debug)]
pub(super) struct Peer {
    pub(super) local: NodeId,
    pub(super) target: NodeId,
    pub(super) addr: String,
}

impl Peer {
    pub(super) fn timeout(&self, action: RPCTypes, after: Duration) -> Timeout<TypeConfig> {
        Timeout {
            action,
            id: self.local,
            target: self.target,
            timeout: after,
        }
    }

    pub(super) fn unreachable(&self, reason: impl std::fmt::Display) -> Unreachable<TypeConfig> {
        Unreachable::from_string(format!("node {} at {}: {reason}", self.target, self.addr))
    }

    pub(super) fn status_error(
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
    pub(super) fn remote_fatal(&self, fatal: &Fatal<TypeConfig>) -> RPCError<TypeConfig> {
        RPCError::Unreachable(self.unreachable(format_args!("its Raft has stopped: {fatal}")))
    }

    fn remote_raft_error(&self, error: RaftError<TypeConfig>) -> RPCError<TypeConfig> {
        match error {
            RaftError::Fatal(fatal) => self.remote_fatal(&fatal),
            RaftError::APIError(never) => match never {},
        }
    }

    pub(super) fn message(&self, payload: Vec<u8>) -> PeerMessage {
        PeerMessage {
            from_node: self.local,
            to_node: self.target,
            payload,
        }
    }

    /// Checks who answered and decodes the payload.
    pub(super) fn open<T: DeserializeOwned>(
        &self,
        reply: &PeerMessage,
    ) -> Result<T, RPCError<TypeConfig>> {
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
    pub(super) fn client(&self) -> Result<RaftPeerClient<Channel>, Unreachable<TypeConfig>> {
        self.client
            .clone()
            .map_err(|reason| self.peer.unreachable(reason))
    }

    /// Applies the link-fault verdict for one message: a drop is an error
    /// (unreachable), a delay is slept here (a delay past `deadline` is a
    /// timeout); other verdicts are returned for the caller to apply.
    pub(super) async fn verdict(
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
    type SnapshotData = crate::types::SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let reply: AppendReply = self
            .unary(
                RPCTypes::AppendEntries,
                option.soft_ttl(),
                encode(&rpc, self.cluster_level.peer_encoding()),
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
        self.start_append_stream(input, option)
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
                encode(&rpc, self.cluster_level.peer_encoding()),
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
                encode(&rpc, self.cluster_level.peer_encoding()),
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
        let size_bytes = snapshot.snapshot.len();
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

        let header = encode(
            &SnapshotHeader {
                vote,
                meta: snapshot.meta.clone(),
                size_bytes,
            },
            self.cluster_level.peer_encoding(),
        );
        let (chunk_tx, chunk_rx) = mpsc::channel::<SnapshotChunk>(SNAPSHOT_CHUNKS_QUEUED_MAX);
        let call = client.install_snapshot(tonic::Request::new(ReceiverStream::new(chunk_rx)));

        let peer = &self.peer;
        let data = &snapshot.snapshot;
        let send_chunks = async move {
            let mut header = Some(header);
            let mut offset = 0u64;
            // The first chunk carries the header, even for an empty snapshot.
            loop {
                // A piece at a time from the file: the snapshot is never
                // all in memory (reads of at most a chunk, from the page
                // cache as a rule).
                let bytes = read_piece(data, offset, chunk_bytes).map_err(SendFailed::Read)?;
                if bytes.is_empty() && header.is_none() {
                    break;
                }
                offset += bytes.len() as u64;
                let chunk = SnapshotChunk {
                    from_node: peer.local,
                    to_node: peer.target,
                    header: header.take().unwrap_or_default(),
                    data: bytes,
                };
                match tokio::time::timeout(deadline, chunk_tx.send(chunk)).await {
                    Err(_elapsed) => return Err(SendFailed::Stalled),
                    // The call ended early (refused, or the stream broke):
                    // its result says why.
                    Ok(Err(_closed)) => return Ok(()),
                    Ok(Ok(())) => {}
                }
                if offset >= size_bytes {
                    break;
                }
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
                // `biased`: deterministic for `--sim`.
                biased;
                // The receiver answered before it had every byte: a refusal.
                reply = &mut call => reply,
                sent = &mut send_chunks => match sent {
                    // Returning drops `call`, which resets the stream: the
                    // receiver sees an error, not an end, and installs nothing.
                    Err(SendFailed::Stalled) => return Err(timeout()),
                    Err(SendFailed::Read(error)) => {
                        tracing::error!(
                            target_node = peer.target,
                            %error,
                            "cannot read the snapshot being sent; the transfer is abandoned"
                        );
                        return Err(StreamingError::Unreachable(peer.unreachable(
                            format_args!("cannot read the snapshot being sent: {error}"),
                        )));
                    }
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
            // `biased`: deterministic for `--sim`.
            biased;
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
                encode(&req, self.cluster_level.peer_encoding()),
                |mut client, request| async move { client.transfer_leader(request).await },
            )
            .await?;
        reply.map_err(|fatal| self.peer.remote_fatal(&fatal))
    }

    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(backoff_delays()))
    }
}

/// Why a snapshot's chunks stopped before the end.
enum SendFailed {
    /// A chunk could not be handed to the transport in time.
    Stalled,
    /// The snapshot's file could not be read.
    Read(std::io::Error),
}

/// The next piece of a snapshot being sent: at most `chunk_bytes` from
/// `offset` (empty at the end).
fn read_piece(
    data: &crate::types::SnapshotData,
    offset: u64,
    chunk_bytes: usize,
) -> std::io::Result<Vec<u8>> {
    let left = data.len().saturating_sub(offset);
    let mut piece = vec![0u8; chunk_bytes.min(usize::try_from(left).unwrap_or(usize::MAX))];
    let read = data.read_at(offset, &mut piece)?;
    piece.truncate(read);
    Ok(piece)
}
