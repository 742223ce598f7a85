//! Fuzzing the public and admin APIs through the real service stack: one
//! replica in this process (see `support`), reached over loopback TCP by a
//! real HTTP/2 client, every method of `palisade.v1.Palisade` and
//! `palisade.v1.ClusterAdmin` fed four kinds of input:
//!
//! - **raw**: arbitrary bytes as the whole request body (framing);
//! - **framed**: arbitrary bytes as one well-framed message (decoding);
//! - **structured**: request messages generated field by field from values
//!   near the edges (empty, valid, too long, not a name, unknown enum
//!   values, huge numbers, other scripts), so that inputs get past decoding
//!   and validation into the handlers, the log and apply;
//! - **mutated**: a structured message's encoding with a few bytes flipped,
//!   inserted or cut.
//!
//! Every answer must be: no broken call, never INTERNAL, UNKNOWN or
//! DATA_LOSS, every error with a `google.rpc.ErrorInfo` reason (domain
//! `palisade.dev`) and a bounded message. At the end: no ERROR logged, no
//! panic anywhere in the process, and the replica still serves.
//!
//! It runs with the normal test suite (stable Rust, proptest): a short run
//! by default. The long run is one command (README, "Fuzzing"):
//!
//! ```text
//! PALISADE_FUZZ_CASES=1000000 cargo test --release -p palisade-gateway --test fuzz -- --nocapture
//! ```
//!
//! `PALISADE_FUZZ_SEED=N` replays a run (the seed is printed); a failing
//! input is shrunk and printed by proptest.
//!
//! Not sent: membership changes that would succeed (AddLearner with a
//! valid node id and address, RemoveMember of node 1). They would change
//! the test cluster itself (a learner that never answers, a cluster
//! without voters) and are covered by `cli/tests/cluster_membership.rs`.
//! They are counted as `skipped`.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use palisade_lifecycle::limits::ERROR_MESSAGE_BYTES_MAX;
use palisade_proto::v1;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use support::{TestReplica, assert_no_new_problems, frame, problems_so_far};
use tonic::Code;
use tonic_types::StatusExt as _;

/// A long run prints a progress line after every this many inputs.
const PROGRESS_EVERY_INPUTS: u64 = 20_000;
/// Inputs in the short run (the normal test suite).
const SHORT_RUN_CASES: u32 = 1_500;
/// Most bytes of response headers and trailers an answer may carry.
const ANSWER_HEADER_BYTES_MAX: usize = 8 * 1024;

const ADMIN: &str = "/palisade.v1.ClusterAdmin/";

/// Every method, as its HTTP/2 path.
const METHODS: [&str; 25] = [
    "/palisade.v1.Palisade/CreateSandbox",
    "/palisade.v1.Palisade/GetSandbox",
    "/palisade.v1.Palisade/ListSandboxes",
    "/palisade.v1.Palisade/StopSandbox",
    "/palisade.v1.Palisade/StartSandbox",
    "/palisade.v1.Palisade/DeleteSandbox",
    "/palisade.v1.Palisade/WatchSandboxes",
    "/palisade.v1.Palisade/SandboxLogs",
    "/palisade.v1.Palisade/ExecSandbox",
    "/palisade.v1.Palisade/CreateSshSession",
    "/palisade.v1.Palisade/RevokeSshSession",
    "/palisade.v1.Palisade/ListSshSessions",
    "/palisade.v1.Palisade/SetSandboxPolicy",
    "/palisade.v1.Palisade/GetSandboxPolicy",
    "/palisade.v1.Palisade/CreateWorkspace",
    "/palisade.v1.Palisade/GetWorkspace",
    "/palisade.v1.Palisade/ListWorkspaces",
    "/palisade.v1.Palisade/DeleteWorkspace",
    "/palisade.v1.ClusterAdmin/GetClusterInfo",
    "/palisade.v1.ClusterAdmin/AddLearner",
    "/palisade.v1.ClusterAdmin/PromoteLearner",
    "/palisade.v1.ClusterAdmin/RemoveMember",
    "/palisade.v1.ClusterAdmin/TransferLeader",
    "/palisade.v1.ClusterAdmin/ReconcileOrphans",
    // Not a method: a path the router does not know.
    "/palisade.v1.Palisade/NoSuchMethod",
];

/// One input: which kind, which method, the whole request body.
#[derive(Clone)]
struct Input {
    kind: &'static str,
    path: &'static str,
    body: Bytes,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({} bytes): {:02x?}",
            self.kind,
            self.path,
            self.body.len(),
            &self.body[..self.body.len().min(512)]
        )
    }
}

