//! Palisade's chaos harness (DESIGN.md section 8): runs a cluster with real
//! openraft and real storage, injects faults, drives a concurrent workload
//! and checks the history it recorded.
//!
//! # Key decision: real consensus, real sockets, a seeded schedule
//!
//! Nothing of the replica is simulated. The in-process mode runs every
//! replica through [`palisade_gateway::node::run_with_hooks`] — the same
//! function `palisade gateway run` uses — with redb storage in temporary
//! directories and tonic servers on loopback ports, each replica on its own
//! single-threaded tokio runtime so that it can be *crashed* (the runtime is
//! dropped: no shutdown code runs) and *paused* (its only thread is blocked,
//! as SIGSTOP would). The process mode runs real `palisade gateway run`
//! processes and uses SIGKILL, SIGSTOP/SIGCONT and TCP proxies. What the
//! seed fixes is the schedule: which operations the clients issue, which
//! faults the nemesis injects and when. The interleaving of real threads
//! and sockets is not fixed by it, so a seed that failed once fails again
//! often but not always; that is why a failing seed is kept as a regression
//! test and re-run several times (`tests/regressions.rs`).
//!
//! # The deterministic simulation (`--sim`)
//!
//! [`campaign::simulate`] runs the same replicas (same
//! `palisade_gateway::node` code, real openraft, real redb files) with the
//! clients and the nemesis on one thread: one current-thread runtime with
//! paused tokio time (simulated: it jumps to the next timer when every task
//! waits), the in-memory network of `palisade_raft::simnet`, openraft's
//! randomness and the replicas' ids seeded (`palisade_raft::runtime`),
//! blocking work inline, `biased` selects and a patched tokio watch
//! (`vendor/README.md`). There the seed fixes the interleaving too: the
//! same seed records the same history byte for byte
//! (`tests/simulation.rs`). A replica there cannot be crashed or paused
//! ([`cluster::Cluster::is_simulated`]), so the simulation runs the
//! nemeses of [`NemesisKind::SIMULATION`].
//!
//! # Layout
//!
//! - [`clock`]: the one time base of a campaign (history, effects, faults).
//! - [`history`]: operations as invoked and answered, and fault events.
//! - [`model`]: the per-name sandbox model the linearizability search uses.
//! - [`linearizability`]: a Wing-Gong / Porcupine style search.
//! - [`checker`]: every check, and [`checker::Anomaly`].
//! - [`host`]: [`host::SharedHost`], an in-memory compute driver modelling
//!   one host shared by every replica, recording every real effect.
//! - [`links`]: [`links::LinkTable`], the peer-network faults (partitions,
//!   loss, delay, duplication) consulted by the peer transport.
//! - [`points`]: [`points::Triggers`], the fault points inside a request
//!   where the nemesis hands leadership off or crashes the leader.
//! - [`cluster`]: the in-process cluster: start, crash, restart, pause.
//! - [`nemesis`]: the fault schedule.
//! - [`membership`]: the `membership` nemesis (add a learner, promote,
//!   remove, re-add) and the end-of-campaign membership check.
//! - [`storage`]: the `storage` nemesis (faults in one replica's log
//!   store) and its [`storage::DiskFaults`].
//! - [`snapshot_race`]: the handoff that makes a snapshot build finish
//!   after a newer snapshot was installed.
//! - [`workload`]: concurrent gRPC clients recording the history.
//! - [`campaign`]: one seeded run, end to end, and its [`campaign::Report`].
//! - [`projection`]: with `--postgres`, the PostgreSQL projection must
//!   equal the state at the end; the `postgres` nemesis's stops and
//!   restarts of its server.
//! - [`process`] and [`proxy`]: the process-level mode; [`observe`]: the
//!   executions it sees running on the host (process table, containers).
//! - [`report_dir`]: `--report-dir`: the history, the fault timeline and
//!   an HTML page (timeline and latency plot) of a campaign.
//! - [`cli`]: the flags of `palisade chaos run` and the loop over seeds.
#![deny(missing_docs)]

pub mod campaign;
pub mod checker;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod history;
pub mod host;
pub mod linearizability;
pub mod links;
pub mod membership;
pub mod model;
pub mod nemesis;
pub mod observe;
pub mod points;
pub mod process;
pub mod projection;
pub mod proxy;
pub mod report_dir;
pub mod snapshot_race;
pub mod storage;
pub mod watchdog;
pub mod workload;

pub use campaign::{CampaignConfig, Mode, Report, run_campaign};
pub use checker::Anomaly;
pub use nemesis::NemesisKind;

/// Why a campaign could not run (as opposed to anomalies it found, which
/// are in its [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A replica could not be started.
    #[error("cannot start replica {node_id}: {message}")]
    ReplicaStart {
        /// The replica.
        node_id: u64,
        /// What went wrong.
        message: String,
    },
    /// The cluster did not elect a leader in time.
    #[error("no leader was elected within {0:?}; is the machine overloaded?")]
    NoLeader(std::time::Duration),
    /// The first leader did not write the cluster identity in time.
    #[error(
        "the first leader did not write the cluster identity within {0:?}; is the machine overloaded?"
    )]
    NoIdentity(std::time::Duration),
    /// Filesystem or socket trouble in the harness itself.
    #[error("harness I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The `palisade` binary for the process mode is missing or failed.
    #[error("process mode: {0}")]
    Process(String),
    /// An invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A simulated campaign stopped moving ([`watchdog`]); the message
    /// names the seed.
    #[error("{0}")]
    Stalled(String),
}
