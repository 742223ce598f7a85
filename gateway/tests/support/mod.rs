//! One real replica in this process, for edge and fuzz tests of the API:
//! the whole server stack (`run_with_hooks`: redb log, openraft, the
//! executor with the noop driver, the tonic server on a loopback port)
//! reached through real gRPC clients over TCP — typed clients, and a raw
//! one that sends any bytes as a request body.
//!
//! Also: a tracing layer and a panic hook that count ERROR events and
//! panics in this test process, so a test can assert that a malformed
//! request logged nothing at error level and panicked nowhere.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use palisade_driver::noop::NoopDriver;
use palisade_gateway::executor::ExecutorConfig;
use palisade_gateway::node::{NodeConfig, NodeHooks, RaftTiming, RunningNode, run_with_hooks};
use palisade_gateway::replica::{Replica, ReplicaTimeouts};
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::codegen::Service as _;
use tonic::transport::{Channel, Endpoint};
use tonic_types::StatusExt as _;

/// How long a single test call may take (the machine is shared and slow).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// ERROR events logged and panics seen in this process so far.
static ERRORS_LOGGED: AtomicUsize = AtomicUsize::new(0);
static PANICS: AtomicUsize = AtomicUsize::new(0);
/// The last few ERROR events and panics, to show when a test fails.
static LAST_PROBLEMS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(problem: String) {
    let mut last = LAST_PROBLEMS.lock().unwrap_or_else(|p| p.into_inner());
    if last.len() < 20 {
        last.push(problem);
    }
}

struct CountErrors;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountErrors {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _context: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() == tracing::Level::ERROR {
            ERRORS_LOGGED.fetch_add(1, Ordering::SeqCst);
            remember(format!("ERROR event at {}", event.metadata().target()));
        }
    }
}

/// Installs the counting layer (plus WARN and up on stderr) and the panic
/// hook, once per process.
pub fn watch_errors_and_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry().with(CountErrors).with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::new("warn,openraft=error")),
        );
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            remember(format!("panic: {info}"));
            default_hook(info);
        }));
    });
}

use tracing_subscriber::Layer as _;

/// (ERROR events, panics) so far.
pub fn problems_so_far() -> (usize, usize) {
    (
        ERRORS_LOGGED.load(Ordering::SeqCst),
        PANICS.load(Ordering::SeqCst),
    )
}

