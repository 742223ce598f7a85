//! One campaign, end to end: start a cluster, run the workload while the
//! nemesis injects faults, heal, let the cluster settle, read every name
//! once more, collect the evidence, run the checks, and report.
//!
//! The report says what happened (operations ok / fail / unknown by call,
//! faults injected by kind, driver and network faults, fault points
//! reached, effects), what the checks found, and the seed to run it again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::ChaosError;
use crate::checker::{self, Anomaly, CheckStats, Evidence, FinalSandbox, ReplicaState};
use crate::clock::{Clock, seconds};
use crate::cluster::{Cluster, ClusterConfig};
use crate::history::{FaultEvent, History, Phase};
use crate::host::SharedHost;
use crate::links::LinkTable;
use crate::nemesis::{Nemesis, NemesisKind, NemesisOutcome, nemesis_rng};
use crate::points::Triggers;
use crate::workload::{self, Endpoints, WorkloadConfig};

/// How long the first leader election may take.
pub const FIRST_LEADER_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long the cluster may take, after healing, to finish every
/// operation in flight.
pub const SETTLE_WAIT_MAX: Duration = Duration::from_secs(60);
/// How long the replicas may take, after healing, to apply the same index.
pub const CONVERGE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Where the replicas run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// In this process (see [`crate::cluster`]).
    InProcess,
    /// In this process, in the deterministic simulation (`--sim`): every
    /// replica, client and the nemesis on one current-thread runtime with
    /// paused (simulated) time, seeded randomness and the in-memory
    /// network of [`palisade_raft::simnet`], on real redb files. The same
    /// seed records the same history, byte for byte. See [`simulate`].
    Simulated,
    /// As `palisade gateway run` processes (see [`crate::process`]).
    Processes {
        /// The `palisade` binary.
        palisade: PathBuf,
        /// Run the replicas with `--driver docker` on this engine (`None`:
        /// the process driver).
        docker: Option<DockerTarget>,
        /// TEST-ONLY: planted bugs the replicas turn on (a `palisade`
        /// built with the `planted-bugs` feature; see
        /// [`crate::cli::PLANTED_BUGS_ENV`]).
        planted: Vec<String>,
    },
}

/// The Docker Engine a process-mode campaign's replicas drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerTarget {
    /// `--docker-host` of every replica (`None`: DOCKER_HOST, else the
    /// local socket).
    pub host: Option<String>,
    /// `--docker-default-image` of every replica (the workload names no image).
    pub default_image: String,
}

/// What a campaign runs.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// The seed of the schedule (operations and faults).
    pub seed: u64,
    /// Operations the workload issues.
    pub operations: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Size of the pool of sandbox names.
    pub names: usize,
    /// Replicas.
    pub replicas: u64,
    /// Faults to inject.
    pub nemeses: Vec<NemesisKind>,
    /// Where the replicas run.
    pub mode: Mode,
    /// Run the PostgreSQL projection on every replica and check it against
    /// the state at the end (in-process mode; needs PostgreSQL installed).
    pub postgres: bool,
    /// Pace of the workload, operations per second (0: unpaced; see
    /// [`WorkloadConfig::rate`]).
    pub rate: f64,
}

impl CampaignConfig {
    /// The default campaign for `seed`: 400 operations paced at
    /// [`workload::DEFAULT_RATE`] per second, 5 clients on 6 names, 3
    /// replicas, every nemesis (but `postgres`: no PostgreSQL), in process.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            operations: 400,
            clients: 5,
            names: 6,
            replicas: 3,
            nemeses: NemesisKind::all(false),
            mode: Mode::InProcess,
            postgres: false,
            rate: workload::DEFAULT_RATE,
        }
    }
}

/// Counts of operations by outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcomes {
    /// Acknowledged.
    pub ok: usize,
    /// Definitely refused.
    pub fail: usize,
    /// Outcome unknown.
    pub unknown: usize,
}

