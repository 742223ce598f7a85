//! Cluster-test helpers on top of `palisade-testkit`: a [`Cluster`] of the
//! binary under test whose waits panic on timeout, a [`Workload`] of
//! concurrent clients (the CLI's failover client) that records every
//! acknowledged operation, and reads through that client.
//!
//! Everything that waits polls for a condition with a generous deadline:
//! these tests run beside others on a loaded two-core machine.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use palisade_cli::client::{Client, ClientError};
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::{ClusterSpec, LocalCluster, ReplicaProcess};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::Channel;

pub use palisade_testkit::probe::{
    by_id, channel, cluster_info, generation_of, id_of, operation_of, phase_of,
};
pub use palisade_testkit::processes::{
    ExecutionProcesses, exactly_running, execution_dirs, execution_processes, kill_executions,
};

use super::{palisade, with_default_stop_grace};

/// How long a cluster may take to elect a leader (first start or failover).
pub const ELECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client keeps failing over before it reports an error.
pub const CLIENT_FAILOVER_DEADLINE: Duration = Duration::from_secs(90);
/// The label every workload sandbox carries: the id of the create request
/// that made it, so a retried create can recognise its own sandbox.
pub const REQUEST_LABEL: &str = "palisade.test/request";

/// A [`LocalCluster`] of the binary under test whose waits panic on
/// timeout, as a test wants.
pub struct Cluster(LocalCluster);

impl Deref for Cluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.0
    }
}

impl Cluster {
    /// Starts `size` founding replicas (node ids 1..=size) with extra
    /// `gateway run` flags.
    pub fn start(size: u64, extra_args: &[&str]) -> Cluster {
        Self::start_with_log(size, extra_args, "info,openraft=warn")
    }

    /// Starts the cluster `spec` describes (tests that need environment
    /// variables or other specifics).
    pub fn start_spec(spec: ClusterSpec) -> Cluster {
        Cluster(LocalCluster::start(spec).expect("start the cluster"))
    }

    /// Like [`Cluster::start`], with `PALISADE_LOG=log_filter`.
    pub fn start_with_log(size: u64, extra_args: &[&str], log_filter: &str) -> Cluster {
        let spec = ClusterSpec::new(palisade(), size)
            .gateway_args(with_default_stop_grace(extra_args))
            .log_filter(log_filter);
        Cluster(LocalCluster::start(spec).expect("start the cluster"))
    }

    /// Prepares `size` founding replicas without starting any (start them
    /// one by one with `replica_mut(id).start()`).
    pub fn prepare(size: u64, extra_args: &[&str]) -> Cluster {
        let spec = ClusterSpec::new(palisade(), size)
            .gateway_args(with_default_stop_grace(extra_args))
            .log_filter("info,openraft=warn");
        Cluster(LocalCluster::prepare(spec).expect("prepare the cluster"))
    }

