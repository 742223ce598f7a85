//! `palisade-soak`: sustained create+delete with request ids against a
//! local three-replica cluster (noop driver), reported every interval:
//! throughput, failures, every replica's RSS and snapshot size, the
//! state's tracked size and receipts, the projection's lag (sampled every
//! second) and, with `--postgres-url`, the database's size and the shadow
//! tables' size.
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
    REPLICAS, RunFlags, connect, in_run_dir, palisade_binary, run_main, start_cluster, wait_ready,
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
    for client in 0..args.clients as usize {
        let api = PalisadeClient::new(channels[client % channels.len()].clone());
        let counters = counters.clone();
        clients.spawn(client_loop(api, client, deadline, counters));
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
    println!(
        "{:>6} {:>8} {:>6} {:>8} {:>10} {:>12} {:>12} {:>9} {:>12} {:>12}",
        "min",
        "ok",
        "failed",
        "req/s",
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
        let (state_bytes, receipts) = state_of(&channels).await;
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
            rss_max: rss.iter().copied().max().unwrap_or(0),
            snapshot_max: snapshots.iter().copied().max().unwrap_or(0),
            db_bytes: db.map(|(total, _)| total),
        };
        println!(
            "{:>6.1} {:>8} {:>6} {:>8.0} {:>10} {:>12.1} {:>12.1} {:>9} {:>12} {:>12}",
            now.duration_since(started).as_secs_f64() / 60.0,
            interval.ok,
            interval.failed,
            interval.ok as f64 / interval.seconds.max(1e-9),
            rss.iter()
                .map(|bytes| format!("{:.0}", mib(*bytes)))
                .collect::<Vec<_>>()
                .join("/"),
            mib(interval.snapshot_max),
            mib(state_bytes),
            receipts,
            lag_p99.map_or("-".into(), |lag| lag.to_string()),
            db.map_or("-".into(), |(total, shadow)| format!(
                "{:.1} (shadow {:.2})",
                mib(total),
                mib(shadow)
            )),
        );
        last = (ok, failed, now);
        intervals.push(interval);
    }
    while clients.join_next().await.is_some() {}
    sampler.abort();

    let first = intervals.first().context("no interval was measured")?;
    let final_interval = intervals.last().context("no interval was measured")?;
    let rate = |interval: &Interval| interval.ok as f64 / interval.seconds.max(1e-9);
    let failed: u64 = intervals.iter().map(|interval| interval.failed).sum();
    println!(
        "verdict: throughput last/first {:.0}/{:.0} req/s = {:.0}%; failed {failed}; RSS max {:.0} MiB (first interval {:.0}); snapshot max {:.1} MiB (first {:.1}); db {} MiB",
        rate(final_interval),
        rate(first),
        100.0 * rate(final_interval) / rate(first).max(1e-9),
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
/// until `deadline`. A failed request is counted, then retried with the
/// same request id (exactly once) up to three times.
async fn client_loop(
    mut api: PalisadeClient<Channel>,
    client: usize,
    deadline: Instant,
    counters: Arc<Counters>,
) {
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let create = v1::CreateSandboxRequest {
            name: format!("soak-{client}-{n}"),
            spec: Some(v1::SandboxSpec::default()),
            request_id: uuid::Uuid::new_v4().to_string(),
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
        let delete = v1::DeleteSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                id,
                ..Default::default()
            }),
            request_id: uuid::Uuid::new_v4().to_string(),
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

/// The leader's tracked state size and receipt count (the largest seen).
async fn state_of(channels: &[Channel]) -> (u64, u64) {
    let mut found = (0, 0);
    for channel in channels {
        let mut admin = ClusterAdminClient::new(channel.clone());
        if let Ok(info) = admin.get_cluster_info(v1::GetClusterInfoRequest {}).await {
            let info = info.into_inner();
            found = (found.0.max(info.state_bytes), found.1.max(info.receipts));
        }
    }
    found
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
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
