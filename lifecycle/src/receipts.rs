//! Request receipts: what the cluster remembers of a request id, so that a
//! retry replays the original result exactly once.
//!
//! # Key decision: a compact outcome, indexed by expiry
//!
//! A receipt keeps the *outcome* of its request — the sandbox id, the
//! generation and phase it left, or the rejection's reason — never a copy
//! of the sandbox: a stop of a stopped sandbox is a 60-byte request, and
//! its receipt must cost about that much for the whole retention window,
//! not the size of the sandbox's spec. A retry is answered with the
//! outcome's id, name, generation, phase and resource version — the same as
//! the first answer — and the rest of the sandbox as it is when the answer
//! is read (spec and labels; none if it was deleted since).
//!
//! # Key decision: receipts live in a store, not in the state's memory
//!
//! Receipts are kept for 24 hours at any sustained write rate: millions of
//! them. [`Receipts`] holds only their count and the count per workspace
//! (for the per-workspace receipt quota, [`Quotas`](crate::Quotas)); the
//! receipts themselves and their settlement order live in a
//! [`ReceiptStore`]. [`MemoryReceipts`] keeps them in memory (tests, tools,
//! a state decoded from JSON); a replica moves them into an on-disk store
//! (`palisade_raft::receipt_store`), so its memory does not grow with
//! them, and a snapshot copies the stored bytes instead of re-encoding
//! each receipt. Expiry walks the settlement order from its oldest end:
//! O(expired), never a scan.
//!
//! Receipts stay part of the pure replicated state: apply decides
//! "replay", "reused id" and quotas from them, so they must be the same on
//! every replica at every index, and they travel with the state in
//! snapshots (serialized as the same JSON map of receipts by request id as
//! before stores existed, so older snapshots load unchanged). Apply sees a
//! store only through [`ReceiptStore`]: no IO in `lifecycle`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::state::{OperationKind, Sandbox, SandboxPhase};

/// Which RPC a receipt belongs to; a request id is bound to one RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReceiptRpc {
    /// CreateSandbox.
    CreateSandbox,
    /// StopSandbox.
    StopSandbox,
    /// StartSandbox.
    StartSandbox,
    /// DeleteSandbox.
    DeleteSandbox,
}

/// The terminal result a receipt replays: a compact outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ReceiptResultWire")]
pub enum ReceiptResult {
    /// The operation the request began (or joined) is still in flight.
    Pending {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        kind: OperationKind,
        /// Target generation.
        generation: u64,
    },
    /// The request's operation ended (or there was nothing to do) and left
    /// the sandbox in `phase` at execution `generation`.
    Settled {
        /// Sandbox id.
        sandbox_id: String,
        /// Its execution generation then.
        generation: u64,
        /// Its phase then.
        phase: SandboxPhase,
        /// Its resource version then: a retry answers with the same one as
        /// the first answer (absent from receipts written before it: 0,
        /// the sandbox's current one is answered).
        #[serde(default)]
        resource_version: u64,
        /// Its name and workspace, so a retry answers the same sandbox
        /// even after it was deleted (empty in older receipts).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        name: String,
        /// See `name`.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        workspace: String,
    },
    /// The sandbox was deleted.
    Deleted {
        /// Its id.
        sandbox_id: String,
    },
    /// The request was rejected at apply.
    Rejected(crate::apply::Rejection),
}

impl ReceiptResult {
    /// The compact outcome a request left `sandbox` in.
    pub fn settled(sandbox: &Sandbox) -> Self {
        ReceiptResult::Settled {
            sandbox_id: sandbox.id.clone(),
            generation: sandbox.execution.generation,
            phase: sandbox.phase,
            resource_version: sandbox.resource_version,
            name: sandbox.name.clone(),
            workspace: sandbox.workspace.clone(),
        }
    }
}

