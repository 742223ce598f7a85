//! `palisade-bench`: throughput and latency of a three-replica cluster, and
//! how long a leader failure interrupts writes. A benchmark, not a test:
//! it asserts nothing and prints numbers.
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-bench                 # --help for the flags
//! ```
//!
//! It starts three replicas of the real `palisade` binary (`palisade
//! gateway run`, through `palisade-testkit`; the `palisade` next to this
//! binary, or `--palisade PATH`) with the `noop` compute driver (or, with
//! `--driver process`, the process driver: one idle shim per sandbox; with
//! `--driver docker`, one idle container per sandbox), on free
//! loopback ports, with their data in a temporary directory, so what it
//! measures is the control plane: validation, forwarding, Raft (fsync'd
//! log), apply, the executor's completion round. Then:
//!
//! 1. for each concurrency level (1, 16, 256 clients; each client its own
//!    tonic client with a connection to each replica, starting at replica
//!    `i % 3` and then sending where the answers' headers say the leader
//!    is, as `palisade`'s own client does: from its first call or two on,
//!    every request goes to the leader; with `--stay` each client stays on
//!    the replica it starts at, so two thirds of the requests are
//!    forwarded by a follower), it creates
//!    sandboxes (each waits for READY), stops them (each waits for
//!    STOPPED), starts them again (each waits for READY), deletes them
//!    (each waits until gone), and prints
//!    throughput and p50/p99 latency per operation, and the CPU time each
//!    operation cost: the three replica processes' (user + system), and
//!    the whole machine's busy time (the clients, the kernel's workers and,
//!    with `--driver process`, the shims too). On a saturated machine CPU
//!    per operation is what throughput is made of, and it moves much less
//!    between runs than ops/s: compare builds by it;
//! 2. several times: SIGKILLs the leader while clients keep creating
//!    through the other two replicas, and prints the time from the kill to
//!    the first acknowledged create that was sent after it, then restarts
//!    the killed replica and lets it catch up.
//!
//! Replicas log at `warn` (set `PALISADE_BENCH_LOG` to change it) into
//! `node-N/gateway.log` under the temporary directory (`--keep` keeps it).
//!
//! With `--min-phase-seconds S` a level repeats create/stop/start/delete
//! cycles (new names each cycle) until each operation ran at least `S`
//! seconds in total: `scripts/bench-vs-etcd` runs it so, beside etcd.
//!
//! Every phase is bounded in time; the whole run takes about a minute in
//! release on a two-core machine. The replicas are killed on exit, also on
//! failure. Numbers depend on the disk's fsync latency and on whatever
//! else runs on the machine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use anyhow::bail;
use clap::Parser;
use palisade_bench::{
    CpuMeter, CpuReading, LEADER_TIMEOUT, REPLICAS, Table, connect, in_run_dir, millis,
    palisade_binary, percentile, run_main, start_cluster_with, wait_ready,
};
use palisade_cli::client::LeaderChannel;
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::LocalCluster;
use palisade_testkit::probe::cluster_info;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// Benchmark a three-replica Palisade cluster (noop driver unless
/// `--driver process`) on loopback.
#[derive(Debug, Parser)]
#[command(name = "palisade-bench", long_about = None)]
struct Args {
    /// Concurrency levels (clients), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    clients: Vec<usize>,
    /// Sandboxes created (then stopped, started again and deleted) per
    /// level; at least 8 per client.
    #[arg(long, default_value_t = 1000)]
    sandboxes: usize,
    /// Leader kills to time.
    #[arg(long, default_value_t = 5)]
    failover_trials: usize,
    /// Longest any one phase (pass) may run; what is done by then is
    /// reported.
    #[arg(long, default_value_t = 60)]
    phase_seconds: u64,
    /// Repeat create/stop/start/delete cycles (each of --sandboxes new
    /// sandboxes) at a level until every operation has run at least this
    /// many seconds in total (0: one cycle). A few-second phase is not
    /// evidence: `scripts/bench-vs-etcd` passes 20.
    #[arg(long, default_value_t = 0)]
    min_phase_seconds: u64,
    /// The `palisade` binary the replicas run (default: the one next to
    /// this binary).
    #[arg(long)]
    palisade: Option<PathBuf>,
    /// Keep the temporary directory (replica logs) after the run.
    #[arg(long)]
    keep: bool,
    /// The compute driver of the replicas: `noop` measures the control plane
    /// alone; `process` runs a real (idle) shim process per sandbox; `docker`
    /// one (idle) container per sandbox on --docker-host.
    #[arg(long, value_enum, default_value_t = Driver::Noop)]
    driver: Driver,
    /// With `--driver docker`: the engine (default: DOCKER_HOST, else the
    /// local socket).
    #[arg(long, env = "DOCKER_HOST")]
    docker_host: Option<String>,
    /// With `--driver docker`: the image the sandboxes run (it must be on the
    /// engine and have `sleep`).
    #[arg(long, default_value = "busybox:latest")]
    docker_default_image: String,
    /// More `gateway run` flags for every replica, e.g.
    /// `--replica-arg=--election-timeout-min-ms=300` (repeatable).
    #[arg(long = "replica-arg", allow_hyphen_values = true)]
    replica_args: Vec<String>,
    /// Run every replica with `--metrics-listen` (each on a free port) and
    /// scrape all three `/metrics` every --scrape-interval-ms while the
    /// benchmark runs: compare with a run without it for the cost of the
    /// metrics.
    #[arg(long)]
    metrics: bool,
    /// Milliseconds between scrapes with --metrics (Prometheus' default
    /// is 15 s; the default here is pessimistic).
    #[arg(long, default_value_t = 1000, requires = "metrics")]
    scrape_interval_ms: u64,
    /// Run the replicas as `palisade up` does: TLS on the public port,
    /// mutual TLS between peers (default: `--insecure`, plaintext). The
    /// failover trials use plaintext clients, so pass
    /// `--failover-trials 0` with it.
    #[arg(long)]
    tls: bool,
    /// Each client sends every request to the replica it starts at (client
    /// `i` to replica `i % 3`) instead of learning the leader from the
    /// answers: measures forwarding by the followers.
    #[arg(long)]
    stay: bool,
    /// Clients make random request ids (UUID v4) instead of time-ordered
    /// ones (v7, what `palisade` and its client library make): measures
    /// what a client making its own random ids costs the receipt table.
    #[arg(long)]
    random_request_ids: bool,
}

