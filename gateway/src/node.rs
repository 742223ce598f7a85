//! Running one gateway replica: storage, Raft, the effect executor, two gRPC
//! servers — the public one (public API, cluster admin, health; TLS) and
//! the peer port (Raft and forwarded writes only; mutual TLS under the
//! cluster CA, a peer's node id from its certificate) — and a designed
//! shutdown.
//!
//! Shutdown is notify-then-drain (as in mini-redis): the caller passes a
//! future that resolves when the replica must stop; the replica then
//!
//! 1. refuses new public API requests with UNAVAILABLE / SHUTTING_DOWN,
//!    an answer given before anything was proposed, so clients fail over
//!    to another replica at once ([`DrainGate`]);
//! 2. hands leadership off if it leads (requests it was waiting on as
//!    leader answer LEADERSHIP_CHANGED, and clients retry elsewhere);
//! 3. lets in-flight public requests finish, for a bounded time, while the
//!    gRPC server keeps running: peer traffic (replication from the new
//!    leader, forwarded writes, votes) must go on for them to finish;
//! 4. only then stops the gRPC server, the executor and Raft.
//!
//! Fail-stop: a replica whose Raft stopped on its own (openraft's `Fatal`:
//! a storage error such as a full disk on append, a panic in its core) or
//! whose applied state a panic poisoned cannot serve correctly. From the
//! moment that is seen, health reports NOT_SERVING and public requests are
//! refused; then the replica stops and [`run`] returns
//! [`NodeError::Fatal`], which the binary turns into a clear message and a
//! non-zero exit, so a supervisor (`palisade up`, systemd) restarts it. It
//! never lingers in state `Shutdown` answering requests it cannot serve.

use openraft::async_runtime::WatchReceiver as _;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use palisade_lifecycle::limits::REQUEST_BYTES_MAX;
use palisade_metrics::Metrics;
use palisade_metrics::rpc::Observed;
use palisade_proto::encoded::palisade_server::PalisadeServer;
use palisade_proto::v1::cluster_admin_server::ClusterAdminServer;
use palisade_raft::hooks::{FaultPoints, LinkFaults};
use palisade_raft::network::PeerClients;
use palisade_raft::peer_service::PeerService;
use palisade_raft::{LifecycleStateMachine, Node, NodeId, Raft, TypeConfig};
use palisade_storage::LogStore;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tracing::{info, warn};

use crate::admin::AdminService;
use crate::executor::{Executor, ExecutorConfig};
use crate::founding::{self, MembersHeard};
use crate::leader_hint::leader_headers;
use crate::replica::{Replica, ReplicaTimeouts};
use crate::service::PalisadeService;
use palisade_driver::ComputeDriver;

/// Raft timing, in milliseconds.
#[derive(Debug, Clone)]
pub struct RaftTiming {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max_ms: u64,
}

impl Default for RaftTiming {
    /// Chosen from measurements on a 2-core machine (see BENCHMARKS.md,
    /// "Failover"): a dead leader is replaced in under half a second, and
    /// a loaded cluster does not elect needlessly.
    ///
    /// openraft's followers honour the leader's lease: one that stops
    /// hearing the leader first waits out the lease (`election_timeout_max`)
    /// and then its randomized election timeout before it campaigns, so a
    /// leader's death is acted on 320-400 ms after its last heartbeat, and
    /// a vote round later a new leader writes (`palisade-bench
    /// --failover-trials 20`: 1.0-1.2 s from SIGKILL to the next
    /// acknowledged write with the previous 100/300/600). A follower
    /// campaigns only after six missed heartbeats, and with pre-vote only
    /// if the other follower missed them too: one stalled replica does not
    /// unseat a leader (`palisade-soak --requests-per-second` counts the
    /// elections of a steady run).
    fn default() -> Self {
        Self {
            heartbeat_ms: 50,
            election_timeout_min_ms: 120,
            election_timeout_max_ms: 200,
        }
    }
}

/// When a replica snapshots its state and how much of the log it keeps
/// behind a snapshot, in log entries.
///
/// A follower that lags less than `log_kept_after_snapshot_entries` behind
/// the last snapshot catches up from the log; one further behind is sent
/// the snapshot. Small values make snapshots and purges frequent (tests
/// use them to exercise both paths); the defaults suit production.
#[derive(Debug, Clone)]
pub struct RaftLogPolicy {
    /// A snapshot is built once this many entries were applied since the
    /// last one, or more for a large state (one entry per 256 bytes of the
    /// last snapshot: see [`crate::snapshot_cadence`]).
    pub snapshot_interval_entries: u64,
    /// Entries already in a snapshot that are kept in the log (the rest is purged).
    pub log_kept_after_snapshot_entries: u64,
}

impl Default for RaftLogPolicy {
    fn default() -> Self {
        Self {
            snapshot_interval_entries: 5_000,
            // A follower installing a large snapshot still needs the logs after it.
            log_kept_after_snapshot_entries: 2_000,
        }
    }
}

