//! The cached per-peer channels behind [`PeerClients`], and how the transport
//! copes with a slow or absent peer: connect and keepalive settings, the
//! retry backoff openraft uses, the link-fault hook of tests and chaos, and
//! the reading of a failed call's gRPC status.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use super::client::PeerNetworkFactory;
use super::wire::{Encoding, PEER_MESSAGE_BYTES_MAX};
use crate::feature_level::ClusterLevel;
use crate::hooks::{FaultPoints, LinkFaults, LinkVerdict, PeerRpc};
use crate::tls::TlsMaterial;
use crate::types::NodeId;

/// First pause openraft makes before retrying an unreachable peer.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(50);

/// Longest pause between retries to an unreachable peer: a replica that
/// comes back is caught up at most this long after it can be reached.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Factor by which the pause grows after each failed retry.
pub const BACKOFF_GROWTH: u32 = 2;

/// Time allowed to connect to a peer: the TCP connect and the TLS
/// handshake together (`simnet::channel_lazy`). An RPC's own deadline cuts
/// it shorter when the RPC has less time left.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Interval of HTTP/2 pings on an idle peer connection, so that a
/// connection silently lost in a partition is noticed and reopened.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// How long a ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The pauses openraft makes between retries to an unreachable peer:
/// [`BACKOFF_INITIAL`], growing by [`BACKOFF_GROWTH`] up to [`BACKOFF_MAX`].
/// No jitter: a leader has one stream per follower, so there is no herd of
/// retries to spread, and a fixed sequence keeps tests deterministic.
pub fn backoff_delays() -> impl Iterator<Item = Duration> + Send + 'static {
    std::iter::successors(Some(BACKOFF_INITIAL), |delay| {
        Some(delay.saturating_mul(BACKOFF_GROWTH).min(BACKOFF_MAX))
    })
}

/// This replica's outgoing peer connections: cheap to clone, shared by the
/// Raft network factory and by the gateway (for [`forward_write`]).
///
/// [`forward_write`]: PeerClients::forward_write
#[derive(Clone, Debug)]
pub struct PeerClients {
    pub(super) shared: Arc<Shared>,
}

