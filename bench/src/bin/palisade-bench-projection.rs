//! `palisade-bench-projection`: the PostgreSQL read projection of a real
//! three-replica cluster — how long after a write is acknowledged it is in
//! PostgreSQL, and what deleting a sandbox that owns 10,000 records costs
//! the writer and the readers. A benchmark, not a test: it prints a table
//! (and exits non-zero if a read or the cleanup's check failed).
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-bench-projection      # --help for the flags
//! ```
//!
//! It starts its own PostgreSQL (`initdb` + `pg_ctl` on a temporary
//! directory, every commit flushed, as `TestPostgres` does for the
//! projection's tests; or a fresh database on `DATABASE_URL`'s server) and
//! three replicas of the real `palisade` binary (`palisade gateway run
//! --driver noop --postgres-url URL`, through `palisade-testkit`) on free
//! loopback ports. The leader's projector writes PostgreSQL, as in
//! production. It sees the projection advance as the standing-by replicas
//! do: it LISTENs to the checkpoint notifications every batch transaction
//! sends when it commits (`palisade_projection::store::CHECKPOINT_CHANNEL`).
//!
//! 1. **Lag at a steady load.** For each rate of `--rates` (log entries per
//!    second: a lifecycle request is two entries, its begin and its
//!    completion), `--clients` clients spread over the three replicas cycle
//!    create (-> READY), stop, start, delete, paced together to half that
//!    many requests per second, for `--seconds` (the first second is not
//!    counted). A create, stop or start answers with the sandbox's
//!    `resource_version`, the log index of the entry that completed it;
//!    its lag is from the moment the answer arrived to the NOTIFY of a
//!    checkpoint at or past that index (0 if the projection had it before
//!    the answer arrived). The entries per second are what the checkpoint
//!    advanced by, so they count every entry the cluster committed.
//! 2. **A big cleanup.** `--cleanup-runs` times: a sandbox gets `--sessions`
//!    SSH sessions (10,000, the most a sandbox may own) and a policy; once
//!    the projection has them, readers start — `--readers` clients listing
//!    the workspace through the API from the projection
//!    (`ListSandboxes`, `source: PROJECTION`, over the replicas)
//!    linearizably (each waits until the projection reached its read
//!    index), `--readers` doing the same stale (no wait), and `--readers`
//!    connections querying PostgreSQL directly (the doomed
//!    sandbox's sessions, the workspace's sandboxes), each reading every
//!    `--read-interval-ms` — first for an idle
//!    second, then while the sandbox is deleted through the leader. It
//!    prints when the delete was acknowledged and when the projection had
//!    it (the checkpoint past the leader's commit index at the
//!    acknowledgement), checks that PostgreSQL then holds no row of the
//!    sandbox, and gives the readers' latency idle and during the delete
//!    (every read overlapping the delete, from its start to the projection
//!    having it).
//!
//! Replicas log at `warn` (or `PALISADE_BENCH_LOG`) into
//! `node-N/gateway.log` under the run directory (`--keep` keeps it). The
//! replicas and the PostgreSQL server are stopped on exit, also on failure.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use palisade_bench::{
    RunFlags, Table, connect, in_run_dir, millis, palisade_binary, percentile, run_main,
    start_cluster, wait_ready,
};
use palisade_projection::store::{CHECKPOINT_CHANNEL, checkpoint_notified};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::TestPostgres;
use palisade_testkit::test_postgres::Durability;
use sqlx::postgres::{PgConnection, PgListener};
use sqlx::{Connection, Row as _};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Benchmark the PostgreSQL projection of a three-replica cluster.
#[derive(Debug, Parser)]
#[command(name = "palisade-bench-projection", long_about = None)]
struct Args {
    /// Steady loads to measure the lag at, in log entries per second
    /// (comma-separated; each request is two entries).
    #[arg(long, value_delimiter = ',', default_value = "500,2000,5000",
          value_parser = clap::value_parser!(u32).range(2..=100_000))]
    rates: Vec<u32>,
    /// Length of each steady load (the first second is not counted).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=3600))]
    seconds: u64,
    /// Writing clients during the steady loads, spread over the replicas.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096))]
    clients: u32,
    /// SSH sessions the deleted sandbox owns (at most a sandbox's limit).
    #[arg(long, default_value_t = SESSIONS_MAX as u32,
          value_parser = clap::value_parser!(u32).range(0..=SESSIONS_MAX as i64))]
    sessions: u32,
    /// How many such sandboxes are deleted (0 skips the cleanup part).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    cleanup_runs: u32,
    /// Readers of each kind during the cleanup: linearizable API, stale
    /// API (both over the replicas), PostgreSQL.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    readers: u32,
    /// Each reader reads once every this many milliseconds (later when a
    /// read takes longer): readers, not a load generator that would take
    /// the machine's CPU from what it measures.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    read_interval_ms: u64,
    #[command(flatten)]
    run: RunFlags,
}

