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
