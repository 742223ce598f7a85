//! Three `palisade gateway run` processes on loopback, under a stream of
//! client requests, while the leader is killed (SIGKILL), stopped
//! gracefully (SIGTERM) or frozen (SIGSTOP/SIGCONT); and what a request
//! whose replica loses leadership mid-flight answers.
//!
//! The clients are the failover client the CLI uses
//! (`palisade_cli::client::Client`), each request with its own request
//! id kept across the client's retries. What they check:
//!
//! - no acknowledged operation is lost, and nothing appears that no
//!   acknowledged request made;
//! - no request fails: the client fails over and retries (a create that
//!   finds its name taken on retry recognises its own sandbox by its
//!   request label);
//! - an operation in flight on a killed leader completes exactly once: one
//!   shim and one command per generation, in the process table and in the
//!   driver directory;
//! - a resumed old leader steps down and neither starts an effect nor
//!   proposes a completion in its old term; a client that tries the frozen
//!   replica first gives up on it and fails over;
//! - SIGTERM hands leadership off before exit, and a draining replica
//!   finishes the requests it holds while it refuses new ones with a
//!   retryable SHUTTING_DOWN;
//! - a request held by a replica that loses leadership answers
//!   LEADERSHIP_CHANGED, and its retry the true outcome;
//! - every new leader runs its executor (leadership moved round the
//!   cluster many times, each time a create must complete).
//!
//! Each test uses its own `sleep` argument, so process-table checks never
//! see another test's sandboxes (they also only look under their own
//! driver directory).

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use palisade_proto::v1;
use support::cluster::*;
use support::{eventually, signal};
use tokio::time::Instant;

/// How long a whole phase of a test (a workload's progress, operations
/// settling) may take on a loaded machine.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

fn sandbox_command(marker: &str) -> Vec<String> {
    vec!["sleep".into(), marker.into()]
}

/// A command that ignores SIGTERM, so stopping it takes the whole grace
/// period: it keeps a stop (or a removal) in flight long enough to act
/// while it is.
fn stubborn_command(marker: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("trap '' TERM; sleep {marker}"),
    ]
}

