//! `palisade-bench`: throughput and latency of a three-replica cluster, and
//! how long a leader failure interrupts writes. A benchmark, not a test:
//! it asserts nothing and prints numbers.
//!
//! ```text
//! cargo run --release -p palisade-gateway --bin palisade-bench
//! ```
//!
//! It starts three replicas (`palisade-bench replica ...`, which runs
//! exactly what `palisade gateway run` runs) with the `noop` compute
//! driver, on free loopback ports, with their data in a temporary
//! directory, so what it measures is the control plane: validation,
//! forwarding, Raft (fsync'd log), apply, the executor's completion round.
//! Then:
//!
//! 1. for each concurrency level (1, 16, 256 clients; each client its own
//!    tonic client, the clients spread over the three replicas, so two
//!    thirds of the requests are forwarded by a follower), it creates
//!    sandboxes (each waits for READY), stops them (each waits for
//!    STOPPED), deletes them (each waits until gone), and prints
//!    throughput and p50/p99 latency per operation;
//! 2. several times: SIGKILLs the leader while clients keep creating
//!    through the other two replicas, and prints the time from the kill to
//!    the first acknowledged create that was sent after it, then restarts
//!    the killed replica and lets it catch up.
//!
//! Replicas log at `warn` (set `PALISADE_BENCH_LOG` to change it) into
//! `node-N/gateway.log` under the temporary directory (`--keep` keeps it).
//!
//! Every phase is bounded in time; the whole run takes about a minute in
//! release on a two-core machine. The replicas are killed on exit, also on
//! failure. Numbers depend on the disk's fsync latency and on whatever
//! else runs on the machine.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// Benchmark a three-replica Palisade cluster (noop driver) on loopback.
#[derive(Debug, Parser)]
#[command(name = "palisade-bench", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Internal: one replica, exactly as `palisade gateway run`.
    #[command(hide = true)]
    Replica(palisade_gateway::serve::RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Concurrency levels (clients), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    clients: Vec<usize>,
    /// Sandboxes created (then stopped, then deleted) per level; at least
    /// 8 per client.
    #[arg(long, default_value_t = 1000)]
    sandboxes: usize,
    /// Leader kills to time.
    #[arg(long, default_value_t = 5)]
    failover_trials: usize,
    /// Longest any one phase may run; what is done by then is reported.
    #[arg(long, default_value_t = 60)]
    phase_seconds: u64,
    /// Keep the temporary directory (replica logs) after the run.
    #[arg(long)]
    keep: bool,
    /// More `gateway run` flags for every replica, e.g.
    /// `--replica-arg=--election-timeout-min-ms=300` (repeatable).
    #[arg(long = "replica-arg", allow_hyphen_values = true)]
    replica_args: Vec<String>,
}

/// Replicas of the benchmark cluster.
const REPLICAS: u64 = 3;
/// Connections per replica that the clients share (HTTP/2 multiplexes).
const CONNECTIONS_PER_REPLICA: usize = 4;
/// Per-request deadline of the benchmark clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Per-attempt deadline of the writers timing a failover.
const FAILOVER_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Writers creating sandboxes while a leader is killed.
const FAILOVER_WRITERS: usize = 4;
/// How long a leader election may take before the run gives up.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let result = runtime.block_on(async move {
        match cli.command {
            Some(BenchCommand::Replica(args)) => {
                init_replica_tracing();
                palisade_gateway::serve::run(args).await
            }
            None => run(cli.run).await,
        }
    });
    runtime.shutdown_background();
    if let Err(error) = result {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

/// A replica logs as `palisade gateway run` does: `PALISADE_LOG` filter,
/// to stderr (which the benchmark points at the replica's log file).
fn init_replica_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PALISADE_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
}

