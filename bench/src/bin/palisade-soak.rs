//! `palisade-soak`: sustained create+delete with request ids against a
//! local three-replica cluster (noop driver), reported every interval:
//! throughput, failures, every replica's RSS and snapshot size, the
//! state's tracked size and receipts, the projection's lag (sampled every
//! second) and, with `--postgres-url`, the database's size and the shadow
//! tables' size. Also per interval: the replicas' CPU time per request
//! and the host's steal time (on a shared virtual machine the CPU the
//! host takes away moves throughput as much as the software does), and
//! the Raft term, whose growth counts the elections.
//!
//! `--requests-per-second` paces the clients to a total rate instead of
//! running them flat out (a steady run at part of the peak load: no
//! election should happen in it).
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-soak --minutes 30 --clients 16 \
//!     --postgres-url postgres://USER@127.0.0.1:PORT/DB
//! ```
//!
//! It ends with a verdict line: last interval's throughput against the
//! first, failed requests, RSS and snapshot maxima, database size growth.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use palisade_bench::{
    REPLICAS, RunFlags, connect, in_run_dir, mib, palisade_binary, rss_bytes, run_main,
    start_cluster, wait_ready,
};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Sustained create+delete with request ids against a three-replica
/// cluster; prints a report line per interval and a verdict.
#[derive(Debug, Parser)]
#[command(name = "palisade-soak")]
struct Args {
    /// How long to run, minutes.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=24 * 60))]
    minutes: u64,
    /// Concurrent clients, each creating then deleting one sandbox at a
    /// time (a fresh request id per request).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients: u64,
    /// Pace the clients to this many requests a second in total (each
    /// client an equal share); without it they run flat out.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    requests_per_second: Option<u64>,
    /// Seconds between report lines.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=3600))]
    report_seconds: u64,
    /// Project into this PostgreSQL database (every replica gets
    /// `--postgres-url`); its size is reported through `psql`.
    #[arg(long)]
    postgres_url: Option<String>,
    #[command(flatten)]
    run: RunFlags,
}

fn main() {
    run_main(run(Args::parse()));
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = palisade_binary(args.run.palisade.as_deref())?;
    in_run_dir("palisade-soak", args.run.keep, |root| {
        soak(&args, &palisade, root)
    })
    .await
}

/// Counters the clients share.
#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// One report interval's figures.
struct Interval {
    ok: u64,
    failed: u64,
    seconds: f64,
    term: u64,
    rss_max: u64,
    snapshot_max: u64,
    db_bytes: Option<u64>,
}