const SESSIONS_MAX: usize = palisade_lifecycle::limits::SESSIONS_PER_SANDBOX_MAX;
/// Log entries of one lifecycle request (its begin and its completion).
const ENTRIES_PER_REQUEST: f64 = 2.0;
/// Not counted at the start of each steady load.
const WARM_UP: Duration = Duration::from_secs(1);
/// At most this much of the pace's requests wait when the clients are all
/// busy (the cluster is saturated): then the achieved rate is lower.
const PACE_BURST: Duration = Duration::from_millis(10);
/// How long the projection may take to reach an index before the run fails.
const PROJECTION_WAIT: Duration = Duration::from_secs(60);
/// SSH-session creations in flight at once while a sandbox is filled.
const SESSIONS_IN_FLIGHT: usize = 64;
/// Reading before the delete (the idle window) and after it was projected.
const IDLE_WINDOW: Duration = Duration::from_secs(1);
const AFTER_DELETE: Duration = Duration::from_millis(200);
/// Calls of every reader: a page, as a listing would ask.
const PAGE_SIZE: u32 = 100;
const WORKSPACE: &str = "default";

fn main() {
    run_main(run(Args::parse()));
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = palisade_binary(args.run.palisade.as_deref())?;
    in_run_dir("palisade-bench-projection", args.run.keep, |root| {
        bench(&args, &palisade, root)
    })
    .await
}

async fn bench(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    let postgres = TestPostgres::start_with(Durability::Durable)
        .await
        .context("cannot start PostgreSQL")?;
    let url = postgres.url().to_string();
    let mut admin = PgConnection::connect(&url)
        .await
        .context("cannot connect to PostgreSQL")?;
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut admin)
        .await?;
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&mut admin)
        .await?;

    let mut gateway_args = vec![
        "--driver".to_string(),
        "noop".to_string(),
        "--postgres-url".to_string(),
        url.clone(),
    ];
    gateway_args.extend(args.run.replica_args.iter().cloned());
    let cluster = start_cluster(palisade, &root, gateway_args)?;
    let leader = wait_ready(&cluster).await?;
    let uris = cluster.all_uris();
    let leader_uri = cluster.uris(&[leader]).pop().context("no leader uri")?;
    let node_ids: Vec<u64> = cluster
        .replicas
        .iter()
        .map(|replica| replica.node_id)
        .collect();
    println!(
        "palisade-bench-projection: 3 replicas (noop driver, fsync'd Raft log) on loopback, leader node {leader}; \
         PostgreSQL {version} (fsync {fsync}) on 127.0.0.1, written by the leader's projector; data in {}",
        root.display()
    );

    let checkpoints = Checkpoints::listen(&url, &mut admin).await?;
    let leader_channel = connect(&leader_uri).await?;
    let mut leader_api = PalisadeClient::new(leader_channel.clone());
    let mut leader_admin = ClusterAdminClient::new(leader_channel);
    let committed = commit_index(&mut leader_admin).await?;
    checkpoints.wait_for(committed).await?;

    let mut channels = Vec::new();
    for uri in &uris {
        channels.push(connect(uri).await?);
    }
    let mut rows = Vec::new();
    for &rate in &args.rates {
        let row = steady_load(args, rate, &channels, &node_ids, leader, &checkpoints).await?;
        eprintln!(
            "steady load at {rate} entries/s: {:.0} entries/s projected, lag p99 {:.1} ms",
            row.entries_per_second,
            millis(percentile(&row.lags, 0.99))
        );
        rows.push(row);
    }
    print_lag_table(&rows, args);

    let mut runs = Vec::new();
    if args.cleanup_runs > 0 {
        for run in 0..args.cleanup_runs {
            let outcome = cleanup(
                args,
                run,
                &url,
                &channels,
                &mut leader_api,
                &mut leader_admin,
                &checkpoints,
            )
            .await?;
            eprintln!(
                "cleanup {}: delete of {} sessions acknowledged in {:.1} ms, projected after {:.1} ms",
                run + 1,
                args.sessions,
                millis(outcome.acknowledged),
                millis(outcome.projected)
            );
            runs.push(outcome);
        }
    }
    let cleanup_report = (!runs.is_empty()).then(|| print_cleanup(&runs, args));
    print_targets(&rows, &runs, args.sessions);
    if let Some(report) = cleanup_report {
        report?;
    }
    drop(cluster);
    drop(postgres);
    Ok(())
}

