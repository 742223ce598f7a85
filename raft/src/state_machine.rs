//! `LifecycleStateMachine`: openraft's state machine, backed by the pure
//! lifecycle core, and `StateHandle`, the read side the gateway uses.
//!
//! The state lives in memory behind a `std::sync::RwLock` — but for its
//! request receipts, which live in a table on disk
//! ([`crate::receipt_store`]): every critical
//! section is short and never awaits, so a blocking lock is cheaper and
//! simpler than an async one. Durability comes from the Raft log (committed
//! entries are re-applied after a restart) and from snapshots written
//! atomically by [`palisade_storage::SnapshotFiles`]. Every applied index is
//! published on a `watch` channel so the effect executor wakes up when the
//! state moves; request handlers waiting on one sandbox are woken only by
//! batches that touched it ([`crate::waiters`]).
//!
//! # The state's byte size
//!
//! The state travels whole in every snapshot, and a snapshot larger than
//! [`SNAPSHOT_BYTES_MAX`](crate::network::SNAPSHOT_BYTES_MAX) (16 GiB) can
//! never be sent to a follower; all of it but the request receipts (on
//! disk) is in memory. So the state's encoded size is tracked, whole and
//! without its receipts: exact whenever the state is encoded (snapshot
//! build, install, restore, `cluster status`), and between two encodings
//! grown by the encoded size of every command applied since — an upper
//! bound, since a command adds at most about its own size to the state (a
//! delete shrinks it). The gateway refuses commands that can grow the
//! state once either estimate reaches its ceiling: [`STATE_BYTES_MAX`]
//! without the receipts (memory), [`SNAPSHOT_BYTES_BUDGET`] with them
//! (see `cluster status`, `state_bytes` and `snapshot_bytes`). Snapshots
//! themselves are files, never all in memory
//! (`palisade_storage::snapshot_bytes`).

//!
//! Fail-stop: a panic while the state is being changed leaves it
//! half-applied and its lock poisoned. In a server that panic already ended
//! the process (`panic = "abort"` in release builds, the server's panic
//! hook in every build); where it did not (a replica inside a test
//! process), nothing may go on from that state: readers panic with
//! [`POISONED`] instead of reading it, and apply, snapshot builds and
//! installs fail with a storage error, which stops Raft (`Fatal`), which
//! stops the replica (`palisade_gateway::node`).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::StreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use palisade_lifecycle::{Census, LogPosition, Outcome, Receipts, State};
use palisade_storage::{Saved, SnapshotFiles};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::feature_level::ClusterLevel;
use crate::hooks::{FaultPoint, FaultPoints};
use crate::receipt_store::{DiskReceipts, ReceiptFiles};
use crate::types::{
    LogId, NodeId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};
use crate::waiters::{SandboxWaiter, SandboxWaiters};

/// Everything the state machine holds: the lifecycle state plus the Raft
/// bookkeeping that must move with it atomically.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppliedState {
    /// The lifecycle state.
    pub state: State,
    /// Last log id applied to `state`.
    pub last_applied: Option<LogId>,
    /// Last membership applied.
    pub membership: StoredMembership,
}

/// What happened to a sandbox at one log index, for watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxChange {
    /// Created by this entry.
    Added,
    /// Changed by this entry.
    Modified,
    /// Removed by this entry (the sandbox is as it was last).
    Deleted,
}

/// One sandbox change, in log order.
#[derive(Debug, Clone)]
pub struct SandboxEvent {
    /// Log index of the entry (the sandbox's new resource version).
    pub index: u64,
    /// What happened.
    pub change: SandboxChange,
    /// The sandbox after the change (before it, for `Deleted`).
    pub sandbox: palisade_lifecycle::Sandbox,
}

/// Most recent sandbox changes, for watchers that resume from a resource
/// version. Bounded: a watcher further behind must list again.
pub const WATCH_EVENTS_RETAINED_MAX: usize = 16_384;

/// The retained changes: every change with an index above `floor` is here.
#[derive(Debug, Default)]
pub struct EventLog {
    /// Changes at indexes in (`floor`, applied index], oldest first.
    events: std::collections::VecDeque<SandboxEvent>,
    /// Changes at or below this index are no longer retained.
    floor: u64,
}

impl EventLog {
    /// The first `limit` changes after `index`, or `None` if some were
    /// already dropped (the watcher must list again).
    pub fn after(&self, index: u64, limit: usize) -> Option<Vec<SandboxEvent>> {
        Some(self.retained_after(index)?.take(limit).cloned().collect())
    }

    /// The index and sandbox id of every change after `index`, oldest
    /// first: what [`Self::after`] returns, without copying the sandboxes
    /// (the executor's agenda needs only which ones changed). `None` if
    /// some were already dropped.
    pub fn changed_after(&self, index: u64) -> Option<Vec<(u64, String)>> {
        Some(
            self.retained_after(index)?
                .map(|event| (event.index, event.sandbox.id.clone()))
                .collect(),
        )
    }

    /// The changes after `index`, oldest first, or `None` if some were
    /// already dropped.
    fn retained_after(&self, index: u64) -> Option<impl Iterator<Item = &SandboxEvent>> {
        if index < self.floor {
            return None;
        }
        let start = self.events.partition_point(|event| event.index <= index);
        Some(self.events.range(start..))
    }

    fn push(&mut self, event: SandboxEvent) {
        if self.events.len() == WATCH_EVENTS_RETAINED_MAX
            && let Some(dropped) = self.events.pop_front()
        {
            self.floor = self.floor.max(dropped.index);
        }
        self.events.push_back(event);
    }

    fn reset(&mut self, floor: u64) {
        self.events.clear();
        self.floor = floor;
    }
}

