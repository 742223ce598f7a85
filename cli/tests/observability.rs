//! Observability, end to end on real `palisade gateway run` processes:
//! gRPC server reflection seen by a Python reflection client, Prometheus
//! metrics of a 3-replica cluster checked against what the test did to it,
//! one request's trace followed across the follower, the leader and the
//! executor, `cluster status --watch`, and the status page rendered in
//! headless Chromium.
//!
//! What each test needs from outside it installs itself when missing: a
//! Python virtualenv with `grpcio-reflection` (from PyPI, once, under the
//! target directory), Debian's `chromium` (`scripts/ensure-chromium`),
//! PostgreSQL's server binaries (`scripts/ensure-postgres`).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_proto::v1;
use palisade_testkit::probe::by_name_in;
use support::KeepLogsOnFailure;
use support::cluster::{Cluster, direct_client};

const CALL_TIMEOUT: Duration = Duration::from_secs(20);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the cli crate is in the workspace")
        .to_path_buf()
}

/// A free loopback address for a metrics listener.
fn free_address() -> String {
    format!("127.0.0.1:{}", support::free_ports(1))
}

/// Prepares a cluster of `size` whose replicas serve metrics, each on its
/// own port; returns it and the metrics addresses by node id.
fn cluster_with_metrics(
    size: u64,
    extra_args: &[&str],
    log_filter: &str,
) -> (Cluster, BTreeMap<u64, String>) {
    let mut cluster = Cluster::prepare(size, extra_args);
    let mut addresses = BTreeMap::new();
    for node_id in 1..=size {
        let address = free_address();
        let replica = cluster.replica_mut(node_id);
        replica.log_filter = log_filter.to_string();
        replica
            .extra_args
            .extend(["--metrics-listen".to_string(), address.clone()]);
        addresses.insert(node_id, address);
    }
    cluster.start_all().expect("start the cluster");
    (cluster, addresses)
}

/// `GET path` over HTTP/1.0 (the listener closes after answering): the
/// status code and the body.
async fn http_get(address: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .unwrap_or_else(|error| panic!("connect to {address}: {error}"));
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let response = String::from_utf8(response).expect("UTF-8 answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, body.to_string())
}

/// One scrape, parsed by a Prometheus text-format parser.
struct Scrape(prometheus_parse::Scrape);

impl Scrape {
    async fn of(address: &str) -> Scrape {
        let (status, body) = http_get(address, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let lines = body.lines().map(|line| Ok(line.to_string()));
        Scrape(prometheus_parse::Scrape::parse(lines).expect("a valid exposition"))
    }

    /// The sum of the samples of `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .samples
            .iter()
            .filter(|sample| sample.metric == name)
            .filter(|sample| {
                labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(key) == Some(*value))
            })
            .map(|sample| match &sample.value {
                prometheus_parse::Value::Counter(value)
                | prometheus_parse::Value::Gauge(value)
                | prometheus_parse::Value::Untyped(value) => *value,
                prometheus_parse::Value::Histogram(buckets) => buckets
                    .iter()
                    .map(|bucket| bucket.count)
                    .fold(0.0, f64::max),
                prometheus_parse::Value::Summary(_) => 0.0,
            })
            .sum()
    }

    fn has(&self, name: &str) -> bool {
        self.0.samples.iter().any(|sample| sample.metric == name)
    }

    /// The count of a histogram's observations with `labels`.
    fn histogram_count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sum(name, labels)
    }
}

