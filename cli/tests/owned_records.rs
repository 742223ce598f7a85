//! Issue 4, acceptance: identity-bound delete, durable cleanup of the
//! records a sandbox owns, and workspace deletion — on a three-replica
//! cluster of real `palisade gateway run` processes with the real process
//! driver.
//!
//! - A delete bound to an id (`expected_sandbox_id`) never deletes a
//!   same-name replacement: first the race of the issue step by step, then
//!   many clients racing delete-and-recreate through every replica. Checked
//!   against the answers (every successful delete deleted the id it
//!   expected), the replicated state (exactly the sandboxes no
//!   acknowledged delete removed are left) and the process table (exactly
//!   their executions run).
//! - Deleting sandboxes that own hundreds of SSH sessions and a policy,
//!   then at once their workspace: every call succeeds, and nothing of them
//!   is left on any replica.
//! - The CLI's delete forms and workspace deletion through the real binary:
//!   exit codes, messages, `--help`.
//!
//! Each test uses its own `sleep` argument (`sleep 52xx`) and looks only
//! under its own cluster's driver directory, so process-table checks never
//! see another test's sandboxes. The cluster (replicas and every sandbox
//! process) is killed when the test ends, also when it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_cli::client::{Client, ClientError};
use palisade_proto::v1;
use support::cluster::*;
use support::{KeepLogsOnFailure, alive};
use tokio::time::Instant;
use tonic::Code;

/// How long a phase of a test may take on a loaded two-core machine.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

fn sleep_command(marker: &str) -> Vec<String> {
    vec!["sleep".into(), marker.into()]
}

fn by_name(workspace: &str, name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: workspace.to_string(),
        name: name.to_string(),
        id: String::new(),
    })
}

/// (code, reason) of a failed call.
fn code_and_reason(error: &ClientError) -> (Option<Code>, Option<String>) {
    (error.code(), error.reason())
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

async fn create_in(
    client: &mut Client,
    workspace: &str,
    name: &str,
    marker: &str,
) -> Result<v1::Sandbox, ClientError> {
    let request = v1::CreateSandboxRequest {
        workspace: workspace.to_string(),
        name: name.to_string(),
        spec: Some(v1::SandboxSpec {
            command: sleep_command(marker),
            ..Default::default()
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.create_sandbox(request).await }
        })
        .await
}

async fn create_ready(
    client: &mut Client,
    workspace: &str,
    name: &str,
    marker: &str,
) -> v1::Sandbox {
    let sandbox = create_in(client, workspace, name, marker)
        .await
        .unwrap_or_else(|error| panic!("create {name}: {error}"));
    assert_eq!(phase_of(&sandbox), v1::SandboxPhase::Ready, "{sandbox:?}");
    sandbox
}

async fn delete(
    client: &mut Client,
    request: v1::DeleteSandboxRequest,
) -> Result<v1::DeleteSandboxResponse, ClientError> {
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.delete_sandbox(request).await }
        })
        .await
}

fn delete_expecting(workspace: &str, name: &str, expected_id: &str) -> v1::DeleteSandboxRequest {
    v1::DeleteSandboxRequest {
        sandbox: by_name(workspace, name),
        request_id: uuid::Uuid::new_v4().to_string(),
        expected_sandbox_id: expected_id.to_string(),
        ..Default::default()
    }
}

/// The ids of the sandboxes whose name starts with `prefix` (linearizable).
async fn ids_with_prefix(client: &mut Client, prefix: &str) -> BTreeSet<String> {
    list_sandboxes(client)
        .await
        .iter()
        .filter(|sandbox| {
            sandbox
                .metadata
                .as_ref()
                .is_some_and(|meta| meta.name.starts_with(prefix))
        })
        .map(id_of)
        .collect()
}