/// Server limits, each enforced in one place.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Public API requests one replica serves at once (the drain gate sheds
    /// the excess with RESOURCE_EXHAUSTED, reason OVERLOADED). Requests
    /// other than reads may hold at most three quarters of it
    /// ([`writes_in_flight_max`]).
    pub requests_in_flight_max: usize,
    /// HTTP/2 streams one client connection may have open at once
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`; peer replication included).
    pub streams_per_connection_max: u32,
    /// WatchSandboxes streams one replica serves at once; one beyond it is
    /// refused with RESOURCE_EXHAUSTED (reason OVERLOADED, metadata
    /// `watchers_max`) and a retry delay.
    pub watchers_max: usize,
    /// Changes sent to all WatchSandboxes streams together per second; a
    /// stream over it waits its turn (see
    /// `crate::service::watch_feed`, "Send budget").
    pub watch_events_per_second_max: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            requests_in_flight_max: 1_024,
            streams_per_connection_max: 256,
            watchers_max: crate::service::watch_feed::WATCHERS_MAX_DEFAULT,
            watch_events_per_second_max:
                crate::service::watch_feed::WATCH_EVENTS_PER_SECOND_MAX_DEFAULT,
        }
    }
}

/// Everything a replica needs to run.
pub struct NodeConfig {
    /// This replica's node id (unique in the cluster, never reused).
    pub node_id: NodeId,
    /// Where the public gRPC server listens (public API, cluster admin,
    /// health).
    pub listen: SocketAddr,
    /// Where the peer port listens (Raft and forwarded writes only, mutual
    /// TLS). `None` only for in-process tests and the chaos harness in
    /// plaintext, which pass one listener for both
    /// ([`run_with_listeners`]).
    pub peer_listen: Option<SocketAddr>,
    /// Address other replicas reach this one's peer port at: what the
    /// membership records.
    pub advertise: String,
    /// TLS on both ports (cluster CA, this node's certificate and key);
    /// `None` is plaintext, only with an explicit `--insecure`.
    pub tls: Option<palisade_raft::tls::TlsMaterial>,
    /// Raft log, vote and snapshots live here.
    pub data_dir: PathBuf,
    /// The founding members (`id -> address`). Empty for a replica that
    /// joins an existing cluster as a learner.
    pub initial_cluster: BTreeMap<NodeId, String>,
    /// Raft timing.
    pub timing: RaftTiming,
    /// Snapshot and purge thresholds.
    pub log_policy: RaftLogPolicy,
    /// Server limits.
    pub limits: ServerLimits,
    /// Executor tuning.
    pub executor: ExecutorConfig,
    /// Request-path timeouts.
    pub timeouts: ReplicaTimeouts,
    /// How long shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// PostgreSQL read projection (`--postgres-url`); `None`: no projection.
    pub postgres_url: Option<String>,
    /// Retention of the projection's `lifecycle_events`: rows of the last
    /// this many log entries are kept (`--projection-events-kept-entries`).
    pub projection_events_kept_entries: u64,
    /// Where to serve `/metrics` and the status page (`--metrics-listen`);
    /// `None`: not served (the metrics are still kept).
    pub metrics_listen: Option<SocketAddr>,
}

/// Why a replica could not start or stopped serving. Each message says what
/// to do next where there is something to do.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The Raft timing flags are inconsistent.
    #[error("invalid Raft timing: election timeouts must exceed the heartbeat interval ({0})")]
    RaftTiming(String),
    /// The data directory or its node-id marker could not be made or read.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The data directory belongs to another node id.
    #[error(
        "data directory {path} belongs to node {existing}, not node {node_id}; use that node id or another directory"
    )]
    DataDirOfAnotherNode {
        /// The directory.
        path: PathBuf,
        /// The node id it was claimed by.
        existing: String,
        /// The node id this replica was started with.
        node_id: NodeId,
    },
    /// The data directory is at a cluster feature level above what this
    /// build supports (a downgrade after the level was raised).
    #[error("{0}")]
    FeatureLevel(#[from] palisade_raft::feature_level::LevelTooHigh),
    /// The TLS material is unusable, or does not fit the configuration.
    #[error("TLS: {0}")]
    Tls(String),
    /// The public listener could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The durable Raft log could not be opened.
    #[error("cannot open the Raft log in {path}: {message}")]
    LogStore {
        /// The data directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The snapshot store could not be opened.
    #[error("cannot open the snapshot store: {0}")]
    SnapshotStore(std::io::Error),
    /// openraft refused to start or stopped.
    #[error("raft: {0}")]
    Raft(String),
    /// `--initial-cluster` does not name this node.
    #[error(
        "--initial-cluster does not name this node ({0}); list every founding member as ID=ADDRESS"
    )]
    NotInInitialCluster(NodeId),
    /// The data directory is empty, but the running cluster has heard from
    /// this node id before: its log and votes were lost
    /// ([`crate::founding`]).
    #[error(
        "refusing to found the cluster again: node {node_id} has an empty data directory ({data_dir}), \
         but node {peer} (at {peer_address}) has exchanged Raft messages with node {node_id} before, \
         so this node's log and votes were lost; founding again could elect two leaders in one term \
         or lose acknowledged writes. To bring it back: on a running member, \
         `palisade cluster remove {node_id}`; then start this replica with an empty data directory \
         and without --initial-cluster, and add it again with \
         `palisade cluster add-learner {node_id} ADDRESS` and `palisade cluster promote {node_id}`"
    )]
    WipedMember {
        /// This node.
        node_id: NodeId,
        /// Its (empty) data directory.
        data_dir: PathBuf,
        /// The member that heard from it.
        peer: NodeId,
        /// Where that member was asked.
        peer_address: String,
    },
    /// The data directory is empty and the running cluster does not list
    /// this node id among its members ([`crate::founding`]).
    #[error(
        "refusing to found the cluster: node {peer} (at {peer_address}) runs a cluster whose \
         members are {members:?}, without node {node_id} (it was removed, or never was a member). \
         Start this replica without --initial-cluster and add it with \
         `palisade cluster add-learner {node_id} ADDRESS`, then `palisade cluster promote {node_id}`"
    )]
    NotAMember {
        /// This node.
        node_id: NodeId,
        /// The member that answered.
        peer: NodeId,
        /// Where that member was asked.
        peer_address: String,
        /// The members it listed.
        members: Vec<NodeId>,
    },
    /// Raft stopped on its own, or a panic poisoned the applied state: the
    /// replica stopped serving (fail-stop, see the module doc).
    #[error(
        "FATAL: node {node_id} cannot go on: {reason}. It stopped serving and exits (fail-stop); \
         what it acknowledged before is durable in {data_dir}. Fix the cause (for a storage error: \
         free space or repair the disk under the data directory) and start it again \
         (`palisade up` and systemd restart it)"
    )]
    Fatal {
        /// This node.
        node_id: NodeId,
        /// What stopped it.
        reason: String,
        /// Its data directory.
        data_dir: PathBuf,
    },
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Server(String),
    /// The PostgreSQL projection could not be configured.
    #[error("invalid --postgres-url (expected postgres://USER:PASSWORD@HOST:PORT/DATABASE): {0}")]
    Projection(String),
}

/// Builds the openraft config from the timing and the log policy.
pub fn raft_config(
    timing: &RaftTiming,
    log_policy: &RaftLogPolicy,
) -> Result<openraft::Config, NodeError> {
    let config = openraft::Config {
        cluster_name: "palisade".to_string(),
        heartbeat_interval: timing.heartbeat_ms,
        election_timeout_min: timing.election_timeout_min_ms,
        election_timeout_max: timing.election_timeout_max_ms,
        enable_pre_vote: Some(true),
        // Snapshots are triggered by `crate::snapshot_cadence`, at least
        // `snapshot_interval_entries` apart and further for a large state.
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: log_policy.log_kept_after_snapshot_entries,
        ..Default::default()
    };
    config
        .validate()
        .map_err(|error| NodeError::RaftTiming(error.to_string()))
}

/// The directory inside a replica's data directory that holds its current
/// snapshot, and the table of its state's request receipts
/// (`palisade_raft::receipt_store`).
pub const SNAPSHOT_DIR: &str = "snapshots";
/// Where the projector's shadow state keeps its request receipts (tables
/// rebuilt whenever the projector starts; see `palisade_projection`).
pub const PROJECTION_RECEIPTS_DIR: &str = "projection-receipts";

/// A node id marker, so a data directory is never reused under another id.
pub(crate) fn claim_data_dir(data_dir: &std::path::Path, node_id: NodeId) -> Result<(), NodeError> {
    let failed = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| NodeError::DataDir { path, source }
    };
    std::fs::create_dir_all(data_dir).map_err(failed(data_dir))?;
    // The log holds the execution-token secret: the owner's only.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(failed(data_dir))?;
    }
    let marker = data_dir.join("node-id");
    match std::fs::read_to_string(&marker) {
        Ok(existing) => {
            let existing = existing.trim();
            if existing != node_id.to_string() {
                return Err(NodeError::DataDirOfAnotherNode {
                    path: data_dir.to_path_buf(),
                    existing: existing.to_string(),
                    node_id,
                });
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let temporary = data_dir.join("node-id.tmp");
            std::fs::write(&temporary, node_id.to_string()).map_err(failed(&temporary))?;
            std::fs::File::open(&temporary)
                .and_then(|file| file.sync_all())
                .map_err(failed(&temporary))?;
            std::fs::rename(&temporary, &marker).map_err(failed(&marker))?;
            std::fs::File::open(data_dir)
                .and_then(|dir| dir.sync_all())
                .map_err(failed(data_dir))?;
        }
        Err(error) => return Err(failed(&marker)(error)),
    }
    Ok(())
}

/// Fault-injection hooks a replica can run with, for tests and the chaos
/// harness (see [`palisade_raft::hooks`]). `NodeHooks::default()` installs
/// none: that is what [`run`] and [`run_with_listener`] use.
#[derive(Clone, Default)]
pub struct NodeHooks {
    /// Consulted by the peer transport before each message.
    pub link_faults: Option<Arc<dyn LinkFaults>>,
    /// Awaited at the fault points inside requests (executor, snapshot
    /// install, forwarding).
    pub fault_points: Option<Arc<dyn FaultPoints>>,
    /// Called once, with the replica's handles, just before it serves.
    pub on_started: Option<Arc<dyn Fn(RunningNode) + Send + Sync>>,
    /// The replica's wall clock (`None`: the system clock); the chaos
    /// harness skews it ([`crate::clock`]).
    pub clock: Option<Arc<dyn crate::clock::WallClock>>,
    /// Consulted before every append to the Raft log (the log store runs
    /// behind [`palisade_raft::faulty_log::FaultyLogStore`]).
    pub storage_faults: Option<Arc<dyn palisade_raft::hooks::StorageFaults>>,
}

/// A running replica's handles, for tests and the chaos harness.
pub struct RunningNode {
    /// The replica.
    pub replica: Replica,
    /// The executor.
    pub executor: Arc<Executor>,
}

/// Runs one replica until `shutdown` resolves.
pub async fn run(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    let (public, peer) = bind_listeners(&config).await?;
    run_with_listeners(config, driver, public, peer, NodeHooks::default(), shutdown).await
}

/// Like [`run`], on a listener the caller bound (tests bind port 0).
pub async fn run_with_listener(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    run_with_hooks(config, driver, listener, NodeHooks::default(), shutdown).await
}

/// Connections the kernel queues for a listener before this replica
/// accepts them (the kernel caps it at `net.core.somaxconn`). tokio's
/// `TcpListener::bind` asks for 1,024: when 2,000 clients connected at
/// once (`palisade-load`, or every client of a failed replica reconnecting
/// here), the kernel dropped the SYNs beyond it, those clients waited for
/// their SYN to be sent again one second later, and hundreds gave up at a
/// two-second connect timeout.
pub const LISTEN_BACKLOG_CONNECTIONS: u32 = 4_096;

/// A listener on `address` with [`LISTEN_BACKLOG_CONNECTIONS`] (and, as
/// `TcpListener::bind` does, `SO_REUSEADDR`, so a restart binds at once).
fn listen(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG_CONNECTIONS)
}

/// Binds the public listener and the peer listener of `config`.
pub async fn bind_listeners(
    config: &NodeConfig,
) -> Result<(TcpListener, Option<TcpListener>), NodeError> {
    let bind = |address: SocketAddr| async move {
        listen(address).map_err(|source| NodeError::Listen { address, source })
    };
    let public = bind(config.listen).await?;
    let peer = match config.peer_listen {
        Some(address) => Some(bind(address).await?),
        None => None,
    };
    Ok((public, peer))
}

/// Like [`run_with_listener`], with fault-injection hooks (tests and the
/// chaos harness). One listener for everything: plaintext only.
pub async fn run_with_hooks(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    listener: TcpListener,
    hooks: NodeHooks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    run_with_listeners(config, driver, listener, None, hooks, shutdown).await
}

/// Runs one replica on the listeners the caller bound: `public` serves the
/// public API, cluster admin and health; `peer` serves only Raft, forwarded
/// writes and read indexes (plus the read-only `GetClusterInfo` founding
/// members ask each other), behind mutual TLS when `config.tls` is set.
///
/// `peer: None` serves the peer service on the public listener too: only
/// for in-process tests and the chaos harness, and refused with TLS (a
/// secured replica never mixes the two).
pub async fn run_with_listeners(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    listener: TcpListener,
    peer_listener: Option<TcpListener>,
    hooks: NodeHooks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    serve_replica(
        config,
        driver,
        PublicListener::Tcp(listener),
        peer_listener,
        hooks,
        shutdown,
    )
    .await
}

/// Runs one replica of the deterministic simulation (`palisade chaos run
/// --sim`): like [`run_with_hooks`], accepting its connections from the
/// simulated network ([`palisade_raft::simnet`]) instead of a socket.
/// Plaintext, one listener for everything.
pub async fn run_simulated(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    incoming: palisade_raft::simnet::SimIncoming,
    hooks: NodeHooks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    serve_replica(
        config,
        driver,
        PublicListener::Sim(incoming),
        None,
        hooks,
        shutdown,
    )
    .await
}

