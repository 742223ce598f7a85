//! Membership changes under load, through the CLI, on real
//! `palisade gateway run` processes (noop driver): a fourth replica joins
//! as a learner, is promoted to voter, and an original replica is removed
//! and stopped — while clients keep creating, stopping and deleting
//! sandboxes. Nothing acknowledged is lost, no request fails, and the new
//! replica serves the same state.

mod support;

use std::time::Duration;

use palisade_proto::v1;
use support::cluster::*;
use support::signal;
use tokio::time::Instant;

const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn add_learner_promote_and_remove_under_load() {
    let mut cluster = Cluster::start(3, &["--driver", "noop"]);
    let founders = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&founders).await;
    let workload = Workload::start(
        WorkloadConfig {
            prefix: "m".into(),
            workers: 3,
            command: vec![],
            stop: true,
            delete_every: Some(3),
        },
        cluster.all_uris(),
    );
    workload.wait_for_more(6, PHASE_TIMEOUT).await;
    let admin = cluster.cli_endpoints(&founders);

    // A fourth replica starts empty, without --initial-cluster...
    let joining = cluster.start_joining(4, &["--driver", "noop"]);
    let address = joining.listen.clone();
    // ...and joins as a learner: the command returns once it caught up.
    let added = cli_json_async(&admin, &["cluster", "add-learner", "4", &address]).await;
    let role_of = |info: &serde_json::Value, node: u64| {
        info["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|member| member["node_id"] == node)
            .map(|member| member["role"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(role_of(&added, 4).as_deref(), Some("learner"), "{added}");
    workload.wait_for_more(6, PHASE_TIMEOUT).await;

    let promoted = cli_json_async(&admin, &["cluster", "promote", "4"]).await;
    assert_eq!(
        role_of(&promoted, 4).as_deref(),
        Some("voter"),
        "{promoted}"
    );
    workload.wait_for_more(6, PHASE_TIMEOUT).await;

    // Remove an original replica that does not lead, then stop it.
    let removed = founders
        .iter()
        .copied()
        .find(|id| *id != leader)
        .expect("two followers");
    let after = cli_json_async(&admin, &["cluster", "remove", &removed.to_string()]).await;
    assert_eq!(role_of(&after, removed), None, "{after}");
    signal(cluster.replica(removed).pid(), libc::SIGTERM);
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while cluster.replica_mut(removed).try_exit_status().is_none() {
        assert!(
            Instant::now() < deadline,
            "the removed replica did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let members: Vec<u64> = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != removed)
        .collect();
    workload.wait_for_more(6, PHASE_TIMEOUT).await;
    let logs = workload.finish().await;

    // Nothing lost, no request failed.
    let mut client = failover_client(cluster.uris(&members));
    wait_settled(&mut client, PHASE_TIMEOUT).await;
    verify_acknowledged(&mut client, "m", &logs).await;

    // Every member agrees on the membership and the leader, and the new
    // replica serves the same state from its own copy.
    cluster.wait_caught_up(&members).await;
    for id in &members {
        let info = cluster_info(&cluster.replica(*id).uri())
            .await
            .expect("a member answers");
        let voters: Vec<u64> = info
            .members
            .iter()
            .filter(|member| member.role == "voter")
            .map(|member| member.node_id)
            .collect();
        assert_eq!(voters, members, "node {id}: {info:?}");
        assert_eq!(info.members.len(), members.len(), "node {id}: {info:?}");
    }
    let views = [leader, 4].map(|id| cluster.replica(id).uri());
    let mut pages = Vec::new();
    for uri in views {
        let mut api = direct_client(&uri, Duration::from_secs(30)).await;
        let page = api
            .list_sandboxes(v1::ListSandboxesRequest {
                page_size: 1000,
                consistency: v1::Consistency::Stale as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages.push(
            page.sandboxes
                .iter()
                .map(|sandbox| (id_of(sandbox), phase_of(sandbox)))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        pages[0], pages[1],
        "the new replica holds the leader's state"
    );
    assert!(!pages[0].is_empty());
}
