//! [`DiskReceipts`]: the replica's request receipts in a
//! [`ReceiptTable`] on disk instead of in memory (see
//! `palisade_lifecycle::receipts` for why, and
//! `palisade_storage::receipt_table` for the file).
//!
//! Each receipt is stored as the JSON `serde_json` writes for it, so a
//! snapshot or a digest copies the stored bytes into the state's JSON as
//! they are ([`StoredReceipt::Json`]) instead of decoding and encoding
//! every receipt again; the settlement time is the table's order.
//!
//! A copy of the receipts (a snapshot build's copy of the state) is a
//! read-only view of the table at that moment ([`FrozenReceipts`]): no
//! settled receipt is copied, and apply goes on changing the table
//! meanwhile.
//!
//! # Key decision: pending receipts stay in memory
//!
//! A request that waits on an operation gets a pending receipt when it is
//! applied and a settled one when the operation ends, usually within
//! milliseconds. The table is keyed by request id (random: a request id is
//! the client's UUID), so once it outgrows its page cache every write reads
//! a leaf from the file and every commit writes scattered leaves back:
//! writing the pending receipt and then replacing it cost two of those per
//! request, and the settled one is the only one that lasts. So pending
//! receipts live in a map in memory and reach the table once, settled.
//! That map is bounded by the state, not by time: one receipt per request
//! waiting on an operation in flight (`OPERATION_WAITERS_MAX` per
//! operation), each settled or removed when its operation ends. Settled
//! receipts never become pending again.
//!
//! # Key decision: settled receipts reach the table with the commit
//!
//! A receipt settled since the last commit of the table waits in memory
//! too ([`Unwritten`]), and the commit writes them all at once, in key
//! order, opening each table once: one `put` per receipt opened both
//! tables and walked the tree from its root each time, 7 % of a 3-replica
//! cluster's CPU at 256 clients. The gateway also reads a receipt right
//! after it settles (to answer the request): from memory now, not a
//! random read and a JSON decode. The map is bounded by the commit
//! cadence (at most [`COMMIT_CHANGES_MAX`] changes wait), and a copy
//! writes it first, as it commits the table first. A request id is in
//! exactly one of the three places: pending, unwritten or the table.
//!
//! Apply has no outcome for a failed disk: a table error panics with its
//! message, which poisons the state and stops the replica (fail-stop, see
//! [`crate::state_machine`]); the next start rebuilds the table from the
//! snapshot and the log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use palisade_lifecycle::{Receipt, ReceiptStore, StoredReceipt};
use palisade_storage::{ReceiptTable, ReceiptTableError, ReceiptView};

/// Prefix of the table files in the snapshot directory.
const FILE_PREFIX: &str = "receipts-";
/// Suffix of the table files.
const FILE_SUFFIX: &str = ".redb";

fn fail_stop(error: ReceiptTableError) -> ! {
    tracing::error!(%error, "stopping: the request receipts table failed");
    panic!("{error}")
}

fn encode(receipt: &Receipt) -> Vec<u8> {
    serde_json::to_vec(receipt).expect("a receipt always encodes to JSON")
}

fn decode(request_id: &str, bytes: &[u8]) -> Receipt {
    serde_json::from_slice(bytes).unwrap_or_else(|error| {
        panic!("the stored receipt of request {request_id:?} does not decode: {error}")
    })
}

/// The receipt of `request_id`: the pending one if there is one, else
/// what `stored` reads from the table (a request id is in one of the two).
fn lookup(
    pending: &BTreeMap<String, Receipt>,
    request_id: &str,
    stored: impl FnOnce() -> Result<Option<Vec<u8>>, ReceiptTableError>,
) -> Option<Receipt> {
    if let Some(receipt) = pending.get(request_id) {
        return Some(receipt.clone());
    }
    let bytes = stored().unwrap_or_else(|e| fail_stop(e))?;
    Some(decode(request_id, &bytes))
}

/// Where a replica keeps its receipt tables: files in `dir` named by a
/// sequence number, one per table (a new table per installed snapshot,
/// while a snapshot build may still read the previous one).
#[derive(Debug)]
pub struct ReceiptFiles {
    dir: PathBuf,
    next: u64,
    cache_bytes: usize,
}

