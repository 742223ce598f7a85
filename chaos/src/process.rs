//! The process-level mode: the same workload and checks against real
//! `palisade gateway run` processes on loopback, with the process driver
//! (real shim processes per execution, one shared driver directory).
//!
//! Faults are the real thing:
//!
//! - `kill`: SIGKILL of a gateway process, restarted from its directory
//!   with the same flags after a while (its sandboxes keep running, as the
//!   design wants);
//! - `pause`: SIGSTOP, then SIGCONT;
//! - `partition`: the TCP proxies of [`crate::proxy`] cut links (each
//!   replica advertises its proxy's address, so all peer traffic crosses
//!   them);
//! - `handoff`: at the fault points inside a request (a stall between the
//!   leadership check and the driver call, a ping-pong around a committed
//!   operation, transfers and kills at the other points; see
//!   [`handoffs`]), armed over a control directory when the `palisade`
//!   binary is a `test-hooks` build; otherwise (the report says so under
//!   "faults missed") a leadership transfer at a random moment;
//! - `driver`: every replica runs `--driver fault` with a plan of latency
//!   and uncertain outcomes (before and after the effect) for launch, stop
//!   and remove, for the whole run (refusals of a repeated launch would
//!   break the driver contract, see [`crate::host`], and hangs would hold
//!   operations for the gateway's 60 s driver timeout).
//!
//! The checks are those of the in-process mode except the ones that need
//! the driver's effect log with its fences; instead the executions are
//! counted from the host itself while the campaign runs ([`crate::observe`]:
//! the process table, or the engine's containers by their labels), which
//! checks that no execution runs after its sandbox's delete was
//! acknowledged and that every one was asked for. Orphan executions are
//! checked against the driver's own listing (of its directory, or of the
//! engine's containers).
//!
//! With `--driver docker` the replicas run the Docker driver on the engine
//! given (`--nemesis driver` then wraps it in the fault driver), and the
//! harness force-removes the containers of the run at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_driver::docker::{DockerConfig, DockerDriver, DockerTimeouts};
use palisade_driver::process::ProcessDriver;
use palisade_driver::{ComputeDriver, ExecutionStatus};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_raft::NodeId;
use palisade_testkit::{ClusterSpec, LocalCluster};
use rand::Rng;
use rand::seq::IndexedRandom;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

mod handoffs;

use palisade_testkit::control_points::{POINTS_DIR_ENV, PointsControl};

use crate::ChaosError;
use crate::campaign::{
    CONVERGE_WAIT_MAX, CampaignConfig, Counters, DockerTarget, FIRST_LEADER_WAIT_MAX, Report,
    SETTLE_WAIT_MAX, report,
};
use crate::checker::{self, Evidence, FinalSandbox, ReplicaState};
use crate::clock::Clock;
use crate::history::{History, Phase};
use crate::host::HostExecution;
use crate::nemesis::{NemesisKind, nemesis_rng};
use crate::proxy::Proxies;
use crate::workload::{self, Endpoints, WorkloadConfig};

/// Deadline of one admin call.
pub const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Most pages read when listing every sandbox at the end.
pub const LIST_PAGES_MAX: usize = 1_000;
/// The driver fault plan of `--nemesis driver` in this mode.
pub const DRIVER_FAULT_PLAN: &str = r#"{"seed": SEED,
 "launch": {"latency_ms": 30, "uncertain_before_rate": 0.05, "uncertain_after_rate": 0.1},
 "stop": {"latency_ms": 30, "uncertain_before_rate": 0.05, "uncertain_after_rate": 0.1},
 "remove": {"latency_ms": 30, "uncertain_before_rate": 0.05, "uncertain_after_rate": 0.1}}"#;

/// A cluster of `palisade gateway run` processes (started through
/// `palisade-testkit`), each advertising its proxy's address to its peers.
struct Processes {
    /// `std` mutex: held to spawn, signal or reap, never across an await.
    cluster: Mutex<LocalCluster>,
    driver_dir: PathBuf,
    proxies: Proxies,
    /// The control channel of the replicas' fault points.
    points: PointsControl,
}

fn free_listener() -> Result<std::net::TcpListener, ChaosError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?)
}