/// What a campaign did and found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// `in-process` or `processes`.
    pub mode: String,
    /// Replicas.
    pub replicas: u64,
    /// Nemeses enabled.
    pub nemeses: Vec<String>,
    /// Operations by outcome (final reads included).
    pub operations: Outcomes,
    /// Operations by call and outcome.
    pub by_call: BTreeMap<String, Outcomes>,
    /// Replays compared with the original answer.
    pub replays: usize,
    /// Faults the nemesis injected, by kind and variant
    /// (`handoff:before-effect:stall`, `partition:split`, `clock:behind`).
    pub faults: BTreeMap<String, u64>,
    /// Faults injected, by nemesis kind (`handoff`, `kill`, ...).
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Handoffs injected, by the fault point they fired at.
    pub faults_by_point: BTreeMap<String, u64>,
    /// Faults attempted that did not take place (an armed point nobody
    /// reached, a transfer that did not move), by kind and variant.
    pub faults_missed: BTreeMap<String, u64>,
    /// Requested nemeses that never fired: the campaign proved nothing
    /// about them ("vacuous"), and fails.
    pub vacuous: Vec<String>,
    /// Driver faults injected, by call and fault.
    pub driver_faults: BTreeMap<String, u64>,
    /// Peer messages affected, by fault.
    pub messages: BTreeMap<String, u64>,
    /// Fault points reached (armed or not).
    pub points_reached: BTreeMap<String, u64>,
    /// Checking figures.
    pub checks: CheckStats,
    /// Final applied index of the replicas (when they converged).
    pub final_applied_index: Option<u64>,
    /// What the checks found.
    pub anomalies: Vec<Anomaly>,
    /// Every fault event, in order (`palisade chaos run --timeline`).
    pub timeline: Vec<FaultEvent>,
    /// The history: every operation (for `--report-dir`; not in `--json`).
    #[serde(skip)]
    pub history: Vec<crate::history::Operation>,
    /// Wall-clock duration, seconds (simulated seconds in the simulation).
    pub duration_seconds: f64,
}

impl Report {
    /// True when the checks found nothing.
    pub fn is_clean(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// True when a requested nemesis never fired (see [`Report::vacuous`]).
    pub fn is_vacuous(&self) -> bool {
        !self.vacuous.is_empty()
    }

    /// Faults injected in all.
    pub fn faults_total(&self) -> u64 {
        self.faults.values().sum()
    }

    /// The fault timeline, one event a line.
    pub fn timeline_lines(&self) -> Vec<String> {
        self.timeline
            .iter()
            .map(|event| {
                format!(
                    "{:>9} {:<40} {}",
                    seconds(event.at_us),
                    event.kind,
                    event.detail
                )
            })
            .collect()
    }
}

fn join_counts<T: std::fmt::Display>(counts: &BTreeMap<String, T>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "palisade chaos: seed {} ({} replicas, {}, nemeses: {})",
            self.seed,
            self.replicas,
            self.mode,
            if self.nemeses.is_empty() {
                "none".to_string()
            } else {
                self.nemeses.join(",")
            }
        )?;
        writeln!(
            f,
            "  operations: {} ok, {} fail, {} unknown; replays compared: {}",
            self.operations.ok, self.operations.fail, self.operations.unknown, self.replays
        )?;
        for (call, outcomes) in &self.by_call {
            writeln!(
                f,
                "    {call:<7} {} ok, {} fail, {} unknown",
                outcomes.ok, outcomes.fail, outcomes.unknown
            )?;
        }
        writeln!(
            f,
            "  faults injected: {} ({})",
            self.faults_total(),
            join_counts(&self.faults_by_kind)
        )?;
        writeln!(f, "    by variant: {}", join_counts(&self.faults))?;
        writeln!(
            f,
            "    by fault point: {}",
            join_counts(&self.faults_by_point)
        )?;
        writeln!(f, "  faults missed: {}", join_counts(&self.faults_missed))?;
        writeln!(f, "  driver faults: {}", join_counts(&self.driver_faults))?;
        writeln!(f, "  peer messages: {}", join_counts(&self.messages))?;
        writeln!(
            f,
            "  fault points reached: {}",
            join_counts(&self.points_reached)
        )?;
        let effects: BTreeMap<String, usize> = self.checks.effects.clone();
        writeln!(f, "  driver effects: {}", join_counts(&effects))?;
        writeln!(
            f,
            "  linearizability: {} names checked, {} inconclusive{}",
            self.checks.names_checked,
            self.checks.names_inconclusive.len(),
            if self.checks.names_inconclusive.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.checks.names_inconclusive.join(", "))
            }
        )?;
        match self.final_applied_index {
            Some(index) => writeln!(f, "  replicas converged at applied index {index}")?,
            None => writeln!(f, "  replicas did not converge")?,
        }
        if self.checks.projection_checked {
            if self.nemeses.iter().any(|kind| kind == "postgres") {
                writeln!(
                    f,
                    "  {}: compared, after {} PostgreSQL stops and restarts",
                    checker::POSTGRES_FAULTS_CHECK,
                    self.faults_by_kind.get("postgres").copied().unwrap_or(0)
                )?;
            } else {
                writeln!(f, "  PostgreSQL projection compared with the state")?;
            }
        }
        if self.mode == "simulated" {
            writeln!(f, "  duration: {:.1}s (simulated)", self.duration_seconds)?;
        } else {
            writeln!(f, "  duration: {:.1}s", self.duration_seconds)?;
        }
        if self.is_vacuous() {
            writeln!(
                f,
                "  VACUOUS: requested nemesis never fired: {} (the campaign proves nothing about it)",
                self.vacuous.join(", ")
            )?;
        }
        if self.anomalies.is_empty() {
            writeln!(f, "  anomalies: none")?;
        } else {
            writeln!(f, "  anomalies: {}", self.anomalies.len())?;
            for anomaly in &self.anomalies {
                write!(f, "{anomaly}")?;
            }
            writeln!(
                f,
                "  re-run: palisade chaos run --seed {} --ops <N> --nemesis {}",
                self.seed,
                self.nemeses.join(",")
            )?;
        }
        Ok(())
    }
}