/// Ceiling of the state's encoded size without its request receipts: what
/// a replica holds in memory (sandboxes, workspaces, tokens, owned
/// records; the receipts live on disk). The gateway refuses commands that
/// grow the state (RESOURCE_EXHAUSTED / STATE_BUDGET_EXHAUSTED) above it;
/// deletes and retries of applied requests still pass.
///
/// 1 GiB: a million sandboxes as a gateway creates them encode to ~680 MB
/// (`palisade-scale`, issue 18) and take ~1.1 KB each of a replica's
/// resident memory, so the ceiling holds a million and half again as many
/// in ~1.7 GB per replica (a snapshot build copies the sandboxes while it
/// encodes them: twice that at its peak). At 512 MiB a million sandboxes
/// were over the ceiling and every create was refused.
pub const STATE_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Ceiling of the state's whole encoded size, receipts included: what a
/// snapshot carries. Half of what a snapshot transfer may carry
/// ([`SNAPSHOT_BYTES_MAX`](crate::network::SNAPSHOT_BYTES_MAX), 16 GiB),
/// leaving room for the estimate's error and for the commands already
/// admitted when it is reached; refused like [`STATE_BYTES_MAX`]. At
/// ~370 bytes a receipt, 8 GiB hold ~23 million receipts: a day of
/// requests with request ids at ~270 a second, sustained.
pub const SNAPSHOT_BYTES_BUDGET: u64 = 8 * 1024 * 1024 * 1024;

/// Buffer between the encoder and a writer (serde_json writes in small
/// pieces).
const ENCODE_BUFFER_BYTES: usize = 64 * 1024;

/// A writer that counts what passes through it.
struct Counted<W> {
    out: W,
    bytes: u64,
}

impl<W: io::Write> io::Write for Counted<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.out.write(bytes)?;
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Encoded size of `value` (JSON, as in snapshots).
fn encoded_bytes(value: &impl Serialize) -> u64 {
    palisade_lifecycle::receipts::json_bytes(value)
}

/// The state's size, whole and without its receipts: `measured` bytes when
/// it was last encoded whole (of which `receipts` were its request
/// receipts), `memory_measured` bytes without receipts when that was last
/// measured, each plus the bytes of commands applied since (`grown`,
/// `memory_grown`; see the module doc).
#[derive(Debug, Default)]
struct StateBytes {
    measured: AtomicU64,
    receipts: AtomicU64,
    grown: AtomicU64,
    memory_measured: AtomicU64,
    memory_grown: AtomicU64,
    /// The whole size of the last snapshot built, loaded or installed
    /// (the empty state's before any).
    last_snapshot: AtomicU64,
}

/// The growth counted up to a copy of the state (see [`copy_of`]).
#[derive(Debug, Clone, Copy)]
struct GrowthBefore {
    whole: u64,
    memory: u64,
}

impl StateBytes {
    /// The whole state, receipts included: what a snapshot carries.
    fn snapshot_estimate(&self) -> u64 {
        self.measured
            .load(Ordering::Relaxed)
            .saturating_add(self.grown.load(Ordering::Relaxed))
    }

    /// The state without its receipts (they live on disk): what the
    /// replica holds in memory.
    fn in_memory_estimate(&self) -> u64 {
        self.memory_measured
            .load(Ordering::Relaxed)
            .saturating_add(self.memory_grown.load(Ordering::Relaxed))
    }

    /// A command of `bytes` was applied.
    fn grow(&self, bytes: u64) {
        self.grown.fetch_add(bytes, Ordering::Relaxed);
        self.memory_grown.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The state measured `bytes`, `receipts` of them its receipts, after
    /// `before` of the growth counted so far (what was applied after the
    /// measured copy stays).
    fn measured(&self, bytes: u64, receipts: u64, before: GrowthBefore) {
        let receipts = receipts.min(bytes);
        self.measured.store(bytes, Ordering::Relaxed);
        self.receipts.store(receipts, Ordering::Relaxed);
        forget(&self.grown, before.whole);
        self.memory_measured
            .store(bytes - receipts, Ordering::Relaxed);
        forget(&self.memory_grown, before.memory);
    }

    /// A snapshot of `bytes`, `receipts` of them its receipts, was built
    /// of the state after `before` of the growth counted so far.
    fn built(&self, bytes: u64, receipts: u64, before: GrowthBefore) {
        self.measured(bytes, receipts, before);
        self.last_snapshot.store(bytes, Ordering::Relaxed);
    }

    /// The state without its receipts measured `bytes`, after `before` of
    /// the growth counted so far.
    fn memory_measured(&self, bytes: u64, before: GrowthBefore) {
        self.memory_measured.store(bytes, Ordering::Relaxed);
        forget(&self.memory_grown, before.memory);
    }

    /// The state was replaced by one of `bytes`, `receipts` of them its
    /// receipts (an installed snapshot): no growth since.
    fn replaced(&self, bytes: u64, receipts: u64) {
        let receipts = receipts.min(bytes);
        self.measured.store(bytes, Ordering::Relaxed);
        self.last_snapshot.store(bytes, Ordering::Relaxed);
        self.receipts.store(receipts, Ordering::Relaxed);
        self.grown.store(0, Ordering::Relaxed);
        self.memory_measured
            .store(bytes - receipts, Ordering::Relaxed);
        self.memory_grown.store(0, Ordering::Relaxed);
    }
}

/// Takes `counted` growth off `grown` (growth counted after it stays).
fn forget(grown: &AtomicU64, counted: u64) {
    let _ = grown.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |grown| {
        Some(grown.saturating_sub(counted))
    });
}

/// Why the applied state may not be used: see the module doc.
pub const POISONED: &str = "the applied state is poisoned: a panic happened while a log entry was \
     being applied, so the state may be half-applied; this replica must stop (fail-stop) and be \
     restarted, which rebuilds the state from its snapshot and log";

/// Readers of a poisoned state: fail loudly (see the module doc).
fn poisoned<T>(_: PoisonError<T>) -> T {
    panic!("{POISONED}")
}

/// Writers of a poisoned state: a storage error, which stops Raft.
fn poisoned_io<T>(_: PoisonError<T>) -> io::Error {
    io::Error::other(POISONED)
}