/// How receipt results were written, old and new: before compact outcomes
/// a settled receipt held the whole sandbox (`Sandbox`). Decoding keeps
/// only its outcome, so an old snapshot or log replay loads into the
/// compact form.
#[derive(Deserialize)]
enum ReceiptResultWire {
    Pending {
        sandbox_id: String,
        kind: OperationKind,
        generation: u64,
    },
    Settled {
        sandbox_id: String,
        generation: u64,
        phase: SandboxPhase,
        #[serde(default)]
        resource_version: u64,
        #[serde(default)]
        name: String,
        #[serde(default)]
        workspace: String,
    },
    Sandbox(Box<Sandbox>),
    Deleted {
        sandbox_id: String,
    },
    Rejected(crate::apply::Rejection),
}

impl From<ReceiptResultWire> for ReceiptResult {
    fn from(wire: ReceiptResultWire) -> Self {
        match wire {
            ReceiptResultWire::Pending {
                sandbox_id,
                kind,
                generation,
            } => ReceiptResult::Pending {
                sandbox_id,
                kind,
                generation,
            },
            ReceiptResultWire::Settled {
                sandbox_id,
                generation,
                phase,
                resource_version,
                name,
                workspace,
            } => ReceiptResult::Settled {
                sandbox_id,
                generation,
                phase,
                resource_version,
                name,
                workspace,
            },
            ReceiptResultWire::Sandbox(sandbox) => ReceiptResult::settled(&sandbox),
            ReceiptResultWire::Deleted { sandbox_id } => ReceiptResult::Deleted { sandbox_id },
            ReceiptResultWire::Rejected(rejection) => ReceiptResult::Rejected(rejection),
        }
    }
}

/// What the cluster remembers of a request id: while its operation is in
/// flight, then for the receipt retention
/// ([`State::receipt_retention_ms`](crate::State::receipt_retention_ms), at
/// least 24 h) counted on the replicated clock from its settlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The RPC the request id was first used with.
    pub rpc: ReceiptRpc,
    /// Digest of the request's payload; a retry must match it.
    pub payload_digest: String,
    /// The replicated clock ([`State::clock_ms`](crate::State::clock_ms))
    /// when the request was first applied. Entries applied before
    /// replicated time hold the proposer's clock here.
    pub created_at_ms: i64,
    /// Log index of the entry that first applied it.
    pub created_at_index: u64,
    /// The replicated clock when its result became final (`None` while
    /// pending); its retention counts from here. Absent from receipts
    /// written before it existed: see [`Receipt::settled_at_ms`].
    #[serde(default)]
    pub settled_at_ms: Option<i64>,
    /// The workspace whose receipt quota it counts against: the target's
    /// workspace as resolved at apply (the `default` workspace when an id
    /// resolved to nothing). Empty for receipts written before quotas
    /// existed; those count against no workspace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workspace: String,
    /// Its result, replayed to retries.
    pub result: ReceiptResult,
}

impl Receipt {
    /// When its retention starts: `None` while its operation is pending
    /// (kept however old). A settled receipt written before settlement was
    /// recorded counts from its creation.
    pub fn settled_at_ms(&self) -> Option<i64> {
        match (&self.result, self.settled_at_ms) {
            (ReceiptResult::Pending { .. }, _) => None,
            (_, Some(settled_at_ms)) => Some(settled_at_ms),
            (_, None) => Some(self.created_at_ms),
        }
    }
}

/// A receipt as a store hands it out while it is visited: decoded, or as
/// the JSON it is stored as (written by `serde_json` from a [`Receipt`], so
/// it is exactly what encoding the decoded receipt would give).
#[derive(Debug, Clone, Copy)]
pub enum StoredReceipt<'a> {
    /// Kept decoded (in memory).
    Decoded(&'a Receipt),
    /// Kept as its JSON encoding (on disk).
    Json(&'a str),
}

impl StoredReceipt<'_> {
    /// The receipt, decoded. Panics if stored JSON does not decode: a
    /// store only holds what [`Receipt`] encoded to.
    pub fn decode(self) -> Receipt {
        match self {
            StoredReceipt::Decoded(receipt) => receipt.clone(),
            StoredReceipt::Json(json) => serde_json::from_str(json)
                .unwrap_or_else(|error| panic!("a stored receipt does not decode: {error}")),
        }
    }
}

