//! The orphan reconciler's plan: what the driver runs compared with what the
//! replicated state says should run. Pure — the executor feeds it the
//! driver's listing and a linearized state, and carries out the plan.
//!
//! # Key decision: list first, then read the state
//!
//! The leader lists the driver *before* it reads the state (linearizably,
//! after confirming its leadership). Any execution in the listing was
//! launched after its `Begin*` entry applied on a leader, so the state read
//! afterwards knows its sandbox: a sandbox created meanwhile is never taken
//! for an orphan. An execution is reaped only after it was seen orphaned
//! for a whole grace period (the executor keeps the first sighting), and
//! never while its sandbox has an operation in flight (the operation will
//! settle it).
//!
//! Orphans and what is done to them:
//!
//! - the sandbox is not in the state (deleted, or never created: a deposed
//!   leader's late launch): `remove` the sandbox at the driver, fenced at
//!   the applied index (no operation of that sandbox can come later);
//! - the sandbox exists, has no operation in flight, and the execution is
//!   not its current generation: `stop` that execution, fenced at the
//!   sandbox's resource version (every later operation begins after it);
//! - the execution is the current generation, but the state says nothing
//!   runs (STOPPED, ERROR, COMPLETED, no operation in flight): a deposed
//!   leader's launch that came after its successor's launch of the same
//!   generation was refused before the driver saw the successor's fence
//!   (the launch failed, the sandbox is ERROR, yet the late one runs).
//!   `stop` it, fenced at the sandbox's resource version, as above.
//!
//! A READY sandbox whose execution is gone is not this module's business:
//! the executor's inspection records it lost.

use std::collections::BTreeSet;

use palisade_driver::ExecutionStatus;
use palisade_lifecycle::{SandboxPhase, State};
use serde::Serialize;

/// Most orphans reaped in one round; the rest wait for the next round.
pub const ORPHANS_REAPED_PER_ROUND_MAX: usize = 32;

/// Why an execution is an orphan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanReason {
    /// Its sandbox is not in the state.
    SandboxGone,
    /// Its sandbox exists, but runs another generation.
    StaleGeneration,
    /// Its sandbox's current generation, in a phase where nothing runs.
    NotRunningPhase,
}

impl OrphanReason {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            OrphanReason::SandboxGone => "sandbox_gone",
            OrphanReason::StaleGeneration => "stale_generation",
            OrphanReason::NotRunningPhase => "not_running_phase",
        }
    }
}

/// What the reconciler does to an orphan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanAction {
    /// `remove` the whole sandbox at the driver (tombstone included).
    RemoveSandbox,
    /// `stop` this one execution.
    StopExecution,
}

impl OrphanAction {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            OrphanAction::RemoveSandbox => "remove_sandbox",
            OrphanAction::StopExecution => "stop_execution",
        }
    }
}

/// One running execution the state does not account for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Orphan {
    /// Its sandbox.
    pub sandbox_id: String,
    /// Its generation.
    pub generation: u64,
    /// Why it is an orphan.
    pub reason: OrphanReason,
    /// What reaping it means.
    pub action: OrphanAction,
    /// The operation index its driver fence carries.
    pub fence_index: u64,
}

