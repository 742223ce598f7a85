//! Malformed input at the API edge, through the real server stack in this
//! process (see `support`): every case is refused with the right code and
//! an ErrorInfo reason, echoes a bounded part of the input, writes nothing
//! (the applied index does not move), logs nothing at error level and
//! panics nowhere.

mod support;

use std::collections::HashMap;

use palisade_lifecycle::limits;
use palisade_proto::v1;
use prost::Message as _;
use support::{TestReplica, assert_no_new_problems, assert_refused, frame, problems_so_far};
use tonic::Code;

/// Runs `body` against a fresh replica and checks it wrote nothing, logged
/// no error and did not panic.
async fn refuses_without_effect<F, Fut>(body: F)
where
    F: FnOnce(TestReplica) -> Fut,
    Fut: Future<Output = TestReplica>,
{
    let replica = TestReplica::start().await;
    let applied = replica.applied_index();
    let before = problems_so_far();
    let replica = body(replica).await;
    assert_eq!(replica.applied_index(), applied, "a refused request wrote");
    assert_no_new_problems(before);
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_tokens_the_server_did_not_issue_are_invalid_argument() {
    refuses_without_effect(|replica| async move {
        // "aéa" is 4 bytes: even length, but byte 2 is inside 'é'.
        let tokens = ["aéa", "é", "zz", "abc", "0g", "2f2f", &"00".repeat(10_000)];
        for token in tokens {
            let status = replica
                .client()
                .list_sandboxes(v1::ListSandboxesRequest {
                    page_token: token.to_string(),
                    ..Default::default()
                })
                .await
                .expect_err(token);
            assert_refused(&status, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
            let status = replica
                .client()
                .list_workspaces(v1::ListWorkspacesRequest {
                    page_token: token.to_string(),
                    ..Default::default()
                })
                .await
                .expect_err(token);
            assert_refused(&status, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
            let status = replica
                .client()
                .list_ssh_sessions(v1::ListSshSessionsRequest {
                    sandbox: Some(v1::SandboxRef {
                        id: "some-id".into(),
                        ..Default::default()
                    }),
                    page_token: token.to_string(),
                    ..Default::default()
                })
                .await
                .expect_err(token);
            assert_refused(&status, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
        }
        replica
    })
    .await;
}

/// A string field that is not UTF-8 is a malformed request, not an
/// internal error: INVALID_ARGUMENT with a reason, which clients do not
/// retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_is_invalid_argument() {
    refuses_without_effect(|replica| async move {
        // Field 1 (name), length-delimited, two bytes that are not UTF-8.
        let not_utf8 = [0x0a, 0x02, 0xff, 0xfe];
        for path in [
            "/palisade.v1.Palisade/CreateWorkspace",
            "/palisade.v1.Palisade/GetWorkspace",
            "/palisade.v1.Palisade/ListSandboxes",
            "/palisade.v1.Palisade/WatchSandboxes",
            "/palisade.v1.ClusterAdmin/AddLearner",
        ] {
            let answer = replica.raw(path, frame(&not_utf8)).await;
            let status = answer
                .status
                .clone()
                .unwrap_or_else(|| panic!("{path}: no status: {answer:?}"));
            assert_refused(&status, Code::InvalidArgument, "MALFORMED_MESSAGE");
        }
        replica
    })
    .await;
}

/// Bodies that are not one well-framed gRPC message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_are_invalid_argument() {
    refuses_without_effect(|replica| async move {
        let message = v1::GetWorkspaceRequest {
            name: "default".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let framed = frame(&message);
        let bodies: Vec<(&str, bytes::Bytes)> = vec![
            ("empty body", bytes::Bytes::new()),
            ("a partial header", bytes::Bytes::from_static(&[0, 0, 0])),
            ("a truncated message", framed.slice(..framed.len() - 1)),
            ("a compressed flag", {
                let mut compressed = framed.to_vec();
                compressed[0] = 1;
                compressed.into()
            }),
            ("an unknown flag", {
                let mut flagged = framed.to_vec();
                flagged[0] = 0x80;
                flagged.into()
            }),
            (
                "two messages",
                [framed.clone(), framed.clone()].concat().into(),
            ),
        ];
        for (what, body) in bodies {
            let answer = replica
                .raw("/palisade.v1.Palisade/GetWorkspace", body)
                .await;
            let status = answer
                .status
                .clone()
                .unwrap_or_else(|| panic!("{what}: no status: {answer:?}"));
            assert_refused(&status, Code::InvalidArgument, "MALFORMED_MESSAGE");
        }
        replica
    })
    .await;
}

/// A request larger than the limit is refused with a status the client
/// receives (not a reset stream), saying the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_size_limit_is_invalid_argument() {
    refuses_without_effect(|replica| async move {
        // Just over the limit, and far over it (the client is still
        // sending when the server has decided).
        for size in [limits::REQUEST_BYTES_MAX, 5 * limits::REQUEST_BYTES_MAX] {
            let request = v1::CreateSandboxRequest {
                name: "big".into(),
                annotations: HashMap::from([("big".to_string(), "x".repeat(size))]),
                ..Default::default()
            };
            let status = replica
                .client()
                .create_sandbox(request)
                .await
                .expect_err("over the limit");
            let message = assert_refused(&status, Code::InvalidArgument, "REQUEST_TOO_LARGE");
            assert!(
                message.contains(&limits::REQUEST_BYTES_MAX.to_string()),
                "{message}"
            );
        }
        // A frame header that declares more than the limit, with little behind it.
        let mut header = vec![0u8];
        header.extend_from_slice(&(u32::MAX).to_be_bytes());
        header.extend_from_slice(b"short");
        let answer = replica
            .raw("/palisade.v1.Palisade/CreateSandbox", header.into())
            .await;
        let status = answer.status.expect("a status");
        assert_refused(&status, Code::InvalidArgument, "REQUEST_TOO_LARGE");
        // The replica still serves.
        replica
            .client()
            .get_workspace(v1::GetWorkspaceRequest {
                name: "default".into(),
                ..Default::default()
            })
            .await
            .expect("served after the refusals");
        replica
    })
    .await;
}

/// A watch cannot start from a resource version the cluster has not
/// reached: it would be silent until then, and a version from another
/// cluster (or a typo) would never be noticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_future_resource_version_is_refused() {
    refuses_without_effect(|replica| async move {
        let future = replica.applied_index() + 1_000;
        let status = replica
            .client()
            .watch_sandboxes(v1::WatchSandboxesRequest {
                resource_version: future,
                ..Default::default()
            })
            .await
            .expect_err("a future resource version");
        let message = assert_refused(&status, Code::OutOfRange, "RESOURCE_VERSION_TOO_NEW");
        assert!(message.contains(&future.to_string()), "{message}");
        // The current one is fine.
        replica
            .client()
            .watch_sandboxes(v1::WatchSandboxesRequest {
                resource_version: replica.applied_index(),
                ..Default::default()
            })
            .await
            .expect("a watch from the current resource version");
        replica
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_enum_values_are_invalid_argument() {
    refuses_without_effect(|replica| async move {
        let status = replica
            .client()
            .list_sandboxes(v1::ListSandboxesRequest {
                source: 7,
                ..Default::default()
            })
            .await
            .expect_err("an unknown list source");
        assert_refused(&status, Code::InvalidArgument, "INVALID_SOURCE");
        let status = replica
            .client()
            .list_sandboxes(v1::ListSandboxesRequest {
                consistency: 9,
                ..Default::default()
            })
            .await
            .expect_err("an unknown consistency");
        assert_refused(&status, Code::InvalidArgument, "INVALID_CONSISTENCY");
        let status = replica
            .client()
            .list_sandboxes(v1::ListSandboxesRequest {
                phases: vec![42],
                ..Default::default()
            })
            .await
            .expect_err("an unknown phase");
        assert_refused(&status, Code::InvalidArgument, "INVALID_PHASES");
        let status = replica
            .client()
            .create_sandbox(v1::CreateSandboxRequest {
                name: "enum".into(),
                spec: Some(v1::SandboxSpec {
                    restart_policy: -3,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect_err("an unknown restart policy");
        assert_refused(
            &status,
            Code::InvalidArgument,
            "INVALID_SPEC_RESTART_POLICY",
        );
        replica
    })
    .await;
}

/// A 20,000-character name used to come back whole in the message (twice,
/// in `grpc-message` and in the details), 47 KB of trailers that clients
/// refused. Messages now quote a bounded prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_echo_a_bounded_part_of_the_input() {
    refuses_without_effect(|replica| async move {
        let long = "n".repeat(20_000);
        let requests: Vec<(&str, Vec<u8>)> = vec![
            (
                "/palisade.v1.Palisade/CreateWorkspace",
                v1::CreateWorkspaceRequest { name: long.clone() }.encode_to_vec(),
            ),
            (
                "/palisade.v1.Palisade/CreateSandbox",
                v1::CreateSandboxRequest {
                    name: "ok".into(),
                    labels: HashMap::from([(long.clone(), "v".into())]),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
            (
                "/palisade.v1.Palisade/CreateSandbox",
                v1::CreateSandboxRequest {
                    name: "ok".into(),
                    spec: Some(v1::SandboxSpec {
                        env: HashMap::from([(format!("{long}="), "v".into())]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
            (
                "/palisade.v1.ClusterAdmin/AddLearner",
                v1::AddLearnerRequest {
                    node_id: 9,
                    address: long.clone(),
                }
                .encode_to_vec(),
            ),
        ];
        for (path, message) in requests {
            let answer = replica.raw(path, frame(&message)).await;
            let status = answer
                .status
                .clone()
                .unwrap_or_else(|| panic!("{path}: no status: {answer:?}"));
            assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
            assert!(
                status.message().len() <= limits::ERROR_MESSAGE_BYTES_MAX,
                "{path}: a {}-byte message",
                status.message().len()
            );
            assert!(
                answer.header_bytes < 4 * 1024,
                "{path}: {} bytes of headers and trailers",
                answer.header_bytes
            );
        }
        replica
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_variable_names_have_a_length_limit() {
    let replica = TestReplica::start().await;
    let create = |name: &str, key: String| v1::CreateSandboxRequest {
        name: name.into(),
        no_wait: true,
        spec: Some(v1::SandboxSpec {
            env: HashMap::from([(key, "value".into())]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let applied = replica.applied_index();
    let status = replica
        .client()
        .create_sandbox(create(
            "too-long",
            "K".repeat(limits::ENV_NAME_BYTES_MAX + 1),
        ))
        .await
        .expect_err("an over-long variable name");
    assert_refused(&status, Code::InvalidArgument, "INVALID_SPEC_ENV");
    assert_eq!(replica.applied_index(), applied);
    replica
        .client()
        .create_sandbox(create("longest", "K".repeat(limits::ENV_NAME_BYTES_MAX)))
        .await
        .expect("the longest variable name allowed");
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_learner_needs_a_host_and_port() {
    refuses_without_effect(|replica| async move {
        for address in [
            "",
            ":",
            "host:",
            ":7001",
            "a:b:c",
            "host:port",
            "host:99999",
            "host:0",
            "http://host:7001/path",
            "https://host:7001",
            "ho st:7001",
            "-host:7001",
            "[::1:7001",
            "user@host:7001",
        ] {
            let status = replica
                .admin()
                .add_learner(v1::AddLearnerRequest {
                    node_id: 9,
                    address: address.to_string(),
                })
                .await
                .expect_err(address);
            assert_refused(&status, Code::InvalidArgument, "INVALID_ADDRESS");
        }
        replica
    })
    .await;
}

/// The tokens the server issues keep working (the checks above refuse
/// only what it never issues).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_page_tokens_still_page() {
    let replica = TestReplica::start().await;
    for name in ["ws-a", "ws-b"] {
        replica
            .client()
            .create_workspace(v1::CreateWorkspaceRequest { name: name.into() })
            .await
            .expect("a workspace");
        replica
            .client()
            .create_sandbox(v1::CreateSandboxRequest {
                workspace: name.into(),
                name: format!("{name}-sandbox"),
                no_wait: true,
                ..Default::default()
            })
            .await
            .expect("a sandbox");
    }
    let mut workspaces = Vec::new();
    let mut token = String::new();
    loop {
        let page = replica
            .client()
            .list_workspaces(v1::ListWorkspacesRequest {
                page_size: 1,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("a page")
            .into_inner();
        workspaces.extend(page.workspaces.into_iter().map(|ws| ws.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(workspaces, ["default", "ws-a", "ws-b"]);
    let mut sandboxes = Vec::new();
    let mut token = String::new();
    loop {
        let page = replica
            .client()
            .list_sandboxes(v1::ListSandboxesRequest {
                all_workspaces: true,
                page_size: 1,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("a page")
            .into_inner();
        sandboxes.extend(
            page.sandboxes
                .into_iter()
                .map(|sandbox| sandbox.metadata.unwrap_or_default().name),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(sandboxes, ["ws-a-sandbox", "ws-b-sandbox"]);
    replica.stop().await;
}