fn create_request(name: &str) -> v1::CreateSandboxRequest {
    v1::CreateSandboxRequest {
        workspace: "default".into(),
        name: name.into(),
        spec: Some(v1::SandboxSpec {
            command: vec!["sleep".into(), "300".into()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Calls made to each replica, by method: what its metrics must count.
#[derive(Default)]
struct Calls(BTreeMap<u64, BTreeMap<&'static str, u64>>);

impl Calls {
    fn made(&mut self, node_id: u64, method: &'static str) {
        *self
            .0
            .entry(node_id)
            .or_default()
            .entry(method)
            .or_default() += 1;
    }

    fn forget(&mut self, node_id: u64) {
        self.0.remove(&node_id);
    }
}

/// The scripted workload on replica `node_id`: create two sandboxes, read
/// one, list, delete one. Every call is counted, answered or not.
async fn workload(cluster: &Cluster, node_id: u64, round: &str, calls: &mut Calls) {
    let mut client = direct_client(&cluster.replica(node_id).uri(), CALL_TIMEOUT).await;
    for index in 0..2 {
        let name = format!("metrics-{round}-{node_id}-{index}");
        calls.made(node_id, "CreateSandbox");
        client
            .create_sandbox(create_request(&name))
            .await
            .unwrap_or_else(|status| panic!("create {name} on node {node_id}: {status:?}"));
    }
    calls.made(node_id, "GetSandbox");
    client
        .get_sandbox(v1::GetSandboxRequest {
            sandbox: by_name_in("default", &format!("metrics-{round}-{node_id}-0")),
            ..Default::default()
        })
        .await
        .expect("get");
    calls.made(node_id, "ListSandboxes");
    client
        .list_sandboxes(v1::ListSandboxesRequest::default())
        .await
        .expect("list");
    calls.made(node_id, "DeleteSandbox");
    client
        .delete_sandbox(v1::DeleteSandboxRequest {
            sandbox: by_name_in("default", &format!("metrics-{round}-{node_id}-1")),
            ..Default::default()
        })
        .await
        .expect("delete");
}

/// The acceptance test of the metrics: a scripted workload on each
/// replica, a leader kill, more workload, the killed replica back; then
/// each replica's `/metrics`, parsed, must say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_replicas_metrics_match_what_happened() {
    // The projection's lag is only exported with --postgres-url.
    let ensured = Command::new(repository().join("scripts/ensure-postgres"))
        .status()
        .expect("scripts/ensure-postgres runs");
    assert!(ensured.success(), "PostgreSQL is not installed");
    let postgres = palisade_testkit::TestPostgres::start()
        .await
        .expect("start PostgreSQL");
    let (mut cluster, metrics) =
        cluster_with_metrics(3, &["--postgres-url", postgres.url()], "info,openraft=warn");
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "each_replicas_metrics_match_what_happened",
    };
    let (first_leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    let mut calls = Calls::default();
    for node_id in [1, 2, 3] {
        workload(&cluster, node_id, "a", &mut calls).await;
    }

    // Kill the leader; the others elect a new one and take more work.
    cluster.replica_mut(first_leader).kill();
    calls.forget(first_leader);
    let survivors: Vec<u64> = [1, 2, 3]
        .into_iter()
        .filter(|id| *id != first_leader)
        .collect();
    let (second_leader, _) = cluster.wait_for_leader(&survivors).await;
    assert_ne!(second_leader, first_leader);
    for node_id in &survivors {
        workload(&cluster, *node_id, "b", &mut calls).await;
    }
    // The killed replica comes back and catches up (its counters restart).
    cluster.replica_mut(first_leader).start().unwrap();
    cluster.wait_caught_up(&[1, 2, 3]).await;

    // Scrape all three until they report one applied index (the leader
    // proposes ticks now and then; scrapes are a few ms apart).
    let deadline = Instant::now() + Duration::from_secs(30);
    let scrapes = loop {
        let mut scrapes = BTreeMap::new();
        for (node_id, address) in &metrics {
            scrapes.insert(*node_id, Scrape::of(address).await);
        }
        let applied: Vec<f64> = scrapes
            .values()
            .map(|scrape| scrape.sum("palisade_raft_applied_index", &[]))
            .collect();
        if applied.iter().all(|index| *index == applied[0]) {
            break scrapes;
        }
        assert!(
            Instant::now() < deadline,
            "applied indexes never agreed: {applied:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let committed: Vec<f64> = scrapes
        .values()
        .map(|scrape| scrape.sum("palisade_raft_proposals_committed_total", &[]))
        .collect();
    assert!(committed[0] > 0.0, "nothing committed: {committed:?}");
    assert!(
        committed.iter().all(|count| *count == committed[0]),
        "proposals committed differ at one applied index: {committed:?}"
    );
    for (node_id, scrape) in &scrapes {
        let leader_changes = scrape.sum("palisade_raft_leader_changes_total", &[]);
        assert!(
            leader_changes >= 1.0,
            "node {node_id}: leader changes {leader_changes}"
        );
        // The survivors saw the first leader and then the second.
        if *node_id != first_leader {
            assert!(
                leader_changes >= 2.0,
                "node {node_id} saw {leader_changes} leader changes"
            );
        }
        // Every replica names the new leader, and only it.
        assert_eq!(
            scrape.sum(
                "palisade_raft_leader",
                &[("node_id", &second_leader.to_string())]
            ),
            1.0,
            "node {node_id}"
        );
        assert_eq!(scrape.sum("palisade_raft_leader", &[]), 1.0);
        assert_eq!(
            scrape.sum("palisade_raft_is_leader", &[]),
            f64::from(*node_id == second_leader)
        );
        assert!(scrape.sum("palisade_raft_term", &[]) >= 2.0);
        assert!(
            scrape.sum("palisade_raft_commit_index", &[])
                >= scrape.sum("palisade_raft_applied_index", &[])
        );
        // RPC counts by method: exactly the calls this test made to it.
        let expected = calls.0.get(node_id).cloned().unwrap_or_default();
        for method in [
            "CreateSandbox",
            "GetSandbox",
            "ListSandboxes",
            "DeleteSandbox",
        ] {
            let counted = scrape.sum(
                "palisade_grpc_server_handled_total",
                &[
                    ("grpc_service", "palisade.v1.Palisade"),
                    ("grpc_method", method),
                ],
            );
            let made = expected.get(method).copied().unwrap_or(0) as f64;
            assert_eq!(counted, made, "node {node_id}, {method}");
            assert_eq!(
                scrape.histogram_count(
                    "palisade_grpc_server_handling_seconds_count",
                    &[("grpc_method", method)]
                ),
                made,
                "node {node_id}, {method} latency observations"
            );
        }
        // The projection's lag is exported (with --postgres-url).
        assert!(
            scrape.has("palisade_projection_lag_entries")
                && scrape.has("palisade_projection_lag_seconds"),
            "node {node_id}: no projection lag"
        );
        assert!(scrape.sum("palisade_state_bytes", &[]) > 0.0);
        assert!(scrape.sum("palisade_receipts", &[]) >= 1.0);
        assert!(scrape.has("palisade_raft_log_fsync_seconds_count"));
        assert!(scrape.sum("palisade_raft_log_append_seconds_count", &[]) > 0.0);
        assert!(scrape.sum("palisade_raft_apply_seconds_count", &[]) > 0.0);
        assert_eq!(
            scrape.sum("palisade_grpc_server_in_flight_requests", &[]),
            0.0
        );
    }
    // The new leader performed the survivors' launches and removals with
    // the process driver, and timed them.
    let leader = &scrapes[&second_leader];
    for operation in ["create", "delete"] {
        assert!(
            leader.histogram_count(
                "palisade_executor_effect_seconds_count",
                &[("operation", operation), ("driver", "process")]
            ) >= 1.0,
            "no {operation} effect timed on the leader"
        );
    }
    // A replica without --postgres-url exports no projection metrics.
    drop(cluster);
    let (cluster, metrics) = cluster_with_metrics(1, &[], "info,openraft=warn");
    cluster.wait_for_leader(&[1]).await;
    let scrape = Scrape::of(&metrics[&1]).await;
    assert!(!scrape.has("palisade_projection_lag_entries"));
    assert_eq!(scrape.sum("palisade_raft_is_leader", &[]), 1.0);
}

/// The trace ids on JSON log lines that carry `trace_id` (in a field or a
/// span), with the line.
fn traced_lines(log: &str) -> Vec<(String, serde_json::Value)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| {
            let trace_id = line["fields"]["trace_id"]
                .as_str()
                .or_else(|| line["span"]["trace_id"].as_str())
                .map(str::to_string)?;
            Some((trace_id, line))
        })
        .collect()
}

/// The acceptance test of the traces: one `palisade sandbox delete` sent
/// to a follower; its trace id shows in the follower's lines, the
/// leader's (the forwarded write and the applied command) and the
/// executor's (the effect).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_delete_sent_to_a_follower_is_one_trace_in_three_logs() {
    let mut cluster = Cluster::prepare(3, &["--log-format", "json"]);
    for node_id in 1..=3 {
        cluster.replica_mut(node_id).log_filter =
            "info,openraft=warn,palisade_gateway=debug,palisade_raft=debug".into();
    }
    cluster.start_all().unwrap();
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "one_delete_sent_to_a_follower_is_one_trace_in_three_logs",
    };
    let (leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let follower_endpoint = cluster.cli_endpoints(&[follower]);

    // A client's own traceparent is kept: a create with one, to the follower.
    let given = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut client = direct_client(&cluster.replica(follower).uri(), CALL_TIMEOUT).await;
    let mut request = tonic::Request::new(create_request("traced"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{given}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    let response = client.create_sandbox(request).await.expect("create");
    let answered = response
        .metadata()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        answered.contains(given),
        "the answer names another trace: {answered:?}"
    );

    // The delete, through the CLI (which sends no traceparent: the
    // follower makes the trace id).
    let before: BTreeMap<u64, u64> = [1, 2, 3]
        .into_iter()
        .map(|id| (id, cluster.replica(id).log_len()))
        .collect();
    let output =
        support::cluster::cli_async(&follower_endpoint, &["sandbox", "delete", "traced"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Log lines are written as they happen; give the writers a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = |id: u64| traced_lines(&cluster.replica(id).log_since(before[&id]));
    let follower_lines = lines(follower);
    let deletes: Vec<&String> = follower_lines
        .iter()
        .filter(|(_, line)| {
            line["span"]["name"] == "request" && line["span"]["method"] == "DeleteSandbox"
        })
        .map(|(trace_id, _)| trace_id)
        .collect();
    let trace_id = deletes
        .first()
        .unwrap_or_else(|| panic!("no DeleteSandbox request line on the follower"))
        .to_string();
    assert_eq!(trace_id.len(), 32);
    assert_ne!(trace_id, given);
    assert!(
        follower_lines.iter().any(|(id, line)| *id == trace_id
            && line["fields"]["message"] == "forwarding the write to the leader"),
        "the follower did not log forwarding under the trace"
    );
    let leader_lines: Vec<serde_json::Value> = lines(leader)
        .into_iter()
        .filter(|(id, _)| *id == trace_id)
        .map(|(_, line)| line)
        .collect();
    assert!(
        leader_lines
            .iter()
            .any(|line| line["span"]["name"] == "forwarded_write"),
        "no forwarded-write line with trace {trace_id} on the leader: {leader_lines:#?}"
    );
    assert!(
        leader_lines
            .iter()
            .any(|line| line["fields"]["message"] == "command applied"
                && line["fields"]["command"] == "BeginDelete"),
        "no applied-command line with trace {trace_id} on the leader"
    );
    assert!(
        leader_lines
            .iter()
            .any(|line| line["span"]["name"] == "effect"
                && line["target"] == "palisade_gateway::executor"
                && line["span"]["trace_origin"] == "request"),
        "no executor effect line with trace {trace_id} on the leader: {leader_lines:#?}"
    );
    // Other replicas never log this trace.
    let other = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader && *id != follower)
        .unwrap();
    assert!(lines(other).iter().all(|(id, _)| *id != trace_id));
}

/// A Python virtualenv with `grpcio-reflection`, made once under the target
/// directory; returns its interpreter.
fn reflection_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpcio-reflection-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(".installed");
    if ready.exists() {
        return python;
    }
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "python3 -m venv failed");
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "grpcio",
            "grpcio-reflection",
        ])
        .status()
        .expect("pip runs");
    assert!(status.success(), "pip install grpcio-reflection failed");
    std::fs::write(&ready, "").unwrap();
    python
}

/// gRPC server reflection: a Python reflection client lists the public
/// services and resolves their methods, without the .proto files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflection_client_lists_the_public_services() {
    let python = reflection_python();
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1]).await;
    let output = tokio::process::Command::new(&python)
        .arg(repository().join("cli/tests/assets/reflection_list.py"))
        .arg(&cluster.replica(1).listen)
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "reflection failed: {}{listed}",
        String::from_utf8_lossy(&output.stderr)
    );
    let services: BTreeMap<&str, Vec<&str>> = listed
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, methods)| (name, methods.split(',').collect()))
        .collect();
    let names: Vec<&str> = services.keys().copied().collect();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "palisade.v1.ClusterAdmin",
            "palisade.v1.Palisade"
        ],
        "the internal peer service must not be listed"
    );
    assert!(services["palisade.v1.Palisade"].contains(&"DeleteSandbox"));
    assert!(services["palisade.v1.ClusterAdmin"].contains(&"GetClusterInfo"));
    assert!(services["grpc.health.v1.Health"].contains(&"Check"));
}

