//! Clients that learn which endpoint leads and send there: every answer
//! of a replica names itself and the leader it knows (response headers,
//! see `palisade_gateway::leader_hint`). A write sent to a follower is
//! forwarded to the leader and answered once the follower applied the
//! outcome; sent to the leader it saves both.
//!
//! [`LeaderPreference`] is the decision, kept apart from any transport:
//! [`Client`](crate::client::Client) consults it in its failover loop, and
//! [`LeaderChannel`] is a channel over several replicas that routes each
//! call by it (for programs that use the generated clients directly, such
//! as the benchmarks).

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use palisade_gateway::leader_hint::{LEADER_ID_HEADER, NODE_ID_HEADER};
use tonic::codegen::{BoxFuture, http};
use tonic::transport::Channel;
use tower::ServiceExt as _;

/// What the client knows of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// Not answered yet: who it is is not known.
    Nothing,
    /// Answered as this node id.
    Node(u64),
    /// Could not be reached (or broke) since it last answered: not tried
    /// to learn who it is, only to fail over.
    Failed,
}

/// Which of a client's endpoints to send to: the leader's once known.
///
/// After each answer ([`LeaderPreference::answered`]) it records the node id
/// of the endpoint that answered and prefers the endpoint of the leader
/// that answer named; if no endpoint is known to be that node yet, it
/// prefers one not heard from (its answer will say who it is), so a client
/// finds the leader within as many calls as it has endpoints. A leader
/// that is not among the endpoints leaves the preference where it is.
#[derive(Debug, Clone)]
pub struct LeaderPreference {
    heard: Vec<Heard>,
    preferred: usize,
}

impl LeaderPreference {
    /// A preference over `endpoints` endpoints, first trying `first`.
    ///
    /// # Panics
    ///
    /// If `endpoints` is zero or `first` is not below it.
    pub fn new(endpoints: usize, first: usize) -> Self {
        assert!(first < endpoints, "endpoint {first} of {endpoints}");
        Self {
            heard: vec![Heard::Nothing; endpoints],
            preferred: first,
        }
    }

    /// The endpoint to send the next call to.
    pub fn preferred(&self) -> usize {
        self.preferred
    }

    /// The node id endpoint `at` answered as last, if it answered.
    pub fn node_of(&self, at: usize) -> Option<u64> {
        match self.heard[at] {
            Heard::Node(node) => Some(node),
            Heard::Nothing | Heard::Failed => None,
        }
    }

    /// Endpoint `at` answered (a result or an error status) with these
    /// headers: learn from them (see the type's doc).
    pub fn answered(&mut self, at: usize, headers: &http::HeaderMap) {
        let node = header_number(headers, NODE_ID_HEADER);
        if let Some(node) = node {
            // Another endpoint that claimed this id is out of date (an
            // address now served by another replica).
            for heard in &mut self.heard {
                if *heard == Heard::Node(node) {
                    *heard = Heard::Nothing;
                }
            }
            self.heard[at] = Heard::Node(node);
        }
        self.preferred = at;
        let Some(leader) = header_number(headers, LEADER_ID_HEADER) else {
            return;
        };
        if node == Some(leader) {
            return;
        }
        if let Some(known) = self
            .heard
            .iter()
            .position(|heard| *heard == Heard::Node(leader))
        {
            self.preferred = known;
        } else if let Some(unknown) = self.heard.iter().position(|heard| *heard == Heard::Nothing) {
            self.preferred = unknown;
        }
    }

    /// Endpoint `at` could not be reached or broke: the next one is tried,
    /// and `at` is not explored until it answers again.
    pub fn failed(&mut self, at: usize) {
        self.heard[at] = Heard::Failed;
        if self.preferred == at {
            self.preferred = (at + 1) % self.heard.len();
        }
    }
}