/// Where the public server accepts its connections.
enum PublicListener {
    /// A socket.
    Tcp(TcpListener),
    /// The simulated network.
    Sim(palisade_raft::simnet::SimIncoming),
}

async fn serve_replica(
    config: NodeConfig,
    driver: Arc<dyn ComputeDriver>,
    listener: PublicListener,
    peer_listener: Option<TcpListener>,
    hooks: NodeHooks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    let node_id = config.node_id;
    if let Some(tls) = &config.tls {
        if peer_listener.is_none() {
            return Err(NodeError::Tls(
                "a replica with TLS needs its own peer listener (--peer-listen)".into(),
            ));
        }
        let certified = tls.node_id().map_err(NodeError::Tls)?;
        if certified != node_id {
            return Err(NodeError::Tls(format!(
                "the certificate is node {certified}'s, but this is node {node_id}; \
                 use node-{node_id}'s certificate"
            )));
        }
    }
    claim_data_dir(&config.data_dir, node_id)?;
    // Bound first, so a taken port fails the start, not a later scrape.
    let metrics_listener = match config.metrics_listen {
        Some(address) => Some(
            TcpListener::bind(address)
                .await
                .map_err(|source| NodeError::Listen { address, source })?,
        ),
        None => None,
    };
    let metrics = Arc::new(Metrics::new(config.postgres_url.is_some()));
    let members_heard = MembersHeard::open(&config.data_dir)?;
    // In the deterministic simulation the log commits on the simulation's
    // thread (see `palisade_storage::WriteMode`).
    let write_mode = if palisade_raft::runtime::is_simulated() {
        palisade_storage::WriteMode::Inline
    } else {
        palisade_storage::WriteMode::Thread
    };
    let log_store = LogStore::<TypeConfig>::open_with(config.data_dir.join("raft-log"), write_mode)
        .map_err(|error| NodeError::LogStore {
            path: config.data_dir.clone(),
            message: error.to_string(),
        })?;
    log_store.set_timings(Arc::new(crate::observe::LogTimings(metrics.log.clone())));
    // Projection: the projector reads the log through its own reader.
    let log_reader = log_store.reader();
    let format_record = log_store.format_record();
    let mut state_machine = LifecycleStateMachine::open(&config.data_dir.join(SNAPSHOT_DIR))
        .map_err(NodeError::SnapshotStore)?
        .with_metrics(metrics.raft.clone())
        .with_format_record(format_record.clone());
    check_feature_level(&config.data_dir, &format_record, &state_machine.handle())?;
    if let Some(fault_points) = &hooks.fault_points {
        state_machine = state_machine.with_fault_points(node_id, fault_points.clone());
    }
    let state = state_machine.handle();
    let raft_config = Arc::new(raft_config(&config.timing, &config.log_policy)?);
    let peers = PeerClients::new(node_id)
        .with_hooks(hooks.link_faults.clone(), hooks.fault_points.clone())
        .with_tls(config.tls.clone())
        .with_cluster_level(state.cluster_level());
    let network = peers.network_factory();
    let raft: Raft = match &hooks.storage_faults {
        Some(faults) => {
            let log_store =
                palisade_raft::faulty_log::FaultyLogStore::new(log_store, node_id, faults.clone());
            openraft::Raft::new(node_id, raft_config, network, log_store, state_machine).await
        }
        None => openraft::Raft::new(node_id, raft_config, network, log_store, state_machine).await,
    }
    .map_err(|error| NodeError::Raft(format!("cannot start: {error}")))?;

    if !config.initial_cluster.is_empty()
        && let Err(error) = initialize_once(
            &raft,
            node_id,
            &config.data_dir,
            &config.initial_cluster,
            config.tls.as_ref(),
        )
        .await
    {
        raft.shutdown().await.ok();
        return Err(error);
    }
    let members_heard_recorder = founding::spawn_recorder(node_id, &raft, members_heard.clone());
    let feature_level_raiser = tokio::spawn(crate::feature_level::run(
        node_id,
        raft.clone(),
        state.clone(),
        peers.clone(),
    ));
    let snapshot_cadence = tokio::spawn(crate::snapshot_cadence::run(
        node_id,
        raft.clone(),
        state.clone(),
        config.log_policy.snapshot_interval_entries,
    ));

    let service_driver = driver.clone();
    let (driver_name, driver_runs_containers) = (driver.name(), driver.runs_containers());
    let executor = Executor::new(
        node_id,
        raft.clone(),
        state.clone(),
        driver,
        config.executor,
    );
    if let Some(fault_points) = &hooks.fault_points {
        executor.set_fault_points(fault_points.clone());
    }
    let clock: Arc<dyn crate::clock::WallClock> = hooks
        .clock
        .clone()
        .unwrap_or_else(|| Arc::new(crate::clock::SystemClock));
    executor.set_clock(clock.clone());
    executor.set_metrics(metrics.clone());
    let leader_history = crate::observe::LeaderHistory::default();
    let raft_watcher = crate::observe::spawn_raft_watcher(
        raft.clone(),
        node_id,
        metrics.clone(),
        leader_history.clone(),
    );
    let on_lead = executor.clone();
    let on_step_down = executor.clone();
    let _leader_watch = raft.on_leader_change(
        move |leader_id| {
            on_lead.lead(leader_id.term);
            async {}
        },
        move |_| {
            on_step_down.step_down();
            async {}
        },
    );

    // --- PostgreSQL projection (only with --postgres-url) ---
    let projection = match &config.postgres_url {
        Some(url) => Some(crate::projection::start(
            node_id,
            url,
            config.projection_events_kept_entries,
            &config.data_dir.join(PROJECTION_RECEIPTS_DIR),
            &raft,
            state.clone(),
            log_reader,
        )?),
        None => None,
    };
    // --- end projection ---

    let replica = Replica {
        node_id,
        raft: raft.clone(),
        state,
        peers,
        timeouts: config.timeouts,
        members_heard,
        driver_name,
        driver_runs_containers,
        projection: projection
            .as_ref()
            .map(|running| running.projection.clone()),
        state_digest: Arc::default(),
        metrics: metrics.clone(),
        clock,
        spool_dir: config.data_dir.join(SNAPSHOT_DIR),
    };
    if let Some(on_started) = &hooks.on_started {
        on_started(RunningNode {
            replica: replica.clone(),
            executor: executor.clone(),
        });
    }
    let service = PalisadeService::new(replica.clone(), service_driver).with_watch_limits(
        config.limits.watchers_max,
        config.limits.watch_events_per_second_max,
    );
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<PalisadeServer<PalisadeService>>()
        .await;
    let fatal_state = replica.state.clone();

    let local = match &listener {
        PublicListener::Tcp(listener) => listener
            .local_addr()
            .map_err(|error| NodeError::Server(format!("listener has no address: {error}")))?,
        // The simulated network has no sockets: the configured address.
        PublicListener::Sim(_) => config.listen,
    };
    let peer_local = match &peer_listener {
        Some(peer) => Some(peer.local_addr().map_err(|error| {
            NodeError::Server(format!("peer listener has no address: {error}"))
        })?),
        None => None,
    };
    info!(
        node = node_id,
        listen = %local,
        peer_listen = ?peer_local,
        advertise = %config.advertise,
        tls = config.tls.is_some(),
        "replica serving"
    );
    if config.tls.is_none() {
        warn!(
            node = node_id,
            "INSECURE: TLS is off (--insecure): the public API and the peer port are \
             plaintext, and peers are not authenticated; never run a real cluster like this"
        );
    }
    // The metrics listener stops when this sender is dropped (this
    // function returns, whichever way).
    let (_metrics_stop, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(listener) = metrics_listener {
        if let Ok(address) = listener.local_addr() {
            info!(node = node_id, metrics_listen = %address, "serving /metrics and the status page");
        }
        let source = Arc::new(crate::observe::ReplicaSource {
            replica: replica.clone(),
            executor: executor.clone(),
            history: leader_history.clone(),
        });
        tokio::spawn(palisade_metrics::http::serve(
            listener,
            metrics.clone(),
            source,
            async move {
                let _ = metrics_stopped.await;
            },
        ));
    }
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let gate = DrainGate::new(config.limits.requests_in_flight_max, metrics.clone());
    let (reflection_v1, reflection_v1alpha) = reflection_services()?;
    let mut public = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(config.limits.streams_per_connection_max));
    if let Some(tls) = &config.tls {
        public = public
            .tls_config(tls.public_server())
            .map_err(|error| NodeError::Tls(format!("public listener: {error}")))?;
    }
    // Snapshots being received are spooled next to the replica's own.
    let mut peer_service =
        PeerService::new(raft.clone()).with_spool_dir(config.data_dir.join(SNAPSHOT_DIR));
    if config.tls.is_some() {
        peer_service = peer_service.with_certificate_identity();
    }
    // Every public and admin request is authenticated first (`auth`); the
    // RPC metrics (`Observed`) count the refusals too.
    let authenticator = match &config.tls {
        Some(_) => crate::auth::Authenticator::Verify(replica.state.clone()),
        None => crate::auth::Authenticator::Insecure,
    };
    let public = public
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(Observed::new(
            crate::auth::authenticate(
                leader_headers(
                    gate.guard(crate::edge::single_message(
                        PalisadeServer::new(service).max_decoding_message_size(REQUEST_BYTES_MAX),
                    )),
                    node_id,
                    raft.clone(),
                ),
                authenticator.clone(),
            ),
            metrics.clone(),
            node_id,
        ))
        .add_service(Observed::new(
            crate::auth::authenticate(
                leader_headers(
                    crate::edge::single_message(
                        ClusterAdminServer::new(AdminService::new(
                            replica.clone(),
                            executor.clone(),
                        ))
                        .max_decoding_message_size(REQUEST_BYTES_MAX),
                    ),
                    node_id,
                    raft.clone(),
                ),
                authenticator,
            ),
            metrics.clone(),
            node_id,
        ));
    let (drain_peer_tx, drain_peer_rx) = tokio::sync::oneshot::channel::<()>();
    let (public, peer_server) = match peer_listener {
        None => (public.add_service(peer_service.into_server()), None),
        Some(peer_listener) => {
            let mut peer = tonic::transport::Server::builder();
            if let Some(tls) = &config.tls {
                peer = peer
                    .tls_config(tls.peer_server())
                    .map_err(|error| NodeError::Tls(format!("peer listener: {error}")))?;
            }
            let peer = peer
                .add_service(peer_service.into_server())
                // What replicas ask each other of the admin service:
                // founding members' cluster views, and membership changes
                // a follower relays to the leader (after it checked the
                // caller is an admin). A peer is a cluster member proven by
                // its certificate: it acts as an admin here.
                .add_service(crate::auth::authenticate(
                    crate::edge::only_methods(
                        ClusterAdminServer::new(AdminService::new(
                            replica.clone(),
                            executor.clone(),
                        )),
                        &crate::admin::RELAYED_METHODS,
                    ),
                    crate::auth::Authenticator::Insecure,
                ))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(peer_listener)
                        .with_nodelay(Some(true)),
                    async {
                        let _ = drain_peer_rx.await;
                    },
                );
            (public, Some(peer))
        }
    };
    // TCP_NODELAY on every accepted connection: without it a small answer
    // (a read, a Raft append acknowledgement) waits for the client's
    // delayed ACK (Nagle), ~40 ms on Linux.
    let drained = async {
        let _ = drain_rx.await;
    };
    let public = match listener {
        PublicListener::Tcp(listener) => {
            futures::future::Either::Left(public.serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                drained,
            ))
        }
        PublicListener::Sim(incoming) => {
            futures::future::Either::Right(public.serve_with_incoming_shutdown(incoming, drained))
        }
    };
    // Both servers as one task: it ends when either fails, or when both
    // closed after the drain.
    let server = async move {
        match peer_server {
            None => public.await,
            Some(peer) => tokio::try_join!(public, peer).map(|((), ())| ()),
        }
    };
    let mut server = tokio::spawn(server);

    tokio::select! {
        // `biased`: deterministic for `--sim`.
        biased;
        () = shutdown => {}
        reason = cannot_serve(&raft, &fatal_state) => {
            tracing::error!(
                node = node_id,
                %reason,
                "FATAL: this replica cannot serve correctly; reporting NOT_SERVING and exiting (fail-stop)"
            );
            gate.close();
            set_not_serving(&health_reporter).await;
            members_heard_recorder.abort();
            feature_level_raiser.abort();
            snapshot_cadence.abort();
            executor.step_down();
            if let Some(projection) = projection {
                projection.stop().await;
            }
            let _ = drain_tx.send(());
            if tokio::time::timeout(SERVER_CLOSE_TIMEOUT, &mut server)
                .await
                .is_err()
            {
                server.abort();
            }
            raft.shutdown().await.ok();
            return Err(NodeError::Fatal {
                node_id,
                reason,
                data_dir: config.data_dir.clone(),
            });
        }
        result = &mut server => {
            members_heard_recorder.abort();
            feature_level_raiser.abort();
            snapshot_cadence.abort();
            raft_watcher.abort();
            executor.step_down();
            if let Some(projection) = projection {
                projection.stop().await;
            }
            raft.shutdown().await.ok();
            return match result {
                Ok(served) => served.map_err(|error| NodeError::Server(error.to_string())),
                Err(error) => Err(NodeError::Server(format!("server task failed: {error}"))),
            };
        }
    }

    info!(
        node = node_id,
        "shutting down: refusing new requests, handing off leadership, then draining"
    );
    gate.close();
    set_not_serving(&health_reporter).await;
    hand_off_leadership(&replica).await;
    if !gate.drained(config.drain_timeout).await {
        warn!(
            "in-flight requests did not finish in {:?}; closing",
            config.drain_timeout
        );
    }
    let _ = drain_tx.send(());
    let _ = drain_peer_tx.send(());
    if tokio::time::timeout(SERVER_CLOSE_TIMEOUT, &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    members_heard_recorder.abort();
    feature_level_raiser.abort();
    snapshot_cadence.abort();
    raft_watcher.abort();
    executor.step_down();
    if let Some(projection) = projection {
        projection.stop().await;
    }
    if let Err(error) = raft.shutdown().await {
        warn!(%error, "raft shutdown failed");
    }
    info!(node = node_id, "stopped");
    Ok(())
}

