//! The durable Raft log: entries in append-only segment files, and the
//! vote, committed log id, last purged log id and format in one small redb
//! database.
//!
//! # Layout on disk
//!
//! - `log.redb`, table `meta`: name -> record holding the JSON of a value:
//!   `vote`, `committed`, `last_purged`, `level` (the owner's version of
//!   what the log holds: Palisade's cluster feature level, see
//!   [`FormatRecord`]) and `format` (see below);
//! - directory [`SEGMENTS_DIR`](crate::segment_log::SEGMENTS_DIR): the
//!   entries, one checksummed record each, in segment files (see
//!   [`segment_log`](crate::segment_log) for their format and how a crash
//!   is recovered from). An entry's payload is in `palisade_codec`'s
//!   binary encoding; entries written before [`FORMAT_BINARY_ENTRIES`] are
//!   JSON, and both decode (the first byte tells them apart).
//!
//! Every record carries a CRC-32 over its key and payload (see the
//! crate-private `record` module), verified on every read.
//!
//! # The `format` record, and the log of older releases
//!
//! Releases before this one kept the entries in the database's `log` table.
//! Opening such a database moves its entries into a segment file (written
//! and synced first, then the table dropped in one transaction: a crash
//! in between repeats the move at the next open) and sets `format` to
//! [`FORMAT_SEGMENTS`]. Older releases must not open the result: they would
//! see an empty log. Releases before feature levels accept only `format`
//! 1, later ones only a format up to the feature level they support (2),
//! so both refuse it at open, before reading anything. The owner's own
//! version moved to the `level` record (a database whose `format` was
//! below 3 held the level there, and the move copies it).
//!
//! Opening a database below [`FORMAT_BINARY_ENTRIES`] raises `format` to
//! it: new entries are written in the binary encoding, which the releases
//! of [`FORMAT_SEGMENTS`] cannot decode (they refuse the first such entry
//! by name). A `format` above [`FORMAT_CURRENT`] that is not the owner's
//! level (which [`FormatRecord::raise`] copies into it) is a newer layout,
//! refused at open.
//!
//! # Durability, and a writer thread
//!
//! A write is acknowledged only once it is durable: entries after the
//! `fdatasync` of their segment, the other records after the commit of a
//! redb transaction with [`Durability::Immediate`].
//!
//! The writes are made by one thread of the store's own, in the order they
//! were asked for: it takes every write queued while its previous one was
//! under way and makes them durable together (group commit): the entries
//! in one write and one `fdatasync` per segment, then the records in one
//! transaction (skipped when there are none). `append` does not wait for
//! it: openraft awaits `append` inside its core task, and a core waiting
//! for an fsync handles nothing else — in the load test (`palisade-load`) a
//! read's read index waited 150 ms at p90 for a core busy appending. So
//! `append` puts the entries (already encoded) in a map of pending entries,
//! queues them for the writer and returns: readers see the pending entries
//! at once, as the trait requires, and the writer calls `io_completed` after
//! the `fdatasync` that made them durable, then drops them from the map.
//! The other writes wait until they are durable, as openraft requires,
//! which makes every append queued before them durable too. A failed group
//! fails every write in it; openraft stops the replica on the first. A
//! write the log refuses (an append that would leave a hole, a truncation
//! of committed entries) cuts off what its group wrote and the log goes
//! on; a failure of the disk (no space, an I/O error) fails every later
//! write too, and the group's entries stay readable from memory until the
//! replica stopped (openraft may still apply those its peers committed).
//!
//! Entries are made durable before the records of their group, so a
//! record never becomes durable before an append queued ahead of it. The
//! other way round, an append queued after a vote or a purge must not
//! become durable before it (a replica that crashed with a new term's
//! entries but its old vote could vote twice in that term): a group ends
//! with a vote or a purge, the next group takes what was queued after it.
//! Truncations are made durable at once (see the segment module).
//!
//! # The committed record: saved behind apply, not in front of it
//!
//! openraft awaits `save_committed` in its core before it applies what
//! was committed, so a durable `committed` record costs every commit an
//! `fdatasync` of the database in front of apply (and of the client's
//! answer), and the writer a second `fdatasync` per group: one client's
//! requests took 2.8-3.3 ms (p50) with it and 2.3-2.5 ms without. Raft
//! does not need it: `committed` is learned again from the leader (its
//! first heartbeat), or re-established by a new leader; the record only
//! lets a restarted replica apply at once what it knew was committed. So `save_committed`
//! records the log id in memory (readers of this store and the
//! truncation guard see it at once) and returns; the writer writes it
//! into the next group that commits the database anyway (a vote, a
//! purge, a truncation), else once [`COMMITTED_SAVE_INTERVAL`] has passed
//! since it last wrote it, and when the store is dropped. It is never
//! written ahead of the entries it names: a record whose entry is not
//! yet in the segments waits for the group that writes the entry.
//!
//! What a crash costs: the replica restarts with its state machine at
//! most that interval's commits behind what it had applied. Those
//! entries are in its log; it applies them once it hears the leader's
//! commit index. Until then a `consistency=stale` read on it may show a
//! state older than one it showed before the crash (a stale read may be
//! that old on any replica that lags); linearizable reads wait for the
//! read index and are not affected.
//!
//! A reader takes the pending entries it needs before it looks at the
//! segments: the writer adds entries to the segments before it drops them
//! from the map, so a reader finds each entry in one or the other.
//!
//! # Purge
//!
//! openraft awaits `purge` inside its core task. `purge` records the new
//! purge point in memory, from where reads, the log state and appends
//! treat everything up to it as gone, and queues the write of the
//! `last_purged` record; once that is durable, the writer removes the
//! segment files that hold only purged entries (whole files: no entry is
//! deleted one by one, so a purge of a hundred thousand entries is an
//! unlink, not a transaction that kept the replica from its heartbeats for
//! over a second, as the deletes from the database table once did). An
//! append that continues a purge point past the end of the log (after a
//! snapshot install) writes the purge point first, so that a crash can
//! never leave segments with a gap between them that no purge covers.
//!
//! # Invariants enforced
//!
//! The log never has a hole: an append must continue the last entry (or the
//! last purged log id when the log is empty), and reads fail if they find a
//! gap. Entries up to the committed index openraft saved are never truncated.
//! Violations are errors, which openraft treats as fatal: the replica stops
//! rather than store or serve a broken log.
//!
//! # Threads
//!
//! Disk writes run on the writer thread; reads run on the runtime's
//! blocking pool (`spawn_blocking`), never on an async worker thread,
//! except reads of entries appended lately, which are answered from
//! memory where they are asked (`recent_entries`: a copy of the log's
//! tail, kept decoded).
//! Dropping the store stops the writer after the writes queued before and
//! waits for it, so that the files are closed (when no reader is left)
//! once the store is gone: an in-process replica that is crashed and
//! restarted opens them again at once.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Debug;
use std::fs;
use std::io;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::RwLock;
use std::sync::mpsc;

use openraft::OptionalSend;
use openraft::RaftLogReader;
use openraft::RaftTypeConfig;
use openraft::alias::LogIdOf;
use openraft::alias::VoteOf;
use openraft::async_runtime::OneshotSender;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::LogState;
use openraft::storage::RaftLogStorage;
use openraft::type_config::TypeConfigExt;
use palisade_codec::Encoding;
use redb::Database;
use redb::Durability;
use redb::ReadableDatabase;
use redb::ReadableTable;
use redb::TableDefinition;
use redb::TableHandle;
use redb::WriteTransaction;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Corruption;
use crate::error::LogStoreError;
use crate::error::RecordKey;
use crate::recent_entries::RecentEntries;
use crate::record;
use crate::segment_log;
use crate::segment_log::Segments;

/// Name of the database file inside the directory given to [`LogStore::open`].
pub const LOG_FILE_NAME: &str = "log.redb";

/// Upper bound on the stored bytes of the entries one
/// `limited_get_log_entries` call returns (the call that feeds replication).
/// A single entry larger than this is still returned, alone. The peer
/// transport must accept messages of at least this size plus framing.
pub const READ_BATCH_BYTES_MAX: usize = 2 * 1024 * 1024;

/// The lowest `format` there is: the layout of the first release (entries
/// in the database's `log` table), and the owner's level of a new log.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// The `format` from which the entries live in segment files (see the
/// module doc): above every level an older release supports, so that it
/// refuses the database.
pub const FORMAT_SEGMENTS: u32 = 3;

/// The `format` from which new entries are written in the binary encoding
/// (`palisade_codec`; older entries stay JSON, both decode). The releases
/// of [`FORMAT_SEGMENTS`] decode only JSON entries; they check no upper
/// bound of `format`, so they open such a database and refuse its first
/// binary entry ("does not decode ... written by another palisade
/// release"). This release and later ones refuse a newer layout at open.
pub const FORMAT_BINARY_ENTRIES: u32 = 4;

/// The layout this release writes.
pub const FORMAT_CURRENT: u32 = FORMAT_BINARY_ENTRIES;

/// Most writes the writer makes durable together: a bound on one group,
/// far above what openraft queues between two commits.
const WRITES_PER_COMMIT_MAX: usize = 1_024;

/// How long a committed log id may stay in memory only when nothing else
/// commits the database (see "The committed record" in the module doc):
/// what a restarted replica's state machine may lag behind what it had
/// applied, at ten database commits a second under load.
pub const COMMITTED_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Memory redb may use to cache pages of the database. It holds a few
/// small records.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// The table older releases kept the entries in (see the module doc).
const LEGACY_LOG_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const META_VOTE: &str = "vote";
const META_COMMITTED: &str = "committed";
const META_LAST_PURGED: &str = "last_purged";
const META_FORMAT: &str = "format";
const META_LEVEL: &str = "level";

/// The open log, shared by the store and all its readers.
struct Shared {
    db: Database,
    path: PathBuf,
    /// The entries on disk; changed only by the writer.
    segments: RwLock<Segments>,
    /// Where write timings go (`--metrics-listen`); set once, unset in
    /// tests and tools.
    timings: std::sync::OnceLock<Arc<dyn LogTimings>>,
    /// The purge point openraft was given, and the one on disk.
    purge: std::sync::Mutex<PurgePoint>,
    /// Set by the first write that failed on the disk (see "Durability"
    /// in the module doc): every later write fails with it.
    failed: std::sync::Mutex<Option<String>>,
    /// Entries appended and not yet made durable by the writer.
    pending: std::sync::Mutex<PendingEntries>,
    /// The committed log id openraft saved last, and whether the writer
    /// has written it.
    committed: std::sync::Mutex<CommittedPoint>,
}

/// The committed log id openraft gave and what of it is on disk (see "The
/// committed record" in the module doc).
#[derive(Debug)]
struct CommittedPoint {
    /// The latest given, once one was: its index and JSON (`Shared` is not
    /// generic over the log id's type), `None` if openraft cleared it.
    latest: Option<Option<(u64, Vec<u8>)>>,
    /// Counts the saves, so that the writer knows whether the one it
    /// wrote is still the latest once its group is durable.
    version: u64,
    /// The version on disk.
    written: u64,
    /// When the writer last wrote the record, or last found it could not
    /// yet (its entry still queued): the interval counts from there.
    written_at: std::time::Instant,
}

impl CommittedPoint {
    fn new() -> Self {
        CommittedPoint {
            latest: None,
            version: 0,
            written: 0,
            written_at: std::time::Instant::now(),
        }
    }

    /// The latest committed index given, if one was: `Some(None)` when
    /// openraft cleared it.
    fn latest_index(&self) -> Option<Option<u64>> {
        self.latest
            .as_ref()
            .map(|latest| latest.as_ref().map(|(index, _)| *index))
    }
}

