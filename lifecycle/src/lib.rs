//! The replicated sandbox lifecycle: commands, state and [`apply`].
//!
//! This crate is the deterministic core of Palisade, in the manner of etcd's
//! raft package: the rest of the system feeds it committed commands, in log
//! order, and drains outcomes. It has no IO, no async, no clock and no
//! randomness, so every replica that applies the same log reaches the same
//! state, byte for byte.
//!
//! # What `apply` may use
//!
//! Exactly three inputs: the current [`State`], the [`Command`] (which carries
//! everything non-deterministic: sandbox ids chosen by the proposer, times
//! read by the proposer) and the log position ([`LogPosition`]: index and
//! term) of the entry being applied. Nothing else.
//!
//! # Replicated time
//!
//! Every time in the state is stamped at apply from the replicated clock,
//! [`State::clock_ms`], never from a proposer's clock: a sandbox's and a
//! workspace's `created_at_ms`, a policy's `updated_at_ms`, a receipt's
//! `created_at_ms` and `settled_at_ms`, an SSH session's expiry (the clock
//! plus the TTL its command carries). Commands carry durations; the
//! proposer times some still carry (`time_ms`) are kept for the audit trail
//! and never read by apply. Only `Tick` moves the clock: towards the
//! leader's wall clock, never back, by at most
//! [`TICK_STEP_MS_MAX`](limits::TICK_STEP_MS_MAX) per tick (the first tick
//! of a cluster sets the epoch). So a replica whose clock is behind cannot
//! age anything, and one leader's forward jump advances the clock by one
//! step, not by the jump. Receipt retention is replicated configuration
//! ([`State::receipt_retention_ms`], at least 24 h, clamped at apply),
//! counted from a receipt's settlement; pending receipts never expire.
//! A retired execution-token key's deadline is on the same clock
//! (`RotateTokenKey`: the clock plus the grace its command carries).
//!
//! # A state budget
//!
//! Every record a client can make the state hold is bounded per workspace
//! by replicated quotas ([`Quotas`]: receipts, sandboxes, owned records),
//! refused at apply with `QUOTA_EXCEEDED` and without a receipt, so one
//! workspace at its quota neither grows the state nor blocks another. A
//! receipt is a compact outcome (ids, generation, phase or reason), not a
//! copy of the sandbox, and expires in O(expired).
//!
//! # Deterministic and non-deterministic errors
//!
//! A rejected precondition (name taken, wrong phase, ...) is a
//! *deterministic* outcome: it is returned as a [`Rejection`] identically on
//! every replica and changes nothing. A broken invariant is a programmer
//! error and panics (fail-stop) rather than letting replicas diverge.
//!
//! # Layout
//!
//! - [`limits`]: every bound (name lengths, label counts, page sizes), named.
//! - [`validate`]: input checks shared by the API edge and `apply`.
//! - [`selector`]: Kubernetes-syntax label selectors (parse and match).
//! - [`state`]: workspaces, sandboxes, executions, operations, quotas.
//! - [`receipts`]: request receipts, compact outcomes indexed by expiry
//!   and workspace (why: see the module).
//! - [`command`]: what can be proposed.
//! - [`feature`]: the cluster feature level: which command kinds it
//!   permits.
//! - [`apply`](mod@apply): the state transition function and its outcomes.
//! - [`census`]: sandbox counts by workspace and phase, kept at apply.
//! - `owned`: SSH sessions and policies, the records a sandbox owns.
//! - [`planted`]: TEST-ONLY planted bugs for the chaos harness, compiled in
//!   only with the `planted-bugs` feature (off by default).
#![deny(missing_docs)]

pub mod apply;
pub mod census;
pub mod command;
pub mod feature;
pub mod limits;
mod owned;
pub mod planted;
pub mod receipts;
pub mod selector;
pub mod state;
pub mod string_map;
pub mod validate;

pub use apply::{LogPosition, Outcome, Reason, Rejection, Response, apply};
pub use census::Census;
pub use command::{
    Attribution, Command, CompletionOf, ExecutionRef, LaunchResult, RequestMeta, SandboxTarget,
};
pub use state::{
    ApiToken, CarriedTokenKey, ClusterIdentity, DEFAULT_WORKSPACE, Execution, MemoryReceipts,
    Operation, OperationKind, Quotas, Receipt, ReceiptResult, ReceiptRpc, ReceiptStore, Receipts,
    RestartPolicy, RetiredTokenKey, Sandbox, SandboxPhase, SandboxPolicy, SandboxSpec, SshSession,
    State, StoredReceipt, Workspace, WorkspacePhase,
};
pub use string_map::StringMap;