/// Runs one campaign.
pub async fn run_campaign(config: &CampaignConfig) -> Result<Report, ChaosError> {
    if config.clients == 0 || config.names == 0 || config.replicas == 0 {
        return Err(ChaosError::Config(
            "clients, names and replicas must be at least 1".into(),
        ));
    }
    match &config.mode {
        Mode::InProcess => {
            if !config.postgres
                && let Some(kind) = config.nemeses.iter().find(|kind| kind.needs_postgres())
            {
                return Err(ChaosError::Config(needs_postgres_message(*kind)));
            }
            run_in_process(config, None).await
        }
        Mode::Simulated => {
            let config = config.clone();
            tokio::task::spawn_blocking(move || simulate(&config))
                .await
                .map_err(|error| ChaosError::Config(format!("the simulation failed: {error}")))?
        }
        Mode::Processes {
            palisade,
            docker,
            planted,
        } => crate::process::run_campaign(config, palisade, docker.as_ref(), planted).await,
    }
}

/// Why a nemesis that needs PostgreSQL cannot run without `--postgres`,
/// and what to do.
pub fn needs_postgres_message(kind: NemesisKind) -> String {
    format!(
        "the nemesis {} stops and restarts the projection's PostgreSQL server, which runs only with --postgres: add --postgres (PostgreSQL must be installed: scripts/ensure-postgres), or drop {} from --nemesis",
        kind.name(),
        kind.name()
    )
}

