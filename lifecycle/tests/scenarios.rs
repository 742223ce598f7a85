//! Scenario tests of the lifecycle state machine: commands in, outcomes out,
//! read top to bottom like the spec.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use palisade_lifecycle::*;

/// A request with a fresh id (each call a new client request).
fn fresh() -> RequestMeta {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    RequestMeta {
        id: format!("request-{id}"),
        payload_digest: format!("digest-{id}"),
        time_ms: EPOCH_MS,
    }
}

fn stop(target: SandboxTarget) -> Command {
    Command::BeginStop {
        target,
        expected_execution: None,
        request: fresh(),
    }
}

fn start(target: SandboxTarget) -> Command {
    Command::BeginStart {
        target,
        expected_execution: None,
        request: fresh(),
    }
}

fn delete(target: SandboxTarget) -> Command {
    Command::BeginDelete {
        target,
        expected_sandbox_id: None,
        expected_execution: None,
        request: fresh(),
    }
}

/// A tiny log: applies commands at increasing indexes and checks invariants
/// after every step.
struct Log {
    state: State,
    index: u64,
}

impl Log {
    fn new() -> Self {
        Self {
            state: State::new(),
            index: 0,
        }
    }

    /// Applies at the next index. Completions and observations written
    /// unbound (`CompletionOf::UNBOUND`) are bound to the sandbox as it is
    /// now, as the executor binds them to the state it read.
    fn apply(&mut self, command: Command) -> Response {
        let command = command.bound_to(&self.state, 1);
        self.index += 1;
        let response = apply(
            &mut self.state,
            LogPosition {
                index: self.index,
                term: 1,
            },
            &command,
        );
        self.state.assert_invariants();
        response
    }

    fn sandbox(&self, id: &str) -> &Sandbox {
        &self.state.sandboxes[id]
    }
}

fn create(id: &str, name: &str) -> Command {
    Command::BeginCreate {
        id: id.into(),
        workspace: DEFAULT_WORKSPACE.into(),
        name: name.into(),
        spec: SandboxSpec {
            command: vec!["sleep".into(), "1000".into()],
            ..Default::default()
        },
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        time_ms: EPOCH_MS,
        host_identity: format!("host-{id}"),
        request: fresh(),
    }
}

fn launched(id: &str, generation: u64) -> Command {
    Command::CompleteLaunch {
        sandbox_id: id.into(),
        of: CompletionOf::UNBOUND,
        generation,
        result: LaunchResult::Running {
            handle: format!("pid={generation}"),
            driver: "test".into(),
        },
    }
}

fn by_name(name: &str) -> SandboxTarget {
    SandboxTarget::Name {
        workspace: DEFAULT_WORKSPACE.into(),
        name: name.into(),
    }
}

fn reason(response: Response) -> Reason {
    response.expect_err("expected a rejection").reason
}

#[test]
fn create_stop_start_delete_walkthrough() {
    let mut log = Log::new();

    // Create: the id exists from the first entry, before any compute.
    let outcome = log.apply(create("a1", "demo")).unwrap();
    assert_eq!(
        outcome,
        Outcome::OperationBegun {
            sandbox_id: "a1".into(),
            kind: OperationKind::Create,
            generation: 1
        }
    );
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Provisioning);
    assert_eq!(log.sandbox("a1").resource_version, 1);

    // The executor reports the launch: READY, generation 1.
    log.apply(launched("a1", 1)).unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Ready);
    assert_eq!(log.sandbox("a1").execution.handle.as_deref(), Some("pid=1"));
    assert_eq!(log.sandbox("a1").resource_version, 2);

    // Stop, then the driver confirms.
    log.apply(stop(by_name("demo"))).unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopping);
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: Some(143),
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopped);

    // Start: generation 2.
    let outcome = log.apply(start(by_name("demo"))).unwrap();
    assert_eq!(
        outcome,
        Outcome::OperationBegun {
            sandbox_id: "a1".into(),
            kind: OperationKind::Start,
            generation: 2
        }
    );
    log.apply(launched("a1", 2)).unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Ready);
    assert_eq!(log.sandbox("a1").execution.generation, 2);

    // Delete: DELETING, then one entry removes the sandbox and its name.
    log.apply(delete(by_name("demo"))).unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Deleting);
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    assert!(log.state.sandboxes.is_empty());
    assert!(
        log.state
            .sandbox_by_name(DEFAULT_WORKSPACE, "demo")
            .is_none()
    );
}

#[test]
fn rejections_change_nothing() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    let before = log.state.clone();

    assert_eq!(reason(log.apply(create("b1", "demo"))), Reason::NameTaken);
    assert_eq!(
        reason(log.apply(create("b1", "Bad_Name"))),
        Reason::InvalidArgument {
            field: "name".into()
        }
    );
    let mut in_missing_workspace = create("b1", "other");
    if let Command::BeginCreate { workspace, .. } = &mut in_missing_workspace {
        *workspace = "nowhere".into();
    }
    assert_eq!(
        reason(log.apply(in_missing_workspace)),
        Reason::WorkspaceNotFound
    );
    // Stop while provisioning: an operation is in flight.
    assert_eq!(
        reason(log.apply(stop(by_name("demo")))),
        Reason::InvalidPhase
    );
    assert_eq!(
        reason(log.apply(stop(by_name("missing")))),
        Reason::SandboxNotFound
    );
    // A rejection changes nothing but its receipt (so a retry replays it).
    let mut after = log.state.clone();
    after
        .receipts
        .retain(|id, _| before.receipts.contains_key(id));
    assert_eq!(after, before);
    assert_eq!(log.state.receipts.len(), before.receipts.len() + 5);
}

