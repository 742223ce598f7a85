//! openraft glue for Palisade: the type config, the state machine adapter
//! that feeds committed entries to [`palisade_lifecycle::apply()`], the peer
//! transport over tonic, and node bootstrap.
//!
//! # Key decision
//!
//! The state machine keeps the lifecycle [`State`](palisade_lifecycle::State)
//! in memory and makes it durable through the Raft log plus snapshots: on
//! restart openraft re-applies committed entries after the last snapshot
//! (the committed log id is persisted by the log store). Apply is therefore
//! a pure in-memory step, which keeps it deterministic and fast.
//!
//! # Layout
//!
//! - [`feature_level`]: the feature level this build supports, and the
//!   checks that keep a replica from running below the cluster's level.
//! - [`types`]: `TypeConfig` and the aliases everyone uses.
//! - [`state_machine`]: `LifecycleStateMachine`, apply and snapshots, and the
//!   shared read handle the gateway reads state through.
//! - [`receipt_store`]: the state's request receipts on disk, not in memory.
//! - [`network`]: the client side of the peer transport.
//! - [`peer_service`]: the server side (`palisade.peer.v1.RaftPeer`).
//! - [`tls`]: mutual TLS between peers; a peer's node id from its
//!   certificate.
//! - [`backup`]: backup files of the state (`cluster snapshot save`) and
//!   seeding a new cluster from one (`cluster restore`).
//! - [`runtime`]: the openraft async runtime (tokio; seeded randomness and
//!   inline blocking work on a simulated thread).
//! - [`simnet`]: the in-memory network of the deterministic simulation.
//! - [`hooks`]: fault-injection hooks for tests and the chaos harness
//!   (link faults in the transport, fault points inside requests, storage
//!   faults); [`faulty_log`]: the log store wrapper that injects the last.
#![deny(missing_docs)]

pub mod backup;
pub mod faulty_log;
pub mod feature_level;
pub mod hooks;
pub mod network;
pub mod peer_service;
pub mod receipt_store;
pub mod runtime;
pub mod simnet;
pub mod state_machine;
pub mod tls;
pub mod types;
pub mod waiters;

pub use network::{ForwardError, PeerClients, PeerNetworkFactory};
pub use peer_service::PeerService;
pub use state_machine::{
    LifecycleStateMachine, SNAPSHOT_BYTES_BUDGET, STATE_BYTES_MAX, SandboxChange, SandboxEvent,
    StateHandle,
};
pub use types::*;
