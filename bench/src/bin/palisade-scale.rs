//! `palisade-scale`: a three-replica cluster holding a million sandboxes
//! (issue 18, item 3). A benchmark, not a test: it prints numbers.
//!
//! ```text
//! cargo build --release -p palisade-cli -p palisade-bench
//! target/release/palisade-scale                 # --help for the flags
//! ```
//!
//! For each size of `--sandboxes` (default 1,000 and 1,000,000):
//!
//! 1. **Load.** The state is built in this process by the lifecycle's own
//!    `apply`, command by command, as a replica applies its log:
//!    `--workspaces` workspaces (default 100), then for each sandbox the
//!    `BeginCreate` a gateway proposes (request id, spec, a label, an SSH
//!    host identity) and the `CompleteLaunch` the executor proposes for the
//!    `noop` driver (READY). Then the replicated clock is ticked past the
//!    receipt retention (a day), so the state is what a cluster holds a
//!    day after its sandboxes were created, without their receipts: they
//!    live on a replica's disk, not in its memory, and expire.
//!    This binary's allocator counts the heap bytes the state occupies, as
//!    built and as decoded again from its encoding (what a replica holds
//!    after a restart or a snapshot install).
//! 2. **Snapshot build.** The encoded state is installed into a
//!    `palisade_raft` state machine in a scratch directory (timed: what a
//!    replica does when it installs a snapshot), and that machine builds a
//!    snapshot (timed: the copy, the encoding into the file, its fsync).
//! 3. **Cluster.** The state is written as a backup file, and each of three
//!    replicas (`noop` driver, fsync'd log, loopback) is seeded from it with
//!    `palisade cluster restore` and started (timed to a leader whose
//!    followers applied what it committed). Each replica's resident memory
//!    is read from `/proc`.
//! 4. **Throughput.** `--clients` clients (spread over the three replicas)
//!    each create a sandbox (waiting for READY) and delete it (waiting
//!    until it is gone), over and over, for `--seconds`.
//! 5. **Learner catch-up.** A fourth replica starts empty and is added as
//!    a learner (`AddLearner` on the leader): the leader sends it the
//!    snapshot and then the log. Timed until its applied index reaches the
//!    leader's at the moment it was added.
//!
//! Then a summary against issue 18's targets: state memory per sandbox
//! (the state's heap, as applied and as decoded; beside it, how much a
//! replica's resident memory grew per sandbox between the smallest and the
//! largest size), snapshot build, learner catch-up, and throughput at the
//! largest size against the smallest.
//!
//! The run directory (`$TMPDIR/palisade-scale-PID`) holds the backup, the
//! scratch state machine and the replicas; it is removed afterwards unless
//! `--keep`. A million sandboxes encode to ~650 MB: the run holds up to
//! six copies on disk at once (backup, scratch snapshot, four replicas;
//! ~4 GB) and ~1.1 GB of memory per replica; `1000,1000000` takes about
//! three minutes on two cores.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use openraft::storage::{RaftSnapshotBuilder as _, RaftStateMachine as _};
use palisade_bench::{
    REPLICAS, RunFlags, Table, connect, in_run_dir, mib, millis, palisade_binary, percentile,
    replica_log_filter, rss_bytes, run_main,
};
use palisade_lifecycle::{
    Command, CompletionOf, LaunchResult, LogPosition, RequestMeta, SandboxSpec, State, apply,
};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_raft::backup::{BackupHeader, BackupWriter, STATE_ENCODING_JSON, state_digest};
use palisade_raft::{LifecycleStateMachine, LogId, SnapshotData, SnapshotMeta, StoredMembership};
use palisade_testkit::{ClusterSpec, LocalCluster};
use tikv_jemallocator::Jemalloc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Live heap bytes of this process (the loader's state is measured with it).
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

/// jemalloc (the `palisade` binary's allocator, so the in-process install
/// and build are timed as a replica runs them), counting live bytes into
/// [`LIVE_BYTES`].
struct Counting;

// SAFETY: every call is passed to jemalloc unchanged; the counter is only
// arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { Jemalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A three-replica cluster holding many sandboxes: memory, snapshot build,
/// learner catch-up and throughput at each size.
#[derive(Debug, Parser)]
#[command(name = "palisade-scale", long_about = None)]
struct Args {
    /// Sandbox counts to measure, comma-separated, smallest first: the
    /// summary compares the largest with the smallest.
    #[arg(long, value_delimiter = ',', default_value = "1000,1000000",
          value_parser = clap::value_parser!(u64).range(1..=SANDBOXES_MAX))]
    sandboxes: Vec<u64>,
    /// Workspaces the sandboxes are spread over (round robin); each holds at
    /// most the default `sandboxes_per_workspace` quota (10,000).
    #[arg(long, default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=WORKSPACES_MAX))]
    workspaces: u64,
    /// Clients creating and deleting sandboxes in the throughput phase.
    #[arg(long, default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients: u64,
    /// How long the throughput phase runs at each size.
    #[arg(long, default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(5..=3600))]
    seconds: u64,
    /// Skip the learner catch-up step.
    #[arg(long)]
    no_learner: bool,
    #[command(flatten)]
    run: RunFlags,
}