impl ReceiptFiles {
    /// Receipt tables in `dir`. Removes the tables a previous run left
    /// there: they are caches of a state this run rebuilds.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(FILE_PREFIX) && name.ends_with(FILE_SUFFIX) {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            next: 0,
            cache_bytes: palisade_storage::receipt_table::RECEIPT_TABLE_CACHE_BYTES,
        })
    }

    /// Tables created from now on cache at most `cache_bytes` of their
    /// pages in memory (default
    /// [`RECEIPT_TABLE_CACHE_BYTES`](palisade_storage::receipt_table::RECEIPT_TABLE_CACHE_BYTES)).
    pub fn with_cache_bytes(mut self, cache_bytes: usize) -> Self {
        self.cache_bytes = cache_bytes;
        self
    }

    /// A new, empty store in a file of its own.
    pub fn create(&mut self) -> std::io::Result<DiskReceipts> {
        let path = self
            .dir
            .join(format!("{FILE_PREFIX}{}{FILE_SUFFIX}", self.next));
        self.next += 1;
        let table = ReceiptTable::create_with_cache(&path, self.cache_bytes)
            .map_err(std::io::Error::other)?;
        Ok(DiskReceipts {
            table,
            pending: BTreeMap::new(),
            unwritten: Mutex::new(Unwritten::default()),
            last_commit: std::time::Instant::now(),
            changes_since_commit: 0,
        })
    }
}

/// At the end of an apply batch, the batch's changes are committed once
/// the last commit is this old ...
pub const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
/// ... or this many changes wait. A commit per batch cost a tenth of a
/// busy leader's CPU; until it commits, reads go through the open write
/// transaction and see every change, and a copy commits first.
pub const COMMIT_CHANGES_MAX: usize = 4_096;

/// Receipts in a [`ReceiptTable`], the pending ones in memory (see the
/// module doc).
#[derive(Debug)]
pub struct DiskReceipts {
    table: ReceiptTable,
    /// Receipts not settled yet, by request id; none of them is in the table.
    pending: BTreeMap<String, Receipt>,
    /// Receipts settled since the table's last commit, not in the table
    /// yet (see the module doc). Behind a lock only because a copy
    /// (`&self`) writes them to the table first.
    unwritten: Mutex<Unwritten>,
    last_commit: std::time::Instant,
    changes_since_commit: usize,
}

fn is_pending(receipt: &Receipt) -> bool {
    receipt.settled_at_ms().is_none()
}

/// Settled receipts waiting for the table's next commit: by request id,
/// and in settlement order (the order index the table keeps for its own).
#[derive(Debug, Default)]
struct Unwritten {
    by_id: BTreeMap<String, Receipt>,
    order: BTreeSet<(i64, String)>,
}

impl Unwritten {
    fn settled_at(receipt: &Receipt) -> i64 {
        receipt
            .settled_at_ms()
            .expect("only settled receipts wait to be written")
    }

    fn insert(&mut self, request_id: &str, receipt: &Receipt) {
        self.order
            .insert((Self::settled_at(receipt), request_id.to_string()));
        let replaced = self.by_id.insert(request_id.to_string(), receipt.clone());
        assert!(
            replaced.is_none(),
            "request id {request_id:?}: a receipt was stored over an unwritten one"
        );
    }

    /// Removes `request_id`'s receipt, if it is here.
    fn remove(&mut self, request_id: &str) -> Option<Receipt> {
        let receipt = self.by_id.remove(request_id)?;
        self.order
            .remove(&(Self::settled_at(&receipt), request_id.to_string()));
        Some(receipt)
    }

    /// Writes every receipt to `table` (one batch, key order) and empties.
    fn write_to(&mut self, table: &ReceiptTable) -> Result<(), ReceiptTableError> {
        if self.by_id.is_empty() {
            return Ok(());
        }
        let encoded: Vec<(&str, Vec<u8>, i64)> = self
            .by_id
            .iter()
            .map(|(id, receipt)| (id.as_str(), encode(receipt), Self::settled_at(receipt)))
            .collect();
        let replaced = table.put_new(
            encoded
                .iter()
                .map(|(id, bytes, order)| (*id, bytes.as_slice(), Some(*order))),
        )?;
        assert_eq!(
            replaced, 0,
            "settled receipts were written over receipts already in the table"
        );
        self.by_id.clear();
        self.order.clear();
        Ok(())
    }
}

