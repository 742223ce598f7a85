//! The durable Raft log: entries, vote, committed log id and last purged log
//! id in one redb database file.
//!
//! # Layout of the database
//!
//! - table `log`: `u64` log index -> record holding the JSON of the entry;
//! - table `meta`: name -> record holding the JSON of a value: `vote`,
//!   `committed`, `last_purged`, and `format`: the version of what the
//!   database holds. 1 is this layout with entries every release reads;
//!   the owner raises it ([`FormatRecord::raise`]) when it starts writing
//!   entries an older release cannot decode (Palisade: to the cluster
//!   feature level once a replica applied a raise), so that an older
//!   release refuses the whole database at open with a clear message
//!   instead of failing on one entry later. Releases before the record
//!   could move accept exactly 1; this one opens any version and leaves
//!   the comparison with what its build supports to the owner
//!   ([`FormatRecord::version`]).
//!
//! Every record carries a CRC-32 over its key and payload (see the
//! crate-private `record` module), verified on every read.
//!
//! # Durability, and a writer thread
//!
//! Every write (append, vote, committed, truncate, purge) is committed in a
//! redb write transaction with [`Durability::Immediate`]: when the commit
//! returns, the data has been written and fsynced, and survives a process
//! crash or a power loss (as far as the device honours flushes).
//!
//! The writes are made by one thread of the store's own, in the order they
//! were asked for: it takes every write queued while its previous commit
//! was under way and commits them together, one transaction and one fsync
//! (group commit). `append` does not wait for it: openraft awaits `append`
//! inside its core task, and a core waiting for an fsync handles nothing
//! else — in the load test (`palisade-load`) a read's read index waited
//! 150 ms at p90 for a core busy appending. So `append` puts the entries
//! (already encoded) in a map of pending entries, queues them for the
//! writer and returns: readers see the pending entries at once, as the
//! trait requires, and the writer calls `io_completed` after the commit
//! that made them durable, then drops them from the map. The other writes
//! wait for their commit, as openraft requires (the vote, the committed
//! log id, a truncation, a purge step are durable when they return), which
//! makes every append queued before them durable too. A failed transaction
//! fails every write in it; openraft stops the replica on the first.
//!
//! A reader takes the pending entries it needs before it opens its read
//! transaction: an entry the writer drops from the map meanwhile was
//! committed before, so the transaction has it.
//!
//! # Purge: at once for openraft, in steps on disk
//!
//! openraft awaits `purge` inside its core task: while it runs, the replica
//! handles no heartbeat, vote or write. A snapshot makes tens of thousands
//! of entries purgeable at once, and deleting them in one transaction took
//! over a second under load (measured in a 30-minute soak: the replica that
//! had just snapshotted missed every heartbeat for 1.2-1.6 s, and on
//! waking its election timer fired first, deposing a healthy leader). So
//! `purge` records the new purge point in memory, from where reads, the
//! log state and appends treat everything up to it as gone, and deletes
//! at most [`PURGE_STEP`] entries; every later transaction of the writer
//! deletes the next step (no extra fsync), one step per transaction
//! however many writes it groups, until the file caught up.
//! Each step also moves the `last_purged` record to the last entry it
//! deleted, so the file always holds exactly the entries above its record,
//! without a hole. A crash before the file caught up only leaves entries
//! that openraft purges again after the restart.

//! # Invariants enforced
//!
//! The log never has a hole: an append must continue the last entry (or the
//! last purged log id when the log is empty), and reads fail if they find a
//! gap. Entries up to the persisted committed index are never truncated.
//! Violations are errors, which openraft treats as fatal: the replica stops
//! rather than store or serve a broken log.
//!
//! # Threads
//!
//! redb calls block (and commits fsync): writes run on the writer thread;
//! reads run on the runtime's blocking pool (`spawn_blocking`), never on an
//! async worker thread. Dropping the store stops the writer after the
//! writes queued before and waits for it, so that the file is closed (when
//! no reader is left) once the store is gone: an in-process replica that
//! is crashed and restarted opens it again at once.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Debug;
use std::fs;
use std::io;
use std::marker::PhantomData;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
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
use redb::Database;
use redb::Durability;
use redb::ReadableDatabase;
use redb::ReadableTable;
use redb::ReadableTableMetadata;
use redb::TableDefinition;
use redb::WriteTransaction;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Corruption;
use crate::error::LogStoreError;
use crate::error::RecordKey;
use crate::record;

/// Name of the database file inside the directory given to [`LogStore::open`].
pub const LOG_FILE_NAME: &str = "log.redb";

/// Upper bound on the stored bytes of the entries one
/// `limited_get_log_entries` call returns (the call that feeds replication).
/// A single entry larger than this is still returned, alone. The peer
/// transport must accept messages of at least this size plus framing.
pub const READ_BATCH_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Version of the database layout described in the module documentation:
/// what a new database is created with, and the lowest version there is.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Entries one step of the background purge deletes (one transaction;
/// see the module doc): small enough that an append waiting for the
/// database's write lock waits milliseconds, not a second.
pub const PURGE_STEP: u64 = 1_024;