/// Where the receipts of a state live: by request id, plus the order in
/// which settled receipts expire.
///
/// A store may do IO (the replica's is a file), but apply cannot handle an
/// IO error: it has no outcome for "this replica's disk failed". A store
/// that cannot read or write panics with the reason, which poisons the
/// state and stops the replica (fail-stop, like a log store error); the
/// other replicas go on. [`ReceiptStore::end_batch`] is where a store
/// reports an error instead, outside apply.
pub trait ReceiptStore: fmt::Debug + Send + Sync {
    /// The receipt of `request_id`.
    fn get(&self, request_id: &str) -> Option<Receipt>;

    /// Stores `receipt` as `request_id`'s, replacing `previous` (what
    /// [`get`](ReceiptStore::get) returned for it), and keeps the
    /// settlement order. Panics if `previous` is `None` but the request id
    /// had a receipt, or the other way round.
    fn put(&mut self, request_id: &str, receipt: &Receipt, previous: Option<&Receipt>);

    /// Removes `request_id`'s receipt, `previous`.
    fn remove(&mut self, request_id: &str, previous: &Receipt);

    /// At most `limit` request ids of settled receipts settled at or
    /// before `settled_at_ms_max`, oldest first (O(returned)).
    fn settled_up_to(&self, settled_at_ms_max: i64, limit: usize) -> Vec<String>;

    /// Calls `visit` with every receipt, in request-id order, until it
    /// answers `false`.
    fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool);

    /// A copy of the receipts as they are now, which later changes to this
    /// store do not affect. A disk store answers a read-only view (cheap:
    /// no receipt is copied); see [`ReceiptStore::is_read_only`].
    fn copy(&self) -> Box<dyn ReceiptStore>;

    /// Whether [`put`](ReceiptStore::put) and
    /// [`remove`](ReceiptStore::remove) are refused (a disk store's copy):
    /// [`Receipts`] moves such receipts into memory before it changes them.
    fn is_read_only(&self) -> bool {
        false
    }

    /// Called after each batch of applied entries: a store that buffers
    /// changes may commit them here (or with a later batch's: reads and
    /// [`copy`](ReceiptStore::copy) see every change either way). An error
    /// stops the replica.
    fn end_batch(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Panics if the store's settlement order disagrees with its receipts.
    fn assert_invariants(&self) {}
}

/// Receipts in memory: by request id, and (settled at, request id) of
/// every settled receipt.
#[derive(Debug, Clone, Default)]
pub struct MemoryReceipts {
    by_id: BTreeMap<String, Receipt>,
    by_settlement: BTreeSet<(i64, String)>,
}

impl ReceiptStore for MemoryReceipts {
    fn get(&self, request_id: &str) -> Option<Receipt> {
        self.by_id.get(request_id).cloned()
    }

    fn put(&mut self, request_id: &str, receipt: &Receipt, previous: Option<&Receipt>) {
        if let Some(settled_at_ms) = previous.and_then(Receipt::settled_at_ms) {
            self.by_settlement
                .remove(&(settled_at_ms, request_id.to_string()));
        }
        if let Some(settled_at_ms) = receipt.settled_at_ms() {
            self.by_settlement
                .insert((settled_at_ms, request_id.to_string()));
        }
        let replaced = self
            .by_id
            .insert(request_id.to_string(), receipt.clone())
            .is_some();
        assert_eq!(
            replaced,
            previous.is_some(),
            "request id {request_id:?}: a receipt was stored over another, or a replaced one was missing"
        );
    }

    fn remove(&mut self, request_id: &str, previous: &Receipt) {
        if let Some(settled_at_ms) = previous.settled_at_ms() {
            self.by_settlement
                .remove(&(settled_at_ms, request_id.to_string()));
        }
        self.by_id.remove(request_id);
    }

    fn settled_up_to(&self, settled_at_ms_max: i64, limit: usize) -> Vec<String> {
        self.by_settlement
            .iter()
            .take_while(|(settled_at_ms, _)| *settled_at_ms <= settled_at_ms_max)
            .take(limit)
            .map(|(_, request_id)| request_id.clone())
            .collect()
    }

    fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool) {
        for (request_id, receipt) in &self.by_id {
            if !visit(request_id, StoredReceipt::Decoded(receipt)) {
                break;
            }
        }
    }

    fn copy(&self) -> Box<dyn ReceiptStore> {
        Box::new(self.clone())
    }

    fn assert_invariants(&self) {
        let settled: BTreeSet<(i64, String)> = self
            .by_id
            .iter()
            .filter_map(|(id, receipt)| Some((receipt.settled_at_ms()?, id.clone())))
            .collect();
        assert_eq!(
            settled, self.by_settlement,
            "the settlement index must list exactly the settled receipts"
        );
    }
}

/// How many expired receipts one step of [`Receipts::expire`] takes from
/// the store at a time.
const EXPIRE_STEP: usize = 1024;

/// How many receipts [`Receipts::copy_from`] copies between two
/// [`ReceiptStore::end_batch`] calls.
pub const COPY_STEP: usize = 4_096;

/// Every receipt by request id (in a [`ReceiptStore`]), with their count
/// per workspace. Serialized as the plain JSON map of receipts.
pub struct Receipts {
    store: Box<dyn ReceiptStore>,
    len: usize,
    /// workspace -> receipts counted against it.
    per_workspace: BTreeMap<String, usize>,
    /// Bytes the receipts took in JSON when last encoded or decoded (see
    /// [`Receipts::encoded_bytes`]); atomic because encoding takes `&self`.
    encoded_bytes: AtomicU64,
}

impl Default for Receipts {
    fn default() -> Self {
        Receipts {
            store: Box::new(MemoryReceipts::default()),
            len: 0,
            per_workspace: BTreeMap::new(),
            encoded_bytes: AtomicU64::new(0),
        }
    }
}

impl Clone for Receipts {
    /// A copy that later changes to `self` do not affect (from a disk
    /// store, a read-only view: see [`ReceiptStore::copy`]).
    fn clone(&self) -> Self {
        Receipts {
            store: self.store.copy(),
            len: self.len,
            per_workspace: self.per_workspace.clone(),
            encoded_bytes: AtomicU64::new(self.encoded_bytes()),
        }
    }
}

impl fmt::Debug for Receipts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipts")
            .field("len", &self.len)
            .field("per_workspace", &self.per_workspace)
            .field("store", &self.store)
            .finish()
    }
}

impl PartialEq for Receipts {
    /// Same receipts (O(receipts): tests and checks only).
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.to_vec() == other.to_vec()
    }
}

impl Eq for Receipts {}

impl Receipts {
    /// The receipt of `request_id`.
    pub fn get(&self, request_id: &str) -> Option<Receipt> {
        self.store.get(request_id)
    }

    /// Bytes the receipts took in the state's JSON when they were last
    /// encoded (a snapshot, a digest) or decoded from a snapshot into a
    /// store; 0 before either. The replica budgets the state it holds in
    /// memory without them (they live on disk: see the module doc).
    pub fn encoded_bytes(&self) -> u64 {
        self.encoded_bytes.load(Ordering::Relaxed)
    }

    /// Whether `request_id` has a receipt.
    pub fn contains_key(&self, request_id: &str) -> bool {
        self.store.get(request_id).is_some()
    }

    /// Number of receipts.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every receipt, decoded, in request-id order (O(receipts): tests,
    /// tools and resyncs, never apply).
    pub fn to_vec(&self) -> Vec<(String, Receipt)> {
        let mut all = Vec::with_capacity(self.len);
        self.store.visit(&mut |request_id, stored| {
            all.push((request_id.to_string(), stored.decode()));
            true
        });
        all
    }

