//! Every answer of the public services to an authenticated caller names
//! the replica that gave it and the leader that replica knows, in two
//! response headers ([`NODE_ID_HEADER`], [`LEADER_ID_HEADER`]), so that a
//! client learns which of its endpoints leads and sends its requests there.
//!
//! # Why
//!
//! Any replica takes any request, but a follower forwards a write to the
//! leader (one more hop each way) and answers only once its own state
//! machine has applied the outcome (one more replication round for the
//! completion). Measured with `palisade-bench` (noop driver), all clients
//! on the leader against clients spread over the three replicas: 16
//! clients 1,450-1,690 -> 2,035-2,250 ops/s, 256 clients 3,650-4,040 ->
//! 4,390-4,930, one client p50 2.3-2.6 -> 2.1-2.2 ms.
//!
//! # Decisions
//!
//! - **Node ids, not addresses.** The membership records each replica's
//!   *peer* address, which a client cannot use (the peer port takes only
//!   replicas' certificates), and a client may reach the public port under
//!   a name of its own (a load balancer, a port forward). So the headers
//!   carry node ids, and a client matches them against the endpoints it was
//!   given, learning each endpoint's node id from that endpoint's answers
//!   (see `palisade_cli::client::LeaderPreference`).
//! - **Every answer to an authenticated caller, errors too.** The headers
//!   are read when the handler answered (the leader as of then), and are
//!   HTTP headers, so a trailers-only error answer carries them as well: a
//!   client refused by the lifecycle or told NO_LEADER still learns what
//!   the replica knows. A caller the replica did not authenticate learns
//!   nothing of the cluster's members: the wrapper sits inside
//!   authentication.
//! - **No leader known: no leader header.** During an election the answer
//!   names only the replica.

use std::convert::Infallible;
use std::task::{Context, Poll};

use openraft::async_runtime::WatchReceiver as _;
use palisade_raft::Raft;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

/// Response header: the node id of the replica that answered.
pub const NODE_ID_HEADER: &str = "palisade-node-id";
/// Response header: the node id of the leader the answering replica knew
/// when it answered (absent while it knows none).
pub const LEADER_ID_HEADER: &str = "palisade-leader-id";

/// Wraps a service so that its answers carry the two headers (see the
/// module doc).
pub fn leader_headers<S>(inner: S, node_id: u64, raft: Raft) -> LeaderHeaders<S> {
    LeaderHeaders {
        inner,
        node_id: http::HeaderValue::from(node_id),
        raft,
    }
}

/// A service behind [`leader_headers`].
#[derive(Clone)]
pub struct LeaderHeaders<S> {
    inner: S,
    node_id: http::HeaderValue,
    raft: Raft,
}

impl<S: NamedService> NamedService for LeaderHeaders<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for LeaderHeaders<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The service that was polled ready takes the call; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let node_id = self.node_id.clone();
        let raft = self.raft.clone();
        Box::pin(async move {
            let mut response = inner.call(request).await?;
            let leader = raft.metrics().borrow_watched().current_leader;
            let headers = response.headers_mut();
            headers.insert(NODE_ID_HEADER, node_id);
            if let Some(leader) = leader {
                headers.insert(LEADER_ID_HEADER, http::HeaderValue::from(leader));
            }
            Ok(response)
        })
    }
}