/// The projection's checkpoint as its notifications announce it: every
/// (arrival, index) in order, and the latest index.
struct Checkpoints {
    seen: Arc<Mutex<Vec<(Instant, u64)>>>,
    latest: watch::Receiver<u64>,
    _task: tokio::task::JoinHandle<()>,
}

impl Checkpoints {
    /// Starts listening, once the projector created its tables.
    async fn listen(url: &str, admin: &mut PgConnection) -> anyhow::Result<Checkpoints> {
        let created = Instant::now();
        loop {
            let table: Option<String> =
                sqlx::query_scalar("SELECT to_regclass('projection_checkpoint')::text")
                    .fetch_one(&mut *admin)
                    .await?;
            if table.is_some() {
                break;
            }
            if created.elapsed() > PROJECTION_WAIT {
                bail!("the projector did not create its tables in {PROJECTION_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHECKPOINT_CHANNEL).await?;
        let current: i64 = sqlx::query_scalar("SELECT applied_index FROM projection_checkpoint")
            .fetch_one(&mut *admin)
            .await?;
        let current = u64::try_from(current).context("a negative checkpoint")?;
        let seen = Arc::new(Mutex::new(vec![(Instant::now(), current)]));
        let (announce, latest) = watch::channel(current);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                while let Ok(notification) = listener.recv().await {
                    let arrived = Instant::now();
                    let Some(index) =
                        checkpoint_notified(notification.payload()).map(|position| position.index)
                    else {
                        continue;
                    };
                    seen.lock().expect("checkpoints").push((arrived, index));
                    announce.send_if_modified(|latest| {
                        let newer = index > *latest;
                        *latest = (*latest).max(index);
                        newer
                    });
                }
            }
        });
        Ok(Checkpoints {
            seen,
            latest,
            _task: task,
        })
    }

    /// Waits until the checkpoint reached `index`.
    async fn wait_for(&self, index: u64) -> anyhow::Result<()> {
        let mut latest = self.latest.clone();
        tokio::time::timeout(PROJECTION_WAIT, latest.wait_for(|at| *at >= index))
            .await
            .with_context(|| {
                format!("the projection did not reach index {index} in {PROJECTION_WAIT:?}")
            })?
            .context("stopped listening")?;
        Ok(())
    }

    /// When the checkpoint first reached `index` (None: not yet).
    fn reached(&self, index: u64) -> Option<Instant> {
        let seen = self.seen.lock().expect("checkpoints");
        let at = seen.partition_point(|(_, seen)| *seen < index);
        seen.get(at).map(|(arrived, _)| *arrived)
    }

    /// The checkpoint's notifications that arrived in `from..to`: how many,
    /// and the index at each end.
    fn between(&self, from: Instant, to: Instant) -> (usize, u64, u64) {
        let seen = self.seen.lock().expect("checkpoints");
        let before = seen.iter().take_while(|(arrived, _)| *arrived < from);
        let first = before.last().map_or(0, |(_, index)| *index);
        let within: Vec<u64> = seen
            .iter()
            .filter(|(arrived, _)| *arrived >= from && *arrived < to)
            .map(|(_, index)| *index)
            .collect();
        let last = within.last().copied().unwrap_or(first);
        (within.len(), first, last)
    }
}

type Admin = ClusterAdminClient<Channel>;

async fn commit_index(api: &mut Admin) -> anyhow::Result<u64> {
    Ok(api
        .get_cluster_info(v1::GetClusterInfoRequest::default())
        .await
        .context("GetClusterInfo on the leader")?
        .into_inner()
        .commit_index)
}

