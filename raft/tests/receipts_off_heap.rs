//! A replica's request receipts do not live in its memory: receipts kept
//! for a day at any sustained write rate must not grow the heap (issue
//! 13, item 3). Counted with this test binary's own allocator, on the
//! real apply path (`palisade_lifecycle::apply`) over the replica's
//! receipt store (`palisade_raft::receipt_store`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use palisade_lifecycle::{
    Command, CompletionOf, DEFAULT_WORKSPACE, LaunchResult, LogPosition, Outcome, RequestMeta,
    SandboxSpec, SandboxTarget, State, apply,
};
use palisade_raft::receipt_store::ReceiptFiles;

/// Live heap bytes of this process.
struct Counting;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
/// The most `LIVE_BYTES` reached since it was last reset.
static PEAK_BYTES: AtomicI64 = AtomicI64::new(0);

fn grew(bytes: i64) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const EPOCH_MS: i64 = 1_700_000_000_000;
/// The table's page cache in this test: what it may keep in memory.
const CACHE_BYTES: usize = 1024 * 1024;
/// Receipts added while the heap is watched.
const RECEIPTS: u64 = 40_000;

struct Replica {
    state: State,
    index: u64,
}

impl Replica {
    fn apply(&mut self, command: Command) -> Outcome {
        // A completion is bound to the operation it completes, as the
        // executor binds it.
        let command = command.bound_to(&self.state, 1);
        self.index += 1;
        let position = LogPosition {
            index: self.index,
            term: 1,
        };
        apply(&mut self.state, position, &command).expect("the command applies")
    }

    /// A start of the running sandbox: answered `AlreadyDone`, settled at
    /// once, and kept for the retention window like any receipt.
    fn start_again(&mut self, n: u64) {
        let outcome = self.apply(Command::BeginStart {
            target: SandboxTarget::Name {
                workspace: DEFAULT_WORKSPACE.into(),
                name: "demo".into(),
            },
            expected_execution: None,
            request: RequestMeta {
                id: format!("0b3c4a4e-5a7d-4f6e-9c1b-{n:012}"),
                payload_digest: format!("{n:064x}"),
                time_ms: EPOCH_MS,
            },
        });
        assert!(
            matches!(outcome, Outcome::AlreadyDone { .. }),
            "{outcome:?}"
        );
    }
}

fn live_mib() -> f64 {
    LIVE_BYTES.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0)
}

/// A state with one running sandbox and `count` receipts in a table in
/// `files`.
fn replica_with_receipts(files: &mut ReceiptFiles, count: u64) -> Replica {
    let mut replica = Replica {
        state: State::new(),
        index: 0,
    };
    replica
        .state
        .receipts
        .move_into(Box::new(files.create().unwrap()))
        .unwrap();
    replica.apply(create_demo());
    replica.apply(launched_demo());
    for n in 0..count {
        replica.start_again(n);
        if n % 100 == 99 {
            replica.state.receipts.end_batch().unwrap();
        }
    }
    replica.state.receipts.end_batch().unwrap();
    replica
}

fn create_demo() -> Command {
    Command::BeginCreate {
        id: "a1".into(),
        workspace: DEFAULT_WORKSPACE.into(),
        name: "demo".into(),
        spec: SandboxSpec {
            command: vec!["sleep".into(), "1000".into()],
            ..Default::default()
        },
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        time_ms: EPOCH_MS,
        host_identity: "host-a1".into(),
        request: RequestMeta {
            id: "create-a1".into(),
            payload_digest: "create".into(),
            time_ms: EPOCH_MS,
        },
    }
}

fn launched_demo() -> Command {
    Command::CompleteLaunch {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        result: LaunchResult::Running {
            handle: "pid=1".into(),
            driver: "test".into(),
        },
    }
}