/// One replica process; SIGKILLed when dropped.
struct ReplicaProcess {
    node_id: u64,
    address: String,
    data_dir: PathBuf,
    initial_cluster: String,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl ReplicaProcess {
    fn start(&mut self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.data_dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.join("gateway.log"))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("replica")
            .args(["--node-id", &self.node_id.to_string()])
            .args(["--listen", &self.address])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--driver", "noop"])
            .args(&self.extra_args)
            .env(
                "PALISADE_LOG",
                std::env::var("PALISADE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start a replica")?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn uri(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn connect(uri: &str) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(uri.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(REQUEST_TIMEOUT)
        .tcp_nodelay(true)
        .connect()
        .await?)
}

async fn cluster_info(uri: &str) -> Option<v1::ClusterInfo> {
    let channel = connect(uri).await.ok()?;
    ClusterAdminClient::new(channel)
        .get_cluster_info(v1::GetClusterInfoRequest {})
        .await
        .ok()
        .map(tonic::Response::into_inner)
}

/// Waits until every replica in `replicas` names the same leader, one of
/// them, and applied what it committed.
async fn wait_for_leader(replicas: &[&ReplicaProcess]) -> anyhow::Result<u64> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    loop {
        let mut views = Vec::new();
        for replica in replicas {
            views.push(cluster_info(&replica.uri()).await);
        }
        let leaders: Vec<Option<u64>> = views
            .iter()
            .map(|view| view.as_ref().and_then(|info| info.leader_id))
            .collect();
        let commit = views
            .iter()
            .flatten()
            .map(|info| info.commit_index)
            .max()
            .unwrap_or(0);
        if let Some(Some(leader)) = leaders.first()
            && leaders.iter().all(|known| *known == Some(*leader))
            && replicas.iter().any(|replica| replica.node_id == *leader)
            && views
                .iter()
                .flatten()
                .all(|info| info.applied_index >= commit)
        {
            return Ok(*leader);
        }
        if Instant::now() >= deadline {
            bail!("no leader within {LEADER_TIMEOUT:?}: {views:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let root = std::env::temp_dir().join(format!("palisade-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    let result = bench(&args, &root).await;
    if args.keep || result.is_err() {
        eprintln!("replica data and logs kept in {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

async fn bench(args: &RunArgs, root: &Path) -> anyhow::Result<()> {
    let mut addresses = Vec::new();
    for id in 1..=REPLICAS {
        addresses.push((id, format!("127.0.0.1:{}", free_port()?)));
    }
    let initial_cluster = addresses
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut replicas: Vec<ReplicaProcess> = addresses
        .iter()
        .map(|(id, address)| ReplicaProcess {
            node_id: *id,
            address: address.clone(),
            data_dir: root.join(format!("node-{id}")),
            initial_cluster: initial_cluster.clone(),
            extra_args: args.replica_args.clone(),
            child: None,
        })
        .collect();
    for replica in &mut replicas {
        replica.start()?;
    }
    let leader = wait_for_leader(&replicas.iter().collect::<Vec<_>>()).await?;
    println!(
        "palisade-bench: {REPLICAS} replicas (noop driver, fsync'd Raft log) on loopback, leader node {leader}; data in {}",
        root.display()
    );

    let mut channels = Vec::new();
    for replica in &replicas {
        for _ in 0..CONNECTIONS_PER_REPLICA {
            channels.push(connect(&replica.uri()).await?);
        }
    }
    let phase_limit = Duration::from_secs(args.phase_seconds);
    let mut table = Vec::new();
    for &clients in &args.clients {
        let clients = clients.max(1);
        let per_client = (args.sandboxes / clients).max(8);
        for row in level(&channels, clients, per_client, phase_limit).await {
            table.push(row);
        }
    }
    print_table(&table);

    let mut trials = Vec::new();
    for trial in 1..=args.failover_trials {
        let timing = failover_trial(&mut replicas, trial).await?;
        println!(
            "failover {trial}: killed leader node {}; new leader elected after {} ms, next acknowledged create after {} ms",
            timing.killed,
            timing.elected.as_millis(),
            timing.first_write.as_millis()
        );
        trials.push(timing);
    }
    if !trials.is_empty() {
        let mut writes: Vec<Duration> = trials.iter().map(|trial| trial.first_write).collect();
        writes.sort();
        println!(
            "leader SIGKILL -> next acknowledged write: min {} ms, median {} ms, max {} ms over {} trials",
            writes[0].as_millis(),
            writes[writes.len() / 2].as_millis(),
            writes[writes.len() - 1].as_millis(),
            writes.len()
        );
    }
    Ok(())
}

/// Results of one operation at one concurrency level.
struct Row {
    operation: &'static str,
    clients: usize,
    ok: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn print_table(rows: &[Row]) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:>7} {:>6} {:>10} {:>9} {:>9}",
        "op", "clients", "ok", "errors", "ops/s", "p50 ms", "p99 ms"
    );
    for row in rows {
        let mut sorted = row.latencies.clone();
        sorted.sort();
        let throughput = row.ok as f64 / row.elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>7} {:>6} {:>10.0} {:>9.1} {:>9.1}",
            row.operation,
            row.clients,
            row.ok,
            row.errors,
            throughput,
            percentile(&sorted, 0.50).as_secs_f64() * 1e3,
            percentile(&sorted, 0.99).as_secs_f64() * 1e3,
        );
    }
    print!("{out}");
    for row in rows {
        if let Some(error) = &row.first_error {
            println!(
                "{} x{}: {} errors, first: {error}",
                row.operation, row.clients, row.errors
            );
        }
    }
}

/// Creates, stops and deletes `clients * per_client` sandboxes with
/// `clients` concurrent clients; one row per operation.
async fn level(
    channels: &[Channel],
    clients: usize,
    per_client: usize,
    phase_limit: Duration,
) -> Vec<Row> {
    let api = |client: usize| {
        // Client i enters through replica i % 3, over one of its connections.
        let replica = client % REPLICAS as usize;
        let connection = (client / REPLICAS as usize) % CONNECTIONS_PER_REPLICA;
        PalisadeClient::new(channels[replica * CONNECTIONS_PER_REPLICA + connection].clone())
    };
    let names: Vec<Vec<String>> = (0..clients)
        .map(|client| {
            (0..per_client)
                .map(|n| format!("bench-{clients}-{client}-{n}"))
                .collect()
        })
        .collect();

    let (create_row, ids) = phase("create", clients, phase_limit, |client, deadline| {
        let mut api = api(client);
        let names = names[client].clone();
        async move {
            let mut results = Vec::new();
            for name in names.into_iter().take_while(|_| Instant::now() < deadline) {
                let request = v1::CreateSandboxRequest {
                    name,
                    spec: Some(v1::SandboxSpec::default()),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                };
                let started = Instant::now();
                let answer = api.create_sandbox(request).await;
                results.push((
                    started.elapsed(),
                    answer.map(|sandbox| {
                        sandbox
                            .into_inner()
                            .metadata
                            .map(|meta| meta.id)
                            .unwrap_or_default()
                    }),
                ));
            }
            results
        }
    })
    .await;
    let ids = Arc::new(ids);
    let (stop_row, _) = phase("stop", clients, phase_limit, |client, deadline| {
        let mut api = api(client);
        let ids = ids[client].clone();
        async move {
            let mut results = Vec::new();
            for id in ids.into_iter().take_while(|_| Instant::now() < deadline) {
                let request = v1::StopSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        id: id.clone(),
                        ..Default::default()
                    }),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                };
                let started = Instant::now();
                let answer = api.stop_sandbox(request).await;
                results.push((started.elapsed(), answer.map(|_| id)));
            }
            results
        }
    })
    .await;
    let (delete_row, _) = phase("delete", clients, phase_limit, |client, deadline| {
        let mut api = api(client);
        let ids = ids[client].clone();
        async move {
            let mut results = Vec::new();
            for id in ids.into_iter().take_while(|_| Instant::now() < deadline) {
                let request = v1::DeleteSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        id: id.clone(),
                        ..Default::default()
                    }),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                };
                let started = Instant::now();
                let answer = api.delete_sandbox(request).await;
                results.push((started.elapsed(), answer.map(|_| id)));
            }
            results
        }
    })
    .await;
    vec![create_row, stop_row, delete_row]
}