#[derive(Debug)]
pub(super) struct Shared {
    /// This replica's node id, sent as `from_node` on every message.
    node_id: NodeId,
    /// One channel per peer. A `std` mutex: it is held only to look up or
    /// insert an entry, never across an await. Bounded by the number of node
    /// ids ever seen in the membership (an entry is replaced, not added, when
    /// a node's address changes).
    channels: Mutex<HashMap<NodeId, CachedChannel>>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    pub(super) link_faults: Option<Arc<dyn LinkFaults>>,
    /// Test and chaos hooks ([`crate::hooks`]); `None` in production.
    pub(super) fault_points: Option<Arc<dyn FaultPoints>>,
    /// Mutual TLS under the cluster CA; `None` only with `--insecure`.
    tls: Option<Arc<TlsMaterial>>,
    /// The applied cluster feature level: whether peers decode the binary
    /// encoding yet ([`ClusterLevel::peer_encoding`]).
    pub(super) cluster_level: ClusterLevel,
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
                tls: None,
                cluster_level: ClusterLevel::default(),
            }),
        }
    }

    /// The same settings, changed by `edit`, with no connection open yet.
    fn rebuilt(self, edit: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared {
            node_id: self.shared.node_id,
            channels: Mutex::new(HashMap::new()),
            link_faults: self.shared.link_faults.clone(),
            fault_points: self.shared.fault_points.clone(),
            tls: self.shared.tls.clone(),
            cluster_level: self.shared.cluster_level.clone(),
        };
        edit(&mut shared);
        Self {
            shared: Arc::new(shared),
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
        self.rebuilt(|shared| {
            shared.link_faults = link_faults;
            shared.fault_points = fault_points;
        })
    }

    /// The same connections over mutual TLS: each peer is dialed with
    /// `tls`'s certificate and must present `node-<ID>.peer.palisade`
    /// ([`crate::tls`]). Call it right after [`PeerClients::new`] (or
    /// [`PeerClients::with_hooks`]), before any clone is made.
    pub fn with_tls(self, tls: Option<TlsMaterial>) -> Self {
        self.rebuilt(|shared| shared.tls = tls.map(Arc::new))
    }

    /// The same connections, sending in the encoding `cluster_level` (the
    /// state machine's, [`crate::StateHandle::cluster_level`]) allows:
    /// JSON until every voter decodes the binary encoding. Without it, JSON
    /// always. Call it right after [`PeerClients::new`], before any clone
    /// is made.
    pub fn with_cluster_level(self, cluster_level: ClusterLevel) -> Self {
        self.rebuilt(|shared| shared.cluster_level = cluster_level)
    }

    /// How messages to peers are encoded now.
    pub(crate) fn payload_encoding(&self) -> Encoding {
        self.shared.cluster_level.peer_encoding()
    }

    /// The link-fault verdict for a message to `to` (deliver, without hooks).
    pub(super) fn verdict(&self, to: NodeId, rpc: PeerRpc) -> LinkVerdict {
        link_verdict(self.shared.link_faults.as_ref(), self.node_id(), to, rpc)
    }

    /// The mutual-TLS material peers are dialed with (`None`: plaintext).
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.shared.tls.as_deref()
    }

    /// This replica's node id.
    pub fn node_id(&self) -> NodeId {
        self.shared.node_id
    }

    /// The openraft network factory that sends over these connections; pass
    /// it to `Raft::new`.
    pub fn network_factory(&self) -> PeerNetworkFactory {
        PeerNetworkFactory::new(self.clone())
    }

    /// A gRPC client for `target` at `addr`, on the cached channel. Must run
    /// inside a tokio runtime: a new channel spawns its connection task.
    pub(super) fn rpc_client(
        &self,
        target: NodeId,
        addr: &str,
    ) -> Result<RaftPeerClient<Channel>, String> {
        let channel = {
            let mut channels = self
                .shared
                .channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match channels.get(&target) {
                Some(cached) if cached.addr == addr => cached.channel.clone(),
                _ => {
                    let channel =
                        endpoint(addr, target, self.shared.tls.as_deref()).map_err(|error| {
                            format!("node {target} has an invalid address {addr:?}: {error}")
                        })?;
                    let channel = crate::simnet::channel_lazy(channel);
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
}

/// The tonic endpoint for a peer address (`host:port`, or a full URI),
/// over mutual TLS when `tls` is given.
fn endpoint(
    addr: &str,
    target: NodeId,
    tls: Option<&TlsMaterial>,
) -> Result<Endpoint, tonic::transport::Error> {
    let endpoint = crate::tls::peer_endpoint(addr, target, tls)?
        .connect_timeout(CONNECT_TIMEOUT)
        // Raft messages are small and latency-bound.
        .tcp_nodelay(true);
    if crate::runtime::is_simulated() {
        // hyper times its keep-alive pings with the system clock, not
        // tokio's: in the simulation they would fire at wall-clock moments.
        // An in-memory pipe is never silently lost anyway.
        return Ok(endpoint);
    }
    Ok(endpoint
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

/// The verdict of `link_faults` (deliver, without hooks).
pub(super) fn link_verdict(
    link_faults: Option<&Arc<dyn LinkFaults>>,
    from: NodeId,
    to: NodeId,
    rpc: PeerRpc,
) -> LinkVerdict {
    link_faults.map_or(LinkVerdict::Deliver, |faults| faults.verdict(from, to, rpc))
}

/// How a failed RPC is reported to openraft.
pub(super) enum Failure {
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

pub(super) fn classify(status: &Status) -> Failure {
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
pub(super) fn is_connect_failure(status: &Status) -> bool {
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

pub(super) fn describe_status(status: &Status) -> String {
    match status.source() {
        Some(source) => format!("{:?}: {} ({source})", status.code(), status.message()),
        None => format!("{:?}: {}", status.code(), status.message()),
    }
}

#[cfg(test)]
mod tests {
    use tonic::Status;

    use super::{Failure, backoff_delays, classify, endpoint};

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
        assert!(endpoint("127.0.0.1:7001", 1, None).is_ok());
        assert!(endpoint("http://replica-2.palisade:7001", 2, None).is_ok());
        assert!(endpoint("not an address", 1, None).is_err());
    }
}
