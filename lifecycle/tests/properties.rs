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

/// Request ids from a small set, so retries and reuse both happen; the
/// digest is derived from the payload, as the gateway does.
fn request(payload: String) -> impl Strategy<Value = RequestMeta> {
    (0..6usize).prop_map(move |r| RequestMeta {
        id: format!("q{r}"),
        payload_digest: payload.clone(),
        time_ms: 0,
    })
}

fn expected_execution() -> impl Strategy<Value = Option<ExecutionRef>> {
    proptest::option::of(
        (0..IDS.len(), 1u64..4).prop_map(|(i, generation)| ExecutionRef {
            sandbox_id: IDS[i].into(),
            generation,
            key_id: None,
        }),
    )
}

fn command() -> impl Strategy<Value = Command> {
    let id = (0..IDS.len()).prop_map(|i| IDS[i].to_string());
    let generation = 1u64..4;
    let restart = prop_oneof![
        Just(RestartPolicy::Never),
        Just(RestartPolicy::OnFailure),
        Just(RestartPolicy::Always)
    ];
    prop_oneof![
        (id.clone(), 0..WORKSPACES.len(), 0..NAMES.len(), restart).prop_flat_map(
            |(id, w, n, restart_policy)| {
                let payload = format!("create {id} {w} {n} {restart_policy:?}");
                request(payload).prop_map(move |request| Command::BeginCreate {
                    id: id.clone(),
                    workspace: WORKSPACES[w].into(),
                    name: NAMES[n].into(),
                    spec: SandboxSpec {
                        restart_policy,
                        ..SandboxSpec::default()
                    },
                    labels: BTreeMap::new(),
                    annotations: BTreeMap::new(),
                    time_ms: 0,
                    host_identity: "h".into(),
                    request,
                })
            }
        ),
        (target(), expected_execution()).prop_flat_map(|(target, expected_execution)| {
            request(format!("stop {target:?} {expected_execution:?}")).prop_map(move |request| {
                Command::BeginStop {
                    target: target.clone(),
                    expected_execution: expected_execution.clone(),
                    request,
                }
            })
        }),
        (target(), expected_execution()).prop_flat_map(|(target, expected_execution)| {
            request(format!("start {target:?} {expected_execution:?}")).prop_map(move |request| {
                Command::BeginStart {
                    target: target.clone(),
                    expected_execution: expected_execution.clone(),
                    request,
                }
            })
        }),
        (
            target(),
            proptest::option::of(id.clone()),
            expected_execution()
        )
            .prop_flat_map(|(target, expected_sandbox_id, expected_execution)| {
                request(format!(
                    "delete {target:?} {expected_sandbox_id:?} {expected_execution:?}"
                ))
                .prop_map(move |request| Command::BeginDelete {
                    target: target.clone(),
                    expected_sandbox_id: expected_sandbox_id.clone(),
                    expected_execution: expected_execution.clone(),
                    request,
                })
            }),
        (target(), 0..4u32).prop_map(|(target, s)| Command::CreateSshSession {
            target,
            session_id: format!("s{s}"),
            token_sha256: "0".repeat(64),
            expires_at_ms: i64::from(s) * 10,
            time_ms: 0,
            ttl_ms: i64::from(s) * 10,
        }),
        (target(), 0..4u32).prop_map(|(target, s)| Command::RevokeSshSession {
            target,
            session_id: format!("s{s}"),
        }),
        (target(), proptest::option::of(0u64..3)).prop_map(|(target, expected_version)| {
            Command::SetSandboxPolicy {
                target,
                document: "p".into(),
                expected_version,
                time_ms: 0,
            }
        }),
        (0i64..100).prop_map(|now_ms| Command::Tick {
            now_ms,
            receipt_retention_ms: 20
        }),
        (id.clone(), generation.clone()).prop_map(|(id, generation)| Command::ObserveLost {
            sandbox_id: id,
            of: CompletionOf::UNBOUND,
            generation
        }),
        (id.clone(), generation.clone(), any::<bool>()).prop_map(|(id, generation, ok)| {
            Command::CompleteLaunch {
                sandbox_id: id,
                of: CompletionOf::UNBOUND,
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
            of: CompletionOf::UNBOUND,
            generation,
            exit_code: None
        }),
        id.clone().prop_map(|id| Command::CompleteDelete {
            sandbox_id: id,
            of: CompletionOf::UNBOUND
        }),
        (id, generation, 0..3i32).prop_map(|(id, generation, code)| Command::ObserveExit {
            sandbox_id: id,
            of: CompletionOf::UNBOUND,
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
            // Most completions are bound to what is pending (as the executor
            // binds them); the unbound ones exercise refusal.
            let command = &if at % 4 == 0 { command.clone() } else { command.clone().bound_to(&state, 1) };
            let before = state.clone();
            let response = apply(&mut state, position, command);
            // Determinism: a second replica applying the same entry agrees.
            let replica_response = apply(&mut replica, position, command);
            prop_assert_eq!(&response, &replica_response);
            prop_assert_eq!(&state, &replica);
            state.assert_invariants();
            if response.is_err() {
                // A rejection changes nothing but its receipt.
                let mut without_new_receipt = state.clone();
                without_new_receipt.receipts.retain(|id, _| before.receipts.contains_key(id));
                prop_assert_eq!(&without_new_receipt, &before, "a rejection must change nothing");
            }
            // Every pending receipt waits on an operation that lists it.
            for (request_id, receipt) in &state.receipts.to_vec() {
                if let ReceiptResult::Pending { sandbox_id, kind, generation } = &receipt.result {
                    let operation = state.sandboxes.get(sandbox_id).and_then(|s| s.operation.as_ref());
                    prop_assert!(
                        operation.is_some_and(|op| op.kind == *kind
                            && op.generation == *generation
                            && op.request_ids.contains(request_id)),
                        "receipt {} is pending on an operation that does not wait for it", request_id
                    );
                }
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The census kept at apply (metrics, status page) always equals a
    /// full count of the state.
    #[test]
    fn the_census_kept_at_apply_equals_a_full_count(commands in proptest::collection::vec(command(), 1..80)) {
        let mut state = State::new();
        let mut census = Census::of(&state);
        for (at, command) in commands.iter().enumerate() {
            let position = LogPosition { index: at as u64 + 1, term: 1 };
            let command = &if at % 4 == 0 { command.clone() } else { command.clone().bound_to(&state, 1) };
            let _ = census.apply(&mut state, position, command);
            prop_assert_eq!(&census, &Census::of(&state), "after {:?}", command);
            prop_assert_eq!(census.sandboxes(), state.sandboxes.len() as u64);
        }
    }
}