/// How the benchmark's clients make request ids (`--random-request-ids`).
#[derive(Debug, Clone, Copy)]
enum RequestIds {
    TimeOrdered,
    Random,
}

impl RequestIds {
    fn make(self) -> String {
        match self {
            RequestIds::TimeOrdered => palisade_proto::new_request_id(),
            RequestIds::Random => uuid::Uuid::new_v4().to_string(),
        }
    }
}

/// The compute drivers the benchmark can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Driver {
    /// Runs nothing.
    Noop,
    /// One shim (idle command) per sandbox.
    Process,
    /// One container (idle command) per sandbox.
    Docker,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Noop => "noop",
            Driver::Process => "process",
            Driver::Docker => "docker",
        }
    }
}

/// Connections per replica that the clients share (HTTP/2 multiplexes).
const CONNECTIONS_PER_REPLICA: usize = 4;
/// Per-attempt deadline of the writers timing a failover.
const FAILOVER_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Writers creating sandboxes while a leader is killed.
const FAILOVER_WRITERS: usize = 4;

fn main() {
    run_main(run(Args::parse()));
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = palisade_binary(args.palisade.as_deref())?;
    in_run_dir("palisade-bench", args.keep, |root| {
        bench(&args, &palisade, root)
    })
    .await
}

async fn bench(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    let mut gateway_args = vec!["--driver".to_string(), args.driver.name().to_string()];
    if args.driver == Driver::Docker {
        gateway_args.extend([
            "--docker-default-image".to_string(),
            args.docker_default_image.clone(),
        ]);
        if let Some(host) = &args.docker_host {
            gateway_args.extend(["--docker-host".to_string(), host.clone()]);
        }
    }
    gateway_args.extend(args.replica_args.iter().cloned());
    if args.tls && args.failover_trials > 0 {
        anyhow::bail!("--tls measures throughput only: pass --failover-trials 0 with it");
    }
    let mut cluster = if args.metrics {
        let mut spec = palisade_testkit::ClusterSpec::new(palisade, REPLICAS)
            .gateway_args(gateway_args)
            .log_filter(&palisade_bench::replica_log_filter());
        spec.root = Some(root.clone());
        spec.tls = args.tls;
        let mut cluster = LocalCluster::prepare(spec)?;
        for replica in &mut cluster.replicas {
            let port = palisade_testkit::ports::free_port()?;
            replica
                .extra_args
                .extend(["--metrics-listen".to_string(), format!("127.0.0.1:{port}")]);
        }
        cluster.start_all()?;
        cluster
    } else {
        start_cluster_with(palisade, &root, gateway_args, args.tls)?
    };
    let scraper = args.metrics.then(|| {
        let addresses: Vec<String> = cluster
            .replicas
            .iter()
            .filter_map(|replica| {
                let at = replica
                    .extra_args
                    .iter()
                    .position(|arg| arg == "--metrics-listen")?;
                replica.extra_args.get(at + 1).cloned()
            })
            .collect();
        tokio::spawn(scrape_forever(
            addresses,
            Duration::from_millis(args.scrape_interval_ms),
        ))
    });
    let leader = wait_ready(&cluster).await?;
    println!(
        "palisade-bench: {REPLICAS} replicas ({} driver, fsync'd Raft log) on loopback, leader node {leader}; {} request ids; data in {}",
        args.driver.name(),
        if args.random_request_ids {
            "random (v4)"
        } else {
            "time-ordered (v7)"
        },
        root.display()
    );

    let mut channels = Vec::new();
    for uri in cluster.all_uris() {
        for _ in 0..CONNECTIONS_PER_REPLICA {
            channels.push(connect(&uri).await?);
        }
    }
    let phase_limit = Duration::from_secs(args.phase_seconds);
    let request_ids = if args.random_request_ids {
        RequestIds::Random
    } else {
        RequestIds::TimeOrdered
    };
    let meter = CpuMeter::new(
        cluster
            .replicas
            .iter()
            .filter_map(|replica| replica.try_pid())
            .collect(),
    );
    let mut table = Vec::new();
    for &clients in &args.clients {
        let clients = clients.max(1);
        let per_client = (args.sandboxes / clients).max(8);
        let min_phase = Duration::from_secs(args.min_phase_seconds);
        let routes = client_routes(&channels, clients, args.stay);
        let mut rows = level(&routes, &meter, per_client, phase_limit, 1, request_ids).await;
        let mut cycle = 1;
        while rows.iter().any(|row| row.elapsed < min_phase) {
            cycle += 1;
            let more = level(&routes, &meter, per_client, phase_limit, cycle, request_ids).await;
            for (row, more) in rows.iter_mut().zip(more) {
                row.add(more);
            }
        }
        table.extend(rows);
    }
    print_table(&table);
    if let Some(scraper) = &scraper {
        println!(
            "metrics: every replica served /metrics, scraped every {} ms",
            args.scrape_interval_ms
        );
        scraper.abort();
    }

    let mut trials = Vec::new();
    for trial in 1..=args.failover_trials {
        let timing = failover_trial(&mut cluster, trial).await?;
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

/// Scrapes `GET /metrics` of every address every `interval` (HTTP/1.0,
/// read to the end), as a Prometheus server would; failures are ignored
/// (a replica may be down during the failover trials).
async fn scrape_forever(addresses: Vec<String>, interval: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut ticks = tokio::time::interval(interval);
    loop {
        ticks.tick().await;
        for address in &addresses {
            let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
                continue;
            };
            let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
            if stream.write_all(request.as_bytes()).await.is_ok() {
                let mut answer = Vec::new();
                let _ = stream.read_to_end(&mut answer).await;
            }
        }
    }
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
    /// CPU the replicas and the machine spent during the phase.
    cpu: CpuReading,
}

impl Row {
    /// Adds another cycle's results of the same operation and level.
    fn add(&mut self, other: Row) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.cpu.processes += other.cpu.processes;
        self.cpu.machine += other.cpu.machine;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

fn print_table(rows: &[Row]) {
    let mut table = Table::new(
        &[
            "op",
            "clients",
            "ok",
            "errors",
            "ops/s",
            "p50 ms",
            "p99 ms",
            "replica CPU ms/op",
            "machine CPU ms/op",
        ],
        1,
    );
    for row in rows {
        let mut sorted = row.latencies.clone();
        sorted.sort();
        let throughput = row.ok as f64 / row.elapsed.as_secs_f64().max(1e-9);
        let per_op = |seconds: f64| format!("{:.3}", seconds * 1e3 / row.ok.max(1) as f64);
        table.row(vec![
            row.operation.to_string(),
            row.clients.to_string(),
            row.ok.to_string(),
            row.errors.to_string(),
            format!("{throughput:.0}"),
            // Hundredths: the 1-client target compares p50s of about a
            // millisecond, where tenths alone move the ratio by up to 10 %.
            format!("{:.2}", millis(percentile(&sorted, 0.50))),
            format!("{:.2}", millis(percentile(&sorted, 0.99))),
            per_op(row.cpu.processes),
            per_op(row.cpu.machine),
        ]);
    }
    print!("{table}");
    for row in rows {
        if let Some(error) = &row.first_error {
            println!(
                "{} x{}: {} errors, first: {error}",
                row.operation, row.clients, row.errors
            );
        }
    }
}

/// Creates, stops, starts and deletes `clients * per_client` sandboxes with
/// `clients` concurrent clients (cycle `cycle` of the level: the names
/// are new each cycle); one row per operation.
/// The clients' channels: client `i` starts at replica `i % 3` and, unless
/// `stay`, sends where the answers say the leader is; each uses one of the
/// connections to each replica.
fn client_routes(channels: &[Channel], clients: usize, stay: bool) -> Vec<LeaderChannel> {
    (0..clients)
        .map(|client| {
            let replica = client % REPLICAS as usize;
            let connection = (client / REPLICAS as usize) % CONNECTIONS_PER_REPLICA;
            let at =
                |replica: usize| channels[replica * CONNECTIONS_PER_REPLICA + connection].clone();
            if stay {
                LeaderChannel::new(vec![at(replica)], 0)
            } else {
                LeaderChannel::new((0..REPLICAS as usize).map(at).collect(), replica)
            }
        })
        .collect()
}

async fn level(
    routes: &[LeaderChannel],
    meter: &CpuMeter,
    per_client: usize,
    phase_limit: Duration,
    cycle: usize,
    request_ids: RequestIds,
) -> Vec<Row> {
    let clients = routes.len();
    let api = |client: usize| PalisadeClient::new(routes[client].clone());
    let names: Vec<Vec<String>> = (0..clients)
        .map(|client| {
            (0..per_client)
                .map(|n| format!("bench-{clients}-{cycle}-{client}-{n}"))
                .collect()
        })
        .collect();

    let setup = PhaseSetup {
        clients,
        phase_limit,
        meter,
    };
    let (create_row, ids) = phase("create", &setup, |client, deadline| {
        let mut api = api(client);
        let names = names[client].clone();
        async move {
            let mut results = Vec::new();
            for name in names.into_iter().take_while(|_| Instant::now() < deadline) {
                let request = v1::CreateSandboxRequest {
                    name,
                    spec: Some(v1::SandboxSpec::default()),
                    request_id: request_ids.make(),
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
    let (stop_row, stopped) = sandbox_phase(
        "stop",
        &setup,
        request_ids,
        &ids,
        &api,
        |mut api, sandbox, request_id| async move {
            let request = v1::StopSandboxRequest {
                sandbox: Some(sandbox),
                request_id,
                ..Default::default()
            };
            api.stop_sandbox(request).await.map(drop)
        },
    )
    .await;
    // The stopped ones start again (each waits for READY): a new execution.
    let (start_row, _) = sandbox_phase(
        "start",
        &setup,
        request_ids,
        &Arc::new(stopped),
        &api,
        |mut api, sandbox, request_id| async move {
            let request = v1::StartSandboxRequest {
                sandbox: Some(sandbox),
                request_id,
                ..Default::default()
            };
            api.start_sandbox(request).await.map(drop)
        },
    )
    .await;
    let (delete_row, _) = sandbox_phase(
        "delete",
        &setup,
        request_ids,
        &ids,
        &api,
        |mut api, sandbox, request_id| async move {
            let request = v1::DeleteSandboxRequest {
                sandbox: Some(sandbox),
                request_id,
                ..Default::default()
            };
            api.delete_sandbox(request).await.map(drop)
        },
    )
    .await;
    vec![create_row, stop_row, start_row, delete_row]
}

type Outcomes = Vec<(Duration, Result<String, tonic::Status>)>;

/// A phase calling `call` once for each sandbox of `ids` (client `i` takes
/// `ids[i]`, in order, with a new request id each), through `api(i)`.
async fn sandbox_phase<Call, Answer>(
    operation: &'static str,
    setup: &PhaseSetup<'_>,
    request_ids: RequestIds,
    ids: &Arc<Vec<Vec<String>>>,
    api: &impl Fn(usize) -> PalisadeClient<LeaderChannel>,
    call: Call,
) -> (Row, Vec<Vec<String>>)
where
    Call: Fn(PalisadeClient<LeaderChannel>, v1::SandboxRef, String) -> Answer
        + Clone
        + Send
        + 'static,
    Answer: Future<Output = Result<(), tonic::Status>> + Send,
{
    phase(operation, setup, |client, deadline| {
        let api = api(client);
        let ids = ids[client].clone();
        let call = call.clone();
        async move {
            let mut results = Vec::new();
            for id in ids.into_iter().take_while(|_| Instant::now() < deadline) {
                let sandbox = v1::SandboxRef {
                    id: id.clone(),
                    ..Default::default()
                };
                let request_id = request_ids.make();
                let started = Instant::now();
                let answer = call(api.clone(), sandbox, request_id).await;
                results.push((started.elapsed(), answer.map(|()| id)));
            }
            results
        }
    })
    .await
}

/// What every phase of a level shares.
struct PhaseSetup<'a> {
    /// Concurrent clients.
    clients: usize,
    /// No client sends a request after this long.
    phase_limit: Duration,
    /// The replicas' and the machine's CPU, read around each phase.
    meter: &'a CpuMeter,
}

/// Runs `setup.clients` copies of `client` at once; each sends no request
/// after `setup.phase_limit` (and each request has its own deadline).
/// Returns the row and, per client, the ids it got.
async fn phase<F, Fut>(
    operation: &'static str,
    setup: &PhaseSetup<'_>,
    client: F,
) -> (Row, Vec<Vec<String>>)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Outcomes> + Send + 'static,
{
    let PhaseSetup {
        clients,
        phase_limit,
        meter,
    } = *setup;
    let cpu_before = meter.read();
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
        cpu: CpuReading::default(),
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
    row.cpu = meter.read() - cpu_before;
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
    cluster: &mut LocalCluster,
    trial: usize,
) -> anyhow::Result<FailoverTiming> {
    let leader = wait_ready(cluster).await?;
    // A workspace per trial: the trials' sandboxes are never deleted, and
    // twenty trials of a few thousand creates in one workspace met its
    // quota (10,000 by default), every create after it refused.
    let workspace = format!("failover-{trial}");
    let leader_uri = cluster.uris(&[leader]).remove(0);
    PalisadeClient::new(palisade_bench::connect(&leader_uri).await?)
        .create_workspace(v1::CreateWorkspaceRequest {
            name: workspace.clone(),
        })
        .await
        .with_context(|| format!("cannot create workspace {workspace}"))?;
    let survivor_ids: Vec<u64> = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let survivors = cluster.uris(&survivor_ids);
    let running = Arc::new(AtomicBool::new(true));
    let killed_at: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    // The last error a writer got, for the report of a trial that fails.
    let last_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let mut writers = JoinSet::new();
    for writer in 0..FAILOVER_WRITERS {
        let uri = survivors[writer % survivors.len()].clone();
        let running = running.clone();
        let killed_at = killed_at.clone();
        let last_error = last_error.clone();
        let workspace = workspace.clone();
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
                    workspace: workspace.clone(),
                    name: format!("failover-{trial}-{writer}-{serial}"),
                    spec: Some(v1::SandboxSpec::default()),
                    request_id: palisade_proto::new_request_id(),
                    ..Default::default()
                };
                let answer = api.create_sandbox(request).await;
                if answer.is_ok()
                    && let Some(killed) = killed_at.get()
                    && sent >= *killed
                {
                    first_after_kill = Some(Instant::now());
                }
                if let Err(status) = answer {
                    *last_error.lock().expect("not poisoned") =
                        Some(format!("{:?}: {}", status.code(), status.message()));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            first_after_kill
        });
    }
    // Let the writers get going, then kill the leader.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    let _ = killed_at.set(killed);
    // SIGKILL, reaped before this returns.
    cluster.replica_mut(leader).kill();
    let mut elected = None;
    let deadline = killed + LEADER_TIMEOUT;
    while elected.is_none() && Instant::now() < deadline {
        for uri in &survivors {
            if let Some(info) = cluster_info(uri).await
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
        let last_error = last_error.lock().expect("not poisoned").clone();
        bail!(
            "trial {trial}, leader node {leader} killed: {} within {LEADER_TIMEOUT:?} of the kill (the writers' last error: {})",
            if elected.is_none() {
                "no new leader"
            } else {
                "a new leader, but no acknowledged write"
            },
            last_error.as_deref().unwrap_or("none")
        );
    };
    cluster.replica_mut(leader).start()?;
    wait_ready(cluster).await?;
    Ok(FailoverTiming {
        killed: leader,
        elected,
        first_write,
    })
}