// --- value pools: near the edges of what is valid ---------------------

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        24 => prop::sample::select(vec![
            "default", "demo", "web-1", "a", "ws-a", "ws-b", "fuzz", "z9",
        ])
        .prop_map(String::from),
        3 => Just(String::new()),
        2 => "[a-z0-9-]{1,70}",
        2 => any::<String>(),
        1 => "[A-Za-z0-9_./=:@ -]{0,40}",
        1 => Just("é".repeat(40)),
        1 => (1usize..3).prop_map(|n| "n".repeat(20_000 * n)),
        1 => Just("aéa".to_string()),
        1 => Just("\0".to_string()),
    ]
}

fn map() -> impl Strategy<Value = HashMap<String, String>> {
    prop_oneof![
        6 => Just(HashMap::new()),
        3 => prop::collection::hash_map("[a-z][a-z0-9./-]{0,8}", "[a-z0-9]{0,8}", 1..3),
        2 => prop::collection::hash_map(text(), text(), 0..3),
        1 => prop::collection::hash_map("[a-z]{1,6}", "[a-z]{0,4}", 60..70),
    ]
}

fn number_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..4,
        2 => 0u64..100_000,
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

fn number_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 0u32..4,
        2 => 0u32..2_000,
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ]
}

/// Enum fields: known values, and unknown ones.
fn enumeration() -> impl Strategy<Value = i32> {
    prop_oneof![
        12 => 0i32..3,
        2 => 0i32..12,
        1 => Just(-1i32),
        1 => any::<i32>(),
    ]
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just(String::new()),
        2 => text(),
        1 => "[0-9a-f]{0,80}",
        1 => "pet1\\.[a-z0-9-]{0,40}\\.[0-9]{1,3}\\.[0-9a-f]{0,64}",
    ]
}

fn sandbox_ref() -> impl Strategy<Value = Option<v1::SandboxRef>> {
    let by_name = (text(), text()).prop_map(|(workspace, name)| v1::SandboxRef {
        workspace,
        name,
        id: String::new(),
    });
    let by_id = token().prop_map(|id| v1::SandboxRef {
        id,
        ..Default::default()
    });
    let anything = (text(), text(), text()).prop_map(|(workspace, name, id)| v1::SandboxRef {
        workspace,
        name,
        id,
    });
    prop::option::weighted(0.95, prop_oneof![6 => by_name, 2 => by_id, 1 => anything])
}

fn spec() -> impl Strategy<Value = Option<v1::SandboxSpec>> {
    prop::option::weighted(
        0.7,
        (
            prop::collection::vec(text(), 0..3),
            map(),
            text(),
            map(),
            enumeration(),
        )
            .prop_map(|(command, env, image, driver_config, restart_policy)| {
                v1::SandboxSpec {
                    command,
                    env,
                    image,
                    driver_config,
                    restart_policy,
                    ..Default::default()
                }
            }),
    )
}

// --- structured requests, one strategy per method ----------------------

fn encoded<M: prost::Message>(message: M) -> Vec<u8> {
    message.encode_to_vec()
}