/// One steady load's figures.
struct LagRow {
    target: u32,
    entries_per_second: f64,
    batches: usize,
    ok: usize,
    errors: usize,
    first_error: Option<String>,
    requests: Vec<Duration>,
    /// From each answer (with an index) to the projection having it.
    lags: Vec<Duration>,
    /// The same, for answers from the leader (the closest to its commit).
    leader_lags: Vec<Duration>,
}

/// One request's outcome.
struct Answered {
    answered: Instant,
    latency: Duration,
    /// The index the answer names (create, stop, start), if any.
    index: Option<u64>,
    error: Option<String>,
}

async fn steady_load(
    args: &Args,
    rate: u32,
    channels: &[Channel],
    node_ids: &[u64],
    leader: u64,
    checkpoints: &Checkpoints,
) -> anyhow::Result<LagRow> {
    let permits = Arc::new(Semaphore::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let requests_per_second = f64::from(rate) / ENTRIES_PER_REQUEST;
    let pacer = tokio::spawn(pace(permits.clone(), requests_per_second, stop.clone()));
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for client in 0..args.clients as usize {
        let replica = client % channels.len();
        let api = PalisadeClient::new(channels[replica].clone());
        let by_leader = node_ids[replica] == leader;
        let name = format!("lag-{rate}-{client}");
        let work = cycle(api, name, permits.clone(), stop.clone());
        clients.spawn(async move { (by_leader, work.await) });
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::SeqCst);
    let ended = Instant::now();
    pacer.abort();
    permits.add_permits(Semaphore::MAX_PERMITS / 2);
    let mut outcomes = Vec::new();
    while let Some(joined) = clients.join_next().await {
        outcomes.push(joined?);
    }
    let counted_from = started + WARM_UP;
    let last_index = outcomes
        .iter()
        .flat_map(|(_, answers)| answers.iter().filter_map(|answer| answer.index))
        .max()
        .unwrap_or(0);
    checkpoints.wait_for(last_index).await?;

    let (batches, first, last) = checkpoints.between(counted_from, ended);
    let mut row = LagRow {
        target: rate,
        entries_per_second: (last - first) as f64 / (ended - counted_from).as_secs_f64(),
        batches,
        ok: 0,
        errors: 0,
        first_error: None,
        requests: Vec::new(),
        lags: Vec::new(),
        leader_lags: Vec::new(),
    };
    for (by_leader, answers) in outcomes {
        for answer in answers {
            // Not the warm-up, nor the burst of deletes that ends the load.
            if answer.answered < counted_from || answer.answered > ended {
                continue;
            }
            if let Some(error) = answer.error {
                row.errors += 1;
                row.first_error.get_or_insert(error);
                continue;
            }
            row.ok += 1;
            row.requests.push(answer.latency);
            if let Some(index) = answer.index {
                let reached = checkpoints
                    .reached(index)
                    .with_context(|| format!("index {index} was never projected"))?;
                let lag = reached.saturating_duration_since(answer.answered);
                row.lags.push(lag);
                if by_leader {
                    row.leader_lags.push(lag);
                }
            }
        }
    }
    row.requests.sort_unstable();
    row.lags.sort_unstable();
    row.leader_lags.sort_unstable();
    Ok(row)
}

/// Releases `per_second` permits a second into `permits` (at most
/// [`PACE_BURST`]'s worth waiting) until `stop`.
async fn pace(permits: Arc<Semaphore>, per_second: f64, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    let burst = ((per_second * PACE_BURST.as_secs_f64()).ceil() as usize).max(1);
    let mut released: u64 = 0;
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        let due = (started.elapsed().as_secs_f64() * per_second) as u64;
        if due > released {
            let room = burst.saturating_sub(permits.available_permits());
            permits.add_permits(((due - released) as usize).min(room));
            released = due;
        }
    }
}