async fn soak(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    let mut gateway_args = vec!["--driver".to_string(), "noop".to_string()];
    if let Some(url) = &args.postgres_url {
        gateway_args.extend(["--postgres-url".to_string(), url.clone()]);
    }
    gateway_args.extend(args.run.replica_args.iter().cloned());
    let cluster = start_cluster(palisade, &root, gateway_args)?;
    let leader = wait_ready(&cluster).await?;
    println!(
        "palisade-soak: {REPLICAS} replicas (noop driver), leader node {leader}, {} clients, {} min; data in {}",
        args.clients,
        args.minutes,
        root.display()
    );
    let uris = cluster.all_uris();
    let mut channels = Vec::new();
    for uri in &uris {
        channels.push(connect(uri).await?);
    }
    let counters = Arc::new(Counters::default());
    let deadline = Instant::now() + Duration::from_secs(args.minutes * 60);
    let mut clients = tokio::task::JoinSet::new();
    // Each client's share of the paced rate: one request per period.
    let period = args
        .requests_per_second
        .map(|rate| Duration::from_secs_f64(args.clients as f64 / rate as f64));
    for client in 0..args.clients as usize {
        let api = PalisadeClient::new(channels[client % channels.len()].clone());
        let counters = counters.clone();
        clients.spawn(client_loop(api, client, deadline, period, counters));
    }

    // Projection lag, sampled every second from every replica's view.
    let lags = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let sampler = {
        let admins: Vec<_> = channels
            .iter()
            .map(|channel| ClusterAdminClient::new(channel.clone()))
            .collect();
        let lags = lags.clone();
        tokio::spawn(async move {
            let mut admins = admins;
            let mut every = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < deadline {
                every.tick().await;
                for admin in &mut admins {
                    if let Ok(info) = admin.get_cluster_info(v1::GetClusterInfoRequest {}).await
                        && info.get_ref().leader_id == Some(info.get_ref().node_id)
                        && let Some(projection) = &info.get_ref().projection
                    {
                        lags.lock().unwrap().push(projection.lag_ms);
                    }
                }
            }
        })
    };

    let pids: Vec<u32> = cluster
        .node_ids()
        .iter()
        .map(|id| cluster.replica(*id).pid())
        .collect();
    let data_dirs: Vec<PathBuf> = cluster
        .node_ids()
        .iter()
        .map(|id| cluster.replica(*id).data_dir.clone())
        .collect();
    let mut intervals = Vec::new();
    let mut last = (0, 0, Instant::now());
    let started = Instant::now();
    let first_term = state_of(&channels).await.term;
    let meter = palisade_bench::CpuMeter::new(pids.clone());
    let mut last_cpu = meter.read().processes;
    let mut last_host = host_times();
    println!(
        "{:>6} {:>8} {:>6} {:>8} {:>11} {:>7} {:>5} {:>10} {:>12} {:>12} {:>9} {:>12} {:>12}",
        "min",
        "ok",
        "failed",
        "req/s",
        "cpu ms/req",
        "steal %",
        "term",
        "rss MiB",
        "snapshot MiB",
        "state MiB",
        "receipts",
        "lag p99 ms",
        "db MiB"
    );
    while Instant::now() < deadline {
        let wake = (last.2 + Duration::from_secs(args.report_seconds)).min(deadline);
        tokio::time::sleep_until(wake).await;
        let now = Instant::now();
        let ok = counters.ok.load(Ordering::Relaxed);
        let failed = counters.failed.load(Ordering::Relaxed);
        let rss: Vec<u64> = pids.iter().map(|pid| rss_bytes(*pid)).collect();
        let snapshots: Vec<u64> = data_dirs.iter().map(|dir| snapshot_bytes(dir)).collect();
        let seen = state_of(&channels).await;
        let cpu = meter.read().processes;
        let host = host_times();
        let steal_percent = host_steal_percent(last_host, host);
        last_host = host;
        let lag_p99 = {
            let mut samples = std::mem::take(&mut *lags.lock().unwrap());
            samples.sort_unstable();
            samples
                .get((samples.len() * 99 / 100).min(samples.len().saturating_sub(1)))
                .copied()
        };
        let db = args.postgres_url.as_deref().and_then(database_bytes);
        let interval = Interval {
            ok: ok - last.0,
            failed: failed - last.1,
            seconds: now.duration_since(last.2).as_secs_f64(),
            term: seen.term,
            rss_max: rss.iter().copied().max().unwrap_or(0),
            snapshot_max: snapshots.iter().copied().max().unwrap_or(0),
            db_bytes: db.map(|(total, _)| total),
        };
        println!(
            "{:>6.1} {:>8} {:>6} {:>8.0} {:>11.2} {:>7.1} {:>5} {:>10} {:>12.1} {:>12.1} {:>9} {:>12} {:>12}",
            now.duration_since(started).as_secs_f64() / 60.0,
            interval.ok,
            interval.failed,
            interval.ok as f64 / interval.seconds.max(1e-9),
            1000.0 * (cpu - last_cpu) / interval.ok.max(1) as f64,
            steal_percent,
            interval.term,
            rss.iter()
                .map(|bytes| format!("{:.0}", mib(*bytes)))
                .collect::<Vec<_>>()
                .join("/"),
            mib(interval.snapshot_max),
            mib(seen.state_bytes),
            seen.receipts,
            lag_p99.map_or("-".into(), |lag| lag.to_string()),
            db.map_or("-".into(), |(total, shadow)| format!(
                "{:.1} (shadow {:.2})",
                mib(total),
                mib(shadow)
            )),
        );
        last = (ok, failed, now);
        last_cpu = cpu;
        intervals.push(interval);
    }
    while clients.join_next().await.is_some() {}
    sampler.abort();

    let first = intervals.first().context("no interval was measured")?;
    let final_interval = intervals.last().context("no interval was measured")?;
    let rate = |interval: &Interval| interval.ok as f64 / interval.seconds.max(1e-9);
    let failed: u64 = intervals.iter().map(|interval| interval.failed).sum();
    // Every election, won or not, takes a new term.
    let elections = final_interval.term.saturating_sub(first_term);
    println!(
        "verdict: throughput last/first {:.0}/{:.0} req/s = {:.0}%; failed {failed}; elections {elections} (term {first_term} -> {}); RSS max {:.0} MiB (first interval {:.0}); snapshot max {:.1} MiB (first {:.1}); db {} MiB",
        rate(final_interval),
        rate(first),
        100.0 * rate(final_interval) / rate(first).max(1e-9),
        final_interval.term,
        mib(intervals.iter().map(|i| i.rss_max).max().unwrap_or(0)),
        mib(first.rss_max),
        mib(intervals.iter().map(|i| i.snapshot_max).max().unwrap_or(0)),
        mib(first.snapshot_max),
        match (first.db_bytes, final_interval.db_bytes) {
            (Some(a), Some(b)) => format!("{:.1} -> {:.1}", mib(a), mib(b)),
            _ => "-".into(),
        }
    );
    Ok(())
}