struct Shared {
    applied: RwLock<AppliedState>,
    /// The state's encoded size, tracked (read without the lock).
    bytes: StateBytes,
    /// Recent sandbox changes; its own lock so watchers never hold up reads.
    events: RwLock<EventLog>,
    /// Sandbox counts, kept at apply (changed only under the `applied`
    /// write lock, taken after it); its own lock so a scrape or the status
    /// page reads them without the state's lock and without a full scan.
    census: Mutex<Census>,
    /// Applied index, published after every apply batch and snapshot install.
    applied_index: watch::Sender<u64>,
    /// Request handlers waiting on particular sandboxes ([`crate::waiters`]).
    waiters: Arc<SandboxWaiters>,
    /// The state's feature level, published after a raise is applied or a
    /// snapshot installed (the peer transport reads it per message).
    cluster_level: ClusterLevel,
}

/// Read access to the replica's applied state, cheap to clone.
#[derive(Clone)]
pub struct StateHandle {
    shared: Arc<Shared>,
}

impl StateHandle {
    /// Runs `read` on the applied state. Keep it short: apply waits for it.
    pub fn read<T>(&self, read: impl FnOnce(&AppliedState) -> T) -> T {
        let guard = self.shared.applied.read().unwrap_or_else(poisoned);
        read(&guard)
    }

    /// The applied feature level, readable without the state's lock.
    pub fn cluster_level(&self) -> ClusterLevel {
        self.shared.cluster_level.clone()
    }

    /// Whether a panic left the applied state half-applied (see the module
    /// doc): the replica cannot serve correctly any more.
    pub fn is_poisoned(&self) -> bool {
        self.shared.applied.is_poisoned()
            || self.shared.events.is_poisoned()
            || self.shared.census.is_poisoned()
    }

    /// Index of the last applied log entry (0 before any).
    pub fn applied_index(&self) -> u64 {
        *self.shared.applied_index.borrow()
    }

    /// The state's encoded size in bytes without its request receipts
    /// (they live on disk): what this replica holds in memory, budgeted by
    /// [`STATE_BYTES_MAX`]. Exact when last encoded, plus an upper bound of
    /// what was applied since (see the module doc).
    pub fn state_bytes(&self) -> u64 {
        self.shared.bytes.in_memory_estimate()
    }

    /// The state's whole encoded size, receipts included: what a snapshot
    /// carries, budgeted by [`SNAPSHOT_BYTES_BUDGET`]. Exact when last
    /// encoded, plus an upper bound of what was applied since.
    pub fn snapshot_bytes(&self) -> u64 {
        self.shared.bytes.snapshot_estimate()
    }

    /// The whole encoded size of the state's last snapshot (built, or the
    /// one it was loaded from or installed), receipts included: a figure
    /// neither an applied command nor a digest moves, which
    /// `palisade_gateway::snapshot_cadence` spaces snapshots by. Before
    /// the first snapshot, the empty state's size.
    pub fn last_snapshot_bytes(&self) -> u64 {
        self.shared.bytes.last_snapshot.load(Ordering::Relaxed)
    }

    /// Encodes the applied state once for `use_encoded` (e.g. a digest)
    /// and records its exact size.
    ///
    /// The state is copied under the read lock and encoded after the lock
    /// is released, like a snapshot build: the copy costs O(sandboxes)
    /// (receipts are a frozen view of their table), the encoding
    /// O(state), and apply must not wait for the latter. Encoding a
    /// 200 MiB state under the lock held apply (and every write behind
    /// it) for over a second each time a digest was taken.
    pub fn with_encoded<T>(&self, use_encoded: impl FnOnce(&AppliedState, &[u8]) -> T) -> T {
        let (copy, grown_before) = copy_of(&self.shared).unwrap_or_else(|_| panic!("{POISONED}"));
        let encoded = serde_json::to_vec(&copy.state).unwrap_or_default();
        self.shared.bytes.measured(
            encoded.len() as u64,
            copy.state.receipts.encoded_bytes(),
            grown_before,
        );
        use_encoded(&copy, &encoded)
    }

    /// Measures the state without its receipts exactly (a copy under the
    /// read lock, its receipts left out, encoded into a counter after the
    /// lock): O(sandboxes), never O(receipts). The estimate of
    /// [`StateHandle::state_bytes`] otherwise only grows between two
    /// snapshots (a command adds its own size, a delete too), and
    /// snapshots of a state made mostly of receipts are far apart.
    pub fn measure_in_memory(&self) -> io::Result<u64> {
        let (mut copy, before) = copy_of(&self.shared)?;
        copy.state.receipts = Default::default();
        let bytes = encoded_bytes(&copy.state);
        self.shared.bytes.memory_measured(bytes, before);
        Ok(bytes)
    }

    /// Bytes of commands applied since the state without its receipts was
    /// last measured (see [`StateHandle::measure_in_memory`]).
    pub fn in_memory_growth(&self) -> u64 {
        self.shared.bytes.memory_grown.load(Ordering::Relaxed)
    }

    /// Encodes the applied state into `out` a piece at a time (a digest: it
    /// is never all in memory), records its exact size, and answers the
    /// log id it was applied up to. Copied under the read lock and encoded
    /// after it, like [`StateHandle::with_encoded`].
    pub fn encode_into(&self, out: impl io::Write) -> io::Result<Option<LogId>> {
        self.encode_into_with(out, |applied| applied.last_applied)
    }

    /// [`StateHandle::encode_into`], answering what `describe` reads from
    /// the copy that was encoded (a backup's header: its applied log id
    /// and cluster id belong to exactly the bytes written).
    pub fn encode_into_with<T>(
        &self,
        out: impl io::Write,
        describe: impl FnOnce(&AppliedState) -> T,
    ) -> io::Result<T> {
        let (copy, grown_before) = copy_of(&self.shared)?;
        let mut counted = Counted { out, bytes: 0 };
        serde_json::to_writer(
            io::BufWriter::with_capacity(ENCODE_BUFFER_BYTES, &mut counted),
            &copy.state,
        )
        .map_err(io::Error::other)?;
        self.shared.bytes.measured(
            counted.bytes,
            copy.state.receipts.encoded_bytes(),
            grown_before,
        );
        Ok(describe(&copy))
    }