#[test]
fn delete_by_id_never_touches_a_same_name_replacement() {
    let mut log = Log::new();
    log.apply(create("a1", "x")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(delete(SandboxTarget::Id("a1".into()))).unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    log.apply(create("b1", "x")).unwrap();

    // A late delete of the old id finds nothing, and B1 keeps its name.
    assert_eq!(
        reason(log.apply(delete(SandboxTarget::Id("a1".into())))),
        Reason::SandboxNotFound
    );
    assert_eq!(
        log.state
            .sandbox_by_name(DEFAULT_WORKSPACE, "x")
            .unwrap()
            .id,
        "b1"
    );
}

#[test]
fn stale_completions_are_ignored() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    // A completion for a generation that is not in flight changes nothing.
    assert_eq!(
        log.apply(launched("a1", 7)).unwrap(),
        Outcome::Ignored {
            sandbox_id: "a1".into()
        }
    );
    // Delete supersedes the launch; the launch's late completion is ignored.
    log.apply(delete(by_name("demo"))).unwrap();
    assert_eq!(
        log.apply(launched("a1", 1)).unwrap(),
        Outcome::Ignored {
            sandbox_id: "a1".into()
        }
    );
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Deleting);
    // An exit observed for a stopped generation changes nothing either.
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    assert_eq!(
        log.apply(Command::ObserveExit {
            sandbox_id: "a1".into(),
            of: CompletionOf::UNBOUND,
            generation: 1,
            exit_code: 0
        })
        .unwrap(),
        Outcome::Ignored {
            sandbox_id: "a1".into()
        }
    );
}

#[test]
fn completions_are_bound_to_the_operation_they_complete() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    let create_index = log.index;
    log.apply(launched("a1", 1)).unwrap();
    log.apply(stop(by_name("demo"))).unwrap();
    let stop_index = log.index;
    let stopped = |operation_index: u64| Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf {
            operation_index,
            term: 1,
        },
        generation: 1,
        exit_code: None,
    };
    // Right kind and generation, but another operation (the create's):
    // ignored. Only the stop that is pending can be completed.
    assert_eq!(
        log.apply(stopped(create_index)).unwrap(),
        Outcome::Ignored {
            sandbox_id: "a1".into()
        }
    );
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopping);
    assert_eq!(
        log.apply(stopped(stop_index)).unwrap(),
        Outcome::Completed {
            sandbox_id: "a1".into()
        }
    );
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopped);

    // A delete completion bound to no operation, or to another one, does
    // not remove the sandbox.
    log.apply(delete(by_name("demo"))).unwrap();
    let delete_index = log.index;
    for of in [
        CompletionOf {
            operation_index: stop_index,
            term: 1,
        },
        CompletionOf {
            operation_index: delete_index + 1,
            term: 1,
        },
    ] {
        assert_eq!(
            log.apply(Command::CompleteDelete {
                sandbox_id: "a1".into(),
                of,
            })
            .unwrap(),
            Outcome::Ignored {
                sandbox_id: "a1".into()
            }
        );
    }
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Deleting);
}

#[test]
fn an_observation_of_a_sandbox_that_changed_since_is_ignored() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let observed = CompletionOf::observed(log.sandbox("a1"), 1);
    // The sandbox changes after the executor read it (stopped and started
    // again: generation 2 runs).
    log.apply(stop(by_name("demo"))).unwrap();
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: None,
    })
    .unwrap();
    log.apply(start(by_name("demo"))).unwrap();
    log.apply(launched("a1", 2)).unwrap();
    // A late "lost" observation made before all that is ignored, even if
    // it names the current generation.
    for generation in [1, 2] {
        assert_eq!(
            log.apply(Command::ObserveLost {
                sandbox_id: "a1".into(),
                of: observed,
                generation,
            })
            .unwrap(),
            Outcome::Ignored {
                sandbox_id: "a1".into()
            }
        );
    }
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Ready);
}

#[test]
fn exits_complete_or_fail_the_running_execution() {
    let mut log = Log::new();
    log.apply(create("a1", "ok")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(Command::ObserveExit {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: 0,
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Completed);

    log.apply(create("b1", "bad")).unwrap();
    log.apply(launched("b1", 1)).unwrap();
    log.apply(Command::ObserveExit {
        sandbox_id: "b1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: 3,
    })
    .unwrap();
    assert_eq!(log.sandbox("b1").phase, SandboxPhase::Error);
    assert_eq!(log.sandbox("b1").execution.exit_code, Some(3));

    // A finished sandbox can be started again: generation 2.
    log.apply(start(by_name("bad"))).unwrap();
    assert_eq!(log.sandbox("b1").execution.generation, 2);
    assert_eq!(log.sandbox("b1").execution.exit_code, None);
}

#[test]
fn failed_launch_is_an_error_with_a_message() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(Command::CompleteLaunch {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        result: LaunchResult::Failed {
            message: "no such program: nope".into(),
        },
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Error);
    assert_eq!(
        log.sandbox("a1").message.as_deref(),
        Some("no such program: nope")
    );
}

#[test]
fn joining_and_already_done() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    // Start of a running sandbox: nothing to do.
    assert_eq!(
        log.apply(start(by_name("demo"))).unwrap(),
        Outcome::AlreadyDone {
            sandbox_id: "a1".into()
        }
    );
    log.apply(stop(by_name("demo"))).unwrap();
    // A second stop joins the first.
    assert!(matches!(
        log.apply(stop(by_name("demo"))).unwrap(),
        Outcome::OperationJoined { generation: 1, .. }
    ));
    log.apply(delete(by_name("demo"))).unwrap();
    // A second delete joins the first.
    assert!(matches!(
        log.apply(delete(by_name("demo"))).unwrap(),
        Outcome::OperationJoined {
            kind: OperationKind::Delete,
            ..
        }
    ));
}

#[test]
fn workspaces_delete_only_when_empty_and_default_is_protected() {
    let mut log = Log::new();
    assert_eq!(
        reason(log.apply(Command::DeleteWorkspace {
            name: DEFAULT_WORKSPACE.into()
        })),
        Reason::DefaultWorkspaceProtected
    );
    log.apply(Command::CreateWorkspace {
        id: "w1".into(),
        name: "team".into(),
        time_ms: 5,
    })
    .unwrap();
    assert_eq!(
        reason(log.apply(Command::CreateWorkspace {
            id: "w2".into(),
            name: "team".into(),
            time_ms: 5
        })),
        Reason::NameTaken
    );
    let mut in_team = create("a1", "demo");
    if let Command::BeginCreate { workspace, .. } = &mut in_team {
        *workspace = "team".into();
    }
    log.apply(in_team).unwrap();
    // TERMINATING first, and the answer lists what remains.
    assert_eq!(
        log.apply(Command::DeleteWorkspace {
            name: "team".into()
        })
        .unwrap(),
        Outcome::WorkspaceTerminating {
            name: "team".into(),
            remaining: vec!["demo".into()],
            remaining_count: 1
        }
    );
    assert_eq!(
        log.state.workspaces["team"].phase,
        WorkspacePhase::Terminating
    );
    let mut another = create("a2", "other");
    if let Command::BeginCreate { workspace, .. } = &mut another {
        *workspace = "team".into();
    }
    assert_eq!(reason(log.apply(another)), Reason::WorkspaceTerminating);
    log.apply(delete(SandboxTarget::Id("a1".into()))).unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    log.apply(Command::DeleteWorkspace {
        name: "team".into(),
    })
    .unwrap();
    assert!(!log.state.workspaces.contains_key("team"));
}

#[test]
fn state_round_trips_through_a_snapshot() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let bytes = serde_json::to_vec(&log.state).unwrap();
    let restored: State = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(restored, log.state);
}

