//! What a client sees from a replica that stalled while it held requests
//! the client then gave up on: the replica's HTTP/2 server finds more
//! streams reset than it accepts at once, answers ENHANCE_YOUR_CALM and
//! closes the connection — RESOURCE_EXHAUSTED without ErrorInfo at the
//! client, for requests the replica may have taken up. The chaos workload
//! must count that as an unknown outcome, not as a refusal (chaos seed 5
//! recorded such a create as refused, and its history was then "not
//! linearizable").

use std::sync::Arc;
use std::time::Duration;

use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;
use palisade_chaos::workload::is_definite;
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;

/// Requests sent to the stalled replica, each given up after a short wait.
const ABANDONED_REQUESTS: usize = 64;
/// Times the scenario is played before the test gives up on producing it.
const ATTEMPTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_after_a_stall_is_an_unknown_outcome() {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(LinkTable::new(5));
    let (triggers, _fired) = Triggers::new();
    let cluster = Cluster::start(ClusterConfig::chaos(3), host, links, Arc::new(triggers))
        .expect("cluster starts");
    cluster
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected");
    let (node, uri) = cluster.endpoints()[0].clone();
    // The server closes the connection only if it saw enough streams reset
    // before it accepted them; on a loaded machine the client may give up
    // on a request before it even sent it. Then the connection stays open
    // and the scenario is played again on a new one.
    let mut not_produced = Vec::new();
    for attempt in 1..=ATTEMPTS {
        match closed_connection_answer(&cluster, node, &uri).await {
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                assert!(
                    !is_definite(&status),
                    "a request on a connection the server closed has an unknown outcome: {status:?}"
                );
                cluster.shutdown().await;
                return;
            }
            other => not_produced.push(format!("attempt {attempt}: {other:?}")),
        }
    }
    panic!(
        "the stalled replica never closed the connection (the HTTP/2 server's ENHANCE_YOUR_CALM, \
         RESOURCE_EXHAUSTED) in {ATTEMPTS} attempts: {}",
        not_produced.join("; ")
    );
}

/// Stalls replica `node`, abandons [`ABANDONED_REQUESTS`] requests to it on
/// one connection, and returns the answer to one more request sent on that
/// connection just before the replica thaws.
async fn closed_connection_answer(
    cluster: &Cluster,
    node: u64,
    uri: &str,
) -> Result<tonic::Response<v1::Sandbox>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(uri.to_string())
        .expect("an endpoint")
        .connect()
        .await
        .expect("connects");
    let client = PalisadeClient::new(channel);
    let get = || v1::GetSandboxRequest {
        sandbox: Some(v1::SandboxRef {
            workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
            name: "absent".into(),
            id: String::new(),
        }),
        consistency: v1::Consistency::Linearizable as i32,
    };

    cluster.pause(node);
    // Every request is sent on the one connection and abandoned (its
    // stream reset) while the replica cannot read.
    let abandoned: Vec<_> = (0..ABANDONED_REQUESTS)
        .map(|_| {
            let mut client = client.clone();
            let request = get();
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), client.get_sandbox(request))
                        .await;
            })
        })
        .collect();
    for task in abandoned {
        let _ = task.await;
    }
    // One more, in flight when the replica thaws.
    let mut last = client.clone();
    let pending = tokio::spawn(async move { last.get_sandbox(get()).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.resume(node);
    tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("an answer")
        .expect("the task ran")
}
