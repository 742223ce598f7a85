//! The cluster feature level in the state (`palisade_lifecycle::feature`):
//! raised by `RaiseFeatureLevel`, never lowered, part of the encoded state
//! only once it rose (so a state that never saw a raise encodes exactly as
//! before feature levels existed), and the gate a command kind passes.

use palisade_lifecycle::feature::{FEATURE_LEVEL_BASE, FEATURE_LEVEL_MAX, permits, required_level};
use palisade_lifecycle::{Command, LogPosition, Outcome, State, apply};

fn at(index: u64) -> LogPosition {
    LogPosition { index, term: 1 }
}

#[test]
fn a_raise_moves_the_level_up_only() {
    let mut state = State::new();
    assert_eq!(state.feature_level, FEATURE_LEVEL_BASE);
    let raised = apply(&mut state, at(1), &Command::RaiseFeatureLevel { level: 2 });
    assert_eq!(raised, Ok(Outcome::Housekeeping));
    assert_eq!(state.feature_level, 2);
    // A stale or repeated raise changes nothing.
    apply(&mut state, at(2), &Command::RaiseFeatureLevel { level: 1 }).unwrap();
    apply(&mut state, at(3), &Command::RaiseFeatureLevel { level: 2 }).unwrap();
    assert_eq!(state.feature_level, 2);
    state.assert_invariants();
}

#[test]
fn the_level_is_encoded_only_once_it_rose() {
    let mut state = State::new();
    let before = serde_json::to_value(&state).unwrap();
    assert!(before.get("feature_level").is_none(), "{before}");
    // A state written before feature levels decodes at the base level.
    let decoded: State = serde_json::from_value(before).unwrap();
    assert_eq!(decoded.feature_level, FEATURE_LEVEL_BASE);

    apply(&mut state, at(1), &Command::RaiseFeatureLevel { level: 2 }).unwrap();
    let after = serde_json::to_value(&state).unwrap();
    assert_eq!(after["feature_level"], 2, "{after}");
    let decoded: State = serde_json::from_value(after).unwrap();
    assert_eq!(decoded.feature_level, 2);
}

#[test]
fn the_raise_needs_level_2_and_is_leader_internal() {
    let raise = Command::RaiseFeatureLevel { level: 2 };
    assert_eq!(required_level(&raise), 2);
    assert!(!raise.is_client_proposable());
    // The raise itself is proposed while the cluster is below its level;
    // never to a level this code does not know.
    assert!(permits(FEATURE_LEVEL_BASE, &raise));
    assert!(!permits(
        FEATURE_LEVEL_BASE,
        &Command::RaiseFeatureLevel {
            level: FEATURE_LEVEL_MAX + 1
        }
    ));
    // Every command of the first release is permitted at the base level.
    let tick = Command::Tick {
        now_ms: 1,
        receipt_retention_ms: 0,
    };
    assert_eq!(required_level(&tick), FEATURE_LEVEL_BASE);
    assert!(permits(FEATURE_LEVEL_BASE, &tick));
}