/// Largest `--sandboxes`: what the default quotas allow in the most
/// workspaces (10,000 in each of 999). The state budget (1 GiB, about 1.5
/// million sandboxes) refuses creates well before: a larger state can be
/// loaded and measured, but the throughput phase then measures refusals
/// (the run prints the first error).
const SANDBOXES_MAX: u64 = 10_000_000;
/// Largest `--workspaces` (`WORKSPACES_COUNT_MAX` of the lifecycle, less
/// the default workspace).
const WORKSPACES_MAX: u64 = palisade_lifecycle::limits::WORKSPACES_COUNT_MAX as u64 - 1;
/// The term the loader's entries are applied in.
const LOADER_TERM: u64 = 1;
/// The replicated clock at the first entry (a fixed date: the state is the
/// same at every run, apart from ids).
const LOADER_EPOCH_MS: i64 = 1_800_000_000_000;
/// How long starting a replica from a large snapshot, or a learner's
/// catch-up, may take before the run gives up.
const SLOW_STEP_TIMEOUT: Duration = Duration::from_secs(900);
/// Connections per replica that the clients share.
const CONNECTIONS_PER_REPLICA: usize = 4;

fn main() {
    run_main(run(Args::parse()));
}

async fn run(args: Args) -> anyhow::Result<()> {
    if !args.sandboxes.is_sorted() {
        bail!("--sandboxes: give the sizes smallest first");
    }
    let quota = palisade_lifecycle::limits::SANDBOXES_PER_WORKSPACE_DEFAULT;
    for &size in &args.sandboxes {
        if size.div_ceil(args.workspaces) > quota {
            bail!(
                "--sandboxes {size} over --workspaces {} puts more than the {quota} sandboxes of the default quota in a workspace; give more workspaces",
                args.workspaces
            );
        }
    }
    let palisade = palisade_binary(args.run.palisade.as_deref())?;
    in_run_dir("palisade-scale", args.run.keep, |root| {
        scale(&args, &palisade, root)
    })
    .await
}

/// What one size measured.
struct Measured {
    sandboxes: u64,
    clients: u64,
    load: Duration,
    /// Heap of the state as apply built it.
    heap_bytes: i64,
    /// Heap of the state decoded from its encoding.
    decoded_heap_bytes: i64,
    encoded_bytes: u64,
    install: Duration,
    build: Duration,
    cluster_start: Duration,
    rss_bytes: Vec<u64>,
    throughput: Throughput,
    catch_up: Option<Duration>,
}

