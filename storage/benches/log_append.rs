//! The log append benchmark: how close does the durable Raft log come to
//! what the disk can do? Prints a table, asserts nothing.
//!
//! 1. **The fdatasync ceiling** of the disk under `--dir`: one thread
//!    appends `--entry-bytes` to a plain file and calls `fdatasync` after
//!    each write, for `--seconds`. Then the same over space the file
//!    already has (written as zeros and synced first), which this disk does
//!    faster (the `fdatasync` writes no new size or block map): the log
//!    writes its frames over zeros it wrote ahead, so that second rate is
//!    the ceiling it is held to.
//! 2. **The log**: [`LogStore::append`] driven the way openraft's core
//!    drives it (one caller, appends in log order, each of
//!    `--entries-per-append` entries of `--entry-bytes`, without waiting
//!    for the flush), with at most `--in-flight` appends not yet flushed;
//!    one run per value of `--in-flight` (1 is a lone client: every entry
//!    waits for its own fsync; more lets the writer group-commit). The
//!    store's own commit counter ([`LogTimings`]) gives the commits, so the
//!    mean batch (entries per commit) is measured, not assumed.
//! 3. **The ceiling at the batch's size**: after each log run, the in-place
//!    ceiling again, each write as large as that run's mean commit (mean
//!    batch x `--entry-bytes`, a little less than the log writes: its
//!    frames add a length, a checksum and the log id).
//!
//! 4. **What reached the disk**: the sectors the block device under
//!    `--dir` wrote during each phase (`/sys/dev/block/<major>:<minor>/stat`,
//!    Linux; "-" where the directory is on no block device), as MB/s and,
//!    for the log, per byte of entry appended. The log writes zeros ahead
//!    of its frames (see `segment_log`), so at 256 in flight the disk
//!    writes about 2.2 bytes per byte of entry, 300-400 MB/s on this
//!    machine's disk, near what it writes at all (the in-place ceiling at
//!    the batch's size: 410-560 MB/s). Making the next segment's zeros
//!    ahead on a thread of their own moved them off the commits but not
//!    off the disk: no more entries a second, and a p99 of 6 ms against 2.
//!
//! The figure of merit is `entries/s / (ceiling fsyncs/s x mean batch)`:
//! 1.0 means each commit costs the log no more than one bare fdatasync of
//! its entries. (Issue 18's target: >= 0.8.) An `fdatasync` of 70 KB takes
//! this disk longer than one of 512 bytes, so "a bare fdatasync of its
//! entries" is the ceiling measured at the batch's size: the last column,
//! the one the target is judged by. The ratios to the two ceilings of
//! `--entry-bytes` writes are shown too (at one in flight, all three are
//! the same measure).
//!
//! ```text
//! cargo bench -p palisade-storage --bench log_append                # defaults
//! cargo bench -p palisade-storage --bench log_append -- --help
//! cargo bench -p palisade-storage --bench log_append -- --dir /data --seconds 20
//! ```
//!
//! The log grows for the whole run (nothing is purged), as a replica's does
//! between two snapshots.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::bail;
use clap::Parser;
use openraft::alias::LogIdOf;
use openraft::alias::OneshotReceiverOf;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::type_config::TypeConfigExt;
use palisade_storage::LogStore;
use palisade_storage::LogTimings;