impl ReceiptStore for DiskReceipts {
    fn get(&self, request_id: &str) -> Option<Receipt> {
        if let Some(receipt) = self.lock_unwritten().by_id.get(request_id) {
            return Some(receipt.clone());
        }
        lookup(&self.pending, request_id, || self.table.get(request_id))
    }

    fn put(&mut self, request_id: &str, receipt: &Receipt, previous: Option<&Receipt>) {
        assert!(
            !is_pending(receipt) || previous.is_none_or(is_pending),
            "request id {request_id:?}: a settled receipt cannot become pending again"
        );
        let unwritten = self
            .unwritten
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        // Where the receipt it replaces is: only one in the table is
        // replaced there (rare: a settled receipt settled again).
        let in_table = match previous {
            None => None,
            Some(previous) if is_pending(previous) => {
                assert!(
                    self.pending.remove(request_id).is_some(),
                    "request id {request_id:?}: the pending receipt it replaces was missing"
                );
                None
            }
            Some(previous) => match unwritten.remove(request_id) {
                Some(_) => None,
                None => Some(previous),
            },
        };
        // Whether the table already has a new request id is apply's check
        // (it reads the receipt first); asking the table again here would
        // cost the random read these maps exist to save.
        debug_assert!(
            previous.is_some()
                || !unwritten.by_id.contains_key(request_id)
                    && self
                        .table
                        .get(request_id)
                        .unwrap_or_else(|e| fail_stop(e))
                        .is_none(),
            "request id {request_id:?}: a receipt was stored over a settled one"
        );
        if is_pending(receipt) {
            let replaced = self.pending.insert(request_id.to_string(), receipt.clone());
            assert!(
                replaced.is_none(),
                "request id {request_id:?}: a receipt was stored over a pending one"
            );
            return;
        }
        self.changes_since_commit += 1;
        let Some(in_table) = in_table else {
            unwritten.insert(request_id, receipt);
            return;
        };
        let replaced = self
            .table
            .put(
                request_id,
                &encode(receipt),
                in_table.settled_at_ms(),
                receipt.settled_at_ms(),
            )
            .unwrap_or_else(|e| fail_stop(e));
        assert!(
            replaced,
            "request id {request_id:?}: the settled receipt it replaces was missing from the table"
        );
    }

    fn remove(&mut self, request_id: &str, previous: &Receipt) {
        if is_pending(previous) {
            assert!(
                self.pending.remove(request_id).is_some(),
                "request id {request_id:?}: the pending receipt to remove was missing"
            );
            return;
        }
        self.changes_since_commit += 1;
        let unwritten = self
            .unwritten
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if unwritten.remove(request_id).is_some() {
            return;
        }
        self.table
            .remove(request_id, previous.settled_at_ms())
            .unwrap_or_else(|e| fail_stop(e));
    }

    /// The table's order and the unwritten receipts' merged (a request id
    /// is in one of the two).
    fn settled_up_to(&self, settled_at_ms_max: i64, limit: usize) -> Vec<String> {
        let mut ordered = self
            .table
            .ordered_up_to(settled_at_ms_max, limit)
            .unwrap_or_else(|e| fail_stop(e));
        let unwritten = self.lock_unwritten();
        let waiting = unwritten
            .order
            .iter()
            .take_while(|(settled_at_ms, _)| *settled_at_ms <= settled_at_ms_max)
            .take(limit);
        let from_table = ordered.len();
        ordered.extend(waiting.cloned());
        if ordered.len() > from_table {
            ordered.sort_unstable();
        }
        ordered.truncate(limit);
        ordered
            .into_iter()
            .map(|(_, request_id)| request_id)
            .collect()
    }

    fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool) {
        self.frozen().visit(visit)
    }

    fn copy(&self) -> Box<dyn ReceiptStore> {
        Box::new(self.frozen())
    }

    fn end_batch(&mut self) -> Result<(), String> {
        if self.changes_since_commit < COMMIT_CHANGES_MAX
            && self.last_commit.elapsed() < COMMIT_INTERVAL
        {
            return Ok(());
        }
        self.last_commit = std::time::Instant::now();
        self.changes_since_commit = 0;
        self.unwritten
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .write_to(&self.table)
            .and_then(|()| self.table.commit())
            .map_err(|error| error.to_string())
    }
}

