//! The sequential model of one sandbox *name*, against which each name's
//! history must be linearizable.
//!
//! # What the model abstracts
//!
//! A name is free or holds one sandbox: its id, its current generation and
//! where it comes to rest — running (READY), stopped (STOPPED, COMPLETED) or
//! failed (ERROR). Every write is modelled as one atomic step somewhere
//! between its invocation and its answer; for Palisade that point is the
//! apply of its `Begin*` entry, where every precondition is decided.
//!
//! The implementation has states the model has not: an operation in flight
//! (PROVISIONING, STOPPING, STARTING, DELETING). The model stays sound
//! (never reports a correct history as an anomaly) by being lenient exactly
//! there, and nowhere else:
//!
//! - an answer showing a transitional phase matches any resting status
//!   (the id and generation must still match);
//! - INVALID_PHASE (refused because another operation was in flight) and
//!   refusals made at the API edge before anything was proposed are
//!   allowed in any state and change nothing;
//! - an operation with an unknown outcome may take effect (any of its
//!   possible effects) or not.
//!
//! The model is nondeterministic (a create's launch may fail; an unknown
//! create's id is not known), so a step returns every possible next state
//! and the search tracks sets of states, as Porcupine does.

use std::collections::HashMap;

use crate::history::{Call, Phase, Reply};

/// Where a sandbox comes to rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// READY: its execution runs.
    Running,
    /// STOPPED or COMPLETED: nothing runs.
    Stopped,
    /// ERROR: the launch failed.
    Failed,
}

/// The state of one name. Ids are interned per name ([`Interner`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameState {
    /// No sandbox holds the name.
    Free,
    /// No sandbox holds the name since a delete removed sandbox `id`. A
    /// delete of `id` that joined the one in flight (same expected id,
    /// arrived while it ran) answers "deleted" too; the model lets such an
    /// answer share the first delete's point. (It would also accept such an
    /// answer long after, which the implementation never gives: a small
    /// leniency, in the one place where the model cannot see the delete in
    /// flight.)
    Freed {
        /// The sandbox the delete removed.
        id: u32,
    },
    /// A sandbox holds it.
    Taken {
        /// Its id; `None` when it was made by a create whose answer was
        /// lost, until an answer shows it.
        id: Option<u32>,
        /// Its current generation.
        generation: u64,
        /// Where it rests.
        status: Status,
    },
}

/// A call with its ids interned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelCall {
    /// Create.
    Create,
    /// Linearizable get.
    Get,
    /// Stop with the token of (id, generation).
    Stop {
        /// Token's sandbox id.
        id: u32,
        /// Token's generation.
        generation: u64,
    },
    /// Start with the token of (id, generation).
    Start {
        /// Token's sandbox id.
        id: u32,
        /// Token's generation.
        generation: u64,
    },
    /// Delete with an expected id.
    Delete {
        /// The expected id.
        expected: u32,
    },
}

/// A definite refusal decided against the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// NAME_TAKEN.
    NameTaken,
    /// SANDBOX_NOT_FOUND.
    NotFound,
    /// STALE_EXECUTION.
    StaleExecution,
    /// SANDBOX_IDENTITY_MISMATCH.
    IdentityMismatch,
}

/// An answer with its ids interned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelReply {
    /// OK with a sandbox.
    Sandbox {
        /// Its id.
        id: u32,
        /// Its generation.
        generation: u64,
        /// Its phase.
        phase: Phase,
    },
    /// OK to a delete.
    Deleted {
        /// The id deleted.
        id: u32,
    },
    /// A refusal the state decides.
    Refused(Refusal),
    /// A refusal that changes nothing and that the model allows in any
    /// state (INVALID_PHASE, refusals at the API edge).
    NoEffect,
    /// Unknown outcome.
    Unknown,
    /// An answer the model cannot explain in any state (a delete that says
    /// it deleted nothing, an unexpected reason): never linearizable.
    Impossible,
}