/// One client: create (-> READY), stop, start, delete, over and over, one
/// paced request at a time, until `stop`.
async fn cycle(
    mut api: PalisadeClient<Channel>,
    name: String,
    permits: Arc<Semaphore>,
    stop: Arc<AtomicBool>,
) -> Vec<Answered> {
    let mut answers = Vec::new();
    let mut round = 0u64;
    let paced = |permits: Arc<Semaphore>| async move {
        if let Ok(permit) = permits.acquire().await {
            permit.forget();
        }
    };
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        paced(permits.clone()).await;
        let sent = Instant::now();
        let created = api
            .create_sandbox(v1::CreateSandboxRequest {
                name: format!("{name}-{round}"),
                spec: Some(v1::SandboxSpec::default()),
                request_id: palisade_proto::new_request_id(),
                ..Default::default()
            })
            .await;
        let id = created
            .as_ref()
            .ok()
            .and_then(|sandbox| sandbox.get_ref().metadata.as_ref())
            .map(|meta| meta.id.clone());
        answers.push(answered(sent, created.map(|answer| answer.into_inner())));
        let Some(id) = id else { continue };
        let sandbox = || {
            Some(v1::SandboxRef {
                id: id.clone(),
                ..Default::default()
            })
        };
        if !stop.load(Ordering::SeqCst) {
            paced(permits.clone()).await;
            let sent = Instant::now();
            let stopped = api
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: sandbox(),
                    request_id: palisade_proto::new_request_id(),
                    ..Default::default()
                })
                .await;
            let stopped_ok = stopped.is_ok();
            answers.push(answered(sent, stopped.map(|answer| answer.into_inner())));
            if stopped_ok && !stop.load(Ordering::SeqCst) {
                paced(permits.clone()).await;
                let sent = Instant::now();
                let started = api
                    .start_sandbox(v1::StartSandboxRequest {
                        sandbox: sandbox(),
                        request_id: palisade_proto::new_request_id(),
                        ..Default::default()
                    })
                    .await;
                answers.push(answered(sent, started.map(|answer| answer.into_inner())));
            }
        }
        // The delete runs even after `stop`, so no sandbox is left behind.
        paced(permits.clone()).await;
        let sent = Instant::now();
        let deleted = api
            .delete_sandbox(v1::DeleteSandboxRequest {
                sandbox: sandbox(),
                request_id: palisade_proto::new_request_id(),
                ..Default::default()
            })
            .await;
        answers.push(Answered {
            answered: Instant::now(),
            latency: sent.elapsed(),
            index: None,
            error: deleted.err().map(|status| describe(&status)),
        });
    }
    answers
}

fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

fn answered(sent: Instant, answer: Result<v1::Sandbox, tonic::Status>) -> Answered {
    let answered = Instant::now();
    let (index, error) = match answer {
        Ok(sandbox) => (sandbox.metadata.map(|meta| meta.resource_version), None),
        Err(status) => (None, Some(describe(&status))),
    };
    Answered {
        answered,
        latency: answered - sent,
        index,
        error,
    }
}

fn print_lag_table(rows: &[LagRow], args: &Args) {
    println!(
        "\nProjection lag at a steady load: {} clients over 3 replicas cycling create/stop/start/delete, paced; \
         lag = the answer (naming its log index) -> the projection's checkpoint at or past that index; {} s each, the first not counted",
        args.clients, args.seconds
    );
    let mut table = Table::new(
        &[
            "target entries/s",
            "entries/s",
            "requests",
            "errors",
            "request p50 ms",
            "request p99 ms",
            "batches",
            "entries/batch",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "leader-answered lag p99 ms",
        ],
        0,
    );
    for row in rows {
        table.row(vec![
            row.target.to_string(),
            format!("{:.0}", row.entries_per_second),
            row.ok.to_string(),
            row.errors.to_string(),
            format!("{:.1}", millis(percentile(&row.requests, 0.50))),
            format!("{:.1}", millis(percentile(&row.requests, 0.99))),
            row.batches.to_string(),
            format!(
                "{:.1}",
                row.entries_per_second * (args.seconds as f64 - WARM_UP.as_secs_f64())
                    / row.batches.max(1) as f64
            ),
            format!("{:.1}", millis(percentile(&row.lags, 0.50))),
            format!("{:.1}", millis(percentile(&row.lags, 0.99))),
            format!(
                "{:.1}",
                millis(row.lags.last().copied().unwrap_or_default())
            ),
            format!("{:.1}", millis(percentile(&row.leader_lags, 0.99))),
        ]);
    }
    print!("{table}");
    for row in rows {
        if let Some(error) = &row.first_error {
            println!(
                "at {} entries/s {} requests failed, the first: {error}",
                row.target, row.errors
            );
        }
    }
}