/// Refuses to start on a data directory at a cluster feature level above
/// what this build supports (its log database's `format` record or its
/// snapshot's state say so), and records the snapshot's level in the log
/// database if a restore or an older run left it lower, so that releases
/// before feature levels refuse the directory too.
fn check_feature_level(
    data_dir: &std::path::Path,
    format_record: &palisade_storage::FormatRecord,
    state: &palisade_raft::StateHandle,
) -> Result<(), NodeError> {
    let recorded = format_record
        .version()
        .map_err(|error| NodeError::LogStore {
            path: data_dir.to_path_buf(),
            message: error.to_string(),
        })?;
    let in_snapshot = state.read(|applied| applied.state.feature_level);
    let level = recorded.max(in_snapshot);
    palisade_raft::feature_level::check(
        || format!("the data directory {}", data_dir.display()),
        level,
    )?;
    if in_snapshot > recorded {
        format_record
            .raise(in_snapshot)
            .map_err(|error| NodeError::LogStore {
                path: data_dir.to_path_buf(),
                message: error.to_string(),
            })?;
    }
    Ok(())
}

/// The public services gRPC server reflection lists: generic clients
/// (grpcurl, Postman, evans) discover and call these without the .proto
/// files. The internal peer service is left out on purpose: it is not an
/// API, and its messages are opaque payloads.
pub const REFLECTED_SERVICES: [&str; 3] = [
    "palisade.v1.Palisade",
    "palisade.v1.ClusterAdmin",
    "grpc.health.v1.Health",
];