async fn scale(args: &Args, palisade: &Path, root: PathBuf) -> anyhow::Result<()> {
    println!(
        "palisade-scale: {REPLICAS} replicas (noop driver, fsync'd Raft log) on loopback; sandboxes over {} workspaces; data in {}",
        args.workspaces,
        root.display()
    );
    let mut results = Vec::new();
    for &sandboxes in &args.sandboxes {
        let measured = one_size(args, palisade, &root, sandboxes).await?;
        print_size(&measured);
        results.push(measured);
    }
    print_summary(&results);
    Ok(())
}

async fn one_size(
    args: &Args,
    palisade: &Path,
    root: &Path,
    sandboxes: u64,
) -> anyhow::Result<Measured> {
    let dir = root.join(format!("size-{sandboxes}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    // 1. The state, built by apply.
    let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
    let started = Instant::now();
    let loader = Loader::build(sandboxes, args.workspaces)?;
    let load = started.elapsed();
    let heap_bytes = LIVE_BYTES.load(Ordering::Relaxed) - heap_before;
    println!(
        "{sandboxes} sandboxes: built by {} applied entries in {:.1} s",
        loader.index,
        load.as_secs_f64()
    );
    let encoded = serde_json::to_vec(&loader.state).context("encoding the state")?;
    let applied_index = loader.index;
    drop(loader);
    // The same state decoded from its encoding, as a replica holds it after
    // a restart or a snapshot install.
    let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
    let decoded: State = serde_json::from_slice(&encoded).context("decoding the state")?;
    let decoded_heap_bytes = LIVE_BYTES.load(Ordering::Relaxed) - heap_before;
    drop(decoded);

    // 2. Install and build a snapshot, in a scratch state machine.
    let (install, build) = snapshot_round(&dir.join("scratch"), applied_index, &encoded).await?;
    println!(
        "{sandboxes} sandboxes: snapshot of {:.0} MiB installed in {:.1} s, built in {:.1} s",
        mib(encoded.len() as u64),
        install.as_secs_f64(),
        build.as_secs_f64()
    );

    // 3. A cluster restored from it.
    let backup = dir.join("state.backup");
    write_backup(&backup, applied_index, &encoded)?;
    let encoded_bytes = encoded.len() as u64;
    drop(encoded);
    let mut gateway_args = vec!["--driver".to_string(), "noop".to_string()];
    gateway_args.extend(args.run.replica_args.iter().cloned());
    let mut spec = ClusterSpec::new(palisade, REPLICAS)
        .gateway_args(gateway_args.clone())
        .log_filter(&replica_log_filter());
    spec.root = Some(dir.join("cluster"));
    let mut cluster = LocalCluster::prepare(spec)?;
    // Progress is read from each replica's /metrics: GetClusterInfo's
    // applied index is its digest's, which a large state recomputes
    // rarely (see `palisade_gateway::digest_cache`).
    let mut metrics = BTreeMap::new();
    for replica in &mut cluster.replicas {
        let address = format!("127.0.0.1:{}", palisade_testkit::ports::free_port()?);
        replica
            .extra_args
            .extend(["--metrics-listen".to_string(), address.clone()]);
        metrics.insert(replica.node_id, address);
    }
    for replica in &cluster.replicas {
        restore(palisade, &backup, replica, cluster.initial_cluster())?;
    }
    std::fs::remove_file(&backup).ok();
    let started = Instant::now();
    cluster.start_all()?;
    let leader = wait_settled(&mut cluster, &metrics).await?;
    let cluster_start = started.elapsed();
    let rss_bytes: Vec<u64> = cluster
        .replicas
        .iter()
        .map(|replica| rss_bytes(replica.pid()))
        .collect();
    println!(
        "{sandboxes} sandboxes: 3 replicas restored and started in {:.1} s (leader node {leader}); resident memory {} MiB",
        cluster_start.as_secs_f64(),
        rss_bytes
            .iter()
            .map(|bytes| format!("{:.0}", mib(*bytes)))
            .collect::<Vec<_>>()
            .join(" / ")
    );

    // 4. Throughput.
    let throughput = create_delete(
        &cluster,
        args.clients,
        Duration::from_secs(args.seconds),
        sandboxes,
    )
    .await?;

    // 5. A learner catches up.
    let catch_up = if args.no_learner {
        None
    } else {
        Some(learner_catch_up(&mut cluster, &metrics, &gateway_args).await?)
    };
    drop(cluster);
    if !args.run.keep {
        std::fs::remove_dir_all(&dir).ok();
    }
    Ok(Measured {
        sandboxes,
        clients: args.clients,
        load,
        heap_bytes,
        decoded_heap_bytes,
        encoded_bytes,
        install,
        build,
        cluster_start,
        rss_bytes,
        throughput,
        catch_up,
    })
}

/// The state and the index of the last entry applied to it.
struct Loader {
    state: State,
    index: u64,
}

impl Loader {
    /// `sandboxes` READY sandboxes over `workspaces` workspaces, built by
    /// the commands a cluster would have applied, a day ago.
    fn build(sandboxes: u64, workspaces: u64) -> anyhow::Result<Loader> {
        let mut loader = Loader {
            state: State::new(),
            index: 0,
        };
        loader.apply(Command::Tick {
            now_ms: LOADER_EPOCH_MS,
            receipt_retention_ms: 0,
        })?;
        let workspace_names: Vec<String> =
            (0..workspaces).map(|n| format!("scale-{n:03}")).collect();
        for name in &workspace_names {
            loader.apply(Command::CreateWorkspace {
                id: uuid::Uuid::new_v4().to_string(),
                name: name.clone(),
                time_ms: LOADER_EPOCH_MS,
            })?;
        }
        for n in 0..sandboxes {
            let id = uuid::Uuid::new_v4().to_string();
            loader.apply(Command::BeginCreate {
                id: id.clone(),
                workspace: workspace_names[(n % workspaces) as usize].clone(),
                name: format!("agent-{n:07}"),
                spec: SandboxSpec {
                    command: vec!["sleep".into(), "infinity".into()],
                    ..Default::default()
                },
                labels: BTreeMap::from([("app".to_string(), "agent".to_string())]),
                annotations: BTreeMap::new(),
                time_ms: LOADER_EPOCH_MS,
                host_identity: format!("ssh-host-{}", uuid::Uuid::new_v4().simple()),
                request: RequestMeta {
                    id: uuid::Uuid::new_v4().to_string(),
                    payload_digest: format!("{:064x}", u128::from(n as u32) << 64 | 0xa5),
                    time_ms: LOADER_EPOCH_MS,
                },
            })?;
            loader.apply(Command::CompleteLaunch {
                sandbox_id: id.clone(),
                of: CompletionOf::UNBOUND,
                generation: 1,
                result: LaunchResult::Running {
                    handle: format!("id=noop-{id}-1"),
                    driver: "noop".into(),
                },
            })?;
        }
        // A day later: the receipts expired (see the module doc).
        let ticks =
            loader.state.receipt_retention_ms() / palisade_lifecycle::limits::TICK_STEP_MS_MAX + 2;
        for tick in 1..=ticks {
            loader.apply(Command::Tick {
                now_ms: LOADER_EPOCH_MS + tick * palisade_lifecycle::limits::TICK_STEP_MS_MAX,
                receipt_retention_ms: 0,
            })?;
        }
        if !loader.state.receipts.is_empty() {
            bail!(
                "{} receipts are left a day after the load",
                loader.state.receipts.len()
            );
        }
        if loader.state.sandboxes.len() as u64 != sandboxes {
            bail!(
                "the loader built {} sandboxes, not {sandboxes}",
                loader.state.sandboxes.len()
            );
        }
        // An ignored completion would leave an operation for the restored
        // cluster's executor to finish: the run would measure that instead.
        if let Some((sandbox, operation)) = loader.state.pending_operations().next() {
            bail!(
                "sandbox {} was left with a pending {:?}",
                sandbox.id,
                operation.kind
            );
        }
        Ok(loader)
    }

    /// Applies `command` at the next index (a completion bound to the
    /// operation it completes, as the executor binds it); a refusal is an
    /// error.
    fn apply(&mut self, command: Command) -> anyhow::Result<()> {
        let command = command.bound_to(&self.state, LOADER_TERM);
        self.index += 1;
        let position = LogPosition {
            index: self.index,
            term: LOADER_TERM,
        };
        match apply(&mut self.state, position, &command) {
            Ok(_) => Ok(()),
            Err(rejection) => bail!("entry {} was refused: {rejection:?}", self.index),
        }
    }
}

/// Installs `encoded` (the state at `applied_index`) into a new state
/// machine in `dir`, then builds a snapshot of it; answers both times.
async fn snapshot_round(
    dir: &Path,
    applied_index: u64,
    encoded: &[u8],
) -> anyhow::Result<(Duration, Duration)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut machine =
        LifecycleStateMachine::open(dir).context("opening the scratch state machine")?;
    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new(LOADER_TERM.into(), applied_index)),
        last_membership: StoredMembership::default(),
    };
    let data = SnapshotData::from_slice(encoded, Some(dir)).context("spooling the snapshot")?;
    let started = Instant::now();
    machine
        .install_snapshot(&meta, data)
        .await
        .context("installing the snapshot")?;
    let install = started.elapsed();
    let mut builder = machine.get_snapshot_builder().await;
    let started = Instant::now();
    let built = builder
        .build_snapshot()
        .await
        .context("building a snapshot")?;
    let build = started.elapsed();
    if built.snapshot.len() != encoded.len() as u64 {
        bail!(
            "the built snapshot is {} bytes, the installed one {}",
            built.snapshot.len(),
            encoded.len()
        );
    }
    drop((builder, machine, built));
    std::fs::remove_dir_all(dir).ok();
    Ok((install, build))
}

