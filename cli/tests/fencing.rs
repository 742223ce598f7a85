//! Fencing reaches the compute: a deposed leader's launch, held exactly
//! between its leadership check and its driver call, must start nothing
//! once the sandbox was deleted — whether the leader was paused (SIGSTOP)
//! while another replica took over, or lost and regained leadership across
//! two terms. Real `palisade gateway run` processes and the process driver;
//! the hold is the file gate of `palisade_testkit::gate` (compiled into the
//! binary only with the `test-hooks` feature these tests build with).
//!
//! Afterwards no process of the sandbox may exist, now or for the next five
//! seconds: a process left running after "deleted" is an agent's arbitrary
//! code that outlived the operator's delete.

mod support;

use std::path::Path;
use std::time::Duration;

use palisade_testkit::gate::{self, GATE_DIR_ENV};
use palisade_testkit::processes::execution_processes;
use palisade_testkit::{ClusterSpec, logs::KeepLogsOnFailure};
use support::cluster::*;
use support::docker::TestEngine;
use support::{palisade, with_default_stop_grace};
use tokio::time::Instant;

/// How long a step may take on a loaded two-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);
/// How long nothing of the deleted sandbox may run after the release.
const QUIET_PERIOD: Duration = Duration::from_secs(5);

fn gated_cluster(gate_dir: &Path) -> Cluster {
    let mut spec = ClusterSpec::new(palisade(), 3).gateway_args(with_default_stop_grace(&[]));
    spec.env
        .push((GATE_DIR_ENV.to_string(), gate_dir.display().to_string()));
    Cluster::start_spec(spec)
}

/// Live shims and commands of `sandbox_id` under the driver directory.
fn processes_of(driver_dir: &Path, sandbox_id: &str) -> Vec<u32> {
    let processes = execution_processes(driver_dir);
    processes
        .shims
        .iter()
        .filter(|((id, _), _)| id == sandbox_id)
        .flat_map(|(_, pids)| pids.iter().copied())
        .chain(
            processes
                .commands
                .iter()
                .filter(|((id, _), _)| id == sandbox_id)
                .flat_map(|(_, commands)| commands.iter().map(|(pid, _)| *pid)),
        )
        .collect()
}

/// Waits until a replica holds a launch at the gate; returns (sandbox, node).
async fn wait_held(gate_dir: &Path) -> (String, u64) {
    let dir = gate_dir.to_path_buf();
    tokio::task::spawn_blocking(move || gate::wait_held(&dir, STEP_TIMEOUT))
        .await
        .expect("the waiting thread")
        .expect("no replica reached the gate in time")
}