/// gRPC server reflection, both protocol versions: `v1` (grpcurl, current
/// clients) and `v1alpha` (older clients, Python's `grpcio-reflection`).
fn reflection_services() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    NodeError,
> {
    let builder = || {
        REFLECTED_SERVICES.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(palisade_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |builder, service| builder.with_service_name(*service),
        )
    };
    let failed = |error: tonic_reflection::server::Error| {
        NodeError::Server(format!("cannot build the reflection service: {error}"))
    };
    Ok((
        builder().build_v1().map_err(failed)?,
        builder().build_v1alpha().map_err(failed)?,
    ))
}

/// How often [`cannot_serve`] looks at the applied state's lock and at
/// Raft's running state (Raft's own stop is noticed at once, through its
/// server metrics).
const POISON_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// Resolves, with the reason, once this replica cannot serve correctly any
/// more: its Raft stopped on its own (`Fatal`: a storage error, a panic in
/// its core; or state `Shutdown`), or a panic poisoned the applied state.
/// Only awaited while the replica runs, before any shutdown of ours.
///
/// It wakes on openraft's *server* metrics (state, vote, leader,
/// membership: they change rarely, and their channel closes when the core
/// stops), not on its full metrics, which change with every entry: a task
/// woken per entry cost a busy leader a cross-thread wake-up each time.
async fn cannot_serve(raft: &Raft, state: &palisade_raft::StateHandle) -> String {
    let metrics = raft.metrics();
    let mut server = raft.server_metrics();
    let mut poison_check = tokio::time::interval(POISON_CHECK_INTERVAL);
    let stopped = |metrics: &openraft::RaftMetrics<palisade_raft::TypeConfig>| {
        if let Err(fatal) = &metrics.running_state {
            return Some(format!("Raft stopped: {fatal}"));
        }
        if metrics.state == openraft::ServerState::Shutdown {
            return Some("Raft is in state Shutdown".to_string());
        }
        None
    };
    loop {
        if let Some(reason) = stopped(&metrics.borrow_watched()) {
            return reason;
        }
        if server.borrow_watched().state == openraft::ServerState::Shutdown {
            return "Raft is in state Shutdown".to_string();
        }
        if state.is_poisoned() {
            return palisade_raft::state_machine::POISONED.to_string();
        }
        tokio::select! {
            // `biased`: deterministic for `--sim`; the timer first (ready
            // once a period, so the metrics are never starved).
            biased;
            _ = poison_check.tick() => {}
            changed = server.changed() => {
                if changed.is_err() {
                    return stopped(&metrics.borrow_watched()).unwrap_or_else(|| {
                        "Raft stopped (its metrics channel closed)".to_string()
                    });
                }
            }
        }
    }
}