/// Aborts a task when dropped (the simulation's heartbeat, whichever way
/// the campaign ends).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one campaign in the deterministic simulation ([`Mode::Simulated`])
/// on this thread, which must not be running an async runtime (the
/// simulation builds its own).
///
/// What makes it deterministic: one thread runs everything (a
/// current-thread runtime, the replicas as tasks of a `LocalSet`); time is
/// tokio's paused clock, which jumps to the next timer whenever every task
/// waits, so it is simulated and a campaign takes the time its work takes;
/// the history's timestamps and the replicas' wall clocks read it;
/// openraft's election timeouts come from a generator seeded by the seed
/// ([`palisade_raft::runtime::seed_thread`]); blocking storage work runs
/// inline instead of on other threads; connections are in-memory pipes
/// ([`palisade_raft::simnet`]) at fixed addresses. The workload and the
/// nemesis draw from generators seeded by the seed, as in every mode.
pub fn simulate(config: &CampaignConfig) -> Result<Report, ChaosError> {
    if config.postgres {
        return Err(ChaosError::Config(
            "--sim runs without PostgreSQL (a real server is not simulated); drop --postgres"
                .into(),
        ));
    }
    if let Some(kind) = config
        .nemeses
        .iter()
        .find(|kind| !NemesisKind::SIMULATION.contains(kind))
    {
        return Err(ChaosError::Config(format!(
            "the nemesis {} cannot run in --sim (a simulated replica cannot be crashed or paused); choose from {}",
            kind.name(),
            NemesisKind::SIMULATION.map(NemesisKind::name).join(", ")
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    palisade_raft::runtime::seed_thread(config.seed);
    let net = palisade_raft::simnet::SimNet::new();
    net.install();
    let local = tokio::task::LocalSet::new();
    let watchdog = crate::watchdog::Watchdog::new(config.seed, crate::watchdog::Limits::CAMPAIGN);
    let result = local.block_on(
        &runtime,
        watchdog.guard(run_in_process(config, Some((net, watchdog.clone())))),
    );
    // Every replica task goes with the runtime.
    drop(local);
    drop(runtime);
    palisade_raft::simnet::SimNet::uninstall();
    palisade_raft::runtime::unseed_thread();
    result
}

async fn run_in_process(
    config: &CampaignConfig,
    sim: Option<(
        palisade_raft::simnet::SimNet,
        Arc<crate::watchdog::Watchdog>,
    )>,
) -> Result<Report, ChaosError> {
    let simulated = sim.is_some();
    let started = Instant::now();
    let clock = Clock::new();
    let history = Arc::new(History::new(clock.clone()));
    let (sim, heartbeat) = match sim {
        Some((net, watchdog)) => {
            let recorded = history.clone();
            let heartbeat = tokio::task::spawn_local(watchdog.heartbeat(move || recorded.events()));
            (Some(net), Some(AbortOnDrop(heartbeat)))
        }
        None => (None, None),
    };
    let host = Arc::new(SharedHost::new(clock.clone()));
    let links = Arc::new(LinkTable::new(config.seed ^ 0x6c69_6e6b));
    let (triggers, fired) = Triggers::new();
    let triggers = Arc::new(triggers);
    let postgres = if config.postgres {
        // Shared with the `postgres` nemesis, which stops and restarts it.
        Some(Arc::new(crate::projection::start_postgres().await?))
    } else {
        None
    };
    let cluster_config = ClusterConfig {
        postgres_url: postgres.as_ref().map(|postgres| postgres.url().to_string()),
        // The `membership` nemesis joins a spare slot and retires members.
        spares: u64::from(config.nemeses.contains(&NemesisKind::Membership)),
        // The `storage` nemesis needs the fault-injecting log store.
        disk_faults: config
            .nemeses
            .contains(&NemesisKind::Storage)
            .then(Default::default),
        sim,
        ..ClusterConfig::chaos(config.replicas)
    };
    let cluster = Arc::new(Cluster::start(
        cluster_config,
        host.clone(),
        links.clone(),
        triggers.clone(),
    )?);
    let result = drive(
        config,
        &cluster,
        &history,
        &host,
        &links,
        &triggers,
        fired,
        postgres.clone(),
    )
    .await;
    let projection = match (&result, &postgres) {
        (Ok(_), Some(postgres)) => Some(crate::projection::check(postgres.url(), &cluster).await),
        _ => None,
    };
    for (node, why) in cluster.unexpected_stops() {
        history.fault(
            checker::REPLICA_STOPPED_EVENT,
            format!("node {node} stopped on its own: {why}"),
        );
    }
    cluster.shutdown().await;
    drop(postgres);
    drop(heartbeat);
    let (outcome, final_applied_index, evidence_parts) = result?;
    let (operations, replays, fault_events, _dropped) = history.snapshot();
    let (effects, _) = host.effects();
    let evidence = Evidence {
        operations,
        replays,
        faults: fault_events,
        effects: Some(effects),
        executions: Some(evidence_parts.executions),
        final_sandboxes: Some(evidence_parts.sandboxes),
        replicas: evidence_parts.replicas,
        projection,
        membership: evidence_parts.membership,
        observed: None,
    };
    let (anomalies, checks) = checker::check(&evidence);
    Ok(report(
        config,
        if simulated { "simulated" } else { "in-process" },
        &evidence,
        anomalies,
        checks,
        Counters {
            faults: outcome.injected,
            missed: outcome.missed,
            driver_faults: host.faults(),
            messages: links
                .counts()
                .into_iter()
                .map(|(kind, count)| (kind.to_string(), count))
                .collect(),
            points_reached: triggers
                .reached()
                .into_iter()
                .map(|(kind, count)| (kind.to_string(), count))
                .collect(),
        },
        final_applied_index,
        started.elapsed(),
    ))
}

/// The end state, gathered after healing.
pub(crate) struct EndState {
    pub(crate) executions: BTreeMap<(String, u64), crate::host::HostExecution>,
    pub(crate) sandboxes: BTreeMap<String, FinalSandbox>,
    pub(crate) replicas: Result<Vec<ReplicaState>, String>,
    /// The end-of-campaign membership check, when membership changed.
    pub(crate) membership: Option<Result<(), String>>,
}

/// Fault counters for a report.
pub(crate) struct Counters {
    pub(crate) faults: BTreeMap<String, u64>,
    pub(crate) missed: BTreeMap<String, u64>,
    pub(crate) driver_faults: BTreeMap<String, u64>,
    pub(crate) messages: BTreeMap<String, u64>,
    pub(crate) points_reached: BTreeMap<String, u64>,
}

type Driven = (NemesisOutcome, Option<u64>, EndState);

#[allow(clippy::too_many_arguments)]
async fn drive(
    config: &CampaignConfig,
    cluster: &Arc<Cluster>,
    history: &Arc<History>,
    host: &Arc<SharedHost>,
    links: &Arc<LinkTable>,
    triggers: &Arc<Triggers>,
    fired: tokio::sync::mpsc::Receiver<crate::points::Fired>,
    postgres: Option<Arc<palisade_testkit::TestPostgres>>,
) -> Result<Driven, ChaosError> {
    let leader = cluster.wait_for_leader(FIRST_LEADER_WAIT_MAX).await?;
    // Execution tokens need the cluster identity the first leader writes.
    wait_for_identity(cluster, leader).await?;

    let endpoints = Endpoints::new(&cluster.endpoints())
        .map_err(|error| ChaosError::Config(format!("bad endpoint: {error}")))?;
    let first_round_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workload_config = WorkloadConfig {
        rate: config.rate,
        keep_going_until: Some(first_round_done.clone()),
        ..WorkloadConfig::new(config.operations, config.clients, config.names, config.seed)
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let nemesis = Nemesis {
        first_round_done,
        cluster: cluster.clone(),
        links: links.clone(),
        triggers: triggers.clone(),
        fired,
        host: host.clone(),
        history: history.clone(),
        kinds: config.nemeses.clone(),
        rng: nemesis_rng(config.seed),
        deletes: 0,
        counts: BTreeMap::new(),
        missed: BTreeMap::new(),
        handoffs: 0,
        endpoints: endpoints.clone(),
        request_prefix: workload_config.request_prefix.clone(),
        postgres,
    };
    let nemesis = tokio::spawn(nemesis.run(stop_rx));
    workload::run(
        workload_config.clone(),
        endpoints.clone(),
        history.clone(),
        config.seed,
    )
    .await;
    let _ = stop_tx.send(true);
    let faults = nemesis
        .await
        .map_err(|error| ChaosError::Config(format!("the nemesis task failed: {error}")))?;

    // Settle: a leader, and no operation left in flight.
    settle(cluster).await;
    workload::final_reads(&workload_config, &endpoints, history, config.seed).await;
    let (replicas, final_applied_index) = converge(cluster).await;
    let membership = config
        .nemeses
        .contains(&NemesisKind::Membership)
        .then(|| crate::membership::check(cluster, config.replicas as usize));
    let leader = cluster
        .leader()
        .or_else(|| cluster.node_ids().first().copied());
    let sandboxes = leader
        .and_then(|leader| cluster.node(leader))
        .map(|node| final_sandboxes(&node.replica.state))
        .unwrap_or_default();
    Ok((
        faults,
        final_applied_index,
        EndState {
            executions: host.executions(),
            sandboxes,
            replicas,
            membership,
        },
    ))
}

async fn wait_for_identity(cluster: &Cluster, leader: u64) -> Result<(), ChaosError> {
    let deadline = Instant::now() + FIRST_LEADER_WAIT_MAX;
    loop {
        let ready = cluster.node(leader).is_some_and(|node| {
            node.replica
                .state
                .read(|applied| applied.state.cluster.is_some())
        });
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ChaosError::NoIdentity(FIRST_LEADER_WAIT_MAX));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until a leader holds no operation in flight.
async fn settle(cluster: &Cluster) {
    let deadline = Instant::now() + SETTLE_WAIT_MAX;
    while Instant::now() < deadline {
        let idle = cluster
            .leader()
            .and_then(|leader| cluster.node(leader))
            .is_some_and(|node| {
                node.replica.state.read(|applied| {
                    applied
                        .state
                        .sandboxes
                        .values()
                        .all(|sandbox| sandbox.operation.is_none())
                })
            });
        if idle {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (bounded) until every replica applied the leader's commit index,
/// and returns their states (or what they reported, if they did not get
/// there) and the index.
async fn converge(cluster: &Cluster) -> (Result<Vec<ReplicaState>, String>, Option<u64>) {
    let deadline = Instant::now() + CONVERGE_WAIT_MAX;
    loop {
        let views = cluster.views().await;
        let commit = cluster
            .leader()
            .and_then(|leader| cluster.raft(leader))
            .and_then(|raft| {
                raft.metrics()
                    .borrow_watched()
                    .local_committed
                    .map(|id| id.index)
            });
        let states: Vec<ReplicaState> = views
            .iter()
            .map(|view| ReplicaState {
                node_id: view.node_id,
                applied_index: view.info.applied_index,
                digest: view.info.state_digest.clone(),
            })
            .collect();
        let all_here = views.len() as u64 == cluster.node_ids().len() as u64;
        let equal = states
            .windows(2)
            .all(|pair| pair[0].applied_index == pair[1].applied_index);
        let at_commit = commit.is_some_and(|commit| {
            states
                .first()
                .is_some_and(|state| state.applied_index >= commit)
        });
        if all_here && equal && at_commit {
            let index = states.first().map(|state| state.applied_index);
            return (Ok(states), index);
        }
        if Instant::now() >= deadline {
            let report = states
                .iter()
                .map(|state| format!("node {} at {}", state.node_id, state.applied_index))
                .collect::<Vec<_>>()
                .join(", ");
            return (
                Err(format!(
                    "replicas did not reach the same applied index within {CONVERGE_WAIT_MAX:?} after healing (leader commit {commit:?}): {report}"
                )),
                None,
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn final_sandboxes(state: &palisade_raft::StateHandle) -> BTreeMap<String, FinalSandbox> {
    state.read(|applied| {
        applied
            .state
            .sandboxes
            .values()
            .map(|sandbox| {
                let phase = match sandbox.phase {
                    palisade_lifecycle::SandboxPhase::Provisioning => Phase::Provisioning,
                    palisade_lifecycle::SandboxPhase::Ready => Phase::Ready,
                    palisade_lifecycle::SandboxPhase::Stopping => Phase::Stopping,
                    palisade_lifecycle::SandboxPhase::Stopped => Phase::Stopped,
                    palisade_lifecycle::SandboxPhase::Starting => Phase::Starting,
                    palisade_lifecycle::SandboxPhase::Deleting => Phase::Deleting,
                    palisade_lifecycle::SandboxPhase::Error => Phase::Error,
                    palisade_lifecycle::SandboxPhase::Completed => Phase::Completed,
                    palisade_lifecycle::SandboxPhase::Unknown => Phase::Unknown,
                };
                (
                    sandbox.id.clone(),
                    FinalSandbox {
                        name: sandbox.name.clone(),
                        generation: sandbox.execution.generation,
                        phase,
                        operation_in_flight: sandbox.operation.is_some(),
                    },
                )
            })
            .collect()
    })
}

/// Builds the report from the evidence and the checks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    config: &CampaignConfig,
    mode: &str,
    evidence: &Evidence,
    anomalies: Vec<Anomaly>,
    checks: CheckStats,
    counters: Counters,
    final_applied_index: Option<u64>,
    duration: Duration,
) -> Report {
    let mut operations = Outcomes::default();
    let mut by_call: BTreeMap<String, Outcomes> = BTreeMap::new();
    for operation in &evidence.operations {
        let entry = by_call
            .entry(operation.call.kind().to_string())
            .or_default();
        for outcomes in [&mut operations, entry] {
            match operation.reply.class() {
                "ok" => outcomes.ok += 1,
                "fail" => outcomes.fail += 1,
                _ => outcomes.unknown += 1,
            }
        }
    }
    let mut faults_by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let mut faults_by_point: BTreeMap<String, u64> = BTreeMap::new();
    for (variant, count) in &counters.faults {
        let mut parts = variant.split(':');
        let kind = parts.next().unwrap_or(variant).to_string();
        if kind == "handoff"
            && let Some(point) = parts.next()
        {
            *faults_by_point.entry(point.to_string()).or_default() += count;
        }
        *faults_by_kind.entry(kind).or_default() += count;
    }
    let vacuous = config
        .nemeses
        .iter()
        .map(|kind| kind.name().to_string())
        .filter(|kind| faults_by_kind.get(kind).copied().unwrap_or(0) == 0)
        .collect();
    Report {
        seed: config.seed,
        mode: mode.to_string(),
        replicas: config.replicas,
        nemeses: config
            .nemeses
            .iter()
            .map(|kind| kind.name().to_string())
            .collect(),
        operations,
        by_call,
        replays: checks.replays_compared,
        faults: counters.faults,
        faults_by_kind,
        faults_by_point,
        faults_missed: counters.missed,
        vacuous,
        driver_faults: counters.driver_faults,
        messages: counters.messages,
        points_reached: counters.points_reached,
        checks,
        final_applied_index,
        anomalies,
        timeline: evidence.faults.clone(),
        history: evidence.operations.clone(),
        duration_seconds: duration.as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report_with(faults: &[(&str, u64)], missed: &[(&str, u64)]) -> Report {
        let config = CampaignConfig {
            nemeses: vec![NemesisKind::Postgres],
            postgres: true,
            ..CampaignConfig::new(1)
        };
        let counts = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(kind, count)| (kind.to_string(), *count))
                .collect()
        };
        let checks = CheckStats {
            projection_checked: true,
            ..CheckStats::default()
        };
        report(
            &config,
            "in-process",
            &Evidence::default(),
            Vec::new(),
            checks,
            Counters {
                faults: counts(faults),
                missed: counts(missed),
                driver_faults: BTreeMap::new(),
                messages: BTreeMap::new(),
                points_reached: BTreeMap::new(),
            },
            Some(1),
            Duration::from_secs(1),
        )
    }

    /// A campaign with the `postgres` nemesis that stopped PostgreSQL not
    /// once proves nothing about the projection under PostgreSQL faults.
    #[test]
    fn a_postgres_nemesis_that_never_stopped_postgres_is_vacuous() {
        let report = report_with(&[], &[("postgres:stop-fast", 2)]);
        assert_eq!(report.vacuous, vec!["postgres".to_string()]);
        let text = report.to_string();
        assert!(
            text.contains("VACUOUS: requested nemesis never fired: postgres"),
            "{text}"
        );
    }

    #[test]
    fn the_report_names_the_projection_check_after_postgres_faults() {
        let report = report_with(
            &[("postgres:stop-fast", 2), ("postgres:stop-immediate", 1)],
            &[],
        );
        assert!(!report.is_vacuous());
        assert_eq!(report.faults_by_kind.get("postgres"), Some(&3));
        let text = report.to_string();
        assert!(
            text.contains(
                "projection equals state after PostgreSQL faults: compared, after 3 PostgreSQL stops and restarts"
            ),
            "{text}"
        );
    }
}