fn execution(id: &str, generation: u64) -> Option<ExecutionRef> {
    Some(ExecutionRef {
        sandbox_id: id.into(),
        generation,
        key_id: None,
    })
}

#[test]
fn request_ids_replay_the_original_result_exactly_once() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let request = RequestMeta {
        id: "stop-1".into(),
        payload_digest: "d1".into(),
        time_ms: 5,
    };
    let stop_once = Command::BeginStop {
        target: by_name("demo"),
        expected_execution: execution("a1", 1),
        request: request.clone(),
    };
    assert!(matches!(
        log.apply(stop_once.clone()).unwrap(),
        Outcome::OperationBegun { .. }
    ));
    // While in flight, the retry waits on the same receipt.
    assert_eq!(
        log.apply(stop_once.clone()).unwrap(),
        Outcome::Replayed {
            request_id: "stop-1".into()
        }
    );
    assert!(matches!(
        log.state.receipts.get("stop-1").unwrap().result,
        ReceiptResult::Pending { .. }
    ));
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: Some(143),
    })
    .unwrap();
    // Settled: a compact outcome, the sandbox's phase and generation when
    // the stop ended (not a copy of the sandbox).
    assert!(matches!(
        &log.state.receipts.get("stop-1").unwrap().result,
        ReceiptResult::Settled {
            sandbox_id,
            generation: 1,
            phase: SandboxPhase::Stopped,
            ..
        } if sandbox_id == "a1"
    ));
    // A later start does not change what the stop's retry replays.
    log.apply(start(by_name("demo"))).unwrap();
    assert_eq!(
        log.apply(stop_once).unwrap(),
        Outcome::Replayed {
            request_id: "stop-1".into()
        }
    );
    assert!(matches!(
        log.state.receipts.get("stop-1").unwrap().result,
        ReceiptResult::Settled {
            generation: 1,
            phase: SandboxPhase::Stopped,
            ..
        }
    ));
    // The same id with another payload is refused.
    let reused = Command::BeginStop {
        target: by_name("demo"),
        expected_execution: execution("a1", 2),
        request: RequestMeta {
            payload_digest: "d2".into(),
            ..request
        },
    };
    assert_eq!(reason(log.apply(reused)), Reason::RequestIdReused);
}

#[test]
fn a_stale_execution_token_stops_nothing_and_replays_as_stale() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(stop(by_name("demo"))).unwrap();
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: None,
    })
    .unwrap();
    log.apply(start(by_name("demo"))).unwrap();
    log.apply(launched("a1", 2)).unwrap();
    // An observation of generation 1 arrives late: its stop is stale.
    let late = Command::BeginStop {
        target: by_name("demo"),
        expected_execution: execution("a1", 1),
        request: RequestMeta {
            id: "late".into(),
            payload_digest: "late".into(),
            time_ms: 9,
        },
    };
    assert_eq!(reason(log.apply(late.clone())), Reason::StaleExecution);
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Ready);
    assert_eq!(
        log.apply(late).unwrap(),
        Outcome::Replayed {
            request_id: "late".into()
        }
    );
    assert!(matches!(
        &log.state.receipts.get("late").unwrap().result,
        ReceiptResult::Rejected(rejection) if rejection.reason == Reason::StaleExecution
    ));
    // A same-name replacement is never reached by the old sandbox's token.
    log.apply(delete(SandboxTarget::Id("a1".into()))).unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    log.apply(create("b1", "demo")).unwrap();
    log.apply(launched("b1", 1)).unwrap();
    let old_token = Command::BeginStop {
        target: by_name("demo"),
        expected_execution: execution("a1", 1),
        request: fresh(),
    };
    assert_eq!(reason(log.apply(old_token)), Reason::StaleExecution);
    assert_eq!(log.sandbox("b1").phase, SandboxPhase::Ready);
}