/// Reasons of refusals decided before anything was proposed, or because
/// another operation was in flight: allowed in any state, no effect.
/// (OVERLOADED: shed before a handler ran; STATE_BUDGET_EXHAUSTED: refused
/// before proposing.)
pub const NO_EFFECT_REASONS: &[&str] = &[
    "INVALID_PHASE",
    "UNVERIFIABLE_EXECUTION_TOKEN",
    "RESOURCE_EXHAUSTED",
    "OVERLOADED",
    "STATE_BUDGET_EXHAUSTED",
];

/// Interns sandbox ids as small integers, per name.
#[derive(Debug, Default)]
pub struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    /// The number for `id`.
    pub fn intern(&mut self, id: &str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(id.to_string()).or_insert(next)
    }

    /// Converts a call.
    pub fn call(&mut self, call: &Call) -> ModelCall {
        match call {
            Call::Create { .. } => ModelCall::Create,
            Call::Get { .. } => ModelCall::Get,
            Call::Stop { id, generation, .. } => ModelCall::Stop {
                id: self.intern(id),
                generation: *generation,
            },
            Call::Start { id, generation, .. } => ModelCall::Start {
                id: self.intern(id),
                generation: *generation,
            },
            Call::Delete { expected_id, .. } => ModelCall::Delete {
                expected: self.intern(expected_id),
            },
        }
    }

    /// Converts an answer.
    pub fn reply(&mut self, reply: &Reply) -> ModelReply {
        match reply {
            Reply::Sandbox(observed) => ModelReply::Sandbox {
                id: self.intern(&observed.id),
                generation: observed.generation,
                phase: observed.phase,
            },
            Reply::Deleted { id, deleted: true } => ModelReply::Deleted {
                id: self.intern(id),
            },
            Reply::Deleted { deleted: false, .. } => ModelReply::Impossible,
            Reply::Rejected { reason, .. } => match reason.as_str() {
                "NAME_TAKEN" => ModelReply::Refused(Refusal::NameTaken),
                "SANDBOX_NOT_FOUND" => ModelReply::Refused(Refusal::NotFound),
                "STALE_EXECUTION" => ModelReply::Refused(Refusal::StaleExecution),
                "SANDBOX_IDENTITY_MISMATCH" => ModelReply::Refused(Refusal::IdentityMismatch),
                reason if NO_EFFECT_REASONS.contains(&reason) => ModelReply::NoEffect,
                _ => ModelReply::Impossible,
            },
            Reply::Unknown { .. } => ModelReply::Unknown,
        }
    }
}

impl NameState {
    /// True when no sandbox holds the name.
    pub fn is_free(&self) -> bool {
        matches!(self, NameState::Free | NameState::Freed { .. })
    }
}

/// The resting statuses an answer's phase allows.
fn statuses(phase: Phase, transitional: &[Status]) -> Vec<Status> {
    match phase {
        Phase::Ready => vec![Status::Running],
        Phase::Stopped | Phase::Completed => vec![Status::Stopped],
        Phase::Error => vec![Status::Failed],
        _ => transitional.to_vec(),
    }
}

const ANY_STATUS: [Status; 3] = [Status::Running, Status::Stopped, Status::Failed];
const LAUNCHED: [Status; 2] = [Status::Running, Status::Failed];

/// Whether the sandbox holding the name may be `id`: it is, or its id is
/// not known yet. Returns the state with the id bound.
fn holds(state: &NameState, id: u32) -> Option<NameState> {
    match state {
        NameState::Taken { id: Some(held), .. } if *held == id => Some(state.clone()),
        NameState::Taken {
            id: None,
            generation,
            status,
        } => Some(NameState::Taken {
            id: Some(id),
            generation: *generation,
            status: *status,
        }),
        _ => None,
    }
}

/// Whether the sandbox holding the name may be another than `id` (or none
/// holds it): then `id` no longer exists.
fn may_lack(state: &NameState, id: u32) -> bool {
    !matches!(state, NameState::Taken { id: Some(held), .. } if *held == id)
}

