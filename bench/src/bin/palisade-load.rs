//! `palisade-load`: many slow clients and watchers against one replica
//! (noop driver, loopback; the leader of `--replicas`, one by default),
//! while a probe measures what a well-behaved caller gets: health checks
//! and small reads.
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-load --slow-clients 2000 --watchers 500 --seconds 60
//! # what watchers cost the writers (scripts/bench-vs-etcd's fan-out section):
//! target/release/palisade-load --replicas 3 --slow-clients 64 --watchers 0 --seconds 60
//! target/release/palisade-load --replicas 3 --slow-clients 64 --watchers 300 --seconds 60
//! ```
//!
//! - A slow client has a connection of its own and keeps one write in
//!   flight: create a sandbox with a request id, then delete it (each waits
//!   for consensus and the operation); a write refused with
//!   RESOURCE_EXHAUSTED is counted as shed and retried after the RetryInfo
//!   delay the replica gave, as a polite client does.
//! - A watcher watches the default workspace and reads slowly (one event,
//!   then `--watcher-read-pause-ms`), so its queue on the replica fills.
//! - The probe, on its own connection, alternates a health check
//!   (`grpc.health.v1.Health/Check`) and a small read (`GetWorkspace
//!   default`) every 10 ms and records each answer's latency.
//!
//! Every `--report-seconds` it prints the writes served and shed, the
//! watchers open and refused, the probe's latencies (p50/p99/max, and how
//! many small reads were shed), and the replica's RSS; then a verdict line
//! against the issue's bar (probe p99 < 100 ms, excess shed with
//! RESOURCE_EXHAUSTED, RSS bounded).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use palisade_bench::{
    RunFlags, connect, in_run_dir, mib, millis, palisade_binary, percentile, rss_bytes, run_main,
};
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::{ClusterSpec, LocalCluster};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

/// Slow clients and watchers against one replica; prints a report line per
/// interval and a verdict.
#[derive(Debug, Parser)]
#[command(name = "palisade-load")]
struct Args {
    /// Concurrent slow clients, each on its own connection with one write
    /// in flight at a time.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=20_000))]
    slow_clients: u64,
    /// Concurrent watchers (slow readers of WatchSandboxes).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=20_000))]
    watchers: u64,
    /// Milliseconds a watcher pauses after each event it reads.
    #[arg(long, default_value_t = 200)]
    watcher_read_pause_ms: u64,
    /// How long to run the load, seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=24 * 3600))]
    seconds: u64,
    /// Replicas in the cluster; the load goes to the leader (the other
    /// replicas follow its log, as in production).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=7))]
    replicas: u64,
    /// Seconds between report lines.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    report_seconds: u64,
    #[command(flatten)]
    run: RunFlags,
}

fn main() {
    run_main(run(Args::parse()));
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = palisade_binary(args.run.palisade.as_deref())?;
    in_run_dir("palisade-load", args.run.keep, |root| {
        load(&args, &palisade, root)
    })
    .await
}