/// Entries `append` handed to the writer, readable until it made them
/// durable (see "Durability, and a writer thread" in the module doc).
#[derive(Debug, Default)]
struct PendingEntries {
    /// Index -> the append that queued it (a sequence number) and its
    /// stored record.
    entries: BTreeMap<u64, (u64, Arc<[u8]>)>,
    /// The sequence number of the next append.
    next_append: u64,
}

/// The entries one append left in the pending map: its sequence number
/// and the indexes of its first and last entry.
#[derive(Debug, Clone, Copy)]
struct PendingAppend {
    sequence: u64,
    first: u64,
    last: u64,
}

/// What a write of the `meta` table does inside the transaction it shares.
type MetaWork = Box<dyn FnOnce(&WriteTransaction) -> Result<(), LogStoreError> + Send>;

/// What one queued write does.
enum Work {
    /// Appends entries (index, stored record) to the segments.
    Append(Vec<(u64, Arc<[u8]>)>),
    /// Removes the entries after the given index (all: `None`).
    Truncate(Option<u64>),
    /// Writes the `last_purged` record up to the purge point, then
    /// removes the segments it covers.
    Purge,
    /// Writes records of the `meta` table.
    Meta(MetaWork),
}

/// One write for the writer thread: `work` is made durable with the
/// writes queued with it, `done` learns the outcome once they are (or
/// failed).
struct WriteJob {
    operation: &'static str,
    work: Work,
    done: Box<dyn FnOnce(Result<(), LogStoreError>) + Send>,
    /// For an append: its pending entries, dropped once they are durable
    /// (or failed).
    append: Option<PendingAppend>,
    /// Ends its group (see the module doc): a vote, a purge.
    ends_group: bool,
}

/// Where a [`LogStore`] makes its writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// On a writer thread of the store's own; `append` returns before the
    /// write is durable (see "Durability, and a writer thread" in the
    /// module doc).
    Thread,
    /// On the calling thread, before the call returns (`append` too). For
    /// the deterministic simulation, where a commit finishing on another
    /// thread at a wall-clock moment would be nondeterminism.
    Inline,
}

/// The store's handle on its writer thread (none: [`WriteMode::Inline`]).
struct Writer {
    jobs: Option<mpsc::Sender<WriteJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // The writer ends after the jobs already queued; waiting for it
        // closes its handle on the files (see "Threads").
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the Raft log's writer thread panicked");
        }
    }
}

/// The purge point openraft was given, and the one on disk (see "Purge"
/// in the module doc).
#[derive(Debug, Default)]
struct PurgePoint {
    /// The last purged log id as openraft knows it: its index, and its
    /// JSON (`Shared` is not generic over the log id's type).
    target: Option<(u64, Vec<u8>)>,
    /// The index of the `last_purged` record on disk.
    durable: Option<u64>,
}

impl Shared {
    fn purge_point(&self) -> std::sync::MutexGuard<'_, PurgePoint> {
        // Only plain fields are changed under the lock: a panic elsewhere
        // cannot leave them half-written.
        self.purge
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn committed_point(&self) -> std::sync::MutexGuard<'_, CommittedPoint> {
        // Only plain fields are changed under the lock.
        self.committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long until the writer must write the committed record though
    /// nothing else is written; `None` if it has nothing to write (or the
    /// disk failed: nothing more is written then).
    fn committed_due_in(&self) -> Option<std::time::Duration> {
        let point = self.committed_point();
        if point.written == point.version || self.has_failed() {
            return None;
        }
        Some(COMMITTED_SAVE_INTERVAL.saturating_sub(point.written_at.elapsed()))
    }

    fn has_failed(&self) -> bool {
        self.failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// The index up to which openraft considers the log purged.
    fn purged_index(&self) -> Option<u64> {
        self.purge_point().target.as_ref().map(|(index, _)| *index)
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, PendingEntries> {
        // Changed only by whole-entry inserts and removes: a panic
        // elsewhere cannot leave it half-written.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn segments_read(&self) -> std::sync::RwLockReadGuard<'_, Segments> {
        // The writer changes the segments' index only after its disk
        // operation succeeded: a panic cannot leave it half-changed.
        self.segments
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn segments_write(&self) -> std::sync::RwLockWriteGuard<'_, Segments> {
        self.segments
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pending entries with index in `start..end`, in order.
    fn pending_range(&self, start: u64, end: Option<u64>) -> Vec<(u64, Arc<[u8]>)> {
        let pending = self.pending();
        let range = match end {
            Some(end) => pending.entries.range(start..end),
            None => pending.entries.range(start..),
        };
        range
            .map(|(index, (_, stored))| (*index, Arc::clone(stored)))
            .collect()
    }

    /// The last pending entry.
    fn pending_last(&self) -> Option<(u64, Arc<[u8]>)> {
        self.pending()
            .entries
            .last_key_value()
            .map(|(index, (_, stored))| (*index, Arc::clone(stored)))
    }

    /// The stored record of entry `index` in the segments, if they hold it.
    fn segment_record(&self, index: u64) -> Result<Option<Vec<u8>>, LogStoreError> {
        let mut stored = self.segments_read().read(index, Some(index + 1), None)?;
        Ok(stored.pop().map(|(_, stored)| stored))
    }
}

/// Receives the timings of the log's writes, for metrics. Called on the
/// writer thread, right after each group is durable: keep it to an atomic
/// update.
pub trait LogTimings: Send + Sync {
    /// A batch of entries was appended durably: from the `append` call to
    /// the `fdatasync` that made it durable (encode, wait in the writer's
    /// queue, write, fsync).
    fn appended(&self, elapsed: std::time::Duration);
    /// A group of writes was made durable (its `fdatasync` and commit),
    /// whatever it wrote (entries, vote, truncation, purge).
    fn committed(&self, elapsed: std::time::Duration);
}

/// The durable Raft log of one replica. Implements [`RaftLogStorage`].
///
/// There is one `LogStore` per directory (redb locks the database file, so
/// a second process opening it gets [`LogStoreError::AlreadyOpen`]); it is
/// the only writer. Readers are cheap clones, see [`LogStore::reader`].
pub struct LogStore<C: RaftTypeConfig> {
    reader: LogReader<C>,
    writer: Writer,
}

/// A read handle on the log. Implements [`RaftLogReader`].
///
/// Cloning shares the open log. A read waits for the writer only while
/// it appends or truncates, never for an `fdatasync` (see
/// [`segment_log`](crate::segment_log), "Concurrency"). A reader keeps the
/// files open (and the database locked) while it lives, even after the
/// [`LogStore`] is dropped.
pub struct LogReader<C: RaftTypeConfig> {
    shared: Arc<Shared>,
    /// The last appended entries, decoded (see [`RecentEntries`]).
    recent: Arc<std::sync::Mutex<RecentEntries<C::Entry>>>,
}

impl<C: RaftTypeConfig> Clone for LogReader<C> {
    fn clone(&self) -> Self {
        LogReader {
            shared: Arc::clone(&self.shared),
            recent: Arc::clone(&self.recent),
        }
    }
}

impl<C: RaftTypeConfig> fmt::Debug for LogReader<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader")
            .field("path", &self.shared.path)
            .finish()
    }
}

impl<C: RaftTypeConfig> fmt::Debug for LogStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.reader.shared.path)
            .finish()
    }
}

impl<C: RaftTypeConfig> LogStore<C> {
    /// Opens the log in `dir` (creating the directory, the database and the
    /// segment directory if they do not exist), repairs it if the last
    /// shutdown was unclean, moves the entries of an older release's
    /// database into segments, and checks its shape: format, every
    /// entry's checksum and contiguity, and the metadata records.
    ///
    /// Blocking: call it before starting the runtime or from a blocking task.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LogStoreError> {
        Self::open_with(dir, WriteMode::Thread)
    }

    /// Like [`LogStore::open`], making writes durable as `mode` says.
    pub fn open_with(dir: impl AsRef<Path>, mode: WriteMode) -> Result<Self, LogStoreError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir).map_err(|source| LogStoreError::Directory {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(LOG_FILE_NAME);

        let mut builder = redb::Builder::new();
        builder.set_cache_size(CACHE_BYTES);
        // redb also runs its repair pass on a file it has just created (there
        // is no allocator state yet): only an existing file was shut down
        // uncleanly, so only then is the repair worth a warning.
        let existed = fs::metadata(&path).is_ok_and(|metadata| metadata.len() > 0);
        let repair_path = path.clone();
        builder.set_repair_callback(move |session| {
            if existed {
                tracing::warn!(
                    path = %repair_path.display(),
                    progress = session.progress(),
                    "repairing the log database after an unclean shutdown"
                );
            }
        });
        let db = builder.create(&path).map_err(|source| match source {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                LogStoreError::AlreadyOpen { path: path.clone() }
            }
            source => LogStoreError::Open {
                path: path.clone(),
                source,
            },
        })?;
        // The file may have just been created: make its directory entry durable.
        segment_log::sync_directory(dir)?;

        let segments_dir = dir.join(segment_log::SEGMENTS_DIR);
        if !existed && fs::read_dir(&segments_dir).is_ok_and(|mut items| items.next().is_some()) {
            // Entries without their vote: a replica that ran on them could
            // vote twice in a term.
            return Err(LogStoreError::SegmentFile {
                path: segments_dir,
                problem: format!(
                    "holds entries but the log database {} beside it was missing (a new one \
                     was just created)",
                    path.display()
                ),
            });
        }
        let last_purged = move_legacy_entries::<C>(&db, &path, &segments_dir)?;
        let segments =
            Segments::open(&segments_dir, last_purged.as_ref().map(|(index, _)| *index))?;
        let purge = PurgePoint {
            durable: last_purged.as_ref().map(|(index, _)| *index),
            target: last_purged,
        };
        let shared = Arc::new(Shared {
            db,
            path,
            segments: RwLock::new(segments),
            timings: std::sync::OnceLock::new(),
            purge: std::sync::Mutex::new(purge),
            failed: std::sync::Mutex::new(None),
            pending: std::sync::Mutex::new(PendingEntries::default()),
            committed: std::sync::Mutex::new(CommittedPoint::new()),
        });
        let writer = match mode {
            WriteMode::Inline => Writer {
                jobs: None,
                thread: None,
            },
            WriteMode::Thread => {
                let (jobs, queued) = mpsc::channel();
                let shared = Arc::clone(&shared);
                let thread = std::thread::Builder::new()
                    .name("raft-log-writer".into())
                    .spawn(move || write_loop::<C>(&shared, &queued))
                    .map_err(|error| LogStoreError::WriterStopped {
                        problem: format!("cannot be started: {error}"),
                    })?;
                Writer {
                    jobs: Some(jobs),
                    thread: Some(thread),
                }
            }
        };
        let store = LogStore {
            reader: LogReader {
                shared,
                recent: Arc::default(),
            },
            writer,
        };
        let state = store.reader.check_shape()?;
        tracing::info!(
            path = %store.path().display(),
            last_purged_log_id = ?state.last_purged_log_id,
            last_log_id = ?state.last_log_id,
            "opened the Raft log"
        );
        Ok(store)
    }

    /// Reports the timings of every later write to `timings`. A second
    /// call is ignored.
    pub fn set_timings(&self, timings: Arc<dyn LogTimings>) {
        let _ = self.reader.shared.timings.set(timings);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.reader.shared.path
    }

    /// A read handle sharing this store's files.
    pub fn reader(&self) -> LogReader<C> {
        self.reader.clone()
    }

    /// The owner's version record (see [`FormatRecord`]), as a handle the
    /// owner keeps to raise it later.
    pub fn format_record(&self) -> FormatRecord {
        FormatRecord {
            shared: self.reader.shared.clone(),
        }
    }

    /// Reads and verifies every entry in the log (checksums, decoding,
    /// contiguity) above the last purged index and returns their number.
    /// Blocking; meant for startup checks and tooling.
    pub fn verify(&self) -> Result<u64, LogStoreError> {
        self.reader.verify()
    }

    /// Queues `job` for the writer; its `done` learns the outcome once it
    /// is durable. A writer that is gone fails the job at once.
    fn queue(&self, job: WriteJob) {
        let Some(jobs) = &self.writer.jobs else {
            // WriteMode::Inline (the queue closes otherwise only when the
            // store is dropped).
            run_batch::<C>(&self.reader.shared, vec![job]);
            return;
        };
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            if let Some(append) = job.append {
                drop_pending(&self.reader.shared, append);
            }
            (job.done)(Err(LogStoreError::WriterStopped {
                problem: "is gone (it panicked)".into(),
            }));
        }
    }

    /// Queues `work` and waits until it is durable.
    async fn write_and_wait(
        &self,
        operation: &'static str,
        work: Work,
        ends_group: bool,
    ) -> Result<(), io::Error> {
        let (sender, receiver) = C::oneshot();
        self.queue(WriteJob {
            operation,
            work,
            done: Box::new(move |result| {
                let _ = sender.send(result);
            }),
            append: None,
            ends_group,
        });
        let result = match receiver.await {
            Ok(result) => result,
            Err(_) => Err(LogStoreError::WriterStopped {
                problem: "stopped before the write was durable".into(),
            }),
        };
        result.map_err(storage_failed)
    }
}