#[test]
fn expected_sandbox_id_guards_delete_by_name() {
    let mut log = Log::new();
    log.apply(create("a1", "x")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(delete(SandboxTarget::Id("a1".into()))).unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    log.apply(create("b1", "x")).unwrap();
    let stale_delete = Command::BeginDelete {
        target: by_name("x"),
        expected_sandbox_id: Some("a1".into()),
        expected_execution: None,
        request: fresh(),
    };
    let rejection = log.apply(stale_delete).unwrap_err();
    assert_eq!(rejection.reason, Reason::SandboxIdentityMismatch);
    assert!(
        !rejection.message.contains("b1"),
        "the current id is not disclosed"
    );
    assert_eq!(log.sandbox("b1").phase, SandboxPhase::Provisioning);
}

/// An SSH session living `ttl_ms` on the replicated clock, proposed by a
/// replica whose clock reads the epoch (its estimate of the expiry is for
/// the audit trail only).
fn session(name: &str, session_id: &str, ttl_ms: i64) -> Command {
    Command::CreateSshSession {
        target: by_name(name),
        session_id: session_id.into(),
        token_sha256: "0".repeat(64),
        expires_at_ms: EPOCH_MS + ttl_ms,
        time_ms: EPOCH_MS,
        ttl_ms,
    }
}

/// A leader's tick at its wall clock `now_ms`, its local retention flag a
/// day.
fn tick(now_ms: i64) -> Command {
    Command::Tick {
        now_ms,
        receipt_retention_ms: DAY_MS,
    }
}

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;
/// A replicated clock epoch: 2026-01-01.
const EPOCH_MS: i64 = 1_767_225_600_000;

#[test]
fn owned_records_go_with_their_sandbox_in_one_step() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    assert_eq!(
        reason(log.apply(session("demo", "s0", 10))),
        Reason::InvalidPhase,
        "SSH sessions need a READY sandbox"
    );
    log.apply(launched("a1", 1)).unwrap();
    for at in 0..5_000 {
        log.apply(session("demo", &format!("s{at}"), HOUR_MS))
            .unwrap();
    }
    log.apply(Command::SetSandboxPolicy {
        target: by_name("demo"),
        document: "{}".into(),
        expected_version: Some(0),
        time_ms: 0,
    })
    .unwrap();
    assert_eq!(log.state.ssh_sessions["a1"].len(), 5_000);
    log.apply(delete(by_name("demo"))).unwrap();
    // One entry removes the sandbox, its name, 5,000 sessions and the policy.
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    assert!(log.state.ssh_sessions.is_empty());
    assert!(log.state.policies.is_empty());
}

#[test]
fn stopping_revokes_sessions_and_policies_are_versioned() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(session("demo", "s1", HOUR_MS)).unwrap();
    log.apply(Command::RevokeSshSession {
        target: by_name("demo"),
        session_id: "s1".into(),
    })
    .unwrap();
    assert_eq!(
        reason(log.apply(Command::RevokeSshSession {
            target: by_name("demo"),
            session_id: "s1".into()
        })),
        Reason::SessionNotFound
    );
    log.apply(session("demo", "s2", HOUR_MS)).unwrap();
    log.apply(stop(by_name("demo"))).unwrap();
    assert!(log.state.ssh_sessions.is_empty(), "stop revokes sessions");

    let set = |expected_version| Command::SetSandboxPolicy {
        target: by_name("demo"),
        document: "{\"egress\":false}".into(),
        expected_version,
        time_ms: 0,
    };
    assert_eq!(
        log.apply(set(None)).unwrap(),
        Outcome::PolicySet {
            sandbox_id: "a1".into(),
            version: 1,
            updated_at_ms: 0,
        }
    );
    assert_eq!(
        reason(log.apply(set(Some(0)))),
        Reason::PolicyVersionMismatch
    );
    assert_eq!(
        log.apply(set(Some(1))).unwrap(),
        Outcome::PolicySet {
            sandbox_id: "a1".into(),
            version: 2,
            updated_at_ms: 0,
        }
    );
}

#[test]
fn ticks_expire_settled_receipts_and_sessions_only() {
    let mut log = Log::new();
    // The first tick of a cluster sets the replicated clock's epoch.
    log.apply(tick(EPOCH_MS)).unwrap();
    assert_eq!(log.state.clock_ms, EPOCH_MS);
    log.apply(create("a1", "demo")).unwrap(); // a pending receipt
    log.apply(create("a1", "demo")).unwrap_err(); // a settled rejection
    assert_eq!(log.state.receipts.len(), 2);
    assert_eq!(
        log.sandbox("a1").created_at_ms,
        EPOCH_MS,
        "stamped at apply"
    );
    log.apply(launched("a1", 1)).unwrap();
    log.apply(session("demo", "short", 4_000)).unwrap();
    log.apply(session("demo", "long", 49_000)).unwrap();
    assert_eq!(
        log.state.ssh_sessions["a1"]["short"].expires_at_ms,
        EPOCH_MS + 4_000,
        "a session expires at the clock when applied plus its TTL"
    );
    log.apply(tick(EPOCH_MS + 10_000)).unwrap();
    assert_eq!(log.state.receipts.len(), 2, "nothing is a day old yet");
    assert_eq!(
        log.state.ssh_sessions["a1"].len(),
        1,
        "the short session expired"
    );
    // A day on the replicated clock, one tick a minute.
    for minute in 1..=24 * 60 {
        log.apply(tick(EPOCH_MS + minute * MINUTE_MS)).unwrap();
    }
    assert_eq!(log.state.clock_ms, EPOCH_MS + DAY_MS);
    assert!(log.state.receipts.is_empty());
    assert!(log.state.ssh_sessions.is_empty());
    // The clock never goes back.
    log.apply(tick(0)).unwrap();
    assert_eq!(log.state.clock_ms, EPOCH_MS + DAY_MS);
}

/// Issue 14: a replica whose clock is a day behind received the delete (its
/// request time says so) and later leads. Its receipt is still kept a full
/// day from settlement, so the client's retry replays it instead of
/// deleting the same-name replacement.
#[test]
fn a_clock_behind_replica_keeps_receipts_for_the_full_window() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let behind = RequestMeta {
        id: "delete-demo".into(),
        payload_digest: "digest-delete-demo".into(),
        time_ms: EPOCH_MS - DAY_MS - HOUR_MS,
    };
    let delete_demo = Command::BeginDelete {
        target: by_name("demo"),
        expected_sandbox_id: None,
        expected_execution: None,
        request: behind,
    };
    log.apply(delete_demo.clone()).unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
    })
    .unwrap();
    assert_eq!(
        log.state.receipts.get("delete-demo").unwrap().settled_at_ms,
        Some(EPOCH_MS)
    );
    log.apply(create("b1", "demo")).unwrap();
    log.apply(launched("b1", 1)).unwrap();
    // The lagging replica leads now: its ticks do not move the clock back.
    log.apply(tick(EPOCH_MS - DAY_MS)).unwrap();
    assert_eq!(log.state.clock_ms, EPOCH_MS);
    // A leader with a good clock ticks on, a minute at a time, for 23 h.
    for minute in 1..=23 * 60 {
        log.apply(tick(EPOCH_MS + minute * MINUTE_MS)).unwrap();
    }
    assert!(log.state.receipts.contains_key("delete-demo"));
    // The client retries its delete by name: replayed, the replacement lives.
    assert_eq!(
        log.apply(delete_demo).unwrap(),
        Outcome::Replayed {
            request_id: "delete-demo".into()
        }
    );
    assert_eq!(log.sandbox("b1").phase, SandboxPhase::Ready);
    // A full day after its settlement, the receipt goes.
    for minute in 23 * 60 + 1..=24 * 60 {
        log.apply(tick(EPOCH_MS + minute * MINUTE_MS)).unwrap();
    }
    assert!(!log.state.receipts.contains_key("delete-demo"));
}