/// What the load's tasks count.
#[derive(Default)]
struct Counters {
    writes_ok: AtomicU64,
    writes_shed: AtomicU64,
    writes_failed: AtomicU64,
    watchers_open: AtomicU64,
    watchers_refused: AtomicU64,
    watch_events: AtomicU64,
    watch_ended: AtomicU64,
    probe_reads_shed: AtomicU64,
    probe_failed: AtomicU64,
    /// Failed calls other than RESOURCE_EXHAUSTED, by gRPC code.
    failures: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Counters {
    fn failure(&self, status: &tonic::Status) {
        *self
            .failures
            .lock()
            .unwrap()
            .entry(format!("{:?}", status.code()))
            .or_default() += 1;
    }
}

/// The probe's latencies since the last report.
#[derive(Default)]
struct Probe {
    health: Vec<Duration>,
    reads: Vec<Duration>,
}

async fn load(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    let mut gateway_args = vec!["--driver".to_string(), "noop".to_string()];
    gateway_args.extend(args.run.replica_args.iter().cloned());
    let mut spec = ClusterSpec::new(palisade, args.replicas)
        .gateway_args(gateway_args)
        .log_filter(&palisade_bench::replica_log_filter());
    spec.root = Some(root.clone());
    let cluster = LocalCluster::start(spec).context("cannot start the replicas")?;
    let members: Vec<u64> = (1..=args.replicas).collect();
    let (leader, _term) = cluster
        .wait_for_leader(&members, palisade_bench::LEADER_TIMEOUT)
        .await?;
    let uri = cluster.replica(leader).uri();
    let pid = cluster.replica(leader).pid();
    println!(
        "palisade-load: {} replica(s) (noop driver; load on the leader, replica {leader}), {} slow clients, {} watchers, {} s; data in {}",
        args.replicas,
        args.slow_clients,
        args.watchers,
        args.seconds,
        root.display()
    );
    let rss_idle = rss_bytes(pid);
    let counters = Arc::new(Counters::default());
    let probe = Arc::new(Mutex::new(Probe::default()));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut tasks = tokio::task::JoinSet::new();

    // The probe first, so it measures the ramp-up too; on a thread and
    // runtime of its own, so that the load's tasks in this process do not
    // delay it (what it measures is the replica, not this process).
    let probe_thread = {
        let uri = uri.clone();
        let probe = probe.clone();
        let counters = counters.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the probe's runtime");
            runtime.block_on(async move {
                let channel = connect(&uri).await.expect("the probe's connection");
                probe_loop(channel, deadline, probe, counters).await;
            });
        })
    };
    for _ in 0..args.watchers {
        let uri = uri.clone();
        let counters = counters.clone();
        let pause = Duration::from_millis(args.watcher_read_pause_ms);
        tasks.spawn(async move {
            let Ok(channel) = connect(&uri).await else {
                counters.watchers_refused.fetch_add(1, Ordering::Relaxed);
                *counters
                    .failures
                    .lock()
                    .unwrap()
                    .entry("connect".into())
                    .or_default() += 1;
                return;
            };
            watcher(PalisadeClient::new(channel), deadline, pause, counters).await;
        });
    }
    for client in 0..args.slow_clients {
        let uri = uri.clone();
        let counters = counters.clone();
        tasks.spawn(async move {
            let Ok(channel) = connect(&uri).await else {
                counters.writes_failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            slow_client(PalisadeClient::new(channel), client, deadline, counters).await;
        });
    }

    println!(
        "{:>5} {:>9} {:>9} {:>7} {:>8} {:>8} {:>10} {:>22} {:>22} {:>10} {:>8}",
        "s",
        "writes ok",
        "shed",
        "failed",
        "watching",
        "refused",
        "events",
        "health p50/p99/max ms",
        "read p50/p99/max ms",
        "reads shed",
        "rss MiB"
    );
    let started = Instant::now();
    let mut last = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut all_health = Vec::new();
    let mut all_reads = Vec::new();
    let mut rss_max = 0;
    let mut rss_samples = Vec::new();
    while Instant::now() < deadline {
        let wake = (Instant::now() + Duration::from_secs(args.report_seconds)).min(deadline);
        tokio::time::sleep_until(wake).await;
        let rss = rss_bytes(pid);
        rss_max = rss_max.max(rss);
        rss_samples.push(rss);
        let (mut health, mut reads) = {
            let mut probe = probe.lock().unwrap();
            (
                std::mem::take(&mut probe.health),
                std::mem::take(&mut probe.reads),
            )
        };
        health.sort_unstable();
        reads.sort_unstable();
        let now = (
            counters.writes_ok.load(Ordering::Relaxed),
            counters.writes_shed.load(Ordering::Relaxed),
            counters.writes_failed.load(Ordering::Relaxed),
            counters.watch_events.load(Ordering::Relaxed),
            counters.probe_reads_shed.load(Ordering::Relaxed),
        );
        println!(
            "{:>5.0} {:>9} {:>9} {:>7} {:>8} {:>8} {:>10} {:>22} {:>22} {:>10} {:>8.0}",
            started.elapsed().as_secs_f64(),
            now.0 - last.0,
            now.1 - last.1,
            now.2 - last.2,
            counters.watchers_open.load(Ordering::Relaxed),
            counters.watchers_refused.load(Ordering::Relaxed),
            now.3 - last.3,
            triple(&health),
            triple(&reads),
            now.4 - last.4,
            mib(rss),
        );
        last = now;
        all_health.extend(health);
        all_reads.extend(reads);
    }
    // The clients stop at the deadline; give them a moment, then go.
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    let _ = probe_thread.join();
    all_health.sort_unstable();
    all_reads.sort_unstable();
    let health_p99 = percentile(&all_health, 0.99);
    let reads_p99 = percentile(&all_reads, 0.99);
    let shed = counters.writes_shed.load(Ordering::Relaxed);
    // Bounded: the second half of the run holds no more than the first.
    let half = rss_samples.len() / 2;
    let first_half_max = rss_samples[..half].iter().copied().max().unwrap_or(0);
    let second_half_max = rss_samples[half..].iter().copied().max().unwrap_or(0);
    println!(
        "verdict: health p99 {:.1} ms ({} checks), small read p99 {:.1} ms ({} reads, {} shed, {} failed) -> {}; writes ok {}, shed with RESOURCE_EXHAUSTED {} ({}), other failures {}; watchers open {} refused {}; RSS idle {:.0} MiB, max {:.0} MiB, max first half {:.0} / second half {:.0} MiB",
        millis(health_p99),
        all_health.len(),
        millis(reads_p99),
        all_reads.len(),
        counters.probe_reads_shed.load(Ordering::Relaxed),
        counters.probe_failed.load(Ordering::Relaxed),
        if health_p99 < Duration::from_millis(100) && reads_p99 < Duration::from_millis(100) {
            "within 100 ms"
        } else {
            "OVER 100 ms"
        },
        counters.writes_ok.load(Ordering::Relaxed),
        shed,
        if shed > 0 { "shedding" } else { "NOTHING SHED" },
        counters.writes_failed.load(Ordering::Relaxed),
        counters.watchers_open.load(Ordering::Relaxed),
        counters.watchers_refused.load(Ordering::Relaxed),
        mib(rss_idle),
        mib(rss_max),
        mib(first_half_max),
        mib(second_half_max),
    );
    println!(
        "failures by code (not RESOURCE_EXHAUSTED): {:?}",
        counters.failures.lock().unwrap()
    );
    drop(cluster);
    Ok(())
}