    /// The sandbox counts of the applied state (kept at apply: a copy of
    /// a few numbers per workspace, no scan of the state).
    pub fn census(&self) -> Census {
        self.shared.census.lock().unwrap_or_else(poisoned).clone()
    }

    /// Registers a wait on `sandbox_id`: woken after every apply batch that
    /// touched it, or that changed something not tied to a sandbox (see
    /// [`crate::waiters`]).
    pub fn wait_on_sandbox(&self, sandbox_id: &str) -> SandboxWaiter {
        self.shared.waiters.register(sandbox_id)
    }

    /// A receiver that changes whenever the applied index moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.applied_index.subscribe()
    }

    /// The first `limit` sandbox changes after `index` (see
    /// [`EventLog::after`]).
    pub fn events_after(&self, index: u64, limit: usize) -> Option<Vec<SandboxEvent>> {
        self.shared
            .events
            .read()
            .unwrap_or_else(poisoned)
            .after(index, limit)
    }

    /// The index and sandbox id of every sandbox change after `index` (see
    /// [`EventLog::changed_after`]).
    pub fn sandboxes_changed_after(&self, index: u64) -> Option<Vec<(u64, String)>> {
        self.shared
            .events
            .read()
            .unwrap_or_else(poisoned)
            .changed_after(index)
    }

    /// Waits until the applied index reaches `index`.
    pub async fn wait_applied(&self, index: u64) {
        let mut receiver = self.subscribe();
        // An error means the state machine is gone (shutdown): stop waiting.
        let _ = receiver.wait_for(|applied| *applied >= index).await;
    }
}

/// openraft's state machine for Palisade.
pub struct LifecycleStateMachine {
    shared: Arc<Shared>,
    snapshots: Arc<SnapshotFiles<SnapshotMeta>>,
    /// Where the state's receipts are kept: a table on disk, a new one
    /// for each installed snapshot ([`crate::receipt_store`]).
    receipt_files: ReceiptFiles,
    /// Test and chaos hook, awaited before a snapshot is installed and
    /// called inside apply ([`crate::hooks`]); `None` in production.
    fault_points: Option<(NodeId, Arc<dyn FaultPoints>)>,
    /// Apply latency and committed proposals (`--metrics-listen`).
    metrics: Option<palisade_metrics::RaftMetrics>,
    /// The log database's `format` record, raised to the feature level
    /// before a raise is applied or a snapshot of a higher level installed
    /// ([`crate::feature_level`]); `None` in tests without a log store.
    format_record: Option<palisade_storage::FormatRecord>,
}

impl LifecycleStateMachine {
    /// Opens the state machine whose snapshots live in `snapshot_dir`,
    /// restoring the last snapshot if there is one.
    pub fn open(snapshot_dir: &Path) -> io::Result<Self> {
        let snapshots = SnapshotFiles::<SnapshotMeta>::open(snapshot_dir)?;
        let mut receipt_files = ReceiptFiles::open(snapshot_dir)?;
        let loaded = snapshots.open_current()?;
        let measured = match &loaded {
            Some((_, data)) => data.len(),
            None => encoded_bytes(&State::default()),
        };
        let table = if receipts_on_disk() {
            Some(receipt_files.create()?)
        } else {
            None
        };
        let applied = match loaded {
            Some((meta, data)) => {
                let state = decode_state(&data, table, || {
                    format!("snapshot in {} does not decode", snapshot_dir.display())
                })?;
                state.assert_invariants();
                AppliedState {
                    state,
                    last_applied: meta.last_log_id,
                    membership: meta.last_membership,
                }
            }
            None => {
                let mut applied = AppliedState::default();
                if let Some(table) = table {
                    applied
                        .state
                        .receipts
                        .move_into(Box::new(table))
                        .map_err(io::Error::other)?;
                }
                applied
            }
        };
        let receipts_measured = applied.state.receipts.encoded_bytes().min(measured);
        let census = Census::of(&applied.state);
        let cluster_level = ClusterLevel::new(applied.state.feature_level);
        let index = applied.last_applied.as_ref().map_or(0, |id| id.index);
        let (applied_index, _) = watch::channel(index);
        let events = EventLog {
            events: Default::default(),
            floor: index,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                applied: RwLock::new(applied),
                bytes: {
                    let bytes = StateBytes::default();
                    bytes.replaced(measured, receipts_measured);
                    bytes
                },
                events: RwLock::new(events),
                census: Mutex::new(census),
                applied_index,
                waiters: Arc::default(),
                cluster_level,
            }),
            snapshots: Arc::new(snapshots),
            receipt_files,
            fault_points: None,
            metrics: None,
            format_record: None,
        })
    }

    /// Raises `format_record` (the log database's) to the cluster feature
    /// level whenever this replica applies a raise or installs a snapshot
    /// of a higher level, so that a release that cannot read the log
    /// refuses the data directory ([`crate::feature_level`]).
    pub fn with_format_record(mut self, format_record: palisade_storage::FormatRecord) -> Self {
        self.format_record = Some(format_record);
        self
    }

    /// Before the state moves to feature level `level`: stops this replica
    /// (fail-stop) if its build does not support the level, and records
    /// the level in the log database. `what` names where the level comes
    /// from, for the message.
    fn entering_level(&self, what: impl FnOnce() -> String, level: u32) -> io::Result<()> {
        if let Err(too_high) = crate::feature_level::check(what, level) {
            // Not an outcome of apply (another release applies the same
            // entry): this replica cannot go on, the others can.
            tracing::error!(%too_high, "stopping: feature level not supported");
            panic!("{too_high}");
        }
        if let Some(record) = &self.format_record {
            record.raise(level).map_err(io::Error::other)?;
        }
        Ok(())
    }

    /// Awaits `fault_points` (as node `node_id`) before installing each
    /// snapshot and between a build's copy and its save, and calls
    /// [`FaultPoints::applying`] inside apply.
    /// For tests and the chaos harness.
    pub fn with_fault_points(
        mut self,
        node_id: NodeId,
        fault_points: Arc<dyn FaultPoints>,
    ) -> Self {
        self.fault_points = Some((node_id, fault_points));
        self
    }

    /// Records apply latency and committed proposals into `metrics`.
    pub fn with_metrics(mut self, metrics: palisade_metrics::RaftMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The read handle for the gateway.
    pub fn handle(&self) -> StateHandle {
        StateHandle {
            shared: self.shared.clone(),
        }
    }

    fn write(&self) -> io::Result<std::sync::RwLockWriteGuard<'_, AppliedState>> {
        self.shared.applied.write().map_err(poisoned_io)
    }

    fn read_state<T>(&self, read: impl FnOnce(&State) -> T) -> io::Result<T> {
        Ok(read(
            &self.shared.applied.read().map_err(poisoned_io)?.state,
        ))
    }
}