/// Creates a sandbox, then deletes it by id, each with a fresh request id,
/// until `deadline`; with a `period`, one request per period at most. A
/// failed request is counted, then retried with the same request id
/// (exactly once) up to three times.
async fn client_loop(
    mut api: PalisadeClient<Channel>,
    client: usize,
    deadline: Instant,
    period: Option<Duration>,
    counters: Arc<Counters>,
) {
    // A late request does not make the next ones hurry: the rate is a
    // ceiling, not a debt.
    let mut pace = period.map(|period| {
        let mut pace = tokio::time::interval(period);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        pace
    });
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if let Some(pace) = &mut pace {
            pace.tick().await;
        }
        let create = v1::CreateSandboxRequest {
            name: format!("soak-{client}-{n}"),
            spec: Some(v1::SandboxSpec::default()),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        let mut created = None;
        for _ in 0..3 {
            match api.create_sandbox(create.clone()).await {
                Ok(answer) => {
                    counters.ok.fetch_add(1, Ordering::Relaxed);
                    created = answer.into_inner().metadata.map(|metadata| metadata.id);
                    break;
                }
                Err(status) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("create failed: {status}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        let Some(id) = created else { continue };
        if let Some(pace) = &mut pace {
            pace.tick().await;
        }
        let delete = v1::DeleteSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                id,
                ..Default::default()
            }),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        for _ in 0..3 {
            match api.delete_sandbox(delete.clone()).await {
                Ok(_) => {
                    counters.ok.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(status) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("delete failed: {status}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// What the replicas report, the largest figure of any.
#[derive(Debug, Default)]
struct Seen {
    state_bytes: u64,
    receipts: u64,
    term: u64,
}

/// The leader's tracked state size and receipt count, and the highest
/// term (the largest seen).
async fn state_of(channels: &[Channel]) -> Seen {
    let mut found = Seen::default();
    for channel in channels {
        let mut admin = ClusterAdminClient::new(channel.clone());
        if let Ok(info) = admin.get_cluster_info(v1::GetClusterInfoRequest {}).await {
            let info = info.into_inner();
            found.state_bytes = found.state_bytes.max(info.state_bytes);
            found.receipts = found.receipts.max(info.receipts);
            found.term = found.term.max(info.term);
        }
    }
    found
}

/// The host's (steal, total) CPU ticks so far, from /proc/stat.
fn host_times() -> (u64, u64) {
    let Some(ticks) = palisade_bench::machine_cpu_ticks() else {
        return (0, 0);
    };
    // The first eight fields; guest time is already counted in user and nice.
    let total = ticks.iter().take(8).sum();
    (ticks.get(7).copied().unwrap_or(0), total)
}

/// Steal time between two [`host_times`] readings, in percent.
fn host_steal_percent(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1);
    100.0 * after.0.saturating_sub(before.0) as f64 / total.max(1) as f64
}

/// Size of the snapshot file(s) under a replica's data directory.
fn snapshot_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            total += snapshot_bytes(&path);
        } else if path.file_name().is_some_and(|name| name == "snapshot") {
            total += entry.metadata().map_or(0, |meta| meta.len());
        }
    }
    total
}

/// (database size, shadow tables' size) through `psql`.
fn database_bytes(url: &str) -> Option<(u64, u64)> {
    let output = std::process::Command::new("psql")
        .args([
            url,
            "-At",
            "-c",
            "SELECT pg_database_size(current_database()), \
             (SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c \
              WHERE c.relkind = 'r' AND c.relname LIKE 'projection_shadow%')",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut parts = text.trim().split('|');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}