/// Every state `call` can lead to from `state` when it answers `reply`;
/// empty when the answer is impossible there.
pub fn step(state: &NameState, call: &ModelCall, reply: &ModelReply) -> Vec<NameState> {
    match reply {
        ModelReply::Impossible => Vec::new(),
        ModelReply::NoEffect => vec![state.clone()],
        ModelReply::Unknown => {
            let mut next = effects(state, call);
            next.push(state.clone());
            next
        }
        _ => answered(state, call, reply),
    }
}

/// The states a call that took effect can lead to (its answer unknown).
fn effects(state: &NameState, call: &ModelCall) -> Vec<NameState> {
    match call {
        ModelCall::Get => Vec::new(),
        ModelCall::Create => match state {
            NameState::Free | NameState::Freed { .. } => LAUNCHED
                .iter()
                .map(|status| NameState::Taken {
                    id: None,
                    generation: 1,
                    status: *status,
                })
                .collect(),
            NameState::Taken { .. } => Vec::new(),
        },
        ModelCall::Stop { id, generation } => match holds(state, *id) {
            Some(NameState::Taken {
                id,
                generation: current,
                status: Status::Running,
            }) if current == *generation => vec![NameState::Taken {
                id,
                generation: current,
                status: Status::Stopped,
            }],
            _ => Vec::new(),
        },
        ModelCall::Start { id, generation } => match holds(state, *id) {
            Some(NameState::Taken {
                id,
                generation: current,
                status: Status::Stopped | Status::Failed,
            }) if current == *generation => LAUNCHED
                .iter()
                .map(|status| NameState::Taken {
                    id,
                    generation: current + 1,
                    status: *status,
                })
                .collect(),
            _ => Vec::new(),
        },
        ModelCall::Delete { expected } => match holds(state, *expected) {
            Some(_) => vec![NameState::Freed { id: *expected }],
            None => Vec::new(),
        },
    }
}

