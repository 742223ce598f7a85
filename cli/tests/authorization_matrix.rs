//! The authorization matrix: every RPC of `palisade.v1.Palisade` and
//! `palisade.v1.ClusterAdmin`, called by every kind of caller, against a
//! real `palisade gateway run` started with TLS (as `palisade up` runs it).
//! The expected gRPC code of each cell is in [`MATRIX`], one row per RPC.
//!
//! Callers (the columns): no credential at all; a malformed token; an
//! expired token; a revoked token; a viewer of another workspace; a viewer,
//! an editor (tokens, of workspace `team`); the admin (the client
//! certificate `palisade cluster init-pki` wrote).
//!
//! Cells that are allowed are built to answer deterministically: writes
//! target a sandbox of the caller's own; admin membership calls carry node
//! id 0 and the key rotation an out-of-range grace (INVALID_ARGUMENT proves
//! they passed authorization without changing the cluster).

mod support;

use std::time::Duration;

use palisade_gateway::leader_hint::{LEADER_ID_HEADER, NODE_ID_HEADER};
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::{ClusterSpec, LocalCluster};
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use support::palisade;

/// The columns, in [`MATRIX`] order.
const CALLERS: [&str; 8] = [
    "none",
    "malformed",
    "expired",
    "revoked",
    "other-viewer",
    "viewer",
    "editor",
    "admin",
];

use Code::{
    FailedPrecondition as FP, InvalidArgument as INV, NotFound as NF, Ok as OK,
    PermissionDenied as PD, Unauthenticated as UA,
};