/// Writes `encoded` (the state at `applied_index`) as a backup file.
fn write_backup(path: &Path, applied_index: u64, encoded: &[u8]) -> anyhow::Result<()> {
    let header = BackupHeader {
        applied_index,
        applied_term: LOADER_TERM,
        cluster_id: String::new(),
        state_digest: state_digest(encoded),
        state_encoding: STATE_ENCODING_JSON.into(),
        node_id: 0,
        created_at_ms: 0,
        palisade_version: env!("CARGO_PKG_VERSION").into(),
    };
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut writer = BackupWriter::new(BufWriter::new(file), &header, encoded.len() as u64)?;
    writer.write_state(encoded)?;
    let (mut out, _) = writer.finish()?;
    out.flush()?;
    Ok(())
}

/// Seeds `replica`'s data directory from `backup` with `palisade cluster
/// restore`.
fn restore(
    palisade: &Path,
    backup: &Path,
    replica: &palisade_testkit::ReplicaProcess,
    initial_cluster: &str,
) -> anyhow::Result<()> {
    let output = std::process::Command::new(palisade)
        .arg("cluster")
        .arg("restore")
        .arg(backup)
        .arg("--data-dir")
        .arg(&replica.data_dir)
        .args(["--node-id", &replica.node_id.to_string()])
        .args(["--initial-cluster", initial_cluster])
        .output()
        .context("cannot run palisade cluster restore")?;
    if !output.status.success() {
        bail!(
            "palisade cluster restore (node {}) failed: {}",
            replica.node_id,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Waits (up to [`SLOW_STEP_TIMEOUT`]: a large snapshot takes a while to
/// load) for a leader, and for every replica of `metrics` (node id ->
/// metrics address) to apply what the leader had committed then; answers
/// the leader.
async fn wait_settled(
    cluster: &mut LocalCluster,
    metrics: &BTreeMap<u64, String>,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + SLOW_STEP_TIMEOUT;
    let (leader, target) = loop {
        still_running(cluster)?;
        let mut found = None;
        for (node_id, address) in metrics {
            if let Some(samples) = scrape(address).await
                && metric(&samples, "palisade_raft_is_leader") == 1
            {
                found = Some((*node_id, metric(&samples, "palisade_raft_commit_index")));
            }
        }
        if let Some(found) = found {
            break found;
        }
        if Instant::now() > deadline {
            bail!("no leader within {SLOW_STEP_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    for address in metrics.values() {
        wait_applied(cluster, address, target, deadline).await?;
    }
    Ok(leader)
}

/// Fails if a replica of `cluster` exited: waiting for it would only run
/// into the step's timeout.
fn still_running(cluster: &mut LocalCluster) -> anyhow::Result<()> {
    match cluster.exited() {
        Some((node_id, status)) => bail!(
            "replica {node_id} exited ({status}); its log is {}",
            cluster
                .root()
                .join(format!("node-{node_id}/gateway.log"))
                .display()
        ),
        None => Ok(()),
    }
}

/// Waits until the replica serving metrics at `address` applied `target`.
async fn wait_applied(
    cluster: &mut LocalCluster,
    address: &str,
    target: u64,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        still_running(cluster)?;
        if let Some(samples) = scrape(address).await
            && metric(&samples, "palisade_raft_applied_index") >= target
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the replica at {address} did not apply index {target} in time");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Between two reads of a replica's metrics while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// `GET /metrics` of `address` (HTTP/1.0, read to the end): each sample's
/// value summed by metric name; `None` if the replica does not answer.
async fn scrape(address: &str) -> Option<BTreeMap<String, f64>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return None;
    }
    let mut samples = BTreeMap::new();
    for line in body.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(value) = value.parse::<f64>() {
            *samples.entry(name.to_string()).or_insert(0.0) += value;
        }
    }
    Some(samples)
}

/// The value of metric `name` in `samples` as a whole number (0 if absent).
fn metric(samples: &BTreeMap<String, f64>, name: &str) -> u64 {
    samples.get(name).copied().unwrap_or(0.0) as u64
}

/// The throughput phase's results.
struct Throughput {
    /// Create + delete pairs completed.
    pairs: usize,
    errors: usize,
    first_error: Option<String>,
    elapsed: Duration,
    creates: Vec<Duration>,
    deletes: Vec<Duration>,
}

impl Throughput {
    fn pairs_per_second(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `clients` clients, client i entering through replica i % 3, each
/// creating a sandbox (waiting for READY) and deleting it (waiting until
/// gone) until `seconds` passed.
async fn create_delete(
    cluster: &LocalCluster,
    clients: u64,
    seconds: Duration,
    size: u64,
) -> anyhow::Result<Throughput> {
    let mut channels: Vec<Channel> = Vec::new();
    for uri in cluster.all_uris() {
        for _ in 0..CONNECTIONS_PER_REPLICA {
            channels.push(connect(&uri).await?);
        }
    }
    let started = Instant::now();
    let deadline = started + seconds;
    let mut tasks = JoinSet::new();
    for client in 0..clients as usize {
        let replica = client % REPLICAS as usize;
        let connection = (client / REPLICAS as usize) % CONNECTIONS_PER_REPLICA;
        let mut api =
            PalisadeClient::new(channels[replica * CONNECTIONS_PER_REPLICA + connection].clone());
        tasks.spawn(async move {
            let mut creates = Vec::new();
            let mut deletes = Vec::new();
            let mut errors = Vec::new();
            let mut serial = 0u64;
            while Instant::now() < deadline {
                serial += 1;
                let sent = Instant::now();
                let created = api
                    .create_sandbox(v1::CreateSandboxRequest {
                        name: format!("load-{size}-{client}-{serial}"),
                        spec: Some(v1::SandboxSpec::default()),
                        request_id: palisade_proto::new_request_id(),
                        ..Default::default()
                    })
                    .await;
                let id = match created {
                    Ok(answer) => {
                        creates.push(sent.elapsed());
                        answer
                            .into_inner()
                            .metadata
                            .map(|meta| meta.id)
                            .unwrap_or_default()
                    }
                    Err(status) => {
                        errors.push(format!("create: {:?}: {}", status.code(), status.message()));
                        continue;
                    }
                };
                let sent = Instant::now();
                let deleted = api
                    .delete_sandbox(v1::DeleteSandboxRequest {
                        sandbox: Some(v1::SandboxRef {
                            id,
                            ..Default::default()
                        }),
                        request_id: palisade_proto::new_request_id(),
                        ..Default::default()
                    })
                    .await;
                match deleted {
                    Ok(_) => deletes.push(sent.elapsed()),
                    Err(status) => {
                        errors.push(format!("delete: {:?}: {}", status.code(), status.message()))
                    }
                }
            }
            (creates, deletes, errors)
        });
    }
    let mut result = Throughput {
        pairs: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        creates: Vec::new(),
        deletes: Vec::new(),
    };
    while let Some(joined) = tasks.join_next().await {
        let (creates, deletes, errors) = joined.context("a client task failed")?;
        result.pairs += deletes.len();
        result.creates.extend(creates);
        result.deletes.extend(deletes);
        result.errors += errors.len();
        if result.first_error.is_none() {
            result.first_error = errors.into_iter().next();
        }
    }
    result.elapsed = started.elapsed();
    result.creates.sort();
    result.deletes.sort();
    Ok(result)
}

/// Starts a fourth replica, empty, adds it as a learner through the
/// leader, and times until it applied what the leader had applied when it
/// was added.
async fn learner_catch_up(
    cluster: &mut LocalCluster,
    metrics: &BTreeMap<u64, String>,
    gateway_args: &[String],
) -> anyhow::Result<Duration> {
    let leader = wait_settled(cluster, metrics).await?;
    let leader_uri = cluster.replica(leader).uri();
    let learner_id = REPLICAS + 1;
    let learner_metrics = format!("127.0.0.1:{}", palisade_testkit::ports::free_port()?);
    let mut args: Vec<&str> = gateway_args.iter().map(String::as_str).collect();
    args.extend(["--metrics-listen", &learner_metrics]);
    let learner = cluster.start_joining(learner_id, &args)?;
    let learner_address = learner.peer_address().to_string();
    // Up before it is added, so the catch-up alone is timed.
    let deadline = Instant::now() + SLOW_STEP_TIMEOUT;
    while scrape(&learner_metrics).await.is_none() {
        if Instant::now() > deadline {
            bail!("the learner did not come up");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let target = metric(
        &scrape(&metrics[&leader])
            .await
            .context("the leader does not answer")?,
        "palisade_raft_applied_index",
    );
    let started = Instant::now();
    let mut admin = ClusterAdminClient::new(connect(&leader_uri).await?);
    let adding = tokio::spawn(async move {
        admin
            .add_learner(v1::AddLearnerRequest {
                node_id: learner_id,
                address: learner_address,
            })
            .await
    });
    wait_applied(
        cluster,
        &learner_metrics,
        target,
        started + SLOW_STEP_TIMEOUT,
    )
    .await?;
    let took = started.elapsed();
    // The call may end (its deadline) before the catch-up does; only a
    // refusal is an error.
    if let Ok(Err(status)) = adding.await
        && status.code() != tonic::Code::DeadlineExceeded
    {
        bail!("AddLearner failed: {status}");
    }
    Ok(took)
}

fn print_size(measured: &Measured) {
    let throughput = &measured.throughput;
    println!(
        "{} sandboxes: {} clients created and deleted {} sandboxes in {:.1} s ({:.0} pairs/s; create p50 {:.1} / p99 {:.1} ms, delete p50 {:.1} / p99 {:.1} ms); {} errors",
        measured.sandboxes,
        measured.clients,
        throughput.pairs,
        throughput.elapsed.as_secs_f64(),
        throughput.pairs_per_second(),
        millis(percentile(&throughput.creates, 0.5)),
        millis(percentile(&throughput.creates, 0.99)),
        millis(percentile(&throughput.deletes, 0.5)),
        millis(percentile(&throughput.deletes, 0.99)),
        throughput.errors,
    );
    if let Some(error) = &throughput.first_error {
        println!("  first error: {error}");
    }
    if let Some(catch_up) = measured.catch_up {
        println!(
            "{} sandboxes: a new learner caught up in {:.1} s",
            measured.sandboxes,
            catch_up.as_secs_f64()
        );
    }
}

fn print_summary(results: &[Measured]) {
    let mut table = Table::new(
        &[
            "sandboxes",
            "load s",
            "heap B/sandbox",
            "decoded B/sandbox",
            "snapshot MiB",
            "install s",
            "build s",
            "restore+start s",
            "replica RSS MiB",
            "learner s",
            "pairs/s",
            "create p99 ms",
            "delete p99 ms",
        ],
        0,
    );
    for measured in results {
        let rss_max = measured.rss_bytes.iter().copied().max().unwrap_or(0);
        table.row(vec![
            measured.sandboxes.to_string(),
            format!("{:.1}", measured.load.as_secs_f64()),
            format!(
                "{:.0}",
                measured.heap_bytes as f64 / measured.sandboxes as f64
            ),
            format!(
                "{:.0}",
                measured.decoded_heap_bytes as f64 / measured.sandboxes as f64
            ),
            format!("{:.1}", mib(measured.encoded_bytes)),
            format!("{:.2}", measured.install.as_secs_f64()),
            format!("{:.2}", measured.build.as_secs_f64()),
            format!("{:.1}", measured.cluster_start.as_secs_f64()),
            format!("{:.0}", mib(rss_max)),
            measured
                .catch_up
                .map_or("-".into(), |took| format!("{:.1}", took.as_secs_f64())),
            format!("{:.0}", measured.throughput.pairs_per_second()),
            format!(
                "{:.1}",
                millis(percentile(&measured.throughput.creates, 0.99))
            ),
            format!(
                "{:.1}",
                millis(percentile(&measured.throughput.deletes, 0.99))
            ),
        ]);
    }
    println!();
    print!("{table}");
    let (Some(small), Some(large)) = (results.first(), results.last()) else {
        return;
    };
    if large.sandboxes <= small.sandboxes {
        return;
    }
    let added = (large.sandboxes - small.sandboxes) as f64;
    let rss = |measured: &Measured| measured.rss_bytes.iter().copied().max().unwrap_or(0) as f64;
    let per_sandbox_rss = (rss(large) - rss(small)) / added;
    let per_sandbox_heap = large.heap_bytes as f64 / large.sandboxes as f64;
    let per_sandbox_decoded = large.decoded_heap_bytes as f64 / large.sandboxes as f64;
    let ratio = large.throughput.pairs_per_second() / small.throughput.pairs_per_second().max(1e-9);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!();
    println!(
        "targets (issue 18), {} vs {} sandboxes:",
        large.sandboxes, small.sandboxes
    );
    println!(
        "- state memory per sandbox: {per_sandbox_heap:.0} B of heap as applied, {per_sandbox_decoded:.0} B as decoded from a snapshot (< 1024: {}); a replica's resident memory grows by {per_sandbox_rss:.0} B per sandbox (allocator size classes and all it keeps beside the state)",
        verdict(per_sandbox_heap.max(per_sandbox_decoded) < 1024.0)
    );
    println!(
        "- snapshot build: {:.1} s (< 10 s: {})",
        large.build.as_secs_f64(),
        verdict(large.build < Duration::from_secs(10))
    );
    if let Some(catch_up) = large.catch_up {
        println!(
            "- learner catch-up from the snapshot: {:.1} s (< 20 s: {})",
            catch_up.as_secs_f64(),
            verdict(catch_up < Duration::from_secs(20))
        );
    }
    println!(
        "- throughput: {:.0} vs {:.0} create+delete pairs/s = {:.2} (>= 0.80: {})",
        large.throughput.pairs_per_second(),
        small.throughput.pairs_per_second(),
        ratio,
        verdict(ratio >= 0.8)
    );
}
