//! The repository's `compose.yaml` brought up on the test engine
//! (`scripts/ensure-docker`): the container image (`Dockerfile`, target
//! `runtime`, with this test's binary) on the base images of
//! `scripts/make-base-images`, three replicas with the Docker driver
//! against that engine's socket, PostgreSQL for the projection and the
//! `init-pki` service. Through the published ports, with the `palisade`
//! CLI and the admin credential `init-pki` wrote: create, stop and delete a
//! sandbox (its container appears and goes), the projection catches up,
//! `docker kill` of the leader's container, a new leader, a create after
//! it; then `down -v`.
//!
//! Needs `docker-compose` (Debian's, which ./scripts/test installs) or the
//! `docker compose` plugin: without either it fails, saying so. Without an
//! engine it fails under ./scripts/test (PALISADE_REQUIRE_DOCKER).
#![cfg(target_os = "linux")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::docker::TestEngine;
use support::palisade;

/// How long a step may take on a loaded two-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The compose command available: the v2 plugin or Debian's v1.
fn compose_command() -> Vec<String> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if works("docker", &["compose", "version"]) {
        return vec!["docker".into(), "compose".into()];
    }
    if works("docker-compose", &["version"]) {
        return vec!["docker-compose".into()];
    }
    panic!(
        "neither `docker compose` nor `docker-compose` is installed: ./scripts/test installs \
         Debian's docker-compose (apt-get install docker-compose)"
    );
}

/// One compose project on the test engine; `down -v` and the sandbox
/// containers it made are removed on drop, however the test ends.
struct Project {
    engine: TestEngine,
    compose: Vec<String>,
    name: String,
    env: Vec<(String, String)>,
    image: String,
    sandbox_ids: Vec<String>,
}

impl Project {
    fn run(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.compose[0]);
        command
            .args(&self.compose[1..])
            .arg("-p")
            .arg(&self.name)
            .arg("-f")
            .arg(repo_root().join("compose.yaml"))
            .args(args)
            .env("DOCKER_HOST", &self.engine.host)
            .stdin(Stdio::null());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command.output().expect("run compose")
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "compose {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The container id of a service.
    fn container(&self, service: &str) -> String {
        let id = self.run_ok(&["ps", "-a", "-q", service]).trim().to_string();
        assert!(!id.is_empty(), "no container for service {service}");
        id
    }

    fn logs(&self) -> String {
        let output = self.run(&["logs", "--no-color", "--tail", "30"]);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("compose logs:\n{}", self.logs());
        }
        // Every container the replicas' driver made carries its identity,
        // kept in the shared `driver` volume: read it before the volume goes
        // (when the test failed half way; `docker run` would create the
        // volume if it did not exist, hence the inspect).
        let volume = format!("{}_driver", self.name);
        let volume_exists = Command::new("docker")
            .args(["-H", &self.engine.host, "volume", "inspect", &volume])
            .output()
            .is_ok_and(|output| output.status.success());
        let driver_id = volume_exists
            .then(|| {
                Command::new("docker")
                    .args(["-H", &self.engine.host, "run", "--rm", "--network", "none"])
                    .args(["--entrypoint", "cat", "-v"])
                    .arg(format!("{volume}:/fences:ro"))
                    .args([&self.image, "/fences/.driver-id"])
                    .output()
                    .ok()
            })
            .flatten()
            .and_then(|output| serde_json::from_slice::<Value>(&output.stdout).ok())
            .and_then(|record| record["driver_id"].as_str().map(str::to_string));
        if let Some(driver_id) = driver_id {
            self.engine
                .remove_labelled(&format!("dev.palisade.driver-id=docker:{driver_id}"));
        }
        let _ = self.run(&["down", "-v", "--remove-orphans", "-t", "5"]);
        for id in &self.sandbox_ids {
            self.engine
                .remove_labelled(&format!("dev.palisade.sandbox-id={id}"));
        }
        let _ = Command::new("docker")
            .args(["-H", &self.engine.host, "rmi", "-f", &self.image])
            .output();
    }
}