/// Waits until every replica applied the same index, and returns it with
/// each replica's state digest at that index.
async fn digests_at_equal_index(cluster: &Cluster) -> (u64, BTreeMap<u64, String>) {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let mut views = BTreeMap::new();
        for id in cluster.node_ids() {
            if let Some(info) = cluster_info(&cluster.replica(id).uri()).await {
                views.insert(id, (info.applied_index, info.state_digest));
            }
        }
        let indexes: BTreeSet<u64> = views.values().map(|(index, _)| *index).collect();
        if views.len() == cluster.node_ids().len() && indexes.len() == 1 {
            let index = *indexes.first().unwrap();
            return (
                index,
                views
                    .into_iter()
                    .map(|(id, (_, digest))| (id, digest))
                    .collect(),
            );
        }
        assert!(
            Instant::now() < deadline,
            "the replicas never reported the same applied index: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_bound_to_an_id_never_deletes_a_replacement() {
    const MARKER: &str = "5201";
    let cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "delete_bound_to_an_id_never_deletes_a_replacement",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let uris = cluster.all_uris();
    // Client A enters through replica 1, client B through replica 2.
    let mut a = failover_client(vec![uris[0].clone()]);
    let mut b = failover_client(vec![uris[1].clone()]);

    // --- The race of the issue, step by step. ---
    create_ready(&mut b, "default", "x", MARKER).await;
    let seen = get_sandbox(&mut a, by_name("default", "x").unwrap())
        .await
        .expect("A reads x");
    let a1 = id_of(&seen);
    let deleted = delete(
        &mut b,
        v1::DeleteSandboxRequest {
            sandbox: by_name("default", "x"),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        },
    )
    .await
    .expect("B deletes x");
    assert_eq!((deleted.id.as_str(), deleted.deleted), (a1.as_str(), true));
    let replacement = create_ready(&mut b, "default", "x", MARKER).await;
    let b1 = id_of(&replacement);
    assert_ne!(a1, b1);

    let stale = delete_expecting("default", "x", &a1);
    let error = delete(&mut a, stale.clone())
        .await
        .expect_err("A's delete bound to A1 must not delete B1");
    assert_eq!(
        code_and_reason(&error),
        (
            Some(Code::Aborted),
            Some("SANDBOX_IDENTITY_MISMATCH".into())
        ),
        "{error}"
    );
    assert!(
        !error.to_string().contains(&b1),
        "the mismatch must not disclose the current id: {error}"
    );
    // Retrying the same request replays the same rejection.
    let again = delete(&mut a, stale).await.expect_err("replayed rejection");
    assert_eq!(code_and_reason(&again), code_and_reason(&error));
    let current = get_sandbox(&mut a, by_name("default", "x").unwrap())
        .await
        .expect("x still exists");
    assert_eq!(id_of(&current), b1, "x is still B1");
    assert_eq!(phase_of(&current), v1::SandboxPhase::Ready);
    let b1_shim = shim_pid(&replacement);
    assert!(alive(b1_shim), "B1's shim {b1_shim} runs");
    assert_exactly_running(
        &cluster.driver_dir,
        &BTreeSet::from([(b1.clone(), 1)]),
        "sleep",
    )
    .await;
    // Delete by id alone never touches a same-name replacement either.
    let error = delete(
        &mut a,
        v1::DeleteSandboxRequest {
            sandbox: by_id(&a1),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        },
    )
    .await
    .expect_err("A1 is gone");
    assert_eq!(error.code(), Some(Code::NotFound), "{error}");
    assert!(alive(b1_shim), "B1 still runs after a delete of A1 by id");

    // --- Many racing clients, through every replica. ---
    //
    // Per name, a replacer creates a sandbox, waits until a racer has read
    // it, deletes it (by id) and creates the next one, round after round.
    // Racers read the name, usually wait for the replacement, and delete
    // the name bound to the id they read. Every answer is recorded.
    const NAMES: usize = 3;
    const ROUNDS: usize = 6;
    const RACERS_PER_NAME: usize = 2;
    #[derive(Default)]
    struct Record {
        created: BTreeSet<String>,
        deleted: BTreeSet<String>,
        mismatches: usize,
        failures: Vec<String>,
    }
    let record = Arc::new(Mutex::new(Record::default()));
    let done = Arc::new(AtomicBool::new(false));
    let client_for = |seat: usize| {
        let mut rotated = uris.clone();
        rotated.rotate_left(seat % uris.len());
        failover_client(rotated)
    };
    let mut replacers = Vec::new();
    let mut racers = Vec::new();
    for slot in 0..NAMES {
        let name = format!("race-{slot}");
        // The ids racers have read; the id the name was given last; whether
        // the replacer is done (its last sandbox is meant to survive).
        let read_ids = Arc::new(Mutex::new(BTreeSet::<String>::new()));
        let (current_tx, current_rx) = tokio::sync::watch::channel(String::new());
        let finished = Arc::new(AtomicBool::new(false));
        let mut client = client_for(slot);
        let (replacer_record, replacer_name, replacer_reads, replacer_finished) = (
            record.clone(),
            name.clone(),
            read_ids.clone(),
            finished.clone(),
        );
        replacers.push(tokio::spawn(async move {
            let (name, record, read_ids, finished) = (
                replacer_name,
                replacer_record,
                replacer_reads,
                replacer_finished,
            );
            for round in 0..ROUNDS {
                let sandbox = loop {
                    match create_in(&mut client, "default", &name, MARKER).await {
                        Ok(sandbox) => break Some(sandbox),
                        // A racer may still be deleting the previous one.
                        Err(error) if error.reason().as_deref() == Some("NAME_TAKEN") => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(error) => {
                            record
                                .lock()
                                .unwrap()
                                .failures
                                .push(format!("create {name}: {error}"));
                            break None;
                        }
                    }
                };
                let Some(sandbox) = sandbox else { continue };
                let id = id_of(&sandbox);
                record.lock().unwrap().created.insert(id.clone());
                if round == ROUNDS - 1 {
                    // The last one is left running.
                    finished.store(true, Ordering::SeqCst);
                    current_tx.send_replace(id.clone());
                    break;
                }
                current_tx.send_replace(id.clone());
                // Replace it once a racer has read it.
                let deadline = Instant::now() + Duration::from_secs(5);
                while !read_ids.lock().unwrap().contains(&id) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..30))).await;
                let request = v1::DeleteSandboxRequest {
                    sandbox: by_id(&id),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                };
                match delete(&mut client, request).await {
                    Ok(deleted) if deleted.id == id && deleted.deleted => {
                        record.lock().unwrap().deleted.insert(id);
                    }
                    Ok(other) => record
                        .lock()
                        .unwrap()
                        .failures
                        .push(format!("delete {id} answered {other:?}")),
                    // A racer deleted it first (bound to this very id).
                    Err(error) if error.code() == Some(Code::NotFound) => {}
                    Err(error) => record
                        .lock()
                        .unwrap()
                        .failures
                        .push(format!("delete {id}: {error}")),
                }
            }
        }));
        for racer in 0..RACERS_PER_NAME {
            let mut client = client_for(slot + racer + 1);
            let (record, done, name, read_ids, finished) = (
                record.clone(),
                done.clone(),
                name.clone(),
                read_ids.clone(),
                finished.clone(),
            );
            let mut current = current_rx.clone();
            racers.push(tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    let Some(seen) =
                        get_sandbox(&mut client, by_name("default", &name).unwrap()).await
                    else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let expected = id_of(&seen);
                    read_ids.lock().unwrap().insert(expected.clone());
                    // Usually the replacement is made meanwhile; sometimes
                    // the delete goes first.
                    let patience = if rand::random_ratio(1, 4) {
                        Duration::from_millis(rand::random_range(0..200))
                    } else {
                        Duration::from_secs(5)
                    };
                    let published = Duration::from_secs(5);
                    let _ =
                        tokio::time::timeout(published, current.wait_for(|now| *now == expected))
                            .await;
                    let _ =
                        tokio::time::timeout(patience, current.wait_for(|now| *now != expected))
                            .await;
                    if finished.load(Ordering::SeqCst) && *current.borrow() == expected {
                        // Leave the replacer's last sandbox alone.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    let answer =
                        delete(&mut client, delete_expecting("default", &name, &expected)).await;
                    let mut record = record.lock().unwrap();
                    match answer {
                        Ok(deleted) if deleted.id == expected && deleted.deleted => {
                            record.deleted.insert(expected);
                        }
                        Ok(deleted) => record.failures.push(format!(
                            "WRONG DELETE: expected {expected}, the answer is {deleted:?}"
                        )),
                        Err(error)
                            if error.reason().as_deref() == Some("SANDBOX_IDENTITY_MISMATCH") =>
                        {
                            assert_eq!(error.code(), Some(Code::Aborted));
                            record.mismatches += 1;
                        }
                        Err(error) if error.code() == Some(Code::NotFound) => {}
                        Err(error) => record
                            .failures
                            .push(format!("delete {name} expecting {expected}: {error}")),
                    }
                }
            }));
        }
    }
    for replacer in replacers {
        replacer.await.expect("a replacer panicked");
    }
    done.store(true, Ordering::SeqCst);
    for racer in racers {
        racer.await.expect("a racer panicked");
    }

    let record = Arc::try_unwrap(record)
        .ok()
        .expect("every task ended")
        .into_inner()
        .unwrap();
    assert!(record.failures.is_empty(), "{:#?}", record.failures);
    eprintln!(
        "race: {} sandboxes created, {} deleted, {} stale deletes refused",
        record.created.len(),
        record.deleted.len(),
        record.mismatches
    );
    assert!(
        record.mismatches > 0,
        "the racers never raced a replacement; the test proves nothing"
    );
    assert!(
        record.deleted.is_subset(&record.created),
        "only sandboxes of the race were deleted"
    );
    // Exactly the sandboxes no acknowledged delete removed are left...
    let mut check = failover_client(uris.clone());
    wait_settled(&mut check, PHASE_TIMEOUT).await;
    let left = ids_with_prefix(&mut check, "race-").await;
    let expected_left: BTreeSet<String> = record
        .created
        .difference(&record.deleted)
        .cloned()
        .collect();
    assert_eq!(left, expected_left, "sandboxes left after the race");
    // ...and exactly their executions run (plus x/B1), one shim and one
    // `sleep` each.
    let mut running: BTreeSet<(String, u64)> =
        expected_left.into_iter().map(|id| (id, 1)).collect();
    running.insert((b1.clone(), 1));
    assert_exactly_running(&cluster.driver_dir, &running, "sleep").await;

    // Clean up: delete everything, bound to the ids.
    for (id, _) in running {
        delete(
            &mut check,
            v1::DeleteSandboxRequest {
                sandbox: by_id(&id),
                request_id: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("delete {id}: {error}"));
    }
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_records_go_with_their_sandboxes_and_the_workspace_deletes_at_once() {
    const MARKER: &str = "5202";
    const SANDBOXES: usize = 3;
    const SESSIONS_PER_SANDBOX: usize = 200;
    /// SSH-session creations in flight at once (spread over the replicas).
    const SESSIONS_IN_FLIGHT: usize = 24;
    let cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "owned_records_go_with_their_sandboxes_and_the_workspace_deletes_at_once",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let uris = cluster.all_uris();
    let mut client = failover_client(uris.clone());
    client
        .palisade(|mut api| async move {
            api.create_workspace(v1::CreateWorkspaceRequest {
                name: "owners".into(),
            })
            .await
        })
        .await
        .expect("create workspace");

    let mut ids = Vec::new();
    for index in 0..SANDBOXES {
        let sandbox = create_ready(&mut client, "owners", &format!("owner-{index}"), MARKER).await;
        ids.push(id_of(&sandbox));
    }

    // 200 SSH sessions per sandbox, through every replica.
    let mut sessions = tokio::task::JoinSet::new();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(SESSIONS_IN_FLIGHT));
    for (index, id) in ids.iter().enumerate() {
        for session in 0..SESSIONS_PER_SANDBOX {
            let mut rotated = uris.clone();
            rotated.rotate_left((index + session) % uris.len());
            let mut client = failover_client(rotated);
            let id = id.clone();
            let permit = semaphore.clone().acquire_owned().await.unwrap();
            sessions.spawn(async move {
                let _permit = permit;
                let request = v1::CreateSshSessionRequest {
                    sandbox: by_id(&id),
                    ttl_seconds: 3600,
                };
                client
                    .palisade(|mut api| {
                        let request = request.clone();
                        async move { api.create_ssh_session(request).await }
                    })
                    .await
                    .map(|session| (id, session))
            });
        }
    }
    while let Some(joined) = sessions.join_next().await {
        let (id, session) = joined
            .expect("a session task panicked")
            .unwrap_or_else(|error| panic!("create ssh session: {error}"));
        assert_eq!(session.sandbox_id, id);
        assert!(
            session.token.starts_with("pss1."),
            "the token is shown once"
        );
    }
    // And a policy each, set twice (version 2).
    for id in &ids {
        for version in 1..=2u64 {
            let request = v1::SetSandboxPolicyRequest {
                sandbox: by_id(id),
                document: format!("{{\"egress\": \"deny\", \"revision\": {version}}}"),
                expected_version: Some(version - 1),
            };
            let policy = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.set_sandbox_policy(request).await }
                })
                .await
                .unwrap_or_else(|error| panic!("set policy: {error}"));
            assert_eq!(policy.version, version);
        }
    }
    // Every replica holds them (stale reads after catching up).
    cluster.wait_caught_up(&all).await;
    for uri in &uris {
        let mut direct = direct_client(uri, Duration::from_secs(30)).await;
        for id in &ids {
            let mut count = 0;
            let mut page_token = String::new();
            loop {
                let page = direct
                    .list_ssh_sessions(v1::ListSshSessionsRequest {
                        sandbox: by_id(id),
                        page_size: 64,
                        page_token: page_token.clone(),
                        consistency: v1::Consistency::Stale as i32,
                    })
                    .await
                    .expect("list sessions")
                    .into_inner();
                count += page.sessions.len();
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            // The client retries only calls whose outcome was unknown; a
            // retried creation may have been applied twice.
            assert!(
                count >= SESSIONS_PER_SANDBOX,
                "{uri}: {count} sessions on {id}"
            );
        }
    }

    // Delete the sandboxes (concurrently, each bound to its id), then at
    // once the workspace: every call succeeds.
    let mut deletes = tokio::task::JoinSet::new();
    for (index, id) in ids.iter().enumerate() {
        let mut rotated = uris.clone();
        rotated.rotate_left(index % uris.len());
        let mut client = failover_client(rotated);
        let request = delete_expecting("owners", &format!("owner-{index}"), id);
        deletes.spawn(async move { delete(&mut client, request).await });
    }
    let mut deleted = BTreeSet::new();
    while let Some(joined) = deletes.join_next().await {
        let answer = joined
            .expect("a delete task panicked")
            .unwrap_or_else(|error| panic!("delete: {error}"));
        assert!(answer.deleted, "{answer:?}");
        deleted.insert(answer.id);
    }
    assert_eq!(deleted, ids.iter().cloned().collect());
    // Acknowledged deletes confirmed the executions gone: no need to wait.
    let processes = execution_processes(&cluster.driver_dir);
    assert!(
        processes.shims.is_empty() && processes.commands.is_empty(),
        "processes outlived an acknowledged delete: {processes:?}"
    );
    client
        .palisade(|mut api| async move {
            api.delete_workspace(v1::DeleteWorkspaceRequest {
                name: "owners".into(),
            })
            .await
        })
        .await
        .expect("the emptied workspace deletes at once");

    // Nothing of them remains in any replica's state.
    cluster.wait_caught_up(&all).await;
    for uri in &uris {
        let mut direct = direct_client(uri, Duration::from_secs(30)).await;
        let stale = v1::Consistency::Stale as i32;
        for id in &ids {
            let code = direct
                .get_sandbox(v1::GetSandboxRequest {
                    sandbox: by_id(id),
                    consistency: stale,
                })
                .await
                .expect_err("the sandbox is gone")
                .code();
            assert_eq!(code, Code::NotFound, "{uri}: get {id}");
            let code = direct
                .list_ssh_sessions(v1::ListSshSessionsRequest {
                    sandbox: by_id(id),
                    consistency: stale,
                    ..Default::default()
                })
                .await
                .expect_err("its sessions are gone")
                .code();
            assert_eq!(code, Code::NotFound, "{uri}: sessions of {id}");
            let code = direct
                .get_sandbox_policy(v1::GetSandboxPolicyRequest {
                    sandbox: by_id(id),
                    consistency: stale,
                })
                .await
                .expect_err("its policy is gone")
                .code();
            assert_eq!(code, Code::NotFound, "{uri}: policy of {id}");
        }
        let code = direct
            .get_workspace(v1::GetWorkspaceRequest {
                name: "owners".into(),
                consistency: stale,
            })
            .await
            .expect_err("the workspace is gone")
            .code();
        assert_eq!(code, Code::NotFound, "{uri}: workspace");
        let listed = direct
            .list_sandboxes(v1::ListSandboxesRequest {
                all_workspaces: true,
                consistency: stale,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        assert!(listed.sandboxes.is_empty(), "{uri}: {listed:?}");
    }
    // Every replica's whole state (sessions and policies included) is the
    // same at the same index.
    let (index, digests) = digests_at_equal_index(&cluster).await;
    let distinct: BTreeSet<&String> = digests.values().collect();
    assert_eq!(
        distinct.len(),
        1,
        "replicas differ at index {index}: {digests:?}"
    );
    assert!(execution_dirs(&cluster.driver_dir).is_empty());
}

/// Runs the CLI through every replica; returns (exit code, stdout, stderr).
async fn run_cli(endpoints: &str, args: &[&str]) -> (i32, String, String) {
    let output = cli_async(endpoints, args).await;
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cli_delete_forms_and_workspace_deletion() {
    const MARKER: &str = "5203";
    let cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "cli_delete_forms_and_workspace_deletion",
    };
    let all = cluster.node_ids();
    cluster.wait_for_leader(&all).await;
    let endpoints = cluster.cli_endpoints(&all);
    let endpoints = endpoints.as_str();
    let create = |name: &'static str, workspace: &'static str| async move {
        cli_json_async(
            endpoints,
            &[
                "--workspace",
                workspace,
                "sandbox",
                "create",
                name,
                "--",
                "sleep",
                MARKER,
            ],
        )
        .await
    };

    // `delete --id ID`: deletes that sandbox; gone -> "already deleted", 0.
    let x1 = create("x", "default").await;
    let x1_id = x1["id"].as_str().unwrap().to_string();
    let (code, stdout, stderr) = run_cli(endpoints, &["sandbox", "delete", "--id", &x1_id]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("deleted"), "{stdout}");
    assert!(
        !alive(x1["pid"].as_u64().unwrap() as u32),
        "the delete waited for the execution to be gone"
    );
    let (code, stdout, stderr) = run_cli(endpoints, &["sandbox", "delete", "--id", &x1_id]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("already deleted"), "{stdout}");

    // `delete --id ID` whose name now belongs to a replacement: 0, and the
    // replacement is left alone.
    let x2 = create("x", "default").await;
    let x2_id = x2["id"].as_str().unwrap().to_string();
    let x2_pid = x2["pid"].as_u64().unwrap() as u32;
    let (code, stdout, stderr) = run_cli(endpoints, &["sandbox", "delete", "--id", &x1_id]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("already deleted"), "{stdout}");
    let json = cli_json_async(endpoints, &["sandbox", "delete", "--id", &x1_id]).await;
    assert_eq!(json["already_deleted"], true, "{json}");
    let got = cli_json_async(endpoints, &["sandbox", "get", "x"]).await;
    assert_eq!(got["id"], x2["id"]);
    assert_eq!(got["phase"], "READY");
    assert!(alive(x2_pid), "the replacement runs");

    // `delete NAME --expected-id ID`: mismatch -> nothing deleted, exit 1
    // with the reason, and the current id is not disclosed.
    let (code, stdout, stderr) = run_cli(
        endpoints,
        &["sandbox", "delete", "x", "--expected-id", &x1_id],
    )
    .await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("SANDBOX_IDENTITY_MISMATCH"), "{stderr}");
    assert!(!stderr.contains(&x2_id), "{stderr}");
    assert!(!stdout.contains(&x2_id), "{stdout}");
    assert!(alive(x2_pid), "a mismatched delete touched nothing");
    let got = cli_json_async(endpoints, &["sandbox", "get", "x"]).await;
    assert_eq!(got["id"], x2["id"]);
    // Matching id: deleted, 0; then absent: "already deleted", 0.
    let (code, stdout, stderr) = run_cli(
        endpoints,
        &["sandbox", "delete", "x", "--expected-id", &x2_id],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!alive(x2_pid), "deleted means its execution is gone");
    let (code, stdout, stderr) = run_cli(
        endpoints,
        &["sandbox", "delete", "x", "--expected-id", &x2_id],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("already deleted"), "{stdout}");
    // A plain delete of an absent name is an error (nothing was bound).
    let (code, _, stderr) = run_cli(endpoints, &["sandbox", "delete", "x"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("SANDBOX_NOT_FOUND"), "{stderr}");

    // Workspace deletion: TERMINATING first, WORKSPACE_NOT_EMPTY lists
    // what remains, no new sandboxes, retry after emptying succeeds.
    cli_json_async(endpoints, &["workspace", "create", "doomed"]).await;
    let keep = create("keep", "default").await;
    let names = ["d1", "d2", "d3", "d4", "d5"];
    for name in names {
        create(name, "doomed").await;
    }
    for _ in 0..2 {
        let (code, stdout, stderr) = run_cli(endpoints, &["workspace", "delete", "doomed"]).await;
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stderr.contains("WORKSPACE_NOT_EMPTY"), "{stderr}");
        for name in names {
            assert!(stderr.contains(name), "{name} is listed: {stderr}");
        }
        let workspace = cli_json_async(endpoints, &["workspace", "get", "doomed"]).await;
        assert_eq!(workspace["phase"], "TERMINATING", "{workspace}");
        assert_eq!(workspace["sandbox_count"], 5, "{workspace}");
    }
    let (code, stdout, stderr) = run_cli(
        endpoints,
        &[
            "--workspace",
            "doomed",
            "sandbox",
            "create",
            "late",
            "--",
            "sleep",
            MARKER,
        ],
    )
    .await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("WORKSPACE_TERMINATING"), "{stderr}");

    // `delete --all`: every sandbox of the workspace, through pages of two.
    let report = cli_json_async(
        endpoints,
        &[
            "--workspace",
            "doomed",
            "sandbox",
            "delete",
            "--all",
            "--page-size",
            "2",
        ],
    )
    .await;
    let report = report.as_array().expect("a JSON array").clone();
    let reported: BTreeSet<&str> = report
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(reported, names.into_iter().collect(), "{report:?}");
    assert!(
        report.iter().all(|entry| entry["status"] == "deleted"),
        "{report:?}"
    );
    let listed = cli_json_async(endpoints, &["--workspace", "doomed", "sandbox", "list"]).await;
    assert_eq!(listed.as_array().unwrap().len(), 0, "{listed}");
    // The workspace deletes now (and its name is gone).
    let (code, stdout, stderr) = run_cli(endpoints, &["workspace", "delete", "doomed"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, _, stderr) = run_cli(endpoints, &["workspace", "get", "doomed"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("WORKSPACE_NOT_FOUND"), "{stderr}");
    // The other workspace's sandbox was never touched.
    assert!(alive(keep["pid"].as_u64().unwrap() as u32));
    let running = BTreeSet::from([(keep["id"].as_str().unwrap().to_string(), 1)]);
    assert_exactly_running(&cluster.driver_dir, &running, "sleep").await;

    // SSH sessions need a READY sandbox, and stopping one revokes them.
    let session = cli_json_async(endpoints, &["ssh-session", "create", "keep"]).await;
    assert!(session["token"].as_str().unwrap().starts_with("pss1."));
    cli_json_async(
        endpoints,
        &[
            "policy",
            "set",
            "keep",
            "--document",
            "{\"egress\": \"deny\"}",
        ],
    )
    .await;
    let listed = cli_json_async(endpoints, &["ssh-session", "list", "keep"]).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    cli_json_async(endpoints, &["sandbox", "stop", "keep"]).await;
    let listed = cli_json_async(endpoints, &["ssh-session", "list", "keep"]).await;
    assert_eq!(
        listed.as_array().unwrap().len(),
        0,
        "stop revokes: {listed}"
    );
    let (code, _, stderr) = run_cli(endpoints, &["ssh-session", "create", "keep"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("INVALID_PHASE"), "{stderr}");
    let policy = cli_json_async(endpoints, &["policy", "get", "keep"]).await;
    assert_eq!(policy["version"], 1, "the policy outlives a stop: {policy}");

    // `--help` documents the forms.
    let (code, help, _) = run_cli(endpoints, &["sandbox", "delete", "--help"]).await;
    assert_eq!(code, 0);
    for needle in [
        "--id",
        "--expected-id",
        "--all",
        "already deleted",
        "SANDBOX_IDENTITY_MISMATCH",
        "replacement",
    ] {
        assert!(help.contains(needle), "--help mentions {needle}: {help}");
    }

    let (code, _, stderr) = run_cli(endpoints, &["sandbox", "delete", "--all"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
}