fn structured() -> BoxedStrategy<(&'static str, Vec<u8>)> {
    let palisade = prop_oneof![
        (text(), text(), spec(), map(), map(), any::<bool>(), token()).prop_map(
            |(workspace, name, spec, labels, annotations, no_wait, request_id)| {
                (
                    "CreateSandbox",
                    encoded(v1::CreateSandboxRequest {
                        workspace,
                        name,
                        spec,
                        labels,
                        annotations,
                        no_wait,
                        request_id,
                    }),
                )
            }
        ),
        (sandbox_ref(), enumeration()).prop_map(|(sandbox, consistency)| (
            "GetSandbox",
            encoded(v1::GetSandboxRequest {
                sandbox,
                consistency
            })
        )),
        (
            text(),
            any::<bool>(),
            number_u32(),
            token(),
            prop::collection::vec(enumeration(), 0..3),
            map(),
            enumeration(),
            enumeration(),
            token(),
            number_u64()
        )
            .prop_map(
                |(
                    workspace,
                    all_workspaces,
                    page_size,
                    page_token,
                    phases,
                    label_selector,
                    consistency,
                    source,
                    label_expression,
                    older_than_seconds,
                )| {
                    (
                        "ListSandboxes",
                        encoded(v1::ListSandboxesRequest {
                            workspace,
                            all_workspaces,
                            page_size,
                            page_token,
                            phases,
                            label_selector,
                            consistency,
                            source,
                            label_expression,
                            older_than_seconds,
                        }),
                    )
                }
            ),
        (
            sandbox_ref(),
            any::<bool>(),
            token(),
            token(),
            any::<bool>()
        )
            .prop_map(|(sandbox, no_wait, request_id, expected_execution, stop)| {
                if stop {
                    (
                        "StopSandbox",
                        encoded(v1::StopSandboxRequest {
                            sandbox,
                            no_wait,
                            request_id,
                            expected_execution,
                        }),
                    )
                } else {
                    (
                        "StartSandbox",
                        encoded(v1::StartSandboxRequest {
                            sandbox,
                            no_wait,
                            request_id,
                            expected_execution,
                        }),
                    )
                }
            }),
        (sandbox_ref(), any::<bool>(), token(), token(), token()).prop_map(
            |(sandbox, no_wait, request_id, expected_sandbox_id, expected_execution)| (
                "DeleteSandbox",
                encoded(v1::DeleteSandboxRequest {
                    sandbox,
                    no_wait,
                    request_id,
                    expected_sandbox_id,
                    expected_execution,
                })
            )
        ),
        (text(), any::<bool>(), token(), number_u64()).prop_map(
            |(workspace, all_workspaces, sandbox_id, resource_version)| (
                "WatchSandboxes",
                encoded(v1::WatchSandboxesRequest {
                    workspace,
                    all_workspaces,
                    sandbox_id,
                    resource_version,
                })
            )
        ),
        (
            sandbox_ref(),
            number_u64(),
            any::<bool>(),
            number_u32(),
            token(),
            token()
        )
            .prop_map(
                |(sandbox, generation, follow, tail_lines, stdout_cursor, stderr_cursor)| (
                    "SandboxLogs",
                    encoded(v1::SandboxLogsRequest {
                        sandbox,
                        generation,
                        follow,
                        tail_lines,
                        stdout_cursor,
                        stderr_cursor,
                    })
                )
            ),
        (
            sandbox_ref(),
            prop::collection::vec(text(), 0..3),
            map(),
            number_u32()
        )
            .prop_map(|(sandbox, command, env, timeout_seconds)| (
                "ExecSandbox",
                encoded(v1::ExecSandboxRequest {
                    sandbox,
                    command,
                    env,
                    timeout_seconds,
                })
            )),
    ];
    let owned = prop_oneof![
        (sandbox_ref(), number_u32()).prop_map(|(sandbox, ttl_seconds)| (
            "CreateSshSession",
            encoded(v1::CreateSshSessionRequest {
                sandbox,
                ttl_seconds
            })
        )),
        (sandbox_ref(), token()).prop_map(|(sandbox, session_id)| (
            "RevokeSshSession",
            encoded(v1::RevokeSshSessionRequest {
                sandbox,
                session_id
            })
        )),
        (sandbox_ref(), number_u32(), token(), enumeration()).prop_map(
            |(sandbox, page_size, page_token, consistency)| (
                "ListSshSessions",
                encoded(v1::ListSshSessionsRequest {
                    sandbox,
                    page_size,
                    page_token,
                    consistency,
                })
            )
        ),
        (
            sandbox_ref(),
            prop_oneof![3 => text(), 1 => Just("p".repeat(70 * 1024))],
            prop::option::of(number_u64())
        )
            .prop_map(|(sandbox, document, expected_version)| (
                "SetSandboxPolicy",
                encoded(v1::SetSandboxPolicyRequest {
                    sandbox,
                    document,
                    expected_version,
                })
            )),
        (sandbox_ref(), enumeration()).prop_map(|(sandbox, consistency)| (
            "GetSandboxPolicy",
            encoded(v1::GetSandboxPolicyRequest {
                sandbox,
                consistency
            })
        )),
    ];
    let workspaces = prop_oneof![
        text().prop_map(|name| (
            "CreateWorkspace",
            encoded(v1::CreateWorkspaceRequest { name })
        )),
        (text(), enumeration()).prop_map(|(name, consistency)| (
            "GetWorkspace",
            encoded(v1::GetWorkspaceRequest { name, consistency })
        )),
        (number_u32(), token(), enumeration()).prop_map(|(page_size, page_token, consistency)| (
            "ListWorkspaces",
            encoded(v1::ListWorkspacesRequest {
                page_size,
                page_token,
                consistency,
            })
        )),
        text().prop_map(|name| (
            "DeleteWorkspace",
            encoded(v1::DeleteWorkspaceRequest { name })
        )),
    ];
    let admin = prop_oneof![
        Just(("GetClusterInfo", encoded(v1::GetClusterInfoRequest {}))),
        (number_u64(), text()).prop_map(|(node_id, address)| (
            "AddLearner",
            encoded(v1::AddLearnerRequest { node_id, address })
        )),
        number_u64().prop_map(|node_id| (
            "PromoteLearner",
            encoded(v1::PromoteLearnerRequest { node_id })
        )),
        number_u64()
            .prop_map(|node_id| ("RemoveMember", encoded(v1::RemoveMemberRequest { node_id }))),
        number_u64().prop_map(|node_id| (
            "TransferLeader",
            encoded(v1::TransferLeaderRequest { node_id })
        )),
        any::<bool>().prop_map(|dry_run| (
            "ReconcileOrphans",
            encoded(v1::ReconcileOrphansRequest { dry_run })
        )),
    ];
    prop_oneof![6 => palisade, 3 => owned, 3 => workspaces, 2 => admin]
        .prop_map(|(method, message)| (path_of(method), message))
        .boxed()
}