/// Makes the base images (kept when they exist) and builds the runtime
/// image with this test's binary, stripped, as the only file of the
/// build context.
fn build_image(engine: &TestEngine, tag: &str, work: &Path) {
    let base = Command::new(repo_root().join("scripts/make-base-images"))
        .args(["runtime", "postgres"])
        .env("DOCKER_HOST", &engine.host)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/make-base-images");
    assert!(
        base.status.success(),
        "scripts/make-base-images failed: {}",
        String::from_utf8_lossy(&base.stderr)
    );
    let context = work.join("context");
    std::fs::create_dir_all(&context).unwrap();
    let strip = Command::new("strip")
        .arg("-o")
        .arg(context.join("palisade"))
        .arg(palisade())
        .output()
        .expect("run strip");
    assert!(strip.status.success(), "strip: {strip:?}");
    let build = Command::new("docker")
        .args(["-H", &engine.host, "build", "--target", "runtime"])
        .args(["--build-arg", "PALISADE_BINARY_DIR=.", "-t", tag, "-f"])
        .arg(repo_root().join("Dockerfile"))
        .arg(&context)
        .stdin(Stdio::null())
        .output()
        .expect("run docker build");
    assert!(
        build.status.success(),
        "docker build: {}\n{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
}

/// `palisade --config CONFIG --endpoint ENDPOINTS ARGS...`.
fn cli(config: &Path, endpoints: &str, args: &[&str]) -> Output {
    Command::new(palisade())
        .arg("--config")
        .arg(config)
        .args(["--endpoint", endpoints])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run palisade")
}

fn cli_json(config: &Path, endpoints: &str, args: &[&str]) -> Value {
    let output = cli(config, endpoints, &[&["-o", "json"], args].concat());
    assert!(
        output.status.success(),
        "palisade {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// A leader (node id, term) as it says itself, among the replicas that
/// answer at `endpoints`.
fn leader(config: &Path, endpoints: &str) -> Option<(u64, u64)> {
    let output = cli(config, endpoints, &["cluster", "status", "-o", "json"]);
    let views: Value = serde_json::from_slice(&output.stdout).ok()?;
    views["replicas"].as_array()?.iter().find_map(|view| {
        let id = view["node_id"].as_u64()?;
        (view["state"] == "Leader" && view["leader_id"].as_u64() == Some(id))
            .then(|| Some((id, view["term"].as_u64()?)))
            .flatten()
    })
}

fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < STEP_TIMEOUT,
            "timed out after {STEP_TIMEOUT:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn compose_stack_serves_survives_a_killed_leader_and_tears_down() {
    let Some(engine) = TestEngine::from_env() else {
        return;
    };
    let started = Instant::now();
    let compose = compose_command();
    let work = tempfile::tempdir().unwrap();
    let name = format!("palisadecompose{}", std::process::id());
    let image = format!("palisade:compose-test-{}", std::process::id());
    build_image(&engine, &image, work.path());

    let port = support::free_ports(3);
    let ports = [port, port + 1, port + 2];
    let endpoints = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    let socket = engine.socket_path();
    let socket_gid = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(&socket)
            .expect("the engine's socket")
            .gid()
    };
    let mut project = Project {
        engine: engine.clone(),
        compose,
        name: name.clone(),
        env: vec![
            ("PALISADE_IMAGE".into(), image.clone()),
            ("PALISADE_SANDBOX_IMAGE".into(), engine.image.clone()),
            ("PALISADE_PORT_1".into(), ports[0].to_string()),
            ("PALISADE_PORT_2".into(), ports[1].to_string()),
            ("PALISADE_PORT_3".into(), ports[2].to_string()),
            ("DOCKER_SOCKET".into(), socket.display().to_string()),
            ("DOCKER_GID".into(), socket_gid.to_string()),
            ("PALISADE_STOP_GRACE_SECONDS".into(), "2".into()),
        ],
        image: image.clone(),
        sandbox_ids: Vec::new(),
    };
    project.run_ok(&["up", "-d"]);

    // The admin credential init-pki wrote into the `pki` volume.
    let pki = work.path().join("pki");
    let pki_container = project.container("pki");
    engine.docker(&[
        "cp",
        &format!("{pki_container}:/etc/palisade/pki"),
        pki.to_str().unwrap(),
    ]);
    let config = pki.join("config.json");
    let (first_leader, first_term) = eventually("a leader", || leader(&config, &endpoints));

    // The lifecycle through the published ports; sandboxes are sibling
    // containers on the engine whose socket is mounted.
    let created = cli_json(
        &config,
        &endpoints,
        &[
            "sandbox",
            "create",
            "demo",
            "--",
            "sh",
            "-c",
            "trap 'exit 0' TERM; while true; do sleep 1; done",
        ],
    );
    assert_eq!(created["phase"], "READY", "{created}");
    let id = created["id"].as_str().expect("id").to_string();
    project.sandbox_ids.push(id.clone());
    assert_eq!(
        engine
            .running(&format!("dev.palisade.sandbox-id={id}"))
            .len(),
        1,
        "one running container"
    );
    let stopped = cli_json(&config, &endpoints, &["sandbox", "stop", "demo"]);
    assert_eq!(stopped["phase"], "STOPPED", "{stopped}");
    assert!(
        engine
            .running(&format!("dev.palisade.sandbox-id={id}"))
            .is_empty(),
        "stopped: nothing runs"
    );
    let deleted = cli(&config, &endpoints, &["sandbox", "delete", "--id", &id]);
    assert!(deleted.status.success(), "delete: {deleted:?}");
    let all = engine.containers(&format!("dev.palisade.sandbox-id={id}"));
    assert!(all.is_empty(), "deleted: its container is gone: {all:?}");

    // The leader projects into the compose PostgreSQL.
    eventually("the projection to catch up", || {
        let views = cli_json(&config, &endpoints, &["cluster", "status"]);
        views["replicas"].as_array()?.iter().find_map(|view| {
            let projection = &view["projection"];
            (view["state"] == "Leader"
                && projection["lag_entries"].as_u64() == Some(0)
                && projection["projected_index"].as_u64().unwrap_or(0) > 0)
                .then_some(())
        })
    });

    // Health through the image's own probe, from inside a replica.
    let health = engine.docker(&[
        "exec",
        &project.container("palisade-1"),
        "palisade",
        "health",
    ]);
    assert!(health.contains("SERVING"), "{health}");

    // Kill the leader's container: the others elect a leader in a later
    // term and keep serving through their published ports. (`docker kill`
    // counts as stopped by hand: the restart policy, unless-stopped, does
    // not bring it back; a crash would be restarted.)
    let leader_container = project.container(&format!("palisade-{first_leader}"));
    engine.docker(&["kill", &leader_container]);
    let (new_leader, new_term) = eventually("a leader in a later term", || {
        leader(&config, &endpoints).filter(|(_, term)| *term > first_term)
    });
    eprintln!(
        "leader node {first_leader} (term {first_term}) killed; new leader node {new_leader} \
         (term {new_term})"
    );
    let after = cli_json(
        &config,
        &endpoints,
        &["sandbox", "create", "after-failover", "--", "sleep", "1000"],
    );
    assert_eq!(after["phase"], "READY", "{after}");
    let after_id = after["id"].as_str().expect("id").to_string();
    project.sandbox_ids.push(after_id.clone());
    let deleted = cli(
        &config,
        &endpoints,
        &["sandbox", "delete", "--id", &after_id],
    );
    assert!(
        deleted.status.success(),
        "delete after failover: {deleted:?}"
    );

    // Tear down: nothing of the project is left on the engine.
    project.run_ok(&["down", "-v", "--remove-orphans", "-t", "5"]);
    let left = engine.containers(&format!("com.docker.compose.project={name}"));
    assert!(left.is_empty(), "containers left: {left:?}");
    eprintln!("compose test took {:?}", started.elapsed());
}
