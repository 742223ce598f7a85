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
//! [`Receipts`] keeps two derived indexes next to the receipts themselves:
//! settled receipts ordered by settlement time, so a tick expires them in
//! O(expired · log n) instead of scanning every receipt, and the count of
//! receipts per workspace, for the per-workspace receipt quota
//! ([`Quotas`](crate::Quotas)). Only the receipts are serialized (the
//! same JSON map as before these indexes existed); the indexes are rebuilt
//! when a state is decoded, so older snapshots load unchanged.
//!
//! Receipts stay in the pure replicated state: apply decides "replay",
//! "reused id" and quotas from them, so they must be the same on every
//! replica at every index, and they travel with the state in snapshots.

use std::collections::{BTreeMap, BTreeSet};

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

/// Every receipt by request id, with the indexes apply needs to expire them
/// in O(expired) and to count them per workspace. Serialized as the plain
/// map of receipts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipts {
    by_id: BTreeMap<String, Receipt>,
    /// (settled at, request id) of every settled receipt.
    by_settlement: BTreeSet<(i64, String)>,
    /// workspace -> receipts counted against it.
    per_workspace: BTreeMap<String, usize>,
}

impl Receipts {
    /// The receipt of `request_id`.
    pub fn get(&self, request_id: &str) -> Option<&Receipt> {
        self.by_id.get(request_id)
    }

    /// Whether `request_id` has a receipt.
    pub fn contains_key(&self, request_id: &str) -> bool {
        self.by_id.contains_key(request_id)
    }

    /// Number of receipts.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Receipts in request-id order.
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, String, Receipt> {
        self.by_id.iter()
    }

    /// The receipts, in request-id order.
    pub fn values(&self) -> std::collections::btree_map::Values<'_, String, Receipt> {
        self.by_id.values()
    }

    /// The settled receipts settled at or before `settled_at_ms_max`,
    /// oldest first: the next to expire. Costs O(returned).
    pub fn settled_up_to(
        &self,
        settled_at_ms_max: i64,
    ) -> impl Iterator<Item = (&String, &Receipt)> + '_ {
        self.by_settlement
            .iter()
            .take_while(move |(settled_at_ms, _)| *settled_at_ms <= settled_at_ms_max)
            .map(|(_, request_id)| {
                self.by_id
                    .get_key_value(request_id)
                    .expect("the settlement index names existing receipts only")
            })
    }

    /// Receipts counted against `workspace`'s quota.
    pub fn count_in(&self, workspace: &str) -> usize {
        self.per_workspace.get(workspace).copied().unwrap_or(0)
    }

    /// Records a new receipt. Panics if `request_id` already has one
    /// (apply checks first: a request id is applied once).
    pub fn insert(&mut self, request_id: String, receipt: Receipt) {
        assert!(
            !self.by_id.contains_key(&request_id),
            "request id {request_id:?} already has a receipt"
        );
        self.index(&request_id, &receipt);
        self.by_id.insert(request_id, receipt);
    }

    /// Settles the receipt of `request_id` with `result` at `clock_ms`
    /// (a receipt that is gone is left alone).
    pub(crate) fn settle(&mut self, request_id: &str, result: &ReceiptResult, clock_ms: i64) {
        let Some(receipt) = self.by_id.get_mut(request_id) else {
            return;
        };
        if let Some(settled_at_ms) = receipt.settled_at_ms() {
            self.by_settlement
                .remove(&(settled_at_ms, request_id.to_string()));
        }
        receipt.result = result.clone();
        receipt.settled_at_ms = Some(clock_ms);
        self.by_settlement
            .insert((clock_ms, request_id.to_string()));
    }

    /// Removes every settled receipt whose retention ended at `clock_ms`
    /// (settled at or before `clock_ms - retention_ms`). Costs O(expired):
    /// it walks the settlement index from its oldest end. Pending receipts
    /// are never in that index, so they never expire.
    pub(crate) fn expire(&mut self, clock_ms: i64, retention_ms: i64) {
        while let Some((settled_at_ms, _)) = self.by_settlement.first() {
            if settled_at_ms.saturating_add(retention_ms) > clock_ms {
                break;
            }
            let (_, request_id) = self
                .by_settlement
                .pop_first()
                .expect("first() just returned an element");
            let receipt = self
                .by_id
                .remove(&request_id)
                .expect("the settlement index names existing receipts only");
            self.unindex_workspace(&receipt.workspace);
        }
    }

    /// Keeps only the receipts `keep` accepts (tests and tools; apply
    /// expires through the settlement index).
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut Receipt) -> bool) {
        self.by_id.retain(|id, receipt| keep(id, receipt));
        self.rebuild_indexes();
    }

    fn index(&mut self, request_id: &str, receipt: &Receipt) {
        if let Some(settled_at_ms) = receipt.settled_at_ms() {
            self.by_settlement
                .insert((settled_at_ms, request_id.to_string()));
        }
        if !receipt.workspace.is_empty() {
            *self
                .per_workspace
                .entry(receipt.workspace.clone())
                .or_default() += 1;
        }
    }

    fn unindex_workspace(&mut self, workspace: &str) {
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

    fn rebuild_indexes(&mut self) {
        self.by_settlement.clear();
        self.per_workspace.clear();
        let by_id = std::mem::take(&mut self.by_id);
        for (request_id, receipt) in &by_id {
            self.index(request_id, receipt);
        }
        self.by_id = by_id;
    }

    /// Panics if an index disagrees with the receipts.
    pub fn assert_invariants(&self) {
        let mut rebuilt = Receipts {
            by_id: self.by_id.clone(),
            ..Default::default()
        };
        rebuilt.rebuild_indexes();
        assert_eq!(
            rebuilt.by_settlement, self.by_settlement,
            "the settlement index must list exactly the settled receipts"
        );
        assert_eq!(
            rebuilt.per_workspace, self.per_workspace,
            "the per-workspace receipt counts must match the receipts"
        );
    }
}

impl std::ops::Index<&str> for Receipts {
    type Output = Receipt;

    fn index(&self, request_id: &str) -> &Receipt {
        &self.by_id[request_id]
    }
}

impl<'a> IntoIterator for &'a Receipts {
    type Item = (&'a String, &'a Receipt);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Receipt>;

    fn into_iter(self) -> Self::IntoIter {
        self.by_id.iter()
    }
}

impl FromIterator<(String, Receipt)> for Receipts {
    fn from_iter<I: IntoIterator<Item = (String, Receipt)>>(iter: I) -> Self {
        let mut receipts = Receipts {
            by_id: iter.into_iter().collect(),
            ..Default::default()
        };
        receipts.rebuild_indexes();
        receipts
    }
}

impl Serialize for Receipts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.by_id.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Receipts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_id = BTreeMap::<String, Receipt>::deserialize(deserializer)?;
        Ok(by_id.into_iter().collect())
    }
}
