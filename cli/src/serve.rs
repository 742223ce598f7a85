//! `palisade gateway run`: one replica in the foreground, configured by
//! flags, stopped by SIGTERM or Ctrl-C (leadership is handed off first).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use palisade_driver::ComputeDriver;
use palisade_driver::docker::{DockerConfig, DockerDriver, DockerTimeouts};
use palisade_driver::noop::NoopDriver;
use palisade_driver::process::{ProcessDriver, ProcessDriverTimeouts};
use palisade_gateway::executor::ExecutorConfig;
use palisade_gateway::node::{NodeConfig, RaftLogPolicy, RaftTiming, ServerLimits};
use palisade_gateway::replica::ReplicaTimeouts;

/// Flags of `palisade gateway run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// This replica's node id: unique in the cluster and never reused.
    #[arg(long)]
    pub node_id: u64,
    /// Address of the public listener: the public API, cluster admin and
    /// health (TLS unless --insecure).
    #[arg(long, default_value = "127.0.0.1:7001")]
    pub listen: SocketAddr,
    /// Address of the peer port: Raft and forwarded writes only, mutual TLS
    /// under the cluster CA (a peer's node id comes from its certificate).
    /// Required with TLS. Without it an --insecure replica serves peers on
    /// --listen too (local tests only).
    #[arg(long)]
    pub peer_listen: Option<SocketAddr>,
    /// Address the other replicas reach this one's peer port at, as the
    /// membership records it (default: --peer-listen, or --listen for a
    /// single-port --insecure replica).
    #[arg(long)]
    pub advertise: Option<String>,
    /// The cluster CA certificate (PEM): peers and client certificates
    /// must chain to it (`palisade cluster init-pki` writes ca.pem).
    #[arg(long, requires_all = ["cert", "key"])]
    pub ca: Option<PathBuf>,
    /// This replica's certificate (PEM), naming node-ID.peer.palisade
    /// (`init-pki` writes node-ID.pem).
    #[arg(long, requires_all = ["ca", "key"])]
    pub cert: Option<PathBuf>,
    /// This replica's private key (PEM; keep it 0600).
    #[arg(long, requires_all = ["ca", "cert"])]
    pub key: Option<PathBuf>,
    /// Plaintext everywhere, no peer authentication: for local tests only,
    /// logged loudly. Without it --ca, --cert and --key are required.
    #[arg(long, conflicts_with_all = ["ca", "cert", "key"])]
    pub insecure: bool,
    /// Directory for the Raft log, vote and snapshots. Never reuse one under
    /// another node id, never start an existing member with an empty one
    /// (with --initial-cluster, such a replica refuses to start: see
    /// --initial-cluster).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Founding members, etcd-style: ID=HOST:PORT,ID=HOST:PORT,... of their
    /// peer ports (their --advertise). The
    /// cluster is initialized once, on first start; restarting with the
    /// same flags is safe. Omit it on a replica that joins an existing
    /// cluster as a learner.
    ///
    /// A replica whose data directory is empty first asks the other listed
    /// members (2 s each) and refuses to start, exiting non-zero, if they
    /// run a cluster that has heard from this node id before (its data was
    /// lost: founding again could vote twice in a term) or that does not
    /// list it. To bring such a replica back: `palisade cluster remove ID`
    /// on the cluster, start the replica with an empty data directory
    /// WITHOUT --initial-cluster, then `palisade cluster add-learner ID
    /// ADDRESS` and `palisade cluster promote ID`. A founder that never ran
    /// (started after the others) founds and joins normally.
    #[arg(long, value_parser = parse_initial_cluster)]
    pub initial_cluster: Option<BTreeMap<u64, String>>,
    /// Compute driver: `process` runs each sandbox as local processes under
    /// a shim; `docker` runs each execution as a container on a Docker Engine
    /// (see --docker-host); `noop` runs nothing and is only for benchmarks
    /// and tests of the control plane. Every replica of a cluster must use
    /// the same one.
    /// The process driver is SINGLE-HOST: every replica must run on the one
    /// host that holds the shared --driver-dir (a replica elsewhere sees a
    /// driver of another identity and refuses to act while it leads).
    #[arg(long, value_enum, default_value_t = DriverKind::Process)]
    pub driver: DriverKind,
    /// With `--driver fault`: the faults to inject, as JSON, e.g.
    /// '{"stop": {"uncertain_after_first": 1}}' (see the fault driver's
    /// docs for every field).
    #[arg(long, value_parser = palisade_driver::fault::FaultPlan::from_json)]
    pub fault_plan: Option<palisade_driver::fault::FaultPlan>,
    /// With `--driver fault`: the driver the faults are injected into,
    /// `process` or `docker`.
    #[arg(long, value_enum, default_value_t = FaultOver::Process)]
    pub fault_over: FaultOver,
    /// Directory the process driver keeps executions in (and its identity,
    /// fences and tombstones); the Docker driver keeps its fences and
    /// tombstones there. Every replica of the cluster must use the same
    /// one, on the same host (default: DATA_DIR/../executions).
    #[arg(long)]
    pub driver_dir: Option<PathBuf>,
    /// The Docker driver's flags (`--docker-*`).
    #[command(flatten)]
    pub docker: DockerArgs,
    /// Leader heartbeat interval, milliseconds.
    #[arg(long, default_value_t = RaftTiming::default().heartbeat_ms)]
    pub heartbeat_ms: u64,
    /// Minimum election timeout, milliseconds.
    #[arg(long, default_value_t = RaftTiming::default().election_timeout_min_ms)]
    pub election_timeout_min_ms: u64,
    /// Maximum election timeout, milliseconds.
    #[arg(long, default_value_t = RaftTiming::default().election_timeout_max_ms)]
    pub election_timeout_max_ms: u64,
    /// Build a snapshot of the state every this many applied log entries,
    /// or more for a large state: one entry per 256 bytes of the last
    /// snapshot (after one of 64 MiB, 262,144 entries later; at most
    /// 8,388,608), so that building snapshots costs the same per entry
    /// whatever the state's size, about what the log itself writes.
    #[arg(long, default_value_t = RaftLogPolicy::default().snapshot_interval_entries,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_interval_entries: u64,
    /// Log entries already in a snapshot that stay in the log after it (the
    /// rest is purged). A follower lagging less than this behind the last
    /// snapshot catches up from the log, one further behind gets the
    /// snapshot.
    #[arg(long, default_value_t = RaftLogPolicy::default().log_kept_after_snapshot_entries)]
    pub log_kept_after_snapshot_entries: u64,
    /// Public API requests this replica serves at once; a request beyond it
    /// is refused at once with RESOURCE_EXHAUSTED (reason OVERLOADED) and a
    /// retry delay, before anything is proposed. Health checks and peer
    /// traffic are not counted.
    #[arg(long, default_value_t = ServerLimits::default().requests_in_flight_max as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub requests_in_flight_max: u64,
    /// HTTP/2 streams one client connection may have open at once (calls
    /// beyond it wait for a free stream on the client side).
    #[arg(long, default_value_t = ServerLimits::default().streams_per_connection_max,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub streams_per_connection_max: u32,
    /// WatchSandboxes streams this replica serves at once (each holds a
    /// slot for as long as it is open); one beyond it is refused at once
    /// with RESOURCE_EXHAUSTED (reason OVERLOADED, metadata watchers_max)
    /// and a retry delay.
    #[arg(long, default_value_t = ServerLimits::default().watchers_max as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub watchers_max: u64,
    /// Changes this replica sends to all its WatchSandboxes streams
    /// together per second (a second's worth, at most 1,000, may go at
    /// once). A stream over it waits its turn, first come first served; a
    /// watcher that falls further behind than the retained changes is told
    /// to list again (OUT_OF_RANGE, RESOURCE_VERSION_TOO_OLD). Bounds what
    /// watchers cost the replica however many there are.
    #[arg(long, default_value_t = ServerLimits::default().watch_events_per_second_max,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub watch_events_per_second_max: u64,
    /// Seconds a write handler waits for its operation to end (launch,
    /// stop, removal) before answering UNAVAILABLE / OUTCOME_PENDING; the
    /// operation goes on and a retry with the same request id waits again.
    /// A shorter client deadline (grpc-timeout) ends the wait earlier.
    #[arg(long, default_value_t = ReplicaTimeouts::default().operation_wait_max.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub operation_wait_max_seconds: u64,
    /// Seconds between SIGTERM and SIGKILL when stopping a sandbox.
    #[arg(long, default_value_t = 10)]
    pub stop_grace_seconds: u64,
    /// Hours a request id's result is kept for retries, counted on the
    /// replicated clock from the request's settlement (24 to 720). A leader
    /// writes it into the replicated configuration when it starts its term
    /// (the latest leader configured differently wins).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(
        (palisade_lifecycle::limits::RECEIPT_RETENTION_MS_MIN / 3_600_000) as u64
            ..=(palisade_lifecycle::limits::RECEIPT_RETENTION_MS_MAX / 3_600_000) as u64
    ))]
    pub receipt_retention_hours: u64,
    /// Quota: most request receipts one workspace holds (requests with a
    /// request id, kept for the receipt retention). A workspace at it gets
    /// RESOURCE_EXHAUSTED / QUOTA_EXCEEDED (ErrorInfo metadata quota =
    /// receipts_per_workspace) and other workspaces are unaffected.
    /// Replicated configuration: a leader writes it when its term starts.
    #[arg(long, default_value_t = palisade_lifecycle::limits::RECEIPTS_PER_WORKSPACE_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=palisade_lifecycle::limits::QUOTA_VALUE_MAX))]
    pub quota_receipts_per_workspace: u64,
    /// Quota: most sandboxes in one workspace (quota =
    /// sandboxes_per_workspace). Replicated configuration, like the above.
    #[arg(long, default_value_t = palisade_lifecycle::limits::SANDBOXES_PER_WORKSPACE_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=palisade_lifecycle::limits::QUOTA_VALUE_MAX))]
    pub quota_sandboxes_per_workspace: u64,
    /// Quota: most owned records (SSH sessions plus policies) of one
    /// workspace's sandboxes (quota = owned_records_per_workspace).
    /// Replicated configuration, like the above.
    #[arg(long, default_value_t = palisade_lifecycle::limits::OWNED_RECORDS_PER_WORKSPACE_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=palisade_lifecycle::limits::QUOTA_VALUE_MAX))]
    pub quota_owned_records_per_workspace: u64,
    /// Seconds between the leader's rounds comparing the driver's
    /// executions with the state (the orphan reconciler).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub reconcile_interval_seconds: u64,
    /// Milliseconds between the leader's ticks, which bring its clock into
    /// the replicated clock (receipt and SSH-session expiry and retired
    /// token-key deadlines are on it). Shorter: those deadlines are met
    /// more precisely, at the cost of one log entry per tick.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub tick_interval_ms: u64,
    /// Seconds an execution must be seen orphaned (its sandbox gone, or a
    /// stale generation) before the reconciler stops and removes it.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub orphan_grace_seconds: u64,
    /// Hours the process driver keeps a removed sandbox's tombstone (and
    /// highest fence): until then any late launch of it is refused. Keep it
    /// far longer than an operation can stay pending.
    #[arg(long, default_value_t = 168, value_parser = clap::value_parser!(u64).range(1..=24 * 365))]
    pub tombstone_retention_hours: u64,
    /// Whom sandbox commands run as: a user name or uid, or `same` (the
    /// gateway's own user, working directory inside the driver directory).
    /// Default: `nobody` when the gateway runs as root, else `same`. Another
    /// user cannot read the data directory (0700) or the gateway's
    /// environment.
    #[arg(long)]
    pub sandbox_user: Option<String>,
    /// Where the working directories of sandboxes run as --sandbox-user go
    /// (outside every data directory; default: TMPDIR/palisade-sandboxes).
    #[arg(long)]
    pub sandbox_work_dir: Option<PathBuf>,
    /// Seconds shutdown waits for in-flight requests.
    #[arg(long, default_value_t = 10)]
    pub drain_seconds: u64,
    /// Keep a read projection in PostgreSQL (postgres://USER:PASSWORD@HOST:PORT/DATABASE;
    /// all replicas of a cluster use the same database, the leader writes it). Without it
    /// there is no projection and no PostgreSQL is needed.
    #[arg(long, env = "PALISADE_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// With --postgres-url: the projection keeps the `lifecycle_events`
    /// rows of the last this many log entries and deletes older ones as it
    /// advances (about 0.5 KB a row), so the table stays bounded.
    #[arg(long, default_value_t = palisade_gateway::projection::EVENTS_KEPT_ENTRIES_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub projection_events_kept_entries: u64,
    /// Serve Prometheus metrics on http://ADDR/metrics and this replica's
    /// status page on http://ADDR/ (HOST:PORT, e.g. 127.0.0.1:9101; plain
    /// HTTP, separate from the gRPC port). Without it neither is served.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Log line format on stderr: `text` (human-readable) or `json` (one
    /// JSON object per line, with the fields of its spans, e.g. the
    /// request's `trace_id`). The level is set by PALISADE_LOG.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Threads of the async runtime that serves this replica (1-1024;
    /// default: one per core this process may use). Fewer trades
    /// throughput for latency at low load: with 3 replicas on a 2-core
    /// machine, 1 each gave a lone client ~9 % more writes per second (p50
    /// 1.45 -> 1.3 ms) and 16 or 256 clients ~16 % fewer (README,
    /// Benchmarks).
    #[arg(long, value_parser = worker_threads_parser())]
    pub worker_threads: Option<u16>,
    /// Also export the spans (request, forwarded write, effect; each under
    /// the request's W3C trace id) over OTLP, HTTP/protobuf, to this URL:
    /// an OpenTelemetry collector's traces endpoint, e.g.
    /// http://127.0.0.1:4318/v1/traces. Spans are batched and sent every
    /// second; the ones PALISADE_LOG filters out are not exported.
    #[arg(long, value_name = "URL", value_parser = parse_otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
}

