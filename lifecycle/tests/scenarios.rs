//! Scenario tests of the lifecycle state machine: commands in, outcomes out,
//! read top to bottom like the spec.

use std::collections::BTreeMap;

use palisade_lifecycle::*;

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

    fn apply(&mut self, command: Command) -> Response {
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
        time_ms: 1_000,
    }
}

fn launched(id: &str, generation: u64) -> Command {
    Command::CompleteLaunch {
        sandbox_id: id.into(),
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
    log.apply(Command::BeginStop {
        target: by_name("demo"),
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopping);
    log.apply(Command::CompleteStop {
        sandbox_id: "a1".into(),
        generation: 1,
        exit_code: Some(143),
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Stopped);

    // Start: generation 2.
    let outcome = log
        .apply(Command::BeginStart {
            target: by_name("demo"),
        })
        .unwrap();
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
    log.apply(Command::BeginDelete {
        target: by_name("demo"),
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Deleting);
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
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
        reason(log.apply(Command::BeginStop {
            target: by_name("demo")
        })),
        Reason::InvalidPhase
    );
    assert_eq!(
        reason(log.apply(Command::BeginStop {
            target: by_name("missing")
        })),
        Reason::SandboxNotFound
    );
    assert_eq!(log.state, before);
}

#[test]
fn delete_by_id_never_touches_a_same_name_replacement() {
    let mut log = Log::new();
    log.apply(create("a1", "x")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(Command::BeginDelete {
        target: SandboxTarget::Id("a1".into()),
    })
    .unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
    })
    .unwrap();
    log.apply(create("b1", "x")).unwrap();

    // A late delete of the old id finds nothing, and B1 keeps its name.
    assert_eq!(
        reason(log.apply(Command::BeginDelete {
            target: SandboxTarget::Id("a1".into())
        })),
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
    log.apply(Command::BeginDelete {
        target: by_name("demo"),
    })
    .unwrap();
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
    })
    .unwrap();
    assert_eq!(
        log.apply(Command::ObserveExit {
            sandbox_id: "a1".into(),
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
fn exits_complete_or_fail_the_running_execution() {
    let mut log = Log::new();
    log.apply(create("a1", "ok")).unwrap();
    log.apply(launched("a1", 1)).unwrap();
    log.apply(Command::ObserveExit {
        sandbox_id: "a1".into(),
        generation: 1,
        exit_code: 0,
    })
    .unwrap();
    assert_eq!(log.sandbox("a1").phase, SandboxPhase::Completed);

    log.apply(create("b1", "bad")).unwrap();
    log.apply(launched("b1", 1)).unwrap();
    log.apply(Command::ObserveExit {
        sandbox_id: "b1".into(),
        generation: 1,
        exit_code: 3,
    })
    .unwrap();
    assert_eq!(log.sandbox("b1").phase, SandboxPhase::Error);
    assert_eq!(log.sandbox("b1").execution.exit_code, Some(3));

    // A finished sandbox can be started again: generation 2.
    log.apply(Command::BeginStart {
        target: by_name("bad"),
    })
    .unwrap();
    assert_eq!(log.sandbox("b1").execution.generation, 2);
    assert_eq!(log.sandbox("b1").execution.exit_code, None);
}

#[test]
fn failed_launch_is_an_error_with_a_message() {
    let mut log = Log::new();
    log.apply(create("a1", "demo")).unwrap();
    log.apply(Command::CompleteLaunch {
        sandbox_id: "a1".into(),
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
        log.apply(Command::BeginStart {
            target: by_name("demo")
        })
        .unwrap(),
        Outcome::AlreadyDone {
            sandbox_id: "a1".into()
        }
    );
    log.apply(Command::BeginStop {
        target: by_name("demo"),
    })
    .unwrap();
    // A second stop joins the first.
    assert!(matches!(
        log.apply(Command::BeginStop {
            target: by_name("demo")
        })
        .unwrap(),
        Outcome::OperationJoined { generation: 1, .. }
    ));
    log.apply(Command::BeginDelete {
        target: by_name("demo"),
    })
    .unwrap();
    // A second delete joins the first.
    assert!(matches!(
        log.apply(Command::BeginDelete {
            target: by_name("demo")
        })
        .unwrap(),
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
    assert_eq!(
        reason(log.apply(Command::DeleteWorkspace {
            name: "team".into()
        })),
        Reason::WorkspaceNotEmpty
    );
    log.apply(Command::BeginDelete {
        target: SandboxTarget::Id("a1".into()),
    })
    .unwrap();
    log.apply(Command::CompleteDelete {
        sandbox_id: "a1".into(),
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
