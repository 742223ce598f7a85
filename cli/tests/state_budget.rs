//! Issue 13, item 3 (a state budget), on real `palisade gateway run`
//! processes with the noop driver:
//!
//! - 1,000 tiny requests that find their sandbox already where they would
//!   take it (`AlreadyDone`: a stop of a stopped sandbox) grow the
//!   replica's RSS by less than 5 MB, however large the sandbox's spec: a
//!   receipt keeps a compact outcome, not a copy of the sandbox.
//! - A workspace at its receipt quota is refused with RESOURCE_EXHAUSTED
//!   and an ErrorInfo naming the quota (`QUOTA_EXCEEDED`, metadata
//!   `quota = receipts_per_workspace`), its refused requests leave nothing
//!   behind, a retry of one of its earlier requests still replays, and
//!   another workspace goes on as if nothing happened.
//! - `cluster status -o json` shows the state's byte size and ceiling,
//!   without its receipts (memory) and with them (snapshot).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use support::KeepLogsOnFailure;
use support::cluster::*;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Resident set size of `pid`, in bytes (`VmRSS` of /proc/PID/status).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

fn by_name(workspace: &str, name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: workspace.into(),
        name: name.into(),
        id: String::new(),
    })
}

async fn create(
    api: &mut PalisadeClient<Channel>,
    workspace: &str,
    name: &str,
    request_id: &str,
) -> Result<v1::Sandbox, tonic::Status> {
    api.create_sandbox(v1::CreateSandboxRequest {
        workspace: workspace.into(),
        name: name.into(),
        spec: Some(v1::SandboxSpec::default()),
        request_id: request_id.into(),
        ..Default::default()
    })
    .await
    .map(|answer| answer.into_inner())
}