impl Processes {
    fn start(
        replicas: u64,
        palisade: &Path,
        fault_plan: Option<String>,
        docker: Option<&DockerTarget>,
        planted: &[String],
    ) -> Result<Self, ChaosError> {
        let mut driver: Vec<String> = match (&fault_plan, docker) {
            (Some(plan), None) => vec![
                "--driver".into(),
                "fault".into(),
                "--fault-plan".into(),
                plan.clone(),
            ],
            (Some(plan), Some(_)) => vec![
                "--driver".into(),
                "fault".into(),
                "--fault-over".into(),
                "docker".into(),
                "--fault-plan".into(),
                plan.clone(),
            ],
            (None, None) => vec!["--driver".into(), "process".into()],
            (None, Some(_)) => vec!["--driver".into(), "docker".into()],
        };
        if let Some(docker) = docker {
            driver.extend([
                "--docker-default-image".into(),
                docker.default_image.clone(),
            ]);
            if let Some(host) = &docker.host {
                driver.extend(["--docker-host".into(), host.clone()]);
            }
        }
        let mut spec = ClusterSpec::new(palisade, replicas)
            .log_filter("warn")
            .gateway_args([
                "--stop-grace-seconds",
                "1",
                "--heartbeat-ms",
                "50",
                "--election-timeout-min-ms",
                "300",
                "--election-timeout-max-ms",
                "600",
                "--drain-seconds",
                "1",
            ])
            .gateway_args(driver);
        spec.env_remove.push("PALISADE_POSTGRES_URL".to_string());
        let mut cluster = LocalCluster::prepare(spec).map_err(testkit_error)?;
        let mut routes = Vec::new();
        for replica in &mut cluster.replicas {
            let listen: SocketAddr = replica
                .listen
                .parse()
                .map_err(|error| ChaosError::Process(format!("{}: {error}", replica.listen)))?;
            let proxy = free_listener()?;
            proxy.set_nonblocking(true)?;
            replica.advertise = Some(proxy.local_addr()?.to_string());
            routes.push((
                replica.node_id,
                tokio::net::TcpListener::from_std(proxy)?,
                listen,
            ));
        }
        cluster.advertise_initial_cluster();
        // Beside the driver directory, in the cluster's own directory.
        let points_dir = cluster
            .driver_dir
            .parent()
            .unwrap_or(&cluster.driver_dir)
            .join("fault-points");
        let points = PointsControl::new(points_dir)?;
        for replica in &mut cluster.replicas {
            replica.env.push((
                POINTS_DIR_ENV.to_string(),
                points.dir().display().to_string(),
            ));
            if !planted.is_empty() {
                replica
                    .env
                    .push((crate::cli::PLANTED_BUGS_ENV.to_string(), planted.join(",")));
            }
        }
        let processes = Self {
            driver_dir: cluster.driver_dir.clone(),
            cluster: Mutex::new(cluster),
            proxies: Proxies::start(routes),
            points,
        };
        for node_id in 1..=replicas {
            processes.spawn(node_id)?;
        }
        Ok(processes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LocalCluster> {
        self.cluster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn driver_dir(&self) -> PathBuf {
        self.driver_dir.clone()
    }

    fn spawn(&self, node_id: NodeId) -> Result<(), ChaosError> {
        let mut cluster = self.lock();
        let Some(replica) = cluster
            .replicas
            .iter_mut()
            .find(|replica| replica.node_id == node_id)
        else {
            return Ok(());
        };
        if replica.is_running() {
            return Ok(());
        }
        replica.start().map_err(testkit_error)?;
        self.proxies.set_pid(replica.pid(), node_id);
        Ok(())
    }

    fn kill(&self, node_id: NodeId) {
        let mut cluster = self.lock();
        if let Some(replica) = cluster
            .replicas
            .iter_mut()
            .find(|replica| replica.node_id == node_id)
        {
            replica.kill();
        }
    }

    fn pause(&self, node_id: NodeId, paused: bool) {
        let cluster = self.lock();
        if let Some(replica) = cluster.get(node_id) {
            if paused {
                replica.pause();
            } else {
                replica.resume();
            }
        }
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.lock().node_ids()
    }

    fn endpoints(&self) -> Vec<(NodeId, String)> {
        self.lock()
            .replicas
            .iter()
            .map(|replica| (replica.node_id, replica.uri()))
            .collect()
    }

    fn heal(&self) -> Result<(), ChaosError> {
        self.proxies.heal();
        for node_id in self.node_ids() {
            self.pause(node_id, false);
            self.spawn(node_id)?;
        }
        Ok(())
    }

    fn kill_all(&self) {
        for node_id in self.node_ids() {
            self.kill(node_id);
        }
    }
}

fn testkit_error(error: palisade_testkit::TestkitError) -> ChaosError {
    ChaosError::Process(error.to_string())
}

fn admin(uri: &str) -> Option<ClusterAdminClient<Channel>> {
    let channel = Endpoint::from_shared(uri.to_string())
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .timeout(ADMIN_CALL_TIMEOUT)
        .connect_lazy();
    Some(ClusterAdminClient::new(channel))
}

/// Every replica's own view, but `frozen`'s (a stopped process would only
/// time out).
async fn infos(processes: &Processes, frozen: Option<NodeId>) -> Vec<(NodeId, v1::ClusterInfo)> {
    let mut infos = Vec::new();
    for (node_id, uri) in processes.endpoints() {
        if Some(node_id) == frozen {
            continue;
        }
        let Some(mut client) = admin(&uri) else {
            continue;
        };
        let call = client.get_cluster_info(v1::GetClusterInfoRequest {});
        if let Ok(Ok(info)) = tokio::time::timeout(ADMIN_CALL_TIMEOUT, call).await {
            infos.push((node_id, info.into_inner()));
        }
    }
    infos
}

async fn leader(processes: &Processes) -> Option<NodeId> {
    leader_excluding(processes, None).await
}

/// The leader by the replicas' own views, `frozen` not asked (a stopped
/// process would only time out).
async fn leader_excluding(processes: &Processes, frozen: Option<NodeId>) -> Option<NodeId> {
    infos(processes, frozen)
        .await
        .into_iter()
        .filter(|(node_id, info)| info.leader_id == Some(*node_id))
        .max_by_key(|(_, info)| info.term)
        .map(|(node_id, _)| node_id)
}

async fn wait_for_leader(processes: &Processes, timeout: Duration) -> Result<NodeId, ChaosError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(leader) = leader(processes).await {
            return Ok(leader);
        }
        if Instant::now() >= deadline {
            return Err(ChaosError::NoLeader(timeout));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the nemesis did, and what it tried that did not take place, by
/// variant.
type NemesisCounts = (BTreeMap<String, u64>, BTreeMap<String, u64>);

/// The process-mode nemesis: one fault at a time, until stopped. Handoffs
/// are made at fault points by `point_handoffs` when the replicas have
/// them (a `test-hooks` build), else by plain transfers.
async fn nemesis(
    processes: Arc<Processes>,
    kinds: Vec<NemesisKind>,
    history: Arc<History>,
    seed: u64,
    mut point_handoffs: Option<handoffs::PointHandoffs>,
    mut stop: watch::Receiver<bool>,
) -> NemesisCounts {
    let mut rng = nemesis_rng(seed);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut missed: BTreeMap<String, u64> = BTreeMap::new();
    // Driver faults are a fixed plan given at start; the others rotate.
    let kinds: Vec<NemesisKind> = kinds
        .into_iter()
        .filter(|kind| *kind != NemesisKind::Driver)
        .collect();
    let count = |kind: &str, detail: String, counts: &mut BTreeMap<String, u64>| {
        history.injected(kind.to_string(), detail);
        *counts.entry(kind.to_string()).or_default() += 1;
    };
    // Rounds, as in process: every kind once per round, shuffled.
    let mut round: Vec<NemesisKind> = Vec::new();
    while !kinds.is_empty() {
        let quiet = Duration::from_millis(rng.random_range(100..600));
        tokio::select! {
            _ = tokio::time::sleep(quiet) => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
        if *stop.borrow() {
            break;
        }
        let nodes = processes.node_ids();
        let current = leader(&processes).await;
        let victim = match current {
            Some(leader) if rng.random_bool(0.6) => leader,
            _ => *nodes.choose(&mut rng).unwrap_or(&1),
        };
        let held = Duration::from_millis(rng.random_range(400..2_000));
        if round.is_empty() {
            round = kinds.clone();
            rand::seq::SliceRandom::shuffle(round.as_mut_slice(), &mut rng);
        }
        match round.pop() {
            Some(NemesisKind::Kill) => {
                processes.kill(victim);
                count("kill", format!("SIGKILL node {victim}"), &mut counts);
                tokio::time::sleep(held).await;
                if let Err(error) = processes.spawn(victim) {
                    history.fault("restart-failed", error.to_string());
                }
            }
            Some(NemesisKind::Pause) => {
                processes.pause(victim, true);
                count("pause", format!("SIGSTOP node {victim}"), &mut counts);
                tokio::time::sleep(held).await;
                processes.pause(victim, false);
            }
            Some(NemesisKind::Partition) => {
                let rest: BTreeSet<NodeId> = nodes
                    .iter()
                    .copied()
                    .filter(|node| *node != victim)
                    .collect();
                processes
                    .proxies
                    .partition(&[BTreeSet::from([victim]), rest]);
                count(
                    "partition:isolate",
                    format!("isolate node {victim}"),
                    &mut counts,
                );
                tokio::time::sleep(held).await;
                processes.proxies.heal();
            }
            Some(NemesisKind::Handoff) if point_handoffs.is_some() => {
                if let Some(point_handoffs) = &mut point_handoffs {
                    point_handoffs
                        .run(&processes, &mut rng, &mut counts, &mut missed, &mut stop)
                        .await;
                }
            }
            Some(NemesisKind::Handoff) => {
                let Some(from) = current else { continue };
                let Some(to) = nodes
                    .iter()
                    .copied()
                    .filter(|node| *node != from)
                    .collect::<Vec<_>>()
                    .choose(&mut rng)
                    .copied()
                else {
                    continue;
                };
                let uri = processes
                    .endpoints()
                    .into_iter()
                    .find(|(node, _)| *node == from)
                    .map(|(_, uri)| uri);
                if let Some(mut client) = uri.as_deref().and_then(admin) {
                    let call = client.transfer_leader(v1::TransferLeaderRequest { node_id: to });
                    let _ = tokio::time::timeout(ADMIN_CALL_TIMEOUT * 2, call).await;
                }
                count(
                    "handoff:transfer",
                    format!("transfer from {from} to {to}"),
                    &mut counts,
                );
            }
            Some(
                NemesisKind::Driver
                | NemesisKind::Clock
                | NemesisKind::Forge
                | NemesisKind::Membership
                | NemesisKind::Storage
                | NemesisKind::Postgres,
            )
            | None => {}
        }
    }
    (counts, missed)
}

/// Lists every sandbox of the default workspace, linearizably.
async fn list_all(endpoints: &[(NodeId, String)]) -> Option<BTreeMap<String, FinalSandbox>> {
    for (_, uri) in endpoints {
        let Ok(endpoint) = Endpoint::from_shared(uri.clone()) else {
            continue;
        };
        let mut client = PalisadeClient::new(
            endpoint
                .connect_timeout(Duration::from_secs(1))
                .timeout(Duration::from_secs(5))
                .connect_lazy(),
        );
        let mut sandboxes = BTreeMap::new();
        let mut page_token = String::new();
        let mut complete = false;
        for _ in 0..LIST_PAGES_MAX {
            let request = v1::ListSandboxesRequest {
                workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
                page_size: 100,
                page_token: page_token.clone(),
                consistency: v1::Consistency::Linearizable as i32,
                ..Default::default()
            };
            let Ok(page) = client.list_sandboxes(request).await else {
                break;
            };
            let page = page.into_inner();
            for sandbox in page.sandboxes {
                let metadata = sandbox.metadata.unwrap_or_default();
                let status = sandbox.status.unwrap_or_default();
                sandboxes.insert(
                    metadata.id,
                    FinalSandbox {
                        name: metadata.name,
                        generation: status.execution.map_or(0, |e| e.generation),
                        phase: Phase::from_proto(status.phase),
                        operation_in_flight: status.operation.is_some(),
                    },
                );
            }
            if page.next_page_token.is_empty() {
                complete = true;
                break;
            }
            page_token = page.next_page_token;
        }
        if complete {
            return Some(sandboxes);
        }
    }
    None
}

/// Runs one process-mode campaign.
pub async fn run_campaign(
    config: &CampaignConfig,
    palisade: &Path,
    docker: Option<&DockerTarget>,
    planted: &[String],
) -> Result<Report, ChaosError> {
    if !palisade.exists() {
        return Err(ChaosError::Process(format!(
            "{} does not exist; build it with cargo build -p palisade-cli",
            palisade.display()
        )));
    }
    if let Some(kind) = config
        .nemeses
        .iter()
        .find(|kind| !NemesisKind::PROCESS_MODE.contains(kind))
    {
        return Err(ChaosError::Config(format!(
            "the nemesis {} runs in process only (--mode in-process)",
            kind.name()
        )));
    }
    let started = Instant::now();
    let clock = Clock::new();
    let history = Arc::new(History::new(clock));
    let fault_plan = config
        .nemeses
        .contains(&NemesisKind::Driver)
        .then(|| DRIVER_FAULT_PLAN.replace("SEED", &config.seed.to_string()));
    let processes = Arc::new(Processes::start(
        config.replicas,
        palisade,
        fault_plan,
        docker,
        planted,
    )?);
    let result = drive(config, &processes, &history, docker).await;
    // Clean up whatever happened: gateways, then every execution they left
    // (listed first: what still runs is evidence; then killed by pid, the
    // harness has no place in the cluster's fences).
    processes.kill_all();
    let executions = match docker {
        None => {
            let executions =
                match ProcessDriver::new(processes.driver_dir(), palisade.to_path_buf()) {
                    Ok(driver) => tokio::time::timeout(Duration::from_secs(10), driver.list())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or_default(),
                    Err(_) => Vec::new(),
                };
            palisade_testkit::processes::kill_executions(&processes.driver_dir());
            executions
        }
        Some(docker) => {
            // The same fence directory, so the same identity: the containers the
            // replicas made, listed, then force-removed.
            match docker_driver(&processes, docker) {
                Ok(driver) => {
                    let executions = tokio::time::timeout(Duration::from_secs(30), driver.list())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or_default();
                    let _ = tokio::time::timeout(Duration::from_secs(60), driver.purge()).await;
                    executions
                }
                Err(_) => Vec::new(),
            }
        }
    };
    let points_reached = processes.points.reached();
    let Driven {
        mut faults,
        missed,
        final_applied_index,
        sandboxes,
        replicas,
        observations,
    } = result?;
    if config.nemeses.contains(&NemesisKind::Driver) {
        // The whole run had the driver fault plan (see the module docs).
        faults.insert("driver:uncertain-plan".into(), 1);
    }
    let (operations, replays, fault_events, _) = history.snapshot();
    let executions: BTreeMap<(String, u64), HostExecution> = executions
        .into_iter()
        .filter_map(|(id, generation, status)| match status {
            ExecutionStatus::Running { .. } => Some(((id, generation), HostExecution::Running)),
            ExecutionStatus::Exited { .. } => Some(((id, generation), HostExecution::Stopped)),
            ExecutionStatus::Absent => None,
        })
        .collect();
    let evidence = Evidence {
        operations,
        replays,
        faults: fault_events,
        effects: None,
        executions: sandboxes.as_ref().map(|_| executions),
        final_sandboxes: sandboxes,
        replicas,
        projection: None,
        membership: None,
        observed: Some(observations.executions),
    };
    let (anomalies, checks) = checker::check(&evidence);
    let (refused, unattributed) = processes.proxies.counts();
    Ok(report(
        config,
        "processes",
        &evidence,
        anomalies,
        checks,
        Counters {
            faults,
            missed,
            driver_faults: BTreeMap::new(),
            messages: BTreeMap::from([
                ("connections-refused".to_string(), refused),
                ("connections-unattributed".to_string(), unattributed),
                ("host-samples".to_string(), observations.samples),
                (
                    "host-samples-failed".to_string(),
                    observations.failed_samples,
                ),
            ]),
            points_reached,
        },
        final_applied_index,
        started.elapsed(),
    ))
}

/// What a campaign's run gathered for its checks and report.
struct Driven {
    faults: BTreeMap<String, u64>,
    missed: BTreeMap<String, u64>,
    final_applied_index: Option<u64>,
    sandboxes: Option<BTreeMap<String, FinalSandbox>>,
    replicas: Result<Vec<ReplicaState>, String>,
    observations: crate::observe::Observations,
}

async fn drive(
    config: &CampaignConfig,
    processes: &Arc<Processes>,
    history: &Arc<History>,
    docker: Option<&DockerTarget>,
) -> Result<Driven, ChaosError> {
    wait_for_leader(processes, FIRST_LEADER_WAIT_MAX).await?;
    let endpoints = Endpoints::new(&processes.endpoints())
        .map_err(|error| ChaosError::Config(format!("bad endpoint: {error}")))?;
    let workload_config = WorkloadConfig {
        rate: config.rate,
        ..WorkloadConfig::new(config.operations, config.clients, config.names, config.seed)
    };
    // The fault points are there in a `test-hooks` build only.
    let points_ready = processes
        .node_ids()
        .iter()
        .all(|node| processes.points.ready(*node));
    let point_handoffs = points_ready.then(|| {
        handoffs::PointHandoffs::new(
            processes.points.clone(),
            history.clone(),
            workload_config.request_prefix.clone(),
        )
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    // Sampling runs until the end: a held launch may reach the host after
    // the workload, while the cluster heals and settles.
    let (observe_stop, observe_stop_rx) = watch::channel(false);
    let observer = crate::observe::spawn(
        match docker {
            None => crate::observe::Source::ProcessTable(processes.driver_dir()),
            Some(docker) => {
                crate::observe::Source::Containers(Box::new(docker_driver(processes, docker)?))
            }
        },
        history.clock().clone(),
        observe_stop_rx,
    );
    let nemesis = tokio::spawn(nemesis(
        processes.clone(),
        config.nemeses.clone(),
        history.clone(),
        config.seed,
        point_handoffs,
        stop_rx,
    ));
    workload::run(
        workload_config.clone(),
        endpoints.clone(),
        history.clone(),
        config.seed,
    )
    .await;
    let _ = stop_tx.send(true);
    let (faults, mut missed) = nemesis
        .await
        .map_err(|error| ChaosError::Config(format!("the nemesis task failed: {error}")))?;
    if !points_ready && config.nemeses.contains(&NemesisKind::Handoff) {
        // Plain transfers only: said in the report, not silently.
        missed.insert("handoff:points-not-compiled-in".into(), 1);
    }
    processes.heal()?;
    history.fault("heal", "all faults healed");
    wait_for_leader(processes, FIRST_LEADER_WAIT_MAX).await?;

    // Settle: no operation in flight.
    let uris = processes.endpoints();
    let deadline = Instant::now() + SETTLE_WAIT_MAX;
    let mut sandboxes = list_all(&uris).await;
    while Instant::now() < deadline
        && sandboxes
            .as_ref()
            .is_none_or(|all| all.values().any(|sandbox| sandbox.operation_in_flight))
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sandboxes = list_all(&uris).await;
    }
    workload::final_reads(&workload_config, &endpoints, history, config.seed).await;

    // Converge: every replica at the same applied index, digests compared.
    let deadline = Instant::now() + CONVERGE_WAIT_MAX;
    let (replicas, index) = loop {
        let infos = infos(processes, None).await;
        let commit = infos
            .iter()
            .find(|(node_id, info)| info.leader_id == Some(*node_id))
            .map(|(_, info)| info.commit_index);
        let states: Vec<ReplicaState> = infos
            .iter()
            .map(|(node_id, info)| ReplicaState {
                node_id: *node_id,
                applied_index: info.applied_index,
                digest: info.state_digest.clone(),
            })
            .collect();
        let equal = states.len() == processes.node_ids().len()
            && states
                .windows(2)
                .all(|pair| pair[0].applied_index == pair[1].applied_index)
            && commit.is_some_and(|commit| {
                states
                    .first()
                    .is_some_and(|state| state.applied_index >= commit)
            });
        if equal {
            let index = states.first().map(|state| state.applied_index);
            break (Ok(states), index);
        }
        if Instant::now() >= deadline {
            break (
                Err(format!(
                    "replicas did not reach the same applied index within {CONVERGE_WAIT_MAX:?}: {:?}",
                    states
                        .iter()
                        .map(|state| (state.node_id, state.applied_index))
                        .collect::<Vec<_>>()
                )),
                None,
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let sandboxes = list_all(&uris).await;
    let _ = observe_stop.send(true);
    let observations = observer
        .await
        .map_err(|error| ChaosError::Config(format!("the sampler task failed: {error}")))?;
    Ok(Driven {
        faults,
        missed,
        final_applied_index: index,
        sandboxes,
        replicas,
        observations,
    })
}

/// The Docker driver over the replicas' engine and fence directory: the
/// same identity, for listing (sampling) and for the final cleanup.
fn docker_driver(processes: &Processes, docker: &DockerTarget) -> Result<DockerDriver, ChaosError> {
    DockerDriver::new(DockerConfig {
        host: docker.host.clone(),
        default_image: docker.default_image.clone(),
        network: palisade_driver::docker::DEFAULT_NETWORK.to_owned(),
        driver_dir: processes.driver_dir(),
        timeouts: DockerTimeouts::default(),
    })
    .map_err(|error| ChaosError::Process(format!("the Docker driver: {error}")))
}