fn path_of(method: &str) -> &'static str {
    METHODS
        .iter()
        .copied()
        .find(|path| path.rsplit('/').next() == Some(method))
        .unwrap_or_else(|| panic!("{method} is not in METHODS"))
}

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(METHODS.to_vec())
}

fn bytes_up_to(length_max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..length_max)
}

/// A few random edits: flip a byte, insert one, cut one, or truncate.
fn mutate(mut message: Vec<u8>, edits: Vec<(usize, u8, u8)>) -> Vec<u8> {
    for (at, byte, edit) in edits {
        let at = if message.is_empty() {
            0
        } else {
            at % (message.len() + 1)
        };
        match edit % 4 {
            0 if at < message.len() => message[at] ^= byte.max(1),
            1 => message.insert(at, byte),
            2 if at < message.len() => {
                message.remove(at);
            }
            _ => message.truncate(at),
        }
    }
    message
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        2 => (method(), bytes_up_to(64)).prop_map(|(path, body)| Input {
            kind: "raw",
            path,
            body: body.into(),
        }),
        2 => (method(), bytes_up_to(256)).prop_map(|(path, message)| Input {
            kind: "framed",
            path,
            body: frame(&message),
        }),
        6 => structured().prop_map(|(path, message)| Input {
            kind: "structured",
            path,
            body: frame(&message),
        }),
        3 => (
            structured(),
            prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4)
        )
            .prop_map(|((path, message), edits)| Input {
                kind: "mutated",
                path,
                body: frame(&mutate(message, edits)),
            }),
    ]
}

/// The request's message, if the body is exactly one uncompressed frame
/// that decodes as `M`.
fn decoded<M: prost::Message + Default>(body: &[u8]) -> Option<M> {
    let (header, message) = body.split_at_checked(5)?;
    let declared = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if header[0] != 0 || declared != message.len() {
        return None;
    }
    M::decode(message).ok()
}

/// A membership change that would succeed and change the test cluster
/// (see the module doc): not sent.
fn would_change_membership(input: &Input) -> bool {
    match input.path.strip_prefix(ADMIN) {
        Some("AddLearner") => decoded::<v1::AddLearnerRequest>(&input.body).is_some_and(|add| {
            add.node_id != 0
                && palisade_lifecycle::validate::address("address", &add.address).is_ok()
        }),
        Some("RemoveMember") => decoded::<v1::RemoveMemberRequest>(&input.body)
            .is_some_and(|remove| remove.node_id == 1),
        _ => false,
    }
}

