//! `etcd-load`: the etcd half of `scripts/bench-vs-etcd`.
//!
//! It starts a three-member etcd on loopback (the `etcd` binary given with
//! `--etcd`, each member with its own data directory, fsync'd WAL as etcd
//! always does unless told `--unsafe-no-fsync`), then for each concurrency
//! level runs the two transactions that do what Palisade's create and
//! delete do to one record:
//!
//! - conditional create: `Txn{ create_revision(k) == 0 -> put(k, v) }`
//! - conditional delete: `Txn{ mod_revision(k) == rev -> delete(k) }`, with
//!   `rev` the revision the create answered.
//!
//! The load matches `palisade-bench`'s: at `C` clients each client owns
//! `max(keys / C, 8)` keys; the clients are spread over the three members
//! (client `i` talks to member `i % 3`, over one of 4 connections per
//! member, as `palisade-bench --stay` spreads its clients over the
//! replicas; with `--to-leader` every client talks to the member that
//! leads when the run starts, as `palisade-bench`'s clients end up doing); a
//! cycle creates every key, then deletes every key; cycles repeat until
//! each operation has run `--min-phase-seconds` in total (no single pass
//! longer than `--phase-seconds`). The output rows are those of
//! `palisade-bench`: `op clients ok errors ops/s p50_ms p99_ms`.
//!
//! The members are killed when it exits, also on failure; their data is
//! in a temporary directory removed at the end.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, KvClient, Txn, TxnOp};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Load a local three-member etcd with conditional create and delete
/// transactions (the etcd side of `scripts/bench-vs-etcd`).
#[derive(Debug, Parser)]
#[command(name = "etcd-load")]
struct Args {
    /// The `etcd` server binary (e.g. unpacked from Debian's `etcd-server`).
    #[arg(long)]
    etcd: PathBuf,
    /// Concurrency levels (clients), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    clients: Vec<usize>,
    /// Keys created (then deleted) per cycle and level; at least 8 per
    /// client (as `palisade-bench --sandboxes`).
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    /// Bytes of every value put.
    #[arg(long, default_value_t = 256)]
    value_size: usize,
    /// Each operation runs at least this long per level (in cycles).
    #[arg(long, default_value_t = 20)]
    min_phase_seconds: u64,
    /// Longest any one pass may run; what is done by then is reported.
    #[arg(long, default_value_t = 60)]
    phase_seconds: u64,
    /// Keep the members' data directory (and their logs) after the run.
    #[arg(long)]
    keep: bool,
    /// Every client talks to the member that leads when the run starts
    /// (asked with etcd's Status call) instead of client `i` to member
    /// `i % 3`: no forwarding by followers.
    #[arg(long)]
    to_leader: bool,
}