/// Issue 14: one leader's wall clock jumps two days ahead. The replicated
/// clock moves by at most `TICK_STEP_MS_MAX` per tick, so a receipt settled
/// a minute earlier and an hour-long SSH session both survive.
#[test]
fn a_forward_clock_jump_does_not_collapse_retention_or_sessions() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(session("demo", "s1", HOUR_MS)).unwrap();
    log.apply(tick(EPOCH_MS + MINUTE_MS)).unwrap();
    assert_eq!(log.state.receipts.len(), 1);

    log.apply(tick(EPOCH_MS + 2 * DAY_MS)).unwrap();
    assert_eq!(log.state.receipts.len(), 1, "the receipt is kept");
    assert_eq!(log.state.ssh_sessions["a1"].len(), 1, "the session lives");
    assert_eq!(
        log.state.clock_ms,
        EPOCH_MS + MINUTE_MS + limits::TICK_STEP_MS_MAX
    );

    // The jumped leader keeps ticking; a session opened now lives its TTL.
    log.apply(session("demo", "s2", HOUR_MS)).unwrap();
    log.apply(tick(EPOCH_MS + 2 * DAY_MS + 10_000)).unwrap();
    assert_eq!(log.state.ssh_sessions["a1"].len(), 2);
    assert_eq!(log.state.receipts.len(), 1);
}

/// Issue 14: retention counts from settlement, not creation. A create that
/// stays pending for 25 h keeps its receipt a full day after it settles.
#[test]
fn receipt_retention_counts_from_settlement() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    log.apply(create("a1", "demo")).unwrap();
    for minute in 1..=25 * 60 {
        log.apply(tick(EPOCH_MS + minute * MINUTE_MS)).unwrap();
    }
    assert_eq!(log.state.receipts.len(), 1, "pending receipts never expire");
    let settled_at = log.state.clock_ms;
    log.apply(launched("a1", 1)).unwrap();
    let receipt = log.state.receipts.to_vec().remove(0).1;
    assert_eq!(receipt.created_at_ms, EPOCH_MS);
    assert_eq!(receipt.settled_at_ms, Some(settled_at));
    log.apply(tick(settled_at + MINUTE_MS)).unwrap();
    assert_eq!(log.state.receipts.len(), 1, "settled a minute ago: kept");
    for minute in 2..=24 * 60 {
        log.apply(tick(settled_at + minute * MINUTE_MS)).unwrap();
    }
    assert!(
        log.state.receipts.is_empty(),
        "a day after settlement: gone"
    );
}

/// Issue 14: retention is replicated configuration, at least a day; a
/// shorter one (in the configuration or a leader's flag) is raised to a day.
#[test]
fn receipt_retention_below_a_day_is_clamped() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    assert_eq!(log.state.receipt_retention_ms(), DAY_MS, "the default");
    log.apply(Command::ConfigureReceiptRetention {
        retention_ms: HOUR_MS,
    })
    .unwrap();
    assert_eq!(log.state.receipt_retention_ms(), DAY_MS);
    log.apply(create("a1", "demo")).unwrap(); // pending
    log.apply(create("a1", "demo")).unwrap_err(); // a rejection, settled now
    for minute in 1..=2 * 60 {
        log.apply(Command::Tick {
            now_ms: EPOCH_MS + minute * MINUTE_MS,
            receipt_retention_ms: HOUR_MS,
        })
        .unwrap();
    }
    assert_eq!(log.state.receipts.len(), 2, "kept past an hour");

    log.apply(Command::ConfigureReceiptRetention {
        retention_ms: 2 * DAY_MS,
    })
    .unwrap();
    assert_eq!(log.state.receipt_retention_ms(), 2 * DAY_MS);
    log.apply(Command::ConfigureReceiptRetention {
        retention_ms: i64::MAX,
    })
    .unwrap();
    assert_eq!(
        log.state.receipt_retention_ms(),
        limits::RECEIPT_RETENTION_MS_MAX
    );
}

/// Logs and snapshots written before replicated time still decode and
/// apply: a session without a TTL keeps its absolute expiry, a settled
/// receipt without a settlement time counts from its creation, a state
/// without a configured retention keeps receipts a day.
#[test]
fn entries_and_snapshots_from_before_replicated_time_still_apply() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let old_session: Command = serde_json::from_value(serde_json::json!({
        "CreateSshSession": {
            "target": {"Id": "a1"},
            "session_id": "old",
            "token_sha256": "0".repeat(64),
            "expires_at_ms": EPOCH_MS + HOUR_MS,
            "time_ms": EPOCH_MS,
        }
    }))
    .unwrap();
    log.apply(old_session).unwrap();
    assert_eq!(
        log.state.ssh_sessions["a1"]["old"].expires_at_ms,
        EPOCH_MS + HOUR_MS
    );

    let mut snapshot = serde_json::to_value(&log.state).unwrap();
    let object = snapshot.as_object_mut().unwrap();
    object.remove("receipt_retention_ms");
    for receipt in object["receipts"].as_object_mut().unwrap().values_mut() {
        receipt.as_object_mut().unwrap().remove("settled_at_ms");
    }
    log.state = serde_json::from_value(snapshot).unwrap();
    assert_eq!(log.state.receipt_retention_ms(), DAY_MS);
    let receipt = log.state.receipts.to_vec().remove(0).1;
    assert_eq!(receipt.settled_at_ms, None);
    assert_eq!(receipt.settled_at_ms(), Some(EPOCH_MS), "from creation");

    let old_tick: Command = serde_json::from_value(serde_json::json!({
        "Tick": {"now_ms": EPOCH_MS + MINUTE_MS, "receipt_retention_ms": 1}
    }))
    .unwrap();
    log.apply(old_tick).unwrap();
    assert_eq!(log.state.receipts.len(), 1, "a leader's flag is not used");
}

