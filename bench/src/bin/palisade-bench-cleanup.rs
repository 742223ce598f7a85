//! `palisade-bench-cleanup`: do reads suffer while a sandbox with thousands
//! of owned records is deleted? A benchmark, not a test: it prints a table
//! (and exits non-zero if any read failed).
//!
//! ```text
//! cargo build --release -p palisade-gateway --bins
//! target/release/palisade-bench-cleanup
//! ```
//!
//! It starts three replicas (`palisade gateway run`, the `palisade` binary
//! next to this one, or `--palisade PATH`) with the process driver on free
//! loopback ports, data in a temporary directory. Then, for each round:
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
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// Benchmark reads during the cleanup of a sandbox's owned records.
#[derive(Debug, Parser)]
#[command(name = "palisade-bench-cleanup", about, long_about = None)]
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
    /// The `palisade` binary (default: the one next to this binary).
    #[arg(long)]
    palisade: Option<PathBuf>,
    /// Keep the temporary directory (replica logs) after the run.
    #[arg(long)]
    keep: bool,
}

/// Replicas of the benchmark cluster.
const REPLICAS: u64 = 3;
/// Per-request deadline of every client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// SSH-session creations in flight at once.
const SESSIONS_IN_FLIGHT: usize = 64;
/// How long a leader election may take before the run gives up.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Reading before the delete starts and after it answers (not counted).
const DELETE_MARGIN: Duration = Duration::from_millis(300);
/// What the sandboxes run.
const SANDBOX_COMMAND: [&str; 2] = ["sleep", "86400"];

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

/// The replicas, and the sandbox processes under their shared driver
/// directory; all SIGKILLed when dropped (also when the run fails).
struct ClusterProcesses {
    replicas: Vec<Child>,
    driver_dir: PathBuf,
}

impl Drop for ClusterProcesses {
    fn drop(&mut self) {
        for child in &mut self.replicas {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_processes_under(&self.driver_dir);
    }
}

/// SIGKILLs every process whose command line or working directory names
/// something under `dir` (the process driver's shims and commands).
fn kill_processes_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let in_cmdline = cmdline
            .split(|byte| *byte == 0)
            .any(|word| Path::new(&*String::from_utf8_lossy(word)).starts_with(dir));
        let in_cwd =
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        if in_cmdline || in_cwd {
            // SAFETY: kill(2) on a process this benchmark's cluster started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
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

/// Waits until every replica names the same leader and applied what it
/// committed.
async fn wait_for_leader(uris: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    loop {
        let mut views = Vec::new();
        for uri in uris {
            let view = match connect(uri).await {
                Ok(channel) => ClusterAdminClient::new(channel)
                    .get_cluster_info(v1::GetClusterInfoRequest {})
                    .await
                    .ok()
                    .map(tonic::Response::into_inner),
                Err(_) => None,
            };
            views.push(view);
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
            && views.iter().all(|view| {
                view.as_ref()
                    .is_some_and(|info| info.applied_index >= commit)
            })
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("no leader within {LEADER_TIMEOUT:?}: {views:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let palisade = match &args.palisade {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the benchmark binary has no directory")?
            .join("palisade"),
    };
    if !palisade.is_file() {
        bail!(
            "{} not found; build it (cargo build --release -p palisade-gateway --bins) or pass --palisade",
            palisade.display()
        );
    }
    let root = std::env::temp_dir().join(format!("palisade-bench-cleanup-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    let result = bench(&args, &palisade, &root).await;
    if args.keep || result.is_err() {
        eprintln!("replica data and logs kept in {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

async fn bench(args: &Args, palisade: &Path, root: &Path) -> anyhow::Result<()> {
    let mut addresses = Vec::new();
    for id in 1..=REPLICAS {
        addresses.push((id, format!("127.0.0.1:{}", free_port()?)));
    }
    let initial_cluster = addresses
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let driver_dir = root.join("executions");
    let mut cluster = ClusterProcesses {
        replicas: Vec::new(),
        driver_dir: driver_dir.clone(),
    };
    for (id, address) in &addresses {
        let data_dir = root.join(format!("node-{id}"));
        std::fs::create_dir_all(&data_dir)?;
        let log = std::fs::File::create(data_dir.join("gateway.log"))?;
        let child = Command::new(palisade)
            .args(["gateway", "run", "--node-id", &id.to_string()])
            .args(["--listen", address])
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--driver-dir")
            .arg(&driver_dir)
            .args(["--initial-cluster", &initial_cluster])
            .args(["--stop-grace-seconds", "2"])
            .env("PALISADE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start a replica")?;
        cluster.replicas.push(child);
    }
    let uris: Vec<String> = addresses
        .iter()
        .map(|(_, address)| format!("http://{address}"))
        .collect();
    wait_for_leader(&uris).await?;
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
                request_id: uuid::Uuid::new_v4().to_string(),
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
        request_id: uuid::Uuid::new_v4().to_string(),
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

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * percent / 100).min(sorted.len() - 1)]
}

fn millis(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1000.0)
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
    let header = [
        "phase", "read", "calls", "errors", "p50 ms", "p99 ms", "max ms",
    ];
    let mut rows: Vec<[String; 7]> = Vec::new();
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
            rows.push([
                phase.to_string(),
                read.label().to_string(),
                latencies.len().to_string(),
                errors.to_string(),
                millis(percentile(&latencies, 50)),
                millis(percentile(&latencies, 99)),
                millis(latencies.last().copied().unwrap_or_default()),
            ]);
            all.extend(latencies);
            all_errors += errors;
        }
        all.sort_unstable();
        rows.push([
            phase.to_string(),
            "all reads".to_string(),
            all.len().to_string(),
            all_errors.to_string(),
            millis(percentile(&all, 50)),
            millis(percentile(&all, 99)),
            millis(all.last().copied().unwrap_or_default()),
        ]);
    }
    let mut widths: Vec<usize> = header.iter().map(|title| title.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                if column < 2 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(text, "{}", line(header.to_vec()));
    for row in &rows {
        let _ = writeln!(text, "{}", line(row.iter().map(String::as_str).collect()));
    }
    let during: Vec<Duration> = delete_windows
        .iter()
        .map(|(start, end)| *end - *start)
        .collect();
    let _ = writeln!(
        text,
        "\ndelete answered in: {}",
        during
            .iter()
            .map(|duration| format!("{} ms", millis(*duration)))
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