/// Members of the etcd cluster.
const MEMBERS: usize = 3;
/// Connections per member that the clients share (as palisade-bench).
const CONNECTIONS_PER_MEMBER: usize = 4;
/// Per-request deadline.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let result = runtime.block_on(run(args));
    runtime.shutdown_background();
    if let Err(error) = result {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if !args.etcd.is_file() {
        bail!("--etcd {}: no such file", args.etcd.display());
    }
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients: every level must be at least 1");
    }
    if args.min_phase_seconds == 0 || args.phase_seconds == 0 {
        bail!("--min-phase-seconds and --phase-seconds must be at least 1");
    }
    let root = std::env::temp_dir().join(format!("etcd-load-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let mut cluster = EtcdCluster::start(&args.etcd, &root)?;
    let result = bench(&args, &cluster).await;
    cluster.stop().await;
    if args.keep {
        println!("etcd data and logs kept in {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

/// The index (in `cluster.client_urls`) of the member that leads, by
/// etcd's Status call on each member: the one whose own id is the leader
/// it reports.
async fn leader_member(cluster: &EtcdCluster) -> anyhow::Result<usize> {
    for (index, endpoint) in cluster.client_urls.iter().enumerate() {
        let mut client = Client::connect([endpoint.as_str()], None)
            .await
            .with_context(|| format!("connecting to {endpoint}"))?;
        let status = client
            .status()
            .await
            .with_context(|| format!("status of {endpoint}"))?;
        let own = status.header().map(|header| header.member_id());
        if own == Some(status.leader()) {
            return Ok(index);
        }
    }
    bail!("no member reports itself as the leader")
}

async fn bench(args: &Args, cluster: &EtcdCluster) -> anyhow::Result<()> {
    let version = cluster.wait_ready().await?;
    println!(
        "etcd-load: {MEMBERS} etcd {version} members (fsync'd WAL) on loopback; value {} bytes",
        args.value_size
    );
    let leader = if args.to_leader {
        let leader = leader_member(cluster).await?;
        println!("etcd-load: every client talks to the leader, member {leader}");
        Some(leader)
    } else {
        None
    };
    let mut connections = Vec::new();
    for endpoint in &cluster.client_urls {
        for _ in 0..CONNECTIONS_PER_MEMBER {
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_timeout(REQUEST_TIMEOUT);
            let client = Client::connect([endpoint.as_str()], Some(options))
                .await
                .with_context(|| format!("connecting to {endpoint}"))?;
            connections.push(client.kv_client());
        }
    }
    let value = vec![b'v'; args.value_size];
    let min_phase = Duration::from_secs(args.min_phase_seconds);
    let pass_limit = Duration::from_secs(args.phase_seconds);
    println!(
        "{:<7} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8}",
        "op", "clients", "ok", "errors", "ops/s", "p50 ms", "p99 ms"
    );
    for &clients in &args.clients {
        let per_client = (args.keys / clients).max(8);
        let mut create = Row::new("create", clients);
        let mut delete = Row::new("delete", clients);
        let mut cycle = 0;
        while create.elapsed < min_phase || delete.elapsed < min_phase {
            cycle += 1;
            let kv = |client: usize| {
                let member = leader.unwrap_or(client % MEMBERS);
                let connection = (client / MEMBERS) % CONNECTIONS_PER_MEMBER;
                connections[member * CONNECTIONS_PER_MEMBER + connection].clone()
            };
            let created = pass(&mut create, clients, pass_limit, |client, deadline| {
                let kv = kv(client);
                let value = value.clone();
                let keys: Vec<String> = (0..per_client)
                    .map(|n| format!("bench-{clients}-{cycle}-{client}-{n}"))
                    .collect();
                create_keys(kv, keys, value, deadline)
            })
            .await;
            pass(&mut delete, clients, pass_limit, |client, deadline| {
                delete_keys(kv(client), created[client].clone(), deadline)
            })
            .await;
        }
        create.print();
        delete.print();
    }
    Ok(())
}

/// What one client did in one pass: per request its latency and either the
/// key with its revision or an error.
type Outcomes = Vec<(Duration, anyhow::Result<(String, i64)>)>;

async fn create_keys(
    mut kv: KvClient,
    keys: Vec<String>,
    value: Vec<u8>,
    deadline: Instant,
) -> Outcomes {
    let mut outcomes = Vec::new();
    for key in keys.into_iter().take_while(|_| Instant::now() < deadline) {
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
        let started = Instant::now();
        let answer = kv.txn(txn).await;
        let outcome = match answer {
            Ok(answer) if answer.succeeded() => {
                let revision = answer.header().map(|h| h.revision()).unwrap_or(0);
                Ok((key, revision))
            }
            Ok(_) => Err(anyhow::anyhow!("create of {key}: the key exists")),
            Err(error) => Err(error.into()),
        };
        outcomes.push((started.elapsed(), outcome));
    }
    outcomes
}

async fn delete_keys(mut kv: KvClient, keys: Vec<(String, i64)>, deadline: Instant) -> Outcomes {
    let mut outcomes = Vec::new();
    for (key, revision) in keys.into_iter().take_while(|_| Instant::now() < deadline) {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                revision,
            )])
            .and_then([TxnOp::delete(key.clone(), None)]);
        let started = Instant::now();
        let answer = kv.txn(txn).await;
        let outcome = match answer {
            Ok(answer) if answer.succeeded() => Ok((key, revision)),
            Ok(_) => Err(anyhow::anyhow!(
                "delete of {key}: revision {revision} no longer current"
            )),
            Err(error) => Err(error.into()),
        };
        outcomes.push((started.elapsed(), outcome));
    }
    outcomes
}

/// Runs `clients` copies of `client` at once (none sends a request after
/// `limit`), adds what they did to `row`, and returns per client the keys
/// (with revisions) that succeeded.
async fn pass<F, Fut>(
    row: &mut Row,
    clients: usize,
    limit: Duration,
    client: F,
) -> Vec<Vec<(String, i64)>>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Outcomes> + Send + 'static,
{
    let started = Instant::now();
    let deadline = started + limit;
    let mut tasks = JoinSet::new();
    for index in 0..clients {
        let work = client(index, deadline);
        tasks.spawn(async move { (index, work.await) });
    }
    let mut done = vec![Vec::new(); clients];
    while let Some(joined) = tasks.join_next().await {
        let Ok((index, outcomes)) = joined else {
            row.errors += 1;
            continue;
        };
        for (latency, outcome) in outcomes {
            match outcome {
                Ok(key) => {
                    row.latencies.push(latency);
                    done[index].push(key);
                }
                Err(error) => {
                    row.errors += 1;
                    row.first_error.get_or_insert_with(|| format!("{error:#}"));
                }
            }
        }
    }
    row.elapsed += started.elapsed();
    done
}

/// One operation at one level, over all its cycles.
struct Row {
    operation: &'static str,
    clients: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

impl Row {
    fn new(operation: &'static str, clients: usize) -> Self {
        Row {
            operation,
            clients,
            errors: 0,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            first_error: None,
        }
    }

    fn print(&mut self) {
        self.latencies.sort();
        let ok = self.latencies.len();
        let rate = ok as f64 / self.elapsed.as_secs_f64().max(1e-9);
        // Hundredths, as palisade-bench prints them: the 1-client target
        // compares p50s of about a millisecond.
        println!(
            "{:<7} {:>7} {:>8} {:>7} {:>8.0} {:>8.2} {:>8.2}",
            self.operation,
            self.clients,
            ok,
            self.errors,
            rate,
            percentile_ms(&self.latencies, 0.50),
            percentile_ms(&self.latencies, 0.99)
        );
        if let Some(error) = &self.first_error {
            println!(
                "{} x{}: {} errors, first: {error}",
                self.operation, self.clients, self.errors
            );
        }
    }
}

fn percentile_ms(sorted: &[Duration], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * quantile).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// Three etcd members on loopback, killed by `stop` (or on drop).
struct EtcdCluster {
    members: Vec<Child>,
    client_urls: Vec<String>,
}

impl EtcdCluster {
    fn start(etcd: &Path, root: &Path) -> anyhow::Result<Self> {
        let mut client_ports = Vec::new();
        let mut peer_ports = Vec::new();
        // Hold every listener until all ports are chosen, so none repeats.
        let mut held = Vec::new();
        for _ in 0..MEMBERS * 2 {
            let listener = TcpListener::bind("127.0.0.1:0").context("choosing a free port")?;
            held.push(listener);
        }
        for (index, listener) in held.iter().enumerate() {
            let port = listener.local_addr()?.port();
            if index < MEMBERS {
                client_ports.push(port);
            } else {
                peer_ports.push(port);
            }
        }
        drop(held);
        let initial_cluster: Vec<String> = peer_ports
            .iter()
            .enumerate()
            .map(|(index, port)| format!("m{index}=http://127.0.0.1:{port}"))
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let mut members = Vec::new();
        let mut client_urls = Vec::new();
        for index in 0..MEMBERS {
            let dir = root.join(format!("m{index}"));
            std::fs::create_dir_all(&dir)?;
            let log = std::fs::File::create(dir.join("etcd.log"))?;
            let client_url = format!("http://127.0.0.1:{}", client_ports[index]);
            let peer_url = format!("http://127.0.0.1:{}", peer_ports[index]);
            let child = Command::new(etcd)
                .arg("--name")
                .arg(format!("m{index}"))
                .arg("--data-dir")
                .arg(dir.join("data"))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "etcd-load"])
                .args(["--logger", "zap", "--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", etcd.display()))?;
            members.push(child);
            client_urls.push(client_url);
        }
        Ok(EtcdCluster {
            members,
            client_urls,
        })
    }

    /// Waits until every member answers Status with a leader; returns the
    /// server version.
    async fn wait_ready(&self) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut version = String::new();
        for url in &self.client_urls {
            loop {
                let status = async {
                    let options = ConnectOptions::new()
                        .with_connect_timeout(Duration::from_secs(1))
                        .with_timeout(Duration::from_secs(1));
                    let mut client = Client::connect([url.as_str()], Some(options)).await?;
                    client.status().await
                }
                .await;
                match status {
                    Ok(status) if status.leader() != 0 => {
                        version = status.version().to_string();
                        break;
                    }
                    _ if Instant::now() > deadline => {
                        bail!("etcd member {url} has no leader after 30 s (see its etcd.log)")
                    }
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        Ok(version)
    }

    async fn stop(&mut self) {
        for member in &mut self.members {
            let _ = member.kill().await;
        }
    }
}
