//! The simulated network of `palisade chaos run --sim`: every connection
//! between replicas (Raft, forwarded writes, founding checks) and from the
//! chaos clients is an in-memory [`tokio::io::duplex`] pipe instead of a
//! TCP socket, so that a simulation's bytes move only when its single
//! thread polls them (a socket's readiness comes from the kernel, at
//! wall-clock moments).
//!
//! A replica [`SimNet::listen`]s on its address; a dialer hands the
//! listener one end of a fresh pipe ([`SimNet::connect`]). The simulation
//! installs its network on its thread ([`SimNet::install`]); the peer
//! transport then dials through it ([`channel_lazy`], [`channel`]).
//!
//! Outside a simulation the same two functions dial over TCP, with the
//! endpoint's connect timeout bounding the TCP connect *and* the TLS
//! handshake ([`tcp_connector`]): tonic's own `connect` and `connect_lazy`
//! bound the TCP connect only, and a replica paused by SIGSTOP (whose kernel
//! still accepts connections) or anything else that accepts and never
//! answers held a connection attempt, and every call waiting on it, for as
//! long as that lasted. Every gRPC channel Palisade opens goes through them.
//! Network faults stay where they are in every mode: the link table decides
//! each peer message's fate above the transport.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Bytes a pipe buffers each way.
const PIPE_BYTES: usize = 256 * 1024;

thread_local! {
    static CURRENT: RefCell<Option<SimNet>> = const { RefCell::new(None) };
}

/// The listeners of a simulation, by address (`host:port`). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SimNet {
    listeners: Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<DuplexStream>>>>,
}

/// The connections accepted on one simulated address, as tonic's
/// `serve_with_incoming` takes them.
pub type SimIncoming = futures::stream::Map<
    UnboundedReceiverStream<DuplexStream>,
    fn(DuplexStream) -> Result<DuplexStream, std::io::Error>,
>;

impl SimNet {
    /// A network with no listener.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes this network the one the peer transport of this thread dials.
    pub fn install(&self) {
        CURRENT.with(|current| *current.borrow_mut() = Some(self.clone()));
    }

    /// Removes the network of this thread.
    pub fn uninstall() {
        CURRENT.with(|current| *current.borrow_mut() = None);
    }

    /// The network installed on this thread.
    pub fn current() -> Option<SimNet> {
        CURRENT.with(|current| current.borrow().clone())
    }

    /// Listens on `addr` (replacing an earlier listener there, as a
    /// restarted replica binds its port again).
    pub fn listen(&self, addr: &str) -> SimIncoming {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(bare(addr).to_owned(), sender);
        futures::StreamExt::map(UnboundedReceiverStream::new(receiver), Ok)
    }

    /// Opens a connection to `addr` (`host:port` or a URI): refused when
    /// nobody listens there.
    pub fn connect(&self, addr: &str) -> std::io::Result<DuplexStream> {
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let listener = listeners.get(bare(addr)).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, addr.to_owned())
        })?;
        let (near, far) = tokio::io::duplex(PIPE_BYTES);
        listener.send(far).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, addr.to_owned())
        })?;
        Ok(near)
    }

    /// A tonic connector dialing through this network.
    pub fn connector(&self) -> SimConnector {
        SimConnector { net: self.clone() }
    }
}

fn bare(addr: &str) -> &str {
    let addr = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    addr.trim_end_matches('/')
}

/// Dials [`SimNet`] addresses for tonic's `connect_with_connector`.
#[derive(Clone, Debug)]
pub struct SimConnector {
    net: SimNet,
}

impl tower_service::Service<Uri> for SimConnector {
    type Response = TokioIo<DuplexStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let addr = uri
            .authority()
            .map(|authority| authority.as_str().to_owned())
            .unwrap_or_default();
        let connected = self.net.connect(&addr).map(TokioIo::new);
        Box::pin(async move { connected })
    }
}

/// A lazily connected channel to `endpoint`: through the simulated network
/// when this thread has one, else over TCP.
pub fn channel_lazy(endpoint: Endpoint) -> Channel {
    match SimNet::current() {
        Some(net) => endpoint.connect_with_connector_lazy(net.connector()),
        None => {
            let connector = tcp_connector(&endpoint);
            endpoint.connect_with_connector_lazy(connector)
        }
    }
}

/// A connected channel to `endpoint`: through the simulated network when
/// this thread has one, else over TCP.
pub async fn channel(endpoint: Endpoint) -> Result<Channel, tonic::transport::Error> {
    match SimNet::current() {
        Some(net) => endpoint.connect_with_connector(net.connector()).await,
        None => {
            let connector = tcp_connector(&endpoint);
            endpoint.connect_with_connector(connector).await
        }
    }
}

/// The TCP connector tonic builds for an endpoint, given to it as a custom
/// connector: tonic then wraps the whole connect, TLS included, in the
/// endpoint's connect timeout (see the module doc). Nagle is off, as
/// tonic's default is: every channel here carries small, latency-bound
/// calls.
fn tcp_connector(endpoint: &Endpoint) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(endpoint.get_connect_timeout());
    http
}