/// The orphans among `listed` (the driver's listing, taken before `state`
/// was read at `applied_index`), sorted by sandbox id then generation.
pub fn orphans(
    listed: &[(String, u64, ExecutionStatus)],
    state: &State,
    applied_index: u64,
) -> Vec<Orphan> {
    let mut found = BTreeSet::new();
    for (sandbox_id, generation, status) in listed {
        if !matches!(status, ExecutionStatus::Running { .. }) {
            continue;
        }
        match state.sandboxes.get(sandbox_id) {
            None => {
                found.insert(Orphan {
                    sandbox_id: sandbox_id.clone(),
                    generation: *generation,
                    reason: OrphanReason::SandboxGone,
                    action: OrphanAction::RemoveSandbox,
                    fence_index: applied_index,
                });
            }
            Some(sandbox) if sandbox.operation.is_some() => {}
            Some(sandbox) if sandbox.execution.generation == *generation => {
                if matches!(
                    sandbox.phase,
                    SandboxPhase::Stopped | SandboxPhase::Error | SandboxPhase::Completed
                ) {
                    found.insert(Orphan {
                        sandbox_id: sandbox_id.clone(),
                        generation: *generation,
                        reason: OrphanReason::NotRunningPhase,
                        action: OrphanAction::StopExecution,
                        fence_index: sandbox.resource_version,
                    });
                }
            }
            Some(sandbox) => {
                found.insert(Orphan {
                    sandbox_id: sandbox_id.clone(),
                    generation: *generation,
                    reason: OrphanReason::StaleGeneration,
                    action: OrphanAction::StopExecution,
                    fence_index: sandbox.resource_version,
                });
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_driver::{ExecutionHandle, ExecutionIdentity};
    use palisade_lifecycle::{
        Command, CompletionOf, LaunchResult, LogPosition, RequestMeta, SandboxSpec, SandboxTarget,
        apply,
    };

    fn running(id: &str, generation: u64) -> (String, u64, ExecutionStatus) {
        (
            id.to_string(),
            generation,
            ExecutionStatus::Running {
                handle: ExecutionHandle {
                    generation,
                    identity: ExecutionIdentity::Opaque { id: id.into() },
                },
            },
        )
    }

    struct Log {
        state: State,
        index: u64,
    }

    impl Log {
        fn apply(&mut self, command: Command) {
            let command = command.bound_to(&self.state, 1);
            self.index += 1;
            let position = LogPosition {
                index: self.index,
                term: 1,
            };
            apply(&mut self.state, position, &command).expect("accepted");
        }
    }

    fn request(id: &str) -> RequestMeta {
        RequestMeta {
            id: id.into(),
            payload_digest: id.into(),
            time_ms: 1,
        }
    }

    fn ready(log: &mut Log, id: &str) {
        log.apply(Command::BeginCreate {
            id: id.into(),
            workspace: "default".into(),
            name: id.into(),
            spec: SandboxSpec::default(),
            labels: Default::default(),
            annotations: Default::default(),
            time_ms: 1,
            host_identity: "host".into(),
            request: request(&format!("create-{id}")),
        });
        log.apply(Command::CompleteLaunch {
            sandbox_id: id.into(),
            of: CompletionOf::UNBOUND,
            generation: 1,
            result: LaunchResult::Running {
                handle: "h".into(),
                driver: "test".into(),
            },
        });
    }

    #[test]
    fn gone_sandboxes_and_stale_generations_are_orphans_and_nothing_else() {
        let mut log = Log {
            state: State::new(),
            index: 0,
        };
        ready(&mut log, "current");
        ready(&mut log, "busy");
        log.apply(Command::BeginStop {
            target: SandboxTarget::Id("busy".into()),
            expected_execution: None,
            request: request("stop-busy"),
        });
        let listed = vec![
            running("busy", 7),    // an operation is in flight: not judged
            running("current", 1), // the current generation
            running("current", 3), // another generation of a live sandbox
            running("deleted", 2), // no such sandbox
            ("exited".to_string(), 1, ExecutionStatus::Exited { code: 0 }),
        ];
        let resource_version = log.state.sandboxes["current"].resource_version;
        assert_eq!(
            orphans(&listed, &log.state, 42),
            vec![
                Orphan {
                    sandbox_id: "current".into(),
                    generation: 3,
                    reason: OrphanReason::StaleGeneration,
                    action: OrphanAction::StopExecution,
                    fence_index: resource_version,
                },
                Orphan {
                    sandbox_id: "deleted".into(),
                    generation: 2,
                    reason: OrphanReason::SandboxGone,
                    action: OrphanAction::RemoveSandbox,
                    fence_index: 42,
                },
            ]
        );
    }

    #[test]
    fn the_current_generation_running_in_a_phase_where_nothing_runs_is_an_orphan() {
        let mut log = Log {
            state: State::new(),
            index: 0,
        };
        ready(&mut log, "ready");
        // A launch that failed: ERROR at generation 1, no operation.
        log.apply(Command::BeginCreate {
            id: "failed".into(),
            workspace: "default".into(),
            name: "failed".into(),
            spec: SandboxSpec::default(),
            labels: Default::default(),
            annotations: Default::default(),
            time_ms: 1,
            host_identity: "host".into(),
            request: request("create-failed"),
        });
        log.apply(Command::CompleteLaunch {
            sandbox_id: "failed".into(),
            of: CompletionOf::UNBOUND,
            generation: 1,
            result: LaunchResult::Failed {
                message: "refused".into(),
            },
        });
        let failed = &log.state.sandboxes["failed"];
        assert_eq!(failed.phase, SandboxPhase::Error);
        assert!(failed.operation.is_none());
        let resource_version = failed.resource_version;
        // Yet the driver runs generation 1 (a deposed leader's late launch).
        let listed = vec![running("ready", 1), running("failed", 1)];
        assert_eq!(
            orphans(&listed, &log.state, 42),
            vec![Orphan {
                sandbox_id: "failed".into(),
                generation: 1,
                reason: OrphanReason::NotRunningPhase,
                action: OrphanAction::StopExecution,
                fence_index: resource_version,
            }]
        );
    }
}
