//! The peer port's trust boundary, attacked through real `palisade gateway
//! run` processes started with TLS (as `palisade up` runs them): peer RPCs
//! are not served on the public port; the peer port refuses a TLS client
//! without a cluster certificate at the handshake; a peer's identity is the
//! node its certificate names, never the message's `from_node`; and a
//! valid peer cannot forward leader-internal commands.

mod support;

use std::path::Path;
use std::time::Duration;

use palisade_lifecycle::Command as LifecycleCommand;
use palisade_proto::peer::PeerMessage;
use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use palisade_testkit::{ClusterSpec, LocalCluster};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use support::palisade;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

async fn start_cluster() -> LocalCluster {
    let cluster = tokio::task::block_in_place(|| {
        LocalCluster::start(ClusterSpec::new(palisade(), 3).with_tls()).expect("start a cluster")
    });
    cluster
        .wait_for_leader(&cluster.node_ids(), Duration::from_secs(30))
        .await
        .expect("a leader");
    cluster
}

/// A TLS channel to `address` that trusts the cluster CA, expects the
/// server name `server_name`, and presents node `as_node`'s certificate
/// (`None`: no client certificate).
async fn channel(
    cluster: &LocalCluster,
    address: &str,
    server_name: &str,
    as_node: Option<u64>,
) -> Result<Channel, tonic::transport::Error> {
    let root = cluster.root();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&root.join("ca.pem"))))
        .domain_name(server_name);
    if let Some(node) = as_node {
        tls = tls.identity(Identity::from_pem(
            read(&root.join(format!("node-{node}.pem"))),
            read(&root.join(format!("node-{node}-key.pem"))),
        ));
    }
    Endpoint::from_shared(format!("https://{address}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

fn message(from_node: u64, to_node: u64, payload: Vec<u8>) -> PeerMessage {
    PeerMessage {
        from_node,
        to_node,
        payload,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn peer_rpcs_are_not_served_on_the_public_port() {
    let cluster = start_cluster().await;
    let replica = cluster.replica(1);
    // A client holding even a node's own certificate reaches the public
    // port's TLS, but no peer service behind it.
    let public = channel(&cluster, &replica.listen, "localhost", Some(2))
        .await
        .expect("the public port speaks TLS");
    let refused = RaftPeerClient::new(public)
        .read_index(message(2, 1, b"null".to_vec()))
        .await
        .expect_err("a peer RPC answered on the public port");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");

    // The same call on the peer port is served (the control).
    let peer = channel(
        &cluster,
        replica.peer_address(),
        "node-1.peer.palisade",
        Some(2),
    )
    .await
    .expect("node 2 reaches node 1's peer port");
    RaftPeerClient::new(peer)
        .read_index(message(2, 1, b"null".to_vec()))
        .await
        .expect("a member's read index is served on the peer port");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_peer_port_refuses_a_client_without_a_cluster_certificate_at_the_handshake() {
    let cluster = start_cluster().await;
    let replica = cluster.replica(1);
    let without_certificate = channel(
        &cluster,
        replica.peer_address(),
        "node-1.peer.palisade",
        None,
    )
    .await;
    // rustls reports the server's refusal either at connect or on the
    // first request (TLS 1.3 sends the client's certificate after the
    // client considers the handshake done).
    let answered = match without_certificate {
        Err(_) => None,
        Ok(channel) => Some(
            RaftPeerClient::new(channel)
                .read_index(message(2, 1, b"null".to_vec()))
                .await,
        ),
    };
    if let Some(answer) = answered {
        let status = answer.expect_err("the peer port answered a client without a certificate");
        assert!(
            !matches!(
                status.code(),
                tonic::Code::Ok
                    | tonic::Code::PermissionDenied
                    | tonic::Code::Unauthenticated
                    | tonic::Code::FailedPrecondition
            ),
            "the request reached the peer service instead of failing the handshake: {status:?}"
        );
    }
    let log = replica.log();
    assert!(
        !log.contains("panicked"),
        "the replica panicked on a refused handshake: {log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn node_2s_certificate_claiming_to_be_node_1_is_refused() {
    let cluster = start_cluster().await;
    let target = cluster.replica(3);
    let peer = channel(
        &cluster,
        target.peer_address(),
        "node-3.peer.palisade",
        Some(2),
    )
    .await
    .expect("node 2's certificate opens a connection");
    let mut client = RaftPeerClient::new(peer);
    let forged = client
        .read_index(message(1, 3, b"null".to_vec()))
        .await
        .expect_err("a message claiming node 1 under node 2's certificate was accepted");
    assert_eq!(forged.code(), tonic::Code::PermissionDenied, "{forged:?}");
    assert!(forged.message().contains("node 2"), "{forged:?}");

    // The same message under its true identity is served (the control).
    client
        .read_index(message(2, 3, b"null".to_vec()))
        .await
        .expect("node 2's own message is served");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_peer_cannot_forward_leader_internal_commands() {
    let cluster = start_cluster().await;
    let (leader, _) = cluster
        .wait_for_leader(&cluster.node_ids(), Duration::from_secs(30))
        .await
        .expect("a leader");
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let peer = channel(
        &cluster,
        cluster.replica(leader).peer_address(),
        &format!("node-{leader}.peer.palisade"),
        Some(follower),
    )
    .await
    .expect("the follower reaches the leader's peer port");
    let mut client = RaftPeerClient::new(peer);
    let forward = |command: &LifecycleCommand| {
        message(
            follower,
            leader,
            serde_json::to_vec(command).expect("commands serialize"),
        )
    };

    let internal = [
        LifecycleCommand::Tick {
            now_ms: i64::MAX / 2,
            receipt_retention_ms: 0,
        },
        LifecycleCommand::CompleteDelete {
            sandbox_id: "00000000-0000-4000-8000-000000000000".to_string(),
            of: Default::default(),
        },
        LifecycleCommand::InitializeCluster {
            cluster_id: "forged".to_string(),
            token_secret_hex: "00".repeat(32),
            driver_identity: String::new(),
        },
        // A peer choosing the cluster's execution-token key: only the
        // leader draws one, for an admin's relayed RotateTokenKey.
        LifecycleCommand::RotateTokenKey {
            token_secret_hex: "00".repeat(32),
            grace_ms: 0,
        },
    ];
    for command in &internal {
        let refused = client
            .forward_write(forward(command))
            .await
            .expect_err("a leader-internal command was accepted from the wire");
        assert_eq!(
            refused.code(),
            tonic::Code::PermissionDenied,
            "{}: {refused:?}",
            command.name()
        );
    }

    // A command a client may propose is forwarded (the control).
    let workspace = LifecycleCommand::CreateWorkspace {
        id: "11111111-1111-4111-8111-111111111111".to_string(),
        name: "forwarded".to_string(),
        time_ms: 0,
    };
    client
        .forward_write(forward(&workspace))
        .await
        .expect("a client command is forwarded");
}