impl DiskReceipts {
    fn lock_unwritten(&self) -> MutexGuard<'_, Unwritten> {
        // A panic with the lock held is a failed assertion in apply, which
        // stops the replica anyway (fail-stop).
        self.unwritten
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A view of the receipts as they are now, uncommitted changes
    /// included: the unwritten receipts are written and the table
    /// committed first (a commit is not a durability point here, see
    /// `palisade_storage::receipt_table`).
    fn frozen(&self) -> FrozenReceipts {
        self.lock_unwritten()
            .write_to(&self.table)
            .unwrap_or_else(|e| fail_stop(e));
        self.table.commit().unwrap_or_else(|e| fail_stop(e));
        FrozenReceipts {
            view: self.table.view().unwrap_or_else(|e| fail_stop(e)),
            pending: Arc::new(self.pending.clone()),
        }
    }
}

/// A read-only view of [`DiskReceipts`] at one moment: the table's view
/// and a copy of the pending receipts (few: see the module doc), shared by
/// the view's own copies.
#[derive(Debug)]
pub struct FrozenReceipts {
    view: ReceiptView,
    pending: Arc<BTreeMap<String, Receipt>>,
}

impl ReceiptStore for FrozenReceipts {
    fn get(&self, request_id: &str) -> Option<Receipt> {
        lookup(&self.pending, request_id, || self.view.get(request_id))
    }

    fn put(&mut self, _: &str, _: &Receipt, _: Option<&Receipt>) {
        unreachable!(
            "a frozen copy of the receipts is read-only; Receipts moves it to memory first"
        )
    }

    fn remove(&mut self, _: &str, _: &Receipt) {
        unreachable!(
            "a frozen copy of the receipts is read-only; Receipts moves it to memory first"
        )
    }

    fn settled_up_to(&self, settled_at_ms_max: i64, limit: usize) -> Vec<String> {
        self.view
            .ordered_up_to(settled_at_ms_max, limit)
            .unwrap_or_else(|e| fail_stop(e))
            .into_iter()
            .map(|(_, request_id)| request_id)
            .collect()
    }