/// Health reports NOT_SERVING for the whole server ("") and the public API.
async fn set_not_serving(health: &tonic_health::server::HealthReporter) {
    health
        .set_not_serving::<PalisadeServer<PalisadeService>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
}

/// Initializes the cluster if this node's storage has never been
/// initialized. Every founding member may call it with the same membership;
/// a node that already has state never re-initializes, and one whose
/// storage is empty first asks the other founding members whether they
/// run a cluster that already knows it ([`founding`]).
async fn initialize_once(
    raft: &Raft,
    node_id: NodeId,
    data_dir: &std::path::Path,
    initial_cluster: &BTreeMap<NodeId, String>,
    tls: Option<&palisade_raft::tls::TlsMaterial>,
) -> Result<(), NodeError> {
    if !initial_cluster.contains_key(&node_id) {
        return Err(NodeError::NotInInitialCluster(node_id));
    }
    if raft
        .is_initialized()
        .await
        .map_err(|error| NodeError::Raft(format!("stopped: {error}")))?
    {
        info!("cluster already initialized; not initializing again");
        return Ok(());
    }
    let views = founding::ask_founding_members(node_id, initial_cluster, tls).await;
    founding::may_found(node_id, data_dir, &views)?;
    let members: BTreeMap<NodeId, Node> = initial_cluster
        .iter()
        .map(|(id, address)| {
            (
                *id,
                Node {
                    addr: address.clone(),
                },
            )
        })
        .collect();
    match raft.initialize(members).await {
        Ok(()) => info!(members = ?initial_cluster, "cluster initialized"),
        Err(error) => {
            // Another founding member initialized first and replicated to us.
            info!(%error, "initialize skipped");
        }
    }
    Ok(())
}