    /// The settled receipts settled at or before `settled_at_ms_max`,
    /// oldest first: the next to expire. Costs O(returned).
    pub fn settled_up_to(&self, settled_at_ms_max: i64) -> Vec<(String, Receipt)> {
        self.store
            .settled_up_to(settled_at_ms_max, usize::MAX)
            .into_iter()
            .map(|request_id| {
                let receipt = self
                    .store
                    .get(&request_id)
                    .expect("the settlement order names existing receipts only");
                (request_id, receipt)
            })
            .collect()
    }

    /// Receipts counted against `workspace`'s quota.
    pub fn count_in(&self, workspace: &str) -> usize {
        self.per_workspace.get(workspace).copied().unwrap_or(0)
    }

    /// Records a new receipt. Panics if `request_id` already has one
    /// (apply checks first: a request id is applied once; the store
    /// asserts it as it writes, without a second lookup).
    pub fn insert(&mut self, request_id: String, receipt: Receipt) {
        self.make_mut();
        self.store.put(&request_id, &receipt, None);
        self.count(&receipt.workspace);
    }

    /// Settles the receipt of `request_id` with `result` at `clock_ms`
    /// (a receipt that is gone is left alone).
    pub(crate) fn settle(&mut self, request_id: &str, result: &ReceiptResult, clock_ms: i64) {
        self.make_mut();
        let Some(previous) = self.store.get(request_id) else {
            return;
        };
        let mut receipt = previous.clone();
        receipt.result = result.clone();
        receipt.settled_at_ms = Some(clock_ms);
        self.store.put(request_id, &receipt, Some(&previous));
    }

    /// Removes every settled receipt whose retention ended at `clock_ms`
    /// (settled at or before `clock_ms - retention_ms`). Costs O(expired):
    /// it walks the settlement order from its oldest end. Pending receipts
    /// are never in that order, so they never expire.
    pub(crate) fn expire(&mut self, clock_ms: i64, retention_ms: i64) {
        let settled_at_ms_max = clock_ms.saturating_sub(retention_ms);
        loop {
            let expired = self.store.settled_up_to(settled_at_ms_max, EXPIRE_STEP);
            if expired.is_empty() {
                return;
            }
            self.make_mut();
            for request_id in &expired {
                let receipt = self
                    .store
                    .get(request_id)
                    .expect("the settlement order names existing receipts only");
                self.store.remove(request_id, &receipt);
                self.uncount(&receipt.workspace);
            }
        }
    }

