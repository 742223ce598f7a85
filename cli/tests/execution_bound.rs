//! Issue 5, acceptance: execution-bound stop, request-id receipts, uncertain
//! driver outcomes and resumable watches — on three-replica clusters of real
//! `palisade gateway run` processes, with the real process driver and with
//! the fault-injecting driver wrapped around it.
//!
//! - A stop (or delete, or start) bound to an execution token acts only on
//!   that execution: after stop/start, or delete/recreate under the same
//!   name, the old token is refused (STALE_EXECUTION) and the new
//!   execution's process keeps running. Tokens that cannot be verified
//!   (forged, truncated, another cluster's) are refused, never ignored.
//! - The same with the replacement racing stale stops from many clients on
//!   every replica, across a leader transfer and a SIGTERM of the leader
//!   between the observation and the stops.
//! - A request id replays the original result (a success as a stale-target
//!   rejection), also after a leader change and a replica restart; with
//!   another payload it is refused (REQUEST_ID_REUSED).
//! - A driver stop that took effect but whose answer was lost stays
//!   pending (the caller sees its deadline or OUTCOME_PENDING) until the
//!   driver is observed; retrying the request id then answers STOPPED —
//!   never STALE_EXECUTION, never "no effect" — also across a leader kill.
//! - A watch resumed on another replica after its replica was killed
//!   delivers every change exactly once.
//!
//! Each test uses its own `sleep` argument (`sleep 53xx`) and looks only
//! under its own cluster's driver directory. The cluster (replicas and
//! every sandbox process) is killed when the test ends, also on failure.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_cli::client::{Client, ClientError};
use palisade_gateway::errors::reason_of;
use palisade_proto::v1;
use support::cluster::*;
use support::{KeepLogsOnFailure, alive};
use tokio::time::Instant;
use tonic::Code;

/// How long a phase of a test may take on a loaded two-core machine.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

fn by_name(name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: "default".into(),
        name: name.into(),
        id: String::new(),
    })
}

fn token_of(sandbox: &v1::Sandbox) -> String {
    assert!(
        !sandbox.execution_token.is_empty(),
        "every observation carries an execution token: {sandbox:?}"
    );
    sandbox.execution_token.clone()
}

fn shim_pid(sandbox: &v1::Sandbox) -> u32 {
    let handle = sandbox
        .status
        .as_ref()
        .and_then(|status| status.execution.as_ref())
        .map(|execution| execution.handle.clone())
        .unwrap_or_default();
    handle
        .split_whitespace()
        .find_map(|part| part.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no shim pid in the handle {handle:?}"))
}

fn expect_refusal<T: std::fmt::Debug>(
    answer: Result<T, ClientError>,
    code: Code,
    reason: &str,
    what: &str,
) {
    match answer {
        Ok(answer) => panic!("{what}: expected {code:?} {reason}, got {answer:?}"),
        Err(error) => assert_eq!(
            (error.code(), error.reason()),
            (Some(code), Some(reason.to_string())),
            "{what}: {error}"
        ),
    }
}

fn stop_request(
    sandbox: Option<v1::SandboxRef>,
    token: &str,
    request_id: &str,
) -> v1::StopSandboxRequest {
    v1::StopSandboxRequest {
        sandbox,
        request_id: request_id.into(),
        expected_execution: token.into(),
        ..Default::default()
    }
}

async fn stop(
    client: &mut Client,
    request: &v1::StopSandboxRequest,
) -> Result<v1::Sandbox, ClientError> {
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.stop_sandbox(request).await }
        })
        .await
}

async fn start(
    client: &mut Client,
    request: &v1::StartSandboxRequest,
) -> Result<v1::Sandbox, ClientError> {
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.start_sandbox(request).await }
        })
        .await
}

async fn delete(
    client: &mut Client,
    request: &v1::DeleteSandboxRequest,
) -> Result<v1::DeleteSandboxResponse, ClientError> {
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.delete_sandbox(request).await }
        })
        .await
}

async fn create(client: &mut Client, name: &str, marker: &str) -> v1::Sandbox {
    let request = v1::CreateSandboxRequest {
        name: name.into(),
        spec: Some(v1::SandboxSpec {
            command: vec!["sleep".into(), marker.into()],
            ..Default::default()
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    let sandbox = client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.create_sandbox(request).await }
        })
        .await
        .unwrap_or_else(|error| panic!("create {name}: {error}"));
    assert_eq!(phase_of(&sandbox), v1::SandboxPhase::Ready, "{sandbox:?}");
    sandbox
}

