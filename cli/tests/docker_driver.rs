//! End to end through `palisade` with three replicas and `--driver docker`
//! on the test engine (`scripts/ensure-docker`): the lifecycle with an image
//! and limits, a leader SIGKILLed in the middle of creates, delete by
//! expected id beside a same-name replacement, a container started behind
//! Palisade's back reaped by the reconciler, and an engine that stops
//! answering. Containers are looked at with the `docker` CLI; the driver
//! never uses it. Also: a process-driver cluster refuses an image.
//!
//! Without an engine these tests fail under ./scripts/test
//! (PALISADE_REQUIRE_DOCKER) and otherwise say on stderr that they did not run.
#![cfg(target_os = "linux")]

mod support;

use std::path::Path;
use std::time::Duration;

use palisade_testkit::ClusterSpec;
use palisade_testkit::logs::KeepLogsOnFailure;
use serde_json::Value;
use support::cluster::*;
use support::docker::{TestEngine, UnixProxy};
use support::{palisade, with_default_stop_grace};
use tokio::time::Instant;

/// How long a step may take on a loaded two-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// The `dev.palisade.driver-id` of the containers a cluster's replicas make
/// (`docker:` + the id in the shared fence directory).
fn driver_label(driver_dir: &Path) -> String {
    let record: Value = serde_json::from_slice(
        &std::fs::read(driver_dir.join(".driver-id")).expect("the fence directory's identity"),
    )
    .expect("identity JSON");
    format!(
        "dev.palisade.driver-id=docker:{}",
        record["driver_id"].as_str().expect("driver_id")
    )
}

/// Removes the cluster's containers however the test ends.
struct Containers {
    engine: TestEngine,
    driver_dir: std::path::PathBuf,
}

impl Drop for Containers {
    fn drop(&mut self) {
        if self.driver_dir.join(".driver-id").exists() {
            self.engine.remove_labelled(&driver_label(&self.driver_dir));
        }
    }
}

/// Three replicas on `--driver docker`, reaching the engine at `host`.
fn docker_cluster(engine: &TestEngine, host: &str, extra: &[&str]) -> (Cluster, Containers) {
    let mut args = vec![
        "--driver",
        "docker",
        "--docker-host",
        host,
        "--docker-default-image",
        engine.image.as_str(),
    ];
    args.extend_from_slice(extra);
    let spec = ClusterSpec::new(palisade(), 3).gateway_args(with_default_stop_grace(&args));
    let cluster = Cluster::start_spec(spec);
    let containers = Containers {
        engine: engine.clone(),
        driver_dir: cluster.driver_dir.clone(),
    };
    (cluster, containers)
}

fn sandbox_label(id: &str) -> String {
    format!("dev.palisade.sandbox-id={id}")
}

