//! What the two benchmark binaries (`src/bin/`) share: the `palisade`
//! binary they run, their three-replica cluster on loopback (started
//! through `palisade-testkit`, like every local cluster), its run
//! directory, and how they print latencies.
//!
//! The benchmarks are not product binaries: nothing installs them, and
//! `cargo test` builds none of this crate. See each binary's doc for how to
//! run it.
#![deny(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use palisade_testkit::{ClusterSpec, LocalCluster};
use tonic::transport::Channel;

/// Replicas of a benchmark cluster.
pub const REPLICAS: u64 = 3;
/// Per-request deadline of the benchmark clients.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a leader election may take before a run gives up.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a benchmark's `main`: a tokio runtime, and on failure the error on
/// stderr and exit code 1. SIGINT or SIGTERM ends the run as a failure:
/// the benchmark is dropped first, so what it started (replicas, a
/// PostgreSQL server, sandboxes) is stopped rather than left running.
pub fn run_main(benchmark: impl Future<Output = anyhow::Result<()>>) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let result = runtime.block_on(async {
        tokio::select! {
            result = benchmark => result,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    runtime.shutdown_background();
    if let Err(error) = result {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

/// Resolves on the first SIGINT or SIGTERM, with its name (never, if the
/// handlers cannot be installed).
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

/// The `palisade` binary the replicas run: `flag` (`--palisade PATH`), or
/// else `palisade` next to the running benchmark (`target/release/`).
pub fn palisade_binary(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    let palisade = match flag {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot find the benchmark executable")?
            .parent()
            .context("the benchmark binary has no directory")?
            .join("palisade"),
    };
    if !palisade.is_file() {
        bail!(
            "{} not found; build it: cargo build --release -p palisade-cli (or pass --palisade PATH)",
            palisade.display()
        );
    }
    Ok(palisade)
}

/// `PALISADE_LOG` of the replicas: `PALISADE_BENCH_LOG`, `warn` by default.
pub fn replica_log_filter() -> String {
    std::env::var("PALISADE_BENCH_LOG").unwrap_or_else(|_| "warn".into())
}

/// Runs `benchmark` with a fresh directory `$TMPDIR/NAME-PID` for the
/// cluster; removes it afterwards, unless `keep` or the run failed (then it
/// says where it is).
pub async fn in_run_dir<T, F, Fut>(name: &str, keep: bool, benchmark: F) -> anyhow::Result<T>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let root = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let result = benchmark(root.clone()).await;
    if keep || result.is_err() {
        eprintln!("replica data and logs kept in {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

/// Starts [`REPLICAS`] replicas of `palisade` (`gateway run` with
/// `gateway_args`) on free loopback ports, data under `root` (`node-N/`,
/// log `node-N/gateway.log`; driver directory `executions/`). Dropping the
/// cluster SIGKILLs the replicas and every sandbox process they started.
pub fn start_cluster(
    palisade: &Path,
    root: &Path,
    gateway_args: Vec<String>,
) -> anyhow::Result<LocalCluster> {
    start_cluster_with(palisade, root, gateway_args, false)
}

/// Like [`start_cluster`]; with `tls`, as `palisade up` runs it (TLS on the
/// public port, mutual TLS on the peer port; the benchmark's connections
/// present the admin certificate).
pub fn start_cluster_with(
    palisade: &Path,
    root: &Path,
    gateway_args: Vec<String>,
    tls: bool,
) -> anyhow::Result<LocalCluster> {
    let mut spec = ClusterSpec::new(palisade, REPLICAS)
        .gateway_args(gateway_args)
        .log_filter(&replica_log_filter());
    spec.root = Some(root.to_path_buf());
    spec.tls = tls;
    LocalCluster::start(spec).context("cannot start the replicas")
}

/// Waits until every replica names the same leader and applied what it had
/// committed; returns the leader.
pub async fn wait_ready(cluster: &LocalCluster) -> anyhow::Result<u64> {
    let replicas = cluster.node_ids();
    cluster.wait_caught_up(&replicas, LEADER_TIMEOUT).await?;
    let (leader, _term) = cluster.wait_for_leader(&replicas, LEADER_TIMEOUT).await?;
    Ok(leader)
}

/// A connection to one replica, with the [`REQUEST_TIMEOUT`] deadline.
pub async fn connect(uri: &str) -> anyhow::Result<Channel> {
    palisade_testkit::probe::channel(uri, REQUEST_TIMEOUT)
        .await
        .with_context(|| format!("cannot connect to {uri}"))
}

/// The nearest-rank percentile (`fraction` 0.5 for p50) of sorted
/// latencies; zero if there are none.
pub fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration in milliseconds.
pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Resident memory of process `pid` (`VmRSS` of `/proc/PID/status`), in
/// bytes; 0 if it cannot be read (the process is gone).
pub fn rss_bytes(pid: u32) -> u64 {
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

/// CPU time spent so far, as [`CpuMeter::read`] sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuReading {
    /// User + system seconds of the metered processes (the replicas).
    pub processes: f64,
    /// Busy seconds of the whole machine, all cores (`/proc/stat`: user,
    /// nice, system, irq and softirq time), whoever spent them: the
    /// replicas, the benchmark's own clients, shims, the kernel's workers.
    pub machine: f64,
}

impl std::ops::Sub for CpuReading {
    type Output = CpuReading;
    fn sub(self, earlier: CpuReading) -> CpuReading {
        CpuReading {
            processes: self.processes - earlier.processes,
            machine: self.machine - earlier.machine,
        }
    }
}

/// Reads how much CPU a set of processes and the machine spent: CPU time
/// per operation is what a saturated two-core machine's throughput is made
/// of, and it moves far less between runs than ops/s does.
#[derive(Debug, Clone, Default)]
pub struct CpuMeter {
    pids: Vec<u32>,
}

impl CpuMeter {
    /// A meter of the processes `pids` (a process that is gone counts 0).
    pub fn new(pids: Vec<u32>) -> Self {
        CpuMeter { pids }
    }

    /// The CPU seconds spent so far.
    pub fn read(&self) -> CpuReading {
        CpuReading {
            processes: self
                .pids
                .iter()
                .filter_map(|pid| palisade_testkit::processes::cpu_seconds(*pid))
                .sum(),
            machine: machine_busy_seconds().unwrap_or(0.0),
        }
    }
}

/// The tick counts of the first line of `/proc/stat` (all cores since
/// boot): user, nice, system, idle, iowait, irq, softirq, steal, then guest
/// time (already inside user and nice); `None` if it does not read as
/// expected.
pub fn machine_cpu_ticks() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    line.split_whitespace()
        .map(|field| field.parse::<u64>().ok())
        .collect()
}

/// Busy seconds of all cores since boot ([`machine_cpu_ticks`]: user,
/// nice, system, irq and softirq; not idle or iowait, and not steal, time
/// a virtual machine's host gave to others); `None` if `/proc/stat` does
/// not read as expected.
pub fn machine_busy_seconds() -> Option<f64> {
    let ticks = machine_cpu_ticks()?;
    let busy = [0, 1, 2, 5, 6]
        .iter()
        .filter_map(|at| ticks.get(*at))
        .sum::<u64>();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| busy as f64 / per_second as f64)
}

/// A text table: columns as wide as their widest cell, two spaces apart,
/// the first few left-aligned (labels), the others right-aligned (numbers).
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    left_aligned: usize,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles, the first `left_aligned` of them
    /// left-aligned.
    pub fn new(header: &[&str], left_aligned: usize) -> Self {
        Table {
            header: header.iter().map(|title| title.to_string()).collect(),
            left_aligned,
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(String::len).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.len());
            }
        }
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let line = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(column, (cell, width))| {
                    if column < self.left_aligned {
                        format!("{cell:<width$}")
                    } else {
                        format!("{cell:>width$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  ");
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// The flags every single-cluster bench tool shares: which `palisade`
/// binary the replicas run, whether to keep the run directory, and more
/// `gateway run` flags for the replicas.
#[derive(Debug, clap::Args)]
pub struct RunFlags {
    /// The `palisade` binary the replicas run (default: next to this one).
    #[arg(long)]
    pub palisade: Option<std::path::PathBuf>,
    /// Keep the run directory (replica data and logs) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// More `gateway run` flags for every replica (repeatable), e.g.
    /// `--replica-arg=--requests-in-flight-max --replica-arg=256`.
    #[arg(long = "replica-arg", allow_hyphen_values = true)]
    pub replica_args: Vec<String>,
}
