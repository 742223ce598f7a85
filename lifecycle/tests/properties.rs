//! Property tests: random command sequences never break the invariants
//! (unique names, no sandbox without an id, generations never decrease, at
//! most one operation in flight per sandbox), and apply is deterministic.

use std::collections::{BTreeMap, HashMap};

use palisade_lifecycle::*;
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];
const IDS: [&str; 6] = ["i0", "i1", "i2", "i3", "i4", "i5"];
const WORKSPACES: [&str; 2] = [DEFAULT_WORKSPACE, "team"];

fn target() -> impl Strategy<Value = SandboxTarget> {
    prop_oneof![
        (0..WORKSPACES.len(), 0..NAMES.len()).prop_map(|(w, n)| SandboxTarget::Name {
            workspace: WORKSPACES[w].into(),
            name: NAMES[n].into(),
        }),
        (0..IDS.len()).prop_map(|i| SandboxTarget::Id(IDS[i].into())),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    let id = (0..IDS.len()).prop_map(|i| IDS[i].to_string());
    let generation = 1u64..4;
    prop_oneof![
        (id.clone(), 0..WORKSPACES.len(), 0..NAMES.len()).prop_map(|(id, w, n)| {
            Command::BeginCreate {
                id,
                workspace: WORKSPACES[w].into(),
                name: NAMES[n].into(),
                spec: SandboxSpec::default(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                time_ms: 0,
            }
        }),
        target().prop_map(|target| Command::BeginStop { target }),
        target().prop_map(|target| Command::BeginStart { target }),
        target().prop_map(|target| Command::BeginDelete { target }),
        (id.clone(), generation.clone(), any::<bool>()).prop_map(|(id, generation, ok)| {
            Command::CompleteLaunch {
                sandbox_id: id,
                generation,
                result: if ok {
                    LaunchResult::Running {
                        handle: "h".into(),
                        driver: "test".into(),
                    }
                } else {
                    LaunchResult::Failed {
                        message: "no".into(),
                    }
                },
            }
        }),
        (id.clone(), generation.clone()).prop_map(|(id, generation)| Command::CompleteStop {
            sandbox_id: id,
            generation,
            exit_code: None
        }),
        id.clone()
            .prop_map(|id| Command::CompleteDelete { sandbox_id: id }),
        (id, generation, 0..3i32).prop_map(|(id, generation, code)| Command::ObserveExit {
            sandbox_id: id,
            generation,
            exit_code: code
        }),
        Just(Command::CreateWorkspace {
            id: "w".into(),
            name: "team".into(),
            time_ms: 0
        }),
        Just(Command::DeleteWorkspace {
            name: "team".into()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn invariants_hold_for_any_command_sequence(commands in proptest::collection::vec(command(), 1..80)) {
        let mut state = State::new();
        let mut replica = State::new();
        let mut generations: HashMap<String, u64> = HashMap::new();
        for (at, command) in commands.iter().enumerate() {
            let position = LogPosition { index: at as u64 + 1, term: 1 };
            let before = state.clone();
            let response = apply(&mut state, position, command);
            // Determinism: a second replica applying the same entry agrees.
            let replica_response = apply(&mut replica, position, command);
            prop_assert_eq!(&response, &replica_response);
            prop_assert_eq!(&state, &replica);
            state.assert_invariants();
            if response.is_err() {
                prop_assert_eq!(&state, &before, "a rejection must change nothing");
            }
            // Ids are UUIDs in production; this test reuses a few, so a
            // removed sandbox's history ends with it.
            generations.retain(|id, _| state.sandboxes.contains_key(id));
            for sandbox in state.sandboxes.values() {
                let seen = generations.entry(sandbox.id.clone()).or_insert(0);
                prop_assert!(sandbox.execution.generation >= *seen, "generation decreased");
                *seen = sandbox.execution.generation;
            }
        }
    }
}