/// Most writes the writer commits in one transaction: a bound on one
/// transaction's size, far above what openraft queues between two commits.
const WRITES_PER_COMMIT_MAX: usize = 1_024;

/// Memory redb may use to cache pages of the log file. redb's default is 1 GiB;
/// the log is small (it is purged behind every snapshot) and several replicas
/// may share a host.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

const LOG_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const META_VOTE: &str = "vote";
const META_COMMITTED: &str = "committed";
const META_LAST_PURGED: &str = "last_purged";
const META_FORMAT: &str = "format";

/// The open database, shared by the store and all its readers.
struct Shared {
    db: Database,
    path: PathBuf,
    /// Where write timings go (`--metrics-listen`); set once, unset in
    /// tests and tools.
    timings: std::sync::OnceLock<Arc<dyn LogTimings>>,
    /// The purge point openraft was given, ahead of the one on disk.
    purge: std::sync::Mutex<PurgeAhead>,
    /// Entries appended and not yet committed by the writer.
    pending: std::sync::Mutex<PendingEntries>,
}

/// Entries `append` handed to the writer, readable until it committed
/// them (see "Durability, and a writer thread" in the module doc).
#[derive(Debug, Default)]
struct PendingEntries {
    /// Index -> the append that queued it (a sequence number) and its
    /// stored record.
    entries: BTreeMap<u64, (u64, Arc<[u8]>)>,
    /// The sequence number of the next append.
    next_append: u64,
}

/// What a write does inside the transaction it shares.
type WriteWork = Box<dyn FnOnce(&Shared, &WriteTransaction) -> Result<(), LogStoreError> + Send>;

/// One write for the writer thread: `work` runs inside the transaction it
/// shares with the writes queued with it, `done` learns the outcome once
/// that transaction committed (or failed).
struct WriteJob {
    operation: &'static str,
    work: WriteWork,
    done: Box<dyn FnOnce(Result<(), LogStoreError>) + Send>,
    /// For an append: its sequence number, whose pending entries are
    /// dropped once they are committed (or failed).
    append: Option<u64>,
}

/// Where a [`LogStore`] commits its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// On a writer thread of the store's own; `append` returns before the
    /// commit (see "Durability, and a writer thread" in the module doc).
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
        // closes its handle on the database (see "Threads").
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the Raft log's writer thread panicked");
        }
    }
}

/// The purge point openraft was given, and whether the file has caught
/// up with it (see "Purge" in the module doc).
#[derive(Debug, Default)]
struct PurgeAhead {
    /// The last purged log id as openraft knows it: its index, and its
    /// JSON (`Shared` is not generic over the log id's type).
    target: Option<(u64, Vec<u8>)>,
    /// True while the file holds entries up to `target` (or its
    /// `last_purged` record is behind it): the next append takes a step.
    behind: bool,
}