/// `--otlp-endpoint`: an http:// or https:// URL.
fn parse_otlp_endpoint(text: &str) -> Result<String, String> {
    let text = text.trim();
    match text.parse::<tonic::codegen::http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(text.to_string())
        }
        _ => Err(format!(
            "{text:?} is not an http:// or https:// URL (e.g. http://127.0.0.1:4318/v1/traces)"
        )),
    }
}

/// The log formats of `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the current span and its parents.
    Json,
}

/// The compute drivers `palisade gateway run --driver` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriverKind {
    /// Local processes, one shim per execution (the default).
    Process,
    /// Runs nothing, keeps no state: for benchmarks and tests only.
    Noop,
    /// The process driver with injected faults (`--fault-plan`): for tests
    /// and chaos runs only.
    Fault,
    /// One container per execution on a Docker Engine (`--docker-host`).
    Docker,
}

impl DriverKind {
    /// The value of `--driver` that selects this driver.
    pub fn flag_value(self) -> &'static str {
        match self {
            DriverKind::Process => "process",
            DriverKind::Noop => "noop",
            DriverKind::Fault => "fault",
            DriverKind::Docker => "docker",
        }
    }
}

/// The drivers `--driver fault` can wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultOver {
    /// The process driver.
    Process,
    /// The Docker driver.
    Docker,
}