/// One cleanup run's figures.
struct CleanupRun {
    acknowledged: Duration,
    /// From sending the delete to the projection having it.
    projected: Duration,
    filled: Duration,
    reads: Vec<Read>,
    idle: (Instant, Instant),
    during: (Instant, Instant),
}

impl CleanupRun {
    /// The idle window of a run.
    const IDLE: fn(&CleanupRun) -> (Instant, Instant) = |run| run.idle;
    /// The window during its delete.
    const DURING: fn(&CleanupRun) -> (Instant, Instant) = |run| run.during;
}

/// The sorted latencies of `reader`'s reads that overlap each run's
/// `window`, and the errors among them.
fn reads_in(
    runs: &[CleanupRun],
    reader: Reader,
    window: fn(&CleanupRun) -> (Instant, Instant),
) -> (Vec<Duration>, Vec<String>) {
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for run in runs {
        let (from, to) = window(run);
        for read in run
            .reads
            .iter()
            .filter(|read| read.reader == reader && read.started <= to && read.ended >= from)
        {
            latencies.push(read.ended - read.started);
            errors.extend(read.error.clone());
        }
    }
    latencies.sort_unstable();
    (latencies, errors)
}

/// What a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reader {
    /// `ListSandboxes` from the projection through a replica, linearizable:
    /// it waits until the projection reached the read index, so a read
    /// that starts after the delete was committed waits for its batch.
    ApiLinearizable,
    /// The same, stale: no wait, what the projection holds.
    ApiStale,
    /// A query on PostgreSQL.
    Sql,
}

impl Reader {
    const ALL: [Reader; 3] = [Reader::ApiLinearizable, Reader::ApiStale, Reader::Sql];

    fn label(self) -> &'static str {
        match self {
            Reader::ApiLinearizable => "API, linearizable (ListSandboxes from the projection)",
            Reader::ApiStale => "API, stale (ListSandboxes from the projection)",
            Reader::Sql => "PostgreSQL (SELECT)",
        }
    }
}

struct Read {
    reader: Reader,
    started: Instant,
    ended: Instant,
    error: Option<String>,
}

async fn cleanup(
    args: &Args,
    run: u32,
    url: &str,
    channels: &[Channel],
    leader_api: &mut PalisadeClient<Channel>,
    leader_admin: &mut Admin,
    checkpoints: &Checkpoints,
) -> anyhow::Result<CleanupRun> {
    let name = format!("owner-{run}");
    let sandbox = leader_api
        .create_sandbox(v1::CreateSandboxRequest {
            name: name.clone(),
            spec: Some(v1::SandboxSpec::default()),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("create {name}"))?
        .into_inner();
    let id = sandbox.metadata.unwrap_or_default().id;
    let by_id = || {
        Some(v1::SandboxRef {
            id: id.clone(),
            ..Default::default()
        })
    };
    let filling = Instant::now();
    let permits = Arc::new(Semaphore::new(SESSIONS_IN_FLIGHT));
    let mut sessions = JoinSet::new();
    for session in 0..args.sessions as usize {
        let permit = permits.clone().acquire_owned().await?;
        let mut api = PalisadeClient::new(channels[session % channels.len()].clone());
        let sandbox = by_id();
        sessions.spawn(async move {
            let _permit = permit;
            api.create_ssh_session(v1::CreateSshSessionRequest {
                sandbox,
                ttl_seconds: 3600,
            })
            .await
        });
    }
    while let Some(joined) = sessions.join_next().await {
        joined?.context("create an SSH session")?;
    }
    leader_api
        .set_sandbox_policy(v1::SetSandboxPolicyRequest {
            sandbox: by_id(),
            document: "{\"egress\": \"deny\"}".into(),
            expected_version: None,
        })
        .await
        .context("set the policy")?;
    let filled = filling.elapsed();
    checkpoints
        .wait_for(commit_index(leader_admin).await?)
        .await?;

    let stop = Arc::new(AtomicBool::new(false));
    let read_interval = Duration::from_millis(args.read_interval_ms);
    let mut readers = JoinSet::new();
    for reader in 0..args.readers as usize {
        for (offset, kind) in [(0, Reader::ApiLinearizable), (1, Reader::ApiStale)] {
            let api = PalisadeClient::new(channels[(reader + offset) % channels.len()].clone());
            readers.spawn(api_reader(api, kind, read_interval, stop.clone()));
        }
        let connection = PgConnection::connect(url).await?;
        readers.spawn(sql_reader(
            connection,
            id.clone(),
            read_interval,
            stop.clone(),
        ));
    }
    let idle_start = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle_end = Instant::now();

    let sent = Instant::now();
    let deleted = leader_api
        .delete_sandbox(v1::DeleteSandboxRequest {
            sandbox: by_id(),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("delete {name}"))?
        .into_inner();
    let acknowledged = sent.elapsed();
    if !deleted.deleted {
        bail!("the delete of {name} answered before it was done: {deleted:?}");
    }
    let index = commit_index(leader_admin).await?;
    checkpoints.wait_for(index).await?;
    let projected_at = checkpoints.reached(index).context("the delete's index")?;
    tokio::time::sleep(AFTER_DELETE).await;
    stop.store(true, Ordering::SeqCst);
    let mut reads = Vec::new();
    while let Some(joined) = readers.join_next().await {
        reads.extend(joined?);
    }

    let mut check = PgConnection::connect(url).await?;
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM sandboxes WHERE id = $1) \
              + (SELECT count(*) FROM ssh_sessions WHERE sandbox_id = $1) \
              + (SELECT count(*) FROM policies WHERE sandbox_id = $1) \
              + (SELECT count(*) FROM executions WHERE sandbox_id = $1)",
    )
    .bind(&id)
    .fetch_one(&mut check)
    .await?;
    if left != 0 {
        bail!("the projection still holds {left} rows of the deleted sandbox {id}");
    }
    Ok(CleanupRun {
        acknowledged,
        projected: projected_at.saturating_duration_since(sent),
        filled,
        reads,
        idle: (idle_start, idle_end),
        during: (sent, projected_at.max(sent + acknowledged)),
    })
}