/// `cluster status --watch` redraws the view in place until interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_watch_refreshes_in_place() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1]).await;
    let child = tokio::process::Command::new(support::palisade())
        .args(["--endpoint", &cluster.cli_endpoints(&[1])])
        .args(["cluster", "status", "--watch", "--interval-seconds", "1"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    // Ctrl-C ends the watch cleanly.
    support::signal(child.id().unwrap(), libc::SIGINT);
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the watch ends on SIGINT")
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let redraws = stdout.matches("\x1b[H\x1b[2J").count();
    assert!(redraws >= 2, "{redraws} redraws: {stdout}");
    assert!(stdout.matches("Leader").count() + stdout.matches("LEADER").count() >= 2);
    // --interval-seconds only goes with --watch.
    let output = support::cli(
        &cluster.cli_endpoints(&[1]),
        &["cluster", "status", "--interval-seconds", "1"],
    );
    assert!(!output.status.success());
}

/// Headless Chromium, installed when missing (`scripts/ensure-chromium`).
fn chromium() -> PathBuf {
    let output = Command::new(repository().join("scripts/ensure-chromium"))
        .output()
        .expect("scripts/ensure-chromium runs");
    assert!(
        output.status.success(),
        "no Chromium: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Chromium's headless flags for this machine (root, no GPU, no profile
/// left behind).
fn headless(chromium: &Path, profile: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .kill_on_drop(true);
    command
}

/// The page's DOM as Chromium rendered it.
async fn dump_dom(chromium: &Path, profile: &Path, url: &str) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        headless(chromium, profile)
            .args(["--dump-dom", url])
            .output(),
    )
    .await
    .expect("Chromium renders within 30 s")
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

/// The leader the rendered page names (`#leader[data-node-id]`).
fn leader_in(dom: &str) -> Option<u64> {
    let start = dom.find("id=\"leader\" data-node-id=\"")? + "id=\"leader\" data-node-id=\"".len();
    dom[start..].split('"').next()?.parse().ok()
}

/// The page's reload period (`<meta http-equiv="refresh" content="N">`).
fn refresh_seconds(dom: &str) -> u64 {
    let marker = "http-equiv=\"refresh\" content=\"";
    let start = dom.find(marker).expect("the page reloads itself") + marker.len();
    dom[start..]
        .split('"')
        .next()
        .and_then(|seconds| seconds.parse().ok())
        .expect("a reload period in seconds")
}

/// The status page of a live 3-replica cluster in headless Chromium: the
/// leader and three members; a screenshot; a new leader within 5 s of the
/// old one's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_in_chromium_and_follows_a_new_leader() {
    let chromium = chromium();
    let (mut cluster, metrics) = cluster_with_metrics(3, &[], "info,openraft=warn");
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "the_status_page_renders_in_chromium_and_follows_a_new_leader",
    };
    let (leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    // The page of a follower, which took a few writes (its last operations).
    let observer = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let mut client = direct_client(&cluster.replica(observer).uri(), CALL_TIMEOUT).await;
    for name in ["page-a", "page-b", "page-c"] {
        client.create_sandbox(create_request(name)).await.unwrap();
    }
    client
        .delete_sandbox(v1::DeleteSandboxRequest {
            sandbox: by_name_in("default", "page-c"),
            ..Default::default()
        })
        .await
        .unwrap();
    let url = format!("http://{}/", metrics[&observer]);
    let profile = tempfile::tempdir().unwrap();

    let dom = dump_dom(&chromium, profile.path(), &url).await;
    assert_eq!(leader_in(&dom), Some(leader), "{dom}");
    let members = dom.matches("<tr class=\"member").count();
    assert_eq!(members, 3, "{dom}");
    for node_id in 1..=3 {
        assert!(dom.contains(&format!("data-node-id=\"{node_id}\" data-role=\"")));
    }
    assert!(dom.contains("data-role=\"Leader\""));
    assert_eq!(dom.matches("data-role=\"Follower\"").count(), 2);
    assert!(dom.contains("<td>CreateSandbox</td><td>OK</td>"), "{dom}");
    assert!(dom.contains("<td>DeleteSandbox</td><td>OK</td>"), "{dom}");

    // The screenshot, under the test's output directory.
    let output_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page");
    std::fs::create_dir_all(&output_dir).unwrap();
    let screenshot = output_dir.join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = headless(&chromium, profile.path())
        .arg(format!("--screenshot={}", screenshot.display()))
        // Virtual time: the shot is taken once the page settled, before
        // its 1 s reload could start (Chromium is slow on a loaded machine).
        .args([
            "--window-size=1280,1000",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=500",
            &url,
        ])
        .output()
        .await
        .unwrap();
    assert!(shot.status.success(), "{shot:?}");
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    println!("status page screenshot: {}", screenshot.display());

    // Kill the leader: the page shows the new one within 5 s. A browser
    // shows what the replica serves at its last reload, at most one
    // refresh period old; so the served page must name the new leader
    // within 5 s minus that period. Polled over plain HTTP (a Chromium
    // start alone takes seconds on a loaded machine), then rendered.
    let refresh = refresh_seconds(&dom);
    assert!(refresh <= 2, "the page reloads every {refresh} s");
    cluster.replica_mut(leader).kill();
    let killed = Instant::now();
    let new_leader = loop {
        let (status, html) = http_get(&metrics[&observer], "/").await;
        assert_eq!(status, 200);
        if let Some(new_leader) = leader_in(&html)
            && new_leader != leader
        {
            break new_leader;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the page still shows no new leader {:?} after the kill",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let served_after = killed.elapsed();
    let shown_within = served_after + Duration::from_secs(refresh);
    println!(
        "new leader {new_leader} served {served_after:?} after the kill; shown by a browser within {shown_within:?}"
    );
    assert!(shown_within <= Duration::from_secs(5));
    let dom = dump_dom(&chromium, profile.path(), &url).await;
    assert_eq!(leader_in(&dom), Some(new_leader), "{dom}");
    assert!(
        dom.contains(&format!(
            "data-node-id=\"{leader}\" data-role=\"unreachable\""
        )),
        "{dom}"
    );
}

/// A tiny OTLP collector (HTTP/protobuf, `POST /v1/traces`): keeps every
/// export request it receives. Returns its traces URL.
async fn otlp_collector(
    received: std::sync::Arc<
        std::sync::Mutex<
            Vec<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>,
        >,
    >,
) -> String {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let collect = move |body: axum::body::Bytes| async move {
        match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                received.lock().unwrap().push(request);
                // An empty ExportTraceServiceResponse.
                (
                    axum::http::StatusCode::OK,
                    [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                )
            }
            Err(_) => (
                axum::http::StatusCode::BAD_REQUEST,
                [(axum::http::header::CONTENT_TYPE, "text/plain")],
            ),
        }
    };
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(collect));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1/traces")
}

/// `--otlp-endpoint`: the replica exports its spans over OTLP, and the
/// request's span arrives under the trace id of the client's
/// `traceparent`, named `request`, with the request's method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_under_the_requests_trace_id() {
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let endpoint = otlp_collector(received.clone()).await;
    let mut cluster = Cluster::prepare(1, &["--otlp-endpoint", &endpoint]);
    cluster.start_all().unwrap();
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "spans_are_exported_over_otlp_under_the_requests_trace_id",
    };
    cluster.wait_for_leader(&[1]).await;

    let given = "5af92f3577b34da6a3ce929d0e0e4799";
    let mut client = direct_client(&cluster.replica(1).uri(), CALL_TIMEOUT).await;
    let mut request = tonic::Request::new(create_request("exported"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{given}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    client.create_sandbox(request).await.expect("create");

    let expected_trace: Vec<u8> = (0..given.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&given[at..at + 2], 16).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = received.lock().unwrap().iter().any(|export| {
            export
                .resource_spans
                .iter()
                .flat_map(|resource| &resource.scope_spans)
                .flat_map(|scope| &scope.spans)
                .any(|span| {
                    span.trace_id == expected_trace
                        && span.name == "request"
                        && span.attributes.iter().any(|attribute| {
                            attribute.key == "method"
                                && format!("{:?}", attribute.value).contains("CreateSandbox")
                        })
                })
        });
        if found {
            break;
        }
        let names: Vec<(String, String)> = received
            .lock()
            .unwrap()
            .iter()
            .flat_map(|export| &export.resource_spans)
            .flat_map(|resource| &resource.scope_spans)
            .flat_map(|scope| &scope.spans)
            .map(|span| {
                (
                    span.name.clone(),
                    span.trace_id
                        .iter()
                        .map(|byte| format!("{byte:02x}"))
                        .collect(),
                )
            })
            .collect();
        assert!(
            Instant::now() < deadline,
            "no `request` span under trace {given} exported within 30 s; spans received: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