    /// Keeps only the receipts `keep` accepts (tests and tools; apply
    /// expires through the settlement order). O(receipts).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &Receipt) -> bool) {
        for (request_id, receipt) in self.to_vec() {
            if !keep(&request_id, &receipt) {
                self.make_mut();
                self.store.remove(&request_id, &receipt);
                self.uncount(&receipt.workspace);
            }
        }
    }

    /// Moves every receipt into `store` (which must be empty) and keeps
    /// them there from now on: how a replica puts the receipts of a state
    /// decoded from a snapshot on disk. O(receipts), once. On an error
    /// the receipts stay where they were.
    pub fn move_into(&mut self, store: Box<dyn ReceiptStore>) -> Result<(), String> {
        let moved = std::mem::replace(
            self,
            Receipts {
                store,
                len: 0,
                per_workspace: BTreeMap::new(),
                encoded_bytes: AtomicU64::new(0),
            },
        );
        if let Err(error) = self.copy_from(&moved, |_, _| true) {
            *self = moved;
            return Err(error);
        }
        Ok(())
    }

    /// Inserts the receipts of `source` that `keep` accepts and `self`
    /// does not hold yet; answers how many. Streamed (`source` may hold
    /// millions, on disk: a list of them all would cost their size in
    /// memory at once), with the store's batch ended every
    /// [`COPY_STEP`] receipts, so a store that buffers a batch never holds
    /// them all. O(receipts in `source`).
    pub fn copy_from(
        &mut self,
        source: &Receipts,
        mut keep: impl FnMut(&str, &Receipt) -> bool,
    ) -> Result<usize, String> {
        let mut copied = 0_usize;
        let mut failed = Ok(());
        // `visit` yields each request id once: into an empty store (a
        // snapshot's receipts moving to disk) nothing needs looking up.
        let started_empty = self.is_empty();
        source.visit(&mut |request_id, stored| {
            let receipt = stored.decode();
            if keep(request_id, &receipt) && (started_empty || !self.contains_key(request_id)) {
                self.insert(request_id.to_string(), receipt);
                copied += 1;
                if copied.is_multiple_of(COPY_STEP) {
                    failed = self.store.end_batch();
                }
            }
            failed.is_ok()
        });
        failed?;
        self.store.end_batch()?;
        Ok(copied)
    }

    /// See [`ReceiptStore::end_batch`].
    pub fn end_batch(&mut self) -> Result<(), String> {
        self.store.end_batch()
    }

    /// Calls `visit` with every receipt as stored, in request-id order
    /// (see [`StoredReceipt`]), until it answers `false`.
    pub fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool) {
        self.store.visit(visit)
    }

    /// Before a change: receipts in a read-only copy move into memory.
    fn make_mut(&mut self) {
        if self.store.is_read_only() {
            let mut memory = MemoryReceipts::default();
            self.store.visit(&mut |request_id, stored| {
                memory.put(request_id, &stored.decode(), None);
                true
            });
            self.store = Box::new(memory);
        }
    }

    fn count(&mut self, workspace: &str) {
        self.len += 1;
        if !workspace.is_empty() {
            *self.per_workspace.entry(workspace.to_string()).or_default() += 1;
        }
    }

    fn uncount(&mut self, workspace: &str) {
        self.len -= 1;
        if workspace.is_empty() {
            return;
        }
        let count = self
            .per_workspace
            .get_mut(workspace)
            .expect("every attributed receipt is counted");
        *count -= 1;
        if *count == 0 {
            self.per_workspace.remove(workspace);
        }
    }

    /// Panics if the counts or the store's settlement order disagree with
    /// the receipts (O(receipts)).
    pub fn assert_invariants(&self) {
        let mut len = 0;
        let mut per_workspace = BTreeMap::<String, usize>::new();
        self.store.visit(&mut |_, stored| {
            len += 1;
            let receipt = stored.decode();
            if !receipt.workspace.is_empty() {
                *per_workspace.entry(receipt.workspace).or_default() += 1;
            }
            true
        });
        assert_eq!(len, self.len, "the receipt count must match the receipts");
        assert_eq!(
            per_workspace, self.per_workspace,
            "the per-workspace receipt counts must match the receipts"
        );
        self.store.assert_invariants();
    }
}

impl FromIterator<(String, Receipt)> for Receipts {
    fn from_iter<I: IntoIterator<Item = (String, Receipt)>>(iter: I) -> Self {
        let mut receipts = Receipts::default();
        for (request_id, receipt) in iter {
            receipts.insert(request_id, receipt);
        }
        receipts
    }
}

impl Serialize for Receipts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        let mut failed = None;
        let mut encoded_bytes = 0;
        self.store.visit(&mut |request_id, stored| {
            encoded_bytes += entry_bytes(
                request_id,
                match stored {
                    StoredReceipt::Decoded(receipt) => json_bytes(receipt),
                    StoredReceipt::Json(json) => json.len() as u64,
                },
            );
            let written = match stored {
                StoredReceipt::Decoded(receipt) => map.serialize_entry(request_id, receipt),
                // The stored JSON goes out as it is: no decode and encode.
                StoredReceipt::Json(json) => {
                    match serde_json::from_str::<&serde_json::value::RawValue>(json) {
                        Ok(raw) => map.serialize_entry(request_id, raw),
                        Err(error) => Err(serde::ser::Error::custom(format!(
                            "the stored receipt of {request_id:?} is not JSON: {error}"
                        ))),
                    }
                }
            };
            match written {
                Ok(()) => true,
                Err(error) => {
                    failed = Some(error);
                    false
                }
            }
        });
        if let Some(error) = failed {
            return Err(error);
        }
        self.encoded_bytes.store(encoded_bytes, Ordering::Relaxed);
        map.end()
    }
}