/// If this replica leads, moves leadership to the most up-to-date voter and
/// waits (bounded) until it moved.
async fn hand_off_leadership(replica: &Replica) {
    let metrics = replica.raft.metrics().borrow_watched().clone();
    if metrics.current_leader != Some(replica.node_id) {
        return;
    }
    let matched = metrics.replication.clone().unwrap_or_default();
    let target = metrics
        .membership_config
        .membership()
        .voter_ids()
        .filter(|id| *id != replica.node_id)
        .max_by_key(|id| {
            matched
                .get(id)
                .cloned()
                .flatten()
                .map(|log_id| log_id.index)
        });
    let Some(target) = target else {
        return;
    };
    if let Err(error) = replica.raft.trigger().transfer_leader(target).await {
        warn!(%error, "leader transfer failed");
        return;
    }
    let moved = replica
        .raft
        .wait(Some(Duration::from_secs(3)))
        .metrics(
            |metrics| {
                metrics
                    .current_leader
                    .is_some_and(|leader| leader != replica.node_id)
            },
            "leadership moved",
        )
        .await;
    match moved {
        // The leader that took over, which is the target unless another
        // election overtook the transfer.
        Ok(metrics) => info!(
            to = metrics.current_leader.unwrap_or(target),
            "leadership handed off"
        ),
        Err(error) => warn!(%error, "leadership did not move in time"),
    }
}