fn header_number(headers: &http::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// A gRPC channel over one connection to each replica that sends each
/// call to the endpoint a shared [`LeaderPreference`] names, and learns
/// from each answer. No failover: a call that fails is the caller's (the
/// next call goes to the next endpoint). Cheap to clone; clones share the
/// preference.
#[derive(Clone)]
pub struct LeaderChannel {
    channels: Arc<[Channel]>,
    preference: Arc<Mutex<LeaderPreference>>,
}

impl LeaderChannel {
    /// Routes over `channels` (one per replica), first trying `first`.
    ///
    /// # Panics
    ///
    /// If `channels` is empty or `first` is not an index of it.
    pub fn new(channels: Vec<Channel>, first: usize) -> Self {
        let preference = LeaderPreference::new(channels.len(), first);
        Self {
            channels: channels.into(),
            preference: Arc::new(Mutex::new(preference)),
        }
    }

    /// The endpoint the next call goes to.
    pub fn preferred(&self) -> usize {
        self.preference().preferred()
    }

    fn preference(&self) -> std::sync::MutexGuard<'_, LeaderPreference> {
        // Plain fields, changed whole: a panic elsewhere leaves them usable.
        self.preference
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for LeaderChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Which channel takes the call is decided in `call`; that one is
        // waited for there.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let at = self.preferred();
        let channel = self.channels[at].clone();
        let preference = Arc::clone(&self.preference);
        Box::pin(async move {
            let answer = channel.oneshot(request).await;
            let mut preference = preference.lock().unwrap_or_else(PoisonError::into_inner);
            match &answer {
                Ok(response) => preference.answered(at, response.headers()),
                Err(_) => preference.failed(at),
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(node: u64, leader: Option<u64>) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(NODE_ID_HEADER, node.into());
        if let Some(leader) = leader {
            headers.insert(LEADER_ID_HEADER, leader.into());
        }
        headers
    }

    #[test]
    fn the_leader_is_found_within_as_many_answers_as_endpoints() {
        // Endpoints 0, 1, 2 are nodes 5, 6, 7; node 7 leads.
        let mut preference = LeaderPreference::new(3, 0);
        preference.answered(0, &headers(5, Some(7)));
        assert_eq!(preference.preferred(), 1, "explores one not heard from");
        preference.answered(1, &headers(6, Some(7)));
        assert_eq!(preference.preferred(), 2);
        preference.answered(2, &headers(7, Some(7)));
        assert_eq!(preference.preferred(), 2, "stays on the leader");
        // Leadership moves to node 5, which the client knows.
        preference.answered(2, &headers(7, Some(5)));
        assert_eq!(preference.preferred(), 0);
        assert_eq!(preference.node_of(1), Some(6));
    }

    #[test]
    fn a_leader_not_among_the_endpoints_or_none_known_keeps_the_endpoint() {
        let mut preference = LeaderPreference::new(2, 0);
        preference.answered(0, &headers(5, Some(9)));
        assert_eq!(preference.preferred(), 1);
        preference.answered(1, &headers(6, Some(9)));
        assert_eq!(
            preference.preferred(),
            1,
            "every endpoint known, none leads"
        );
        preference.answered(1, &headers(6, None));
        assert_eq!(preference.preferred(), 1, "an election: no leader named");
        // Answers without the headers (an older release) change nothing
        // but the endpoint that answered.
        preference.answered(0, &http::HeaderMap::new());
        assert_eq!(preference.preferred(), 0);
    }

    #[test]
    fn a_failed_endpoint_is_not_explored_and_an_address_can_change_hands() {
        let mut preference = LeaderPreference::new(3, 0);
        preference.failed(0);
        assert_eq!(preference.preferred(), 1);
        preference.answered(1, &headers(6, Some(7)));
        assert_eq!(preference.preferred(), 2, "not the failed endpoint 0");
        // Endpoint 2 answers as node 6 (the address moved): endpoint 1 is
        // no longer known to be node 6.
        preference.answered(2, &headers(6, Some(7)));
        assert_eq!(preference.node_of(1), None);
        assert_eq!(preference.preferred(), 1, "endpoint 1 may be node 7 now");
    }
}