/// The heap counters are the process's: one measuring test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A replica restarting from a snapshot of many receipts (or installing
/// one) decodes them straight into its table, and builds, serves and
/// installs snapshots through files: its heap holds neither every receipt
/// nor the snapshot's bytes, only the table's cache.
#[tokio::test(flavor = "current_thread")]
// The guard only keeps the other test of this binary (a plain thread) out
// while the heap is measured; no task of this runtime takes it.
#[allow(clippy::await_holding_lock)]
async fn a_snapshot_of_many_receipts_is_built_opened_and_installed_without_holding_it_in_memory() {
    use openraft::storage::{RaftSnapshotBuilder as _, RaftStateMachine as _};
    const SNAPSHOT_RECEIPTS: u64 = 120_000;
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let source = tempfile::tempdir().unwrap();
    let mut files = ReceiptFiles::open(source.path())
        .unwrap()
        .with_cache_bytes(CACHE_BYTES);
    let replica = replica_with_receipts(&mut files, SNAPSHOT_RECEIPTS);
    let data = serde_json::to_vec(&replica.state).unwrap();
    let data_mib = data.len() as f64 / (1024.0 * 1024.0);
    let snapshot_dir = tempfile::tempdir().unwrap();
    let meta = palisade_raft::SnapshotMeta {
        last_log_id: Some(palisade_raft::LogId::new(1.into(), replica.index)),
        last_membership: Default::default(),
    };
    palisade_storage::SnapshotFiles::<palisade_raft::SnapshotMeta>::open(snapshot_dir.path())
        .unwrap()
        .save(&meta, &data)
        .unwrap();
    drop((replica, data, files));

    let before = live_mib();
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
    let machine = palisade_raft::LifecycleStateMachine::open(snapshot_dir.path()).unwrap();
    let peak = PEAK_BYTES.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0);
    let state = machine.handle();
    assert_eq!(
        state.read(|applied| applied.state.receipts.len()) as u64,
        SNAPSHOT_RECEIPTS + 1
    );
    let above = peak - before;
    let cache_mib =
        palisade_storage::receipt_table::RECEIPT_TABLE_CACHE_BYTES as f64 / (1024.0 * 1024.0);
    eprintln!(
        "opened a snapshot of {data_mib:.1} MiB ({SNAPSHOT_RECEIPTS} receipts): heap peak {above:+.1} MiB (table cache {cache_mib:.0} MiB)"
    );
    // The table may cache up to its cache size. Decoding from a buffer
    // held the snapshot's bytes (41 MiB here), and receipts decoded into
    // memory first cost ~0.6 KiB each on top (~60 MiB here).
    let bound = cache_mib + 8.0;
    assert!(
        above < bound,
        "opening a snapshot of {SNAPSHOT_RECEIPTS} receipts ({data_mib:.1} MiB) peaked {above:.1} MiB above the heap before; at most {bound:.0} MiB (the table's cache and change)"
    );

    // Building a snapshot encodes the state straight into its file.
    let mut machine = machine;
    let before = live_mib();
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
    let built = machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let above = PEAK_BYTES.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0) - before;
    let built_mib = built.snapshot.len() as f64 / (1024.0 * 1024.0);
    eprintln!("built a snapshot of {built_mib:.1} MiB: heap peak {above:+.1} MiB");
    assert!(
        above < bound,
        "building a snapshot of {built_mib:.1} MiB peaked {above:.1} MiB above the heap before; at most {bound:.0} MiB"
    );
    drop(built);

    // Serving it to a follower and installing it there: the follower's
    // heap holds its own table's cache, not the snapshot.
    let served = machine.get_current_snapshot().await.unwrap().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut follower = palisade_raft::LifecycleStateMachine::open(follower_dir.path()).unwrap();
    let before = live_mib();
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
    follower
        .install_snapshot(&served.meta, served.snapshot)
        .await
        .unwrap();
    let above = PEAK_BYTES.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0) - before;
    eprintln!("installed it on a follower: heap peak {above:+.1} MiB");
    assert!(
        above < bound,
        "installing a snapshot of {built_mib:.1} MiB peaked {above:.1} MiB above the heap before; at most {bound:.0} MiB"
    );
    assert_eq!(
        follower
            .handle()
            .read(|applied| applied.state.receipts.len()) as u64,
        SNAPSHOT_RECEIPTS + 1
    );

    // A backup (`SaveSnapshot`) is encoded into a spool file and served
    // from it: the heap holds the encoder's buffer, not the state.
    let spool_dir = tempfile::tempdir().unwrap();
    let handle = machine.handle();
    let before = live_mib();
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
    let spooled = palisade_raft::backup::spool_state(&handle, Some(spool_dir.path())).unwrap();
    let above = PEAK_BYTES.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0) - before;
    let spooled_mib = spooled.bytes.len() as f64 / (1024.0 * 1024.0);
    eprintln!("spooled a backup of {spooled_mib:.1} MiB: heap peak {above:+.1} MiB");
    assert!(
        above < bound,
        "spooling a backup of {spooled_mib:.1} MiB peaked {above:.1} MiB above the heap before; at most {bound:.0} MiB"
    );
    let bytes = spooled.bytes.to_vec().unwrap();
    assert_eq!(spooled.digest, palisade_raft::backup::state_digest(&bytes));
    assert_eq!(
        spooled.last_applied,
        handle.read(|applied| applied.last_applied)
    );
    let restored: palisade_lifecycle::State = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(restored.receipts.len() as u64, SNAPSHOT_RECEIPTS + 1);
}

#[test]
fn receipts_kept_by_a_replica_do_not_grow_its_heap() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut files = ReceiptFiles::open(dir.path())
        .unwrap()
        .with_cache_bytes(CACHE_BYTES);
    let mut replica = replica_with_receipts(&mut files, 0);
    // Warm up: the table's cache fills, the state's maps reach size.
    for n in 0..5_000 {
        replica.start_again(n);
        if n % 100 == 99 {
            replica.state.receipts.end_batch().unwrap();
        }
    }
    replica.state.receipts.end_batch().unwrap();
    let before = live_mib();
    for n in 5_000..5_000 + RECEIPTS {
        replica.start_again(n);
        // An apply batch of 100 entries, committed like the state
        // machine commits after each batch.
        if n % 100 == 99 {
            replica.state.receipts.end_batch().unwrap();
        }
    }
    replica.state.receipts.end_batch().unwrap();
    let after = live_mib();
    let grown = after - before;
    eprintln!(
        "{RECEIPTS} more receipts ({} in all): heap {before:.1} -> {after:.1} MiB ({grown:+.1} MiB)",
        replica.state.receipts.len()
    );
    assert_eq!(replica.state.receipts.len() as u64, RECEIPTS + 5_001);
    // In memory each receipt costs ~0.5 KiB (request id, digest, outcome,
    // the expiry index): ~20 MiB here. On disk: the table's 1 MiB cache.
    assert!(
        grown < 4.0,
        "{RECEIPTS} receipts grew the heap by {grown:.1} MiB; receipts must live on disk, not in the replica's memory"
    );
    // And they are all there, readable and in the state's JSON.
    let replayed = replica
        .state
        .receipts
        .get("0b3c4a4e-5a7d-4f6e-9c1b-000000000007");
    assert!(replayed.is_some());
    let encoded = serde_json::to_vec(&replica.state).unwrap();
    let decoded: State = serde_json::from_slice(&encoded).unwrap();
    assert_eq!(decoded.receipts.len(), replica.state.receipts.len());
    assert_eq!(decoded.receipts, replica.state.receipts);
}
