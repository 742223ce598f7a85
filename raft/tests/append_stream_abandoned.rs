//! An abandoned `StreamAppend` stops pulling requests (issue 13, the stuck
//! follower).
//!
//! openraft ends a replication session by dropping the response side of
//! `stream_append` (after a timeout, an error, a conflict) and starts the
//! next session with a new request stream whose generator shares its state
//! (what to send next) with the old one. If the transport kept polling the
//! old request stream, the old session would go on pulling entries: it
//! moves the new session's position past what the peer received on the new
//! stream, and after a purge it re-reads a purged range forever
//! (`limited_get_log_entries(..) returned empty`).
//!
//! Here the peer is a server that reads every request and never answers, as
//! a frozen or overloaded follower does: the first answer's deadline
//! passes, the response side reports a timeout and is dropped, and from
//! then on the request stream must not be polled again.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::errors::RPCError;
use openraft::network::RPCOption;
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, RaftNetworkFactory, RaftNetworkV2};
use palisade_proto::peer::raft_peer_server::{RaftPeer, RaftPeerServer};
use palisade_proto::peer::{PeerMessage, SnapshotChunk};
use palisade_raft::network::PeerClients;
use palisade_raft::{TypeConfig, Vote};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// A peer that reads every `StreamAppend` request and never answers.
#[derive(Default)]
struct SilentPeer {
    received: Arc<AtomicU64>,
}

type Replies = Pin<Box<dyn Stream<Item = Result<PeerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl RaftPeer for SilentPeer {
    type StreamAppendStream = Replies;

    async fn stream_append(
        &self,
        request: Request<Streaming<PeerMessage>>,
    ) -> Result<Response<Replies>, Status> {
        let mut incoming = request.into_inner();
        let received = Arc::clone(&self.received);
        tokio::spawn(async move {
            while let Ok(Some(_)) = incoming.message().await {
                received.fetch_add(1, Ordering::SeqCst);
            }
        });
        Ok(Response::new(Box::pin(futures::stream::pending())))
    }

    async fn append_entries(
        &self,
        _: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn vote(&self, _: Request<PeerMessage>) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn pre_vote(&self, _: Request<PeerMessage>) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn install_snapshot(
        &self,
        _: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn transfer_leader(
        &self,
        _: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn forward_write(
        &self,
        _: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
    async fn read_index(&self, _: Request<PeerMessage>) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }

    async fn supported_feature_level(
        &self,
        _: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("silent peer"))
    }
}

fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    }
}

#[tokio::test]
async fn a_dropped_append_stream_stops_pulling_requests() {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("bound").to_string();
    let peer = SilentPeer::default();
    let received = Arc::clone(&peer.received);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RaftPeerServer::new(peer))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    // What openraft's generator would produce, one request at a time; the
    // counter says how many the transport pulled.
    let (requests_tx, requests_rx) = mpsc::channel::<AppendEntriesRequest<TypeConfig>>(1);
    let pulled = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&pulled);
    let input = ReceiverStream::new(requests_rx).inspect(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });

    let mut client = PeerClients::new(1)
        .network_factory()
        .new_client(2, &BasicNode::new(addr))
        .await;
    requests_tx.send(heartbeat()).await.expect("queued");
    let mut responses = client
        .stream_append(input, RPCOption::new(Duration::from_millis(200)))
        .await
        .expect("the stream opens");
    // The peer never answers: the first answer is overdue.
    let first = responses.next().await.expect("an outcome");
    assert!(
        matches!(first, Err(RPCError::Timeout(_))),
        "expected a timeout, got {first:?}"
    );
    assert_eq!(
        received.load(Ordering::SeqCst),
        1,
        "the peer got the request"
    );
    // openraft gives up on the session: it drops the response side.
    drop(responses);
    let pulled_when_dropped = pulled.load(Ordering::SeqCst);

    // The generator has more to send (a new session would be producing
    // now): none of it may be taken by the abandoned stream.
    for _ in 0..3 {
        let _ =
            tokio::time::timeout(Duration::from_millis(300), requests_tx.send(heartbeat())).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        pulled.load(Ordering::SeqCst),
        pulled_when_dropped,
        "the abandoned stream kept pulling requests from openraft's generator"
    );
    assert_eq!(
        received.load(Ordering::SeqCst),
        1,
        "the abandoned stream kept sending requests to the peer"
    );
}