/// Deletes `sandbox_id` through `endpoints` and expects "deleted".
async fn delete_acknowledged(endpoints: &str, sandbox_id: &str) {
    let output = cli_async(
        endpoints,
        &["-o", "json", "sandbox", "delete", "--id", sandbox_id],
    )
    .await;
    assert!(
        output.status.success(),
        "delete {sandbox_id}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// After the held launch was released: nothing of the sandbox runs, for the
/// whole quiet period.
async fn assert_nothing_runs_for_a_while(driver_dir: &Path, sandbox_id: &str) {
    let until = Instant::now() + QUIET_PERIOD;
    while Instant::now() < until {
        let running = processes_of(driver_dir, sandbox_id);
        assert!(
            running.is_empty(),
            "sandbox {sandbox_id} was deleted, yet processes {running:?} of it run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What of a sandbox exists on the compute: the process driver's live shims
/// and commands, or the Docker driver's containers (any state).
#[derive(Clone)]
enum Compute {
    Process,
    Docker(TestEngine),
}

impl Compute {
    fn of(&self, driver_dir: &Path, sandbox_id: &str) -> Vec<String> {
        match self {
            Compute::Process => processes_of(driver_dir, sandbox_id)
                .into_iter()
                .map(|pid| pid.to_string())
                .collect(),
            Compute::Docker(engine) => {
                engine.containers(&format!("dev.palisade.sandbox-id={sandbox_id}"))
            }
        }
    }

    fn gateway_args(&self) -> Vec<String> {
        match self {
            Compute::Process => Vec::new(),
            Compute::Docker(engine) => vec![
                "--driver".into(),
                "docker".into(),
                "--docker-host".into(),
                engine.host.clone(),
                "--docker-default-image".into(),
                engine.image.clone(),
            ],
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leaders_held_launch_starts_nothing_after_the_delete() {
    paused_leaders_held_launch(Compute::Process, "6101").await;
}

/// The same with `--driver docker`: the fence and the tombstone stop the
/// deposed leader's container, not only a shim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leaders_held_launch_starts_no_container_after_the_delete() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    paused_leaders_held_launch(Compute::Docker(engine), "6103").await;
}

async fn paused_leaders_held_launch(compute: Compute, marker: &str) {
    let gate_dir = tempfile::tempdir().expect("a gate directory");
    let extra = compute.gateway_args();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut spec = ClusterSpec::new(palisade(), 3).gateway_args(with_default_stop_grace(&extra));
    spec.env.push((
        GATE_DIR_ENV.to_string(),
        gate_dir.path().display().to_string(),
    ));
    let mut cluster = Cluster::start_spec(spec);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_paused_leaders_held_launch_starts_nothing_after_the_delete",
    };
    let all = cluster.node_ids();
    let (leader_a, _) = cluster.wait_for_leader(&all).await;

    // 1. The client creates X; leader A confirms its leadership for the
    //    launch and stalls right before the driver call (SIGSTOP).
    let endpoints = cluster.cli_endpoints(&all);
    let create = tokio::spawn({
        let endpoints = endpoints.clone();
        let marker = marker.to_string();
        async move {
            cli_async(
                &endpoints,
                &[
                    "-o", "json", "sandbox", "create", "x", "--", "sleep", &marker,
                ],
            )
            .await
        }
    });
    let (sandbox_id, holder) = wait_held(gate_dir.path()).await;
    assert_eq!(holder, leader_a, "the leader holds the launch");
    cluster.replica(leader_a).pause();

    // 2. B is elected and launches X itself (the gate is one-shot); the
    //    client deletes X and is told it is deleted.
    let others: Vec<u64> = all.iter().copied().filter(|id| *id != leader_a).collect();
    cluster.wait_for_leader(&others).await;
    let created = create.await.expect("the create task");
    assert!(
        created.status.success(),
        "create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let others_endpoints = cluster.cli_endpoints(&others);
    delete_acknowledged(&others_endpoints, &sandbox_id).await;
    assert!(compute.of(&cluster.driver_dir, &sandbox_id).is_empty());

    // 3. A resumes and its held launch goes on.
    gate::release(gate_dir.path(), &sandbox_id).expect("release the gate");
    cluster.replica(leader_a).resume();
    let until = Instant::now() + QUIET_PERIOD;
    while Instant::now() < until {
        let running = compute.of(&cluster.driver_dir, &sandbox_id);
        assert!(
            running.is_empty(),
            "sandbox {sandbox_id} was deleted, yet {running:?} of it exist"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The cluster heals: A rejoins as a follower, X stays gone.
    cluster.wait_caught_up(&all).await;
    let listed = cli_json_async(&endpoints, &["sandbox", "list"]).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    assert!(compute.of(&cluster.driver_dir, &sandbox_id).is_empty());
    cluster.replica_mut(leader_a).kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_terms_held_launch_starts_nothing_after_the_delete() {
    const MARKER: &str = "6102";
    let gate_dir = tempfile::tempdir().expect("a gate directory");
    let cluster = gated_cluster(gate_dir.path());
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "an_old_terms_held_launch_starts_nothing_after_the_delete",
    };
    let all = cluster.node_ids();
    let (leader_a, _) = cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let create = tokio::spawn({
        let endpoints = endpoints.clone();
        async move {
            cli_async(
                &endpoints,
                &[
                    "-o", "json", "sandbox", "create", "y", "--", "sleep", MARKER,
                ],
            )
            .await
        }
    });
    let (sandbox_id, holder) = wait_held(gate_dir.path()).await;
    assert_eq!(holder, leader_a);

    // Leadership moves to B (a new term); B launches Y; the client deletes
    // it; leadership comes back to A (a third term). A's launch of the
    // first term is still held.
    let node_b = all
        .iter()
        .copied()
        .find(|id| *id != leader_a)
        .expect("another replica");
    cluster.transfer_leader(&all, node_b).await;
    let created = create.await.expect("the create task");
    assert!(
        created.status.success(),
        "create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    delete_acknowledged(&endpoints, &sandbox_id).await;
    cluster.transfer_leader(&all, leader_a).await;
    assert!(processes_of(&cluster.driver_dir, &sandbox_id).is_empty());

    // The old term's launch goes on now.
    gate::release(gate_dir.path(), &sandbox_id).expect("release the gate");
    assert_nothing_runs_for_a_while(&cluster.driver_dir, &sandbox_id).await;
    let listed = cli_json_async(&endpoints, &["sandbox", "list"]).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
}

/// Starts an execution behind the executor's back, the way a deposed
/// leader's late launch would: straight through the process driver, with
/// a fence of the cluster at (`term`, `operation_index`).
async fn launch_behind_the_back(
    driver_dir: &Path,
    cluster_id: &str,
    (term, operation_index): (u64, u64),
    sandbox_id: &str,
    generation: u64,
    marker: &str,
) {
    use palisade_driver::{ComputeDriver, Fence, LaunchSpec};
    let driver = palisade_driver::process::ProcessDriver::new(driver_dir.to_path_buf(), palisade())
        .expect("the process driver of the cluster's directory");
    let spec = LaunchSpec {
        sandbox_id: sandbox_id.to_string(),
        generation,
        command: vec!["sleep".into(), marker.into()],
        env: Default::default(),
        ..Default::default()
    };
    let fence = Fence {
        cluster_id: cluster_id.to_string(),
        term,
        sandbox_id: sandbox_id.to_string(),
        generation,
        operation_index,
    };
    driver
        .launch(&spec, &fence)
        .await
        .expect("an execution started behind the executor's back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reconciler_reaps_orphans_after_their_grace_period_and_lists_them_first() {
    const MARKER: &str = "6103";
    let cluster = Cluster::start(
        3,
        &[
            "--reconcile-interval-seconds",
            "1",
            "--orphan-grace-seconds",
            "4",
        ],
    );
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "the_reconciler_reaps_orphans_after_their_grace_period_and_lists_them_first",
    };
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    // A real sandbox, READY at generation 1: left alone.
    let kept = cli_json_async(
        &endpoints,
        &["sandbox", "create", "kept", "--", "sleep", MARKER],
    )
    .await;
    let kept_id = kept["id"].as_str().expect("an id").to_string();
    let status = cli_json_async(&endpoints, &["cluster", "status"]).await;
    let cluster_id = status["replicas"][0]["cluster_id"]
        .as_str()
        .expect("the cluster id")
        .to_string();
    assert!(!cluster_id.is_empty(), "{status}");

    // Two orphans: a sandbox the state never had, and a stale generation
    // of the kept sandbox.
    // (The stale one carries the fence of the kept sandbox's last change,
    // as high as any the driver saw for it, so the driver accepts it.)
    let ghost = "0e5a11ed-0000-4000-8000-00000000beef";
    let term = status["replicas"][0]["term"].as_u64().expect("the term");
    let kept_version = kept["resource_version"].as_u64().expect("a version");
    launch_behind_the_back(&cluster.driver_dir, &cluster_id, (0, 0), ghost, 1, MARKER).await;
    launch_behind_the_back(
        &cluster.driver_dir,
        &cluster_id,
        (term, kept_version),
        &kept_id,
        7,
        MARKER,
    )
    .await;
    assert!(!processes_of(&cluster.driver_dir, ghost).is_empty());

    // --dry-run lists both and changes nothing.
    let dry = cli_json_async(&endpoints, &["cluster", "reconcile", "--dry-run"]).await;
    assert_eq!(dry["dry_run"], true, "{dry}");
    let listed: Vec<(String, u64, String, String)> = dry["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .map(|orphan| {
            (
                orphan["sandbox_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                orphan["generation"].as_u64().unwrap_or_default(),
                orphan["reason"].as_str().unwrap_or_default().to_string(),
                orphan["action"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut expected = vec![
        (
            ghost.to_string(),
            1,
            "sandbox_gone".to_string(),
            "remove_sandbox".to_string(),
        ),
        (
            kept_id.clone(),
            7,
            "stale_generation".to_string(),
            "stop_execution".to_string(),
        ),
    ];
    expected.sort();
    assert_eq!(listed, expected, "{dry}");
    assert!(!processes_of(&cluster.driver_dir, ghost).is_empty());

    // Within the grace period plus a round or two, both are reaped and the
    // kept sandbox's own execution still runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let processes = execution_processes(&cluster.driver_dir);
        let ghost_gone = processes_of(&cluster.driver_dir, ghost).is_empty();
        let stale_gone = !processes.shims.contains_key(&(kept_id.clone(), 7))
            && !processes.commands.contains_key(&(kept_id.clone(), 7));
        if ghost_gone && stale_gone {
            assert!(
                processes.commands.contains_key(&(kept_id.clone(), 1)),
                "the kept sandbox's execution must still run: {processes:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "orphans not reaped in time: {processes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = cli_json_async(&endpoints, &["cluster", "status"]).await;
    let leader_view = status["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .find(|replica| replica["node_id"].as_u64() == Some(leader))
        .expect("the leader's view")
        .clone();
    assert!(
        leader_view["orphans_found"].as_u64() >= Some(2)
            && leader_view["orphans_reaped"].as_u64() >= Some(2),
        "{leader_view}"
    );
    let kept_now = cli_json_async(&endpoints, &["sandbox", "get", "kept"]).await;
    assert_eq!(kept_now["phase"], "READY", "{kept_now}");
}