/// The one sandbox an applied command's outcome is about, if it is about
/// exactly one: whose waiting requests it may have settled.
fn touched_sandbox(response: &palisade_lifecycle::Response) -> Option<&str> {
    match response.as_ref().ok()? {
        Outcome::OperationBegun { sandbox_id, .. }
        | Outcome::OperationJoined { sandbox_id, .. }
        | Outcome::AlreadyDone { sandbox_id }
        | Outcome::Completed { sandbox_id } => Some(sandbox_id.as_str()),
        _ => None,
    }
}

/// The watch event an applied entry produced, if it changed a sandbox: the
/// outcome names the sandbox, and a changed sandbox carries this index as
/// its resource version.
fn sandbox_event(
    state: &State,
    index: u64,
    response: &palisade_lifecycle::Response,
    before: Option<Box<palisade_lifecycle::Sandbox>>,
) -> Option<SandboxEvent> {
    use palisade_lifecycle::OperationKind;
    let outcome = response.as_ref().ok()?;
    let (sandbox_id, created) = match outcome {
        Outcome::OperationBegun {
            sandbox_id, kind, ..
        } => (sandbox_id, *kind == OperationKind::Create),
        Outcome::Completed { sandbox_id } => (sandbox_id, false),
        _ => return None,
    };
    match state.sandboxes.get(sandbox_id) {
        Some(sandbox) if sandbox.resource_version == index => Some(SandboxEvent {
            index,
            change: if created {
                SandboxChange::Added
            } else {
                SandboxChange::Modified
            },
            sandbox: (**sandbox).clone(),
        }),
        Some(_) => None,
        None => before.map(|sandbox| SandboxEvent {
            index,
            change: SandboxChange::Deleted,
            sandbox: *sandbox,
        }),
    }
}

/// Whether this replica keeps its receipts on disk
/// ([`crate::receipt_store`]): every replica but those of the
/// deterministic simulation (`chaos run --sim`), whose states hold seconds
/// of load and which must run many campaigns a minute on one thread; its
/// receipts stay in memory (the same apply, the same JSON).
fn receipts_on_disk() -> bool {
    !crate::runtime::is_simulated()
}

/// Decodes a snapshot's state. With `table`, its receipts go into the
/// table one by one as they are decoded ([`Receipts::decode_into`]), never
/// all in memory at once: installing or restarting from a snapshot of a
/// million receipts does not hold a million receipts in memory.
fn decode_state(
    data: &SnapshotData,
    table: Option<DiskReceipts>,
    what: impl FnOnce() -> String,
) -> io::Result<State> {
    let undecodable = |error: serde_json::Error| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {error}", what()))
    };
    let reader = io::BufReader::with_capacity(DECODE_BUFFER_BYTES, data.reader());
    let Some(table) = table else {
        return serde_json::from_reader(reader).map_err(undecodable);
    };
    let (decoded, unused) = Receipts::decode_into(Box::new(table), || {
        serde_json::from_reader::<_, State>(reader)
    });
    let mut state = decoded.map_err(undecodable)?;
    if let Some(table) = unused {
        // A state without receipts (the field is optional): still on disk.
        state.receipts.move_into(table).map_err(io::Error::other)?;
    }
    Ok(state)
}

/// Buffer between a snapshot's file and the decoder.
const DECODE_BUFFER_BYTES: usize = 1024 * 1024;

/// Builds a snapshot from a copy of the state taken under the read lock, so
/// serialization and the disk write run concurrently with apply.
pub struct LifecycleSnapshotBuilder {
    shared: Arc<Shared>,
    snapshots: Arc<SnapshotFiles<SnapshotMeta>>,
    /// Awaited between the copy and the save (tests and chaos only).
    fault_points: Option<(NodeId, Arc<dyn FaultPoints>)>,
}

impl LifecycleSnapshotBuilder {
    /// The state to snapshot: a copy taken under the read lock, with the
    /// growth counted up to it.
    #[cfg(test)]
    fn copy(&self) -> io::Result<(AppliedState, GrowthBefore)> {
        copy_of(&self.shared)
    }

    /// Serializes `copy` and saves it, unless a newer snapshot was put in
    /// place meanwhile (installed from the leader while this one was being
    /// built): then that one stays (see [`palisade_storage::snapshot_files`]).
    async fn persist(
        &self,
        (copy, grown_before): (AppliedState, GrowthBefore),
    ) -> Result<Snapshot, io::Error> {
        let snapshots = self.snapshots.clone();
        let shared = self.shared.clone();
        crate::runtime::blocking(move || {
            let meta = SnapshotMeta {
                last_log_id: copy.last_applied,
                last_membership: copy.membership,
            };
            // Encoded straight into the file: the snapshot is never all in
            // memory (see `palisade_storage::snapshot_bytes`).
            let (saved, data) = snapshots.save_streamed(&meta, |out| {
                serde_json::to_writer(out, &copy.state).map_err(io::Error::other)
            })?;
            let receipts_bytes = copy.state.receipts.encoded_bytes();
            shared.bytes.built(data.len(), receipts_bytes, grown_before);
            let in_memory = data.len().saturating_sub(receipts_bytes);
            if in_memory > STATE_BYTES_MAX || data.len() > SNAPSHOT_BYTES_BUDGET {
                tracing::warn!(
                    state_bytes = in_memory,
                    state_bytes_max = STATE_BYTES_MAX,
                    snapshot_bytes = data.len(),
                    snapshot_bytes_max = SNAPSHOT_BYTES_BUDGET,
                    "the state is above its byte budget; writes that grow it are refused until it shrinks"
                );
            }
            if let Saved::KeptInPlace { in_place } = saved {
                // openraft ignores a built snapshot older than its current
                // one, so answering with this one is harmless.
                tracing::info!(
                    built = ?meta.last_log_id,
                    ?in_place,
                    "a newer snapshot was installed while this one was built; kept the newer one"
                );
            }
            Ok(Snapshot {
                meta,
                snapshot: data,
            })
        })
        .await
        .map_err(io::Error::other)?
    }
}