    /// Starts one more replica, without `--initial-cluster`: it waits to be
    /// added as a learner.
    pub fn start_joining(&mut self, node_id: u64, extra_args: &[&str]) -> &mut ReplicaProcess {
        let args = with_default_stop_grace(extra_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.0
            .start_joining(node_id, &args)
            .expect("start a joining replica")
    }

    /// Waits until every replica in `among` answers and names the same
    /// leader, itself one of `among`; returns (leader, term).
    pub async fn wait_for_leader(&self, among: &[u64]) -> (u64, u64) {
        self.0
            .wait_for_leader(among, ELECTION_TIMEOUT)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// Waits until every replica in `among` applied what the leader had
    /// committed when this was called.
    pub async fn wait_caught_up(&self, among: &[u64]) {
        self.0
            .wait_caught_up(among, ELECTION_TIMEOUT)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    }
}

impl Cluster {
    /// Moves leadership to `target` through the CLI (retrying while the
    /// cluster is busy) and waits until the replicas in `running` agree it
    /// leads.
    pub async fn transfer_leader(&self, running: &[u64], target: u64) -> u64 {
        let endpoints = self.cli_endpoints(running);
        let deadline = Instant::now() + ELECTION_TIMEOUT;
        loop {
            let output = cli_async(
                &endpoints,
                &["cluster", "transfer-leader", &target.to_string()],
            )
            .await;
            if output.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "transfer-leader {target}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        loop {
            let (leader, _) = self.wait_for_leader(running).await;
            if leader == target {
                return leader;
            }
            assert!(Instant::now() < deadline, "node {target} did not take over");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A `palisade.v1.Palisade` client to exactly one replica (no failover).
pub async fn direct_client(uri: &str, call_timeout: Duration) -> PalisadeClient<Channel> {
    palisade_testkit::probe::direct_client(uri, call_timeout)
        .await
        .unwrap_or_else(|| panic!("cannot connect to {uri}"))
}

/// Runs the `palisade` CLI without blocking the runtime; returns the output.
pub async fn cli_async(endpoints: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(super::palisade())
        .args(["--endpoint", endpoints])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run palisade CLI")
}

/// Like [`super::cli_json`], without blocking the runtime.
pub async fn cli_json_async(endpoints: &str, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["-o", "json"];
    full.extend_from_slice(args);
    let output = cli_async(endpoints, &full).await;
    assert!(
        output.status.success(),
        "palisade {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "palisade {args:?} printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The failover client the CLI uses, over `endpoints`, patient enough for
/// a loaded test machine.
pub fn failover_client(endpoints: Vec<String>) -> Client {
    let mut client = Client::new(endpoints);
    client.failover_deadline = CLIENT_FAILOVER_DEADLINE;
    client
}

/// Reads one sandbox through `client` (linearizable); `None` if not found.
pub async fn get_sandbox(client: &mut Client, reference: v1::SandboxRef) -> Option<v1::Sandbox> {
    let request = v1::GetSandboxRequest {
        sandbox: Some(reference),
        ..Default::default()
    };
    match client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.get_sandbox(request).await }
        })
        .await
    {
        Ok(sandbox) => Some(sandbox),
        Err(error) if error.code() == Some(tonic::Code::NotFound) => None,
        Err(error) => panic!("get {request:?} failed: {error}"),
    }
}

/// Every sandbox of the default workspace (all pages, linearizable).
pub async fn list_sandboxes(client: &mut Client) -> Vec<v1::Sandbox> {
    let mut sandboxes = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = v1::ListSandboxesRequest {
            page_size: 1000,
            page_token: page_token.clone(),
            ..Default::default()
        };
        let page = client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.list_sandboxes(request).await }
            })
            .await
            .unwrap_or_else(|error| panic!("list failed: {error}"));
        sandboxes.extend(page.sandboxes);
        if page.next_page_token.is_empty() {
            return sandboxes;
        }
        page_token = page.next_page_token;
    }
}