/// How long the gRPC server may take to close its connections once the
/// public requests drained (peer streams end as soon as they are told).
const SERVER_CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Lets the public API refuse new requests while a replica drains, and
/// counts the requests in flight so shutdown can wait for them.
///
/// A refusal is UNAVAILABLE with reason SHUTTING_DOWN, given before the
/// request reached a handler (nothing was proposed), so a client may retry
/// it anywhere. Only the public service is gated: peer traffic and cluster
/// admin keep flowing while the replica drains.
#[derive(Clone)]
struct DrainGate {
    /// Set once, when shutdown begins. Atomic: checked on every request.
    closed: Arc<AtomicBool>,
    /// Load shedding: a request arriving while this many are in flight is
    /// refused at once with RESOURCE_EXHAUSTED (reason OVERLOADED, a
    /// RetryInfo delay), before it reaches a handler.
    requests_in_flight_max: usize,
    /// Requests in flight; a `watch` so shutdown can wait for zero.
    in_flight: Arc<watch::Sender<usize>>,
    /// Of those, requests that are not reads ([`is_read`]); at most
    /// [`writes_in_flight_max`] of the limit, the rest stays for reads.
    writes_in_flight: Arc<AtomicUsize>,
    /// Counts the refusals (shed requests).
    metrics: Arc<Metrics>,
}

/// The retry delay a shed request is given (RetryInfo).
pub const OVERLOADED_RETRY_AFTER: Duration = Duration::from_millis(200);

impl DrainGate {
    fn new(requests_in_flight_max: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            closed: Arc::new(AtomicBool::new(false)),
            requests_in_flight_max,
            in_flight: Arc::new(watch::Sender::new(0)),
            writes_in_flight: Arc::new(AtomicUsize::new(0)),
            metrics,
        }
    }

    /// Wraps a service so that it passes through this gate.
    fn guard<S>(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: self.clone(),
        }
    }

    /// Refuses every request from now on.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Waits until no request is in flight; false if `timeout` passed first.
    async fn drained(&self, timeout: Duration) -> bool {
        let mut in_flight = self.in_flight.subscribe();
        tokio::time::timeout(timeout, in_flight.wait_for(|count| *count == 0))
            .await
            .is_ok()
    }
}

/// How many of `requests_in_flight_max` slots requests other than reads
/// may hold: three quarters (at least one). Writes wait for consensus and
/// their operation, seconds each under load, and could otherwise hold every
/// slot; the quarter kept for reads lets cheap reads (Get*, List*) and new
/// watches through while writes are shed.
pub fn writes_in_flight_max(requests_in_flight_max: usize) -> usize {
    (requests_in_flight_max - requests_in_flight_max / 4).max(1)
}

/// Whether a public API call is a read, by its gRPC method name
/// (`/palisade.v1.Palisade/GetSandbox`): Get*, List* and Watch* methods.
fn is_read(path: &str) -> bool {
    let method = path.rsplit('/').next().unwrap_or_default();
    ["Get", "List", "Watch"]
        .iter()
        .any(|prefix| method.starts_with(prefix))
}

/// Holds a write's share of the in-flight slots; released on drop.
struct WriteSlot(Arc<AtomicUsize>);

impl Drop for WriteSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decrements the in-flight count when a request's handler is done.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn enter(counter: &Arc<watch::Sender<usize>>) -> Self {
        counter.send_modify(|count| *count += 1);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count -= 1);
    }
}

/// A service behind a [`DrainGate`].
#[derive(Clone)]
struct Gated<S> {
    inner: S,
    gate: DrainGate,
}

impl<S> NamedService for Gated<S>
where
    S: NamedService,
{
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for Gated<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // Count first, then check: `drained` never misses a request that
        // got past a gate that was still open.
        let in_flight = InFlight::enter(&self.gate.in_flight);
        if self.gate.closed.load(Ordering::SeqCst) {
            drop(in_flight);
            self.gate.metrics.request_shed("shutting_down");
            let refusal = crate::errors::unavailable(
                crate::errors::SHUTTING_DOWN,
                "this replica is shutting down and took no action; retry on another replica",
            );
            return Box::pin(async move { Ok(refusal.into_http()) });
        }
        if *self.gate.in_flight.borrow() > self.gate.requests_in_flight_max {
            drop(in_flight);
            let refusal =
                crate::errors::overloaded(self.gate.requests_in_flight_max, OVERLOADED_RETRY_AFTER);
            return Box::pin(async move { Ok(refusal.into_http()) });
        }
        let write_slot = if is_read(request.uri().path()) {
            None
        } else {
            let slot = WriteSlot(self.gate.writes_in_flight.clone());
            let writes = self.gate.writes_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            if writes > writes_in_flight_max(self.gate.requests_in_flight_max) {
                drop((slot, in_flight));
                let refusal = crate::errors::overloaded(
                    self.gate.requests_in_flight_max,
                    OVERLOADED_RETRY_AFTER,
                );
                return Box::pin(async move { Ok(refusal.into_http()) });
            }
            Some(slot)
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            drop((write_slot, in_flight));
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection storm beyond tokio's default backlog (1,024) completes
    /// its handshakes while the replica is not accepting yet; with the
    /// default, the connections past the backlog hang on their SYN.
    #[tokio::test]
    async fn a_connection_storm_beyond_the_default_backlog_is_queued() {
        const CONNECTIONS: usize = 1_500;
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        let mut connecting = tokio::task::JoinSet::new();
        for _ in 0..CONNECTIONS {
            connecting.spawn(async move {
                tokio::time::timeout(
                    Duration::from_millis(500),
                    tokio::net::TcpStream::connect(address),
                )
                .await
            });
        }
        let mut connected = Vec::new();
        while let Some(attempt) = connecting.join_next().await {
            if let Ok(Ok(stream)) = attempt.unwrap() {
                connected.push(stream);
            }
        }
        assert_eq!(
            connected.len(),
            CONNECTIONS,
            "handshakes completed before any accept"
        );
        drop(listener);
    }
}
