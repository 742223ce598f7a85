//! The state transition function.
//!
//! `apply` decides every precondition (name free, workspace active, phase
//! allows the operation) in log order, so a decision is made once for the
//! whole cluster. A rejection changes nothing.

use serde::{Deserialize, Serialize};

use crate::command::{Command, LaunchResult, SandboxTarget};
use crate::limits::{SANDBOXES_PER_WORKSPACE_MAX, STATUS_MESSAGE_LENGTH_MAX, WORKSPACES_COUNT_MAX};
use crate::state::{
    DEFAULT_WORKSPACE, Execution, Operation, OperationKind, Sandbox, SandboxPhase, State,
    Workspace, WorkspacePhase, assert_sandbox_invariants,
};
use crate::validate;

/// Where the entry being applied sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// Log index; becomes the `resource_version` of what the entry changes.
    pub index: u64,
    /// Term of the leader that appended the entry.
    pub term: u64,
}

/// What an accepted command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A workspace was created.
    WorkspaceCreated {
        /// Its name.
        name: String,
    },
    /// A workspace was removed.
    WorkspaceDeleted {
        /// Its name.
        name: String,
    },
    /// A `Begin*` command started an operation; the executor takes it on.
    OperationBegun {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        kind: OperationKind,
        /// Target generation.
        generation: u64,
    },
    /// The same operation was already in flight; the caller joins it.
    OperationJoined {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        kind: OperationKind,
        /// Target generation.
        generation: u64,
    },
    /// The sandbox already is where the command would take it (stop of a
    /// stopped sandbox, start of a running one); nothing changed.
    AlreadyDone {
        /// Sandbox id.
        sandbox_id: String,
    },
    /// A `Complete*` or `Observe*` command took effect.
    Completed {
        /// Sandbox id.
        sandbox_id: String,
    },
    /// The log entry carried no lifecycle command (a leader's blank entry or
    /// a membership change); the state is unchanged.
    NotACommand,
    /// A `Complete*` or `Observe*` command that no longer matches the
    /// sandbox (stale generation, superseded operation, sandbox gone) and
    /// changed nothing.
    Ignored {
        /// Sandbox id.
        sandbox_id: String,
    },
}

/// Why a command was rejected: a stable reason (the API's ErrorInfo reason).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Malformed input; names the field.
    InvalidArgument {
        /// API field name.
        field: String,
    },
    /// The name is in use.
    NameTaken,
    /// No such workspace.
    WorkspaceNotFound,
    /// No such sandbox.
    SandboxNotFound,
    /// The sandbox's phase does not allow the operation.
    InvalidPhase,
    /// The workspace still holds sandboxes.
    WorkspaceNotEmpty,
    /// The workspace is being deleted.
    WorkspaceTerminating,
    /// The default workspace cannot be deleted.
    DefaultWorkspaceProtected,
    /// A bound of [`crate::limits`] would be exceeded.
    ResourceExhausted,
}

impl Reason {
    /// The stable ErrorInfo reason string.
    pub fn as_str(&self) -> String {
        match self {
            Reason::InvalidArgument { field } => {
                format!("INVALID_{}", field.replace('.', "_").to_ascii_uppercase())
            }
            Reason::NameTaken => "NAME_TAKEN".into(),
            Reason::WorkspaceNotFound => "WORKSPACE_NOT_FOUND".into(),
            Reason::SandboxNotFound => "SANDBOX_NOT_FOUND".into(),
            Reason::InvalidPhase => "INVALID_PHASE".into(),
            Reason::WorkspaceNotEmpty => "WORKSPACE_NOT_EMPTY".into(),
            Reason::WorkspaceTerminating => "WORKSPACE_TERMINATING".into(),
            Reason::DefaultWorkspaceProtected => "DEFAULT_WORKSPACE_PROTECTED".into(),
            Reason::ResourceExhausted => "RESOURCE_EXHAUSTED".into(),
        }
    }
}

/// A deterministic rejection: applied identically on every replica, changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// Stable reason.
    pub reason: Reason,
    /// What happened and what to do next.
    pub message: String,
}

/// The result of applying one command.
pub type Response = Result<Outcome, Rejection>;

fn reject(reason: Reason, message: impl Into<String>) -> Response {
    Err(Rejection {
        reason,
        message: message.into(),
    })
}