/// The Docker driver's flags (`--driver docker`), shared by `gateway run`
/// and `up`.
#[derive(Debug, Clone, Args)]
pub struct DockerArgs {
    /// Docker Engine address for `--driver docker`: unix:///PATH,
    /// tcp://HOST:PORT (TLS when DOCKER_TLS_VERIFY is set, certificates
    /// from DOCKER_CERT_PATH) or https://HOST:PORT. Default: DOCKER_HOST,
    /// else unix:///var/run/docker.sock. Every replica must reach the same
    /// engine.
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// Image of a sandbox created without --image (`--driver docker`).
    /// Images are never pulled: it must be on the engine already.
    #[arg(long, default_value = "busybox:latest")]
    pub docker_default_image: String,
    /// Network every container joins (`--driver docker`): `none` (no
    /// network), `bridge`, `host` or a network's name.
    #[arg(long, default_value = palisade_driver::docker::DEFAULT_NETWORK)]
    pub docker_network: String,
}

impl DockerArgs {
    /// The same flags for a `palisade gateway run` command line.
    pub fn to_gateway_args(&self) -> Vec<String> {
        let mut args = vec![
            "--docker-default-image".to_string(),
            self.docker_default_image.clone(),
            "--docker-network".to_string(),
            self.docker_network.clone(),
        ];
        if let Some(host) = &self.docker_host {
            args.push("--docker-host".to_string());
            args.push(host.clone());
        }
        args
    }
}