/// A reader's pace: one read every `interval` (later if a read takes
/// longer).
fn read_ticks(interval: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

async fn api_reader(
    mut api: PalisadeClient<Channel>,
    reader: Reader,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<Read> {
    let consistency = match reader {
        Reader::ApiStale => v1::Consistency::Stale,
        _ => v1::Consistency::Linearizable,
    } as i32;
    let mut reads = Vec::new();
    let mut ticks = read_ticks(interval);
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        let started = Instant::now();
        let answer = api
            .list_sandboxes(v1::ListSandboxesRequest {
                workspace: WORKSPACE.into(),
                page_size: PAGE_SIZE,
                source: v1::ListSource::Projection as i32,
                consistency,
                ..Default::default()
            })
            .await;
        reads.push(Read {
            reader,
            started,
            ended: Instant::now(),
            error: answer.err().map(|status| describe(&status)),
        });
    }
    reads
}

/// Alternates the doomed sandbox's sessions and the workspace's sandboxes.
async fn sql_reader(
    mut connection: PgConnection,
    doomed: String,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<Read> {
    let mut reads = Vec::new();
    let mut turn = 0u64;
    let mut ticks = read_ticks(interval);
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        turn += 1;
        let started = Instant::now();
        let answer = if turn.is_multiple_of(2) {
            sqlx::query("SELECT id, expires_at_ms FROM ssh_sessions WHERE sandbox_id = $1 ORDER BY id LIMIT $2")
                .bind(&doomed)
                .bind(i64::from(PAGE_SIZE))
                .fetch_all(&mut connection)
                .await
        } else {
            sqlx::query(
                "SELECT id, name, phase FROM sandboxes WHERE workspace = $1 ORDER BY name LIMIT $2",
            )
            .bind(WORKSPACE)
            .bind(i64::from(PAGE_SIZE))
            .fetch_all(&mut connection)
            .await
        };
        reads.push(Read {
            reader: Reader::Sql,
            started,
            ended: Instant::now(),
            error: answer
                .and_then(|rows| {
                    rows.first()
                        .map(|row| row.try_get::<String, _>(0))
                        .transpose()
                })
                .err()
                .map(|error| error.to_string()),
        });
    }
    reads
}

fn print_cleanup(runs: &[CleanupRun], args: &Args) -> anyhow::Result<()> {
    let mut acknowledged: Vec<Duration> = runs.iter().map(|run| run.acknowledged).collect();
    let mut projected: Vec<Duration> = runs.iter().map(|run| run.projected).collect();
    acknowledged.sort_unstable();
    projected.sort_unstable();
    println!(
        "\nDeleting a sandbox that owns {} SSH sessions + a policy + an execution, through the leader ({} runs; filled in {})",
        args.sessions,
        runs.len(),
        runs.iter()
            .map(|run| format!("{:.1} s", run.filled.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let list = |values: &[Duration]| {
        values
            .iter()
            .map(|value| format!("{:.1}", millis(*value)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "  delete acknowledged, ms: {} (median {:.1})",
        list(&acknowledged),
        millis(percentile(&acknowledged, 0.5))
    );
    println!(
        "  delete sent -> in the projection, ms: {} (median {:.1})",
        list(&projected),
        millis(percentile(&projected, 0.5))
    );
    println!(
        "\nReaders during the cleanup ({0} linearizable and {0} stale API readers listing from the projection over the replicas, {0} PostgreSQL connections querying the sessions and the sandboxes, each reading every {1} ms); \
         idle = the second before each delete, during = reads overlapping a delete from its start to the projection having it",
        args.readers, args.read_interval_ms
    );
    let mut table = Table::new(
        &[
            "reader", "window", "calls", "errors", "p50 ms", "p99 ms", "max ms",
        ],
        2,
    );
    let mut failures = Vec::new();
    for reader in Reader::ALL {
        for (window, of_run) in [
            ("idle", CleanupRun::IDLE),
            ("during delete", CleanupRun::DURING),
        ] {
            let (latencies, errors) = reads_in(runs, reader, of_run);
            table.row(vec![
                reader.label().to_string(),
                window.to_string(),
                latencies.len().to_string(),
                errors.len().to_string(),
                format!("{:.2}", millis(percentile(&latencies, 0.50))),
                format!("{:.2}", millis(percentile(&latencies, 0.99))),
                format!(
                    "{:.2}",
                    millis(latencies.last().copied().unwrap_or_default())
                ),
            ]);
            failures.extend(errors);
        }
    }
    print!("{table}");
    if let Some(first) = failures.first() {
        bail!("{} reads failed, the first: {first}", failures.len());
    }
    Ok(())
}

fn print_targets(rows: &[LagRow], runs: &[CleanupRun], sessions: u32) {
    let verdict = |met: bool| if met { "met" } else { "not met" };
    println!("\ntargets (issue 18):");
    for row in rows.iter().filter(|row| row.target >= 5000) {
        let p99 = millis(percentile(&row.lags, 0.99));
        let reached = row.entries_per_second >= 0.95 * f64::from(row.target);
        println!(
            "- lag p99 < 5 ms at 5,000 commands/s: {p99:.1} ms at {:.0} entries/s ({}{})",
            row.entries_per_second,
            verdict(p99 < 5.0 && reached),
            if reached {
                ""
            } else {
                "; the cluster did not reach the rate"
            }
        );
    }
    if runs.is_empty() {
        return;
    }
    let worst = |of: fn(&CleanupRun) -> Duration| runs.iter().map(of).max().unwrap_or_default();
    let acknowledged = millis(worst(|run| run.acknowledged));
    let projected = millis(worst(|run| run.projected));
    println!(
        "- a sandbox owning 10,000 records deleted and acknowledged < 50 ms ({sessions} sessions here{}): slowest acknowledgement {acknowledged:.1} ms ({}), in the projection after {projected:.1} ms ({})",
        if (sessions as usize) < SESSIONS_MAX {
            ", fewer than the target's"
        } else {
            ""
        },
        verdict(acknowledged < 50.0),
        verdict(projected < 50.0)
    );
    for reader in Reader::ALL {
        let (latencies, _) = reads_in(runs, reader, CleanupRun::DURING);
        let p99 = millis(percentile(&latencies, 0.99));
        println!(
            "- readers p99 < 10 ms during the delete, {}: {p99:.2} ms over {} reads ({})",
            reader.label(),
            latencies.len(),
            verdict(p99 < 10.0 && !latencies.is_empty())
        );
    }
}