async fn eventually_async(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    &value[name]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_stop_start_delete_run_containers_with_the_spec() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let (cluster, _containers) = docker_cluster(&engine, &engine.host, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "create_get_stop_start_delete_run_containers_with_the_spec",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);

    let created = cli_json_async(
        &endpoints,
        &[
            "sandbox",
            "create",
            "web",
            "--image",
            &engine.image,
            "--cpus",
            "0.5",
            "--memory",
            "64m",
            "--workdir",
            "/tmp",
            "--",
            "sh",
            "-c",
            "pwd > here; exec sleep 1000",
        ],
    )
    .await;
    assert_eq!(field(&created, "phase"), "READY", "{created}");
    assert_eq!(field(&created, "generation"), 1);
    let id = field(&created, "id").as_str().expect("id").to_owned();

    let inspect = engine.docker(&[
        "inspect",
        &format!("palisade-{id}-1"),
        "--format",
        "{{.State.Status}} {{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.Config.WorkingDir}} \
         {{.HostConfig.NetworkMode}} {{.HostConfig.Init}} \
         {{index .Config.Labels \"dev.palisade.sandbox-id\"}} \
         {{index .Config.Labels \"dev.palisade.generation\"}}",
    ]);
    assert_eq!(
        inspect.split_whitespace().collect::<Vec<_>>(),
        [
            "running",
            "500000000",
            "67108864",
            "/tmp",
            "none",
            "true",
            id.as_str(),
            "1"
        ],
        "{inspect}"
    );
    // The command runs in the working directory inside the image.
    let pwd = engine.docker(&["exec", &format!("palisade-{id}-1"), "cat", "/tmp/here"]);
    assert_eq!(pwd.trim(), "/tmp");

    let got = cli_json_async(&endpoints, &["sandbox", "get", "web"]).await;
    assert_eq!(field(&got, "phase"), "READY");
    assert_eq!(field(&got, "image"), engine.image.as_str(), "{got}");
    assert_eq!(field(&got, "cpus"), 0.5, "{got}");
    assert_eq!(field(&got, "memory_bytes"), 64 << 20, "{got}");
    assert_eq!(field(&got, "workdir"), "/tmp", "{got}");
    assert!(
        got.to_string().contains("id="),
        "the handle names the container: {got}"
    );

    let stopped = cli_json_async(&endpoints, &["sandbox", "stop", "web"]).await;
    assert_eq!(field(&stopped, "phase"), "STOPPED", "{stopped}");
    assert!(engine.running(&sandbox_label(&id)).is_empty());
    assert_eq!(engine.containers(&sandbox_label(&id)).len(), 1);

    let started = cli_json_async(&endpoints, &["sandbox", "start", "web"]).await;
    assert_eq!(field(&started, "phase"), "READY", "{started}");
    assert_eq!(field(&started, "generation"), 2);
    let running = engine.running(&sandbox_label(&id));
    assert_eq!(running.len(), 1);
    let generation = engine.docker(&[
        "inspect",
        &running[0],
        "--format",
        "{{index .Config.Labels \"dev.palisade.generation\"}}",
    ]);
    assert_eq!(generation.trim(), "2");

    let deleted = cli_async(&endpoints, &["sandbox", "delete", "web"]).await;
    assert!(deleted.status.success(), "{deleted:?}");
    assert!(
        engine.containers(&sandbox_label(&id)).is_empty(),
        "every generation's container is gone after the delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_create_leaves_one_container_per_generation() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let (mut cluster, _containers) = docker_cluster(&engine, &engine.host, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_leader_killed_mid_create_leaves_one_container_per_generation",
    };
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let creates: Vec<_> = (0..4)
        .map(|index| {
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                cli_async(
                    &endpoints,
                    &[
                        "-o",
                        "json",
                        "sandbox",
                        "create",
                        &format!("kill-{index}"),
                        "--",
                        "sleep",
                        "1000",
                    ],
                )
                .await
            })
        })
        .collect();
    // The moment the first container exists, the leader is in the middle of
    // the creates: SIGKILL it.
    let label = driver_label(&cluster.driver_dir);
    let deadline = Instant::now() + STEP_TIMEOUT;
    while engine.containers(&label).is_empty() {
        assert!(Instant::now() < deadline, "no container was ever created");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.replica_mut(leader).kill();
    cluster
        .replica_mut(leader)
        .start()
        .expect("restart the old leader");
    let mut ids = Vec::new();
    for create in creates {
        let output = create.await.expect("the create task");
        assert!(
            output.status.success(),
            "create: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let created: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(field(&created, "phase"), "READY", "{created}");
        ids.push(field(&created, "id").as_str().expect("id").to_owned());
    }
    for id in &ids {
        let containers = engine.containers(&sandbox_label(id));
        assert_eq!(containers.len(), 1, "sandbox {id}: {containers:?}");
        let name = engine.docker(&["inspect", &containers[0], "--format", "{{.Name}}"]);
        assert_eq!(name.trim(), format!("/palisade-{id}-1"));
    }
    assert_eq!(
        engine.containers(&label).len(),
        ids.len(),
        "nothing else was made"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_by_expected_id_leaves_the_replacements_container_running() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let (cluster, _containers) = docker_cluster(&engine, &engine.host, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "delete_by_expected_id_leaves_the_replacements_container_running",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let first = cli_json_async(
        &endpoints,
        &["sandbox", "create", "x", "--", "sleep", "1000"],
    )
    .await;
    let first_id = field(&first, "id").as_str().expect("id").to_owned();
    let deleted = cli_async(&endpoints, &["sandbox", "delete", "--id", &first_id]).await;
    assert!(deleted.status.success(), "{deleted:?}");
    let second = cli_json_async(
        &endpoints,
        &["sandbox", "create", "x", "--", "sleep", "1000"],
    )
    .await;
    let second_id = field(&second, "id").as_str().expect("id").to_owned();

    let refused = cli_async(
        &endpoints,
        &["sandbox", "delete", "x", "--expected-id", &first_id],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("SANDBOX_IDENTITY_MISMATCH"),
        "{refused:?}"
    );
    assert_eq!(engine.running(&sandbox_label(&second_id)).len(), 1);
    assert!(engine.containers(&sandbox_label(&first_id)).is_empty());
    // Still running a while later (nothing acts on it late).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(engine.running(&sandbox_label(&second_id)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_started_behind_palisades_back_is_reaped() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let (cluster, _containers) = docker_cluster(
        &engine,
        &engine.host,
        &[
            "--reconcile-interval-seconds",
            "1",
            "--orphan-grace-seconds",
            "1",
        ],
    );
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_container_started_behind_palisades_back_is_reaped",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let kept = cli_json_async(
        &endpoints,
        &["sandbox", "create", "kept", "--", "sleep", "1000"],
    )
    .await;
    let kept_id = field(&kept, "id").as_str().expect("id").to_owned();
    let cluster_id = engine.docker(&[
        "inspect",
        &format!("palisade-{kept_id}-1"),
        "--format",
        "{{index .Config.Labels \"dev.palisade.cluster-id\"}}",
    ]);
    // Started by hand with Palisade's labels: a sandbox the state never knew.
    let ghost = "ghost-0000";
    let label = driver_label(&cluster.driver_dir);
    engine.docker(&[
        "run",
        "-d",
        "--init",
        "--network",
        "none",
        "--name",
        &format!("palisade-{ghost}-1"),
        "--label",
        &label,
        "--label",
        &format!("dev.palisade.cluster-id={}", cluster_id.trim()),
        "--label",
        &sandbox_label(ghost),
        "--label",
        "dev.palisade.generation=1",
        "--label",
        "dev.palisade.fence=0.0",
        &engine.image,
        "sleep",
        "1000",
    ]);
    let ghost_label = sandbox_label(ghost);
    eventually_async("the reconciler removes the ghost container", || {
        engine.containers(&ghost_label).is_empty()
    })
    .await;
    assert_eq!(
        engine.running(&sandbox_label(&kept_id)).len(),
        1,
        "the real one runs on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_stops_answering_loses_nothing_and_work_resumes() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let proxy = UnixProxy::start(&engine.socket_path());
    let (cluster, _containers) = docker_cluster(&engine, &proxy.host(), &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "an_engine_that_stops_answering_loses_nothing_and_work_resumes",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let created = cli_json_async(
        &endpoints,
        &["sandbox", "create", "d", "--", "sleep", "1000"],
    )
    .await;
    let id = field(&created, "id").as_str().expect("id").to_owned();

    // Down: the executor's inspections and the stop below are all uncertain.
    proxy.refuse();
    let stop = tokio::spawn({
        let endpoints = endpoints.clone();
        async move { cli_async(&endpoints, &["-o", "json", "sandbox", "stop", "d"]).await }
    });
    tokio::time::sleep(Duration::from_secs(8)).await;
    let during = cli_json_async(&endpoints, &["sandbox", "get", "d"]).await;
    assert_eq!(
        field(&during, "phase"),
        "STOPPING",
        "the stop waits for the engine; the sandbox is not recorded lost: {during}"
    );
    assert_eq!(engine.running(&sandbox_label(&id)).len(), 1);

    // Back: the stop completes.
    proxy.pass();
    let stopped = stop.await.expect("the stop task");
    assert!(
        stopped.status.success(),
        "stop: {}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let after = cli_json_async(&endpoints, &["sandbox", "get", "d"]).await;
    assert_eq!(field(&after, "phase"), "STOPPED", "{after}");
    assert!(engine.running(&sandbox_label(&id)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_driver_refuses_an_image_and_limits() {
    let cluster = Cluster::start(1, &[]);
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    for (flags, reason) in [
        (vec!["--image", "busybox:latest"], "INVALID_SPEC_IMAGE"),
        (vec!["--cpus", "1"], "INVALID_SPEC_CPUS"),
        (vec!["--memory", "64m"], "INVALID_SPEC_MEMORY_BYTES"),
        (vec!["--workdir", "/tmp"], "INVALID_SPEC_WORKDIR"),
    ] {
        let mut args = vec!["sandbox", "create", "img"];
        args.extend(flags.iter().copied());
        args.extend(["--", "sleep", "1"]);
        let output = cli_async(&endpoints, &args).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(reason), "{flags:?}: {stderr}");
        assert!(
            stderr.contains("--driver docker"),
            "{flags:?} says what to do: {stderr}"
        );
    }
    let listed = cli_json_async(&endpoints, &["sandbox", "list"]).await;
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(0),
        "nothing was created: {listed}"
    );
}