/// One write at a time, create then delete, until `deadline`; a shed write
/// waits the delay it was given, then is retried (same request id).
async fn slow_client(
    api: PalisadeClient<Channel>,
    client: u64,
    deadline: Instant,
    counters: Arc<Counters>,
) {
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let create = v1::CreateSandboxRequest {
            name: format!("load-{client}-{n}"),
            spec: Some(v1::SandboxSpec::default()),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        let Some(answer) = retried(&counters, deadline, || {
            let mut api = api.clone();
            let create = create.clone();
            async move { api.create_sandbox(create).await }
        })
        .await
        else {
            continue;
        };
        let Some(id) = answer.metadata.map(|metadata| metadata.id) else {
            continue;
        };
        let delete = v1::DeleteSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                id,
                ..Default::default()
            }),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        let _ = retried(&counters, deadline, || {
            let mut api = api.clone();
            let delete = delete.clone();
            async move { api.delete_sandbox(delete).await }
        })
        .await;
    }
}

/// Calls `call` until it is served (or `deadline`), counting each answer.
async fn retried<T, F, Fut>(counters: &Counters, deadline: Instant, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    while Instant::now() < deadline {
        match call().await {
            Ok(answer) => {
                counters.writes_ok.fetch_add(1, Ordering::Relaxed);
                return Some(answer.into_inner());
            }
            Err(status) if status.code() == Code::ResourceExhausted => {
                counters.writes_shed.fetch_add(1, Ordering::Relaxed);
                let delay = status
                    .get_details_retry_info()
                    .and_then(|retry| retry.retry_delay)
                    .unwrap_or(Duration::from_millis(200));
                tokio::time::sleep(delay).await;
            }
            Err(status) => {
                counters.writes_failed.fetch_add(1, Ordering::Relaxed);
                counters.failure(&status);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    None
}

/// Watches the default workspace, reading one event per `pause`.
async fn watcher(
    mut api: PalisadeClient<Channel>,
    deadline: Instant,
    pause: Duration,
    counters: Arc<Counters>,
) {
    let mut stream = match api
        .watch_sandboxes(v1::WatchSandboxesRequest::default())
        .await
    {
        Ok(stream) => stream.into_inner(),
        Err(status) => {
            counters.watchers_refused.fetch_add(1, Ordering::Relaxed);
            if status.code() != Code::ResourceExhausted {
                counters.failure(&status);
            }
            return;
        }
    };
    counters.watchers_open.fetch_add(1, Ordering::Relaxed);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.message()).await;
        match next {
            Ok(Ok(Some(_))) => {
                counters.watch_events.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
            Ok(_) => {
                counters.watch_ended.fetch_add(1, Ordering::Relaxed);
                break;
            }
            Err(_) => break,
        }
    }
    counters.watchers_open.fetch_sub(1, Ordering::Relaxed);
}

/// A health check and a small read every 10 ms, each timed.
async fn probe_loop(
    channel: Channel,
    deadline: Instant,
    probe: Arc<Mutex<Probe>>,
    counters: Arc<Counters>,
) {
    let mut health = HealthClient::new(channel.clone());
    let mut api = PalisadeClient::new(channel);
    let mut every = tokio::time::interval(Duration::from_millis(10));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut read_turn = false;
    while Instant::now() < deadline {
        every.tick().await;
        read_turn = !read_turn;
        let started = Instant::now();
        if read_turn {
            let answer = api
                .get_workspace(v1::GetWorkspaceRequest {
                    name: "default".into(),
                    ..Default::default()
                })
                .await;
            let took = started.elapsed();
            match answer {
                Ok(_) => probe.lock().unwrap().reads.push(took),
                Err(status) if status.code() == Code::ResourceExhausted => {
                    counters.probe_reads_shed.fetch_add(1, Ordering::Relaxed);
                    probe.lock().unwrap().reads.push(took);
                }
                Err(status) => {
                    counters.probe_failed.fetch_add(1, Ordering::Relaxed);
                    counters.failure(&status);
                }
            }
        } else {
            let answer = health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await;
            let took = started.elapsed();
            match answer {
                Ok(_) => probe.lock().unwrap().health.push(took),
                Err(status) => {
                    counters.probe_failed.fetch_add(1, Ordering::Relaxed);
                    counters.failure(&status);
                }
            }
        }
    }
}

/// "p50/p99/max" in milliseconds.
fn triple(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    format!(
        "{:.1}/{:.1}/{:.1}",
        millis(percentile(sorted, 0.5)),
        millis(percentile(sorted, 0.99)),
        millis(*sorted.last().unwrap())
    )
}