/// Stop or start by id, no precondition; waits for the result.
async fn plain_stop(client: &mut Client, id: &str) -> v1::Sandbox {
    let request = stop_request(by_id(id), "", &uuid::Uuid::new_v4().to_string());
    let sandbox = stop(client, &request)
        .await
        .unwrap_or_else(|error| panic!("stop {id}: {error}"));
    assert_eq!(phase_of(&sandbox), v1::SandboxPhase::Stopped, "{sandbox:?}");
    sandbox
}

async fn plain_start(client: &mut Client, id: &str) -> v1::Sandbox {
    let request = v1::StartSandboxRequest {
        sandbox: by_id(id),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    let sandbox = start(client, &request)
        .await
        .unwrap_or_else(|error| panic!("start {id}: {error}"));
    assert_eq!(phase_of(&sandbox), v1::SandboxPhase::Ready, "{sandbox:?}");
    sandbox
}

/// A client of exactly one replica (no other endpoint to fail over to).
fn pinned(uri: &str) -> Client {
    failover_client(vec![uri.to_string()])
}

/// Moves leadership to `target` through the CLI and waits until every
/// running replica agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_tokens_stop_nothing_and_request_ids_replay() {
    const MARKER: &str = "5301";
    let mut cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "stale_tokens_stop_nothing_and_request_ids_replay",
    };
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let endpoints = endpoints.as_str();
    let uris = cluster.all_uris();
    let mut client = failover_client(uris.clone());

    // Observe execution A (the token from `get -o json`), then stop/start
    // produces B.
    let created = cli_json_async(
        endpoints,
        &["sandbox", "create", "s", "--", "sleep", MARKER],
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let observed_a = cli_json_async(endpoints, &["sandbox", "get", "s"]).await;
    let token_a = observed_a["execution_token"].as_str().unwrap().to_string();
    assert!(!token_a.is_empty(), "{observed_a}");
    assert_eq!(observed_a["generation"], 1);
    cli_json_async(endpoints, &["sandbox", "stop", "s"]).await;
    // A start bound to the stopped execution A launches B.
    cli_json_async(
        endpoints,
        &["sandbox", "start", "s", "--expected-execution", &token_a],
    )
    .await;
    let observed_b = cli_json_async(endpoints, &["sandbox", "get", "s"]).await;
    assert_eq!(observed_b["generation"], 2);
    let token_b = observed_b["execution_token"].as_str().unwrap().to_string();
    assert_ne!(token_a, token_b);
    let pid_b = observed_b["pid"].as_u64().unwrap() as u32;
    let running_b = BTreeSet::from([(id.clone(), 2)]);

    // A stop with A's token: STALE_EXECUTION, through the CLI...
    let output = cli_async(
        endpoints,
        &[
            "sandbox",
            "stop",
            "s",
            "--expected-execution",
            &token_a,
            "--request-id",
            "stale-1",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STALE_EXECUTION"), "{stderr}");
    assert!(alive(pid_b), "B runs after a stale stop");
    // ...and through the API: ABORTED, also when the token alone names
    // the sandbox, and for delete and start bound to A.
    let stale_1 = stop_request(by_name("s"), &token_a, "stale-1");
    expect_refusal(
        stop(&mut client, &stale_1).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "the CLI's stale stop, replayed",
    );
    let stale_2 = stop_request(None, &token_a, "stale-2");
    expect_refusal(
        stop(&mut client, &stale_2).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "a stale stop naming the sandbox by its token",
    );
    let stale_delete = v1::DeleteSandboxRequest {
        sandbox: by_name("s"),
        request_id: "stale-delete".into(),
        expected_execution: token_a.clone(),
        ..Default::default()
    };
    expect_refusal(
        delete(&mut client, &stale_delete).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "a delete bound to A",
    );
    let stale_start = v1::StartSandboxRequest {
        sandbox: by_name("s"),
        request_id: "stale-start".into(),
        expected_execution: token_a.clone(),
        ..Default::default()
    };
    expect_refusal(
        start(&mut client, &stale_start).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "a start bound to A",
    );
    // The request id of a rejection, reused with another token: refused,
    // and B is not stopped by it.
    expect_refusal(
        stop(
            &mut client,
            &stop_request(by_name("s"), &token_b, "stale-1"),
        )
        .await,
        Code::AlreadyExists,
        "REQUEST_ID_REUSED",
        "stale-1 reused with B's token",
    );
    assert_exactly_running(&cluster.driver_dir, &running_b, "sleep").await;
    assert!(alive(pid_b));

    // A stop with B's token stops B; its retry replays the same answer.
    let stop_b = stop_request(by_name("s"), &token_b, "stop-b");
    let stopped = stop(&mut client, &stop_b).await.expect("stop B");
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped);
    assert_eq!(generation_of(&stopped), 2);
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
    let replayed = stop(&mut client, &stop_b).await.expect("replay stop-b");
    assert_eq!(replayed, stopped, "a retry replays the original answer");
    expect_refusal(
        stop(&mut client, &stop_request(by_name("s"), &token_a, "stop-b")).await,
        Code::AlreadyExists,
        "REQUEST_ID_REUSED",
        "stop-b reused with A's token",
    );

    // The replays hold on every replica after a leader change...
    let target = *all.iter().find(|id| **id != leader).unwrap();
    let leader = cluster.transfer_leader(&all, target).await;
    for uri in &uris {
        let mut single = pinned(uri);
        expect_refusal(
            stop(&mut single, &stale_1).await,
            Code::Aborted,
            "STALE_EXECUTION",
            &format!("stale-1 replayed on {uri} after a leader transfer"),
        );
        let again = stop(&mut single, &stop_b).await.expect("replay stop-b");
        assert_eq!(again, stopped, "{uri}: stop-b replayed after a transfer");
    }
    // ...and after the leader's restart (SIGKILL, then started again).
    cluster.replica_mut(leader).kill();
    cluster
        .replica_mut(leader)
        .start()
        .expect("start the replica");
    cluster.wait_for_leader(&all).await;
    let mut restarted = pinned(&cluster.replica(leader).uri());
    expect_refusal(
        stop(&mut restarted, &stale_1).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "stale-1 replayed on the restarted replica",
    );
    let again = stop(&mut restarted, &stop_b)
        .await
        .expect("replay stop-b on the restarted replica");
    assert_eq!(again, stopped, "stop-b replayed after a restart");
    expect_refusal(
        stop(
            &mut restarted,
            &stop_request(by_name("s"), &token_a, "stop-b"),
        )
        .await,
        Code::AlreadyExists,
        "REQUEST_ID_REUSED",
        "stop-b reused after a restart",
    );

    // Delete and recreate under the same name: the old sandbox's token
    // does not reach the new one.
    let started = plain_start(&mut client, &id).await;
    let token_c = token_of(&started);
    cli_json_async(endpoints, &["sandbox", "delete", "s"]).await;
    let replacement = cli_json_async(
        endpoints,
        &["sandbox", "create", "s", "--", "sleep", MARKER],
    )
    .await;
    let new_id = replacement["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    let pid_d = replacement["pid"].as_u64().unwrap() as u32;
    let output = cli_async(
        endpoints,
        &["sandbox", "stop", "s", "--expected-execution", &token_c],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STALE_EXECUTION"), "{stderr}");
    let stale_delete = v1::DeleteSandboxRequest {
        sandbox: by_name("s"),
        request_id: uuid::Uuid::new_v4().to_string(),
        expected_execution: token_c.clone(),
        ..Default::default()
    };
    expect_refusal(
        delete(&mut client, &stale_delete).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "a delete bound to the deleted sandbox's execution",
    );
    // The token alone names the deleted sandbox, which is gone.
    let answer = stop(
        &mut client,
        &stop_request(None, &token_c, &uuid::Uuid::new_v4().to_string()),
    )
    .await;
    expect_refusal(
        answer,
        Code::NotFound,
        "SANDBOX_NOT_FOUND",
        "a stop by the deleted sandbox's token",
    );
    assert!(alive(pid_d), "the replacement runs");

    // Tokens the cluster cannot verify are refused, never ignored: forged
    // (another generation, an altered MAC), truncated, garbage, and a
    // genuine token of another cluster.
    let token_d = replacement["execution_token"].as_str().unwrap().to_string();
    let parts: Vec<&str> = token_d.split('.').collect();
    assert_eq!(parts.len(), 4, "{token_d}");
    let other_generation = format!("{}.{}.{}.{}", parts[0], parts[1], 7, parts[3]);
    let mut mac: Vec<char> = parts[3].chars().collect();
    mac[0] = if mac[0] == '0' { '1' } else { '0' };
    let altered_mac = format!(
        "{}.{}.{}.{}",
        parts[0],
        parts[1],
        parts[2],
        mac.into_iter().collect::<String>()
    );
    let truncated = token_d[..token_d.len() - 6].to_string();
    let no_mac = format!("{}.{}.{}", parts[0], parts[1], parts[2]);
    let other_cluster = {
        let other = Cluster::start(1, &["--driver", "noop"]);
        other.wait_for_leader(&[1]).await;
        let mut foreign = failover_client(other.all_uris());
        token_of(&create(&mut foreign, "s", MARKER).await)
    };
    let garbage = "not-a-token".to_string();
    for bad in [
        &other_generation,
        &altered_mac,
        &truncated,
        &no_mac,
        &other_cluster,
        &garbage,
    ] {
        let rid = uuid::Uuid::new_v4().to_string();
        expect_refusal(
            stop(&mut client, &stop_request(by_name("s"), bad, &rid)).await,
            Code::FailedPrecondition,
            "UNVERIFIABLE_EXECUTION_TOKEN",
            &format!("stop with {bad:?}"),
        );
        expect_refusal(
            stop(&mut client, &stop_request(None, bad, &rid)).await,
            Code::FailedPrecondition,
            "UNVERIFIABLE_EXECUTION_TOKEN",
            &format!("stop with only {bad:?}"),
        );
        let request = v1::DeleteSandboxRequest {
            sandbox: by_name("s"),
            request_id: rid.clone(),
            expected_execution: bad.clone(),
            ..Default::default()
        };
        expect_refusal(
            delete(&mut client, &request).await,
            Code::FailedPrecondition,
            "UNVERIFIABLE_EXECUTION_TOKEN",
            &format!("delete with {bad:?}"),
        );
    }
    let output = cli_async(
        endpoints,
        &["sandbox", "stop", "s", "--expected-execution", &altered_mac],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("UNVERIFIABLE_EXECUTION_TOKEN"), "{stderr}");
    assert!(alive(pid_d), "no unverifiable token stopped the sandbox");
    assert_exactly_running(
        &cluster.driver_dir,
        &BTreeSet::from([(new_id.clone(), 1)]),
        "sleep",
    )
    .await;
    let output = cli_async(
        endpoints,
        &["sandbox", "stop", "s", "--expected-execution", &token_d],
    )
    .await;
    assert!(output.status.success(), "the genuine token stops it");
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
}

/// One stale stop's answer.
#[derive(Debug)]
enum StaleAnswer {
    /// It stopped the observed execution (it came before the replacement).
    Stopped,
    /// Refused: the replacement came first.
    Stale,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_stops_racing_the_replacement_never_stop_it() {
    stale_stops_race(
        &[],
        "5302",
        "stale_stops_racing_the_replacement_never_stop_it",
    )
    .await;
}

/// The same under the fault-injecting driver: each leader's first launch,
/// stop and removal take effect and lose their answer, later ones
/// sometimes do, and inspections sometimes fail (seeded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_stops_racing_the_replacement_under_driver_faults() {
    const PLAN: &str = r#"{"seed": 5306, "launch": {"uncertain_after_first": 1, "uncertain_after_rate": 0.2}, "stop": {"uncertain_after_first": 1, "uncertain_after_rate": 0.3}, "inspect": {"uncertain_before_rate": 0.2}, "remove": {"uncertain_after_first": 1, "uncertain_after_rate": 0.3}}"#;
    stale_stops_race(
        &["--driver", "fault", "--fault-plan", PLAN],
        "5306",
        "stale_stops_racing_the_replacement_under_driver_faults",
    )
    .await;
}

async fn stale_stops_race(gateway_args: &[&str], marker: &str, test: &'static str) {
    const SANDBOXES: usize = 3;
    const RACERS: usize = 6;
    let mut cluster = Cluster::start(3, gateway_args);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test,
    };
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let uris = cluster.all_uris();
    let mut client = failover_client(uris.clone());
    let mut ids = Vec::new();
    for index in 0..SANDBOXES {
        ids.push(id_of(
            &create(&mut client, &format!("r-{index}"), marker).await,
        ));
    }

    let mut running = all.clone();
    for round in 0..2u64 {
        let generation = round + 1;
        // Observe the current executions through a follower.
        let mut observer = pinned(&uris[(leader as usize) % uris.len()]);
        let mut tokens = Vec::new();
        for id in &ids {
            let observed = get_sandbox(&mut observer, by_id(id).unwrap())
                .await
                .expect("observed");
            assert_eq!(generation_of(&observed), generation);
            tokens.push(token_of(&observed));
        }
        // A leader handoff between the observation and the stops: a
        // transfer in the first round, a SIGTERM of the leader in the
        // second (it hands off, then exits).
        let (current_leader, _) = cluster.wait_for_leader(&running).await;
        if round == 0 {
            let target = *running.iter().find(|id| **id != current_leader).unwrap();
            cluster.transfer_leader(&running, target).await;
        } else {
            let status = cluster.replica_mut(current_leader).terminate();
            assert!(status.success(), "the leader exits cleanly: {status:?}");
            running.retain(|id| *id != current_leader);
            cluster.wait_for_leader(&running).await;
        }
        let live_uris = cluster.uris(&running);

        // The replacement (stop, then start: generation + 1) races stale
        // stops from clients entering through every live replica.
        let answers = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for (id, token) in ids.iter().zip(&tokens) {
            let mut replacer = failover_client(live_uris.clone());
            let replaced = id.clone();
            tasks.spawn(async move {
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..100))).await;
                plain_stop(&mut replacer, &replaced).await;
                let started = plain_start(&mut replacer, &replaced).await;
                assert_eq!(generation_of(&started), generation + 1);
            });
            for racer in 0..RACERS {
                let mut rotated = live_uris.clone();
                rotated.rotate_left(racer % live_uris.len());
                let mut client = failover_client(rotated);
                let answers = answers.clone();
                let request = stop_request(
                    if racer % 2 == 0 { by_id(id) } else { None },
                    token,
                    &uuid::Uuid::new_v4().to_string(),
                );
                let id = id.clone();
                tasks.spawn(async move {
                    let patience = Duration::from_millis(rand::random_range(0..1500));
                    tokio::time::sleep(patience).await;
                    let answer = match stop(&mut client, &request).await {
                        Ok(sandbox) => {
                            assert_eq!(id_of(&sandbox), id);
                            assert_eq!(
                                generation_of(&sandbox),
                                generation,
                                "a stale stop answered with another execution: {sandbox:?}"
                            );
                            assert!(
                                matches!(
                                    phase_of(&sandbox),
                                    v1::SandboxPhase::Stopped | v1::SandboxPhase::Starting
                                ),
                                "{sandbox:?}"
                            );
                            StaleAnswer::Stopped
                        }
                        Err(error) => {
                            assert_eq!(
                                (error.code(), error.reason().as_deref()),
                                (Some(Code::Aborted), Some("STALE_EXECUTION")),
                                "{error}"
                            );
                            StaleAnswer::Stale
                        }
                    };
                    answers.lock().unwrap().push(answer);
                });
            }
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a racing client failed");
        }
        let (total, stale) = {
            let answers = answers.lock().unwrap();
            let stale = answers
                .iter()
                .filter(|answer| matches!(answer, StaleAnswer::Stale))
                .count();
            (answers.len(), stale)
        };
        eprintln!("round {round}: {total} stale stops, {stale} refused as stale");
        assert!(stale > 0, "no stale stop raced the replacement");

        // Every replacement runs: generation + 1, its process alive.
        let mut check = failover_client(live_uris.clone());
        let sandboxes = wait_settled(&mut check, PHASE_TIMEOUT).await;
        let mut expected = BTreeSet::new();
        for id in &ids {
            let sandbox = sandboxes
                .iter()
                .find(|sandbox| id_of(sandbox) == *id)
                .expect("the sandbox exists");
            assert_eq!(phase_of(sandbox), v1::SandboxPhase::Ready, "{sandbox:?}");
            assert_eq!(generation_of(sandbox), generation + 1);
            assert!(alive(shim_pid(sandbox)));
            expected.insert((id.clone(), generation + 1));
        }
        assert_exactly_running(&cluster.driver_dir, &expected, "sleep").await;
    }

    for id in &ids {
        let request = v1::DeleteSandboxRequest {
            sandbox: by_id(id),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        };
        delete(&mut client, &request).await.expect("delete");
    }
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
    if gateway_args.contains(&"fault") {
        let injected = cluster
            .replicas
            .iter()
            .any(|replica| replica.log().contains("injected fault"));
        assert!(injected, "the fault plan injected no fault");
    }
}

