//! Server limits (issue 13): a replica sheds requests beyond
//! `--requests-in-flight-max` with RESOURCE_EXHAUSTED, reason OVERLOADED,
//! and a RetryInfo delay, before anything is proposed; health checks are
//! not shed.

mod support;

use std::time::Duration;

use palisade_proto::v1;
use support::cluster::*;
use tonic::Code;
use tonic_types::StatusExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_limit_are_shed_with_a_retry_delay() {
    let cluster = Cluster::start(1, &["--driver", "noop", "--requests-in-flight-max", "1"]);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();

    // Many writes at once (each waits for an fsync), on one replica that
    // serves one request at a time.
    let mut calls = Vec::new();
    for caller in 0..48 {
        let mut client = direct_client(&uri, Duration::from_secs(30)).await;
        calls.push(tokio::spawn(async move {
            client
                .create_workspace(v1::CreateWorkspaceRequest {
                    name: format!("shed-{caller}"),
                })
                .await
        }));
    }
    let mut served = 0;
    let mut shed = Vec::new();
    for call in calls {
        match call.await.expect("a caller") {
            Ok(_) => served += 1,
            Err(status) => shed.push(status),
        }
    }
    assert!(served >= 1, "no request was served");
    assert!(
        !shed.is_empty(),
        "48 concurrent writes, none shed with a limit of 1"
    );
    for status in &shed {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        let info = status.get_details_error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, "OVERLOADED");
        assert_eq!(info.metadata["requests_in_flight_max"], "1");
        let retry = status.get_details_retry_info().expect("a RetryInfo");
        assert!(
            retry
                .retry_delay
                .is_some_and(|delay| delay > Duration::ZERO)
        );
    }
    // A shed write proposed nothing: its workspace does not exist.
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    let listed = client
        .list_workspaces(v1::ListWorkspacesRequest::default())
        .await
        .expect("list workspaces")
        .into_inner();
    let created = listed
        .workspaces
        .iter()
        .filter(|workspace| workspace.name.starts_with("shed-"))
        .count();
    assert_eq!(created, served, "shed requests must change nothing");
}

/// A list page is bounded by bytes as well as by count: three sandboxes
/// whose commands are 1.5 MiB each do not fit one 4 MiB response, so the
/// page ends early with a token, every page decodes, and the CLI's list
/// (which walks the pages) shows all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_sandboxes_is_cut_by_bytes_and_still_decodes() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);
    let argument = "a".repeat(12 * 1024);
    for name in ["big-1", "big-2", "big-3"] {
        let mut args = vec!["sandbox", "create", name, "--", "true"];
        // 128 arguments of 12 KiB: 1.5 MiB of command per sandbox.
        args.extend(std::iter::repeat_n(argument.as_str(), 128));
        let output = support::cli(&endpoints, &args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let mut client = direct_client(&cluster.replica(1).uri(), Duration::from_secs(30))
        .await
        .max_decoding_message_size(8 * 1024 * 1024);
    let first = client
        .list_sandboxes(v1::ListSandboxesRequest {
            workspace: "default".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .expect("the first page")
        .into_inner();
    assert_eq!(
        first.sandboxes.len(),
        2,
        "4 MiB holds two 1.5 MiB sandboxes"
    );
    assert!(
        !first.next_page_token.is_empty(),
        "the page was cut: a token"
    );
    let encoded = prost::Message::encoded_len(&first);
    assert!(encoded <= 4 * 1024 * 1024, "page of {encoded} bytes");
    let second = client
        .list_sandboxes(v1::ListSandboxesRequest {
            workspace: "default".into(),
            page_size: 100,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .expect("the second page")
        .into_inner();
    let names: Vec<String> = second
        .sandboxes
        .iter()
        .map(|sandbox| sandbox.metadata.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(names, ["big-3"]);
    assert!(second.next_page_token.is_empty());

    let listed = support::cli(&endpoints, &["-o", "json", "sandbox", "list"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    for name in ["big-1", "big-2", "big-3"] {
        assert!(listed.contains(name), "{name} missing from the list");
    }
}