/// What was seen, for a failure message.
pub fn problems_seen() -> Vec<String> {
    LAST_PROBLEMS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// One replica (a cluster of one) running in this process.
pub struct TestReplica {
    /// `http://127.0.0.1:PORT`.
    pub uri: String,
    /// The replica's handles (state, Raft).
    pub replica: Replica,
    channel: Channel,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestReplica {
    /// Starts the replica and waits until it leads and the cluster
    /// identity (the execution-token secret) is applied. The executor's
    /// clock tick is off, so the applied index moves only with requests.
    pub async fn start() -> TestReplica {
        watch_errors_and_panics();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("bound").to_string();
        let config = NodeConfig {
            node_id: 1,
            listen: listener.local_addr().expect("bound"),
            // In-process, plaintext: one listener serves peers too.
            peer_listen: None,
            advertise: address.clone(),
            tls: None,
            data_dir: dir.path().join("node-1"),
            initial_cluster: BTreeMap::from([(1, address.clone())]),
            timing: RaftTiming::default(),
            log_policy: palisade_gateway::node::RaftLogPolicy::default(),
            limits: palisade_gateway::node::ServerLimits::default(),
            executor: ExecutorConfig {
                tick_interval: Duration::from_secs(24 * 3600),
                ..ExecutorConfig::default()
            },
            timeouts: ReplicaTimeouts::default(),
            drain_timeout: Duration::from_secs(1),
            postgres_url: None,
            projection_events_kept_entries:
                palisade_projection::projector::EVENTS_KEPT_ENTRIES_DEFAULT,
            metrics_listen: None,
        };
        let (started, running) = oneshot::channel::<RunningNode>();
        let started = Mutex::new(Some(started));
        let hooks = NodeHooks {
            on_started: Some(Arc::new(move |node| {
                if let Some(started) = started.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = started.send(node);
                }
            })),
            ..NodeHooks::default()
        };
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stop.await;
            };
            if let Err(error) = run_with_hooks(
                config,
                Arc::new(NoopDriver::new()),
                listener,
                hooks,
                stopped,
            )
            .await
            {
                panic!("the test replica failed: {error}");
            }
        });
        let running = tokio::time::timeout(CALL_TIMEOUT, running)
            .await
            .expect("the replica starts in time")
            .expect("the replica hands over its handles");
        let replica = running.replica;
        let uri = format!("http://{address}");
        let channel = Endpoint::from_shared(uri.clone())
            .expect("a valid URI")
            .timeout(CALL_TIMEOUT)
            .connect_lazy();
        let test = TestReplica {
            uri,
            replica,
            channel,
            shutdown: Some(shutdown),
            task: Some(task),
            _dir: dir,
        };
        let state = test.replica.state.clone();
        // The new leader writes the cluster identity and a first clock
        // tick; then the log stands still until a request moves it.
        tokio::time::timeout(CALL_TIMEOUT, async {
            let mut quiet_since = (state.applied_index(), tokio::time::Instant::now());
            loop {
                let index = state.applied_index();
                if index != quiet_since.0 {
                    quiet_since = (index, tokio::time::Instant::now());
                }
                if state.read(|applied| applied.state.cluster.is_some())
                    && quiet_since.1.elapsed() >= Duration::from_millis(300)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the replica leads and initializes the cluster in time");
        test
    }

    /// A `palisade.v1.Palisade` client.
    pub fn client(&self) -> PalisadeClient<Channel> {
        PalisadeClient::new(self.channel.clone())
    }

    /// A `palisade.v1.ClusterAdmin` client.
    pub fn admin(&self) -> ClusterAdminClient<Channel> {
        ClusterAdminClient::new(self.channel.clone())
    }

    /// The index of the last entry the replica applied.
    pub fn applied_index(&self) -> u64 {
        self.replica.state.applied_index()
    }

    /// Sends `body` as the whole HTTP/2 request body of a gRPC call to
    /// `path` (`/palisade.v1.Palisade/ListSandboxes`), unframed: the caller
    /// writes the 5-byte gRPC frame header (see [`frame`]) or not.
    pub async fn raw(&self, path: &str, body: Bytes) -> RawAnswer {
        let mut channel = self.channel.clone();
        let request = tonic::codegen::http::Request::builder()
            .method("POST")
            .uri(format!("{}{path}", self.uri))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(tonic::body::Body::new(
                http_body_util::Full::new(body).map_err(|never| match never {}),
            ))
            .expect("a valid request");
        std::future::poll_fn(|context| channel.poll_ready(context))
            .await
            .expect("the channel is ready");
        let response = match tokio::time::timeout(CALL_TIMEOUT, channel.call(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                return RawAnswer {
                    status: None,
                    transport_error: Some(error.to_string()),
                    header_bytes: 0,
                };
            }
            Err(_) => panic!("no answer to a raw call of {path} within {CALL_TIMEOUT:?}"),
        };
        let (parts, mut body) = response.into_parts();
        let mut header_bytes = header_map_bytes(&parts.headers);
        if parts.headers.contains_key("grpc-status") {
            return RawAnswer {
                status: Some(tonic::Status::from_header_map(&parts.headers).expect("a status")),
                transport_error: None,
                header_bytes,
            };
        }
        // A watch that started streams until it is dropped: that it
        // started is the answer.
        if path.ends_with("/WatchSandboxes") {
            return RawAnswer {
                status: None,
                transport_error: None,
                header_bytes,
            };
        }
        // A unary answer: the message, then the trailers with the status.
        loop {
            match tokio::time::timeout(CALL_TIMEOUT, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        header_bytes += header_map_bytes(&trailers);
                        return RawAnswer {
                            status: tonic::Status::from_header_map(&trailers),
                            transport_error: None,
                            header_bytes,
                        };
                    }
                }
                Ok(Some(Err(error))) => {
                    return RawAnswer {
                        status: None,
                        transport_error: Some(error.to_string()),
                        header_bytes,
                    };
                }
                Ok(None) => {
                    return RawAnswer {
                        status: None,
                        transport_error: Some("the answer ended without trailers".into()),
                        header_bytes,
                    };
                }
                Err(_) => panic!("the answer to {path} stalled for {CALL_TIMEOUT:?}"),
            }
        }
    }

    /// Stops the replica (notify, then drain).
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(CALL_TIMEOUT, task).await;
        }
    }
}

fn header_map_bytes(headers: &tonic::codegen::http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum()
}

/// A gRPC frame: uncompressed flag, big-endian length, the message.
pub fn frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// What a raw call got back.
#[derive(Debug)]
pub struct RawAnswer {
    /// The gRPC status: `Some(OK)` for a unary success; `None` for a watch
    /// that started streaming, or when the call broke (`transport_error`).
    pub status: Option<tonic::Status>,
    /// The transport error, if the call broke.
    pub transport_error: Option<String>,
    /// Bytes of response headers and trailers.
    pub header_bytes: usize,
}

/// Asserts that `status` is `code` with an ErrorInfo whose reason is
/// `reason` (domain palisade.dev); returns the message.
pub fn assert_refused(status: &tonic::Status, code: tonic::Code, reason: &str) -> String {
    assert_eq!(status.code(), code, "{status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "{status:?}");
    assert_eq!(info.domain, palisade_proto::ERROR_DOMAIN, "{status:?}");
    status.message().to_string()
}

/// Asserts no ERROR was logged and nothing panicked since `before`.
pub fn assert_no_new_problems(before: (usize, usize)) {
    let now = problems_so_far();
    assert_eq!(
        now,
        before,
        "(ERROR events, panics) went from {before:?} to {now:?}: {:#?}",
        problems_seen()
    );
}
