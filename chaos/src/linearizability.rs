//! A linearizability checker in the manner of Wing & Gong, with Lowe's
//! memoization, as Porcupine implements it (`checkSingle`).
//!
//! The history of one name is a list of operations with an invocation time
//! and a return time (infinite for an unknown outcome). The search walks a
//! linked list of call and return entries in time order; at a call it tries
//! to linearize that operation now (the model accepts its answer from the
//! current set of states), at a return whose operation is not linearized
//! yet it backtracks. A set of (linearized operations, model states) already
//! explored is never explored again, which keeps the search polynomial on
//! the histories a campaign produces. The search has a step budget: past it
//! the result is [`Verdict::Inconclusive`], which a report shows but does
//! not count as an anomaly.
//!
//! At equal times a call sorts before a return, which lets the two
//! operations overlap: the permissive reading, since the harness cannot
//! order events inside one microsecond.

use std::collections::HashSet;

use crate::history::Operation;
use crate::model::{Interner, ModelCall, ModelReply, NameState, step};

/// Most search steps for one name's history before giving up.
pub const SEARCH_STEPS_MAX: u64 = 20_000_000;

/// The outcome of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations explains every answer.
    Linearizable,
    /// No order does. `stuck` is the operation whose return the deepest
    /// attempt could not get past; `linearized` the operations that
    /// attempt had placed, in order.
    NotLinearizable {
        /// History index of the operation that could not be explained.
        stuck: usize,
        /// History indexes of the longest explained prefix, in order.
        linearized: Vec<usize>,
    },
    /// The step budget ran out.
    Inconclusive,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Operation position in the partition.
    op: usize,
    is_call: bool,
    /// For a call, the position of its return entry.
    partner: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A set of model states, kept sorted so equal sets compare and hash equal.
type States = Vec<NameState>;

fn step_all(states: &States, call: &ModelCall, reply: &ModelReply) -> States {
    let mut next: States = states
        .iter()
        .flat_map(|state| step(state, call, reply))
        .collect();
    next.sort();
    next.dedup();
    next
}

/// Checks one name's operations (any order; they are sorted here).
pub fn check(operations: &[&Operation]) -> Verdict {
    let mut interner = Interner::default();
    let calls: Vec<(ModelCall, ModelReply)> = operations
        .iter()
        .map(|op| (interner.call(&op.call), interner.reply(&op.reply)))
        .collect();

    // Entries in time order: (time, is_return, op).
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(operations.len() * 2);
    for (position, op) in operations.iter().enumerate() {
        events.push((op.invoked_us, false, position));
        events.push((op.returned_us.unwrap_or(u64::MAX), true, position));
    }
    events.sort();
    let mut entries: Vec<Entry> = events
        .iter()
        .map(|(_, is_return, op)| Entry {
            op: *op,
            is_call: !is_return,
            partner: 0,
            prev: None,
            next: None,
        })
        .collect();
    let mut return_of = vec![0usize; operations.len()];
    for (position, entry) in entries.iter().enumerate() {
        if !entry.is_call {
            return_of[entry.op] = position;
        }
    }
    let count = entries.len();
    for position in 0..count {
        if entries[position].is_call {
            entries[position].partner = return_of[entries[position].op];
        }
        entries[position].prev = position.checked_sub(1);
        entries[position].next = (position + 1 < count).then_some(position + 1);
    }
    let mut head: Option<usize> = if count > 0 { Some(0) } else { None };

    let words = operations.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, States)> = HashSet::new();
    let mut stack: Vec<(usize, States)> = Vec::new();
    let mut states: States = vec![NameState::Free];
    let mut deepest: Option<(usize, Vec<usize>)> = None;
    let mut steps: u64 = 0;

    let mut cursor = head;
    while head.is_some() {
        steps += 1;
        if steps > SEARCH_STEPS_MAX {
            return Verdict::Inconclusive;
        }
        let Some(position) = cursor else {
            // Every call's return entry follows it in the list, so a walk
            // over a non-empty list meets a return entry before its end.
            unreachable!("the walk ends at a return entry before the end of the list");
        };
        let entry = entries[position];
        if entry.is_call {
            let (call, reply) = &calls[entry.op];
            let next_states = step_all(&states, call, reply);
            if !next_states.is_empty() {
                linearized[entry.op / 64] |= 1 << (entry.op % 64);
                if cache.insert((linearized.clone(), next_states.clone())) {
                    stack.push((position, std::mem::replace(&mut states, next_states)));
                    lift(&mut entries, &mut head, position);
                    cursor = head;
                    continue;
                }
                linearized[entry.op / 64] &= !(1 << (entry.op % 64));
            }
            cursor = entry.next;
        } else {
            if deepest
                .as_ref()
                .is_none_or(|(_, prefix)| stack.len() >= prefix.len())
            {
                let prefix = stack
                    .iter()
                    .map(|(position, _)| operations[entries[*position].op].index)
                    .collect();
                deepest = Some((operations[entry.op].index, prefix));
            }
            let Some((position, previous)) = stack.pop() else {
                let (stuck, linearized) =
                    deepest.unwrap_or((operations[entry.op].index, Vec::new()));
                return Verdict::NotLinearizable { stuck, linearized };
            };
            let op = entries[position].op;
            linearized[op / 64] &= !(1 << (op % 64));
            states = previous;
            unlift(&mut entries, &mut head, position);
            cursor = entries[position].next;
        }
    }
    Verdict::Linearizable
}