impl Shared {
    fn purge_ahead(&self) -> std::sync::MutexGuard<'_, PurgeAhead> {
        // Only plain fields are changed under the lock: a panic elsewhere
        // cannot leave them half-written.
        self.purge
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The index up to which openraft considers the log purged, when it is
    /// ahead of (or equal to) the purge point on disk.
    fn purged_index_ahead(&self) -> Option<u64> {
        self.purge_ahead().target.as_ref().map(|(index, _)| *index)
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, PendingEntries> {
        // Changed only by whole-entry inserts and removes: a panic
        // elsewhere cannot leave it half-written.
        self.pending
            .lock()
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
}

/// Receives the timings of the log's writes, for metrics. Called on the
/// writer thread, right after each commit: keep it to an atomic update.
pub trait LogTimings: Send + Sync {
    /// A batch of entries was appended durably: from the `append` call to
    /// the commit that made it durable (encode, wait in the writer's
    /// queue, write, fsync).
    fn appended(&self, elapsed: std::time::Duration);
    /// A write transaction was committed durably (the fsync), whatever it
    /// wrote (entries, vote, truncation, purge).
    fn committed(&self, elapsed: std::time::Duration);
}

/// The durable Raft log of one replica. Implements [`RaftLogStorage`].
///
/// There is one `LogStore` per database (redb locks the file, so a second
/// process opening it gets [`LogStoreError::AlreadyOpen`]); it is the only
/// writer. Readers are cheap clones, see [`LogStore::reader`].
pub struct LogStore<C: RaftTypeConfig> {
    reader: LogReader<C>,
    writer: Writer,
}

/// A read handle on the log. Implements [`RaftLogReader`].
///
/// Cloning shares the open database. Each read is one redb read transaction,
/// so it sees a consistent snapshot of the log and never blocks the writer.
/// A reader keeps the database open (and its file locked) while it lives,
/// even after the [`LogStore`] is dropped.
pub struct LogReader<C: RaftTypeConfig> {
    shared: Arc<Shared>,
    _config: PhantomData<fn() -> C>,
}

impl<C: RaftTypeConfig> Clone for LogReader<C> {
    fn clone(&self) -> Self {
        LogReader {
            shared: Arc::clone(&self.shared),
            _config: PhantomData,
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
    /// Opens the log in `dir` (creating the directory and the database if
    /// they do not exist), repairs it if the last shutdown was unclean, and
    /// checks its shape: format version, first and last entries, contiguity,
    /// and the metadata records.
    ///
    /// Blocking: call it before starting the runtime or from a blocking task.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LogStoreError> {
        Self::open_with(dir, WriteMode::Thread)
    }

    /// Like [`LogStore::open`], committing writes as `mode` says.
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
        sync_directory(dir)?;

        let shared = Arc::new(Shared {
            db,
            path,
            timings: std::sync::OnceLock::new(),
            purge: std::sync::Mutex::new(PurgeAhead::default()),
            pending: std::sync::Mutex::new(PendingEntries::default()),
        });
        initialize(&shared)?;
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
                _config: PhantomData,
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

    /// A read handle sharing this store's database.
    pub fn reader(&self) -> LogReader<C> {
        self.reader.clone()
    }

    /// The database's `format` record (see the module doc), as a handle
    /// the owner keeps to raise it later.
    pub fn format_record(&self) -> FormatRecord {
        FormatRecord {
            shared: self.reader.shared.clone(),
        }
    }

    /// Reads and verifies every record in the log (checksums, decoding,
    /// contiguity, nothing at or below the last purged index) and returns the
    /// number of entries. Blocking; meant for startup checks and tooling.
    pub fn verify(&self) -> Result<u64, LogStoreError> {
        self.reader.verify()
    }

    /// Queues `work` for the writer; `done` learns the outcome after the
    /// commit. A writer that is gone fails the job at once.
    fn queue(&self, job: WriteJob) {
        let Some(jobs) = &self.writer.jobs else {
            // WriteMode::Inline (the queue closes otherwise only when the
            // store is dropped).
            run_batch::<C>(&self.reader.shared, vec![job]);
            return;
        };
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            if let Some(sequence) = job.append {
                drop_pending(&self.reader.shared, sequence);
            }
            (job.done)(Err(LogStoreError::WriterStopped {
                problem: "is gone (it panicked)".into(),
            }));
        }
    }

    /// Queues `work` and waits until it is committed.
    async fn write_and_wait(
        &self,
        operation: &'static str,
        work: impl FnOnce(&Shared, &WriteTransaction) -> Result<(), LogStoreError> + Send + 'static,
    ) -> Result<(), io::Error> {
        let (sender, receiver) = C::oneshot();
        self.queue(WriteJob {
            operation,
            work: Box::new(work),
            done: Box::new(move |result| {
                let _ = sender.send(result);
            }),
            append: None,
        });
        let result = match receiver.await {
            Ok(result) => result,
            Err(_) => Err(LogStoreError::WriterStopped {
                problem: "stopped before the write was committed".into(),
            }),
        };
        result.map_err(storage_failed)
    }
}

impl<C: RaftTypeConfig> LogReader<C> {
    /// Reads the entries with index in `start..end` (`end == None`: to the
    /// end of the log). With `bytes_max`, stops before the entry that would
    /// bring the stored bytes over it, but always returns at least one entry.
    fn entries(
        &self,
        start: u64,
        end: Option<u64>,
        bytes_max: Option<usize>,
    ) -> Result<Vec<C::Entry>, LogStoreError> {
        // Entries purged but not yet deleted are not there for readers.
        let start = match self.shared.purged_index_ahead() {
            Some(purged) => start.max(purged + 1),
            None => start,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        // Before the read transaction: see the module doc.
        let pending = self.shared.pending_range(start, end);
        let txn = self.begin_read()?;
        let log = txn
            .open_table(LOG_TABLE)
            .map_err(LogStoreError::database("open the log table"))?;
        let range = match end {
            Some(end) => log.range(start..end),
            None => log.range(start..),
        }
        .map_err(LogStoreError::database("read log entries"))?;

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
        for item in range {
            let (key, value) = item.map_err(LogStoreError::database("read log entries"))?;
            let index = key.value();
            check_follows(previous, index)?;
            let stored = value.value();
            if !fits(stored, &entries) {
                return Ok(entries);
            }
            entries.push(decode_entry::<C>(index, stored)?);
            previous = Some(index);
        }
        // The pending entries follow what the file holds (those the writer
        // committed meanwhile are in both).
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
        let txn = self.begin_read()?;
        let meta = open_meta_read(&txn)?;
        read_meta(&meta, META_COMMITTED)
    }

    fn log_state(&self) -> Result<LogState<C>, LogStoreError> {
        // Before the read transaction: see the module doc.
        let pending_last = self.shared.pending_last();
        let txn = self.begin_read()?;
        let log = txn
            .open_table(LOG_TABLE)
            .map_err(LogStoreError::database("open the log table"))?;
        let meta = open_meta_read(&txn)?;
        let on_disk: Option<LogIdOf<C>> = read_meta(&meta, META_LAST_PURGED)?;
        let ahead = self.purge_target()?;
        let last_purged_log_id = match (on_disk, ahead) {
            (Some(on_disk), Some(ahead)) if on_disk.index() > ahead.index() => Some(on_disk),
            (on_disk, ahead) => ahead.or(on_disk),
        };
        let purged_index = last_purged_log_id.as_ref().map(|id| id.index());
        let last = log
            .last()
            .map_err(LogStoreError::database("read the last log entry"))?;
        let last_log_id = match (last, pending_last) {
            (_, Some((index, stored))) if purged_index.is_none_or(|purged| index > purged) => {
                Some(decode_entry::<C>(index, &stored)?.log_id())
            }
            (Some((key, value)), _) if purged_index.is_none_or(|purged| key.value() > purged) => {
                Some(decode_entry::<C>(key.value(), value.value())?.log_id())
            }
            _ => last_purged_log_id.clone(),
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    /// The purge point openraft was given (see "Purge" in the module doc).
    fn purge_target(&self) -> Result<Option<LogIdOf<C>>, LogStoreError> {
        let ahead = self.shared.purge_ahead();
        let Some((_, json)) = &ahead.target else {
            return Ok(None);
        };
        serde_json::from_slice(json)
            .map(Some)
            .map_err(|source| LogStoreError::Undecodable {
                record: RecordKey::Meta {
                    name: META_LAST_PURGED,
                },
                source,
            })
    }

    /// The cheap checks made at open: the metadata records and the first and
    /// last entries verify, the entries between them are all there (by
    /// count), and none is at or below the last purged index. On a count
    /// mismatch, falls back to a full scan to name the missing index.
    fn check_shape(&self) -> Result<LogState<C>, LogStoreError> {
        let txn = self.begin_read()?;
        let log = txn
            .open_table(LOG_TABLE)
            .map_err(LogStoreError::database("open the log table"))?;
        let meta = open_meta_read(&txn)?;
        let _vote: Option<VoteOf<C>> = read_meta(&meta, META_VOTE)?;
        let _committed: Option<LogIdOf<C>> = read_meta(&meta, META_COMMITTED)?;
        let last_purged: Option<LogIdOf<C>> = read_meta(&meta, META_LAST_PURGED)?;

        let first = log
            .first()
            .map_err(LogStoreError::database("read the first log entry"))?
            .map(|(key, value)| decode_entry::<C>(key.value(), value.value()))
            .transpose()?;
        let last = log
            .last()
            .map_err(LogStoreError::database("read the last log entry"))?
            .map(|(key, value)| decode_entry::<C>(key.value(), value.value()))
            .transpose()?;
        let count = log
            .len()
            .map_err(LogStoreError::database("count log entries"))?;

        if let (Some(first), Some(last)) = (&first, &last) {
            check_above_purged::<C>(last_purged.as_ref(), first.index())?;
            if last.index() - first.index() + 1 != count {
                // Something between them is missing: scan to name it.
                self.verify()?;
            }
        }
        Ok(LogState {
            last_log_id: last.map(|entry| entry.log_id()).or(last_purged.clone()),
            last_purged_log_id: last_purged,
        })
    }

    fn verify(&self) -> Result<u64, LogStoreError> {
        let txn = self.begin_read()?;
        let log = txn
            .open_table(LOG_TABLE)
            .map_err(LogStoreError::database("open the log table"))?;
        let meta = open_meta_read(&txn)?;
        let _vote: Option<VoteOf<C>> = read_meta(&meta, META_VOTE)?;
        let _committed: Option<LogIdOf<C>> = read_meta(&meta, META_COMMITTED)?;
        let last_purged: Option<LogIdOf<C>> = read_meta(&meta, META_LAST_PURGED)?;

        let mut previous: Option<u64> = None;
        let mut count = 0u64;
        for item in log
            .iter()
            .map_err(LogStoreError::database("read log entries"))?
        {
            let (key, value) = item.map_err(LogStoreError::database("read log entries"))?;
            let index = key.value();
            if previous.is_none() {
                check_above_purged::<C>(last_purged.as_ref(), index)?;
            }
            check_follows(previous, index)?;
            decode_entry::<C>(index, value.value())?;
            previous = Some(index);
            count += 1;
        }
        Ok(count)
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, LogStoreError> {
        self.shared
            .db
            .begin_read()
            .map_err(LogStoreError::database("begin a read transaction"))
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogReader<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let Some((start, end)) = index_range(&range) else {
            return Ok(Vec::new());
        };
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
        let reader = self.clone();
        run_blocking::<C, _>(move || reader.entries(start, Some(end), Some(READ_BATCH_BYTES_MAX)))
            .await
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C> {
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
        self.write_and_wait("save the vote", move |_, txn| {
            let mut meta = open_meta_write(txn)?;
            write_meta(&mut meta, META_VOTE, &vote)
        })
        .await
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        self.write_and_wait("save the committed log id", move |_, txn| {
            let mut meta = open_meta_write(txn)?;
            match &committed {
                Some(committed) => write_meta(&mut meta, META_COMMITTED, committed),
                None => remove_meta(&mut meta, META_COMMITTED),
            }
        })
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
        let records = entries
            .into_iter()
            .map(|entry| encode_entry::<C>(&entry))
            .collect::<Result<Vec<_>, _>>()?;
        if records.is_empty() {
            callback.io_completed(Ok(()));
            return Ok(());
        }
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
        self.queue(WriteJob {
            operation: "append log entries",
            work: Box::new(move |shared, txn| append_records::<C>(shared, txn, &records)),
            done: Box::new(move |result| {
                if result.is_ok()
                    && let Some(timings) = timings
                {
                    timings.appended(started.elapsed());
                }
                callback.io_completed(result.map_err(storage_failed));
            }),
            append: Some(sequence),
        });
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        tracing::debug!(?last_log_id, "truncating the log after");
        self.write_and_wait("truncate the log", move |_, txn| {
            truncate_after::<C>(txn, last_log_id.as_ref())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        tracing::debug!(?log_id, "purging the log up to");
        // At once for readers, in steps on disk: see the module doc.
        let json = serde_json::to_vec(&log_id).map_err(|source| {
            io::Error::from(LogStoreError::Encode {
                record: RecordKey::Meta {
                    name: META_LAST_PURGED,
                },
                source,
            })
        })?;
        {
            let mut ahead = self.reader.shared.purge_ahead();
            if ahead
                .target
                .as_ref()
                .is_some_and(|(index, _)| *index >= log_id.index())
            {
                // The last purged log id never moves back.
                return Ok(());
            }
            ahead.target = Some((log_id.index(), json));
            ahead.behind = true;
        }
        // The transaction this joins takes the first step
        // (`commit_together`); waiting for it makes the step durable.
        self.write_and_wait("purge the log", |_, _| Ok(())).await
    }
}

/// The `format` record of one log database (see the module doc). Cheap to
/// clone; shares the store's open database.
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
        Ok(read_meta::<u32>(&meta, META_FORMAT)?.unwrap_or(FORMAT_VERSION))
    }

    /// Raises the recorded version to `version` durably (one transaction,
    /// fsynced); a lower or equal `version` changes nothing. Blocking.
    pub fn raise(&self, version: u32) -> Result<(), LogStoreError> {
        write(&self.shared, "raise the format version", |txn| {
            let mut meta = open_meta_write(txn)?;
            let current = read_meta::<u32>(&meta, META_FORMAT)?.unwrap_or(FORMAT_VERSION);
            if version > current {
                write_meta(&mut meta, META_FORMAT, &version)?;
            }
            Ok(())
        })
    }
}

/// Creates the tables if needed and checks (or records) the format version.
fn initialize(shared: &Shared) -> Result<(), LogStoreError> {
    write(shared, "initialize", |txn| {
        txn.open_table(LOG_TABLE)
            .map_err(LogStoreError::database("create the log table"))?;
        let mut meta = open_meta_write(txn)?;
        match read_meta::<u32>(&meta, META_FORMAT)? {
            None => write_meta(&mut meta, META_FORMAT, &FORMAT_VERSION),
            // Higher versions have this layout too (see the module doc):
            // the owner decides whether its build reads their entries.
            Some(found) if found >= FORMAT_VERSION => Ok(()),
            Some(found) => Err(LogStoreError::UnsupportedFormat {
                path: shared.path.clone(),
                found,
            }),
        }
    })
}

/// An entry as it is stored: its index and its record (CRC + JSON).
fn encode_entry<C: RaftTypeConfig>(entry: &C::Entry) -> Result<(u64, Arc<[u8]>), LogStoreError> {
    let index = entry.index();
    let payload = serde_json::to_vec(entry).map_err(|source| LogStoreError::Encode {
        record: RecordKey::Entry { index },
        source,
    })?;
    Ok((index, record::encode(&index.to_be_bytes(), &payload).into()))
}

/// Writes `records` in `txn`, after checking that they continue the log.
fn append_records<C: RaftTypeConfig>(
    shared: &Shared,
    txn: &WriteTransaction,
    records: &[(u64, Arc<[u8]>)],
) -> Result<(), LogStoreError> {
    let mut log = txn
        .open_table(LOG_TABLE)
        .map_err(LogStoreError::database("open the log table"))?;
    let last_index = log
        .last()
        .map_err(LogStoreError::database("read the last log entry"))?
        .map(|(key, _)| key.value());
    // A step of a pending purge rides on this transaction (see the
    // module doc); if it leaves the log empty, the entries continue
    // the purge point.
    let last_index = match shared.purged_index_ahead() {
        Some(purged) if last_index.is_some_and(|last| last <= purged) => {
            // Every entry left is purged (a snapshot was installed past
            // the end of the log): all of them go now, or the new
            // entries would follow a hole on disk.
            purge_step::<C>(shared, txn, &mut log, u64::MAX)?;
            None
        }
        // Otherwise the transaction took its step already
        // (`commit_together`).
        _ => last_index,
    };
    let mut expected = match (last_index, shared.purged_index_ahead()) {
        (Some(last_index), _) => Some(last_index + 1),
        // An empty log continues its last purged log id. A log that was
        // never written may start anywhere (at a snapshot's end, say).
        (None, Some(purged)) => Some(purged + 1),
        (None, None) => {
            let meta = open_meta_write(txn)?;
            read_meta::<LogIdOf<C>>(&meta, META_LAST_PURGED)?.map(|id| id.index() + 1)
        }
    };
    for (index, stored) in records {
        let index = *index;
        if let Some(expected) = expected
            && index != expected
        {
            return Err(LogStoreError::NotContiguous {
                expected,
                got: index,
            });
        }
        log.insert(index, &**stored)
            .map_err(LogStoreError::database("insert a log entry"))?;
        expected = Some(index + 1);
    }
    Ok(())
}

/// Drops the pending entries of append `sequence` (committed, or failed);
/// an entry queued again since by a later append stays.
fn drop_pending(shared: &Shared, sequence: u64) {
    shared
        .pending()
        .entries
        .retain(|_, (queued_by, _)| *queued_by != sequence);
}

/// Runs `works` in one transaction and commits it durably; on a failure,
/// the position of the work that failed (0 when the transaction itself
/// failed) and its error.
///
/// The transaction first takes one step of a pending purge (see "Purge"
/// in the module doc): one per transaction, however many writes it
/// carries. A step per append let a commit of a hundred queued appends
/// delete a hundred steps at once, and the `save_committed` queued behind
/// it (which openraft's core awaits) waited 270-490 ms after each snapshot
/// in the load test.
fn commit_together<C: RaftTypeConfig>(
    shared: &Shared,
    operation: &'static str,
    works: Vec<WriteWork>,
) -> Result<(), (usize, LogStoreError)> {
    write_with(
        shared,
        operation,
        |txn| {
            // Most transactions have no step to take: they do not open the
            // log table for it.
            if shared.purge_ahead().behind {
                let mut log = txn
                    .open_table(LOG_TABLE)
                    .map_err(|error| (0, LogStoreError::database("open the log table")(error)))?;
                purge_step::<C>(shared, txn, &mut log, PURGE_STEP).map_err(|error| (0, error))?;
            }
            for (position, work) in works.into_iter().enumerate() {
                work(shared, txn).map_err(|error| (position, error))?;
            }
            Ok(())
        },
        |error| (0, error),
    )
}

/// The writer thread (see the module doc): commits the queued jobs in
/// groups until the store's queue closes.
fn write_loop<C: RaftTypeConfig>(shared: &Shared, queued: &mpsc::Receiver<WriteJob>) {
    while let Ok(first) = queued.recv() {
        let mut jobs = vec![first];
        while jobs.len() < WRITES_PER_COMMIT_MAX {
            match queued.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        run_batch::<C>(shared, jobs);
    }
}

/// Commits `jobs` together and tells each its outcome.
fn run_batch<C: RaftTypeConfig>(shared: &Shared, jobs: Vec<WriteJob>) {
    let operation = jobs[0].operation;
    let (works, jobs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|job| (job.work, (job.operation, job.done, job.append)))
        .unzip();
    let mut failure = commit_together::<C>(shared, operation, works).err();
    let cause = failure.as_ref().map(|(_, error)| error.to_string());
    for (position, (operation, done, append)) in jobs.into_iter().enumerate() {
        if let Some(sequence) = append {
            drop_pending(shared, sequence);
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

fn truncate_after<C: RaftTypeConfig>(
    txn: &WriteTransaction,
    last_kept: Option<&LogIdOf<C>>,
) -> Result<(), LogStoreError> {
    let first_removed = last_kept.map_or(0, |id| id.index() + 1);
    let mut log = txn
        .open_table(LOG_TABLE)
        .map_err(LogStoreError::database("open the log table"))?;
    let meta = open_meta_write(txn)?;
    if let Some(committed) = read_meta::<LogIdOf<C>>(&meta, META_COMMITTED)?
        && committed.index() >= first_removed
    {
        return Err(LogStoreError::TruncateCommitted {
            first_removed,
            committed: committed.index(),
        });
    }
    log.retain_in(first_removed.., |_, _| false)
        .map_err(LogStoreError::database("remove log entries"))
}

/// One step of a pending purge (see the module doc), in `txn`: deletes at
/// most `entries_max` entries at or below the purge point and moves the
/// `last_purged` record to the last one deleted, or to the purge point once
/// none is left. Marks the purge caught up when this step reaches it; a
/// transaction that then fails to commit fails the replica anyway (the
/// store's errors are fatal to openraft).
fn purge_step<C: RaftTypeConfig>(
    shared: &Shared,
    txn: &WriteTransaction,
    log: &mut redb::Table<'_, u64, &'static [u8]>,
    entries_max: u64,
) -> Result<(), LogStoreError> {
    // A copy, so readers (which check the purge point on every read) never
    // wait for this step's deletes; writes are serialized by redb anyway.
    let (target, target_json) = {
        let ahead = shared.purge_ahead();
        match ahead.target.as_ref().filter(|_| ahead.behind) {
            Some((target, json)) => (*target, json.clone()),
            None => return Ok(()),
        }
    };
    let mut meta = open_meta_write(txn)?;
    let first = log
        .first()
        .map_err(LogStoreError::database("read the first log entry"))?
        .map(|(key, _)| key.value());
    let last = log
        .last()
        .map_err(LogStoreError::database("read the last log entry"))?
        .map(|(key, _)| key.value());
    let upto = match (first, last) {
        (Some(first), Some(last)) if first <= target => {
            let step_end = target.min(first.saturating_add(entries_max - 1));
            // A step that reaches the last entry takes the rest and reaches
            // the purge point: nothing lies between the log's end and a
            // purge point past it (a snapshot installed beyond the log).
            if step_end >= last { target } else { step_end }
        }
        _ => target,
    };
    if upto == target {
        write_meta_json(&mut meta, META_LAST_PURGED, &target_json)?;
    } else {
        let stored = log
            .get(upto)
            .map_err(LogStoreError::database("read a log entry"))?
            .ok_or(LogStoreError::Corrupt {
                record: RecordKey::Entry { index: upto },
                problem: Corruption::Hole {
                    previous: first.unwrap_or(upto),
                },
            })?;
        let log_id = decode_entry::<C>(upto, stored.value())?.log_id();
        drop(stored);
        write_meta(&mut meta, META_LAST_PURGED, &log_id)?;
    }
    log.retain_in(..=upto, |_, _| false)
        .map_err(LogStoreError::database("remove log entries"))?;
    if upto == target {
        let mut ahead = shared.purge_ahead();
        // Caught up only with the point this step read: a purge that moved
        // it further meanwhile still has steps to take.
        if ahead.target.as_ref().map(|(index, _)| *index) == Some(target) {
            ahead.behind = false;
        }
    }
    Ok(())
}

/// Runs `body` in a write transaction committed with `Durability::Immediate`,
/// or aborted if `body` fails.
fn write<T>(
    shared: &Shared,
    operation: &'static str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, LogStoreError>,
) -> Result<T, LogStoreError> {
    write_with(shared, operation, body, |error| error)
}

/// [`write`] for a body with an error of its own; `from_store` wraps the
/// transaction's own errors in it.
fn write_with<T, E>(
    shared: &Shared,
    operation: &'static str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, E>,
    from_store: impl Fn(LogStoreError) -> E,
) -> Result<T, E> {
    let failed = |source: redb::Error| from_store(LogStoreError::database(operation)(source));
    let mut txn = shared
        .db
        .begin_write()
        .map_err(|error| failed(error.into()))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|error| failed(error.into()))?;
    match body(&txn) {
        Ok(value) => {
            let started = std::time::Instant::now();
            txn.commit().map_err(|error| failed(error.into()))?;
            if let Some(timings) = shared.timings.get() {
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
        serde_json::from_slice(payload).map_err(|source| LogStoreError::Undecodable {
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

fn check_above_purged<C: RaftTypeConfig>(
    last_purged: Option<&LogIdOf<C>>,
    first_index: u64,
) -> Result<(), LogStoreError> {
    match last_purged {
        Some(purged) if first_index <= purged.index() => Err(LogStoreError::Corrupt {
            record: RecordKey::Entry { index: first_index },
            problem: Corruption::BelowPurged {
                purged: purged.index(),
            },
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

fn open_meta_write<'txn>(
    txn: &'txn WriteTransaction,
) -> Result<redb::Table<'txn, &'static str, &'static [u8]>, LogStoreError> {
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
    let value = serde_json::from_slice(payload)
        .map_err(|source| LogStoreError::Undecodable { record, source })?;
    Ok(Some(value))
}

fn write_meta<T: Serialize>(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    name: &'static str,
    value: &T,
) -> Result<(), LogStoreError> {
    let payload = serde_json::to_vec(value).map_err(|source| LogStoreError::Encode {
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

fn sync_directory(dir: &Path) -> Result<(), LogStoreError> {
    fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| LogStoreError::Directory {
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorageExt;

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
        let db = Database::open(dir.join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG_TABLE).unwrap();
            let mut stored = log.get(index).unwrap().unwrap().value().to_vec();
            edit(&mut stored);
            log.insert(index, stored.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }

    fn remove_record(dir: &Path, index: u64) {
        let db = Database::open(dir.join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(LOG_TABLE).unwrap().remove(index).unwrap();
        txn.commit().unwrap();
    }

    #[tokio::test]
    async fn corrupted_entry_is_an_error_naming_its_index() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        // Flip one bit in the middle of entry 3's JSON.
        edit_record(dir.path(), 3, |stored| {
            let middle = stored.len() / 2;
            stored[middle] ^= 0x01;
        });

        // Open checks only the first and last entries, so it succeeds.
        let store = Store::open(dir.path()).unwrap();
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
        let db = Database::open(dir.path().join(LOG_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG_TABLE).unwrap();
            let two = log.get(2).unwrap().unwrap().value().to_vec();
            log.insert(1, two.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        drop(db);

        let mut reader = Store::open(dir.path()).unwrap().reader();
        let error = reader.try_get_log_entries(..).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("log entry at index 1 is corrupt"),
            "{error}"
        );
    }

    /// Issue 13: a purge of many entries runs inside openraft's core task,
    /// so it deletes one step at once and leaves the rest to later appends,
    /// while readers see the whole purge at once.
    #[tokio::test]
    async fn a_large_purge_is_seen_at_once_and_deleted_in_steps() {
        let dir = tempfile::tempdir().unwrap();
        let entries = 3 * PURGE_STEP + 100;
        let mut store = store_with_entries(dir.path(), 0..entries).await;
        let purged = 3 * PURGE_STEP;
        store.purge(log_id(1, purged)).await.unwrap();

        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(1, purged)),
                last_log_id: Some(log_id(1, entries - 1)),
            }
        );
        let read = store
            .reader()
            .try_get_log_entries(0..entries)
            .await
            .unwrap();
        assert_eq!(read.first().map(|entry| entry.index()), Some(purged + 1));
        assert_eq!(read.len() as u64, entries - purged - 1);
        // One step deleted, the rest still in the file, which stays whole:
        // a crash now reopens a log without a hole.
        assert_eq!(store.verify().unwrap(), entries - PURGE_STEP);

        // Each append takes the next step; the file catches up.
        for index in entries..entries + 3 {
            store.blocking_append([blank(1, index)]).await.unwrap();
        }
        assert_eq!(store.verify().unwrap(), entries + 3 - purged - 1);
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(log_id(1, purged)),
                last_log_id: Some(log_id(1, entries + 2)),
            }
        );
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

    #[tokio::test]
    async fn hole_refuses_open_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        drop(store_with_entries(dir.path(), 0..5).await);
        remove_record(dir.path(), 2);

        let error = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 3 },
                    problem: Corruption::Hole { previous: 1 },
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

    /// Holds a write transaction of `store`'s database on a thread of its
    /// own until the returned sender is dropped or sent to: every write of
    /// the store waits for it.
    fn hold_the_writer_lock(store: &Store) -> std::sync::mpsc::Sender<()> {
        let shared = Arc::clone(&store.reader.shared);
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (held, holding) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let txn = shared.db.begin_write().unwrap();
            held.send(()).unwrap();
            let _ = released.recv();
            txn.abort().unwrap();
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
        let release = hold_the_writer_lock(&store);

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
        // Ten appends, at most two commits: the writer may have taken the
        // first alone (and waited for the lock with it), the others queued
        // behind it commit together.
        let commits = commits.0.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=2).contains(&commits), "{commits} commits");
        assert!(store.reader.shared.pending().entries.is_empty());
    }

    /// A purge step per transaction, not per write in it: appends queued
    /// behind a purge commit together, and a step for each deleted the
    /// whole backlog in one transaction (in the load test the core's next
    /// `save_committed` waited for it 270-490 ms after each snapshot).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_appends_take_one_purge_step_per_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let entries = 10 * PURGE_STEP + 100;
        let mut store = store_with_entries(dir.path(), 0..entries).await;
        let purged = 10 * PURGE_STEP;
        store.purge(log_id(1, purged)).await.unwrap();
        assert_eq!(store.verify().unwrap(), entries - PURGE_STEP);
        let commits = Arc::new(CountedCommits::default());
        store.set_timings(commits.clone());

        let release = hold_the_writer_lock(&store);
        let mut flushed = Vec::new();
        for index in entries..entries + 10 {
            let (callback, receiver) = callback();
            store.append([blank(1, index)], callback).await.unwrap();
            flushed.push(receiver);
        }
        drop(release);
        for receiver in flushed {
            receiver.await.unwrap().unwrap();
        }
        // The ten appends committed in one or two transactions (the writer
        // may have taken the first alone): one or two more steps.
        let commits = commits.0.load(std::sync::atomic::Ordering::SeqCst) as u64;
        assert!((1..=2).contains(&commits), "{commits} commits");
        assert_eq!(
            store.verify().unwrap(),
            entries + 10 - (1 + commits) * PURGE_STEP,
            "each transaction deletes one step"
        );
        // Readers never saw the purged entries, and still do not.
        let read = store
            .reader()
            .try_get_log_entries(0..entries + 10)
            .await
            .unwrap();
        assert_eq!(read.first().map(|entry| entry.index()), Some(purged + 1));
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
