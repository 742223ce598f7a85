//! `palisade-bench-cleanup`: do reads suffer while a sandbox with thousands
//! of owned records is deleted? A benchmark, not a test: it prints a table
//! (and exits non-zero if any read failed).
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-bench-cleanup         # --help for the flags
//! ```
//!
//! It starts three replicas of the real `palisade` binary (`palisade
//! gateway run`, through `palisade-testkit`; the `palisade` next to this
//! binary, or `--palisade PATH`) with the process driver on free loopback
//! ports, data in a temporary directory (`--keep` keeps it; replicas log at
//! `warn`, or `PALISADE_BENCH_LOG`, into `node-N/gateway.log`). The replicas
//! and every sandbox process they started are killed on exit, also on
//! failure. Then, for each round:
//!
//! 1. creates a sandbox and opens `--sessions` SSH sessions on it (5,000 by
//!    default) and sets its policy;
//! 2. runs readers — `--readers-per-replica` clients on every replica, each
//!    cycling through GetSandbox and ListSandboxes, linearizable and stale —
//!    for `--baseline-seconds` with nothing else going on ("idle");
//! 3. runs the same readers while the sandbox is deleted: every read that
//!    overlaps the DeleteSandbox call, from its start to its answer, counts
//!    as "during delete". (The answer comes once the driver confirmed the
//!    execution gone and one log entry removed the sandbox with all its
//!    sessions.)
//!
//! The readers read a bystander sandbox (Get) and the workspace (List), so
//! every read has one right answer at any time: any error is a failure.
//! The table gives calls, errors and p50/p99/max latency per phase and
//! read; latencies depend on the machine, so compare the two phases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use palisade_bench::{
    REPLICAS, Table, connect, in_run_dir, millis, palisade_binary, percentile, run_main,
    start_cluster, wait_ready,
};
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Benchmark reads during the cleanup of a sandbox's owned records.
#[derive(Debug, Parser)]
#[command(name = "palisade-bench-cleanup", long_about = None)]
struct Args {
    /// SSH sessions opened on each deleted sandbox.
    #[arg(long, default_value_t = 5000)]
    sessions: usize,
    /// Sandboxes deleted (one per round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Reading clients per replica.
    #[arg(long, default_value_t = 4)]
    readers_per_replica: usize,
    /// Length of the idle (no deletion) reading window of each round.
    #[arg(long, default_value_t = 3)]
    baseline_seconds: u64,
    /// The `palisade` binary the replicas run (default: the one next to
    /// this binary).
    #[arg(long)]
    palisade: Option<PathBuf>,
    /// Keep the temporary directory (replica logs) after the run.
    #[arg(long)]
    keep: bool,
}

/// SSH-session creations in flight at once.
const SESSIONS_IN_FLIGHT: usize = 64;
/// Reading before the delete starts and after it answers (not counted).
const DELETE_MARGIN: Duration = Duration::from_millis(300);
/// What the sandboxes run.
const SANDBOX_COMMAND: [&str; 2] = ["sleep", "86400"];

fn main() {
    run_main(run(Args::parse()));
}

/// What a reader does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Read {
    GetLinearizable,
    ListLinearizable,
    GetStale,
    ListStale,
}

impl Read {
    const ALL: [Read; 4] = [
        Read::GetLinearizable,
        Read::ListLinearizable,
        Read::GetStale,
        Read::ListStale,
    ];

    fn label(self) -> &'static str {
        match self {
            Read::GetLinearizable => "Get (linearizable)",
            Read::ListLinearizable => "List (linearizable)",
            Read::GetStale => "Get (stale)",
            Read::ListStale => "List (stale)",
        }
    }
}

/// One read.
struct Sample {
    replica: usize,
    read: Read,
    started: Instant,
    ended: Instant,
    error: Option<String>,
}

async fn reader(
    replica: usize,
    first: usize,
    mut api: PalisadeClient<Channel>,
    active: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = first;
    while !stop.load(Ordering::SeqCst) {
        if !active.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let read = Read::ALL[next % Read::ALL.len()];
        next += 1;
        let consistency = match read {
            Read::GetStale | Read::ListStale => v1::Consistency::Stale,
            Read::GetLinearizable | Read::ListLinearizable => v1::Consistency::Linearizable,
        } as i32;
        let started = Instant::now();
        let error = match read {
            Read::GetLinearizable | Read::GetStale => api
                .get_sandbox(v1::GetSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        workspace: "bench".into(),
                        name: "bystander".into(),
                        id: String::new(),
                    }),
                    consistency,
                })
                .await
                .err(),
            Read::ListLinearizable | Read::ListStale => api
                .list_sandboxes(v1::ListSandboxesRequest {
                    workspace: "bench".into(),
                    page_size: 100,
                    consistency,
                    ..Default::default()
                })
                .await
                .err(),
        };
        samples.push(Sample {
            replica,
            read,
            started,
            ended: Instant::now(),
            error: error.map(|status| format!("{:?}: {}", status.code(), status.message())),
        });
    }
    samples
}