type Outcomes = Vec<(Duration, Result<String, tonic::Status>)>;

/// Runs `clients` copies of `client` at once; each sends no request after
/// `phase_limit` (and each request has its own deadline). Returns the row
/// and, per client, the ids it got.
async fn phase<F, Fut>(
    operation: &'static str,
    clients: usize,
    phase_limit: Duration,
    client: F,
) -> (Row, Vec<Vec<String>>)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Outcomes> + Send + 'static,
{
    let started = Instant::now();
    let deadline = started + phase_limit;
    let mut tasks = JoinSet::new();
    for index in 0..clients {
        let work = client(index, deadline);
        tasks.spawn(async move { (index, work.await) });
    }
    let mut ids = vec![Vec::new(); clients];
    let mut row = Row {
        operation,
        clients,
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        first_error: None,
    };
    while let Some(joined) = tasks.join_next().await {
        let Ok((index, outcomes)) = joined else {
            continue;
        };
        for (latency, outcome) in outcomes {
            match outcome {
                Ok(id) => {
                    row.ok += 1;
                    row.latencies.push(latency);
                    ids[index].push(id);
                }
                Err(status) => {
                    row.errors += 1;
                    row.first_error.get_or_insert_with(|| {
                        format!("{:?}: {}", status.code(), status.message())
                    });
                }
            }
        }
    }
    row.elapsed = started.elapsed();
    (row, ids)
}