async fn stop(api: &mut PalisadeClient<Channel>, request_id: String) -> v1::Sandbox {
    api.stop_sandbox(v1::StopSandboxRequest {
        sandbox: by_name("default", "big"),
        request_id,
        ..Default::default()
    })
    .await
    .expect("a stop of a stopped sandbox succeeds")
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tiny_already_done_requests_grow_rss_by_less_than_5_mb() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_thousand_tiny_already_done_requests_grow_rss_by_less_than_5_mb",
    };
    cluster.wait_for_leader(&[1]).await;
    let mut api = direct_client(&cluster.replica(1).uri(), CALL_TIMEOUT).await;

    // A sandbox with a large spec (64 KiB of environment), stopped.
    let env: HashMap<String, String> = (0..8)
        .map(|n| (format!("VAR_{n}"), "x".repeat(8 * 1024)))
        .collect();
    api.create_sandbox(v1::CreateSandboxRequest {
        name: "big".into(),
        spec: Some(v1::SandboxSpec {
            env,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .expect("create the sandbox");
    let stopped = stop(&mut api, "first-stop".into()).await;
    assert_eq!(phase_of(&stopped), v1::SandboxPhase::Stopped);

    // Warm up (connections, allocator arenas), then measure.
    for n in 0..200 {
        stop(&mut api, format!("warm-{n}")).await;
    }
    let pid = cluster.replica(1).pid();
    let before = rss_bytes(pid);
    for n in 0..1_000 {
        let answer = stop(&mut api, format!("tiny-{n}")).await;
        assert_eq!(phase_of(&answer), v1::SandboxPhase::Stopped);
    }
    let after = rss_bytes(pid);
    let grown = after.saturating_sub(before);
    eprintln!("RSS before {before} B, after {after} B: grew {grown} B over 1,000 requests");
    assert!(
        grown < 5 * 1024 * 1024,
        "1,000 tiny AlreadyDone requests grew RSS by {grown} bytes ({before} -> {after})"
    );

    // A retry of one of them still replays the original answer.
    let replayed = stop(&mut api, "tiny-7".into()).await;
    assert_eq!(phase_of(&replayed), v1::SandboxPhase::Stopped);

    // The state's size is tracked and shown.
    let status = cli_json_async(
        &cluster.cli_endpoints(&[1]),
        &["cluster", "status", "-o", "json"],
    )
    .await;
    let replica = &status["replicas"][0];
    let state_bytes = replica["state_bytes"].as_u64().expect("state_bytes");
    let state_bytes_max = replica["state_bytes_max"]
        .as_u64()
        .expect("state_bytes_max");
    assert!(
        state_bytes > 64 * 1024,
        "the state holds the 64 KiB spec: {status}"
    );
    assert!(
        state_bytes < 2 * 1024 * 1024,
        "1,200 compact receipts and one sandbox are far below 2 MiB: {status}"
    );
    assert_eq!(state_bytes_max, 1024 * 1024 * 1024);
    assert!(replica["receipts"].as_u64().unwrap() >= 1_202);
    // The receipts live on disk: budgeted with the snapshot (whole state),
    // not with what the replica holds in memory.
    let snapshot_bytes = replica["snapshot_bytes"].as_u64().expect("snapshot_bytes");
    assert!(
        snapshot_bytes > state_bytes + 1_202 * 100,
        "the snapshot's size counts the receipts, the state's does not: {status}"
    );
    assert_eq!(
        replica["snapshot_bytes_max"].as_u64(),
        Some(8 * 1024 * 1024 * 1024)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_at_its_receipt_quota_does_not_block_another() {
    let cluster = Cluster::start(
        1,
        &["--driver", "noop", "--quota-receipts-per-workspace", "5"],
    );
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_workspace_at_its_receipt_quota_does_not_block_another",
    };
    cluster.wait_for_leader(&[1]).await;
    let mut api = direct_client(&cluster.replica(1).uri(), CALL_TIMEOUT).await;
    for workspace in ["busy", "other"] {
        api.create_workspace(v1::CreateWorkspaceRequest {
            name: workspace.into(),
        })
        .await
        .expect("create the workspace");
    }

    // "busy" uses its five receipts (one of them a rejection: a name taken).
    for n in 0..4 {
        create(&mut api, "busy", &format!("s{n}"), &format!("busy-{n}"))
            .await
            .expect("within the quota");
    }
    let taken = create(&mut api, "busy", "s0", "busy-taken")
        .await
        .expect_err("the name is taken");
    assert_eq!(taken.code(), Code::AlreadyExists);

    // The sixth is refused, naming the quota; it leaves nothing behind.
    for attempt in 0..20 {
        let refused = create(&mut api, "busy", "s9", &format!("busy-over-{attempt}"))
            .await
            .expect_err("the workspace is at its receipt quota");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        let info = refused
            .get_details_error_info()
            .expect("an ErrorInfo on every refusal");
        assert_eq!(info.reason, "QUOTA_EXCEEDED");
        assert_eq!(
            info.metadata.get("quota").map(String::as_str),
            Some("receipts_per_workspace")
        );
        assert_eq!(
            info.metadata.get("workspace").map(String::as_str),
            Some("busy")
        );
        assert_eq!(info.metadata.get("limit").map(String::as_str), Some("5"));
    }
    // A retry of an earlier request still replays its result.
    let replayed = create(&mut api, "busy", "s1", "busy-1")
        .await
        .expect("a retry of an applied request is not refused");
    assert_eq!(replayed.metadata.as_ref().unwrap().name, "s1");

    // Another workspace is unaffected, also by the refused requests.
    for n in 0..5 {
        let created = create(&mut api, "other", &format!("t{n}"), &format!("other-{n}"))
            .await
            .expect("another workspace is not blocked");
        assert_eq!(created.metadata.as_ref().unwrap().workspace, "other");
    }
    let status = cli_json_async(
        &cluster.cli_endpoints(&[1]),
        &["cluster", "status", "-o", "json"],
    )
    .await;
    assert_eq!(
        status["replicas"][0]["receipts"].as_u64(),
        Some(10),
        "refused requests left no receipt: {status}"
    );
}
