//! [`ReceiptTable`]: a replica's request receipts on disk, so that its
//! memory does not grow with them (millions are kept for a day).
//!
//! Opaque values by string key (a request id), plus an order index of
//! `(i64, key)` pairs (settlement time, for expiry in O(expired)). The
//! caller says what the values and the order mean.
//!
//! # Key decision: a cache of the replicated state, not durable data
//!
//! The receipts are part of the replicated state, and the state's
//! durability comes from the snapshot and the Raft log: after a restart the
//! table is created anew and filled from the snapshot, then the log's
//! entries are applied on top. So the table never needs to survive a
//! crash, and it never calls fsync: its file sits behind
//! [`UnsyncedFile`], a redb storage backend whose `sync_data` does nothing.
//! Most commits are `Durability::None`; a commit every
//! [`DURABLE_COMMIT_INTERVAL`] is "durable" only because redb reuses the
//! pages a transaction freed once a durable commit follows, which keeps the
//! file at the size of what it holds. Those commits run on the apply path:
//! an fsync there waited behind every other write on the disk (PostgreSQL's
//! checkpoints in a soak) and held apply for up to seconds. Each
//! [`ReceiptTable`] lives in a file of its own, removed when the table is
//! dropped.
//!
//! Changes go into one write transaction that stays open until
//! [`ReceiptTable::commit`] (a batch of applied entries); reads in between
//! see them. [`ReceiptTable::view`] answers a read-only view of the last
//! commit that later commits do not change (redb's MVCC): a snapshot is
//! written from it while apply goes on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::{
    Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable,
    ReadableTableMetadata, TableDefinition, WriteTransaction,
};

/// Values by key. Keys are the key strings' UTF-8 bytes: redb compares a
/// `&str` key by validating both sides as UTF-8 first, a twentieth of a
/// put's time in a large table; byte order is `str`'s order anyway.
const VALUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("values");
/// `(order, key)` of every key that has an order (key bytes as in
/// [`VALUES`]).
const ORDER: TableDefinition<(i64, &[u8]), ()> = TableDefinition::new("order");

/// redb's page cache for one table: what the table may hold in memory.
/// (redb's default is 1 GiB; the receipts are on disk precisely so that
/// memory stays small.)
pub const RECEIPT_TABLE_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// A commit is durable once the last durable one is this old (see the
/// module doc). Each non-durable commit walks the pages freed since the
/// last durable one, so they must not pile up: at 1,000 commits between
/// two durable ones, that walk took a tenth of a busy leader's CPU.
pub const DURABLE_COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The table's file as redb's storage: redb's own file backend, except
/// that `sync_data` does nothing (see the module doc: the table is a cache
/// rebuilt at every start, so no commit needs to reach the disk).
#[derive(Debug)]
struct UnsyncedFile(redb::backends::FileBackend);

impl redb::StorageBackend for UnsyncedFile {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }

    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

/// A failure of the receipt table's file.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request receipts table {path} failed while {doing}: {source}; the replica stops (its receipts are rebuilt from the snapshot and log when it restarts); check the disk"
)]
pub struct ReceiptTableError {
    /// The table's file.
    pub path: PathBuf,
    /// What the table was doing.
    pub doing: &'static str,
    /// redb's error (boxed: it is large, and errors are rare).
    #[source]
    pub source: Box<redb::Error>,
}

struct Open {
    writer: Option<WriteTransaction>,
    /// The last commit, for reads while no write transaction is open.
    reader: Option<ReadTransaction>,
    last_durable: std::time::Instant,
}

/// Request receipts on disk: see the module doc.
pub struct ReceiptTable {
    db: Arc<Database>,
    path: Arc<PathBuf>,
    open: Mutex<Open>,
}

impl fmt::Debug for ReceiptTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiptTable")
            .field("path", &self.path)
            .finish()
    }
}

fn failed(path: &Path, doing: &'static str) -> impl FnOnce(redb::Error) -> ReceiptTableError {
    let path = path.to_path_buf();
    move |source| ReceiptTableError {
        path,
        doing,
        source: Box::new(source),
    }
}