async fn create(
    client: &mut palisade_cli::client::Client,
    name: &str,
    command: Vec<String>,
) -> v1::Sandbox {
    let request = v1::CreateSandboxRequest {
        name: name.to_string(),
        spec: Some(v1::SandboxSpec {
            command,
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

/// Polls (linearizable reads) until `check` holds for the sandbox `id`
/// (`None`: it does not exist).
async fn wait_for_sandbox(
    client: &mut palisade_cli::client::Client,
    id: &str,
    what: &str,
    mut check: impl FnMut(Option<&v1::Sandbox>) -> bool,
) -> Option<v1::Sandbox> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let sandbox = get_sandbox(client, by_id(id).unwrap()).await;
        if check(sandbox.as_ref()) {
            return sandbox;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {sandbox:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_leader_while_clients_create_and_stop() {
    const MARKER: &str = "4301";
    let mut cluster = Cluster::start(3, &[]);
    let all = cluster.node_ids();
    let (leader, term) = cluster.wait_for_leader(&all).await;

    let workload = Workload::start(
        WorkloadConfig {
            prefix: "k".into(),
            workers: 3,
            command: sandbox_command(MARKER),
            stop: true,
            delete_every: Some(3),
        },
        cluster.all_uris(),
    );
    workload.wait_for_more(6, PHASE_TIMEOUT).await;

    // One operation certainly in flight on the leader when it dies: its
    // BeginCreate is committed (no_wait answers then), its launch and
    // completion are up to the leader's executor, which is killed next.
    let mut direct = direct_client(&cluster.replica(leader).uri(), Duration::from_secs(30)).await;
    let in_flight = direct
        .create_sandbox(v1::CreateSandboxRequest {
            name: "in-flight".into(),
            spec: Some(v1::SandboxSpec {
                command: sandbox_command(MARKER),
                ..Default::default()
            }),
            no_wait: true,
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        })
        .await
        .expect("the leader takes the create")
        .into_inner();
    let in_flight_id = id_of(&in_flight);
    // Kill it the moment its launch has started the command: the driver
    // polls for that every 20 ms before it reports the launch, so the kill
    // usually lands after the effect and before its completion was proposed
    // — the case where a careless new leader would start a second process.
    let command_started = cluster
        .driver_dir
        .join(&in_flight_id)
        .join("1")
        .join("command.json");
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while !command_started.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    cluster.replica_mut(leader).kill();

    let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    let mut survivor = direct_client(
        &cluster.replica(survivors[0]).uri(),
        Duration::from_secs(30),
    )
    .await;
    let seen_after_kill = survivor
        .get_sandbox(v1::GetSandboxRequest {
            sandbox: by_id(&in_flight_id),
            consistency: v1::Consistency::Stale as i32,
        })
        .await
        .map(|sandbox| phase_of(sandbox.get_ref()));
    eprintln!(
        "the in-flight create, as a survivor saw it right after the kill: {seen_after_kill:?} \
         (PROVISIONING: killed between launch and completion)"
    );
    let (new_leader, new_term) = cluster.wait_for_leader(&survivors).await;
    assert_ne!(new_leader, leader);
    assert!(new_term > term, "a new term: {new_term} after {term}");
    workload.wait_for_more(6, PHASE_TIMEOUT).await;
    let logs = workload.finish().await;

    let mut client = failover_client(cluster.uris(&survivors));
    let settled = wait_settled(&mut client, PHASE_TIMEOUT).await;
    let ready = verify_acknowledged(&mut client, "k", &logs).await;
    let in_flight = settled
        .iter()
        .find(|sandbox| id_of(sandbox) == in_flight_id)
        .expect("the create in flight on the dead leader is not lost");
    assert_eq!(
        phase_of(in_flight),
        v1::SandboxPhase::Ready,
        "{in_flight:?}"
    );
    assert_eq!(generation_of(in_flight), 1, "launched as generation 1");

    // Exactly once: one shim and one `sleep` for every READY sandbox, at
    // generation 1, and nothing else running; one execution directory per
    // generation ever launched, none for deleted sandboxes.
    let mut expected: BTreeSet<(String, u64)> = ready
        .iter()
        .map(|sandbox| (sandbox.id.clone(), 1))
        .collect();
    expected.insert((in_flight_id.clone(), 1));
    assert_exactly_running(&cluster.driver_dir, &expected, "sleep").await;
    let dirs = execution_dirs(&cluster.driver_dir);
    let live: BTreeSet<String> = settled.iter().map(id_of).collect();
    for (sandbox_id, generations) in &dirs {
        assert!(
            live.contains(sandbox_id),
            "a directory of deleted {sandbox_id}"
        );
        assert_eq!(generations, &vec![1], "{sandbox_id} launched once");
    }
    assert_eq!(dirs.len(), live.len(), "every sandbox has its directory");
    let processes = support::pids_running(&["sleep", MARKER]);
    assert_eq!(processes.len(), expected.len(), "{processes:?}");

    // The killed replica comes back from its disk and catches up.
    cluster
        .replica_mut(leader)
        .start()
        .expect("start the replica");
    cluster.wait_caught_up(&all).await;
    let mut restarted = failover_client(vec![cluster.replica(leader).uri()]);
    assert_eq!(list_sandboxes(&mut restarted).await.len(), settled.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_leader_hands_off_and_no_request_fails() {
    let mut cluster = Cluster::start(3, &["--driver", "noop"]);
    let all = cluster.node_ids();
    let (leader, term) = cluster.wait_for_leader(&all).await;

    let workload = Workload::start(
        WorkloadConfig {
            prefix: "t".into(),
            workers: 4,
            command: vec![],
            stop: true,
            delete_every: Some(2),
        },
        cluster.all_uris(),
    );
    // The CLI too, reading in a loop over every endpoint.
    let cli_endpoints = cluster.cli_endpoints(&all);
    let reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = tokio::spawn({
        let reading = reading.clone();
        async move {
            let mut failures = Vec::new();
            let mut reads = 0;
            while reading.load(std::sync::atomic::Ordering::SeqCst) {
                let output = cli_async(&cli_endpoints, &["sandbox", "list", "-o", "json"]).await;
                reads += 1;
                if !output.status.success() {
                    failures.push(String::from_utf8_lossy(&output.stderr).into_owned());
                }
            }
            (reads, failures)
        }
    });
    workload.wait_for_more(12, PHASE_TIMEOUT).await;

    // SIGTERM: leadership must move before the process exits.
    let old = cluster.replica(leader).pid();
    signal(old, libc::SIGTERM);
    let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let status = loop {
        if let Some(status) = cluster.replica_mut(leader).try_exit_status() {
            break status;
        }
        assert!(Instant::now() < deadline, "the leader did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "a clean exit: {status:?}");
    // It logs the handoff once it saw another replica lead, and "stopped"
    // last, after draining.
    let log = strip_ansi(&cluster.replica(leader).log());
    let position = |needle: &str| log.lines().position(|line| line.contains(needle));
    let handed_off = position("leadership handed off").unwrap_or_else(|| panic!("{log}"));
    let stopped = position("stopped node=").unwrap_or_else(|| panic!("{log}"));
    assert!(handed_off < stopped, "{log}");
    let handed_to: u64 = log
        .lines()
        .nth(handed_off)
        .and_then(|line| line.rsplit("to=").next())
        .and_then(|to| to.trim().parse().ok())
        .unwrap_or_else(|| panic!("{log}"));

    // Leadership went to a survivor. On a loaded machine another election
    // may follow the transfer, so the leader found now need not be the one
    // the log named; it is a survivor in a later term either way.
    assert!(
        survivors.contains(&handed_to),
        "handed to {handed_to}: {log}"
    );
    let (new_leader, new_term) = cluster.wait_for_leader(&survivors).await;
    assert!(survivors.contains(&new_leader));
    assert!(new_term > term);
    workload.wait_for_more(12, PHASE_TIMEOUT).await;
    let logs = workload.finish().await;
    reading.store(false, std::sync::atomic::Ordering::SeqCst);
    let (reads, cli_failures) = reader.await.unwrap();
    assert!(
        cli_failures.is_empty(),
        "CLI reads failed: {cli_failures:#?}"
    );
    assert!(reads > 0);

    let mut client = failover_client(cluster.uris(&survivors));
    wait_settled(&mut client, PHASE_TIMEOUT).await;
    verify_acknowledged(&mut client, "t", &logs).await;

    // Restarted with the same flags, it rejoins and catches up.
    cluster
        .replica_mut(leader)
        .start()
        .expect("start the replica");
    cluster.wait_caught_up(&all).await;
}

/// Lines of `log` that report an executor action in `term` (effect started
/// or completion proposed, from the executor's debug events).
fn executor_actions_in_term(log: &str, term: u64) -> Vec<String> {
    let needle = format!("term={term}");
    strip_ansi(log)
        .lines()
        .filter(|line| line.contains("performing effect") || line.contains("proposing completion"))
        .filter(|line| {
            line.match_indices(&needle).any(|(at, _)| {
                !line[at + needle.len()..]
                    .chars()
                    .next()
                    .is_some_and(|next| next.is_ascii_digit())
            })
        })
        .map(str::to_string)
        .collect()
}

/// The text of a log without its terminal colour codes (`ESC [ ... m`).
fn strip_ansi(log: &str) -> String {
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigstop_leader_others_serve_and_its_stale_work_is_not_applied() {
    const MARKER: &str = "4401";
    // The executor's debug events say which effects start and which
    // completions are proposed, in which term.
    let cluster = Cluster::start_with_log(
        3,
        &["--stop-grace-seconds", "4"],
        "info,openraft=warn,palisade_gateway::executor=debug",
    );
    let all = cluster.node_ids();
    let (leader, term) = cluster.wait_for_leader(&all).await;
    let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    let mut client = failover_client(cluster.all_uris());
    let a = id_of(&create(&mut client, "stubborn-a", stubborn_command(MARKER)).await);
    let b = id_of(&create(&mut client, "stubborn-b", stubborn_command(MARKER)).await);

    // A: a stop (with wait) sent straight to the leader; its effect takes
    // the whole grace period, so it is in flight when the leader freezes.
    let leader_uri = cluster.replica(leader).uri();
    let mut direct = direct_client(&leader_uri, Duration::from_secs(300)).await;
    let stop_a = tokio::spawn({
        let mut direct = direct.clone();
        let a = a.clone();
        async move {
            direct
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_id(&a),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                })
                .await
        }
    });
    wait_for_sandbox(&mut client, &a, "A stopping", |sandbox| {
        sandbox.is_some_and(|sandbox| phase_of(sandbox) == v1::SandboxPhase::Stopping)
    })
    .await;
    // B: a stop, then a delete that supersedes it. The executor runs one
    // effect per sandbox at a time, so the leader has not started the
    // removal (the stop still waits out its grace period) when it freezes.
    for (what, result) in [
        (
            "stop",
            direct
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_id(&b),
                    no_wait: true,
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        ),
        (
            "delete",
            direct
                .delete_sandbox(v1::DeleteSandboxRequest {
                    sandbox: by_id(&b),
                    no_wait: true,
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        ),
    ] {
        result.unwrap_or_else(|status| panic!("{what} B: {status:?}"));
    }

    cluster.replica(leader).pause();
    let log_offset = cluster.replica(leader).log_len();

    // A write arriving at a follower that still forwards to the frozen
    // leader is answered as "outcome unknown" once the follower learns of
    // the new leader (or succeeds, if the follower knew it already).
    let follower_uri = cluster.replica(survivors[0]).uri();
    let mut follower = direct_client(&follower_uri, Duration::from_secs(120)).await;
    let forwarded = follower
        .create_sandbox(v1::CreateSandboxRequest {
            name: "through-follower".into(),
            spec: Some(v1::SandboxSpec {
                command: sandbox_command(MARKER),
                ..Default::default()
            }),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        })
        .await;
    match &forwarded {
        Ok(sandbox) => assert_eq!(phase_of(sandbox.get_ref()), v1::SandboxPhase::Ready),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert_eq!(
                palisade_gateway::errors::reason_of(status).as_deref(),
                Some("OUTCOME_PENDING"),
                "{status:?}"
            );
        }
    }

    // The others elect a leader and keep serving.
    let (new_leader, new_term) = cluster.wait_for_leader(&survivors).await;
    assert!(new_term > term);
    let mut live = failover_client(cluster.uris(&survivors));
    let c = id_of(&create(&mut live, "during-pause", sandbox_command(MARKER)).await);
    // A client that tries the frozen replica first gives up on it (its
    // HTTP/2 pings go unanswered) and fails over to the others.
    let mut frozen_first = failover_client(cluster.uris(&[leader, survivors[0], survivors[1]]));
    let around = id_of(
        &create(
            &mut frozen_first,
            "around-the-frozen",
            sandbox_command(MARKER),
        )
        .await,
    );
    // The new leader finishes what the frozen one had begun: A's stop
    // (SIGTERM ignored, SIGKILL after the grace period) and B's removal.
    wait_for_sandbox(&mut live, &a, "A stopped by the new leader", |sandbox| {
        sandbox.is_some_and(|sandbox| phase_of(sandbox) == v1::SandboxPhase::Stopped)
    })
    .await;
    wait_for_sandbox(&mut live, &b, "B deleted by the new leader", |sandbox| {
        sandbox.is_none()
    })
    .await;
    // A runs again (generation 2), and a new sandbox takes B's name.
    let start_a = v1::StartSandboxRequest {
        sandbox: by_id(&a),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    let started = live
        .palisade(|mut api| {
            let request = start_a.clone();
            async move { api.start_sandbox(request).await }
        })
        .await
        .unwrap();
    assert_eq!(generation_of(&started), 2);
    let b2 = id_of(&create(&mut live, "stubborn-b", stubborn_command(MARKER)).await);
    assert_ne!(b2, b);

    cluster.replica(leader).resume();

    // The request the old leader held answers "leadership changed" (or,
    // should it see the new leader's entries first, the true outcome):
    // never a wrong result.
    let answer = tokio::time::timeout(PHASE_TIMEOUT, stop_a)
        .await
        .expect("the frozen leader's request is answered after it resumes")
        .unwrap();
    match answer {
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            let reason = palisade_gateway::errors::reason_of(&status);
            assert!(
                matches!(
                    reason.as_deref(),
                    Some("LEADERSHIP_CHANGED") | Some("OUTCOME_PENDING")
                ),
                "{status:?}"
            );
        }
        Ok(sandbox) => {
            let sandbox = sandbox.into_inner();
            assert_eq!(id_of(&sandbox), a);
            assert!(
                phase_of(&sandbox) == v1::SandboxPhase::Stopped || generation_of(&sandbox) == 2,
                "the stop of generation 1 is over: {sandbox:?}"
            );
        }
    }

    // The old leader steps down and follows the new one.
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let view = cluster_info(&leader_uri).await;
        if view
            .as_ref()
            .is_some_and(|info| info.leader_id == Some(new_leader) && info.term >= new_term)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old leader did not step down: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.wait_caught_up(&all).await;

    // Its stale work was not applied: after resuming it started no effect
    // and proposed no completion in its old term...
    let resumed_log = cluster.replica(leader).log_since(log_offset);
    let stale = executor_actions_in_term(&resumed_log, term);
    assert!(
        stale.is_empty(),
        "the deposed leader acted in term {term}: {stale:#?}"
    );
    // (The same search finds what it did while it led, before the pause.)
    let whole_log = cluster.replica(leader).log();
    assert!(
        !executor_actions_in_term(&whole_log[..log_offset as usize], term).is_empty(),
        "the executor's debug events are logged"
    );
    // ...and what runs is exactly what the cluster decided: A at
    // generation 2, the new B, C, the create that went around the frozen
    // replica (and the create through the follower, if it happened);
    // nothing of A's generation 1 or of the old B.
    let mut expected: BTreeSet<(String, u64)> = [
        (a.clone(), 2),
        (b2.clone(), 1),
        (c.clone(), 1),
        (around.clone(), 1),
    ]
    .into();
    let sandboxes = wait_settled(&mut live, PHASE_TIMEOUT).await;
    if let Some(through) = sandboxes.iter().find(|sandbox| {
        sandbox
            .metadata
            .as_ref()
            .is_some_and(|meta| meta.name == "through-follower")
    }) {
        assert_eq!(phase_of(through), v1::SandboxPhase::Ready);
        expected.insert((id_of(through), 1));
    } else {
        assert!(forwarded.is_err(), "an acknowledged create is lost");
    }
    assert_eq!(sandboxes.len(), expected.len(), "{sandboxes:#?}");
    let running: Vec<&v1::Sandbox> = sandboxes
        .iter()
        .filter(|sandbox| phase_of(sandbox) == v1::SandboxPhase::Ready)
        .collect();
    assert_eq!(running.len(), expected.len(), "{sandboxes:#?}");
    assert_exactly_running(&cluster.driver_dir, &expected, "sleep").await;
    assert!(
        !execution_dirs(&cluster.driver_dir).contains_key(&b),
        "the old B's executions are removed"
    );

    // Every replica, the old leader included, holds the same state.
    let mut views = Vec::new();
    for id in &all {
        let mut local = direct_client(&cluster.replica(*id).uri(), Duration::from_secs(30)).await;
        let page = local
            .list_sandboxes(v1::ListSandboxesRequest {
                consistency: v1::Consistency::Stale as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let view: Vec<(String, i32, u64)> = page
            .sandboxes
            .iter()
            .map(|sandbox| {
                (
                    id_of(sandbox),
                    phase_of(sandbox) as i32,
                    sandbox.metadata.as_ref().unwrap().resource_version,
                )
            })
            .collect();
        views.push(view);
    }
    assert!(
        views.windows(2).all(|pair| pair[0] == pair[1]),
        "{views:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_whose_replica_loses_leadership_answers_leadership_changed() {
    const MARKER: &str = "4501";
    // A long grace period: the stop stays in flight well past the transfer.
    let cluster = Cluster::start(3, &["--stop-grace-seconds", "8"]);
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let mut client = failover_client(cluster.all_uris());
    let slow = id_of(&create(&mut client, "slow-stop", stubborn_command(MARKER)).await);

    let mut direct = direct_client(&cluster.replica(leader).uri(), Duration::from_secs(120)).await;
    let stop = tokio::spawn({
        let slow = slow.clone();
        async move {
            let started = Instant::now();
            let answer = direct
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_id(&slow),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                })
                .await;
            (answer, started.elapsed())
        }
    });
    wait_for_sandbox(&mut client, &slow, "stopping", |sandbox| {
        sandbox.is_some_and(|sandbox| phase_of(sandbox) == v1::SandboxPhase::Stopping)
    })
    .await;
    let target = all.iter().copied().find(|id| *id != leader).unwrap();
    let moved = cli_json_async(
        &cluster.cli_endpoints(&all),
        &["cluster", "transfer-leader", &target.to_string()],
    )
    .await;
    assert_eq!(moved["leader_id"], target, "{moved}");

    let (answer, took) = tokio::time::timeout(PHASE_TIMEOUT, stop)
        .await
        .expect("answered")
        .unwrap();
    let status = answer.expect_err("the old leader cannot know the outcome");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        palisade_gateway::errors::reason_of(&status).as_deref(),
        Some("LEADERSHIP_CHANGED"),
        "{status:?}"
    );
    assert!(
        took < Duration::from_secs(60),
        "answered promptly: {took:?}"
    );

    // Retried (any replica), it joins the operation the new leader resumed
    // and answers its true outcome.
    let retry = v1::StopSandboxRequest {
        sandbox: by_id(&slow),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    let stopped = client
        .palisade(|mut api| {
            let request = retry.clone();
            async move { api.stop_sandbox(request).await }
        })
        .await
        .unwrap();
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped, "{stopped:?}");
    assert_exactly_running(&cluster.driver_dir, &BTreeSet::new(), "sleep").await;
    eventually(
        "no sleep of this test runs",
        Duration::from_secs(10),
        || support::pids_running(&["sleep", MARKER]).is_empty(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_in_flight_requests_and_refuses_new_ones() {
    const MARKER: &str = "4601";
    let mut cluster = Cluster::start(3, &["--stop-grace-seconds", "5"]);
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let follower = all.iter().copied().find(|id| *id != leader).unwrap();
    let mut client = failover_client(cluster.all_uris());
    let slow = id_of(&create(&mut client, "slow-drain", stubborn_command(MARKER)).await);

    // A stop entered through the follower takes the whole grace period.
    let follower_uri = cluster.replica(follower).uri();
    let mut direct = direct_client(&follower_uri, Duration::from_secs(120)).await;
    let stop = tokio::spawn({
        let mut direct = direct.clone();
        let slow = slow.clone();
        async move {
            direct
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_id(&slow),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    ..Default::default()
                })
                .await
        }
    });
    wait_for_sandbox(&mut client, &slow, "stopping", |sandbox| {
        sandbox.is_some_and(|sandbox| phase_of(sandbox) == v1::SandboxPhase::Stopping)
    })
    .await;

    // SIGTERM the follower while the stop is in flight there: a new request
    // is refused with a retryable SHUTTING_DOWN (nothing was done)...
    signal(cluster.replica(follower).pid(), libc::SIGTERM);
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let refusal = loop {
        let answer = direct
            .get_sandbox(v1::GetSandboxRequest {
                sandbox: by_id(&slow),
                ..Default::default()
            })
            .await;
        if let Err(status) = answer {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the draining replica kept taking requests"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
    assert_eq!(
        palisade_gateway::errors::reason_of(&refusal).as_deref(),
        Some("SHUTTING_DOWN"),
        "{refusal:?}"
    );
    // ...while the one in flight drains to its true outcome...
    let stopped = tokio::time::timeout(PHASE_TIMEOUT, stop)
        .await
        .expect("the in-flight stop is answered")
        .unwrap()
        .expect("the in-flight stop completes during the drain")
        .into_inner();
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped, "{stopped:?}");
    // ...and only then does the replica exit, cleanly.
    let status = loop {
        if let Some(status) = cluster.replica_mut(follower).try_exit_status() {
            break status;
        }
        assert!(Instant::now() < deadline, "the follower did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
    assert!(support::pids_running(&["sleep", MARKER]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_new_leader_runs_its_executor() {
    // Leadership moves round the cluster again and again; after each move a
    // create must complete, which takes the new leader's executor (launch,
    // then the completion). A new leader whose executor failed to start
    // would leave the create pending for ever.
    const TRANSFERS: u64 = 40;
    const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start(3, &["--driver", "noop"]);
    let all = cluster.node_ids();
    let (mut leader, _) = cluster.wait_for_leader(&all).await;
    let mut client = failover_client(cluster.all_uris());
    for round in 0..TRANSFERS {
        let target = all[(leader as usize) % all.len()];
        let admin_channel = channel(&cluster.replica(target).uri(), Duration::from_secs(30))
            .await
            .expect("connect");
        palisade_proto::v1::cluster_admin_client::ClusterAdminClient::new(admin_channel)
            .transfer_leader(v1::TransferLeaderRequest { node_id: target })
            .await
            .unwrap_or_else(|status| panic!("transfer {round} to {target}: {status:?}"));
        let (now_leading, _) = cluster.wait_for_leader(&all).await;
        assert_eq!(now_leading, target);
        leader = target;
        let name = format!("after-transfer-{round}");
        let created =
            tokio::time::timeout(CREATE_TIMEOUT, create(&mut client, &name, Vec::new())).await;
        assert!(
            created.is_ok(),
            "the create after transfer {round} (to node {target}) did not complete: its executor is not running"
        );
    }
}