/// Parses `1=127.0.0.1:7001,2=127.0.0.1:7002`.
pub fn parse_initial_cluster(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut members = BTreeMap::new();
    for member in text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let (id, address) = member
            .split_once('=')
            .ok_or_else(|| format!("expected ID=HOST:PORT, got {member:?}"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("node id {id:?} is not a number"))?;
        let address = palisade_lifecycle::validate::address("--initial-cluster", address)
            .map_err(|invalid| format!("address of node {id}: {}", invalid.problem))?;
        if members.insert(id, address).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if members.is_empty() {
        return Err("empty member list".into());
    }
    Ok(members)
}

/// Whom sandbox commands run as (`--sandbox-user`); `None`: the gateway's
/// own user.
fn sandbox_user(args: &RunArgs) -> anyhow::Result<Option<palisade_driver::process::SandboxUser>> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let user = match args.sandbox_user.as_deref() {
        Some("same") => return Ok(None),
        Some(user) => user.to_string(),
        None if root => "nobody".to_string(),
        None => return Ok(None),
    };
    let work_root = args
        .sandbox_work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("palisade-sandboxes"));
    let work_root = std::path::absolute(&work_root).unwrap_or(work_root);
    if work_root.starts_with(std::path::absolute(&args.data_dir).unwrap_or_default()) {
        bail!("--sandbox-work-dir must be outside the data directory");
    }
    let resolved = palisade_driver::process::SandboxUser::lookup(&user, work_root)
        .with_context(|| format!("--sandbox-user {user}"))?;
    if !root {
        bail!(
            "--sandbox-user {user} needs the gateway to run as root (or pass --sandbox-user same)"
        );
    }
    resolved.prepare_work_root().with_context(|| {
        format!(
            "cannot create --sandbox-work-dir {}",
            resolved.work_root.display()
        )
    })?;
    tracing::info!(user = %user, uid = resolved.uid, "sandbox commands run as this user");
    Ok(Some(resolved))
}

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(stream) => stream,
        Err(error) => {
            tracing::error!(%error, "cannot watch SIGTERM; stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `--worker-threads` of `gateway run` and `up`: 1 to 1024 runtime threads.
pub fn worker_threads_parser() -> clap::builder::RangedI64ValueParser<u16> {
    clap::value_parser!(u16).range(1..=1024)
}

/// Runs `palisade gateway run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.node_id == 0 {
        bail!("--node-id must be at least 1");
    }
    tracing::info!(
        threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "async runtime worker threads (--worker-threads)"
    );
    if let Ok(names) = std::env::var(palisade_chaos::cli::PLANTED_BUGS_ENV) {
        // TEST-ONLY (the chaos harness's process mode): a build without
        // the planted bugs refuses, rather than run without them.
        let names: Vec<String> = names
            .split(',')
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .collect();
        palisade_chaos::cli::plant(&names).map_err(|message| {
            anyhow::anyhow!("{}: {message}", palisade_chaos::cli::PLANTED_BUGS_ENV)
        })?;
        tracing::warn!(?names, "TEST BUILD: planted bugs turned on");
    }
    // Everything this replica writes (log, snapshots, driver records) is
    // its own: directories 0700, files 0600. Sandbox commands get 022 back.
    // SAFETY: umask has no preconditions; set before any thread writes.
    unsafe {
        libc::umask(0o077);
    }
    let sandbox_user = sandbox_user(&args)?;
    let timing = RaftTiming {
        heartbeat_ms: args.heartbeat_ms,
        election_timeout_min_ms: args.election_timeout_min_ms,
        election_timeout_max_ms: args.election_timeout_max_ms,
    };
    let tls = match (&args.ca, &args.cert, &args.key) {
        (Some(ca), Some(cert), Some(key)) => {
            Some(palisade_raft::tls::TlsMaterial::read(ca, cert, key).map_err(anyhow::Error::msg)?)
        }
        _ if args.insecure => None,
        _ => bail!(
            "TLS needs --ca, --cert and --key (`palisade cluster init-pki` makes them); \
             pass --insecure to run plaintext (local tests only)"
        ),
    };
    if tls.is_some() && args.peer_listen.is_none() {
        bail!("--peer-listen is required with TLS: peers get their own mutual-TLS port");
    }
    if args.peer_listen == Some(args.listen) {
        bail!("--peer-listen must differ from --listen");
    }
    let advertise = args
        .advertise
        .clone()
        .unwrap_or_else(|| args.peer_listen.unwrap_or(args.listen).to_string());
    let initial_cluster = args.initial_cluster.clone().unwrap_or_default();
    if let Some(listed) = initial_cluster.get(&args.node_id)
        && *listed != advertise
    {
        bail!(
            "--initial-cluster lists node {} at {listed}, but it advertises {advertise}; make them agree",
            args.node_id
        );
    }
    let driver_dir = match &args.driver_dir {
        Some(dir) => dir.clone(),
        None => args
            .data_dir
            .parent()
            .map(|parent| parent.join("executions"))
            .unwrap_or_else(|| PathBuf::from("executions")),
    };
    let docker = || -> anyhow::Result<Arc<dyn ComputeDriver>> {
        let docker = DockerDriver::new(DockerConfig {
            host: args.docker.docker_host.clone(),
            default_image: args.docker.docker_default_image.clone(),
            network: args.docker.docker_network.clone(),
            driver_dir: driver_dir.clone(),
            timeouts: DockerTimeouts {
                tombstone_retention: Duration::from_secs(args.tombstone_retention_hours * 3600),
                ..DockerTimeouts::default()
            },
        })
        .context("cannot set up the Docker driver")?;
        tracing::info!(
            host = docker.host(),
            fences = %driver_dir.display(),
            "Docker driver"
        );
        Ok(Arc::new(docker))
    };
    let process = || -> anyhow::Result<Arc<dyn ComputeDriver>> {
        let shim_program =
            std::env::current_exe().context("cannot find the palisade executable")?;
        std::fs::create_dir_all(&driver_dir)
            .with_context(|| format!("cannot create driver directory {}", driver_dir.display()))?;
        Ok(Arc::new(
            ProcessDriver::new(driver_dir.clone(), shim_program)
                .with_context(|| {
                    format!(
                        "cannot open the process driver's directory {}",
                        driver_dir.display()
                    )
                })?
                .with_timeouts(ProcessDriverTimeouts {
                    tombstone_retention: Duration::from_secs(args.tombstone_retention_hours * 3600),
                    ..ProcessDriverTimeouts::default()
                })
                .with_sandbox_user(sandbox_user.clone()),
        ))
    };
    let driver: Arc<dyn ComputeDriver> = match args.driver {
        DriverKind::Noop => Arc::new(NoopDriver::new()),
        DriverKind::Docker => docker()?,
        DriverKind::Process => process()?,
        DriverKind::Fault => {
            let inner = match args.fault_over {
                FaultOver::Process => process()?,
                FaultOver::Docker => docker()?,
            };
            let plan = args.fault_plan.clone().unwrap_or_default();
            Arc::new(palisade_driver::fault::FaultDriver::new(inner, plan))
        }
    };
    if args.fault_plan.is_some() && args.driver != DriverKind::Fault {
        bail!("--fault-plan needs --driver fault");
    }
    let config = NodeConfig {
        node_id: args.node_id,
        listen: args.listen,
        peer_listen: args.peer_listen,
        advertise,
        tls,
        data_dir: args.data_dir.clone(),
        initial_cluster,
        timing,
        log_policy: RaftLogPolicy {
            snapshot_interval_entries: args.snapshot_interval_entries,
            log_kept_after_snapshot_entries: args.log_kept_after_snapshot_entries,
        },
        limits: ServerLimits {
            requests_in_flight_max: args.requests_in_flight_max as usize,
            streams_per_connection_max: args.streams_per_connection_max,
            watchers_max: args.watchers_max as usize,
            watch_events_per_second_max: args.watch_events_per_second_max,
        },
        executor: ExecutorConfig {
            stop_grace: Duration::from_secs(args.stop_grace_seconds),
            receipt_retention: Duration::from_secs(args.receipt_retention_hours * 3600),
            quotas: palisade_lifecycle::Quotas {
                receipts_per_workspace: args.quota_receipts_per_workspace,
                sandboxes_per_workspace: args.quota_sandboxes_per_workspace,
                owned_records_per_workspace: args.quota_owned_records_per_workspace,
            },
            reconcile_interval: Duration::from_secs(args.reconcile_interval_seconds),
            orphan_grace: Duration::from_secs(args.orphan_grace_seconds),
            tick_interval: Duration::from_millis(args.tick_interval_ms),
            ..Default::default()
        },
        timeouts: ReplicaTimeouts {
            operation_wait_max: Duration::from_secs(args.operation_wait_max_seconds),
            ..ReplicaTimeouts::default()
        },
        drain_timeout: Duration::from_secs(args.drain_seconds),
        postgres_url: args.postgres_url.clone(),
        projection_events_kept_entries: args.projection_events_kept_entries,
        metrics_listen: args.metrics_listen,
    };
    #[cfg(feature = "test-hooks")]
    if let Some(level) = std::env::var_os(SUPPORTED_FEATURE_LEVEL_ENV) {
        // TEST-ONLY (a `test-hooks` build): play a release that supports
        // a lower cluster feature level (the mixed-level tests).
        let level: u32 = level
            .to_str()
            .and_then(|level| level.parse().ok())
            .with_context(|| format!("{SUPPORTED_FEATURE_LEVEL_ENV} must be a number"))?;
        palisade_raft::feature_level::lower_supported_for_tests(level);
        tracing::warn!(
            supported = palisade_raft::feature_level::supported(),
            "TEST BUILD: supported feature level lowered"
        );
    }
    #[cfg(feature = "test-hooks")]
    let fault_points: Option<Arc<dyn palisade_raft::hooks::FaultPoints>> = match (
        std::env::var_os(palisade_testkit::gate::GATE_DIR_ENV),
        std::env::var_os(palisade_testkit::control_points::POINTS_DIR_ENV),
    ) {
        (Some(_), Some(_)) => anyhow::bail!(
            "set one of {} and {}, not both",
            palisade_testkit::gate::GATE_DIR_ENV,
            palisade_testkit::control_points::POINTS_DIR_ENV
        ),
        // TEST-ONLY (a `test-hooks` build): the file gate at the
        // executor's before-effect point.
        (Some(dir), None) => {
            let gate = palisade_testkit::gate::FileGate::new(dir.into())
                .context("cannot create the test gate directory")?;
            tracing::warn!("TEST BUILD: launches may be held by the file gate");
            Some(Arc::new(gate))
        }
        // TEST-ONLY (a `test-hooks` build): every fault point, armed and
        // answered by the chaos harness over its control directory.
        (None, Some(dir)) => {
            let points =
                palisade_testkit::control_points::ControlPoints::new(dir.into(), args.node_id)
                    .context("cannot create the fault points' control directory")?;
            tracing::warn!("TEST BUILD: fault points driven by the chaos harness");
            Some(Arc::new(points))
        }
        (None, None) => None,
    };
    #[cfg(feature = "test-hooks")]
    if let Some(fault_points) = fault_points {
        let (listener, peer_listener) = palisade_gateway::node::bind_listeners(&config).await?;
        let hooks = palisade_gateway::node::NodeHooks {
            fault_points: Some(fault_points),
            ..Default::default()
        };
        return Ok(palisade_gateway::node::run_with_listeners(
            config,
            driver,
            listener,
            peer_listener,
            hooks,
            shutdown_signal(),
        )
        .await?);
    }
    Ok(palisade_gateway::node::run(config, driver, shutdown_signal()).await?)
}

/// TEST-ONLY (read only by `test-hooks` builds): the cluster feature level
/// this replica claims to support, below its build's
/// (`palisade_raft::feature_level::lower_supported_for_tests`).
#[cfg(feature = "test-hooks")]
pub const SUPPORTED_FEATURE_LEVEL_ENV: &str = "PALISADE_TEST_SUPPORTED_FEATURE_LEVEL";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_cluster_addresses_are_host_and_port() {
        let members =
            parse_initial_cluster("1=127.0.0.1:7001, 2=http://node-2.internal:7001").unwrap();
        assert_eq!(members[&1], "127.0.0.1:7001");
        assert_eq!(members[&2], "node-2.internal:7001");
        for bad in [
            "1=:",
            "1=host:",
            "1=a:b:c",
            "1=host:0",
            "1=127.0.0.1:7001,1=127.0.0.1:7002",
            "",
        ] {
            assert!(parse_initial_cluster(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