/// Waits until no sandbox has an operation in flight; returns them all.
pub async fn wait_settled(client: &mut Client, timeout: Duration) -> Vec<v1::Sandbox> {
    let deadline = Instant::now() + timeout;
    loop {
        let sandboxes = list_sandboxes(client).await;
        let busy: Vec<String> = sandboxes
            .iter()
            .filter(|sandbox| operation_of(sandbox).is_some())
            .map(|sandbox| format!("{} ({:?})", id_of(sandbox), phase_of(sandbox)))
            .collect();
        if busy.is_empty() {
            return sandboxes;
        }
        assert!(
            Instant::now() < deadline,
            "operations still in flight after {timeout:?}: {busy:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------

/// What a workload does.
#[derive(Clone)]
pub struct WorkloadConfig {
    /// Sandbox names are `PREFIX-WORKER-N`.
    pub prefix: String,
    /// Concurrent clients.
    pub workers: usize,
    /// The sandbox command (empty: the driver's idle default).
    pub command: Vec<String>,
    /// Stop every sandbox after creating it.
    pub stop: bool,
    /// Also delete every n-th sandbox after stopping it.
    pub delete_every: Option<usize>,
}

/// What the acknowledged operations left a sandbox as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    Ready,
    Stopped,
    Deleted,
}

/// A sandbox a worker created, and the last state an acknowledged
/// operation left it in.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub name: String,
    pub id: String,
    pub expected: Expected,
}

/// One worker's record.
#[derive(Debug, Default)]
pub struct WorkerLog {
    pub sandboxes: Vec<Tracked>,
    /// Requests that returned an error to the caller (after the client's
    /// own failover and retries).
    pub failures: Vec<String>,
    /// Creates that found their name taken after a retry and recognised
    /// the sandbox as their own by its request label.
    pub resolved_by_label: usize,
}

/// Concurrent clients creating, stopping and deleting sandboxes through
/// the failover client until told to finish.
pub struct Workload {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    handles: Vec<JoinHandle<WorkerLog>>,
}

impl Workload {
    /// Starts `config.workers` clients; worker `n` lists `endpoints`
    /// rotated by `n`, so requests enter through every replica.
    pub fn start(config: WorkloadConfig, endpoints: Vec<String>) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let handles = (0..config.workers)
            .map(|worker| {
                let mut rotated = endpoints.clone();
                rotated.rotate_left(worker % endpoints.len().max(1));
                tokio::spawn(run_worker(
                    worker,
                    config.clone(),
                    failover_client(rotated),
                    stop.clone(),
                    acknowledged.clone(),
                ))
            })
            .collect();
        Workload {
            stop,
            acknowledged,
            handles,
        }
    }

    /// Operations acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.acknowledged.load(Ordering::SeqCst)
    }

    /// Waits until `count` more operations than now were acknowledged.
    pub async fn wait_for_more(&self, count: usize, timeout: Duration) {
        let target = self.acknowledged() + count;
        let deadline = Instant::now() + timeout;
        while self.acknowledged() < target {
            assert!(
                Instant::now() < deadline,
                "the workload acknowledged {} of {target} operations within {timeout:?}",
                self.acknowledged()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Lets every worker finish its current sandbox, then returns the logs.
    pub async fn finish(self) -> Vec<WorkerLog> {
        self.stop.store(true, Ordering::SeqCst);
        let mut logs = Vec::new();
        for handle in self.handles {
            logs.push(handle.await.expect("a workload worker panicked"));
        }
        logs
    }
}

fn status_text(error: &ClientError) -> String {
    format!("{error} [{:?} {:?}]", error.code(), error.reason())
}

async fn run_worker(
    worker: usize,
    config: WorkloadConfig,
    mut client: Client,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
) -> WorkerLog {
    let mut log = WorkerLog::default();
    let mut serial = 0usize;
    while !stop.load(Ordering::SeqCst) {
        serial += 1;
        let name = format!("{}-{worker}-{serial}", config.prefix);
        let Some(id) = create(&mut client, &config, &name, &mut log).await else {
            continue;
        };
        acknowledged.fetch_add(1, Ordering::SeqCst);
        log.sandboxes.push(Tracked {
            name: name.clone(),
            id: id.clone(),
            expected: Expected::Ready,
        });
        if !config.stop {
            continue;
        }
        let request = v1::StopSandboxRequest {
            sandbox: by_id(&id),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        };
        match client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.stop_sandbox(request).await }
            })
            .await
        {
            Ok(sandbox) if phase_of(&sandbox) == v1::SandboxPhase::Stopped => {
                acknowledged.fetch_add(1, Ordering::SeqCst);
                log.sandboxes.last_mut().unwrap().expected = Expected::Stopped;
            }
            Ok(sandbox) => log.failures.push(format!(
                "stop {name}: answered phase {:?}",
                phase_of(&sandbox)
            )),
            Err(error) => log
                .failures
                .push(format!("stop {name}: {}", status_text(&error))),
        }
        if config
            .delete_every
            .is_none_or(|every| !serial.is_multiple_of(every))
        {
            continue;
        }
        let request = v1::DeleteSandboxRequest {
            sandbox: by_id(&id),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        };
        match client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.delete_sandbox(request).await }
            })
            .await
        {
            Ok(deleted) if deleted.deleted => {
                acknowledged.fetch_add(1, Ordering::SeqCst);
                log.sandboxes.last_mut().unwrap().expected = Expected::Deleted;
            }
            Ok(deleted) => log
                .failures
                .push(format!("delete {name}: answered {deleted:?}")),
            Err(error) => log
                .failures
                .push(format!("delete {name}: {}", status_text(&error))),
        }
    }
    log
}