/// Expected code per (RPC, caller).
#[rustfmt::skip]
const MATRIX: &[(&str, [Code; 8])] = &[
    //                       none malformed expired revoked other-viewer viewer editor admin
    ("CreateSandbox",        [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("GetSandbox",           [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("GetSandboxById",       [UA, UA, UA, UA, NF, OK, OK, OK]),
    ("ListSandboxes",        [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("ListSandboxesAll",     [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("StopSandbox",          [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("StopSandboxById",      [UA, UA, UA, UA, NF, PD, OK, OK]),
    ("StartSandbox",         [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("DeleteSandbox",        [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("WatchSandboxes",       [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("WatchSandboxById",     [UA, UA, UA, UA, NF, OK, OK, OK]),
    ("CreateSshSession",     [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("RevokeSshSession",     [UA, UA, UA, UA, PD, PD, NF, NF]),
    ("ListSshSessions",      [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("SetSandboxPolicy",     [UA, UA, UA, UA, PD, PD, OK, OK]),
    ("GetSandboxPolicy",     [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("CreateWorkspace",      [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("GetWorkspace",         [UA, UA, UA, UA, PD, OK, OK, OK]),
    ("ListWorkspaces",       [UA, UA, UA, UA, OK, OK, OK, OK]),
    ("DeleteWorkspace",      [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("GetClusterInfo",       [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("AddLearner",           [UA, UA, UA, UA, PD, PD, PD, INV]),
    ("PromoteLearner",       [UA, UA, UA, UA, PD, PD, PD, INV]),
    ("RemoveMember",         [UA, UA, UA, UA, PD, PD, PD, INV]),
    ("TransferLeader",       [UA, UA, UA, UA, PD, PD, PD, INV]),
    ("ReconcileOrphans",     [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("CreateApiToken",       [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("ListApiTokens",        [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("RevokeApiToken",       [UA, UA, UA, UA, PD, PD, PD, NF]),
    ("WhoAmI",               [UA, UA, UA, UA, OK, OK, OK, OK]),
    ("SaveSnapshot",         [UA, UA, UA, UA, PD, PD, PD, OK]),
    ("RotateTokenKey",       [UA, UA, UA, UA, PD, PD, PD, INV]),
    // The noop driver has no output and runs nothing: an allowed call gets
    // as far as the driver (FAILED_PRECONDITION DRIVER_UNSUPPORTED, or
    // INVALID_PHASE once a row before stopped the sandbox).
    ("SandboxLogs",          [UA, UA, UA, UA, PD, FP, FP, FP]),
    ("SandboxLogsById",      [UA, UA, UA, UA, NF, FP, FP, FP]),
    ("ExecSandbox",          [UA, UA, UA, UA, PD, PD, FP, FP]),
    ("ExecSandboxById",      [UA, UA, UA, UA, NF, PD, FP, FP]),
];

/// Adds `authorization: Bearer TOKEN` (nothing without one).
#[derive(Clone)]
struct Bearer(Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("an ASCII token"),
            );
        }
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, Bearer>;

/// One caller: a TLS connection (with the admin certificate for the
/// admin) and maybe a token.
struct Caller {
    api: PalisadeClient<Authed>,
    admin: ClusterAdminClient<Authed>,
}

async fn connect(cluster: &LocalCluster, certificate: bool, token: Option<String>) -> Caller {
    let root = cluster.root();
    let read = |name: &str| std::fs::read_to_string(root.join(name)).expect("a PKI file");
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("ca.pem")));
    if certificate {
        tls = tls.identity(Identity::from_pem(read("admin.pem"), read("admin-key.pem")));
    }
    let channel = Endpoint::from_shared(cluster.replica(1).uri())
        .expect("a URI")
        .tls_config(tls)
        .expect("TLS settings")
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("the public port accepts TLS clients without a certificate");
    Caller {
        api: PalisadeClient::with_interceptor(channel.clone(), Bearer(token.clone())),
        admin: ClusterAdminClient::with_interceptor(channel, Bearer(token)),
    }
}

fn by_name(workspace: &str, name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: workspace.to_string(),
        name: name.to_string(),
        id: String::new(),
    })
}

fn by_id(id: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        id: id.to_string(),
        ..Default::default()
    })
}

fn code<T>(result: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    match result {
        Ok(_) => (Code::Ok, String::new()),
        Err(status) => (status.code(), status.message().to_string()),
    }
}

async fn create(admin: &mut Caller, workspace: &str, name: &str) -> String {
    admin
        .api
        .create_sandbox(v1::CreateSandboxRequest {
            workspace: workspace.to_string(),
            name: name.to_string(),
            spec: Some(v1::SandboxSpec {
                command: vec!["sleep".into(), "1000".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("the admin creates a sandbox")
        .into_inner()
        .metadata
        .expect("metadata")
        .id
}

async fn token(admin: &mut Caller, role: &str, workspace: &str, ttl_seconds: u64) -> String {
    admin
        .admin
        .create_api_token(v1::CreateApiTokenRequest {
            role: role.to_string(),
            workspace: workspace.to_string(),
            ttl_seconds,
        })
        .await
        .expect("the admin creates a token")
        .into_inner()
        .secret
}

/// Calls `rpc` as `caller` (column `column`); returns the code.
async fn call(rpc: &str, caller: &mut Caller, column: usize, fixture_id: &str) -> (Code, String) {
    let who = CALLERS[column];
    let team = "team";
    match rpc {
        "CreateSandbox" => code(
            caller
                .api
                .create_sandbox(v1::CreateSandboxRequest {
                    workspace: team.into(),
                    name: format!("created-by-{who}"),
                    spec: Some(v1::SandboxSpec {
                        command: vec!["sleep".into(), "1000".into()],
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await,
        ),
        "GetSandbox" => code(
            caller
                .api
                .get_sandbox(v1::GetSandboxRequest {
                    sandbox: by_name(team, "fixture"),
                    ..Default::default()
                })
                .await,
        ),
        "GetSandboxById" => code(
            caller
                .api
                .get_sandbox(v1::GetSandboxRequest {
                    sandbox: by_id(fixture_id),
                    ..Default::default()
                })
                .await,
        ),
        "ListSandboxes" => code(
            caller
                .api
                .list_sandboxes(v1::ListSandboxesRequest {
                    workspace: team.into(),
                    ..Default::default()
                })
                .await,
        ),
        "ListSandboxesAll" => code(
            caller
                .api
                .list_sandboxes(v1::ListSandboxesRequest {
                    all_workspaces: true,
                    ..Default::default()
                })
                .await,
        ),
        "StopSandbox" => code(
            caller
                .api
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_name(team, "fixture"),
                    ..Default::default()
                })
                .await,
        ),
        "StopSandboxById" => code(
            caller
                .api
                .stop_sandbox(v1::StopSandboxRequest {
                    sandbox: by_id(fixture_id),
                    ..Default::default()
                })
                .await,
        ),
        "StartSandbox" => code(
            caller
                .api
                .start_sandbox(v1::StartSandboxRequest {
                    sandbox: by_name(team, "fixture"),
                    ..Default::default()
                })
                .await,
        ),
        "DeleteSandbox" => code(
            caller
                .api
                .delete_sandbox(v1::DeleteSandboxRequest {
                    sandbox: by_name(team, &format!("victim-{who}")),
                    ..Default::default()
                })
                .await,
        ),
        "WatchSandboxes" => code(
            caller
                .api
                .watch_sandboxes(v1::WatchSandboxesRequest {
                    workspace: team.into(),
                    ..Default::default()
                })
                .await,
        ),
        "WatchSandboxById" => code(
            caller
                .api
                .watch_sandboxes(v1::WatchSandboxesRequest {
                    sandbox_id: fixture_id.into(),
                    ..Default::default()
                })
                .await,
        ),
        "CreateSshSession" => code(
            caller
                .api
                .create_ssh_session(v1::CreateSshSessionRequest {
                    sandbox: by_name(team, "owner"),
                    ttl_seconds: 60,
                })
                .await,
        ),
        "RevokeSshSession" => code(
            caller
                .api
                .revoke_ssh_session(v1::RevokeSshSessionRequest {
                    sandbox: by_name(team, "owner"),
                    session_id: "no-such-session".into(),
                })
                .await,
        ),
        "ListSshSessions" => code(
            caller
                .api
                .list_ssh_sessions(v1::ListSshSessionsRequest {
                    sandbox: by_name(team, "owner"),
                    ..Default::default()
                })
                .await,
        ),
        "SetSandboxPolicy" => code(
            caller
                .api
                .set_sandbox_policy(v1::SetSandboxPolicyRequest {
                    sandbox: by_name(team, "owner"),
                    document: format!("{{\"set_by\": \"{who}\"}}"),
                    expected_version: None,
                })
                .await,
        ),
        "GetSandboxPolicy" => code(
            caller
                .api
                .get_sandbox_policy(v1::GetSandboxPolicyRequest {
                    sandbox: by_name(team, "owner"),
                    ..Default::default()
                })
                .await,
        ),
        "CreateWorkspace" => code(
            caller
                .api
                .create_workspace(v1::CreateWorkspaceRequest {
                    name: format!("made-by-{who}"),
                })
                .await,
        ),
        "GetWorkspace" => code(
            caller
                .api
                .get_workspace(v1::GetWorkspaceRequest {
                    name: team.into(),
                    ..Default::default()
                })
                .await,
        ),
        "ListWorkspaces" => code(
            caller
                .api
                .list_workspaces(v1::ListWorkspacesRequest::default())
                .await,
        ),
        "DeleteWorkspace" => code(
            caller
                .api
                .delete_workspace(v1::DeleteWorkspaceRequest {
                    name: "scratch".into(),
                })
                .await,
        ),
        "GetClusterInfo" => code(
            caller
                .admin
                .get_cluster_info(v1::GetClusterInfoRequest {})
                .await,
        ),
        "AddLearner" => code(
            caller
                .admin
                .add_learner(v1::AddLearnerRequest {
                    node_id: 0,
                    address: "127.0.0.1:1".into(),
                })
                .await,
        ),
        "PromoteLearner" => code(
            caller
                .admin
                .promote_learner(v1::PromoteLearnerRequest { node_id: 0 })
                .await,
        ),
        "RemoveMember" => code(
            caller
                .admin
                .remove_member(v1::RemoveMemberRequest { node_id: 0 })
                .await,
        ),
        "TransferLeader" => code(
            caller
                .admin
                .transfer_leader(v1::TransferLeaderRequest { node_id: 0 })
                .await,
        ),
        "ReconcileOrphans" => code(
            caller
                .admin
                .reconcile_orphans(v1::ReconcileOrphansRequest { dry_run: true })
                .await,
        ),
        "CreateApiToken" => code(
            caller
                .admin
                .create_api_token(v1::CreateApiTokenRequest {
                    role: "viewer".into(),
                    workspace: team.into(),
                    ttl_seconds: 60,
                })
                .await,
        ),
        "ListApiTokens" => code(
            caller
                .admin
                .list_api_tokens(v1::ListApiTokensRequest {})
                .await,
        ),
        "RevokeApiToken" => code(
            caller
                .admin
                .revoke_api_token(v1::RevokeApiTokenRequest {
                    id: "no-such-token".into(),
                })
                .await,
        ),
        "WhoAmI" => code(caller.admin.who_am_i(v1::WhoAmIRequest {}).await),
        // The backup holds the token key: admins only.
        "SaveSnapshot" => code(caller.admin.save_snapshot(v1::SaveSnapshotRequest {}).await),
        "SandboxLogs" => code(
            caller
                .api
                .sandbox_logs(v1::SandboxLogsRequest {
                    sandbox: by_name(team, "fixture"),
                    ..Default::default()
                })
                .await,
        ),
        "SandboxLogsById" => code(
            caller
                .api
                .sandbox_logs(v1::SandboxLogsRequest {
                    sandbox: by_id(fixture_id),
                    ..Default::default()
                })
                .await,
        ),
        "ExecSandbox" => code(
            caller
                .api
                .exec_sandbox(v1::ExecSandboxRequest {
                    sandbox: by_name(team, "fixture"),
                    command: vec!["true".into()],
                    ..Default::default()
                })
                .await,
        ),
        "ExecSandboxById" => code(
            caller
                .api
                .exec_sandbox(v1::ExecSandboxRequest {
                    sandbox: by_id(fixture_id),
                    command: vec!["true".into()],
                    ..Default::default()
                })
                .await,
        ),
        // A grace past the longest one: refused after authorization,
        // before any key changes (the other rows' tokens stay valid).
        "RotateTokenKey" => code(
            caller
                .admin
                .rotate_token_key(v1::RotateTokenKeyRequest {
                    grace_seconds: u64::MAX,
                })
                .await,
        ),
        other => panic!("no call for {other} in the matrix test"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_rpc_answers_every_caller_as_the_matrix_says() {
    let cluster = tokio::task::block_in_place(|| {
        LocalCluster::start(
            ClusterSpec::new(palisade(), 1)
                .with_tls()
                .gateway_args(["--driver", "noop"]),
        )
        .expect("start a TLS replica")
    });
    cluster
        .wait_for_leader(&[1], Duration::from_secs(30))
        .await
        .expect("a leader");

    // Fixtures, made by the admin (its client certificate).
    let mut admin = connect(&cluster, true, None).await;
    for workspace in ["team", "other", "scratch"] {
        admin
            .api
            .create_workspace(v1::CreateWorkspaceRequest {
                name: workspace.into(),
            })
            .await
            .expect("the admin creates a workspace");
    }
    let fixture_id = create(&mut admin, "team", "fixture").await;
    create(&mut admin, "team", "owner").await;
    for who in ["editor", "admin"] {
        create(&mut admin, "team", &format!("victim-{who}")).await;
    }
    let viewer = token(&mut admin, "viewer", "team", 0).await;
    let editor = token(&mut admin, "editor", "team", 0).await;
    let other_viewer = token(&mut admin, "viewer", "other", 0).await;
    let revoked = token(&mut admin, "editor", "team", 0).await;
    let revoked_id = revoked
        .split('.')
        .nth(1)
        .expect("ptk1.ID.SECRET")
        .to_string();
    admin
        .admin
        .revoke_api_token(v1::RevokeApiTokenRequest { id: revoked_id })
        .await
        .expect("the admin revokes a token");
    let expired = token(&mut admin, "editor", "team", 1).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let mut callers = [
        connect(&cluster, false, None).await,
        connect(&cluster, false, Some("not-a-palisade-token".into())).await,
        connect(&cluster, false, Some(expired)).await,
        connect(&cluster, false, Some(revoked)).await,
        connect(&cluster, false, Some(other_viewer)).await,
        connect(&cluster, false, Some(viewer)).await,
        connect(&cluster, false, Some(editor)).await,
        admin,
    ];

    let mut wrong = Vec::new();
    for (rpc, expected) in MATRIX {
        for (column, caller) in callers.iter_mut().enumerate() {
            let (got, message) = call(rpc, caller, column, &fixture_id).await;
            if got != expected[column] {
                wrong.push(format!(
                    "{rpc} as {}: expected {:?}, got {got:?} ({message})",
                    CALLERS[column], expected[column]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cell(s) differ from the matrix:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // Who leads is told to authenticated callers only (the answers' leader
    // headers, see `palisade_gateway::leader_hint`).
    let get = |sandbox| v1::GetSandboxRequest {
        sandbox,
        ..Default::default()
    };
    let [anonymous, .., admin] = &mut callers;
    let refused = anonymous
        .api
        .get_sandbox(get(by_id(&fixture_id)))
        .await
        .expect_err("no credential");
    assert_eq!(refused.code(), Code::Unauthenticated);
    for header in [NODE_ID_HEADER, LEADER_ID_HEADER] {
        assert!(
            refused.metadata().get(header).is_none(),
            "an unauthenticated caller was told {header}"
        );
    }
    let answered = admin
        .api
        .get_sandbox(get(by_id(&fixture_id)))
        .await
        .expect("the admin reads the fixture");
    for header in [NODE_ID_HEADER, LEADER_ID_HEADER] {
        assert_eq!(
            answered
                .metadata()
                .get(header)
                .and_then(|value| value.to_str().ok()),
            Some("1"),
            "{header}"
        );
    }
}

/// Every RPC the two services declare has its row: a new RPC cannot skip
/// the matrix.
#[test]
fn the_matrix_has_a_row_for_every_rpc_of_both_services() {
    let proto = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../proto/palisade/v1/palisade.proto"
    ));
    let mut service = None;
    let mut missing = Vec::new();
    let mut declared = 0;
    for line in proto.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("service ") {
            service = name.split_whitespace().next();
        } else if line == "}" {
            service = None;
        } else if let (Some(service), Some(rpc)) = (service, line.strip_prefix("rpc ")) {
            let name = rpc.split('(').next().unwrap_or_default().trim();
            declared += 1;
            if !MATRIX.iter().any(|(row, _)| *row == name) {
                missing.push(format!("{service}.{name}"));
            }
        }
    }
    assert!(declared >= 29, "parsed only {declared} RPCs from the proto");
    assert!(missing.is_empty(), "RPCs without a matrix row: {missing:?}");
}