    /// The table's receipts and the pending ones merged into one
    /// request-id order (a request id is in one of the two, never both).
    fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool) {
        let mut pending = self.pending.iter().peekable();
        let mut going = true;
        self.view
            .visit(|request_id, bytes| {
                while let Some((id, receipt)) = pending.next_if(|(id, _)| id.as_str() < request_id)
                {
                    going = visit(id, StoredReceipt::Decoded(receipt));
                    if !going {
                        return false;
                    }
                }
                let json = std::str::from_utf8(bytes).unwrap_or_else(|error| {
                    panic!("the stored receipt of request {request_id:?} is not UTF-8: {error}")
                });
                going = visit(request_id, StoredReceipt::Json(json));
                going
            })
            .unwrap_or_else(|e| fail_stop(e));
        if going {
            for (id, receipt) in pending {
                if !visit(id, StoredReceipt::Decoded(receipt)) {
                    return;
                }
            }
        }
    }

    fn copy(&self) -> Box<dyn ReceiptStore> {
        Box::new(FrozenReceipts {
            view: self.view.clone(),
            pending: Arc::clone(&self.pending),
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use palisade_lifecycle::{ReceiptResult, ReceiptRpc, Receipts};

    use super::*;

    fn receipt(settled_at_ms: Option<i64>, workspace: &str) -> Receipt {
        Receipt {
            rpc: ReceiptRpc::StopSandbox,
            payload_digest: "d".into(),
            created_at_ms: 1,
            created_at_index: 7,
            settled_at_ms,
            workspace: workspace.into(),
            result: match settled_at_ms {
                Some(_) => ReceiptResult::Deleted {
                    sandbox_id: "s".into(),
                },
                None => ReceiptResult::Pending {
                    sandbox_id: "s".into(),
                    kind: palisade_lifecycle::OperationKind::Stop,
                    generation: 1,
                },
            },
        }
    }

    #[test]
    fn receipts_on_disk_encode_and_compare_like_receipts_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let in_memory: Receipts = [
            ("b".to_string(), receipt(Some(10), "w1")),
            ("a".to_string(), receipt(None, "w2")),
            ("c\"quoted".to_string(), receipt(Some(5), "")),
        ]
        .into_iter()
        .collect();
        let mut on_disk = in_memory.clone();
        on_disk
            .move_into(Box::new(files.create().unwrap()))
            .unwrap();
        assert_eq!(
            serde_json::to_string(&on_disk).unwrap(),
            serde_json::to_string(&in_memory).unwrap(),
            "a snapshot must not depend on where a replica keeps its receipts"
        );
        assert_eq!(on_disk, in_memory);
        on_disk.assert_invariants();
        assert_eq!(on_disk.count_in("w1"), 1);
        assert_eq!(
            on_disk.settled_up_to(10).len(),
            2,
            "both settled receipts are in the settlement order"
        );
    }

    #[test]
    fn a_copy_keeps_its_moment_and_changes_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let mut receipts = Receipts::default();
        receipts
            .move_into(Box::new(files.create().unwrap()))
            .unwrap();
        receipts.insert("a".into(), receipt(Some(10), "w"));
        let copy = receipts.clone();
        receipts.insert("b".into(), receipt(Some(11), "w"));
        receipts.end_batch().unwrap();
        assert_eq!(copy.len(), 1);
        assert_eq!(
            copy.to_vec().len(),
            1,
            "the copy is the moment it was taken"
        );
        assert!(copy.get("b").is_none());
        let mut changed = copy.clone();
        changed.insert("c".into(), receipt(None, "w"));
        assert_eq!(changed.len(), 2);
        assert!(
            receipts.get("c").is_none(),
            "the copy's change stays its own"
        );
    }

    fn table_len(store: &DiskReceipts) -> u64 {
        store.table.commit().unwrap();
        store.table.view().unwrap().len().unwrap()
    }

    #[test]
    fn a_receipt_reaches_the_table_once_settled() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let mut store = files.create().unwrap();
        let pending = receipt(None, "w");
        store.put("a", &pending, None);
        assert_eq!(store.get("a"), Some(pending.clone()));
        assert_eq!(
            table_len(&store),
            0,
            "a pending receipt is written once, when it settles"
        );
        let settled = receipt(Some(10), "w");
        store.put("a", &settled, Some(&pending));
        assert_eq!(store.get("a"), Some(settled.clone()));
        assert_eq!(
            table_len(&store),
            0,
            "a settled receipt waits for the table's next commit"
        );
        assert_eq!(store.settled_up_to(10, 10), vec!["a".to_string()]);
        drop(store.copy());
        assert_eq!(table_len(&store), 1, "a copy writes what waits first");
        assert_eq!(store.get("a"), Some(settled.clone()));
        assert_eq!(store.settled_up_to(10, 10), vec!["a".to_string()]);

        store.put("b", &pending, None);
        store.remove("b", &pending);
        assert_eq!(store.get("b"), None);
        store.remove("a", &settled);
        assert_eq!(store.get("a"), None);
        assert_eq!(table_len(&store), 0);
    }

    /// Settled receipts wait in memory until the table commits, then go
    /// in one batch. Fails on a store that writes each settled receipt to
    /// the table as it is put.
    #[test]
    fn settled_receipts_reach_the_table_with_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let mut store = files.create().unwrap();
        store.end_batch().unwrap();
        for (request_id, settled_at_ms) in [("b", 3), ("a", 1), ("c", 2)] {
            store.put(request_id, &receipt(Some(settled_at_ms), "w"), None);
        }
        store.end_batch().unwrap();
        assert_eq!(
            table_len(&store),
            0,
            "nothing reaches the table before the commit is due"
        );
        assert_eq!(store.settled_up_to(2, 10), ["a", "c"]);
        std::thread::sleep(COMMIT_INTERVAL);
        store.end_batch().unwrap();
        assert_eq!(table_len(&store), 3, "the due commit writes all three");
        assert_eq!(store.get("b"), Some(receipt(Some(3), "w")));
        assert_eq!(store.settled_up_to(i64::MAX, 10), ["a", "c", "b"]);
    }

    /// Apply never turns a settled receipt pending again; the store says
    /// so loudly wherever the settled one waits (unwritten here).
    #[test]
    #[should_panic(expected = "a settled receipt cannot become pending again")]
    fn an_unwritten_settled_receipt_cannot_become_pending_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let mut store = files.create().unwrap();
        let settled = receipt(Some(1), "w");
        store.put("a", &settled, None);
        store.put("a", &receipt(None, "w"), Some(&settled));
    }

    /// A tiny deterministic generator: the model test needs no crate.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// The disk store answers what the memory store answers, through any
    /// mix of pending, unwritten and table receipts: random puts, settles,
    /// settles of settled receipts, removes, commits and copies, checked
    /// after each step by get, the settlement order (with limits) and a
    /// copy's visit.
    #[test]
    fn the_disk_store_answers_like_the_memory_store() {
        use palisade_lifecycle::MemoryReceipts;
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        for seed in 1..=4u64 {
            let mut random = Lcg(seed);
            let mut disk = files.create().unwrap();
            let mut memory = MemoryReceipts::default();
            for step in 0..1_500 {
                let request_id = format!("r{:02}", random.below(40));
                let previous = memory.get(&request_id);
                assert_eq!(disk.get(&request_id), previous, "seed {seed} step {step}");
                let settled_at = Some(random.below(50) as i64);
                match (random.below(10), &previous) {
                    (0..=5, None) => {
                        let pending = random.below(2) == 0;
                        let next = receipt(if pending { None } else { settled_at }, "w");
                        disk.put(&request_id, &next, None);
                        memory.put(&request_id, &next, None);
                    }
                    (0..=5, Some(previous)) => {
                        let next = receipt(settled_at, "w");
                        disk.put(&request_id, &next, Some(previous));
                        memory.put(&request_id, &next, Some(previous));
                    }
                    (6..=7, Some(previous)) => {
                        disk.remove(&request_id, previous);
                        memory.remove(&request_id, previous);
                    }
                    (8, _) => {
                        let copy = disk.copy();
                        assert_eq!(
                            copy.get(&request_id),
                            memory.get(&request_id),
                            "seed {seed} step {step}: a copy"
                        );
                    }
                    (9, _) => {
                        disk.last_commit -= COMMIT_INTERVAL;
                        disk.end_batch().unwrap();
                    }
                    _ => {}
                }
                let bound = random.below(60) as i64;
                let limit = 1 + random.below(8) as usize;
                assert_eq!(
                    disk.settled_up_to(bound, limit),
                    memory.settled_up_to(bound, limit),
                    "seed {seed} step {step}: settled up to {bound}, at most {limit}"
                );
            }
            let visited = |store: &dyn ReceiptStore| {
                let mut all = Vec::new();
                store.visit(&mut |request_id, stored| {
                    all.push((request_id.to_string(), stored.decode()));
                    true
                });
                all
            };
            assert_eq!(
                visited(&disk),
                visited(&memory),
                "seed {seed}: every receipt"
            );
        }
    }

    #[test]
    fn a_copy_visits_pending_and_settled_receipts_in_request_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::open(dir.path()).unwrap();
        let mut store = files.create().unwrap();
        for (request_id, settled_at_ms) in [
            ("d", None),
            ("b", Some(2)),
            ("a", None),
            ("e", Some(5)),
            ("c", None),
            ("f", None),
        ] {
            store.put(request_id, &receipt(settled_at_ms, "w"), None);
        }
        let copy = store.copy();
        store.put("a", &receipt(Some(9), "w"), Some(&receipt(None, "w")));
        store.put("g", &receipt(None, "w"), None);

        let mut seen = Vec::new();
        copy.visit(&mut |request_id, stored| {
            seen.push((request_id.to_string(), stored.decode().settled_at_ms()));
            true
        });
        assert_eq!(
            seen,
            [
                ("a", None),
                ("b", Some(2)),
                ("c", None),
                ("d", None),
                ("e", Some(5)),
                ("f", None)
            ]
            .map(|(id, settled)| (id.to_string(), settled)),
            "the copy is its moment, in one order"
        );
        let mut first_three = Vec::new();
        copy.visit(&mut |request_id, _| {
            first_three.push(request_id.to_string());
            first_three.len() < 3
        });
        assert_eq!(first_three, ["a", "b", "c"], "a visit stops when asked");
        assert_eq!(copy.get("a"), Some(receipt(None, "w")));
        assert_eq!(store.get("a"), Some(receipt(Some(9), "w")));
    }

    #[test]
    fn leftover_tables_are_removed_when_the_files_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("receipts-7.redb"), b"old").unwrap();
        std::fs::write(dir.path().join("current.snapshot"), b"kept").unwrap();
        ReceiptFiles::open(dir.path()).unwrap();
        assert!(!dir.path().join("receipts-7.redb").exists());
        assert!(dir.path().join("current.snapshot").exists());
    }
}