fn truncate_message(mut message: String) -> String {
    if message.len() > STATUS_MESSAGE_LENGTH_MAX {
        let mut cut = STATUS_MESSAGE_LENGTH_MAX;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

/// Applies one committed command at `position`. Deterministic: depends only
/// on `state`, `position` and `command`.
pub fn apply(state: &mut State, position: LogPosition, command: &Command) -> Response {
    let response = match command {
        Command::CreateWorkspace { id, name, time_ms } => {
            create_workspace(state, position, id, name, *time_ms)
        }
        Command::DeleteWorkspace { name } => delete_workspace(state, name),
        Command::BeginCreate { .. } => begin_create(state, position, command),
        Command::BeginStop { target } => begin_stop(state, position, target),
        Command::BeginStart { target } => begin_start(state, position, target),
        Command::BeginDelete { target } => begin_delete(state, position, target),
        Command::CompleteLaunch {
            sandbox_id,
            generation,
            result,
        } => complete_launch(state, position, sandbox_id, *generation, result),
        Command::CompleteStop {
            sandbox_id,
            generation,
            exit_code,
        } => complete_stop(state, position, sandbox_id, *generation, *exit_code),
        Command::CompleteDelete { sandbox_id } => complete_delete(state, sandbox_id),
        Command::ObserveExit {
            sandbox_id,
            generation,
            exit_code,
        } => observe_exit(state, position, sandbox_id, *generation, *exit_code),
    };
    if let Ok(
        Outcome::OperationBegun { sandbox_id, .. }
        | Outcome::OperationJoined { sandbox_id, .. }
        | Outcome::Completed { sandbox_id },
    ) = &response
        && let Some(sandbox) = state.sandboxes.get(sandbox_id)
    {
        assert_sandbox_invariants(sandbox);
    }
    response
}

fn create_workspace(
    state: &mut State,
    position: LogPosition,
    id: &str,
    name: &str,
    time_ms: i64,
) -> Response {
    if let Err(invalid) = validate::name("name", name) {
        return reject(
            Reason::InvalidArgument {
                field: invalid.field.into(),
            },
            invalid.to_string(),
        );
    }
    if state.workspaces.contains_key(name) {
        return reject(
            Reason::NameTaken,
            format!("workspace {name:?} already exists"),
        );
    }
    if state.workspaces.len() >= WORKSPACES_COUNT_MAX {
        return reject(
            Reason::ResourceExhausted,
            format!("the cluster holds the maximum of {WORKSPACES_COUNT_MAX} workspaces"),
        );
    }
    state.workspaces.insert(
        name.to_string(),
        Workspace {
            id: id.to_string(),
            name: name.to_string(),
            phase: WorkspacePhase::Active,
            resource_version: position.index,
            created_at_ms: time_ms,
        },
    );
    state.names.insert(name.to_string(), Default::default());
    Ok(Outcome::WorkspaceCreated { name: name.into() })
}

fn delete_workspace(state: &mut State, name: &str) -> Response {
    if name == DEFAULT_WORKSPACE {
        return reject(
            Reason::DefaultWorkspaceProtected,
            "the default workspace cannot be deleted",
        );
    }
    if !state.workspaces.contains_key(name) {
        return reject(
            Reason::WorkspaceNotFound,
            format!("workspace {name:?} does not exist"),
        );
    }
    let remaining = state.sandbox_count(name);
    if remaining > 0 {
        let names: Vec<&str> = state.names[name]
            .keys()
            .take(10)
            .map(String::as_str)
            .collect();
        return reject(
            Reason::WorkspaceNotEmpty,
            format!(
                "workspace {name:?} still holds {remaining} sandbox(es): {}{}; delete them first",
                names.join(", "),
                if remaining > names.len() { ", ..." } else { "" }
            ),
        );
    }
    state.workspaces.remove(name);
    state.names.remove(name);
    Ok(Outcome::WorkspaceDeleted { name: name.into() })
}

fn begin_create(state: &mut State, position: LogPosition, command: &Command) -> Response {
    let Command::BeginCreate {
        id,
        workspace,
        name,
        spec,
        labels,
        annotations,
        time_ms,
    } = command
    else {
        unreachable!("begin_create is called with BeginCreate only");
    };
    let checks = validate::name("name", name)
        .and_then(|()| validate::spec(spec))
        .and_then(|()| validate::labels("labels", labels))
        .and_then(|()| validate::annotations(annotations));
    if let Err(invalid) = checks {
        return reject(
            Reason::InvalidArgument {
                field: invalid.field.into(),
            },
            invalid.to_string(),
        );
    }
    if id.is_empty() {
        return reject(
            Reason::InvalidArgument { field: "id".into() },
            "the proposer must choose a sandbox id",
        );
    }
    let Some(ws) = state.workspaces.get(workspace) else {
        return reject(
            Reason::WorkspaceNotFound,
            format!("workspace {workspace:?} does not exist; create it first"),
        );
    };
    if ws.phase == WorkspacePhase::Terminating {
        return reject(
            Reason::WorkspaceTerminating,
            format!("workspace {workspace:?} is being deleted"),
        );
    }
    if let Some(existing) = state.sandbox_by_name(workspace, name) {
        return reject(
            Reason::NameTaken,
            format!(
                "a sandbox named {name:?} already exists in workspace {workspace:?} (phase {})",
                existing.phase.as_str()
            ),
        );
    }
    if state.sandboxes.contains_key(id) {
        return reject(
            Reason::NameTaken,
            format!("sandbox id {id} is already in use"),
        );
    }
    if state.sandbox_count(workspace) >= SANDBOXES_PER_WORKSPACE_MAX {
        return reject(
            Reason::ResourceExhausted,
            format!(
                "workspace {workspace:?} holds the maximum of {SANDBOXES_PER_WORKSPACE_MAX} sandboxes"
            ),
        );
    }
    let generation = 1;
    let sandbox = Sandbox {
        id: id.clone(),
        name: name.clone(),
        workspace: workspace.clone(),
        labels: labels.clone(),
        annotations: annotations.clone(),
        resource_version: position.index,
        created_at_ms: *time_ms,
        spec: spec.clone(),
        phase: SandboxPhase::Provisioning,
        execution: Execution {
            generation,
            handle: None,
            driver: None,
            exit_code: None,
        },
        message: None,
        operation: Some(Operation {
            kind: OperationKind::Create,
            generation,
            begun_at_index: position.index,
        }),
    };
    state.sandboxes.insert(id.clone(), sandbox);
    state
        .names
        .get_mut(workspace)
        .expect("every workspace has a name index (State::assert_invariants)")
        .insert(name.clone(), id.clone());
    Ok(Outcome::OperationBegun {
        sandbox_id: id.clone(),
        kind: OperationKind::Create,
        generation,
    })
}

fn resolve<'a>(state: &'a mut State, target: &SandboxTarget) -> Result<&'a mut Sandbox, Rejection> {
    let id = match target {
        SandboxTarget::Id(id) => id.clone(),
        SandboxTarget::Name { workspace, name } => {
            match state.names.get(workspace).and_then(|names| names.get(name)) {
                Some(id) => id.clone(),
                None if !state.workspaces.contains_key(workspace) => {
                    return Err(Rejection {
                        reason: Reason::WorkspaceNotFound,
                        message: format!("workspace {workspace:?} does not exist"),
                    });
                }
                None => {
                    return Err(Rejection {
                        reason: Reason::SandboxNotFound,
                        message: format!("no sandbox named {name:?} in workspace {workspace:?}"),
                    });
                }
            }
        }
    };
    state.sandboxes.get_mut(&id).ok_or_else(|| Rejection {
        reason: Reason::SandboxNotFound,
        message: format!("no sandbox with id {id}"),
    })
}