/// Removes a call entry and its return entry from the list.
fn lift(entries: &mut [Entry], head: &mut Option<usize>, call: usize) {
    let partner = entries[call].partner;
    for position in [call, partner] {
        let Entry { prev, next, .. } = entries[position];
        match prev {
            Some(prev) => entries[prev].next = next,
            None => *head = next,
        }
        if let Some(next) = next {
            entries[next].prev = prev;
        }
    }
}

/// Puts a lifted call entry and its return entry back, in reverse order of
/// removal, so the links they kept are valid again.
fn unlift(entries: &mut [Entry], head: &mut Option<usize>, call: usize) {
    let partner = entries[call].partner;
    for position in [partner, call] {
        let Entry { prev, next, .. } = entries[position];
        match prev {
            Some(prev) => entries[prev].next = Some(position),
            None => *head = Some(position),
        }
        if let Some(next) = next {
            entries[next].prev = Some(position);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, Observed, Phase, Reply};

    fn op(
        index: usize,
        call: Call,
        reply: Reply,
        invoked: u64,
        returned: Option<u64>,
    ) -> Operation {
        Operation {
            index,
            client: 0,
            request_id: String::new(),
            call,
            invoked_us: invoked,
            returned_us: returned,
            reply,
            attempts: Vec::new(),
        }
    }

    fn ready(id: &str, generation: u64) -> Reply {
        Reply::Sandbox(Observed {
            id: id.into(),
            generation,
            phase: Phase::Ready,
            resource_version: 0,
            token: String::new(),
        })
    }

    fn not_found() -> Reply {
        Reply::Rejected {
            code: "NotFound".into(),
            reason: "SANDBOX_NOT_FOUND".into(),
        }
    }

    fn create() -> Call {
        Call::Create { name: "a".into() }
    }

    fn get() -> Call {
        Call::Get { name: "a".into() }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let ops = [
            op(0, create(), ready("x", 1), 0, Some(10)),
            op(1, get(), ready("x", 1), 20, Some(30)),
            op(
                2,
                Call::Delete {
                    name: "a".into(),
                    expected_id: "x".into(),
                },
                Reply::Deleted {
                    id: "x".into(),
                    deleted: true,
                },
                40,
                Some(50),
            ),
            op(3, get(), not_found(), 60, Some(70)),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert_eq!(check(&refs), Verdict::Linearizable);
    }

    #[test]
    fn a_lost_acknowledged_create_is_caught() {
        let ops = [
            op(0, create(), ready("x", 1), 0, Some(10)),
            op(1, get(), not_found(), 20, Some(30)),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert!(matches!(
            check(&refs),
            Verdict::NotLinearizable { stuck: 1, .. }
        ));
    }

    #[test]
    fn concurrent_operations_may_be_reordered() {
        // The get overlaps the create: it may come first.
        let ops = [
            op(0, create(), ready("x", 1), 0, Some(50)),
            op(1, get(), not_found(), 10, Some(20)),
            op(2, get(), ready("x", 1), 30, Some(60)),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert_eq!(check(&refs), Verdict::Linearizable);
    }

    fn observed(id: &str, generation: u64, phase: Phase) -> Reply {
        Reply::Sandbox(Observed {
            id: id.into(),
            generation,
            phase,
            resource_version: 0,
            token: String::new(),
        })
    }

    #[test]
    fn seed_57_a_start_joining_a_failing_launch_is_linearizable() {
        // The excerpt that seed 57 (1000 operations) once reported.
        let start = |generation| Call::Start {
            name: "a".into(),
            id: "x".into(),
            generation,
        };
        let ops = [
            op(
                797,
                create(),
                observed("x", 1, Phase::Error),
                7_630,
                Some(7_665),
            ),
            op(
                802,
                get(),
                observed("x", 1, Phase::Error),
                7_679,
                Some(7_683),
            ),
            op(
                820,
                start(1),
                observed("x", 2, Phase::Error),
                7_683,
                Some(7_721),
            ),
            op(
                818,
                get(),
                observed("x", 2, Phase::Starting),
                7_703,
                Some(7_705),
            ),
            op(
                819,
                start(2),
                observed("x", 2, Phase::Error),
                7_705,
                Some(7_720),
            ),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert_eq!(check(&refs), Verdict::Linearizable);
    }

    #[test]
    fn unknown_outcomes_are_either() {
        let ops = [
            op(
                0,
                create(),
                Reply::Unknown {
                    error: "timeout".into(),
                },
                0,
                None,
            ),
            op(1, get(), not_found(), 10, Some(20)),
            op(2, get(), ready("y", 1), 30, Some(40)),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert_eq!(check(&refs), Verdict::Linearizable);
        // ...but an unknown create explains one sandbox, not two.
        let ops = [
            op(
                0,
                create(),
                Reply::Unknown {
                    error: "timeout".into(),
                },
                0,
                None,
            ),
            op(1, get(), ready("y", 1), 30, Some(40)),
            op(2, get(), ready("z", 1), 50, Some(60)),
        ];
        let refs: Vec<&Operation> = ops.iter().collect();
        assert!(matches!(check(&refs), Verdict::NotLinearizable { .. }));
    }
}