/// The states a call with a definite answer can lead to.
fn answered(state: &NameState, call: &ModelCall, reply: &ModelReply) -> Vec<NameState> {
    use ModelReply::{Deleted, Refused, Sandbox};
    match (call, reply) {
        (
            ModelCall::Create,
            Sandbox {
                id,
                generation,
                phase,
            },
        ) => {
            if !state.is_free() || *generation != 1 {
                return Vec::new();
            }
            statuses(*phase, &LAUNCHED)
                .into_iter()
                .filter(|status| LAUNCHED.contains(status))
                .map(|status| NameState::Taken {
                    id: Some(*id),
                    generation: 1,
                    status,
                })
                .collect()
        }
        (ModelCall::Create, Refused(Refusal::NameTaken)) => match state {
            NameState::Taken { .. } => vec![state.clone()],
            _ => Vec::new(),
        },
        (ModelCall::Get, Refused(Refusal::NotFound)) => {
            if state.is_free() {
                vec![state.clone()]
            } else {
                Vec::new()
            }
        }
        (
            ModelCall::Get,
            Sandbox {
                id,
                generation,
                phase,
            },
        ) => match holds(state, *id) {
            Some(NameState::Taken {
                id,
                generation: current,
                status,
            }) if current == *generation && statuses(*phase, &ANY_STATUS).contains(&status) => {
                vec![NameState::Taken {
                    id,
                    generation: current,
                    status,
                }]
            }
            _ => Vec::new(),
        },
        (ModelCall::Stop { id, .. } | ModelCall::Start { id, .. }, Refused(Refusal::NotFound)) => {
            if may_lack(state, *id) {
                vec![state.clone()]
            } else {
                Vec::new()
            }
        }
        (
            ModelCall::Stop { id, generation } | ModelCall::Start { id, generation },
            Refused(Refusal::StaleExecution),
        ) => match holds(state, *id) {
            Some(
                bound @ NameState::Taken {
                    generation: current,
                    ..
                },
            ) if current != *generation => {
                vec![bound]
            }
            _ => Vec::new(),
        },
        (
            ModelCall::Stop { id, generation },
            Sandbox {
                id: answered_id,
                generation: answered_generation,
                phase,
            },
        ) => {
            if answered_id != id || answered_generation != generation {
                return Vec::new();
            }
            match holds(state, *id) {
                Some(NameState::Taken {
                    id,
                    generation: current,
                    status,
                }) if current == *generation => {
                    let rest = match status {
                        Status::Running => vec![Status::Stopped],
                        resting => vec![resting],
                    };
                    if phase.is_transitional() {
                        // Superseded by a delete: it will not rest anywhere.
                        return vec![
                            NameState::Taken {
                                id,
                                generation: current,
                                status,
                            },
                            NameState::Taken {
                                id,
                                generation: current,
                                status: Status::Stopped,
                            },
                        ];
                    }
                    rest.into_iter()
                        .filter(|rest| statuses(*phase, &ANY_STATUS).contains(rest))
                        .map(|status| NameState::Taken {
                            id,
                            generation: current,
                            status,
                        })
                        .collect()
                }
                _ => Vec::new(),
            }
        }
        (
            ModelCall::Start { id, generation },
            Sandbox {
                id: answered_id,
                generation: answered_generation,
                phase,
            },
        ) => {
            if answered_id != id {
                return Vec::new();
            }
            match holds(state, *id) {
                Some(NameState::Taken {
                    id,
                    generation: current,
                    status,
                }) if current == *generation => {
                    if *answered_generation == current {
                        // Already running: answered as it is. Or the token's
                        // execution was still being launched when this start
                        // arrived: it joined that launch and answers its
                        // result — READY, ERROR, or DELETING if a delete
                        // superseded it. Never STOPPED.
                        let fits = status != Status::Stopped
                            && (phase.is_transitional()
                                || statuses(*phase, &ANY_STATUS).contains(&status));
                        return if fits {
                            vec![state_with(id, current, status)]
                        } else {
                            Vec::new()
                        };
                    }
                    if status == Status::Running || *answered_generation != current + 1 {
                        return Vec::new();
                    }
                    statuses(*phase, &LAUNCHED)
                        .into_iter()
                        .filter(|status| phase.is_transitional() || LAUNCHED.contains(status))
                        .map(|status| state_with(id, current + 1, status))
                        .collect()
                }
                _ => Vec::new(),
            }
        }
        (ModelCall::Delete { expected }, Deleted { id }) => {
            if id != expected {
                return Vec::new();
            }
            match (holds(state, *expected), state) {
                (Some(_), _) => vec![NameState::Freed { id: *expected }],
                // Joined the delete in flight (see `NameState::Freed`).
                (None, NameState::Freed { id: freed }) if freed == expected => {
                    vec![state.clone()]
                }
                _ => Vec::new(),
            }
        }
        (ModelCall::Delete { .. }, Refused(Refusal::NotFound)) => {
            if state.is_free() {
                vec![state.clone()]
            } else {
                Vec::new()
            }
        }
        (ModelCall::Delete { expected }, Refused(Refusal::IdentityMismatch)) => match state {
            NameState::Taken { .. } if may_lack(state, *expected) => {
                // An unknown id is now known not to be `expected`; the model
                // cannot name it, so it stays unknown.
                vec![state.clone()]
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn state_with(id: Option<u32>, generation: u64, status: Status) -> NameState {
    NameState::Taken {
        id,
        generation,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(id: u32, generation: u64, status: Status) -> NameState {
        state_with(Some(id), generation, status)
    }

    fn sandbox(id: u32, generation: u64, phase: Phase) -> ModelReply {
        ModelReply::Sandbox {
            id,
            generation,
            phase,
        }
    }

    #[test]
    fn create_takes_a_free_name_and_refuses_a_taken_one() {
        let created = step(
            &NameState::Free,
            &ModelCall::Create,
            &sandbox(0, 1, Phase::Ready),
        );
        assert_eq!(created, vec![taken(0, 1, Status::Running)]);
        let refused = ModelReply::Refused(Refusal::NameTaken);
        assert!(step(&NameState::Free, &ModelCall::Create, &refused).is_empty());
        assert_eq!(step(&created[0], &ModelCall::Create, &refused), created);
    }

    #[test]
    fn a_request_shed_before_any_handler_changes_nothing_in_any_state() {
        let mut interner = Interner::default();
        for reason in ["OVERLOADED", "STATE_BUDGET_EXHAUSTED"] {
            let reply = interner.reply(&Reply::Rejected {
                code: "ResourceExhausted".into(),
                reason: reason.into(),
            });
            assert_eq!(reply, ModelReply::NoEffect, "{reason}");
            let held = taken(0, 1, Status::Running);
            assert_eq!(step(&held, &ModelCall::Create, &reply), vec![held.clone()]);
        }
    }

    #[test]
    fn delete_only_removes_the_expected_id() {
        let state = taken(1, 1, Status::Running);
        let delete = |expected| ModelCall::Delete { expected };
        assert_eq!(
            step(&state, &delete(1), &ModelReply::Deleted { id: 1 }),
            vec![NameState::Freed { id: 1 }]
        );
        // A second delete of the same id that joined the first.
        assert_eq!(
            step(
                &NameState::Freed { id: 1 },
                &delete(1),
                &ModelReply::Deleted { id: 1 }
            ),
            vec![NameState::Freed { id: 1 }]
        );
        // Deleting the holder while expecting another id is an anomaly.
        assert!(step(&state, &delete(0), &ModelReply::Deleted { id: 1 }).is_empty());
        assert!(step(&state, &delete(0), &ModelReply::Deleted { id: 0 }).is_empty());
        let mismatch = ModelReply::Refused(Refusal::IdentityMismatch);
        assert_eq!(step(&state, &delete(0), &mismatch), vec![state.clone()]);
        assert!(step(&state, &delete(1), &mismatch).is_empty());
    }

    #[test]
    fn stop_is_bound_to_the_token_generation() {
        let state = taken(0, 2, Status::Running);
        let stale = ModelCall::Stop {
            id: 0,
            generation: 1,
        };
        let current = ModelCall::Stop {
            id: 0,
            generation: 2,
        };
        assert!(step(&state, &stale, &sandbox(0, 2, Phase::Stopped)).is_empty());
        assert_eq!(
            step(
                &state,
                &stale,
                &ModelReply::Refused(Refusal::StaleExecution)
            ),
            vec![state.clone()]
        );
        assert_eq!(
            step(&state, &current, &sandbox(0, 2, Phase::Stopped)),
            vec![taken(0, 2, Status::Stopped)]
        );
    }

    #[test]
    fn start_launches_the_next_generation_once() {
        let stopped = taken(0, 1, Status::Stopped);
        let start = ModelCall::Start {
            id: 0,
            generation: 1,
        };
        assert_eq!(
            step(&stopped, &start, &sandbox(0, 2, Phase::Ready)),
            vec![taken(0, 2, Status::Running)]
        );
        // Two generations for one start is an anomaly.
        assert!(step(&stopped, &start, &sandbox(0, 3, Phase::Ready)).is_empty());
    }

    #[test]
    fn a_start_that_joined_a_failing_launch_answers_its_result() {
        // Seed 57 (1000 operations): start (token g1) launched g2, which the
        // driver refused (ERROR); a second start with the token of g2, sent
        // while g2 was STARTING, joined that launch and answered g2 ERROR.
        let failed = taken(0, 2, Status::Failed);
        let joined = ModelCall::Start {
            id: 0,
            generation: 2,
        };
        assert_eq!(
            step(&failed, &joined, &sandbox(0, 2, Phase::Error)),
            vec![failed.clone()]
        );
        // A start of a stopped execution never answers it as it is.
        let stopped = taken(0, 2, Status::Stopped);
        assert!(step(&stopped, &joined, &sandbox(0, 2, Phase::Stopped)).is_empty());
    }

    #[test]
    fn unknown_outcomes_may_or_may_not_take_effect() {
        let next = step(&NameState::Free, &ModelCall::Create, &ModelReply::Unknown);
        assert!(next.contains(&NameState::Free));
        assert!(next.contains(&state_with(None, 1, Status::Running)));
        // The unknown id is bound by the first answer that shows it.
        let bound = step(
            &state_with(None, 1, Status::Running),
            &ModelCall::Get,
            &sandbox(7, 1, Phase::Ready),
        );
        assert_eq!(bound, vec![taken(7, 1, Status::Running)]);
    }
}