thread_local! {
    /// The store the next [`Receipts`] decoded on this thread goes into
    /// (see [`Receipts::decode_into`]); `None`: into memory.
    static DECODE_INTO: RefCell<Option<Box<dyn ReceiptStore>>> = const { RefCell::new(None) };
}

impl Receipts {
    /// Runs `decode` (which decodes a state, or anything holding one
    /// [`Receipts`]) so that the receipts it decodes go straight into
    /// `store`, one at a time, instead of into memory first: a snapshot of
    /// millions of receipts then decodes in memory that does not grow with
    /// them. Answers `decode`'s result and `store` back if nothing decoded
    /// receipts (for example a state without the field).
    ///
    /// The store is handed over through a thread-local because serde has
    /// no way to pass it down through the state's derived `Deserialize`;
    /// `decode` must run on this thread (it is a plain closure).
    pub fn decode_into<T>(
        store: Box<dyn ReceiptStore>,
        decode: impl FnOnce() -> T,
    ) -> (T, Option<Box<dyn ReceiptStore>>) {
        DECODE_INTO.with(|cell| *cell.borrow_mut() = Some(store));
        let slot = DecodeSlot;
        let decoded = decode();
        (decoded, slot.take())
    }
}

/// The store [`Receipts::decode_into`] lent to [`DECODE_INTO`]: taken back
/// when dropped, unwinding included, so a `decode` that panics does not
/// leave it there to take the receipts of the next state decoded on this
/// thread.
struct DecodeSlot;

impl DecodeSlot {
    fn take(self) -> Option<Box<dyn ReceiptStore>> {
        DECODE_INTO.with(|cell| cell.borrow_mut().take())
    }
}

impl Drop for DecodeSlot {
    fn drop(&mut self) {
        DECODE_INTO.with(|cell| cell.borrow_mut().take());
    }
}

/// Decodes the JSON map of receipts into a store, one entry at a time.
struct IntoStore(Box<dyn ReceiptStore>);

impl<'de> serde::de::Visitor<'de> for IntoStore {
    type Value = Receipts;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a map of request receipts by request id")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Receipts, A::Error> {
        let mut receipts = Receipts {
            store: self.0,
            len: 0,
            per_workspace: BTreeMap::new(),
            encoded_bytes: AtomicU64::new(0),
        };
        let mut encoded_bytes = 0;
        while let Some((request_id, receipt)) = map.next_entry::<String, Receipt>()? {
            if receipts.contains_key(&request_id) {
                return Err(serde::de::Error::custom(format!(
                    "request id {request_id:?} has two receipts"
                )));
            }
            encoded_bytes += entry_bytes(&request_id, json_bytes(&receipt));
            receipts.insert(request_id, receipt);
            if receipts.len.is_multiple_of(COPY_STEP) {
                receipts.end_batch().map_err(serde::de::Error::custom)?;
            }
        }
        receipts.end_batch().map_err(serde::de::Error::custom)?;
        receipts
            .encoded_bytes
            .store(encoded_bytes, Ordering::Relaxed);
        Ok(receipts)
    }
}

/// Bytes `value` encodes to in JSON (counted, not kept; 0 if it does not
/// encode).
pub fn json_bytes(value: &impl Serialize) -> u64 {
    struct Counter(u64);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => 0,
    }
}

/// Bytes of one entry of the receipts' JSON map: the quoted request id, a
/// colon, the receipt, a comma. (A request id is printable ASCII, see
/// `crate::validate`; the rare quote or backslash in one takes a byte
/// more escaped, which this budget figure ignores.)
fn entry_bytes(request_id: &str, receipt_bytes: u64) -> u64 {
    request_id.len() as u64 + 4 + receipt_bytes
}

impl<'de> Deserialize<'de> for Receipts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if let Some(store) = DECODE_INTO.with(|cell| cell.borrow_mut().take()) {
            return deserializer.deserialize_map(IntoStore(store));
        }
        let by_id = BTreeMap::<String, Receipt>::deserialize(deserializer)?;
        Ok(by_id.into_iter().collect())
    }
}