fn sandbox_request(name: &str) -> v1::CreateSandboxRequest {
    v1::CreateSandboxRequest {
        workspace: "bench".into(),
        name: name.into(),
        spec: Some(v1::SandboxSpec {
            command: SANDBOX_COMMAND.iter().map(|arg| arg.to_string()).collect(),
            ..Default::default()
        }),
        request_id: palisade_proto::new_request_id(),
        ..Default::default()
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = palisade_binary(args.palisade.as_deref())?;
    in_run_dir("palisade-bench-cleanup", args.keep, |root| {
        bench(&args, &palisade, root)
    })
    .await
}

async fn bench(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    let gateway_args = vec!["--stop-grace-seconds".to_string(), "2".to_string()];
    let cluster = start_cluster(palisade, &root, gateway_args)?;
    wait_ready(&cluster).await?;
    let uris = cluster.all_uris();
    let mut channels = Vec::new();
    for uri in &uris {
        channels.push(connect(uri).await?);
    }
    let mut api = PalisadeClient::new(channels[0].clone());
    api.create_workspace(v1::CreateWorkspaceRequest {
        name: "bench".into(),
    })
    .await
    .context("create the workspace")?;
    api.create_sandbox(sandbox_request("bystander"))
        .await
        .context("create the bystander sandbox")?;

    // The readers: their own connection each, idle until `active`.
    let active = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = JoinSet::new();
    for (replica, uri) in uris.iter().enumerate() {
        for index in 0..args.readers_per_replica {
            let api = PalisadeClient::new(connect(uri).await?);
            readers.spawn(reader(replica, index, api, active.clone(), stop.clone()));
        }
    }

    let mut idle_windows = Vec::new();
    let mut delete_windows = Vec::new();
    for round in 0..args.rounds {
        let name = format!("doomed-{round}");
        let sandbox = api
            .create_sandbox(sandbox_request(&name))
            .await
            .with_context(|| format!("create {name}"))?
            .into_inner();
        let id = sandbox.metadata.unwrap_or_default().id;
        let opened = Instant::now();
        let mut sessions = JoinSet::new();
        let permits = Arc::new(tokio::sync::Semaphore::new(SESSIONS_IN_FLIGHT));
        for session in 0..args.sessions {
            let permit = permits.clone().acquire_owned().await?;
            let mut api = PalisadeClient::new(channels[session % channels.len()].clone());
            let id = id.clone();
            sessions.spawn(async move {
                let _permit = permit;
                api.create_ssh_session(v1::CreateSshSessionRequest {
                    sandbox: Some(v1::SandboxRef {
                        id,
                        ..Default::default()
                    }),
                    ttl_seconds: 3600,
                })
                .await
            });
        }
        while let Some(joined) = sessions.join_next().await {
            joined?.context("create an SSH session")?;
        }
        api.set_sandbox_policy(v1::SetSandboxPolicyRequest {
            sandbox: Some(v1::SandboxRef {
                id: id.clone(),
                ..Default::default()
            }),
            document: "{\"egress\": \"deny\"}".into(),
            expected_version: None,
        })
        .await
        .context("set the policy")?;
        eprintln!(
            "round {}: {} SSH sessions opened on {name} in {:.1?}",
            round + 1,
            args.sessions,
            opened.elapsed()
        );

        // Idle: reads with nothing else going on.
        active.store(true, Ordering::SeqCst);
        let idle_start = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.baseline_seconds)).await;
        idle_windows.push((idle_start, Instant::now()));

        // During the delete.
        let delete_start = Instant::now();
        let deleted = api
            .delete_sandbox(v1::DeleteSandboxRequest {
                sandbox: Some(v1::SandboxRef {
                    id: id.clone(),
                    ..Default::default()
                }),
                request_id: palisade_proto::new_request_id(),
                ..Default::default()
            })
            .await
            .with_context(|| format!("delete {name}"))?
            .into_inner();
        let delete_end = Instant::now();
        delete_windows.push((delete_start, delete_end));
        if !deleted.deleted {
            bail!("the delete of {name} answered before it was done: {deleted:?}");
        }
        tokio::time::sleep(DELETE_MARGIN).await;
        active.store(false, Ordering::SeqCst);
        eprintln!(
            "round {}: delete of {name} ({} sessions) answered in {:.1?}",
            round + 1,
            args.sessions,
            delete_end - delete_start
        );
    }
    stop.store(true, Ordering::SeqCst);
    let mut samples = Vec::new();
    while let Some(joined) = readers.join_next().await {
        samples.extend(joined?);
    }
    api.delete_sandbox(v1::DeleteSandboxRequest {
        sandbox: Some(v1::SandboxRef {
            workspace: "bench".into(),
            name: "bystander".into(),
            id: String::new(),
        }),
        request_id: palisade_proto::new_request_id(),
        ..Default::default()
    })
    .await
    .context("delete the bystander")?;
    drop(cluster);

    let within = |sample: &Sample, windows: &[(Instant, Instant)]| {
        windows
            .iter()
            .any(|(start, end)| sample.started <= *end && sample.ended >= *start)
    };
    let print = report(&samples, args, &idle_windows, &delete_windows, within);
    println!("{print}");
    let failed: Vec<&Sample> = samples
        .iter()
        .filter(|sample| {
            sample.error.is_some()
                && (within(sample, &idle_windows) || within(sample, &delete_windows))
        })
        .collect();
    if let Some(first) = failed.first() {
        bail!(
            "{} reads failed, e.g. on replica {}: {}",
            failed.len(),
            first.replica + 1,
            first.error.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

fn millis_text(duration: Duration) -> String {
    format!("{:.2}", millis(duration))
}

/// Calls, errors, p50, p99 and max of sorted latencies, as table cells.
fn latency_cells(sorted: &[Duration], errors: usize) -> [String; 5] {
    [
        sorted.len().to_string(),
        errors.to_string(),
        millis_text(percentile(sorted, 0.50)),
        millis_text(percentile(sorted, 0.99)),
        millis_text(sorted.last().copied().unwrap_or_default()),
    ]
}

fn report(
    samples: &[Sample],
    args: &Args,
    idle_windows: &[(Instant, Instant)],
    delete_windows: &[(Instant, Instant)],
    within: impl Fn(&Sample, &[(Instant, Instant)]) -> bool,
) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nreads on every replica ({} replicas x {} readers) while a sandbox with {} SSH sessions is deleted, {} round(s)\n",
        REPLICAS, args.readers_per_replica, args.sessions, args.rounds
    );
    let mut table = Table::new(
        &[
            "phase", "read", "calls", "errors", "p50 ms", "p99 ms", "max ms",
        ],
        2,
    );
    for (phase, windows) in [("idle", idle_windows), ("during delete", delete_windows)] {
        let mut by_read: BTreeMap<Read, (Vec<Duration>, usize)> = BTreeMap::new();
        for sample in samples.iter().filter(|sample| within(sample, windows)) {
            let entry = by_read.entry(sample.read).or_default();
            entry.0.push(sample.ended - sample.started);
            entry.1 += usize::from(sample.error.is_some());
        }
        let mut all = Vec::new();
        let mut all_errors = 0;
        for (read, (mut latencies, errors)) in by_read {
            latencies.sort_unstable();
            let mut row = vec![phase.to_string(), read.label().to_string()];
            row.extend(latency_cells(&latencies, errors));
            table.row(row);
            all.extend(latencies);
            all_errors += errors;
        }
        all.sort_unstable();
        let mut row = vec![phase.to_string(), "all reads".to_string()];
        row.extend(latency_cells(&all, all_errors));
        table.row(row);
    }
    let _ = write!(text, "{table}");
    let during: Vec<Duration> = delete_windows
        .iter()
        .map(|(start, end)| *end - *start)
        .collect();
    let _ = writeln!(
        text,
        "\ndelete answered in: {}",
        during
            .iter()
            .map(|duration| format!("{} ms", millis_text(*duration)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let per_replica: BTreeMap<usize, (usize, usize)> = samples
        .iter()
        .filter(|sample| within(sample, delete_windows))
        .fold(BTreeMap::new(), |mut counts, sample| {
            let entry = counts.entry(sample.replica + 1).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += usize::from(sample.error.is_some());
            counts
        });
    let _ = writeln!(
        text,
        "reads during delete by replica (calls/errors): {}",
        per_replica
            .iter()
            .map(|(replica, (calls, errors))| format!("{replica}: {calls}/{errors}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    text
}
