//! Clients learn the leader and send to it (issue 18, "clients that learn
//! and prefer the leader"): every answer names the replica that gave it and
//! the leader it knows (`palisade-node-id`, `palisade-leader-id`), and the
//! CLI's client moves to the leader's endpoint, also after leadership
//! moved. Three `palisade gateway run` processes (noop driver).

mod support;

use std::time::Duration;

use palisade_gateway::leader_hint::{LEADER_ID_HEADER, NODE_ID_HEADER};
use palisade_proto::v1;
use support::cluster::*;

fn header(metadata: &tonic::metadata::MetadataMap, name: &str) -> Option<u64> {
    metadata.get(name)?.to_str().ok()?.parse().ok()
}

fn create_request(name: &str) -> v1::CreateSandboxRequest {
    v1::CreateSandboxRequest {
        name: name.to_string(),
        spec: Some(v1::SandboxSpec::default()),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_name_the_leader_and_the_client_sends_to_it() {
    let cluster = Cluster::start(3, &[]);
    let all = cluster.node_ids();
    let (leader, _) = cluster.wait_for_leader(&all).await;
    let followers: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();

    // A follower's answers name it and the leader: a forwarded write...
    let mut direct = direct_client(
        &cluster.replica(followers[0]).uri(),
        Duration::from_secs(60),
    )
    .await;
    let created = direct
        .create_sandbox(create_request("routed-direct"))
        .await
        .expect("a create through a follower");
    assert_eq!(
        header(created.metadata(), NODE_ID_HEADER),
        Some(followers[0])
    );
    assert_eq!(header(created.metadata(), LEADER_ID_HEADER), Some(leader));
    // ...and an error.
    let missing = direct
        .get_sandbox(v1::GetSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                name: "no-such-sandbox".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect_err("no such sandbox");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert_eq!(
        header(missing.metadata(), NODE_ID_HEADER),
        Some(followers[0])
    );
    assert_eq!(header(missing.metadata(), LEADER_ID_HEADER), Some(leader));

    // The CLI's client, given both followers before the leader, sends to
    // the leader once it has heard from them (at most three answers).
    let mut client = failover_client(cluster.uris(&[followers[0], followers[1], leader]));
    for n in 0..3 {
        client
            .palisade(|mut api| async move {
                api.create_sandbox(create_request(&format!("routed-{n}")))
                    .await
            })
            .await
            .expect("a create through the client");
    }
    assert_eq!(
        client.preferred_endpoint(),
        2,
        "the client prefers the leader's endpoint (node {leader})"
    );

    // Leadership moves to the second follower: the next answer (from the
    // old leader) names it, and the client moves there.
    cluster.transfer_leader(&all, followers[1]).await;
    client
        .palisade(|mut api| async move { api.create_sandbox(create_request("routed-after")).await })
        .await
        .expect("a create after the transfer");
    assert_eq!(
        client.preferred_endpoint(),
        1,
        "the client follows the leader to node {}",
        followers[1]
    );
}