fn invalid_phase(sandbox: &Sandbox, operation: &str) -> Response {
    reject(
        Reason::InvalidPhase,
        format!(
            "cannot {operation} sandbox {:?}: it is {}{}",
            sandbox.name,
            sandbox.phase.as_str(),
            match &sandbox.operation {
                Some(op) => format!(" ({:?} of generation {} in flight)", op.kind, op.generation),
                None => String::new(),
            }
        ),
    )
}

fn begin_operation(
    sandbox: &mut Sandbox,
    position: LogPosition,
    kind: OperationKind,
    phase: SandboxPhase,
) -> Response {
    sandbox.phase = phase;
    sandbox.operation = Some(Operation {
        kind,
        generation: sandbox.execution.generation,
        begun_at_index: position.index,
    });
    sandbox.resource_version = position.index;
    Ok(Outcome::OperationBegun {
        sandbox_id: sandbox.id.clone(),
        kind,
        generation: sandbox.execution.generation,
    })
}

fn joined(sandbox: &Sandbox) -> Response {
    let op = sandbox
        .operation
        .as_ref()
        .expect("joined() is called only while an operation is in flight");
    Ok(Outcome::OperationJoined {
        sandbox_id: sandbox.id.clone(),
        kind: op.kind,
        generation: op.generation,
    })
}