/// Creates `name` and waits for READY; returns its id. A create whose
/// first attempt's outcome was unknown may find its own sandbox on retry:
/// the request id makes the cluster replay the first result, and should a
/// NAME_TAKEN come back anyway, the sandbox is accepted only if it carries
/// this request's label.
async fn create(
    client: &mut Client,
    config: &WorkloadConfig,
    name: &str,
    log: &mut WorkerLog,
) -> Option<String> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let request = v1::CreateSandboxRequest {
        name: name.to_string(),
        spec: Some(v1::SandboxSpec {
            command: config.command.clone(),
            ..Default::default()
        }),
        labels: [(REQUEST_LABEL.to_string(), request_id.clone())].into(),
        request_id,
        ..Default::default()
    };
    let answer = client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.create_sandbox(request).await }
        })
        .await;
    let sandbox = match answer {
        Ok(sandbox) => sandbox,
        Err(error) if error.reason().as_deref() == Some("NAME_TAKEN") => {
            let existing = get_sandbox(
                client,
                v1::SandboxRef {
                    name: name.to_string(),
                    ..Default::default()
                },
            )
            .await;
            let ours = existing.filter(|sandbox| {
                sandbox
                    .metadata
                    .as_ref()
                    .and_then(|meta| meta.labels.get(REQUEST_LABEL))
                    == Some(&request.request_id)
            });
            let Some(ours) = ours else {
                log.failures
                    .push(format!("create {name}: {}", status_text(&error)));
                return None;
            };
            log.resolved_by_label += 1;
            ours
        }
        Err(error) => {
            log.failures
                .push(format!("create {name}: {}", status_text(&error)));
            return None;
        }
    };
    if phase_of(&sandbox) != v1::SandboxPhase::Ready {
        log.failures.push(format!(
            "create {name}: answered phase {:?}",
            phase_of(&sandbox)
        ));
        return None;
    }
    Some(id_of(&sandbox))
}

/// Checks that every acknowledged operation of `logs` is reflected in the
/// cluster (read linearizably through `client`), that no request failed,
/// and that the cluster holds no sandbox of the workload it did not
/// acknowledge. Returns the sandboxes expected READY.
pub async fn verify_acknowledged(
    client: &mut Client,
    prefix: &str,
    logs: &[WorkerLog],
) -> Vec<Tracked> {
    let failures: Vec<&String> = logs.iter().flat_map(|log| &log.failures).collect();
    assert!(failures.is_empty(), "requests failed: {failures:#?}");
    let tracked: Vec<&Tracked> = logs.iter().flat_map(|log| &log.sandboxes).collect();
    let listed: BTreeMap<String, v1::Sandbox> = list_sandboxes(client)
        .await
        .into_iter()
        .filter(|sandbox| {
            sandbox
                .metadata
                .as_ref()
                .is_some_and(|meta| meta.name.starts_with(&format!("{prefix}-")))
        })
        .map(|sandbox| (id_of(&sandbox), sandbox))
        .collect();
    for sandbox in &tracked {
        let found = listed.get(&sandbox.id);
        match (sandbox.expected, found) {
            (Expected::Deleted, None) => {}
            (Expected::Deleted, Some(found)) => {
                panic!(
                    "{} was deleted, yet it is {:?}",
                    sandbox.name,
                    phase_of(found)
                )
            }
            (expected, None) => panic!("{} ({expected:?}) is lost", sandbox.name),
            (Expected::Ready, Some(found)) => assert_eq!(
                phase_of(found),
                v1::SandboxPhase::Ready,
                "{} was acknowledged READY",
                sandbox.name
            ),
            (Expected::Stopped, Some(found)) => assert_eq!(
                phase_of(found),
                v1::SandboxPhase::Stopped,
                "{} was acknowledged STOPPED",
                sandbox.name
            ),
        }
    }
    let known: BTreeSet<&str> = tracked.iter().map(|sandbox| sandbox.id.as_str()).collect();
    let unknown: Vec<&String> = listed
        .keys()
        .filter(|id| !known.contains(id.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "sandboxes no acknowledged request made: {unknown:?}"
    );
    tracked
        .into_iter()
        .filter(|sandbox| sandbox.expected == Expected::Ready)
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------
// Process table
// ---------------------------------------------------------------------------

/// Waits (bounded) until [`exactly_running`] holds: a stopped command's
/// shim needs a moment to record the exit and leave.
pub async fn assert_exactly_running(
    driver_dir: &Path,
    expected_running: &BTreeSet<(String, u64)>,
    program: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match exactly_running(driver_dir, expected_running, program) {
            Ok(()) => return,
            Err(difference) => assert!(Instant::now() < deadline, "{difference}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
