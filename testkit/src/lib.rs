//! One way to run a local Palisade cluster of real `palisade gateway run`
//! processes on loopback — for `palisade up`, the end-to-end tests, the
//! chaos harness's process mode and the benchmarks alike.
//!
//! # Key decision: real processes, and only the ones we started
//!
//! Every replica is a child process of the caller, running the `palisade`
//! binary the caller names (tests pass `env!("CARGO_BIN_EXE_palisade")`,
//! `palisade up` its own executable). Faults are the real thing: SIGKILL,
//! SIGSTOP/SIGCONT, SIGTERM. Cleanup touches only what this crate started:
//! a dropped [`LocalCluster`] resumes and kills its own children (by the
//! pid it spawned, never by name) and, when asked to, the sandbox
//! executions under its own driver directory — never anything else on the
//! machine.
//!
//! # Layout
//!
//! - [`replica`]: [`ReplicaProcess`], one `palisade gateway run` child:
//!   start, kill, pause, resume, terminate, restart, its log file.
//! - [`cluster`]: [`ClusterSpec`] and [`LocalCluster`]: N founding replicas
//!   (etcd-style `--initial-cluster`), joining replicas, waiting for a
//!   leader, stopping everything.
//! - [`probe`]: gRPC probes of one replica (its own cluster view, a client
//!   pinned to it) and accessors of API messages.
//! - [`processes`]: the process table: signals, liveness, the shims and
//!   commands of the process driver's executions.
//! - [`ports`]: free loopback ports, outside the ephemeral range.
//! - [`test_postgres`]: [`TestPostgres`], a throwaway PostgreSQL server
//!   (`initdb` + `pg_ctl`), stopped and restarted by fault tests.
//! - [`logs`]: keeping replica logs of a failed test.
//! - [`gate`]: a file-driven one-shot gate at the executor's before-effect
//!   fault point and an injected panic in apply, for tests of real
//!   processes (a `test-hooks` build only).
//! - [`control_points`]: every fault point of a real process, armed and
//!   answered by the chaos harness over a control directory (a
//!   `test-hooks` build only).
#![deny(missing_docs)]

pub mod cluster;
pub mod control_points;
pub mod gate;
pub mod logs;
pub mod ports;
pub mod probe;
pub mod processes;
pub mod replica;
pub mod test_postgres;

pub use cluster::{ClusterSpec, LocalCluster, Ports};
pub use replica::{ReplicaProcess, TlsFiles};
pub use test_postgres::TestPostgres;

use std::path::PathBuf;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A file or directory of the cluster could not be made or opened.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The `palisade` binary could not be started.
    #[error("cannot start replica {node_id} ({program} gateway run): {source}")]
    Spawn {
        /// The replica.
        node_id: u64,
        /// The binary.
        program: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `palisade cluster init-pki` could not make the cluster's certificates.
    #[error("palisade cluster init-pki failed: {0}")]
    Pki(String),
    /// No free loopback port could be found, or the requested ports do not fit.
    #[error("ports: {0}")]
    Ports(String),
    /// The replicas did not agree on a leader in time.
    #[error("no leader among replicas {among:?} within {waited:?} (their views: {views})")]
    NoLeader {
        /// The replicas asked.
        among: Vec<u64>,
        /// How long we waited.
        waited: std::time::Duration,
        /// What each replica said last.
        views: String,
    },
    /// A replica did not apply what the leader had committed in time.
    #[error("replica {node_id} applied {applied}, not {target}, within {waited:?}")]
    Lagging {
        /// The replica.
        node_id: u64,
        /// Its applied index.
        applied: u64,
        /// The leader's commit index it should reach.
        target: u64,
        /// How long we waited.
        waited: std::time::Duration,
    },
    /// The named replica is not part of the cluster.
    #[error("no replica {0} in this cluster")]
    NoSuchReplica(u64),
}
