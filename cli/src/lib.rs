//! The `palisade` binary's library: the command line and the Rust client.
//!
//! # Key decision: the binary is a thin edge
//!
//! Everything a replica does lives in the server library
//! (`palisade-gateway`); this crate parses flags (clap), turns them into the
//! library's configuration, and reports errors (`anyhow`, here and nowhere
//! below). `palisade chaos run` calls the chaos harness as a library, and
//! `palisade up` starts its replicas through `palisade-testkit`, the one
//! piece of code that runs local clusters.
//!
//! # Layout
//!
//! - [`commands`]: argument parsing and the client commands (`sandbox`,
//!   `ssh-session`, `policy`, `workspace`, `cluster`).
//! - [`client`]: the multi-endpoint client (failover, request ids kept
//!   across its own retries) that the commands and other Rust tools use.
//! - [`prune`]: pruning sandboxes that no longer run (list every page,
//!   delete each bound to its listed id, bounded concurrency); re-exported
//!   by [`client`].
//! - [`backup`]: `cluster snapshot save` and `cluster restore`.
//! - [`config`]: where the CLI finds the cluster CA and its credential.
//! - [`health`]: `palisade health`, the gRPC health probe of the
//!   container image and the Kubernetes manifests.
//! - [`pki`]: `cluster init-pki`, the certificates `up` also creates.
//! - [`serve`]: `palisade gateway run`, one replica.
//! - [`up`]: `palisade up`, a local cluster, supervised (a replica that
//!   dies is restarted).
//! - [`fail_stop`]: every panic in a server command aborts the process.
//!
//! The hidden `palisade shim ...` is dispatched in `main` before anything
//! else starts (see `palisade_driver::process::shim`).
#![deny(missing_docs)]

pub mod backup;
pub mod client;
pub mod commands;
pub mod config;
pub mod fail_stop;
pub mod health;
pub mod leader_routing;
pub mod pki;
pub mod prune;
pub mod serve;
pub mod up;