/// What a short-deadline call that must not be decided yet may answer.
fn is_pending(status: &tonic::Status) -> bool {
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => true,
        Code::Unavailable => reason_of(status).as_deref() == Some("OUTCOME_PENDING"),
        _ => false,
    }
}

/// Retries `request` with short deadlines on the given replicas until it
/// is answered; every answer before must be "pending". Returns the answer.
async fn stop_until_answered(uris: &[String], request: &v1::StopSandboxRequest) -> v1::Sandbox {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut attempt = 0usize;
    loop {
        let uri = &uris[attempt % uris.len()];
        attempt += 1;
        if let Some(channel) = channel(uri, Duration::from_secs(1)).await {
            match v1::palisade_client::PalisadeClient::new(channel)
                .stop_sandbox(request.clone())
                .await
            {
                Ok(answer) => return answer.into_inner(),
                Err(status) => assert!(
                    is_pending(&status) || reason_of(&status).as_deref() == Some("NO_LEADER"),
                    "attempt {attempt} on {uri}: a pending stop must not be decided otherwise: {status:?}"
                ),
            }
        }
        assert!(
            Instant::now() < deadline,
            "the stop was never answered after {attempt} attempts"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uncertain_stops_stay_pending_until_observed_and_replay_as_stopped() {
    const MARKER: &str = "5303";
    // Every stop takes effect and loses its answer, five times over; every
    // inspection is slow and uncertain. Only the sixth stop call (which
    // finds the execution gone) confirms it. Each replica's fault driver
    // counts its own calls: a replica that never led starts afresh.
    const PLAN: &str = r#"{"stop": {"uncertain_after_first": 5}, "inspect": {"latency_ms": 300, "uncertain_before_first": 1000000}}"#;
    let mut cluster = Cluster::start(3, &["--driver", "fault", "--fault-plan", PLAN]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "uncertain_stops_stay_pending_until_observed_and_replay_as_stopped",
    };
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let uris = cluster.all_uris();
    let follower_uris: Vec<String> = cluster.uris(
        &all.iter()
            .copied()
            .filter(|id| *id != leader)
            .collect::<Vec<_>>(),
    );
    let mut client = failover_client(uris.clone());
    let sandbox = create(&mut client, "u", MARKER).await;
    let id = id_of(&sandbox);
    let observed = get_sandbox(&mut client, by_id(&id).unwrap()).await.unwrap();
    let token_a = token_of(&observed);
    let log_offset = cluster.replica(leader).log_len();

    // A caller with a short deadline: the stop is not decided in time.
    let stop_a = stop_request(by_id(&id), &token_a, "uncertain-stop-a");
    let mut short = direct_client(&follower_uris[0], Duration::from_secs(1)).await;
    let status = short
        .stop_sandbox(stop_a.clone())
        .await
        .expect_err("the stop cannot be confirmed within a second");
    assert!(is_pending(&status), "{status:?}");
    // The stop took effect (the command is gone)...
    support::eventually("the stop takes effect", Duration::from_secs(30), || {
        support::pids_running(&["sleep", MARKER]).is_empty()
    });
    // ...but its outcome is unknown: the operation is still in flight.
    let now = get_sandbox(&mut client, by_id(&id).unwrap()).await.unwrap();
    assert_eq!(phase_of(&now), v1::SandboxPhase::Stopping, "{now:?}");
    let operation = operation_of(&now).expect("the stop is in flight");
    assert_eq!(
        (operation.kind, operation.generation),
        (v1::OperationKind::Stop as i32, 1)
    );
    // Retrying the request id answers STOPPED once the driver confirms.
    let stopped = stop_until_answered(&uris, &stop_a).await;
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped, "{stopped:?}");
    assert_eq!(generation_of(&stopped), 1);
    let replayed = stop(&mut client, &stop_a).await.expect("replay");
    assert_eq!(replayed, stopped);
    assert!(
        cluster
            .replica(leader)
            .log_since(log_offset)
            .contains("stop not confirmed"),
        "the executor went through the uncertain path"
    );

    // Execution B: a stop with A's token is stale, also under faults.
    let started = plain_start(&mut client, &id).await;
    assert_eq!(generation_of(&started), 2);
    let token_b = token_of(&started);
    let pid_b = shim_pid(&started);
    expect_refusal(
        stop(&mut client, &stop_request(by_id(&id), &token_a, "late-a")).await,
        Code::Aborted,
        "STALE_EXECUTION",
        "A's token after the restart",
    );
    assert!(alive(pid_b));

    // An uncertain stop of B, and the leader is killed while it is
    // pending: the next leader resolves it and the retry answers STOPPED.
    // (The first leader's driver used up its faults; a replica that never
    // led has all of its own, so it leads now.)
    let fresh = *all.iter().find(|node| **node != leader).unwrap();
    let leader = cluster.transfer_leader(&all, fresh).await;
    let stop_b = stop_request(by_id(&id), &token_b, "uncertain-stop-b");
    let follower = all.iter().copied().find(|node| *node != leader).unwrap();
    let mut short = direct_client(&cluster.replica(follower).uri(), Duration::from_secs(1)).await;
    let status = short
        .stop_sandbox(stop_b.clone())
        .await
        .expect_err("the stop cannot be confirmed within a second");
    assert!(is_pending(&status), "{status:?}");
    cluster.replica_mut(leader).kill();
    let running: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    cluster.wait_for_leader(&running).await;
    let stopped = stop_until_answered(&cluster.uris(&running), &stop_b).await;
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped, "{stopped:?}");
    assert_eq!(generation_of(&stopped), 2);
    assert!(!alive(pid_b));
    let mut survivors = failover_client(cluster.uris(&running));
    let replayed = stop(&mut survivors, &stop_b).await.expect("replay");
    assert_eq!(replayed, stopped);
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
}

/// The fields of an event a watcher compares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    resource_version: u64,
    kind: v1::SandboxEventType,
    name: String,
    phase: v1::SandboxPhase,
    generation: u64,
    token: String,
}