/// Tally of outcomes, for the closing summary.
#[derive(Default)]
struct Tally {
    /// (kind, outcome) -> count; outcome is `ok`, `skipped` or the reason.
    outcomes: BTreeMap<(&'static str, String), u64>,
    /// Inputs sent so far.
    sent: u64,
}

fn check(input: &Input, answer: &support::RawAnswer) -> Result<String, TestCaseError> {
    if let Some(error) = &answer.transport_error {
        return Err(TestCaseError::fail(format!("the call broke: {error}")));
    }
    prop_assert!(
        answer.header_bytes <= ANSWER_HEADER_BYTES_MAX,
        "{} bytes of headers and trailers",
        answer.header_bytes
    );
    let Some(status) = &answer.status else {
        return Ok("ok".into());
    };
    if status.code() == Code::Ok {
        return Ok("ok".into());
    }
    prop_assert!(
        !matches!(
            status.code(),
            Code::Internal | Code::Unknown | Code::DataLoss
        ),
        "answered {status:?}"
    );
    let Some(info) = status.get_details_error_info() else {
        // The router's answer to a path it does not know carries no
        // details; it is the only one allowed to.
        if input.path.ends_with("/NoSuchMethod") && status.code() == Code::Unimplemented {
            return Ok("UNIMPLEMENTED".into());
        }
        return Err(TestCaseError::fail(format!("no ErrorInfo in {status:?}")));
    };
    prop_assert_eq!(info.domain.as_str(), palisade_proto::ERROR_DOMAIN);
    prop_assert!(!info.reason.is_empty(), "an empty reason in {:?}", status);
    prop_assert!(
        status.message().len() <= ERROR_MESSAGE_BYTES_MAX,
        "a {}-byte message",
        status.message().len()
    );
    Ok(format!("{:?} {}", status.code(), info.reason))
}

fn cases() -> u32 {
    std::env::var("PALISADE_FUZZ_CASES")
        .ok()
        .map(|cases| cases.parse().expect("PALISADE_FUZZ_CASES is a number"))
        .unwrap_or(SHORT_RUN_CASES)
}

fn seed() -> u64 {
    std::env::var("PALISADE_FUZZ_SEED")
        .ok()
        .map(|seed| seed.parse().expect("PALISADE_FUZZ_SEED is a number"))
        .unwrap_or_else(rand_seed)
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

/// Stack of the thread that generates and sends the inputs: the nested
/// strategies of an unoptimized build need more than a test thread's.
const FUZZ_THREAD_STACK_BYTES: usize = 64 * 1024 * 1024;

#[test]
fn every_method_answers_arbitrary_and_structured_input_with_a_reason() {
    std::thread::Builder::new()
        .name("fuzz".into())
        .stack_size(FUZZ_THREAD_STACK_BYTES)
        .spawn(fuzz)
        .expect("a fuzz thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

fn fuzz() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let replica = runtime.block_on(TestReplica::start());
    let before = problems_so_far();

    let (cases, seed) = (cases(), seed());
    println!("fuzz: {cases} inputs, PALISADE_FUZZ_SEED={seed}");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let tally = Mutex::new(Tally::default());
    let started = Instant::now();
    let result = runner.run(&input(), |input| {
        let outcome = if would_change_membership(&input) {
            "skipped".to_string()
        } else {
            let answer = runtime.block_on(replica.raw(input.path, input.body.clone()));
            check(&input, &answer)?
        };
        let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner());
        *tally.outcomes.entry((input.kind, outcome)).or_default() += 1;
        tally.sent += 1;
        if tally.sent.is_multiple_of(PROGRESS_EVERY_INPUTS) {
            // A long run reports as it goes: every input so far was
            // answered with a reason (a failing one stops the run).
            let (errors, panics) = problems_so_far();
            println!(
                "fuzz: {} inputs in {:.0} s, all answered with a reason; ERROR events {}, panics {}",
                tally.sent,
                started.elapsed().as_secs_f64(),
                errors - before.0,
                panics - before.1
            );
        }
        Ok(())
    });
    let elapsed = started.elapsed();

    let tally = tally.into_inner().unwrap_or_else(|p| p.into_inner());
    let sent: u64 = tally.outcomes.values().sum();
    println!(
        "fuzz: {sent} inputs in {:.1} s ({:.0} inputs/s), seed {seed}",
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64().max(0.001)
    );
    for ((kind, outcome), count) in &tally.outcomes {
        println!("  {kind:<10} {outcome:<48} {count}");
    }
    if let Err(failure) = result {
        panic!("fuzz failure (PALISADE_FUZZ_SEED={seed}): {failure}");
    }
    // Nothing logged at error level, nothing panicked, and it still serves.
    assert_no_new_problems(before);
    runtime.block_on(async {
        let mut admin = replica.admin();
        let info = admin
            .get_cluster_info(v1::GetClusterInfoRequest {})
            .await
            .expect("the replica still answers")
            .into_inner();
        assert_eq!(info.leader_id, Some(1), "{info:?}");
        assert_eq!(info.members.len(), 1, "{info:?}");
        replica
            .client()
            .create_workspace(v1::CreateWorkspaceRequest {
                name: "after-the-fuzz".into(),
            })
            .await
            .expect("the replica still writes");
        replica.stop().await;
    });
}