fn begin_stop(state: &mut State, position: LogPosition, target: &SandboxTarget) -> Response {
    let sandbox = resolve(state, target)?;
    match sandbox.phase {
        SandboxPhase::Ready | SandboxPhase::Unknown => begin_operation(
            sandbox,
            position,
            OperationKind::Stop,
            SandboxPhase::Stopping,
        ),
        SandboxPhase::Stopping => joined(sandbox),
        phase if phase.is_at_rest() => Ok(Outcome::AlreadyDone {
            sandbox_id: sandbox.id.clone(),
        }),
        _ => invalid_phase(sandbox, "stop"),
    }
}

fn begin_start(state: &mut State, position: LogPosition, target: &SandboxTarget) -> Response {
    let sandbox = resolve(state, target)?;
    match sandbox.phase {
        phase if phase.is_at_rest() => {
            let generation = sandbox
                .execution
                .generation
                .checked_add(1)
                .expect("generation overflow: 2^64 launches of one sandbox");
            sandbox.execution = Execution {
                generation,
                handle: None,
                driver: None,
                exit_code: None,
            };
            sandbox.message = None;
            begin_operation(
                sandbox,
                position,
                OperationKind::Start,
                SandboxPhase::Starting,
            )
        }
        SandboxPhase::Ready => Ok(Outcome::AlreadyDone {
            sandbox_id: sandbox.id.clone(),
        }),
        SandboxPhase::Starting => joined(sandbox),
        _ => invalid_phase(sandbox, "start"),
    }
}

fn begin_delete(state: &mut State, position: LogPosition, target: &SandboxTarget) -> Response {
    let sandbox = resolve(state, target)?;
    if sandbox.phase == SandboxPhase::Deleting {
        return joined(sandbox);
    }
    // Delete supersedes any other operation in flight: the executor runs one
    // effect per sandbox at a time, so the superseded launch or stop finishes
    // (or is abandoned) before the removal starts, and its late completion no
    // longer matches and is ignored.
    begin_operation(
        sandbox,
        position,
        OperationKind::Delete,
        SandboxPhase::Deleting,
    )
}

fn operation_matches(sandbox: &Sandbox, kinds: &[OperationKind], generation: u64) -> bool {
    sandbox
        .operation
        .as_ref()
        .is_some_and(|op| kinds.contains(&op.kind) && op.generation == generation)
}

fn complete_launch(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    generation: u64,
    result: &LaunchResult,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    if !operation_matches(
        sandbox,
        &[OperationKind::Create, OperationKind::Start],
        generation,
    ) {
        return ignored;
    }
    match result {
        LaunchResult::Running { handle, driver } => {
            sandbox.phase = SandboxPhase::Ready;
            sandbox.execution.handle = Some(handle.clone());
            sandbox.execution.driver = Some(driver.clone());
            sandbox.message = None;
        }
        LaunchResult::Failed { message } => {
            sandbox.phase = SandboxPhase::Error;
            sandbox.message = Some(truncate_message(message.clone()));
        }
    }
    sandbox.operation = None;
    sandbox.resource_version = position.index;
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

fn complete_stop(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    generation: u64,
    exit_code: Option<i32>,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    if !operation_matches(sandbox, &[OperationKind::Stop], generation) {
        return ignored;
    }
    sandbox.phase = SandboxPhase::Stopped;
    sandbox.execution.exit_code = exit_code;
    sandbox.operation = None;
    sandbox.resource_version = position.index;
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

fn complete_delete(state: &mut State, sandbox_id: &str) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get(sandbox_id) else {
        return ignored;
    };
    if !sandbox
        .operation
        .as_ref()
        .is_some_and(|op| op.kind == OperationKind::Delete)
    {
        return ignored;
    }
    let (workspace, name) = (sandbox.workspace.clone(), sandbox.name.clone());
    state.sandboxes.remove(sandbox_id);
    let removed = state
        .names
        .get_mut(&workspace)
        .and_then(|names| names.remove(&name));
    assert_eq!(
        removed.as_deref(),
        Some(sandbox_id),
        "the name {workspace}/{name} must point at the sandbox being deleted"
    );
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

fn observe_exit(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    generation: u64,
    exit_code: i32,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    // Only an execution that runs undisturbed can "exit on its own"; an exit
    // during a stop or delete is that operation's business.
    if sandbox.phase != SandboxPhase::Ready || sandbox.execution.generation != generation {
        return ignored;
    }
    sandbox.phase = if exit_code == 0 {
        SandboxPhase::Completed
    } else {
        SandboxPhase::Error
    };
    sandbox.execution.exit_code = Some(exit_code);
    if exit_code != 0 {
        sandbox.message = Some(format!("the command exited with status {exit_code}"));
    }
    sandbox.resource_version = position.index;
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}