/// Timings of one leader kill.
struct FailoverTiming {
    killed: u64,
    /// Until the survivors agreed on a new leader (as polled).
    elected: Duration,
    /// Until the first create sent after the kill was acknowledged.
    first_write: Duration,
}

/// Kills the leader while writers create through the other replicas;
/// times the first acknowledged create sent after the kill; restarts the
/// killed replica and waits until it caught up.
async fn failover_trial(
    replicas: &mut [ReplicaProcess],
    trial: usize,
) -> anyhow::Result<FailoverTiming> {
    let leader = wait_for_leader(&replicas.iter().collect::<Vec<_>>()).await?;
    let survivors: Vec<String> = replicas
        .iter()
        .filter(|replica| replica.node_id != leader)
        .map(ReplicaProcess::uri)
        .collect();
    let running = Arc::new(AtomicBool::new(true));
    let killed_at: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let mut writers = JoinSet::new();
    for writer in 0..FAILOVER_WRITERS {
        let uri = survivors[writer % survivors.len()].clone();
        let running = running.clone();
        let killed_at = killed_at.clone();
        writers.spawn(async move {
            let channel = Endpoint::from_shared(uri)
                .expect("a valid uri")
                .connect_timeout(Duration::from_secs(1))
                .timeout(FAILOVER_ATTEMPT_TIMEOUT)
                .connect_lazy();
            let mut api = PalisadeClient::new(channel);
            let mut first_after_kill: Option<Instant> = None;
            let mut serial = 0;
            while running.load(Ordering::SeqCst) && first_after_kill.is_none() {
                serial += 1;
                let sent = Instant::now();
                let request = v1::CreateSandboxRequest {
                    name: format!("failover-{trial}-{writer}-{serial}"),
                    spec: Some(v1::SandboxSpec::default()),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                };
                let answer = api.create_sandbox(request).await;
                if answer.is_ok()
                    && let Some(killed) = killed_at.get()
                    && sent >= *killed
                {
                    first_after_kill = Some(Instant::now());
                }
                if answer.is_err() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            first_after_kill
        });
    }
    // Let the writers get going, then kill the leader.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let victim = replicas
        .iter_mut()
        .find(|replica| replica.node_id == leader)
        .expect("the leader is one of the replicas");
    let killed = Instant::now();
    let _ = killed_at.set(killed);
    victim.kill();
    let survivors_ref: Vec<&ReplicaProcess> = replicas
        .iter()
        .filter(|replica| replica.node_id != leader)
        .collect();
    let mut elected = None;
    let deadline = killed + LEADER_TIMEOUT;
    while elected.is_none() && Instant::now() < deadline {
        for replica in &survivors_ref {
            if let Some(info) = cluster_info(&replica.uri()).await
                && info.leader_id.is_some_and(|new| new != leader)
            {
                elected = Some(killed.elapsed());
            }
        }
        if elected.is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut first_write = None;
    let stop_at = killed + LEADER_TIMEOUT;
    while let Some(joined) = tokio::time::timeout_at(stop_at, writers.join_next())
        .await
        .ok()
        .flatten()
    {
        if let Ok(Some(done)) = joined {
            let took = done.duration_since(killed);
            first_write = Some(first_write.map_or(took, |best: Duration| best.min(took)));
            running.store(false, Ordering::SeqCst);
        }
    }
    running.store(false, Ordering::SeqCst);
    writers.abort_all();
    let (Some(elected), Some(first_write)) = (elected, first_write) else {
        bail!("no new leader or no acknowledged write within {LEADER_TIMEOUT:?} of the kill");
    };
    let victim = replicas
        .iter_mut()
        .find(|replica| replica.node_id == leader)
        .expect("the leader is one of the replicas");
    victim.start()?;
    wait_for_leader(&replicas.iter().collect::<Vec<_>>()).await?;
    Ok(FailoverTiming {
        killed: leader,
        elected,
        first_write,
    })
}