/// Any redb error as `redb::Error`.
fn any<E: Into<redb::Error>>(error: E) -> redb::Error {
    error.into()
}

impl ReceiptTable {
    /// Creates an empty table in a new file `path` (an existing file there
    /// is replaced: see the module doc).
    pub fn create(path: impl AsRef<Path>) -> Result<Self, ReceiptTableError> {
        Self::create_with_cache(path, RECEIPT_TABLE_CACHE_BYTES)
    }

    /// Like [`create`](ReceiptTable::create), with a page cache of
    /// `cache_bytes` instead of [`RECEIPT_TABLE_CACHE_BYTES`].
    pub fn create_with_cache(
        path: impl AsRef<Path>,
        cache_bytes: usize,
    ) -> Result<Self, ReceiptTableError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(ReceiptTableError {
                    path,
                    doing: "removing its previous file",
                    source: Box::new(redb::Error::Io(error)),
                });
            }
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|error| failed(&path, "creating its file")(any(error)))?;
        let backend = redb::backends::FileBackend::new(file)
            .map_err(|error| failed(&path, "creating its file")(any(error)))?;
        let mut builder = redb::Builder::new();
        builder.set_cache_size(cache_bytes);
        let db = builder
            .create_with_backend(UnsyncedFile(backend))
            .map_err(|error| failed(&path, "creating its file")(any(error)))?;
        let table = ReceiptTable {
            db: Arc::new(db),
            path: Arc::new(path),
            open: Mutex::new(Open {
                writer: None,
                reader: None,
                last_durable: std::time::Instant::now(),
            }),
        };
        // Both tables exist from the start, so reads never meet a missing one.
        table.with_writer(|writer| {
            writer.open_table(VALUES).map_err(any)?;
            writer.open_table(ORDER).map_err(any)?;
            Ok(())
        })?;
        table.commit()?;
        Ok(table)
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // A panic while the lock was held happened inside redb or here,
        // between whole operations: the open transaction is still usable
        // or fails on its own.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with_writer<T>(
        &self,
        change: impl FnOnce(&WriteTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, ReceiptTableError> {
        let mut open = self.lock();
        if open.writer.is_none() {
            let mut writer = self
                .db
                .begin_write()
                .map_err(|error| failed(&self.path, "starting a write")(any(error)))?;
            writer
                .set_durability(Durability::None)
                .map_err(|error| failed(&self.path, "starting a write")(any(error)))?;
            open.writer = Some(writer);
        }
        let writer = open.writer.as_ref().expect("just opened");
        change(writer).map_err(failed(&self.path, "writing"))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ReceiptTableError> {
        self.read(
            "reading",
            |writer| writer.open_table(VALUES).map_err(any)?.value_of(key),
            |reader| reader.open_table(VALUES).map_err(any)?.value_of(key),
        )
    }

    /// Reads the last changes: through the open write transaction if
    /// there is one (uncommitted changes included), else the last commit.
    fn read<T>(
        &self,
        doing: &'static str,
        from_writer: impl FnOnce(&WriteTransaction) -> Result<T, redb::Error>,
        from_reader: impl FnOnce(&ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, ReceiptTableError> {
        let mut open = self.lock();
        if let Some(writer) = &open.writer {
            return from_writer(writer).map_err(failed(&self.path, doing));
        }
        if open.reader.is_none() {
            open.reader = Some(
                self.db
                    .begin_read()
                    .map_err(|error| failed(&self.path, "starting a read")(any(error)))?,
            );
        }
        from_reader(open.reader.as_ref().expect("just opened")).map_err(failed(&self.path, doing))
    }

    /// Stores `value` under `key`, moving it in the order from
    /// `previous_order` to `order` (`None`: not in the order). Answers
    /// whether `key` had a value before (redb's insert says so for free).
    pub fn put(
        &self,
        key: &str,
        value: &[u8],
        previous_order: Option<i64>,
        order: Option<i64>,
    ) -> Result<bool, ReceiptTableError> {
        self.with_writer(|writer| {
            let replaced = writer
                .open_table(VALUES)
                .map_err(any)?
                .insert(key.as_bytes(), value)
                .map_err(any)?
                .is_some();
            if previous_order != order {
                let mut ordered = writer.open_table(ORDER).map_err(any)?;
                if let Some(previous) = previous_order {
                    ordered.remove((previous, key.as_bytes())).map_err(any)?;
                }
                if let Some(order) = order {
                    ordered.insert((order, key.as_bytes()), ()).map_err(any)?;
                }
            }
            Ok(replaced)
        })
    }

    /// Stores every `(key, value, order)` of `entries`, none of whose keys
    /// has a value yet, opening each table once for all of them (a
    /// [`put`](ReceiptTable::put) opens them per call: 1.6 % of a
    /// 3-replica cluster's CPU at 256 clients when every settled receipt
    /// was a put). Answers how many keys already had a value (replaced:
    /// the caller's mistake to report; their old place in the order is
    /// left as it was).
    pub fn put_new<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a [u8], Option<i64>)>,
    ) -> Result<usize, ReceiptTableError> {
        self.with_writer(|writer| {
            let mut values = writer.open_table(VALUES).map_err(any)?;
            let mut ordered = writer.open_table(ORDER).map_err(any)?;
            let mut replaced = 0;
            for (key, value, order) in entries {
                if values.insert(key.as_bytes(), value).map_err(any)?.is_some() {
                    replaced += 1;
                }
                if let Some(order) = order {
                    ordered.insert((order, key.as_bytes()), ()).map_err(any)?;
                }
            }
            Ok(replaced)
        })
    }

    /// Removes `key`, whose place in the order is `order`.
    pub fn remove(&self, key: &str, order: Option<i64>) -> Result<(), ReceiptTableError> {
        self.with_writer(|writer| {
            writer
                .open_table(VALUES)
                .map_err(any)?
                .remove(key.as_bytes())
                .map_err(any)?;
            if let Some(order) = order {
                writer
                    .open_table(ORDER)
                    .map_err(any)?
                    .remove((order, key.as_bytes()))
                    .map_err(any)?;
            }
            Ok(())
        })
    }

    /// At most `limit` `(order, key)` pairs whose order is at most
    /// `order_max`, lowest first (O(returned)).
    pub fn ordered_up_to(
        &self,
        order_max: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, ReceiptTableError> {
        self.read(
            "reading the order",
            |writer| {
                writer
                    .open_table(ORDER)
                    .map_err(any)?
                    .keys_up_to(order_max, limit)
            },
            |reader| {
                reader
                    .open_table(ORDER)
                    .map_err(any)?
                    .keys_up_to(order_max, limit)
            },
        )
    }

    /// Commits the open write transaction, if any: its changes become
    /// visible to [`view`](ReceiptTable::view).
    pub fn commit(&self) -> Result<(), ReceiptTableError> {
        let mut open = self.lock();
        let Some(mut writer) = open.writer.take() else {
            return Ok(());
        };
        if open.last_durable.elapsed() >= DURABLE_COMMIT_INTERVAL {
            open.last_durable = std::time::Instant::now();
            writer
                .set_durability(Durability::Immediate)
                .map_err(|error| failed(&self.path, "committing")(any(error)))?;
        }
        writer
            .commit()
            .map_err(|error| failed(&self.path, "committing")(any(error)))?;
        open.reader = None;
        Ok(())
    }

    /// A read-only view of the last commit (changes not yet committed are
    /// not in it), unchanged by later commits.
    pub fn view(&self) -> Result<ReceiptView, ReceiptTableError> {
        let reader = self
            .db
            .begin_read()
            .map_err(|error| failed(&self.path, "starting a read")(any(error)))?;
        let values = reader
            .open_table(VALUES)
            .map_err(|error| failed(&self.path, "starting a read")(any(error)))?;
        let order = reader
            .open_table(ORDER)
            .map_err(|error| failed(&self.path, "starting a read")(any(error)))?;
        Ok(ReceiptView {
            tables: Arc::new((values, order)),
            path: self.path.clone(),
            _db: self.db.clone(),
        })
    }

    /// Whether changes are waiting for [`commit`](ReceiptTable::commit).
    pub fn has_uncommitted(&self) -> bool {
        self.lock().writer.is_some()
    }
}

impl Drop for ReceiptTable {
    fn drop(&mut self) {
        // Uncommitted changes are dropped (aborted) before the database:
        // closing it starts a write transaction of its own, which would
        // wait for ours forever.
        let open = self.open.get_mut().unwrap_or_else(PoisonError::into_inner);
        open.writer = None;
        open.reader = None;
        // The file is a cache of the state (see the module doc). A view
        // still open keeps reading it: the file stays until its handle
        // closes.
        let _ = std::fs::remove_file(&*self.path);
    }
}

/// A read-only view of a [`ReceiptTable`] at one commit; its clones share
/// the same moment.
#[derive(Clone)]
pub struct ReceiptView {
    /// Values and order.
    #[allow(clippy::type_complexity)]
    tables: Arc<(
        ReadOnlyTable<&'static [u8], &'static [u8]>,
        ReadOnlyTable<(i64, &'static [u8]), ()>,
    )>,
    path: Arc<PathBuf>,
    /// Keeps the database open while the view is read.
    _db: Arc<Database>,
}

impl fmt::Debug for ReceiptView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiptView")
            .field("path", &self.path)
            .finish()
    }
}

impl ReceiptView {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ReceiptTableError> {
        self.tables
            .0
            .value_of(key)
            .map_err(failed(&self.path, "reading a view"))
    }

    /// At most `limit` `(order, key)` pairs whose order is at most
    /// `order_max`, lowest first (O(returned)).
    pub fn ordered_up_to(
        &self,
        order_max: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, ReceiptTableError> {
        self.tables
            .1
            .keys_up_to(order_max, limit)
            .map_err(failed(&self.path, "reading a view's order"))
    }

    /// Number of values.
    pub fn len(&self) -> Result<u64, ReceiptTableError> {
        self.tables
            .0
            .len()
            .map_err(|error| failed(&self.path, "reading a view")(any(error)))
    }

    /// True when there is none.
    pub fn is_empty(&self) -> Result<bool, ReceiptTableError> {
        Ok(self.len()? == 0)
    }

    /// Calls `visit` with every key and value, in key order, until it
    /// answers `false`.
    pub fn visit(
        &self,
        mut visit: impl FnMut(&str, &[u8]) -> bool,
    ) -> Result<(), ReceiptTableError> {
        let entries = self
            .tables
            .0
            .iter()
            .map_err(|error| failed(&self.path, "reading a view")(any(error)))?;
        for entry in entries {
            let (key, value) =
                entry.map_err(|error| failed(&self.path, "reading a view")(any(error)))?;
            let key = key_str(key.value()).map_err(failed(&self.path, "reading a view"))?;
            if !visit(key, value.value()) {
                break;
            }
        }
        Ok(())
    }
}

/// Reading values from a write or a read transaction's table alike.
trait ReadableValues {
    fn value_of(&self, key: &str) -> Result<Option<Vec<u8>>, redb::Error>;
}

impl<T: ReadableTable<&'static [u8], &'static [u8]>> ReadableValues for T {
    fn value_of(&self, key: &str) -> Result<Option<Vec<u8>>, redb::Error> {
        Ok(self
            .get(key.as_bytes())
            .map_err(any)?
            .map(|value| value.value().to_vec()))
    }
}

/// Reading the order from a write or a read transaction's table alike.
trait ReadableOrder {
    fn keys_up_to(&self, order_max: i64, limit: usize) -> Result<Vec<(i64, String)>, redb::Error>;
}

impl<T: ReadableTable<(i64, &'static [u8]), ()>> ReadableOrder for T {
    fn keys_up_to(&self, order_max: i64, limit: usize) -> Result<Vec<(i64, String)>, redb::Error> {
        let mut keys = Vec::new();
        for entry in self.range((i64::MIN, &b""[..])..).map_err(any)? {
            if keys.len() >= limit {
                break;
            }
            let (key, _) = entry.map_err(any)?;
            let (order, key) = key.value();
            if order > order_max {
                break;
            }
            keys.push((order, key_str(key)?.to_string()));
        }
        Ok(keys)
    }
}

/// A stored key as the string it was written from. Keys are only ever
/// written from `&str`: anything else is a damaged file.
fn key_str(key: &[u8]) -> Result<&str, redb::Error> {
    std::str::from_utf8(key)
        .map_err(|error| redb::Error::Corrupted(format!("a receipt key is not UTF-8: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(dir: &tempfile::TempDir) -> ReceiptTable {
        ReceiptTable::create(dir.path().join("receipts.redb")).unwrap()
    }

    #[test]
    fn reads_see_uncommitted_changes_and_views_see_commits_only() {
        let dir = tempfile::tempdir().unwrap();
        let table = table(&dir);
        table.put("a", b"1", None, Some(5)).unwrap();
        assert_eq!(table.get("a").unwrap().as_deref(), Some(&b"1"[..]));
        let before = table.view().unwrap();
        assert!(before.is_empty().unwrap(), "nothing committed yet");
        table.commit().unwrap();
        let committed = table.view().unwrap();
        table.put("a", b"2", Some(5), Some(6)).unwrap();
        table.put("b", b"3", None, None).unwrap();
        table.commit().unwrap();
        assert_eq!(committed.get("a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(committed.len().unwrap(), 1);
        let mut seen = Vec::new();
        table
            .view()
            .unwrap()
            .visit(|key, value| {
                seen.push((key.to_string(), value.to_vec()));
                true
            })
            .unwrap();
        assert_eq!(
            seen,
            vec![("a".into(), b"2".to_vec()), ("b".into(), b"3".to_vec())]
        );
    }

    #[test]
    fn the_order_lists_the_lowest_first_up_to_a_bound_and_a_limit() {
        let dir = tempfile::tempdir().unwrap();
        let table = table(&dir);
        table.put("late", b"", None, Some(30)).unwrap();
        table.put("early", b"", None, Some(-10)).unwrap();
        table.put("middle", b"", None, Some(20)).unwrap();
        table.put("unordered", b"", None, None).unwrap();
        assert_eq!(
            table.ordered_up_to(20, 10).unwrap(),
            vec![(-10, "early".to_string()), (20, "middle".to_string())]
        );
        table.commit().unwrap();
        assert_eq!(
            table.ordered_up_to(100, 2).unwrap(),
            vec![(-10, "early".to_string()), (20, "middle".to_string())]
        );
        table.remove("early", Some(-10)).unwrap();
        table.put("middle", b"", Some(20), Some(40)).unwrap();
        assert_eq!(
            table.ordered_up_to(100, 10).unwrap(),
            vec![(30, "late".to_string()), (40, "middle".to_string())]
        );
        assert_eq!(table.get("early").unwrap(), None);
    }

    #[test]
    fn put_new_writes_values_and_orders_and_counts_what_it_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let table = table(&dir);
        table.put("b", b"old", None, None).unwrap();
        let replaced = table
            .put_new([
                ("a", &b"1"[..], Some(7)),
                ("b", &b"2"[..], Some(3)),
                ("c", &b"3"[..], None),
            ])
            .unwrap();
        assert_eq!(replaced, 1, "b had a value");
        assert_eq!(table.get("a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(table.get("c").unwrap().as_deref(), Some(&b"3"[..]));
        assert_eq!(
            table.ordered_up_to(10, 10).unwrap(),
            vec![(3, "b".to_string()), (7, "a".to_string())]
        );
    }

    #[test]
    fn the_file_is_replaced_on_create_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("receipts.redb");
        {
            let table = ReceiptTable::create(&path).unwrap();
            table.put("a", b"1", None, None).unwrap();
            table.commit().unwrap();
        }
        assert!(!path.exists(), "dropped with its table");
        let table = ReceiptTable::create(&path).unwrap();
        assert_eq!(table.get("a").unwrap(), None);
    }
}