impl<C: RaftTypeConfig> LogReader<C> {
    /// The last appended entries (see [`RecentEntries`]).
    fn recent_lock(&self) -> std::sync::MutexGuard<'_, RecentEntries<C::Entry>> {
        // Changed only by whole operations of `RecentEntries`, none of
        // which panics halfway.
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the entries with index in `start..end` (`end == None`: to the
    /// end of the log). With `bytes_max`, stops before the entry that would
    /// bring the stored bytes over it, but always returns at least one entry.
    fn entries(
        &self,
        start: u64,
        end: Option<u64>,
        bytes_max: Option<usize>,
    ) -> Result<Vec<C::Entry>, LogStoreError> {
        // Entries purged but not yet removed are not there for readers.
        let start = match self.shared.purged_index() {
            Some(purged) => start.max(purged + 1),
            None => start,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        // Before the segments: see the module doc.
        let pending = self.shared.pending_range(start, end);
        let stored = self.shared.segments_read().read(start, end, bytes_max)?;

        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut previous: Option<u64> = None;
        // Whether the next entry fits; false once the byte limit is reached.
        let mut fits = |stored: &[u8], entries: &Vec<C::Entry>| {
            if let Some(bytes_max) = bytes_max
                && !entries.is_empty()
                && bytes + stored.len() > bytes_max
            {
                return false;
            }
            bytes += stored.len();
            true
        };
        for (index, stored) in stored {
            check_follows(previous, index)?;
            if !fits(&stored, &entries) {
                return Ok(entries);
            }
            entries.push(decode_entry::<C>(index, &stored)?);
            previous = Some(index);
        }
        // The pending entries follow what the segments hold (those the
        // writer made durable meanwhile are in both).
        for (index, stored) in pending {
            if previous.is_some_and(|previous| index <= previous) {
                continue;
            }
            check_follows(previous, index)?;
            if !fits(&stored, &entries) {
                break;
            }
            entries.push(decode_entry::<C>(index, &stored)?);
            previous = Some(index);
        }
        Ok(entries)
    }

    fn vote(&self) -> Result<Option<VoteOf<C>>, LogStoreError> {
        let txn = self.begin_read()?;
        let meta = open_meta_read(&txn)?;
        read_meta(&meta, META_VOTE)
    }

    fn committed(&self) -> Result<Option<LogIdOf<C>>, LogStoreError> {
        // The latest given, written or not (see "The committed record").
        if let Some(latest) = self.shared.committed_point().latest.clone() {
            return latest
                .map(|(_, json)| {
                    palisade_codec::decode(&json).map_err(|source| LogStoreError::Undecodable {
                        record: RecordKey::Meta {
                            name: META_COMMITTED,
                        },
                        source,
                    })
                })
                .transpose();
        }
        let txn = self.begin_read()?;
        let meta = open_meta_read(&txn)?;
        read_meta(&meta, META_COMMITTED)
    }

    fn log_state(&self) -> Result<LogState<C>, LogStoreError> {
        // Before the segments: see the module doc.
        let pending_last = self.shared.pending_last();
        let last_purged_log_id = self.purge_target()?;
        let purged_index = last_purged_log_id.as_ref().map(|id| id.index());
        let above_purged = |index: u64| purged_index.is_none_or(|purged| index > purged);
        let last_log_id = match pending_last {
            Some((index, stored)) if above_purged(index) => {
                Some(decode_entry::<C>(index, &stored)?.log_id())
            }
            _ => match self.shared.segments_read().bounds() {
                Some((_, last)) if above_purged(last) => {
                    let stored =
                        self.shared
                            .segment_record(last)?
                            .ok_or(LogStoreError::Corrupt {
                                record: RecordKey::Entry { index: last },
                                problem: Corruption::Hole { previous: last },
                            })?;
                    Some(decode_entry::<C>(last, &stored)?.log_id())
                }
                _ => last_purged_log_id.clone(),
            },
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    /// The purge point openraft was given (see "Purge" in the module doc).
    fn purge_target(&self) -> Result<Option<LogIdOf<C>>, LogStoreError> {
        let point = self.shared.purge_point();
        let Some((_, json)) = &point.target else {
            return Ok(None);
        };
        palisade_codec::decode(json)
            .map(Some)
            .map_err(|source| LogStoreError::Undecodable {
                record: RecordKey::Meta {
                    name: META_LAST_PURGED,
                },
                source,
            })
    }

    /// The checks made at open, beyond those of the segments (every
    /// checksum, contiguity): the metadata records decode, and so do the
    /// first and last entries above the purge point.
    fn check_shape(&self) -> Result<LogState<C>, LogStoreError> {
        let txn = self.begin_read()?;
        let meta = open_meta_read(&txn)?;
        let _vote: Option<VoteOf<C>> = read_meta(&meta, META_VOTE)?;
        let _committed: Option<LogIdOf<C>> = read_meta(&meta, META_COMMITTED)?;
        let last_purged: Option<LogIdOf<C>> = read_meta(&meta, META_LAST_PURGED)?;
        let purged_index = last_purged.as_ref().map(|id| id.index());
        let bounds = self.shared.segments_read().bounds();
        let mut last_log_id = last_purged.clone();
        if let Some((first, last)) = bounds
            && purged_index.is_none_or(|purged| last > purged)
        {
            let first = purged_index.map_or(first, |purged| first.max(purged + 1));
            if let Some(purged) = purged_index
                && first > purged + 1
            {
                return Err(LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: first },
                    problem: Corruption::Hole { previous: purged },
                });
            }
            for index in [first, last] {
                let stored = self
                    .shared
                    .segment_record(index)?
                    .ok_or(LogStoreError::Corrupt {
                        record: RecordKey::Entry { index },
                        problem: Corruption::Hole { previous: index },
                    })?;
                let entry = decode_entry::<C>(index, &stored)?;
                last_log_id = Some(entry.log_id());
            }
        }
        Ok(LogState {
            last_log_id,
            last_purged_log_id: last_purged,
        })
    }

    fn verify(&self) -> Result<u64, LogStoreError> {
        let txn = self.begin_read()?;
        let meta = open_meta_read(&txn)?;
        let _vote: Option<VoteOf<C>> = read_meta(&meta, META_VOTE)?;
        let _committed: Option<LogIdOf<C>> = read_meta(&meta, META_COMMITTED)?;
        drop(txn);
        // What is on disk: the segments, not the pending entries.
        let start = self.shared.purged_index().map_or(0, |purged| purged + 1);
        let stored = self.shared.segments_read().read(start, None, None)?;
        let mut previous = None;
        for (index, stored) in &stored {
            check_follows(previous, *index)?;
            decode_entry::<C>(*index, stored)?;
            previous = Some(*index);
        }
        Ok(stored.len() as u64)
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, LogStoreError> {
        self.shared
            .db
            .begin_read()
            .map_err(LogStoreError::database("begin a read transaction"))
    }
}

impl<C: RaftTypeConfig> LogReader<C>
where
    C::Entry: Clone,
{
    /// What [`entries`](LogReader::entries) would answer, if the recent
    /// entries hold all of it (only for a bounded range: the end of the
    /// log is the segments' and the pending entries' to say).
    fn recent_entries(
        &self,
        start: u64,
        end: Option<u64>,
        bytes_max: Option<usize>,
    ) -> Option<Vec<C::Entry>> {
        let start = match self.shared.purged_index() {
            Some(purged) => start.max(purged + 1),
            None => start,
        };
        let end = end?;
        if end <= start {
            return Some(Vec::new());
        }
        self.recent_lock().range(start, end, bytes_max)
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogReader<C>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let Some((start, end)) = index_range(&range) else {
            return Ok(Vec::new());
        };
        if let Some(entries) = self.recent_entries(start, end, None) {
            return Ok(entries);
        }
        let reader = self.clone();
        run_blocking::<C, _>(move || reader.entries(start, end, None)).await
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        let reader = self.clone();
        run_blocking::<C, _>(move || reader.vote()).await
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, io::Error> {
        if end <= start {
            return Ok(Vec::new());
        }
        if let Some(entries) = self.recent_entries(start, Some(end), Some(READ_BATCH_BYTES_MAX)) {
            return Ok(entries);
        }
        let reader = self.clone();
        run_blocking::<C, _>(move || reader.entries(start, Some(end), Some(READ_BATCH_BYTES_MAX)))
            .await
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C>
where
    C::Entry: Clone,
{
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let reader = self.reader();
        run_blocking::<C, _>(move || reader.log_state()).await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        let vote = vote.clone();
        let work = Work::Meta(Box::new(move |txn| {
            let mut meta = open_meta_write(txn)?;
            write_meta(&mut meta, META_VOTE, &vote)
        }));
        // Ends its group: see "Durability" in the module doc.
        self.write_and_wait("save the vote", work, true).await
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        if self.writer.jobs.is_some() {
            // Written by the writer, behind apply: see "The committed
            // record" in the module doc.
            let latest = match &committed {
                Some(log_id) => {
                    let json =
                        palisade_codec::encode(log_id, Encoding::Json).map_err(|source| {
                            io::Error::from(LogStoreError::Encode {
                                record: RecordKey::Meta {
                                    name: META_COMMITTED,
                                },
                                source,
                            })
                        })?;
                    Some((log_id.index(), json))
                }
                None => None,
            };
            let mut point = self.reader.shared.committed_point();
            point.latest = Some(latest);
            point.version += 1;
            return Ok(());
        }
        // WriteMode::Inline (the simulation): durable before it returns,
        // as every write there.
        let work = Work::Meta(Box::new(move |txn| {
            let mut meta = open_meta_write(txn)?;
            match &committed {
                Some(committed) => write_meta(&mut meta, META_COMMITTED, committed),
                None => remove_meta(&mut meta, META_COMMITTED),
            }
        }));
        self.write_and_wait("save the committed log id", work, false)
            .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        let reader = self.reader();
        run_blocking::<C, _>(move || reader.committed()).await
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        let records = entries
            .iter()
            .map(encode_entry::<C>)
            .collect::<Result<Vec<_>, _>>()?;
        if records.is_empty() {
            callback.io_completed(Ok(()));
            return Ok(());
        }
        self.reader.recent_lock().appended(
            records
                .iter()
                .zip(entries)
                .map(|((index, stored), entry)| (*index, stored.len(), entry)),
        );
        // Readable from here on (see the module doc).
        let sequence = {
            let mut pending = self.reader.shared.pending();
            let sequence = pending.next_append;
            pending.next_append += 1;
            for (index, stored) in &records {
                pending
                    .entries
                    .insert(*index, (sequence, Arc::clone(stored)));
            }
            sequence
        };
        let timings = self.reader.shared.timings.get().cloned();
        let recent = Arc::clone(&self.reader.recent);
        let pending = PendingAppend {
            sequence,
            first: records[0].0,
            last: records[records.len() - 1].0,
        };
        self.queue(WriteJob {
            operation: "append log entries",
            work: Work::Append(records),
            done: Box::new(move |result| {
                if result.is_ok()
                    && let Some(timings) = timings
                {
                    timings.appended(started.elapsed());
                }
                if result.is_err() {
                    // What the log refused or lost must not be read from
                    // memory (see `RecentEntries`).
                    recent
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clear();
                }
                callback.io_completed(result.map_err(storage_failed));
            }),
            append: Some(pending),
            ends_group: false,
        });
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        tracing::debug!(?last_log_id, "truncating the log after");
        // Before the truncation is written: a read meanwhile goes to the
        // segments (see `RecentEntries`).
        self.reader
            .recent_lock()
            .truncate_after(last_log_id.as_ref().map(|id| id.index()));
        let work = Work::Truncate(last_log_id.map(|id| id.index()));
        self.write_and_wait("truncate the log", work, false).await
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        tracing::debug!(?log_id, "purging the log up to");
        // At once for readers, on disk by the writer: see the module doc.
        let json = palisade_codec::encode(&log_id, Encoding::Json).map_err(|source| {
            io::Error::from(LogStoreError::Encode {
                record: RecordKey::Meta {
                    name: META_LAST_PURGED,
                },
                source,
            })
        })?;
        {
            let mut point = self.reader.shared.purge_point();
            if point
                .target
                .as_ref()
                .is_some_and(|(index, _)| *index >= log_id.index())
            {
                // The last purged log id never moves back.
                return Ok(());
            }
            point.target = Some((log_id.index(), json));
        }
        self.write_and_wait("purge the log", Work::Purge, true)
            .await
    }
}

/// The owner's version of what the log holds: the `level` record (see the
/// module doc), which Palisade raises to the cluster feature level before
/// it applies a raise. Cheap to clone; shares the store's open database.
#[derive(Clone)]
pub struct FormatRecord {
    shared: Arc<Shared>,
}

impl fmt::Debug for FormatRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormatRecord")
            .field("path", &self.shared.path)
            .finish()
    }
}

impl FormatRecord {
    /// The version recorded now.
    pub fn version(&self) -> Result<u32, LogStoreError> {
        let txn = self
            .shared
            .db
            .begin_read()
            .map_err(LogStoreError::database("read the format version"))?;
        let meta = open_meta_read(&txn)?;
        Ok(read_meta::<u32>(&meta, META_LEVEL)?.unwrap_or(FORMAT_VERSION))
    }

    /// Raises the recorded version to `version` durably (one transaction,
    /// fsynced), and the `format` record with it when `version` is above
    /// it, so that releases that compare their level with `format` keep
    /// refusing the database; a lower or equal `version` changes nothing.
    /// Blocking.
    pub fn raise(&self, version: u32) -> Result<(), LogStoreError> {
        write(&self.shared, "raise the format version", |txn| {
            let mut meta = open_meta_write(txn)?;
            let current = read_meta::<u32>(&meta, META_LEVEL)?.unwrap_or(FORMAT_VERSION);
            if version > current {
                write_meta(&mut meta, META_LEVEL, &version)?;
                let format = read_meta::<u32>(&meta, META_FORMAT)?.unwrap_or(FORMAT_VERSION);
                if version > format {
                    write_meta(&mut meta, META_FORMAT, &version)?;
                }
            }
            Ok(())
        })
    }
}

/// Checks the database's format and makes it this release's (see the
/// module doc): the entries of an older release's `log` table move to a
/// segment file under `segments_dir`, `format` becomes [`FORMAT_CURRENT`]
/// and the owner's version moves to the `level` record. Returns the last
/// purged log id on disk (its index and JSON).
fn move_legacy_entries<C: RaftTypeConfig>(
    db: &Database,
    path: &Path,
    segments_dir: &Path,
) -> Result<Option<(u64, Vec<u8>)>, LogStoreError> {
    commit_durably(db, None, "initialize", |txn| {
        let legacy = txn
            .list_tables()
            .map_err(LogStoreError::database("list the tables"))?
            .any(|table| table.name() == LEGACY_LOG_TABLE.name());
        if legacy {
            let mut entries: Vec<(u64, Arc<[u8]>)> = Vec::new();
            {
                let table = txn
                    .open_table(LEGACY_LOG_TABLE)
                    .map_err(LogStoreError::database("open the log table"))?;
                for item in table
                    .iter()
                    .map_err(LogStoreError::database("read log entries"))?
                {
                    let (key, value) = item.map_err(LogStoreError::database("read log entries"))?;
                    let index = key.value();
                    check_follows(entries.last().map(|(index, _)| *index), index)?;
                    record::decode(&index.to_be_bytes(), value.value()).map_err(|problem| {
                        LogStoreError::Corrupt {
                            record: RecordKey::Entry { index },
                            problem,
                        }
                    })?;
                    entries.push((index, value.value().into()));
                }
            }
            if !entries.is_empty() {
                // Segments left by a move a crash interrupted are redone:
                // the table is still whole.
                if segments_dir.exists() {
                    fs::remove_dir_all(segments_dir).map_err(|source| {
                        LogStoreError::Directory {
                            path: segments_dir.to_path_buf(),
                            source,
                        }
                    })?;
                }
                let mut segments = Segments::open(segments_dir, None)?;
                segments.append(&entries)?;
                for dirty in segments.take_dirty() {
                    dirty.sync()?;
                }
                tracing::info!(
                    path = %path.display(),
                    entries = entries.len(),
                    "moved the log's entries from the database to segment files"
                );
            }
            txn.delete_table(LEGACY_LOG_TABLE)
                .map_err(LogStoreError::database("drop the old log table"))?;
        }
        let mut meta = open_meta_write(txn)?;
        let format = read_meta::<u32>(&meta, META_FORMAT)?;
        let level = read_meta::<u32>(&meta, META_LEVEL)?;
        if let Some(found) = format
            && (found < FORMAT_VERSION
                || (found > FORMAT_CURRENT && level.is_none_or(|level| found > level)))
        {
            // `format` above this layout is either the owner's level (which
            // `raise` copies there, and the owner checks) or a newer layout.
            return Err(LogStoreError::UnsupportedFormat {
                path: path.to_path_buf(),
                found,
            });
        }
        if level.is_none() {
            // Below FORMAT_SEGMENTS the format was the owner's version; a
            // database without either is new.
            let level = format.unwrap_or(FORMAT_VERSION);
            write_meta(&mut meta, META_LEVEL, &level)?;
        }
        if format.is_none_or(|format| format < FORMAT_CURRENT) {
            write_meta(&mut meta, META_FORMAT, &FORMAT_CURRENT)?;
        }
        let last_purged: Option<LogIdOf<C>> = read_meta(&meta, META_LAST_PURGED)?;
        last_purged
            .map(|log_id| {
                let json = palisade_codec::encode(&log_id, Encoding::Json).map_err(|source| {
                    LogStoreError::Encode {
                        record: RecordKey::Meta {
                            name: META_LAST_PURGED,
                        },
                        source,
                    }
                })?;
                Ok((log_id.index(), json))
            })
            .transpose()
    })
}

/// An entry as it is stored: its index and its record (CRC + JSON).
fn encode_entry<C: RaftTypeConfig>(entry: &C::Entry) -> Result<(u64, Arc<[u8]>), LogStoreError> {
    let index = entry.index();
    let payload = palisade_codec::encode(entry, Encoding::BinaryV1).map_err(|source| {
        LogStoreError::Encode {
            record: RecordKey::Entry { index },
            source,
        }
    })?;
    Ok((index, record::encode(&index.to_be_bytes(), &payload).into()))
}

/// Writes `records` to the segments, after checking that they continue
/// the log. Records that continue a purge point past the end of the
/// segments make the purge point durable first (see "Purge" in the module
/// doc), with what `txn` holds and the entries written before.
fn append_records(
    shared: &Shared,
    txn: &mut Option<WriteTransaction>,
    records: &[(u64, Arc<[u8]>)],
) -> Result<(), LogStoreError> {
    let Some((first_index, _)) = records.first() else {
        return Ok(());
    };
    let (purged, durable) = {
        let point = shared.purge_point();
        (
            point.target.as_ref().map(|(index, _)| *index),
            point.durable,
        )
    };
    let last = shared.segments_read().bounds().map(|(_, last)| last);
    let expected = match (last, purged) {
        (Some(last), purged) if purged.is_none_or(|purged| last > purged) => Some(last + 1),
        // An empty log continues its last purged log id. A log that was
        // never written may start anywhere (at a snapshot's end, say).
        (_, Some(purged)) => Some(purged + 1),
        (_, None) => None,
    };
    let mut next = expected;
    for (index, _) in records {
        if let Some(expected) = next
            && *index != expected
        {
            return Err(LogStoreError::NotContiguous {
                expected,
                got: *index,
            });
        }
        next = Some(index + 1);
    }
    if let Some(purged) = purged
        && *first_index == purged + 1
        && last.is_none_or(|last| last < purged)
        && durable.is_none_or(|durable| durable < purged)
    {
        // A purge point past the end of the segments: durable before the
        // segment that continues it. (Only the writer moves `durable`, and
        // `target` never moves back, so the JSON read now is of `purged`
        // or later; taken here, not on every append.)
        let (purged, json) = shared
            .purge_point()
            .target
            .clone()
            .expect("a purge point was read above");
        let mut meta = open_meta_write(begin_write(shared, txn)?)?;
        write_meta_json(&mut meta, META_LAST_PURGED, &json)?;
        drop(meta);
        make_durable(shared, txn)?;
        shared.purge_point().durable = Some(purged);
        shared.segments_write().remove_purged(purged)?;
    }
    shared.segments_write().append(records)
}

/// Drops the pending entries of `append` (durable, or failed); an entry
/// queued again since by a later append stays.
fn drop_pending(shared: &Shared, append: PendingAppend) {
    let mut pending = shared.pending();
    for index in append.first..=append.last {
        if let std::collections::btree_map::Entry::Occupied(entry) = pending.entries.entry(index)
            && entry.get().0 == append.sequence
        {
            entry.remove();
        }
    }
}

/// The write transaction of the group, begun if it was not.
fn begin_write<'txn>(
    shared: &Shared,
    txn: &'txn mut Option<WriteTransaction>,
) -> Result<&'txn WriteTransaction, LogStoreError> {
    if txn.is_none() {
        let mut begun = shared
            .db
            .begin_write()
            .map_err(LogStoreError::database("begin a write transaction"))?;
        begun
            .set_durability(Durability::Immediate)
            .map_err(LogStoreError::database("begin a write transaction"))?;
        *txn = Some(begun);
    }
    Ok(txn.as_ref().expect("just begun"))
}

/// Makes what the group wrote durable: the segments written to, then the
/// transaction (see "Durability" in the module doc).
fn make_durable(shared: &Shared, txn: &mut Option<WriteTransaction>) -> Result<(), LogStoreError> {
    let dirty = shared.segments_write().take_dirty();
    for segment in &dirty {
        segment.sync()?;
    }
    if let Some(txn) = txn.take() {
        txn.commit()
            .map_err(LogStoreError::database("commit log records"))?;
    }
    Ok(())
}

/// Writes the latest committed log id into the group's transaction if it
/// is not on disk yet and is due: the group commits the database anyway,
/// or [`COMMITTED_SAVE_INTERVAL`] has passed, or `force` (see "The
/// committed record" in the module doc). Answers the version written, to
/// be marked written once the group is durable.
fn write_committed(
    shared: &Shared,
    txn: &mut Option<WriteTransaction>,
    force: bool,
) -> Result<Option<u64>, LogStoreError> {
    // What the segments hold once this group is durable (the writer is
    // the only one to change them); entries up to a purge are covered too.
    let written_to = shared
        .segments_read()
        .bounds()
        .map(|(_, last)| last)
        .max(shared.purge_point().durable);
    let mut point = shared.committed_point();
    if point.written == point.version
        || (txn.is_none() && !force && point.written_at.elapsed() < COMMITTED_SAVE_INTERVAL)
    {
        return Ok(None);
    }
    let Some(latest) = point.latest.clone() else {
        return Ok(None);
    };
    point.written_at = std::time::Instant::now();
    if let Some((index, _)) = &latest
        && written_to.is_none_or(|end| end < *index)
    {
        // Its entry is still queued behind this group: never ahead of it.
        // A later group writes it (by the interval at the latest).
        return Ok(None);
    }
    let version = point.version;
    drop(point);
    let mut meta = open_meta_write(begin_write(shared, txn)?)?;
    match &latest {
        Some((_, json)) => write_meta_json(&mut meta, META_COMMITTED, json)?,
        None => remove_meta(&mut meta, META_COMMITTED)?,
    }
    Ok(Some(version))
}

/// Runs `works` in order and makes them durable together, with the
/// committed log id if it is due (`force`: if it is not on disk); on a
/// failure, the position of the work that failed (0 when making them
/// durable failed) and its error.
fn write_group<C: RaftTypeConfig>(
    shared: &Shared,
    works: Vec<Work>,
    force_committed: bool,
) -> Result<(), (usize, LogStoreError)> {
    if let Some(cause) = shared
        .failed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
    {
        return Err((
            0,
            LogStoreError::WriterStopped {
                problem: format!("stopped writing after a write failed ({cause})"),
            },
        ));
    }
    let mut txn = None;
    let mut first_appended = None;
    let mut purge_to = None;
    let mut outcome = Ok(());
    for (position, work) in merge_appends(works) {
        let result = match work {
            Work::Append(records) => {
                let result = append_records(shared, &mut txn, &records);
                if result.is_ok() && first_appended.is_none() {
                    first_appended = records.first().map(|(index, _)| *index);
                }
                result
            }
            Work::Truncate(last_kept) => truncate_after::<C>(shared, &mut txn, last_kept),
            Work::Purge => {
                let point = shared.purge_point();
                match &point.target {
                    Some((index, json)) if point.durable.is_none_or(|durable| durable < *index) => {
                        let (index, json) = (*index, json.clone());
                        drop(point);
                        purge_to = Some(index);
                        begin_write(shared, &mut txn)
                            .and_then(open_meta_write)
                            .and_then(|mut meta| {
                                write_meta_json(&mut meta, META_LAST_PURGED, &json)
                            })
                    }
                    _ => Ok(()),
                }
            }
            Work::Meta(work) => begin_write(shared, &mut txn).and_then(work),
        };
        if let Err(error) = result {
            outcome = Err((position, error));
            break;
        }
    }
    let mut committed_written = None;
    if outcome.is_ok() {
        outcome = write_committed(shared, &mut txn, force_committed)
            .map(|written| committed_written = written)
            .map_err(|error| (0, error));
    }
    if outcome.is_ok() {
        outcome = make_durable(shared, &mut txn).map_err(|error| (0, error));
    }
    if let Err((_, error)) = &outcome {
        if let Some(txn) = txn.take()
            && let Err(abort_error) = txn.abort()
        {
            tracing::warn!(%abort_error, %error, "aborting a log transaction failed");
        }
        if is_refusal(error) {
            // A write the log refused (a bug above it): the entries the
            // group wrote before it do not stay behind, and the log goes on.
            if let Some(first) = first_appended
                && let Err(cut_error) = shared.segments_write().truncate_from(first)
            {
                tracing::warn!(%cut_error, %error, "cutting off the entries of a failed write failed");
            }
        } else {
            // The disk failed: nothing more is written (openraft stops the
            // replica on the error).
            *shared
                .failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
        }
        return outcome;
    }
    if let Some(version) = committed_written {
        let mut point = shared.committed_point();
        point.written = point.written.max(version);
    }
    if let Some(purged) = purge_to {
        shared.purge_point().durable = Some(purged);
        shared
            .segments_write()
            .remove_purged(purged)
            .map_err(|error| (0, error))?;
    }
    Ok(())
}

/// The group's works with each run of consecutive appends merged into one
/// (one `write` to the segment, not one per append: under load a group
/// holds a hundred appends of one entry each, and their system calls cost
/// the writer more than the `fdatasync` they share), each named by the
/// position of its first job, which a failure of the merged append is
/// reported against (the others of the group fail with it, as any job of
/// a failed group does).
fn merge_appends(works: Vec<Work>) -> Vec<(usize, Work)> {
    let mut merged: Vec<(usize, Work)> = Vec::with_capacity(works.len());
    for (position, work) in works.into_iter().enumerate() {
        match (merged.last_mut(), work) {
            (Some((_, Work::Append(records))), Work::Append(more)) => records.extend(more),
            (_, work) => merged.push((position, work)),
        }
    }
    merged
}

/// The writer thread (see the module doc): makes the queued jobs durable
/// in groups until the store's queue closes.
fn write_loop<C: RaftTypeConfig>(shared: &Shared, queued: &mpsc::Receiver<WriteJob>) {
    loop {
        let received = match shared.committed_due_in() {
            None => queued
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(due_in) => queued.recv_timeout(due_in),
        };
        let first = match received {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Nothing else to write: the committed log id alone.
                write_committed_alone::<C>(shared, false);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut ends_group = first.ends_group;
        let mut jobs = vec![first];
        while !ends_group && jobs.len() < WRITES_PER_COMMIT_MAX {
            match queued.try_recv() {
                Ok(job) => {
                    ends_group = job.ends_group;
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        run_batch::<C>(shared, jobs);
    }
    // The store was dropped: a clean shutdown keeps the last committed log
    // id it was given.
    write_committed_alone::<C>(shared, true);
}

/// Makes the committed log id durable in a group of its own, if it is due
/// (`force`: if it is not on disk).
fn write_committed_alone<C: RaftTypeConfig>(shared: &Shared, force: bool) {
    if shared.committed_due_in().is_none() {
        return;
    }
    if let Err((_, error)) = write_group::<C>(shared, Vec::new(), force) {
        tracing::error!(%error, "writing the committed log id failed");
    }
}

/// Makes `jobs` durable together and tells each its outcome.
fn run_batch<C: RaftTypeConfig>(shared: &Shared, jobs: Vec<WriteJob>) {
    let started = std::time::Instant::now();
    let (works, jobs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|job| (job.work, (job.operation, job.done, job.append)))
        .unzip();
    let mut failure = write_group::<C>(shared, works, false).err();
    if failure.is_none()
        && let Some(timings) = shared.timings.get()
    {
        timings.committed(started.elapsed());
    }
    let cause = failure.as_ref().map(|(_, error)| error.to_string());
    // After a failure of the disk the entries stay readable from memory:
    // openraft holds them as appended until it stopped, and may still
    // apply those the other replicas committed (a read missing them
    // failed an assertion in openraft's apply and aborted the process
    // before its fail-stop, when a full disk failed the first append).
    let keep_pending = failure
        .as_ref()
        .is_some_and(|(_, error)| !is_refusal(error));
    for (position, (operation, done, append)) in jobs.into_iter().enumerate() {
        if let Some(append) = append
            && !keep_pending
        {
            drop_pending(shared, append);
        }
        let outcome = match (failure.take_if(|(at, _)| *at == position), &cause) {
            (Some((_, error)), _) => Err(error),
            (None, Some(cause)) => Err(LogStoreError::FailedWithBatch {
                operation,
                cause: cause.clone(),
            }),
            (None, None) => Ok(()),
        };
        done(outcome);
    }
}

/// Whether `error` is a write the log refused (its invariants), not a
/// failure of the disk.
fn is_refusal(error: &LogStoreError) -> bool {
    matches!(
        error,
        LogStoreError::NotContiguous { .. } | LogStoreError::TruncateCommitted { .. }
    )
}

/// Removes the entries after `last_kept` (all: `None`), refusing to remove
/// a committed one.
fn truncate_after<C: RaftTypeConfig>(
    shared: &Shared,
    txn: &mut Option<WriteTransaction>,
    last_kept: Option<u64>,
) -> Result<(), LogStoreError> {
    let first_removed = last_kept.map_or(0, |index| index + 1);
    // The latest committed log id given, written or not; else the one on
    // disk (none was given since the store was opened).
    let latest = shared.committed_point().latest_index();
    let committed = match latest {
        Some(latest) => latest,
        None => {
            let meta = open_meta_write(begin_write(shared, txn)?)?;
            read_meta::<LogIdOf<C>>(&meta, META_COMMITTED)?.map(|committed| committed.index())
        }
    };
    if let Some(committed) = committed
        && committed >= first_removed
    {
        return Err(LogStoreError::TruncateCommitted {
            first_removed,
            committed,
        });
    }
    shared.segments_write().truncate_from(first_removed)
}

/// Runs `body` in a write transaction of `shared`'s database committed
/// with `Durability::Immediate`, or aborted if `body` fails.
fn write<T>(
    shared: &Shared,
    operation: &'static str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, LogStoreError>,
) -> Result<T, LogStoreError> {
    commit_durably(&shared.db, shared.timings.get(), operation, body)
}

/// Runs `body` in a write transaction of `db` committed with
/// `Durability::Immediate`, or aborted if `body` fails.
fn commit_durably<T>(
    db: &Database,
    timings: Option<&Arc<dyn LogTimings>>,
    operation: &'static str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, LogStoreError>,
) -> Result<T, LogStoreError> {
    let failed = |source: redb::Error| LogStoreError::database(operation)(source);
    let mut txn = db.begin_write().map_err(|error| failed(error.into()))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|error| failed(error.into()))?;
    match body(&txn) {
        Ok(value) => {
            let started = std::time::Instant::now();
            txn.commit().map_err(|error| failed(error.into()))?;
            if let Some(timings) = timings {
                timings.committed(started.elapsed());
            }
            Ok(value)
        }
        Err(error) => {
            if let Err(abort_error) = txn.abort() {
                tracing::warn!(%abort_error, operation, "aborting a log transaction failed");
            }
            Err(error)
        }
    }
}

/// A store error for openraft, logged: openraft stops the replica on it.
fn storage_failed(error: LogStoreError) -> io::Error {
    tracing::error!(%error, "Raft log storage failed");
    io::Error::from(error)
}

/// Runs blocking store work on the runtime's blocking pool and converts its
/// error for openraft.
async fn run_blocking<C, T>(
    work: impl FnOnce() -> Result<T, LogStoreError> + Send + 'static,
) -> Result<T, io::Error>
where
    C: RaftTypeConfig,
    T: Send + 'static,
{
    C::spawn_blocking(work).await?.map_err(storage_failed)
}

fn decode_entry<C: RaftTypeConfig>(index: u64, stored: &[u8]) -> Result<C::Entry, LogStoreError> {
    let key = RecordKey::Entry { index };
    let payload =
        record::decode(&index.to_be_bytes(), stored).map_err(|problem| LogStoreError::Corrupt {
            record: key,
            problem,
        })?;
    let entry: C::Entry =
        palisade_codec::decode(payload).map_err(|source| LogStoreError::Undecodable {
            record: key,
            source,
        })?;
    if entry.index() != index {
        return Err(LogStoreError::Corrupt {
            record: key,
            problem: Corruption::IndexMismatch {
                found: entry.index(),
            },
        });
    }
    Ok(entry)
}

fn check_follows(previous: Option<u64>, index: u64) -> Result<(), LogStoreError> {
    match previous {
        Some(previous) if index != previous + 1 => Err(LogStoreError::Corrupt {
            record: RecordKey::Entry { index },
            problem: Corruption::Hole { previous },
        }),
        _ => Ok(()),
    }
}

fn open_meta_read(
    txn: &redb::ReadTransaction,
) -> Result<redb::ReadOnlyTable<&'static str, &'static [u8]>, LogStoreError> {
    txn.open_table(META_TABLE)
        .map_err(LogStoreError::database("open the metadata table"))
}

fn open_meta_write(
    txn: &WriteTransaction,
) -> Result<redb::Table<'_, &'static str, &'static [u8]>, LogStoreError> {
    txn.open_table(META_TABLE)
        .map_err(LogStoreError::database("open the metadata table"))
}

fn read_meta<T: DeserializeOwned>(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
) -> Result<Option<T>, LogStoreError> {
    let record = RecordKey::Meta { name };
    let Some(stored) = meta
        .get(name)
        .map_err(LogStoreError::database("read a metadata record"))?
    else {
        return Ok(None);
    };
    let payload = record::decode(name.as_bytes(), stored.value())
        .map_err(|problem| LogStoreError::Corrupt { record, problem })?;
    let value = palisade_codec::decode(payload)
        .map_err(|source| LogStoreError::Undecodable { record, source })?;
    Ok(Some(value))
}

fn write_meta<T: Serialize>(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    name: &'static str,
    value: &T,
) -> Result<(), LogStoreError> {
    let payload =
        palisade_codec::encode(value, Encoding::Json).map_err(|source| LogStoreError::Encode {
            record: RecordKey::Meta { name },
            source,
        })?;
    write_meta_json(meta, name, &payload)
}

/// Writes a metadata record whose JSON is already encoded.
fn write_meta_json(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    name: &'static str,
    payload: &[u8],
) -> Result<(), LogStoreError> {
    let stored = record::encode(name.as_bytes(), payload);
    meta.insert(name, stored.as_slice())
        .map_err(LogStoreError::database("write a metadata record"))?;
    Ok(())
}

fn remove_meta(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    name: &'static str,
) -> Result<(), LogStoreError> {
    meta.remove(name)
        .map_err(LogStoreError::database("remove a metadata record"))?;
    Ok(())
}

/// Converts any range of log indexes to `start..end` (`end == None`:
/// unbounded); `None` if the range is empty.
fn index_range(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(start) => *start,
        Bound::Excluded(start) => start.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(end) => end.checked_add(1),
        Bound::Excluded(end) => Some(*end),
        Bound::Unbounded => None,
    };
    match end {
        Some(end) if end <= start => None,
        _ => Some((start, end)),
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorageExt;

    /// Entries per purge in the tests that purge past short logs.
    const PURGE_STEP: u64 = 1_024;

    use super::*;
    use crate::testing::TestConfig;
    use crate::testing::blank;
    use crate::testing::log_id;

    type Store = LogStore<TestConfig>;

    #[test]
    fn the_format_record_is_raised_durably_and_never_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let record = store.format_record();
        assert_eq!(record.version().unwrap(), FORMAT_VERSION);
        record.raise(2).unwrap();
        record.raise(1).unwrap();
        assert_eq!(record.version().unwrap(), 2);
        drop((record, store));
        // A raised database still opens (the owner compares the version
        // with what its build supports).
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_record().version().unwrap(), 2);
    }

    /// Runs `open` with a subscriber that records what it logs at WARN and above.
    fn warnings_while(open: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, open);
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[tokio::test]
    async fn only_a_log_left_by_an_unclean_shutdown_is_reported_as_repaired() {
        let fresh = tempfile::tempdir().unwrap();
        let mut store = None;
        let warnings = warnings_while(|| store = Some(Store::open(fresh.path()).unwrap()));
        assert!(
            !warnings.contains("repairing"),
            "a new log is not a repair: {warnings}"
        );

        // A copy taken while the store is open is what a crash leaves behind.
        let mut store = store.unwrap();
        store
            .blocking_append((0..3).map(|index| blank(1, index)))
            .await
            .unwrap();
        let crashed = tempfile::tempdir().unwrap();
        fs::copy(
            fresh.path().join(LOG_FILE_NAME),
            crashed.path().join(LOG_FILE_NAME),
        )
        .unwrap();
        drop(store);
        let warnings = warnings_while(|| drop(Store::open(crashed.path()).unwrap()));
        assert!(
            warnings.contains("repairing the log database after an unclean shutdown"),
            "an unclean log is repaired and said so: {warnings}"
        );

        // Closed cleanly, it reopens without a repair.
        let warnings = warnings_while(|| drop(Store::open(fresh.path()).unwrap()));
        assert!(!warnings.contains("repairing"), "{warnings}");
    }

    async fn store_with_entries(dir: &Path, indexes: std::ops::Range<u64>) -> Store {
        let mut store = Store::open(dir).unwrap();
        store
            .blocking_append(indexes.map(|index| blank(1, index)))
            .await
            .unwrap();
        store
    }

    /// Rewrites the stored record of entry `index` with `edit`, bypassing the store.
    fn edit_record(dir: &Path, index: u64, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut stored = stored_record(dir, index);
        edit(&mut stored);
        segment_log::rewrite_record_for_tests(dir, index, Some(stored));
    }

    /// The stored record of entry `index`, read raw.
    fn stored_record(dir: &Path, index: u64) -> Vec<u8> {
        segment_log::raw_records_for_tests(dir)
            .into_iter()
            .find_map(|(_, first, records)| {
                index
                    .checked_sub(first)
                    .and_then(|at| records.get(at as usize).cloned())
            })
            .unwrap()
    }

    #[tokio::test]
    async fn corrupted_entry_is_an_error_naming_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_entries(dir.path(), 0..5).await;
        // Flip one bit in the middle of entry 3's JSON, under the open store.
        edit_record(dir.path(), 3, |stored| {
            let middle = stored.len() / 2;
            stored[middle] ^= 0x01;
        });
        // Just appended, the entries would be answered from memory: the
        // corruption shows once the log reads its file.
        store.reader.recent_lock().clear();
        let mut reader = store.reader();

        let error = reader.try_get_log_entries(0..5).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error
                .to_string()
                .contains("log entry at index 3 is corrupt"),
            "{error}"
        );
        assert!(error.to_string().contains("checksum mismatch"), "{error}");
        let typed = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<LogStoreError>());
        assert!(
            matches!(
                typed,
                Some(LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 3 },
                    problem: Corruption::Checksum { .. },
                })
            ),
            "{typed:?}"
        );

        // The single entry is refused too, never returned.
        assert!(reader.try_get_log_entries(3..4).await.is_err());
        // Entries around it still read.
        assert_eq!(reader.try_get_log_entries(0..3).await.unwrap().len(), 3);
        assert_eq!(reader.try_get_log_entries(4..).await.unwrap().len(), 1);
        // The full scan names it.
        assert!(matches!(
            store.verify(),
            Err(LogStoreError::Corrupt {
                record: RecordKey::Entry { index: 3 },
                ..
            })
        ));
        drop((reader, store));
        // Open checks every entry's checksum.
        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 3 },
                    problem: Corruption::Checksum { .. },
                }
            ),
            "{error}"
        );
    }

    #[tokio::test]
    async fn corrupted_last_entry_refuses_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        edit_record(dir.path(), 4, |stored| stored[0] ^= 0x80);

        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 4 },
                    problem: Corruption::Checksum { .. },
                }
            ),
            "{error}"
        );
    }

    #[tokio::test]
    async fn entry_moved_under_another_index_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        let two = stored_record(dir.path(), 2);
        segment_log::rewrite_record_for_tests(dir.path(), 1, Some(two));

        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("log entry at index 1 is corrupt"),
            "{error}"
        );
    }

    /// A crash in the middle of a write leaves part of a frame at the end
    /// of the last segment (here: a write that grew the file, cut short):
    /// that entry was never acknowledged, so open cuts it off, says so, and
    /// the log ends before it. A frame the disk never wrote reads as the
    /// zeros written ahead of the log's end: the log ends before it too.
    #[tokio::test]
    async fn a_write_torn_by_a_crash_is_cut_off_at_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        let (path, _, records) = segment_log::raw_records_for_tests(dir.path()).remove(0);
        assert_eq!(records.len(), 5);
        let last_frame: u64 = 16 + records[..4].iter().map(|r| 4 + r.len() as u64).sum::<u64>();
        let file = fs::File::options().write(true).open(&path).unwrap();
        let unwritten = vec![0u8; 4 + records[4].len()];
        std::os::unix::fs::FileExt::write_all_at(&file, &unwritten, last_frame).unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 3))
        );
        store.blocking_append([blank(1, 4)]).await.unwrap();
        drop(store);
        file.set_len(last_frame + 3).unwrap();

        let mut store = None;
        let warnings = warnings_while(|| store = Some(Store::open(dir.path()).unwrap()));
        assert!(
            warnings.contains("cutting off the end of the log"),
            "{warnings}"
        );
        let mut store = store.unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 3))
        );
        // The log continues where the torn entry was.
        store.blocking_append([blank(2, 4)]).await.unwrap();
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(2, 4))
        );
    }

    /// A purge of many entries runs inside openraft's core task: readers
    /// see it at once, and it deletes no entry one by one (a segment goes
    /// as a whole once all of it is purged).
    #[tokio::test]
    async fn a_large_purge_is_seen_at_once_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let entries = 3_100;
        let mut store = store_with_entries(dir.path(), 0..entries).await;
        let purged = 3_000;
        store.purge(log_id(1, purged)).await.unwrap();

        let state = LogState {
            last_purged_log_id: Some(log_id(1, purged)),
            last_log_id: Some(log_id(1, entries - 1)),
        };
        assert_eq!(store.get_log_state().await.unwrap(), state);
        let read = store
            .reader()
            .try_get_log_entries(0..entries)
            .await
            .unwrap();
        assert_eq!(read.first().map(|entry| entry.index()), Some(purged + 1));
        assert_eq!(read.len() as u64, entries - purged - 1);
        assert_eq!(store.verify().unwrap(), entries - purged - 1);

        for index in entries..entries + 3 {
            store.blocking_append([blank(1, index)]).await.unwrap();
        }
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(1, purged)),
                last_log_id: Some(log_id(1, entries + 2)),
            }
        );
        assert_eq!(store.verify().unwrap(), entries + 3 - purged - 1);
    }

    /// A purge past the end of the log (after a snapshot install): the
    /// next append continues the purge point, and no hole reaches the file.
    #[tokio::test]
    async fn an_append_after_a_purge_past_the_end_continues_the_purge_point() {
        let dir = tempfile::tempdir().unwrap();
        let entries = 2 * PURGE_STEP;
        let mut store = store_with_entries(dir.path(), 0..entries).await;
        let purged = 5 * PURGE_STEP;
        store.purge(log_id(2, purged)).await.unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(2, purged)),
                last_log_id: Some(log_id(2, purged)),
            }
        );
        store.blocking_append([blank(2, purged + 1)]).await.unwrap();
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 1);
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(2, purged)),
                last_log_id: Some(log_id(2, purged + 1)),
            }
        );
    }

    /// Found by a chaos campaign (seed 17 of `palisade chaos run --seeds
    /// 100 --ops 1000`): a snapshot installed past the end of a log shorter
    /// than a purge step made the step look for an entry beyond the log's
    /// end and report a hole, which stopped the replica for good.
    #[tokio::test]
    async fn a_purge_past_the_end_of_a_short_log_takes_the_rest_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let entries = PURGE_STEP + PURGE_STEP / 2;
        let mut store = store_with_entries(dir.path(), 0..entries).await;
        // Inside the log: one step, entries past it stay until appends.
        store.purge(log_id(2, entries - 10)).await.unwrap();
        // Then past its end while the rest (fewer than a step) is left.
        let purged = 5 * PURGE_STEP;
        store.purge(log_id(2, purged)).await.unwrap();
        let purged_state = LogState {
            last_purged_log_id: Some(log_id(2, purged)),
            last_log_id: Some(log_id(2, purged)),
        };
        assert_eq!(store.get_log_state().await.unwrap(), purged_state);
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 0, "no entry is left");
        assert_eq!(store.get_log_state().await.unwrap(), purged_state);

        // A log shorter than one step, purged past its end at once.
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..500).await;
        store.purge(log_id(2, purged)).await.unwrap();
        assert_eq!(store.get_log_state().await.unwrap(), purged_state);
        store.blocking_append([blank(2, purged + 1)]).await.unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 1);
    }

    /// Entries are stored in index order without their index: one that
    /// goes missing makes the next one sit under its index, where its
    /// checksum (which covers the index) fails.
    #[tokio::test]
    async fn a_missing_entry_refuses_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        segment_log::rewrite_record_for_tests(dir.path(), 2, None);

        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 2 },
                    problem: Corruption::Checksum { .. },
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("move its data directory aside"));
    }

    #[tokio::test]
    async fn corrupted_vote_refuses_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = Store::open(dir.path()).unwrap();
            store.save_vote(&openraft::Vote::new(3, 1)).await.unwrap();
        }
        let db = Database::open(dir.path().join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META_TABLE).unwrap();
            let mut stored = meta.get(META_VOTE).unwrap().unwrap().value().to_vec();
            let last = stored.len() - 1;
            stored[last] ^= 0x04;
            meta.insert(META_VOTE, stored.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        drop(db);

        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("log metadata record `vote` is corrupt"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = store_with_entries(dir.path(), 0..10).await;
            store.save_vote(&openraft::Vote::new(2, 7)).await.unwrap();
            store.save_committed(Some(log_id(1, 6))).await.unwrap();
            store.purge(log_id(1, 3)).await.unwrap();
        }
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(1, 3)),
                last_log_id: Some(log_id(1, 9)),
            }
        );
        assert_eq!(
            store.reader().read_vote().await.unwrap(),
            Some(openraft::Vote::new(2, 7))
        );
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id(1, 6)));
        let entries = store.reader().try_get_log_entries(..).await.unwrap();
        let indexes: Vec<u64> = entries.iter().map(|entry| entry.index()).collect();
        assert_eq!(indexes, (4..10).collect::<Vec<_>>());
        assert_eq!(store.verify().unwrap(), 6);
    }

    /// Keeps `store`'s writer busy with a write of its own until the
    /// returned sender is dropped or sent to: every write queued meanwhile
    /// waits for it.
    fn hold_the_writer(store: &Store) -> std::sync::mpsc::Sender<()> {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (held, holding) = std::sync::mpsc::channel();
        store.queue(WriteJob {
            operation: "hold the writer (test)",
            work: Work::Meta(Box::new(move |_| {
                held.send(()).unwrap();
                let _ = released.recv();
                Ok(())
            })),
            done: Box::new(|result| result.unwrap()),
            append: None,
            ends_group: false,
        });
        holding.recv().unwrap();
        release
    }

    fn callback() -> (
        IOFlushed<TestConfig>,
        openraft::alias::OneshotReceiverOf<TestConfig, Result<(), io::Error>>,
    ) {
        let (sender, receiver) = TestConfig::oneshot();
        (IOFlushed::signal(sender), receiver)
    }

    #[derive(Default)]
    struct CountedCommits(std::sync::atomic::AtomicUsize);

    impl LogTimings for CountedCommits {
        fn appended(&self, _: std::time::Duration) {}
        fn committed(&self, _: std::time::Duration) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A group's consecutive appends become one write (one system call for
    /// a hundred one-entry appends under load), each run named by its first
    /// job; other work keeps its place and splits the runs.
    #[test]
    fn consecutive_appends_of_a_group_are_merged_into_one_write() {
        let record = |index: u64| (index, Arc::<[u8]>::from(vec![index as u8]));
        let works = vec![
            Work::Append(vec![record(1)]),
            Work::Append(vec![record(2), record(3)]),
            Work::Append(vec![record(4)]),
            Work::Truncate(Some(2)),
            Work::Append(vec![record(3)]),
            Work::Append(vec![record(4)]),
            Work::Purge,
        ];
        let merged: Vec<(usize, String)> = merge_appends(works)
            .into_iter()
            .map(|(position, work)| {
                let shape = match work {
                    Work::Append(records) => format!(
                        "append {:?}",
                        records.iter().map(|(index, _)| *index).collect::<Vec<_>>()
                    ),
                    Work::Truncate(after) => format!("truncate after {after:?}"),
                    Work::Purge => "purge".to_string(),
                    Work::Meta(_) => "meta".to_string(),
                };
                (position, shape)
            })
            .collect();
        assert_eq!(
            merged,
            vec![
                (0, "append [1, 2, 3, 4]".to_string()),
                (3, "truncate after Some(2)".to_string()),
                (4, "append [3, 4]".to_string()),
                (6, "purge".to_string()),
            ]
        );
    }

    /// openraft awaits `append` in its core task: it must return once the
    /// entries are readable, not after their fsync (see "Durability, and a
    /// writer thread"). With the database's write lock held elsewhere, an
    /// append that writes before returning never returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn append_returns_before_the_commit_and_queued_appends_commit_together() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..3).await;
        let commits = Arc::new(CountedCommits::default());
        store.set_timings(commits.clone());
        let release = hold_the_writer(&store);

        let mut flushed = Vec::new();
        for index in 3..13 {
            let (callback, receiver) = callback();
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                store.append([blank(1, index)], callback),
            )
            .await
            .expect("append waited for the commit")
            .unwrap();
            flushed.push(receiver);
        }
        // No callback before the writer made the entries durable.
        for receiver in &mut flushed {
            assert!(
                matches!(
                    receiver.try_recv(),
                    Err(tokio::sync::oneshot::error::TryRecvError::Empty)
                ),
                "an append reported flushed before the writer wrote it"
            );
        }
        // Readable at once, not yet durable.
        let mut reader = store.reader();
        let indexes: Vec<u64> = reader
            .try_get_log_entries(0..20)
            .await
            .unwrap()
            .iter()
            .map(|entry| entry.index())
            .collect();
        assert_eq!(indexes, (0..13).collect::<Vec<_>>());
        let limited = reader.limited_get_log_entries(2, 6).await.unwrap();
        assert_eq!(limited.len(), 4);
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 12))
        );
        assert_eq!(commits.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(store.verify().unwrap(), 3, "nothing committed yet");

        drop(release);
        for receiver in flushed {
            receiver.await.unwrap().unwrap();
        }
        assert_eq!(store.verify().unwrap(), 13);
        // The held write's group, then the ten appends in at most two
        // (the writer may have taken the first alone), not ten.
        let commits = commits.0.load(std::sync::atomic::Ordering::SeqCst);
        assert!((2..=3).contains(&commits), "{commits} commits");
        assert!(store.reader.shared.pending().entries.is_empty());
    }

    /// An append queued behind a vote must not become durable before it
    /// (a replica that crashed with a new term's entries and its old vote
    /// could vote twice in that term), and entries are made durable before
    /// the records of their group: so a vote ends its group. Three writes
    /// queued while the writer is busy: the append before the vote goes
    /// with it, the one after it in a group of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_vote_ends_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..3).await;
        let commits = Arc::new(CountedCommits::default());
        store.set_timings(commits.clone());
        let jobs = store.writer.jobs.clone().unwrap();

        let release = hold_the_writer(&store);
        let (callback_a, flushed_a) = callback();
        store.append([blank(1, 3)], callback_a).await.unwrap();
        let voter = tokio::spawn(async move {
            store
                .save_vote(&openraft::Vote::new(2, 1))
                .await
                .map(|()| store)
        });
        // Time for the voter to queue its vote.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let (callback_b, flushed_b) = callback();
        let record = encode_entry::<TestConfig>(&blank(2, 4)).unwrap();
        jobs.send(WriteJob {
            operation: "append log entries",
            work: Work::Append(vec![record]),
            done: Box::new(move |result| callback_b.io_completed(result.map_err(storage_failed))),
            append: None,
            ends_group: false,
        })
        .unwrap_or_else(|_| panic!("the writer is gone"));
        drop(release);
        let store = voter.await.unwrap().unwrap();
        // The store's writer ends once every sender of its queue is gone.
        drop(jobs);
        flushed_a.await.unwrap().unwrap();
        flushed_b.await.unwrap().unwrap();
        let commits = commits.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(commits, 3, "held | append, vote | append");
        assert_eq!(store.verify().unwrap(), 5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_dropped_with_writes_queued_commits_them_and_closes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..3).await;
        let (callback, flushed) = callback();
        store.append([blank(1, 3)], callback).await.unwrap();
        drop(store);
        flushed.await.unwrap().unwrap();
        // Reopened at once: the writer let go of the database.
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 4);
    }

    #[tokio::test]
    async fn append_that_leaves_a_hole_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..3).await;

        let error = store.blocking_append([blank(1, 4)]).await.unwrap_err();
        assert!(error.to_string().contains("next index is 3"), "{error}");
        // A batch with a gap inside is refused whole.
        assert!(
            store
                .blocking_append([blank(1, 3), blank(1, 5)])
                .await
                .is_err()
        );
        // Overwriting without truncating first is refused too.
        assert!(store.blocking_append([blank(2, 2)]).await.is_err());
        assert_eq!(store.verify().unwrap(), 3);
        // Refused entries are not left for readers.
        assert_eq!(
            store
                .reader()
                .try_get_log_entries(0..10)
                .await
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 2))
        );

        // After a purge past the end, the log continues after the purged id.
        store.purge(log_id(1, 7)).await.unwrap();
        assert!(store.blocking_append([blank(1, 9)]).await.is_err());
        store.blocking_append([blank(1, 8)]).await.unwrap();
    }

    #[tokio::test]
    async fn committed_entries_are_never_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..5).await;
        store.save_committed(Some(log_id(1, 2))).await.unwrap();

        let error = store.truncate_after(Some(log_id(1, 1))).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("committed index 2"), "{error}");

        store.truncate_after(Some(log_id(1, 2))).await.unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 2))
        );
    }

    /// The log ids a bounded read of `range` answers.
    async fn read_ids(store: &Store, range: std::ops::Range<u64>) -> Vec<LogIdOf<TestConfig>> {
        let entries = store.reader().try_get_log_entries(range).await.unwrap();
        entries.iter().map(|entry| entry.log_id()).collect()
    }

    #[tokio::test]
    async fn reads_from_memory_never_answer_what_the_log_no_longer_holds() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..5).await;
        let term_1 = |indexes: std::ops::Range<u64>| -> Vec<_> {
            indexes.map(|index| log_id(1, index)).collect()
        };
        assert_eq!(read_ids(&store, 0..5).await, term_1(0..5));

        // A truncated tail is gone for readers at once.
        store.truncate_after(Some(log_id(1, 2))).await.unwrap();
        assert_eq!(read_ids(&store, 0..5).await, term_1(0..3));

        // A new leader's entries replace it.
        store
            .blocking_append([blank(2, 3), blank(2, 4)])
            .await
            .unwrap();
        let replaced = [term_1(0..3), vec![log_id(2, 3), log_id(2, 4)]].concat();
        assert_eq!(read_ids(&store, 0..5).await, replaced);

        // An append the log refuses (an overwrite without a truncation
        // first) is not read back.
        assert!(store.blocking_append([blank(3, 4)]).await.is_err());
        assert_eq!(read_ids(&store, 0..5).await, replaced);
        assert_eq!(read_ids(&store, 4..5).await, [log_id(2, 4)]);
    }

    /// The committed record as the database holds it (not the store's
    /// latest, which `read_committed` answers).
    fn committed_on_disk(store: &Store) -> Option<LogIdOf<TestConfig>> {
        let txn = store.reader.shared.db.begin_read().unwrap();
        let meta = open_meta_read(&txn).unwrap();
        read_meta(&meta, META_COMMITTED).unwrap()
    }

    /// Polls `check` until it holds, for at most `within`.
    async fn eventually(within: std::time::Duration, check: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if check() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        check()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn saving_the_committed_log_id_does_not_wait_for_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store_with_entries(dir.path(), 0..8).await;
        let release = hold_the_writer(&store);
        // The writer is busy (an fsync that takes long): saving the
        // committed log id must not wait for it, since openraft applies
        // only after it returns.
        tokio::time::timeout(
            std::time::Duration::from_secs(2),
            store.save_committed(Some(log_id(1, 6))),
        )
        .await
        .expect("save_committed waited for the writer")
        .unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id(1, 6)));
        assert_eq!(committed_on_disk(&store), None);
        drop(release);
        // Nothing else is written: the writer writes it within the interval.
        assert!(
            eventually(COMMITTED_SAVE_INTERVAL * 20, || committed_on_disk(&store)
                == Some(log_id(1, 6)))
            .await,
            "the committed log id was not written: {:?}",
            committed_on_disk(&store)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_committed_record_is_never_written_ahead_of_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = store_with_entries(dir.path(), 0..5).await;
            store.save_committed(Some(log_id(1, 3))).await.unwrap();
            // Index 7 is not in the log (yet): a record naming it would
            // outlive a crash that the entry did not.
            store.save_committed(Some(log_id(1, 7))).await.unwrap();
            tokio::time::sleep(COMMITTED_SAVE_INTERVAL * 3).await;
            assert_eq!(committed_on_disk(&store), None);
            // Not even when the store is dropped.
        }
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), None);

        store.save_committed(Some(log_id(1, 7))).await.unwrap();
        let (done, flushed) = callback();
        store
            .append((5..8).map(|index| blank(1, index)), done)
            .await
            .unwrap();
        flushed.await.unwrap().unwrap();
        assert!(
            eventually(COMMITTED_SAVE_INTERVAL * 20, || committed_on_disk(&store)
                == Some(log_id(1, 7)))
            .await,
            "the committed log id was not written once its entry was: {:?}",
            committed_on_disk(&store)
        );
    }

    #[tokio::test]
    async fn limited_read_is_bounded_by_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let big = "x".repeat(READ_BATCH_BYTES_MAX / 3);
        let entries = (0..6).map(|index| {
            <TestConfig as RaftTypeConfig>::Entry::new_normal(log_id(1, index), big.clone())
        });
        store.blocking_append(entries).await.unwrap();

        let mut reader = store.reader();
        let first = reader.limited_get_log_entries(0, 6).await.unwrap();
        assert_eq!(first.len(), 2);
        let next = reader.limited_get_log_entries(2, 6).await.unwrap();
        assert_eq!(next.len(), 2);
        assert_eq!(next[0].index(), 2);
        // Unlimited reads return everything.
        assert_eq!(reader.try_get_log_entries(0..6).await.unwrap().len(), 6);
    }

    #[tokio::test]
    async fn second_open_of_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _store = Store::open(dir.path()).unwrap();
        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(error, LogStoreError::AlreadyOpen { .. }),
            "{error}"
        );
        assert_eq!(error.io_kind(), io::ErrorKind::ResourceBusy);
    }

    /// Writes a database the way releases before segment files did: the
    /// entries `indexes` in its `log` table, `format` at `format`, and a
    /// purge point just below the first entry.
    fn write_legacy_log(dir: &Path, indexes: std::ops::Range<u64>, format: u32) {
        fs::create_dir_all(dir).unwrap();
        let db = Database::create(dir.join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LEGACY_LOG_TABLE).unwrap();
            for index in indexes.clone() {
                let stored = json_record(&blank(1, index));
                log.insert(index, &*stored).unwrap();
            }
            let mut meta = txn.open_table(META_TABLE).unwrap();
            write_meta(&mut meta, META_FORMAT, &format).unwrap();
            let vote: VoteOf<TestConfig> = openraft::Vote::new(1, 1);
            write_meta(&mut meta, META_VOTE, &vote).unwrap();
            write_meta(&mut meta, META_LAST_PURGED, &log_id(1, indexes.start - 1)).unwrap();
        }
        txn.commit().unwrap();
    }

    /// An entry's record as releases before the binary encoding wrote it.
    fn json_record(entry: &<TestConfig as RaftTypeConfig>::Entry) -> Vec<u8> {
        let json = serde_json::to_vec(entry).unwrap();
        record::encode(&entry.index().to_be_bytes(), &json)
    }

    fn format_on_disk(dir: &Path) -> Option<u32> {
        let db = Database::open(dir.join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let meta = open_meta_read(&txn).unwrap();
        read_meta(&meta, META_FORMAT).unwrap()
    }

    /// An older release's log: its entries move to a segment, the owner's
    /// version stays what it was, and `format` rises so that the older
    /// release refuses the directory from now on.
    #[tokio::test]
    async fn an_older_release_log_moves_into_segments() {
        let dir = tempfile::tempdir().unwrap();
        write_legacy_log(dir.path(), 10..20, 2);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(1, 9)),
                last_log_id: Some(log_id(1, 19)),
            }
        );
        assert_eq!(store.verify().unwrap(), 10);
        assert_eq!(
            store.reader().read_vote().await.unwrap(),
            Some(openraft::Vote::new(1, 1))
        );
        assert_eq!(store.format_record().version().unwrap(), 2);
        store.blocking_append([blank(1, 20)]).await.unwrap();
        drop(store);
        assert_eq!(format_on_disk(dir.path()), Some(FORMAT_CURRENT));
        {
            let db = Database::open(dir.path().join(LOG_FILE_NAME)).unwrap();
            let txn = db.begin_read().unwrap();
            assert!(
                txn.list_tables()
                    .unwrap()
                    .all(|table| table.name() != LEGACY_LOG_TABLE.name()),
                "the old table is gone"
            );
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 11);
        assert_eq!(store.format_record().version().unwrap(), 2);

        // A new log: level 1, format FORMAT_CURRENT.
        let fresh = tempfile::tempdir().unwrap();
        let store = Store::open(fresh.path()).unwrap();
        assert_eq!(store.format_record().version().unwrap(), FORMAT_VERSION);
        store.format_record().raise(FORMAT_CURRENT + 2).unwrap();
        drop(store);
        assert_eq!(
            format_on_disk(fresh.path()),
            Some(FORMAT_CURRENT + 2),
            "format follows a higher level"
        );
        // ... and this release still opens it: the owner checks its level.
        drop(Store::open(fresh.path()).unwrap());
    }

    /// The entries of a FORMAT_SEGMENTS log are JSON: they are still read,
    /// entries appended after them are binary, and the format rises so
    /// that the releases that decode only JSON see why they cannot go on.
    #[tokio::test]
    async fn json_entries_of_the_segment_format_are_read_and_new_ones_are_binary() {
        let dir = tempfile::tempdir().unwrap();
        // Its entries move into a segment as they are: JSON, as a
        // FORMAT_SEGMENTS release would have left them.
        write_legacy_log(dir.path(), 1..6, 2);
        let mut store = Store::open(dir.path()).unwrap();
        store
            .blocking_append([blank(1, 6), blank(1, 7)])
            .await
            .unwrap();
        let entries = store.reader().try_get_log_entries(1..8).await.unwrap();
        assert_eq!(
            entries,
            (1..8).map(|index| blank(1, index)).collect::<Vec<_>>()
        );
        drop(store);
        assert_eq!(format_on_disk(dir.path()), Some(FORMAT_BINARY_ENTRIES));
        let segments = Segments::open(&dir.path().join(segment_log::SEGMENTS_DIR), None).unwrap();
        let stored = segments.read(1, Some(8), None).unwrap();
        let encodings: Vec<_> = stored
            .iter()
            .map(|(index, stored)| {
                let payload = record::decode(&index.to_be_bytes(), stored).unwrap();
                palisade_codec::Encoding::of(payload).unwrap()
            })
            .collect();
        use palisade_codec::Encoding::{BinaryV1, Json};
        assert_eq!(
            encodings,
            [Json, Json, Json, Json, Json, BinaryV1, BinaryV1]
        );
    }

    /// A layout newer than this release's is refused at open, by name.
    #[tokio::test]
    async fn a_newer_layout_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..3).await);
        {
            let db = Database::open(dir.path().join(LOG_FILE_NAME)).unwrap();
            let txn = db.begin_write().unwrap();
            write_meta(
                &mut txn.open_table(META_TABLE).unwrap(),
                META_FORMAT,
                &(FORMAT_CURRENT + 1),
            )
            .unwrap();
            txn.commit().unwrap();
        }
        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(error, LogStoreError::UnsupportedFormat { found, .. } if found == FORMAT_CURRENT + 1),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains("run the palisade release that wrote it")
        );
    }

    /// A crash after the entries were written to a segment but before the
    /// old table was dropped: the move is made again, from the table.
    #[tokio::test]
    async fn an_interrupted_move_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        write_legacy_log(dir.path(), 1..6, 1);
        // What the crash left: a segment of part of the entries.
        let segments_dir = dir.path().join(segment_log::SEGMENTS_DIR);
        let mut segments = Segments::open(&segments_dir, None).unwrap();
        let records: Vec<_> = (1..3)
            .map(|index| encode_entry::<TestConfig>(&blank(1, index)).unwrap())
            .collect();
        segments.append(&records).unwrap();
        drop(segments);

        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.verify().unwrap(), 5);
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 5))
        );
    }

    /// Entries whose database (the vote) is gone are not a log to run on.
    #[tokio::test]
    async fn segments_without_their_database_refuse_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..3).await);
        fs::remove_file(dir.path().join(LOG_FILE_NAME)).unwrap();
        let error = Store::open(dir.path()).unwrap_err();
        assert!(error.to_string().contains("was missing"), "{error}");
    }

    #[test]
    fn index_ranges() {
        assert_eq!(index_range(&(3..3)), None);
        assert_eq!(index_range(&(Bound::Included(3), Bound::Excluded(2))), None);
        assert_eq!(index_range(&(3..4)), Some((3, Some(4))));
        assert_eq!(index_range(&(3..=3)), Some((3, Some(4))));
        assert_eq!(index_range(&(3..)), Some((3, None)));
        assert_eq!(index_range(&(..)), Some((0, None)));
        assert_eq!(index_range(&(..=u64::MAX)), Some((0, None)));
        assert_eq!(
            index_range(&(Bound::Excluded(u64::MAX), Bound::Unbounded)),
            None
        );
    }
}