fn seen(event: &v1::SandboxEvent) -> Seen {
    let sandbox = event.sandbox.clone().unwrap_or_default();
    Seen {
        resource_version: event.resource_version,
        kind: v1::SandboxEventType::try_from(event.r#type).unwrap(),
        name: sandbox.metadata.clone().unwrap_or_default().name,
        phase: phase_of(&sandbox),
        generation: generation_of(&sandbox),
        token: sandbox.execution_token.clone(),
    }
}

/// Reads `stream` into `into` until it ends, fails, or delivers the
/// DELETED event of `last`.
async fn collect(
    stream: &mut tonic::Streaming<v1::SandboxEvent>,
    into: &Arc<Mutex<Vec<Seen>>>,
    last: &str,
) -> bool {
    loop {
        match stream.message().await {
            Ok(Some(event)) => {
                let event = seen(&event);
                let end = event.kind == v1::SandboxEventType::Deleted && event.name == last;
                into.lock().unwrap().push(event);
                if end {
                    return true;
                }
            }
            Ok(None) | Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_resumed_on_another_replica_delivers_every_change_once() {
    const MARKER: &str = "5304";
    let mut cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "watch_resumed_on_another_replica_delivers_every_change_once",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    // Replica 1 leads and serves the watch; it will be killed.
    cluster.transfer_leader(&all, 1).await;
    let workspace = v1::CreateWorkspaceRequest {
        name: "watched".into(),
    };
    let mut client = failover_client(cluster.uris(&[2, 3]));
    let created = client
        .palisade(|mut api| {
            let request = workspace.clone();
            async move { api.create_workspace(request).await }
        })
        .await
        .expect("create workspace");
    let from = created.resource_version;
    let watch = |resource_version: u64| v1::WatchSandboxesRequest {
        workspace: "watched".into(),
        resource_version,
        ..Default::default()
    };
    let in_workspace = |name: &str| v1::CreateSandboxRequest {
        workspace: "watched".into(),
        name: name.into(),
        spec: Some(v1::SandboxSpec {
            command: vec!["sleep".into(), MARKER.into()],
            ..Default::default()
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };

    // A reference watcher on replica 3 that stays connected throughout.
    let reference = Arc::new(Mutex::new(Vec::new()));
    let mut reference_stream = direct_client(&cluster.replica(3).uri(), PHASE_TIMEOUT)
        .await
        .watch_sandboxes(watch(from))
        .await
        .expect("watch on replica 3")
        .into_inner();
    let reference_task = {
        let reference = reference.clone();
        tokio::spawn(async move { collect(&mut reference_stream, &reference, "w2").await })
    };
    // The watcher under test, on replica 1.
    let resumed = Arc::new(Mutex::new(Vec::new()));
    let mut first_stream = direct_client(&cluster.replica(1).uri(), PHASE_TIMEOUT)
        .await
        .watch_sandboxes(watch(from))
        .await
        .expect("watch on replica 1")
        .into_inner();
    let first_task = {
        let resumed = resumed.clone();
        tokio::spawn(async move { collect(&mut first_stream, &resumed, "w2").await })
    };

    let sandbox = client
        .palisade(|mut api| {
            let request = in_workspace("w");
            async move { api.create_sandbox(request).await }
        })
        .await
        .expect("create w");
    let id = id_of(&sandbox);
    plain_stop(&mut client, &id).await;
    // The watcher has seen these; then its replica (the leader) dies.
    support::eventually("the first watcher sees the stop", PHASE_TIMEOUT, || {
        resumed
            .lock()
            .unwrap()
            .iter()
            .any(|event| event.phase == v1::SandboxPhase::Stopped)
    });
    cluster.replica_mut(1).kill();
    let ended = tokio::time::timeout(PHASE_TIMEOUT, first_task)
        .await
        .expect("the stream of a killed replica ends")
        .unwrap();
    assert!(!ended, "the first stream broke before the end");
    let last_seen = resumed
        .lock()
        .unwrap()
        .last()
        .expect("events before the kill")
        .resource_version;
    // Changes while the watcher is away.
    cluster.wait_for_leader(&[2, 3]).await;
    plain_start(&mut client, &id).await;
    plain_stop(&mut client, &id).await;
    // Resume on replica 2 from the last resource version seen.
    let mut second_stream = direct_client(&cluster.replica(2).uri(), PHASE_TIMEOUT)
        .await
        .watch_sandboxes(watch(last_seen))
        .await
        .expect("watch on replica 2")
        .into_inner();
    let second_task = {
        let resumed = resumed.clone();
        tokio::spawn(async move { collect(&mut second_stream, &resumed, "w2").await })
    };
    plain_start(&mut client, &id).await;
    let request = v1::DeleteSandboxRequest {
        sandbox: by_id(&id),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    delete(&mut client, &request).await.expect("delete w");
    let w2 = client
        .palisade(|mut api| {
            let request = in_workspace("w2");
            async move { api.create_sandbox(request).await }
        })
        .await
        .expect("create w2");
    let request = v1::DeleteSandboxRequest {
        sandbox: by_id(&id_of(&w2)),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    delete(&mut client, &request).await.expect("delete w2");
    for task in [second_task, reference_task] {
        let ended = tokio::time::timeout(PHASE_TIMEOUT, task)
            .await
            .expect("the watchers see w2 deleted")
            .unwrap();
        assert!(ended, "a stream broke before the end");
    }

    let resumed = resumed.lock().unwrap().clone();
    let reference = reference.lock().unwrap().clone();
    // No gap, no duplicate: the union of both connections is exactly what
    // the uninterrupted watcher saw.
    assert_eq!(resumed, reference);
    let versions: Vec<u64> = resumed.iter().map(|event| event.resource_version).collect();
    assert!(
        versions.windows(2).all(|pair| pair[0] < pair[1]),
        "{versions:?}"
    );
    // And it is every phase change of what the clients did, in order.
    use v1::SandboxEventType::{Added, Deleted, Modified};
    use v1::SandboxPhase::*;
    let expected = [
        ("w", Added, Provisioning, 1),
        ("w", Modified, Ready, 1),
        ("w", Modified, Stopping, 1),
        ("w", Modified, Stopped, 1),
        ("w", Modified, Starting, 2),
        ("w", Modified, Ready, 2),
        ("w", Modified, Stopping, 2),
        ("w", Modified, Stopped, 2),
        ("w", Modified, Starting, 3),
        ("w", Modified, Ready, 3),
        ("w", Modified, Deleting, 3),
        ("w", Deleted, Deleting, 3),
        ("w2", Added, Provisioning, 1),
        ("w2", Modified, Ready, 1),
        ("w2", Modified, Deleting, 1),
        ("w2", Deleted, Deleting, 1),
    ];
    let got: Vec<(&str, v1::SandboxEventType, v1::SandboxPhase, u64)> = resumed
        .iter()
        .map(|event| {
            (
                event.name.as_str(),
                event.kind,
                event.phase,
                event.generation,
            )
        })
        .collect();
    assert_eq!(got, expected);
    // Each event carries the token of the execution it is about.
    let w_id = id;
    let w2_id = id_of(&w2);
    for event in &resumed {
        let id = if event.name == "w" { &w_id } else { &w2_id };
        let parts: Vec<&str> = event.token.split('.').collect();
        assert_eq!(
            (parts.get(1).copied(), parts.get(2).copied()),
            (
                Some(id.as_str()),
                Some(event.generation.to_string().as_str())
            ),
            "{event:?}"
        );
    }
    let all_seen: BTreeSet<String> = resumed.iter().map(|event| event.token.clone()).collect();
    assert_eq!(all_seen.len(), 4, "one token per execution: {all_seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_resumed_after_its_initial_listing_repeats_nothing() {
    const MARKER: &str = "5305";
    let cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_watch_resumed_after_its_initial_listing_repeats_nothing",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let endpoints = endpoints.as_str();
    let create = |name: &'static str| async move {
        cli_json_async(
            endpoints,
            &["sandbox", "create", name, "--", "sleep", MARKER],
        )
        .await
    };
    // History before the watch starts: `keep` is listed; `gone` was
    // created and deleted after `keep` last changed.
    create("keep").await;
    create("gone").await;
    cli_json_async(endpoints, &["sandbox", "delete", "gone"]).await;

    // A script watches from the start (a listing), then disconnects.
    let output = cli_async(
        endpoints,
        &["-o", "json", "sandbox", "watch", "--max-events", "1"],
    )
    .await;
    assert!(output.status.success());
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON event");
    assert_eq!(
        (listed["type"].as_str(), listed["sandbox"]["name"].as_str()),
        (Some("ADDED"), Some("keep")),
        "{listed}"
    );
    let resume_from = listed["resource_version"].as_u64().unwrap().to_string();

    // It resumes from the resource version it saw: it gets the changes
    // after its listing, and nothing the listing already reflected.
    cli_json_async(endpoints, &["sandbox", "stop", "keep"]).await;
    let output = cli_async(
        endpoints,
        &[
            "-o",
            "json",
            "sandbox",
            "watch",
            "--resource-version",
            &resume_from,
            "--max-events",
            "2",
        ],
    )
    .await;
    assert!(output.status.success());
    let resumed: Vec<(String, String, String)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).expect("a JSON event");
            (
                event["type"].as_str().unwrap().to_string(),
                event["sandbox"]["name"].as_str().unwrap().to_string(),
                event["sandbox"]["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String)> = [
        ("MODIFIED", "keep", "STOPPING"),
        ("MODIFIED", "keep", "STOPPED"),
    ]
    .iter()
    .map(|(kind, name, phase)| (kind.to_string(), name.to_string(), phase.to_string()))
    .collect();
    assert_eq!(resumed, expected);
    cli_json_async(endpoints, &["sandbox", "delete", "keep"]).await;
}