/// The state to snapshot or encode: a copy taken under the read lock, with
/// the growth counted up to it (growth is only added under the write lock:
/// none is missed or counted twice).
fn copy_of(shared: &Shared) -> io::Result<(AppliedState, GrowthBefore)> {
    let guard = shared.applied.read().map_err(poisoned_io)?;
    let before = GrowthBefore {
        whole: shared.bytes.grown.load(Ordering::Relaxed),
        memory: shared.bytes.memory_grown.load(Ordering::Relaxed),
    };
    Ok((guard.clone(), before))
}

impl RaftSnapshotBuilder<TypeConfig> for LifecycleSnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        // Copying a large state takes a while: on the blocking pool, not on
        // one of the runtime's few threads (Raft heartbeats run there).
        let shared = self.shared.clone();
        let copy = crate::runtime::blocking(move || copy_of(&shared))
            .await
            .map_err(io::Error::other)??;
        if let Some((node_id, fault_points)) = &self.fault_points {
            let last_index = copy.0.last_applied.as_ref().map_or(0, |id| id.index);
            fault_points
                .at(*node_id, FaultPoint::SnapshotBuild { last_index })
                .await;
        }
        self.persist(copy).await
    }
}

impl RaftStateMachine<TypeConfig> for LifecycleStateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = LifecycleSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.shared.applied.read().map_err(poisoned_io)?;
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        let mut last_index = None;
        // Whom to wake after the batch: the sandboxes its entries touched,
        // or everyone for a change not tied to a sandbox.
        let mut touched: Vec<String> = Vec::new();
        let mut wake_everyone = false;
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let log_id = entry.log_id();
            let mut event = None;
            let mut raises_level = false;
            if let EntryPayload::Normal(command) = &entry.payload
                && let (palisade_lifecycle::Command::RaiseFeatureLevel { level }, _) =
                    command.unattributed()
            {
                let current = self.read_state(|state| state.feature_level)?;
                if *level > current {
                    self.entering_level(|| format!("log entry {}", log_id.index), *level)?;
                    raises_level = true;
                }
            }
            let response = {
                let mut guard = self.write()?;
                let response = match &entry.payload {
                    EntryPayload::Normal(command) => {
                        let position = LogPosition {
                            index: log_id.index,
                            term: log_id.leader_id.term,
                        };
                        // A delete's event carries the sandbox as it was last.
                        let before = match &**command {
                            palisade_lifecycle::Command::CompleteDelete { sandbox_id, .. } => {
                                guard.state.sandboxes.get(sandbox_id).cloned()
                            }
                            _ => None,
                        };
                        let started = std::time::Instant::now();
                        let response = self.shared.census.lock().map_err(poisoned_io)?.apply(
                            &mut guard.state,
                            position,
                            command,
                        );
                        // Under the write lock: see `StateHandle::with_encoded`.
                        self.shared.bytes.grow(encoded_bytes(command));
                        if let Some(metrics) = &self.metrics {
                            metrics
                                .apply_seconds
                                .observe(started.elapsed().as_secs_f64());
                            metrics.proposals_committed.inc();
                        }
                        if let Some(request) = command.request()
                            && let Some(context) = palisade_metrics::trace::recall(&request.id)
                        {
                            // Only the replicas that saw the request know its
                            // trace: the one that took it and the leader.
                            tracing::debug!(
                                trace_id = %context.trace_id,
                                index = log_id.index,
                                command = command.name(),
                                request_id = %request.id,
                                "command applied"
                            );
                        }
                        if let Some((node_id, fault_points)) = &self.fault_points {
                            fault_points.applying(*node_id, log_id.index);
                        }
                        event = sandbox_event(&guard.state, log_id.index, &response, before);
                        match touched_sandbox(&response) {
                            Some(sandbox_id) => touched.push(sandbox_id.to_owned()),
                            None => wake_everyone = true,
                        }
                        response
                    }
                    EntryPayload::Membership(membership) => {
                        guard.membership = StoredMembership::new(Some(log_id), membership.clone());
                        Ok(Outcome::NotACommand)
                    }
                    EntryPayload::Blank => Ok(Outcome::NotACommand),
                };
                guard.last_applied = Some(log_id);
                if raises_level {
                    self.shared.cluster_level.publish(guard.state.feature_level);
                }
                response
            };
            last_index = Some(log_id.index);
            if let Some(event) = event {
                self.shared.events.write().map_err(poisoned_io)?.push(event);
            }
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        // The receipt table commits the batch's changes (or a few
        // batches' at once: see `receipt_store::COMMIT_INTERVAL`).
        self.write()?
            .state
            .receipts
            .end_batch()
            .map_err(io::Error::other)?;
        if let Some(index) = last_index {
            self.shared.applied_index.send_replace(index);
        }
        if wake_everyone {
            self.shared.waiters.wake_everyone();
        } else {
            self.shared.waiters.wake(touched.iter().map(String::as_str));
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        LifecycleSnapshotBuilder {
            shared: self.shared.clone(),
            snapshots: self.snapshots.clone(),
            fault_points: self.fault_points.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        // A table of its own: a snapshot build may still read the one the
        // replaced state used.
        let table = if receipts_on_disk() {
            Some(self.receipt_files.create()?)
        } else {
            None
        };
        // Decoding and moving the receipts are O(snapshot): on the blocking
        // pool, not on the runtime's few threads (Raft heartbeats run there).
        let (state, snapshot) = crate::runtime::blocking(move || {
            let state = decode_state(&snapshot, table, || {
                "received snapshot does not decode".to_string()
            })?;
            state.assert_invariants();
            Ok::<_, io::Error>((state, snapshot))
        })
        .await
        .map_err(io::Error::other)??;
        self.entering_level(
            || format!("the snapshot received up to {:?}", meta.last_log_id),
            state.feature_level,
        )?;
        if let Some((node_id, fault_points)) = &self.fault_points {
            let last_index = meta.last_log_id.as_ref().map_or(0, |id| id.index);
            fault_points
                .at(*node_id, FaultPoint::SnapshotInstall { last_index })
                .await;
        }
        // Persist first: if we crash after the rename, the restart restores
        // this snapshot; before it, the old snapshot plus the log.
        let snapshots = self.snapshots.clone();
        let snapshot_bytes = snapshot.len();
        let (meta_copy, data) = (meta.clone(), snapshot);
        let (saved, _) = crate::runtime::blocking(move || {
            snapshots.save_streamed(&meta_copy, |out| {
                io::copy(&mut data.reader(), out).map(|_| ())
            })
        })
        .await
        .map_err(io::Error::other)??;
        if let Saved::KeptInPlace { in_place } = saved {
            // openraft installs only snapshots past what this replica
            // applied, so this is not expected; the newer file is the one a
            // restart can continue from, and the log replays the rest.
            tracing::warn!(
                installed = ?meta.last_log_id,
                ?in_place,
                "installed a snapshot older than the one on disk; kept the file"
            );
        }
        let index = meta.last_log_id.as_ref().map_or(0, |id| id.index);
        let census = Census::of(&state);
        let replaced = {
            let mut guard = self.write()?;
            self.shared.cluster_level.publish(state.feature_level);
            *self.shared.census.lock().map_err(poisoned_io)? = census;
            self.shared
                .bytes
                .replaced(snapshot_bytes, state.receipts.encoded_bytes());
            std::mem::replace(
                &mut *guard,
                AppliedState {
                    state,
                    last_applied: meta.last_log_id,
                    membership: meta.last_membership.clone(),
                },
            )
        };
        // Dropping the replaced state closes its receipt table (redb writes
        // its allocator state then): after the lock, off the runtime's threads.
        crate::runtime::blocking(move || drop(replaced))
            .await
            .map_err(io::Error::other)?;
        // The changes the snapshot skipped over are unknown: watchers from
        // before it must list again.
        self.shared
            .events
            .write()
            .map_err(poisoned_io)?
            .reset(index);
        self.shared.applied_index.send_replace(index);
        self.shared.waiters.wake_everyone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let snapshots = self.snapshots.clone();
        let loaded = crate::runtime::blocking(move || snapshots.open_current())
            .await
            .map_err(io::Error::other)??;
        Ok(loaded.map(|(meta, data)| Snapshot {
            meta,
            snapshot: data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(term.into(), index)
    }

    /// A sandbox as a create makes it, named and identified by `id`.
    fn created_sandbox(id: &str) -> palisade_lifecycle::Sandbox {
        let mut state = State::new();
        let create = palisade_lifecycle::Command::BeginCreate {
            id: id.into(),
            workspace: "default".into(),
            name: id.into(),
            spec: Default::default(),
            labels: Default::default(),
            annotations: Default::default(),
            time_ms: 1,
            host_identity: "ssh-ed25519 AAAAevents".into(),
            request: palisade_lifecycle::RequestMeta {
                id: format!("request-{id}"),
                payload_digest: "digest".into(),
                time_ms: 1,
            },
        };
        let position = LogPosition { index: 1, term: 1 };
        let response = palisade_lifecycle::apply(&mut state, position, &create);
        assert!(response.is_ok(), "{response:?}");
        (*state.sandboxes[id]).clone()
    }

    /// The executor's agenda reads which sandboxes changed after an index
    /// without copying them: the same changes, in the same order, as the
    /// events watchers read, and `None` once some were dropped.
    #[test]
    fn changed_sandboxes_are_the_retained_events_without_the_copies() {
        let mut log = EventLog::default();
        for (index, id) in [(3, "a"), (4, "b"), (6, "a"), (9, "c")] {
            log.push(SandboxEvent {
                index,
                change: SandboxChange::Modified,
                sandbox: created_sandbox(id),
            });
        }
        for after in [0, 3, 5, 6, 9, 12] {
            let events: Vec<(u64, String)> = log
                .after(after, usize::MAX)
                .unwrap()
                .into_iter()
                .map(|event| (event.index, event.sandbox.id))
                .collect();
            assert_eq!(log.changed_after(after).unwrap(), events, "after {after}");
        }
        assert_eq!(
            log.changed_after(5).unwrap(),
            vec![(6, "a".to_string()), (9, "c".to_string())]
        );
        log.reset(7);
        assert_eq!(log.changed_after(6), None);
        assert_eq!(log.changed_after(7), Some(Vec::new()));
    }

    /// The race: a snapshot build copies the state at 100 and serializes it
    /// in the background; meanwhile the leader's snapshot at 200 is
    /// installed (and openraft purges the log up to it); then the build
    /// finishes. The replica must restart from 200, not from 100 followed
    /// by a gap in its log.
    #[tokio::test]
    async fn a_build_that_finishes_after_an_install_keeps_the_installed_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = LifecycleStateMachine::open(dir.path()).unwrap();
        machine.write().unwrap().last_applied = Some(log_id(1, 100));

        let builder = machine.get_snapshot_builder().await;
        let copy = builder.copy().unwrap();
        let installed = SnapshotMeta {
            last_log_id: Some(log_id(2, 200)),
            last_membership: StoredMembership::default(),
        };
        let data = SnapshotData::from_slice(&serde_json::to_vec(&State::default()).unwrap(), None)
            .unwrap();
        machine.install_snapshot(&installed, data).await.unwrap();
        let built = builder.persist(copy).await.unwrap();
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 100)));

        let current = machine.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta.last_log_id, Some(log_id(2, 200)));
        drop(machine);
        let restarted = LifecycleStateMachine::open(dir.path()).unwrap();
        assert_eq!(restarted.handle().applied_index(), 200);
    }

    /// Receipts of settled deletes, one per request number in `numbers`.
    fn insert_receipts(state: &mut State, numbers: std::ops::Range<u64>) {
        for n in numbers {
            state.receipts.insert(
                format!("request-{n}"),
                palisade_lifecycle::Receipt {
                    rpc: palisade_lifecycle::ReceiptRpc::DeleteSandbox,
                    payload_digest: format!("{n:064x}"),
                    created_at_ms: 1,
                    created_at_index: n,
                    settled_at_ms: Some(1),
                    workspace: "default".into(),
                    result: palisade_lifecycle::ReceiptResult::Deleted {
                        sandbox_id: format!("sandbox-{n}"),
                    },
                },
            );
        }
    }

    /// The snapshot cadence spaces builds by the last snapshot's size: a
    /// build and a load set it; neither the growth each applied command
    /// counts nor a digest's measurement moves it (spaced by either, the
    /// next build could be put off for good: see
    /// `palisade_gateway::snapshot_cadence`).
    #[tokio::test]
    async fn the_last_snapshot_size_moves_only_with_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = LifecycleStateMachine::open(dir.path()).unwrap();
        let handle = machine.handle();
        let add_receipts = |machine: &LifecycleStateMachine, from: u64| {
            let mut guard = machine.write().unwrap();
            guard.last_applied = Some(log_id(1, from + 1_000));
            insert_receipts(&mut guard.state, from..from + 1_000);
        };
        add_receipts(&machine, 0);
        let mut builder = machine.get_snapshot_builder().await;
        let built = builder.build_snapshot().await.unwrap();
        let built_bytes = built.snapshot.len();
        assert!(built_bytes > 1_000 * 150, "{built_bytes}");
        assert_eq!(handle.last_snapshot_bytes(), built_bytes);

        // Commands grow the estimate, a digest measures the larger state:
        // the last snapshot's size stays.
        machine.shared.bytes.grow(600_000);
        assert!(handle.snapshot_bytes() >= built_bytes + 600_000);
        add_receipts(&machine, 1_000);
        let mut sink = Vec::new();
        handle.encode_into(&mut sink).unwrap();
        assert_eq!(handle.snapshot_bytes(), sink.len() as u64);
        assert!(handle.snapshot_bytes() > built_bytes + 1_000 * 150);
        assert_eq!(handle.last_snapshot_bytes(), built_bytes);

        // A restart loads it, with its size.
        drop(builder);
        drop(machine);
        let restarted = LifecycleStateMachine::open(dir.path()).unwrap();
        assert_eq!(restarted.handle().last_snapshot_bytes(), built_bytes);
    }

    /// The state's size is tracked whole (receipts included: what a
    /// snapshot carries) and without receipts (what memory holds); the
    /// latter is measured again on demand, O(sandboxes), after commands
    /// made its estimate grow.
    #[test]
    fn the_state_without_its_receipts_is_measured_apart_from_them() {
        let dir = tempfile::tempdir().unwrap();
        let machine = LifecycleStateMachine::open(dir.path()).unwrap();
        let handle = machine.handle();
        let empty = handle.state_bytes();
        insert_receipts(&mut machine.write().unwrap().state, 0..2_000);
        // 2,000 commands of ~300 bytes applied: both estimates grow.
        machine.shared.bytes.grow(600_000);
        assert!(handle.state_bytes() >= empty + 600_000);
        assert_eq!(handle.in_memory_growth(), 600_000);

        // Measured: without the receipts, the state is as small as it was.
        let measured = handle.measure_in_memory().unwrap();
        assert_eq!(handle.state_bytes(), measured);
        assert_eq!(handle.in_memory_growth(), 0);
        assert!(
            measured < empty + 1_000,
            "{measured} bytes without receipts"
        );
        assert!(
            handle.snapshot_bytes() >= 600_000,
            "the whole estimate stays"
        );

        // Encoded whole: exact, and the receipts are told apart.
        let mut sink = Vec::new();
        handle.encode_into(&mut sink).unwrap();
        assert_eq!(handle.snapshot_bytes(), sink.len() as u64);
        assert!(handle.snapshot_bytes() > 2_000 * 150);
        assert!(handle.state_bytes() < empty + 1_000);
    }

    /// Fail-stop: a panic while the state was being changed (here: while
    /// holding its write lock, as a panic inside `apply` does) leaves the
    /// state possibly half-applied. Nobody may use it afterwards: readers
    /// panic with [`POISONED`], apply, snapshot builds and the applied
    /// state report a storage error (which stops Raft).
    #[tokio::test]
    async fn a_panic_while_applying_poisons_the_state_for_readers_and_writers() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = LifecycleStateMachine::open(dir.path()).unwrap();
        let handle = machine.handle();
        assert!(!handle.is_poisoned());
        let shared = machine.shared.clone();
        let panicked = std::thread::spawn(move || {
            let mut guard = shared.applied.write().unwrap();
            guard.last_applied = Some(log_id(1, 7));
            panic!("injected: a panic in the middle of apply");
        })
        .join();
        assert!(panicked.is_err());

        assert!(handle.is_poisoned());
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handle.read(|applied| applied.last_applied)
        }));
        let message = read.expect_err("a reader must not read a poisoned state");
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("poisoned"), "{message}");
        let error = machine.applied_state().await.unwrap_err();
        assert!(error.to_string().contains("poisoned"), "{error}");
        let mut builder = machine.get_snapshot_builder().await;
        assert!(builder.build_snapshot().await.is_err());
        assert!(machine.write().is_err());
    }
}
