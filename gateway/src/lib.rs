//! The Palisade server library: one replica — its Raft node, the public
//! gRPC service, the admin service, the leader-only effect executor and the
//! execution tokens. No command line lives here (that is `palisade-cli`)
//! and no compute driver (that is `palisade-driver`): a replica is given a
//! `ComputeDriver` and a [`node::NodeConfig`] and runs until its shutdown
//! future resolves. Errors are typed ([`node::NodeError`], tonic statuses
//! with `google.rpc.ErrorInfo` reasons from [`errors`]).
//!
//! # Key decision: apply decides, the executor acts, handlers wait
//!
//! A handler validates and authorizes, proposes one `Begin*` command and
//! waits; the pure `palisade_lifecycle::apply` decides (precondition,
//! receipt, phase) identically on every replica; only the leader's executor
//! touches compute, fenced by term, and reports back with a `Complete*`
//! command. Nothing decides twice, and a replica that loses leadership
//! mid-request answers UNAVAILABLE for the client to retry with the same
//! request id.
//!
//! # One request, hop by hop
//!
//! `palisade sandbox delete NAME --expected-id ID`, from the CLI to the
//! answer. Open the files in this order:
//!
//! 1. `cli/src/commands/sandbox.rs::run` builds a `DeleteSandboxRequest`
//!    (name, `expected_sandbox_id`, a fresh request id) and
//!    `cli/src/client.rs::Client::palisade` sends it, failing over between
//!    replicas and keeping the request id across its retries.
//! 2. `gateway/src/service/mod.rs::PalisadeService::delete_sandbox` (the
//!    tonic handler) hands over to
//!    `gateway/src/service/sandboxes.rs::delete`, which validates the input
//!    and digests the payload for the receipt
//!    (`gateway/src/service/request.rs::request_meta`).
//! 3. `gateway/src/service/request.rs::PalisadeService::run_operation`
//!    proposes `Command::BeginDelete` through
//!    `gateway/src/replica.rs::Replica::propose`: written through openraft on
//!    the leader, or forwarded to it
//!    (`raft/src/network/forward.rs::PeerClients::forward_write`, answered
//!    by `raft/src/peer_service.rs::PeerService::forward_write`).
//! 4. `raft/src/state_machine.rs::LifecycleStateMachine::apply` feeds the
//!    committed entry to `lifecycle/src/apply.rs::apply`, whose
//!    `begin_delete` checks the expected id (SANDBOX_IDENTITY_MISMATCH
//!    otherwise), records the receipt and marks the sandbox DELETING with a
//!    pending delete operation.
//! 5. On the leader, `gateway/src/executor.rs::Executor::run` sees the
//!    pending operation and `Executor::perform` confirms leadership in the
//!    term it started in, calls the driver
//!    (`driver/src/lib.rs::ComputeDriver::remove`) and `Executor::complete`
//!    proposes `Command::CompleteDelete`.
//! 6. `lifecycle/src/apply.rs::complete_delete` removes the sandbox, its
//!    owned records and its name in one entry.
//! 7. Back in `run_operation`, the handler waits with
//!    `gateway/src/replica.rs::Replica::wait_until` for its receipt's
//!    terminal result and answers `deleted` — or UNAVAILABLE
//!    (LEADERSHIP_CHANGED / OUTCOME_PENDING) for the client to retry with
//!    the same request id.
//!
//! # Layout
//!
//! - [`node`]: runs one replica (storage, Raft, executor, gRPC server) with
//!   a designed shutdown; [`node::NodeError`].
//! - [`founding`]: founding the cluster once, and refusing to found it
//!   again from a wiped data directory.
//! - [`restore`]: seeding a replica of a new cluster from a backup file
//!   (`palisade cluster restore`).
//! - [`replica`]: proposing (locally or forwarded), linearizable reads,
//!   waiting for the applied state.
//! - [`service`]: `palisade.v1.Palisade` handlers, split by resource
//!   (sandboxes, watch, owned records, workspaces, request plumbing);
//!   validation at the edge.
//! - [`admin`]: `palisade.v1.ClusterAdmin`: cluster view and membership.
//! - [`executor`]: turns committed operations into driver calls, fenced by
//!   term and by the driver's fence; runs the orphan reconciler.
//! - [`reconcile`]: the reconciler's pure plan: which executions the state
//!   does not account for, and what reaping each means.
//! - [`projection`]: the optional PostgreSQL read projection
//!   (`--postgres-url`).
//! - [`edge`]: what every public and admin request passes first: one
//!   bounded, well-framed message per request.
//! - [`errors`]: statuses with `google.rpc.ErrorInfo` reasons.
//! - [`token`]: attested execution tokens.
//! - [`convert`]: core types <-> API messages.
//! - [`observe`]: the replica's metrics glue (log timings, the Raft
//!   watcher, gauges read at scrape time) for `--metrics-listen`.
//! - [`status_page`]: the HTML status page served on `/` of
//!   `--metrics-listen`.
//! - [`clock`]: the replica's wall clock, an injectable source (the chaos
//!   harness skews it per replica).
//! - [`planted`]: TEST-ONLY planted bugs for the chaos harness, compiled
//!   in only with the `planted-bugs` feature (off by default).
#![deny(missing_docs)]

pub mod admin;
pub mod auth;
pub mod clock;
pub mod convert;
pub mod digest_cache;
pub mod edge;
pub mod errors;
pub mod executor;
pub mod feature_level;
pub mod founding;
pub mod ids;
pub mod leader_hint;
pub mod node;
pub mod observe;
pub mod planted;
pub mod projection;
pub mod reconcile;
pub mod replica;
pub mod restore;
pub mod service;
pub mod snapshot_cadence;
pub mod status_page;
pub mod token;