#[test]
fn restart_policy_replaces_executions_with_the_next_generation() {
    let mut log = Log::new();
    let mut command = create("a1", "demo");
    if let Command::BeginCreate { spec, .. } = &mut command {
        spec.restart_policy = RestartPolicy::OnFailure;
    }
    log.apply(command).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    let host = log.sandbox("a1").host_identity.clone();
    log.apply(Command::ObserveExit {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: 1,
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Starting);
    assert_eq!(log.sandbox("a1").execution.generation, 2);
    assert_eq!(
        log.sandbox("a1").host_identity,
        host,
        "the host identity survives"
    );
    log.apply(launched("a1", 2)).unwrap();
    // A lost execution is replaced too.
    log.apply(Command::ObserveLost {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 2,
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").execution.generation, 3);
    log.apply(launched("a1", 3)).unwrap();
    // A clean exit under OnFailure completes.
    log.apply(Command::ObserveExit {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 3,
        exit_code: 0,
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Completed);
}

#[test]
fn the_cluster_identity_is_chosen_once() {
    let mut log = Log::new();
    let init = |secret: &str| Command::InitializeCluster {
        cluster_id: "c".into(),
        token_secret_hex: secret.into(),
        driver_identity: String::new(),
    };
    log.apply(init("aa")).unwrap();
    log.apply(init("bb")).unwrap();
    assert_eq!(log.state.cluster.as_ref().unwrap().token_secret_hex, "aa");
}

/// A restored backup that kept its token key: the first leader's
/// InitializeCluster chooses the new cluster id, but the carried key (and
/// the source's token domain) win over the proposed secret, once.
#[test]
fn a_restored_state_keeps_its_carried_token_key_under_the_new_cluster_id() {
    let mut log = Log::new();
    log.state.carried_token_key = Some(palisade_lifecycle::CarriedTokenKey {
        token_secret_hex: "kept".into(),
        token_domain: "source-cluster".into(),
    });
    log.apply(Command::InitializeCluster {
        cluster_id: "new-cluster".into(),
        token_secret_hex: "proposed".into(),
        driver_identity: "noop".into(),
    })
    .unwrap();
    let identity = log.state.cluster.clone().unwrap();
    assert_eq!(identity.cluster_id, "new-cluster");
    assert_eq!(identity.token_secret_hex, "kept");
    assert_eq!(identity.token_domain(), "source-cluster");
    assert_eq!(identity.driver_identity, "noop");
    assert!(log.state.carried_token_key.is_none());

    // Rotated (no carried key): the proposed secret, bound to the new id.
    let mut rotated = Log::new();
    rotated
        .apply(Command::InitializeCluster {
            cluster_id: "new-cluster".into(),
            token_secret_hex: "proposed".into(),
            driver_identity: String::new(),
        })
        .unwrap();
    let identity = rotated.state.cluster.clone().unwrap();
    assert_eq!(identity.token_secret_hex, "proposed");
    assert_eq!(identity.token_domain(), "new-cluster");
}

fn create_in(workspace: &str, id: &str, name: &str, request_id: &str) -> Command {
    let Command::BeginCreate {
        spec,
        labels,
        annotations,
        host_identity,
        ..
    } = create(id, name)
    else {
        unreachable!()
    };
    Command::BeginCreate {
        id: id.into(),
        workspace: workspace.into(),
        name: name.into(),
        spec,
        labels,
        annotations,
        time_ms: EPOCH_MS,
        host_identity,
        request: RequestMeta {
            id: request_id.into(),
            payload_digest: format!("digest-{request_id}"),
            time_ms: EPOCH_MS,
        },
    }
}

fn quota_of(response: Response) -> (String, String, u64) {
    match reason(response) {
        Reason::QuotaExceeded {
            quota,
            workspace,
            limit,
        } => (quota, workspace, limit),
        other => panic!("expected QUOTA_EXCEEDED, got {other:?}"),
    }
}

/// Issue 13: a workspace at its receipt quota is refused (QUOTA_EXCEEDED
/// naming the quota) without leaving a receipt, and another workspace goes
/// on: the budget is per workspace, and refused requests consume nothing.
#[test]
fn a_workspace_at_its_receipt_quota_does_not_block_another() {
    let mut log = Log::new();
    log.apply(Command::ConfigureQuotas {
        receipts_per_workspace: 3,
        sandboxes_per_workspace: 0,
        owned_records_per_workspace: 0,
    })
    .unwrap();
    assert_eq!(log.state.quotas.receipts_per_workspace, 3);
    assert_eq!(
        log.state.quotas.sandboxes_per_workspace,
        limits::SANDBOXES_PER_WORKSPACE_DEFAULT,
        "0 means the default"
    );
    for name in ["busy", "other"] {
        log.apply(Command::CreateWorkspace {
            id: format!("id-{name}"),
            name: name.into(),
            time_ms: EPOCH_MS,
        })
        .unwrap();
    }
    log.apply(create_in("busy", "b1", "one", "r1")).unwrap();
    log.apply(create_in("busy", "b2", "two", "r2")).unwrap();
    // A rejection is an outcome to replay: it holds a receipt too.
    assert_eq!(
        reason(log.apply(create_in("busy", "b3", "one", "r3"))),
        Reason::NameTaken
    );
    assert_eq!(log.state.receipts.count_in("busy"), 3);

    let before = log.state.clone();
    for attempt in 0..100 {
        let refused = log.apply(create_in(
            "busy",
            &format!("b-over-{attempt}"),
            &format!("over-{attempt}"),
            &format!("over-{attempt}"),
        ));
        assert_eq!(
            quota_of(refused),
            ("receipts_per_workspace".into(), "busy".into(), 3)
        );
    }
    assert_eq!(log.state, before, "refused requests change nothing");
    // A retry of an applied request is not a new receipt: it replays.
    assert_eq!(
        log.apply(create_in("busy", "b1", "one", "r1")).unwrap(),
        Outcome::Replayed {
            request_id: "r1".into()
        }
    );
    // The other workspace is not blocked.
    for n in 0..3 {
        log.apply(create_in(
            "other",
            &format!("o{n}"),
            &format!("s{n}"),
            &format!("other-{n}"),
        ))
        .unwrap();
    }
    assert_eq!(log.state.receipts.count_in("other"), 3);
    assert_eq!(log.state.receipts.len(), 6);
    assert_eq!(
        Reason::QuotaExceeded {
            quota: "receipts_per_workspace".into(),
            workspace: "busy".into(),
            limit: 3
        }
        .as_str(),
        "QUOTA_EXCEEDED"
    );
}

/// Sandboxes and owned records have per-workspace quotas of their own.
#[test]
fn sandbox_and_owned_record_quotas_are_per_workspace() {
    let mut log = Log::new();
    log.apply(Command::ConfigureQuotas {
        receipts_per_workspace: 100,
        sandboxes_per_workspace: 2,
        owned_records_per_workspace: 2,
    })
    .unwrap();
    log.apply(create_in(DEFAULT_WORKSPACE, "a1", "one", "c1"))
        .unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(create_in(DEFAULT_WORKSPACE, "a2", "two", "c2"))
        .unwrap();
    assert_eq!(
        quota_of(log.apply(create_in(DEFAULT_WORKSPACE, "a3", "three", "c3"))),
        (
            "sandboxes_per_workspace".into(),
            DEFAULT_WORKSPACE.into(),
            2
        )
    );
    assert!(
        !log.state.receipts.contains_key("c3"),
        "a quota refusal leaves no receipt"
    );
    let session = |id: &str| Command::CreateSshSession {
        target: SandboxTarget::Id("a1".into()),
        session_id: id.into(),
        token_sha256: "0".repeat(64),
        expires_at_ms: 0,
        ttl_ms: HOUR_MS,
        time_ms: EPOCH_MS,
    };
    log.apply(session("s1")).unwrap();
    log.apply(Command::SetSandboxPolicy {
        target: SandboxTarget::Id("a1".into()),
        document: "{}".into(),
        expected_version: None,
        time_ms: EPOCH_MS,
    })
    .unwrap();
    assert_eq!(
        quota_of(log.apply(session("s2"))),
        (
            "owned_records_per_workspace".into(),
            DEFAULT_WORKSPACE.into(),
            2
        )
    );
    // Changing an existing policy adds no record.
    log.apply(Command::SetSandboxPolicy {
        target: SandboxTarget::Id("a1".into()),
        document: "{\"v\":2}".into(),
        expected_version: Some(1),
        time_ms: EPOCH_MS,
    })
    .unwrap();
}

/// Issue 13: a receipt keeps a compact outcome, not a copy of the sandbox,
/// however large the sandbox; receipts written before (holding the whole
/// sandbox) still decode, into the compact form.
#[test]
fn receipts_keep_a_compact_outcome_and_old_ones_still_decode() {
    let mut log = Log::new();
    let mut command = create("a1", "big");
    if let Command::BeginCreate { spec, .. } = &mut command {
        spec.env = (0..8)
            .map(|n| (format!("VAR_{n}"), "x".repeat(8 * 1024)))
            .collect();
    }
    log.apply(command).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(stop(by_name("big"))).unwrap();
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: Some(0),
    })
    .unwrap();
    let sandbox_bytes = serde_json::to_vec(log.sandbox("a1")).unwrap().len();
    for n in 0..100 {
        let already = log
            .apply(Command::BeginStop {
                target: by_name("big"),
                expected_execution: None,
                request: RequestMeta {
                    id: format!("tiny-{n}"),
                    payload_digest: "d".into(),
                    time_ms: EPOCH_MS,
                },
            })
            .unwrap();
        assert_eq!(
            already,
            Outcome::AlreadyDone {
                sandbox_id: "a1".into()
            }
        );
    }
    assert!(matches!(
        &log.state.receipts.get("tiny-0").unwrap().result,
        ReceiptResult::Settled {
            sandbox_id,
            generation: 1,
            phase: SandboxPhase::Stopped,
            ..
        } if sandbox_id == "a1"
    ));
    let receipts_bytes = serde_json::to_vec(&log.state.receipts).unwrap().len();
    assert!(
        receipts_bytes < 100 * 400,
        "100 receipts take {receipts_bytes} bytes (the sandbox alone is {sandbox_bytes})"
    );

    // A snapshot from before compact receipts: the receipt holds the whole
    // sandbox. It decodes into the compact outcome.
    let mut snapshot = serde_json::to_value(&log.state).unwrap();
    let sandbox = serde_json::to_value(log.sandbox("a1")).unwrap();
    let receipt = &mut snapshot["receipts"]["tiny-0"];
    receipt["result"] = serde_json::json!({ "Sandbox": sandbox });
    receipt.as_object_mut().unwrap().remove("workspace");
    let decoded: State = serde_json::from_value(snapshot).unwrap();
    decoded.assert_invariants();
    assert!(matches!(
        &decoded.receipts.get("tiny-0").unwrap().result,
        ReceiptResult::Settled {
            sandbox_id,
            generation: 1,
            phase: SandboxPhase::Stopped,
            ..
        } if sandbox_id == "a1"
    ));
    assert_eq!(decoded.receipts.get("tiny-0").unwrap().workspace, "");
    assert_eq!(
        decoded.receipts.count_in(DEFAULT_WORKSPACE),
        log.state.receipts.count_in(DEFAULT_WORKSPACE) - 1,
        "an old receipt counts against no workspace"
    );
}

/// A store that counts what is put into it (receipts decoding into it).
#[derive(Debug, Default)]
struct CountingStore {
    inner: MemoryReceipts,
    puts: std::sync::Arc<AtomicU64>,
}

impl ReceiptStore for CountingStore {
    fn get(&self, request_id: &str) -> Option<Receipt> {
        self.inner.get(request_id)
    }
    fn put(&mut self, request_id: &str, receipt: &Receipt, previous: Option<&Receipt>) {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.inner.put(request_id, receipt, previous)
    }
    fn remove(&mut self, request_id: &str, previous: &Receipt) {
        self.inner.remove(request_id, previous)
    }
    fn settled_up_to(&self, settled_at_ms_max: i64, limit: usize) -> Vec<String> {
        self.inner.settled_up_to(settled_at_ms_max, limit)
    }
    fn visit(&self, visit: &mut dyn FnMut(&str, StoredReceipt<'_>) -> bool) {
        self.inner.visit(visit)
    }
    fn copy(&self) -> Box<dyn ReceiptStore> {
        self.inner.copy()
    }
}

/// A snapshot's receipts decode straight into the store they will live in
/// (a replica's on-disk table), never all into memory first; a state
/// without receipts hands the store back; a receipt given twice is refused.
#[test]
fn a_snapshots_receipts_decode_straight_into_their_store() {
    let mut log = Log::new();
    log.apply(create("a1", "one")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    for n in 0..50 {
        log.apply(Command::BeginStop {
            target: by_name("one"),
            expected_execution: None,
            request: RequestMeta {
                id: format!("stop-{n}"),
                payload_digest: "d".into(),
                time_ms: EPOCH_MS,
            },
        })
        .unwrap();
    }
    let expected = log.state.receipts.len();
    assert!(expected >= 50);
    let json = serde_json::to_vec(&log.state).unwrap();

    let puts = std::sync::Arc::new(AtomicU64::new(0));
    let store = CountingStore {
        inner: MemoryReceipts::default(),
        puts: puts.clone(),
    };
    let (decoded, unused) =
        Receipts::decode_into(Box::new(store), || serde_json::from_slice::<State>(&json));
    let decoded = decoded.unwrap();
    assert!(unused.is_none(), "the receipts went into the store");
    assert_eq!(puts.load(Ordering::Relaxed), expected as u64);
    assert_eq!(decoded.receipts.len(), expected);
    assert_eq!(decoded.receipts.count_in(DEFAULT_WORKSPACE), expected);
    assert_eq!(decoded.receipts, log.state.receipts);
    decoded.assert_invariants();

    // Without the field: the store comes back, unused.
    let mut value = serde_json::to_value(&log.state).unwrap();
    value.as_object_mut().unwrap().remove("receipts");
    let (decoded, unused) = Receipts::decode_into(Box::new(MemoryReceipts::default()), || {
        serde_json::from_value::<State>(value)
    });
    assert!(decoded.unwrap().receipts.is_empty());
    assert!(unused.is_some());

    // A request id twice in the map (JSON allows it; a snapshot never
    // holds it): an error, not a receipt silently replaced.
    let text = String::from_utf8(json).unwrap();
    let twice = text.replacen("\"stop-1\":", "\"stop-0\":", 1);
    let (decoded, _) = Receipts::decode_into(Box::new(MemoryReceipts::default()), || {
        serde_json::from_str::<State>(&twice)
    });
    let error = decoded.unwrap_err().to_string();
    assert!(error.contains("two receipts"), "{error}");

    // A decode that panics takes its store with it: the next state decoded
    // on this thread keeps its receipts in memory, not in that store.
    let puts = std::sync::Arc::new(AtomicU64::new(0));
    let store = CountingStore {
        inner: MemoryReceipts::default(),
        puts: puts.clone(),
    };
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Receipts::decode_into(Box::new(store), || -> State { panic!("decoding failed") })
    }));
    assert!(panicked.is_err());
    let decoded: State = serde_json::from_str(&text).unwrap();
    assert_eq!(decoded.receipts.len(), expected);
    assert_eq!(
        puts.load(Ordering::Relaxed),
        0,
        "the receipts went into the store of a decode that panicked"
    );
}

/// Expiry walks the settlement index: the receipts still kept and the
/// indexes stay consistent however receipts settle and expire.
#[test]
fn receipts_expire_in_settlement_order() {
    let mut log = Log::new();
    log.apply(tick(EPOCH_MS)).unwrap();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    // One pending stop, settled a day later than the rest.
    log.apply(stop(by_name("demo"))).unwrap();
    for n in 0..10 {
        log.apply(tick(EPOCH_MS + n * MINUTE_MS)).unwrap();
        log.apply(create(&format!("x{n}"), &format!("x{n}")))
            .unwrap();
    }
    assert_eq!(log.state.receipts.len(), 12);
    let mut clock = EPOCH_MS + 10 * MINUTE_MS;
    while clock < EPOCH_MS + DAY_MS + 5 * MINUTE_MS {
        clock += MINUTE_MS;
        log.apply(tick(clock)).unwrap();
    }
    // a1's create settled at the epoch: gone after a day; the stop and
    // the unlaunched creates are pending: kept however old.
    assert_eq!(
        log.state.receipts.len(),
        11,
        "pending receipts never expire"
    );
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        of: CompletionOf::UNBOUND,
        generation: 1,
        exit_code: None,
    })
    .unwrap();
    let settled_at = log.state.clock_ms;
    while log.state.clock_ms < settled_at + DAY_MS - MINUTE_MS {
        let next = log.state.clock_ms + MINUTE_MS;
        log.apply(tick(next)).unwrap();
    }
    assert_eq!(log.state.receipts.len(), 11);
    log.apply(tick(settled_at + DAY_MS)).unwrap();
    assert_eq!(
        log.state.receipts.len(),
        10,
        "only the stop's receipt expired"
    );
    assert!(
        log.state
            .receipts
            .to_vec()
            .iter()
            .all(|(_, receipt)| receipt.settled_at_ms().is_none())
    );
}