openraft::declare_raft_types!(
    /// String commands (padded to `--entry-bytes`), `u64` node ids and the
    /// standard leader id, as in Palisade.
    BenchConfig:
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

type Entry = <BenchConfig as openraft::RaftTypeConfig>::Entry;

/// The allocator `palisade` runs with (`cli/src/main.rs`): the writer
/// thread frees the records the caller's thread allocated, and glibc's
/// malloc takes the allocating arena's lock for each such free (its
/// futex wakes were a third of the writer's CPU at 256 in flight).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Largest value accepted for `--in-flight` (openraft's own pipeline is
/// bounded far below this).
const IN_FLIGHT_MAX: usize = 4096;
/// Largest entry accepted for `--entry-bytes`.
const ENTRY_BYTES_MAX: usize = 1 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "log_append",
    about = "Durable Raft log appends against the disk's fdatasync ceiling (prints a table)"
)]
struct Args {
    /// Directory on the disk to measure (a temporary directory is made in
    /// it and removed at the end). Default: the system temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds each phase runs.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Bytes of command carried by each entry (Palisade's create and
    /// delete entries are a few hundred bytes of JSON).
    #[arg(long, default_value_t = 512)]
    entry_bytes: usize,
    /// Entries handed to each `append` call.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    entries_per_append: u64,
    /// Appends allowed in flight (appended, not yet flushed), one run per
    /// value, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    in_flight: Vec<usize>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.entry_bytes == 0 || args.entry_bytes > ENTRY_BYTES_MAX {
        bail!(
            "--entry-bytes must be 1..={ENTRY_BYTES_MAX}, got {}",
            args.entry_bytes
        );
    }
    if let Some(bad) = args
        .in_flight
        .iter()
        .find(|n| **n == 0 || **n > IN_FLIGHT_MAX)
    {
        bail!("--in-flight values must be 1..={IN_FLIGHT_MAX}, got {bad}");
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("palisade-log-append-")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot make a temporary directory in {}", parent.display()))?;
    let phase = Duration::from_secs(args.seconds);

    println!(
        "# log append: {} s per phase, entries of {} bytes, {} per append, in {}",
        args.seconds,
        args.entry_bytes,
        args.entries_per_append,
        parent.display()
    );
    let ceiling = fdatasync_ceiling(
        &scratch.path().join("ceiling"),
        args.entry_bytes,
        phase,
        Ceiling::APPEND,
    )?;
    let in_place = fdatasync_ceiling(
        &scratch.path().join("ceiling-in-place"),
        args.entry_bytes,
        phase,
        Ceiling::IN_PLACE,
    )?;
    println!();
    println!("| phase | writes/s | fdatasync p50 / p99 ms | disk writes MB/s |");
    println!("|---|---|---|---|");
    for (what, measured) in [
        ("write appended to the file", &ceiling),
        ("write over space the file has", &in_place),
    ] {
        println!(
            "| fdatasync ceiling ({} B {what} + fdatasync) | {:.0} | {:.2} / {:.2} | {} |",
            args.entry_bytes,
            measured.per_second,
            measured.p50.as_secs_f64() * 1e3,
            measured.p99.as_secs_f64() * 1e3,
            megabytes(measured.device_bytes_per_second),
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!();
    println!(
        "| in flight | entries/s | commits/s | mean batch (entries/commit) | append p50 / p99 ms | ratio to appending ceiling x batch | ratio to in-place ceiling x batch | in-place ceiling at the batch's bytes, writes/s | ratio to it x batch | disk writes MB/s: log (per entry byte) / that ceiling |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (run, in_flight) in args.in_flight.iter().copied().enumerate() {
        let dir = scratch.path().join(format!("log-{run}"));
        let result = runtime.block_on(log_appends(&dir, &args, in_flight, phase))?;
        let batch = result.entries as f64 / result.commits.max(1) as f64;
        let seconds = result.elapsed.as_secs_f64();
        let entries_per_second = result.entries as f64 / seconds;
        let ratio = entries_per_second / (ceiling.per_second * batch);
        let in_place_ratio = entries_per_second / (in_place.per_second * batch);
        let batch_bytes =
            ((batch * args.entry_bytes as f64).round() as usize).max(args.entry_bytes);
        let at_batch_bytes = fdatasync_ceiling(
            &scratch.path().join(format!("ceiling-batch-{run}")),
            batch_bytes,
            phase,
            Ceiling::IN_PLACE,
        )?;
        let batch_ratio = entries_per_second / (at_batch_bytes.per_second * batch);
        let per_entry_byte = result
            .device_bytes_per_second
            .map(|device| {
                format!(
                    " ({:.2})",
                    device / (entries_per_second * args.entry_bytes as f64)
                )
            })
            .unwrap_or_default();
        println!(
            "| {in_flight} | {entries_per_second:.0} | {:.0} | {batch:.1} | {:.2} / {:.2} | {ratio:.2} | {in_place_ratio:.2} | {:.0} ({batch_bytes} B) | {batch_ratio:.2} | {}{per_entry_byte} / {} |",
            result.commits as f64 / seconds,
            result.p50.as_secs_f64() * 1e3,
            result.p99.as_secs_f64() * 1e3,
            at_batch_bytes.per_second,
            megabytes(result.device_bytes_per_second),
            megabytes(at_batch_bytes.device_bytes_per_second),
        );
    }
    Ok(())
}

struct Ceiling {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    /// Bytes the disk wrote a second during the phase, if known.
    device_bytes_per_second: Option<f64>,
}

/// Bytes of zeros the in-place ceiling writes over (written and synced
/// before it is timed; its writes wrap around at the end), at least.
const IN_PLACE_AREA_BYTES: u64 = 64 * 1024 * 1024;
/// Writes of the in-place ceiling that fit in its area, at least (so that
/// a write as large as a big batch still lands on zeros written ahead).
const IN_PLACE_AREA_WRITES_MIN: u64 = 16;

impl Ceiling {
    const APPEND: bool = false;
    const IN_PLACE: bool = true;
}

/// Writes `bytes` at the end of a new file (`in_place`: over zeros the file
/// already holds) and fdatasyncs after each write, for `phase`.
fn fdatasync_ceiling(
    path: &std::path::Path,
    bytes: usize,
    phase: Duration,
    in_place: bool,
) -> anyhow::Result<Ceiling> {
    use std::os::unix::fs::FileExt;
    let mut file = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let zeros = vec![0u8; 1024 * 1024];
    let area = IN_PLACE_AREA_BYTES
        .max(bytes as u64 * IN_PLACE_AREA_WRITES_MIN)
        .next_multiple_of(zeros.len() as u64);
    if in_place {
        for _ in 0..area / zeros.len() as u64 {
            file.write_all(&zeros)?;
        }
        file.sync_all()?;
    }
    let block = vec![b'x'; bytes];
    let mut latencies = Vec::new();
    let mut at = 0u64;
    let device = DeviceWrites::start(path);
    let started = Instant::now();
    while started.elapsed() < phase {
        let write = Instant::now();
        if in_place {
            if at + bytes as u64 > area {
                at = 0;
            }
            file.write_all_at(&block, at)?;
            at += bytes as u64;
        } else {
            file.write_all(&block)?;
        }
        file.sync_data()?;
        latencies.push(write.elapsed());
    }
    let elapsed = started.elapsed();
    let device_bytes_per_second = device.bytes_per_second(elapsed);
    let per_second = latencies.len() as f64 / elapsed.as_secs_f64();
    latencies.sort();
    Ok(Ceiling {
        per_second,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        device_bytes_per_second,
    })
}

struct AppendRun {
    entries: u64,
    commits: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    device_bytes_per_second: Option<f64>,
}

/// Counts the store's commits and keeps each append's latency.
#[derive(Default)]
struct Recorded {
    commits: AtomicU64,
    appended: Mutex<Vec<Duration>>,
}

impl LogTimings for Recorded {
    fn appended(&self, elapsed: Duration) {
        self.appended.lock().expect("poisoned").push(elapsed);
    }
    fn committed(&self, _: Duration) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }
}

async fn log_appends(
    dir: &std::path::Path,
    args: &Args,
    in_flight: usize,
    phase: Duration,
) -> anyhow::Result<AppendRun> {
    let mut store = LogStore::<BenchConfig>::open(dir)
        .with_context(|| format!("cannot open a log in {}", dir.display()))?;
    let recorded = Arc::new(Recorded::default());
    store.set_timings(recorded.clone());
    let command = "x".repeat(args.entry_bytes);

    let mut flushes = VecDeque::with_capacity(in_flight);
    let mut next_index = 0u64;
    let device = DeviceWrites::start(dir);
    let started = Instant::now();
    while started.elapsed() < phase {
        if flushes.len() == in_flight {
            wait_flushed(&mut flushes).await?;
        }
        let first = next_index;
        next_index += args.entries_per_append;
        let entries = (first..next_index).map(|index| {
            Entry::new_normal(
                LogIdOf::<BenchConfig>::new(1.into(), index),
                command.clone(),
            )
        });
        let (flushed_tx, flushed_rx) = BenchConfig::oneshot::<std::io::Result<()>>();
        store
            .append(entries, IOFlushed::signal(flushed_tx))
            .await
            .context("append failed")?;
        flushes.push_back(flushed_rx);
    }
    while !flushes.is_empty() {
        wait_flushed(&mut flushes).await?;
    }
    let elapsed = started.elapsed();
    let device_bytes_per_second = device.bytes_per_second(elapsed);
    let mut latencies = std::mem::take(&mut *recorded.appended.lock().expect("poisoned"));
    latencies.sort();
    Ok(AppendRun {
        entries: next_index,
        commits: recorded.commits.load(Ordering::Relaxed),
        elapsed,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        device_bytes_per_second,
    })
}

async fn wait_flushed(
    flushes: &mut VecDeque<OneshotReceiverOf<BenchConfig, std::io::Result<()>>>,
) -> anyhow::Result<()> {
    let oldest = flushes.pop_front().expect("a flush in flight");
    oldest
        .await
        .context("the log dropped a flush callback")?
        .context("an append failed to flush")
}

/// `bytes_per_second` in MB/s, or "-" when the disk's counters are unknown.
fn megabytes(bytes_per_second: Option<f64>) -> String {
    bytes_per_second.map_or_else(|| "-".into(), |bytes| format!("{:.0}", bytes / 1e6))
}

/// The sectors written by the block device holding a path, counted from
/// [`DeviceWrites::start`] (the whole device: anything else writing to it
/// meanwhile counts too, so run the bench on an idle machine).
struct DeviceWrites {
    /// The device's `stat` file and its sectors written at the start;
    /// `None` when there is no such file to read.
    started: Option<(PathBuf, u64)>,
}

impl DeviceWrites {
    fn start(path: &std::path::Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        let started = std::fs::metadata(path).ok().and_then(|metadata| {
            // glibc's gnu_dev_major / gnu_dev_minor.
            let dev = metadata.dev();
            let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff);
            let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff);
            let stat = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
            let sectors = sectors_written(&stat)?;
            Some((stat, sectors))
        });
        Self { started }
    }

    /// Bytes written a second since the start, over `elapsed`.
    fn bytes_per_second(&self, elapsed: Duration) -> Option<f64> {
        let (stat, at_start) = self.started.as_ref()?;
        let sectors = sectors_written(stat)?.checked_sub(*at_start)?;
        // The kernel counts 512-byte sectors whatever the device's own.
        Some(sectors as f64 * 512.0 / elapsed.as_secs_f64())
    }
}

/// Field 7 of a block device's `stat` file: sectors written.
fn sectors_written(stat: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(stat)
        .ok()?
        .split_whitespace()
        .nth(6)?
        .parse()
        .ok()
}

fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * quantile).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
