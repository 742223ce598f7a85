//! The Palisade gateway: the public gRPC service, the leader-only effect
//! executor, compute drivers, and the `palisade` binary's commands.
//!
//! # Layout
//!
//! - [`node`]: runs one replica (storage, Raft, executor, gRPC server) with
//!   a designed shutdown.
//! - [`replica`]: proposing (locally or forwarded), linearizable reads,
//!   waiting for the applied state.
//! - [`service`]: `palisade.v1.Palisade` handlers; validation at the edge.
//! - [`admin`]: `palisade.v1.ClusterAdmin`: cluster view and membership.
//! - [`projection`]: the optional PostgreSQL read projection
//!   (`--postgres-url`).
//! - [`executor`]: turns committed operations into driver calls, fenced by
//!   term.
//! - [`driver`]: the compute driver trait and the `process` driver.
//! - [`errors`]: statuses with `google.rpc.ErrorInfo` reasons.
//! - [`token`]: attested execution tokens.
//! - [`convert`]: core types <-> API messages.
//! - [`client`]: the multi-endpoint client the CLI uses.
//! - [`cli`], [`serve`], [`up`]: the command line.
//! - [`planted`]: TEST-ONLY planted bugs for the chaos harness, compiled
//!   in only with the `planted-bugs` feature (off by default).
#![deny(missing_docs)]

pub mod admin;
pub mod cli;
pub mod client;
pub mod convert;
pub mod driver;
pub mod errors;
pub mod executor;
pub mod node;
pub mod planted;
pub mod projection;
pub mod replica;
pub mod serve;
pub mod service;
pub mod token;
pub mod up;
