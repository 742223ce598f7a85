//! The peer transport end to end: real replicas (openraft, the redb log
//! store, the lifecycle state machine) talking through real tonic servers on
//! 127.0.0.1, each bound to a free port.
//!
//! What is proven here:
//! - three replicas elect a leader (pre-vote on) over the transport;
//! - a write forwarded by a follower is applied on all three;
//! - a message from a non-member (node 99) and a misrouted message are
//!   refused before reaching Raft;
//! - `transfer_leader` moves leadership, and a write forwarded to the old
//!   leader comes back as `NotLeader` naming the new one;
//! - the unary AppendEntries and PreVote paths carry openraft's answers;
//! - a learner added after the log was purged is caught up by a chunked
//!   snapshot;
//! - an unreachable peer is `Unreachable` and a silent one is `Timeout`;
//! - payloads are JSON until the cluster's feature level allows the binary
//!   encoding, binary after (replication and forwarded writes go on across
//!   the switch), and a reply follows its request's encoding.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use openraft::async_runtime::WatchReceiver as _;
use openraft::errors::RPCError;
use openraft::network::RPCOption;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
use openraft::{BasicNode, Config, RaftNetworkFactory, RaftNetworkV2};
use palisade_codec::Encoding;
use palisade_lifecycle::Command;
use palisade_proto::peer::PeerMessage;
use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use palisade_proto::peer::raft_peer_server::{RaftPeer, RaftPeerServer};
use palisade_raft::feature_level::{ClusterLevel, FEATURE_LEVEL_BINARY_PEER_PAYLOADS};
use palisade_raft::network::{ForwardError, PeerClients};
use palisade_raft::{TypeConfig, Vote};
use tempfile::TempDir;
use tokio_stream::wrappers::TcpListenerStream;

mod support;
use support::{
    WAIT, agreed_leader, bind, create_workspace, replica, start_cluster, start_replica,
    wait_applied,
};

const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

fn config() -> Result<Arc<Config>> {
    let config = Config {
        cluster_name: "peer-transport-test".to_owned(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        enable_pre_vote: Some(true),
        // Small chunks, so a snapshot crosses the wire in many pieces.
        snapshot_max_chunk_size: 64,
        // Keep no log behind a snapshot, so a purge forces a snapshot.
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        // Local disk on a busy 2-core machine: leave room for fsync.
        install_snapshot_timeout: 2_000,
        ..Config::default()
    };
    Ok(Arc::new(config.validate()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_write_membership_check_and_leader_transfer() -> Result<()> {
    let dir = TempDir::new()?;
    let replicas = start_cluster(3, dir.path(), config()?).await?;
    let leader = agreed_leader(&replicas).await?;
    let follower = replicas
        .iter()
        .find(|replica| replica.id != leader)
        .context("a follower")?;
    let leader_addr = replica(&replicas, leader).addr.clone();

    // A follower forwards a write to the leader; it is applied everywhere.
    let response = follower
        .clients
        .forward_write(
            leader,
            &leader_addr,
            create_workspace("alpha"),
            FORWARD_TIMEOUT,
        )
        .await?;
    ensure!(
        response.data.is_ok(),
        "CreateWorkspace rejected: {:?}",
        response.data
    );
    for replica in &replicas {
        wait_applied(&replica.state, response.log_id.index).await?;
        let has_alpha = replica
            .state
            .read(|applied| applied.state.workspaces.contains_key("alpha"));
        ensure!(has_alpha, "node {} lacks workspace alpha", replica.id);
    }

    // Node 99 is no member: the leader refuses it before Raft sees it.
    let stranger = PeerClients::new(99);
    match stranger
        .forward_write(
            leader,
            &leader_addr,
            create_workspace("beta"),
            FORWARD_TIMEOUT,
        )
        .await
    {
        Err(ForwardError::Refused {
            code: tonic::Code::PermissionDenied,
            ..
        }) => {}
        other => bail!("a write from node 99 was not refused: {other:?}"),
    }
    let mut raw = RaftPeerClient::connect(format!("http://{leader_addr}")).await?;
    let vote = VoteRequest::<TypeConfig>::new(Vote::new(1_000, 99), None);
    let refused = raw
        .vote(PeerMessage {
            from_node: 99,
            to_node: leader,
            payload: serde_json::to_vec(&vote)?,
        })
        .await
        .expect_err("a vote from node 99 must be refused");
    ensure!(
        refused.code() == tonic::Code::PermissionDenied,
        "{refused:?}"
    );
    // A message meant for another node is refused too, even from a member.
    let misrouted = raw
        .vote(PeerMessage {
            from_node: follower.id,
            to_node: follower.id,
            payload: serde_json::to_vec(&vote)?,
        })
        .await
        .expect_err("a misrouted vote must be refused");
    ensure!(
        misrouted.code() == tonic::Code::FailedPrecondition,
        "{misrouted:?}"
    );

    // Replication from a node the membership does not list: admitted when
    // it carries an elected leader's vote of the current term or a later
    // one (a replica re-added empty may hold a membership from before its
    // leader joined, and learns the new one only from that leader; chaos
    // seed 87). Openraft itself then judges it (here: a vote that loses to
    // the follower's own leader of the same term). An unelected vote, or
    // an older term, is refused before Raft sees it.
    let follower_addr = follower.addr.clone();
    let mut to_follower = RaftPeerClient::connect(format!("http://{follower_addr}")).await?;
    let term = follower
        .raft
        .metrics()
        .borrow_watched()
        .vote
        .leader_id()
        .term;
    let append_from_99 = |vote: Vote| -> Result<PeerMessage> {
        let append = AppendEntriesRequest::<TypeConfig> {
            vote,
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        };
        Ok(PeerMessage {
            from_node: 99,
            to_node: follower.id,
            payload: serde_json::to_vec(&append)?,
        })
    };
    let admitted = to_follower
        .append_entries(append_from_99(Vote::new_committed(term, 99))?)
        .await;
    ensure!(
        admitted.is_ok(),
        "an elected leader's AppendEntries of the current term was refused: {admitted:?}"
    );
    for (vote, what) in [
        (Vote::new(term + 1, 99), "a candidate's (unelected) vote"),
        (
            Vote::new_committed(term.saturating_sub(1), 99),
            "an older term",
        ),
    ] {
        let refused = to_follower
            .append_entries(append_from_99(vote)?)
            .await
            .expect_err(what);
        ensure!(
            refused.code() == tonic::Code::PermissionDenied,
            "{what}: {refused:?}"
        );
    }
    ensure!(
        replica(&replicas, leader)
            .raft
            .metrics()
            .borrow_watched()
            .state
            .is_leader(),
        "the refused votes or the stranger's AppendEntries disturbed the leader"
    );

    // Leadership moves to the follower on request.
    let successor = follower.id;
    replica(&replicas, leader)
        .raft
        .trigger()
        .transfer_leader(successor)
        .await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    while agreed_leader(&replicas).await? != successor {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "leadership did not move to node {successor}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The old leader now refuses writes and names its successor.
    match follower
        .clients
        .forward_write(
            leader,
            &leader_addr,
            create_workspace("gamma"),
            FORWARD_TIMEOUT,
        )
        .await
    {
        Err(ForwardError::NotLeader {
            leader_id: Some(named),
            ..
        }) if named == successor => {}
        other => bail!("the old leader did not redirect to node {successor}: {other:?}"),
    }
    // And the new leader takes a write forwarded by the old one.
    let old_leader = replica(&replicas, leader);
    let response = old_leader
        .clients
        .forward_write(
            successor,
            &replica(&replicas, successor).addr,
            create_workspace("delta"),
            FORWARD_TIMEOUT,
        )
        .await?;
    ensure!(response.data.is_ok(), "{:?}", response.data);
    for replica in &replicas {
        wait_applied(&replica.state, response.log_id.index).await?;
    }

    // The unary paths (openraft's fallback for append, and pre-vote): a
    // deposed leader's heartbeat meets the newer vote, and its pre-vote for
    // a stale term is not granted.
    let new_leader = replica(&replicas, successor);
    let mut client = old_leader
        .clients
        .network_factory()
        .new_client(successor, &new_leader.node())
        .await;
    let option = RPCOption::new(Duration::from_secs(2));
    let heartbeat = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(1, leader),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    let answer = client.append_entries(heartbeat, option.clone()).await?;
    ensure!(
        matches!(answer, AppendEntriesResponse::HigherVote(_)),
        "{answer:?}"
    );
    let pre_vote = VoteRequest::<TypeConfig>::new(Vote::new(1, leader), None);
    let answer = client.pre_vote(pre_vote, option).await?;
    ensure!(
        !answer.vote_granted,
        "a stale pre-vote was granted: {answer:?}"
    );

    for replica in replicas {
        replica.stop().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_behind_a_purged_log_gets_a_chunked_snapshot() -> Result<()> {
    let dir = TempDir::new()?;
    let mut replicas = start_cluster(3, dir.path(), config()?).await?;
    let leader = agreed_leader(&replicas).await?;
    let leader_raft = replica(&replicas, leader).raft.clone();

    let mut last = 0;
    for name in ["one", "two", "three", "four"] {
        let response = leader_raft
            .client_write(create_workspace(name).into())
            .await?;
        ensure!(response.data.is_ok(), "{:?}", response.data);
        last = response.log_id.index;
    }
    leader_raft.trigger().snapshot().await?;
    leader_raft
        .wait(Some(WAIT))
        .metrics(
            |metrics| metrics.snapshot.as_ref().map(|id| id.index) >= Some(last),
            "snapshot built",
        )
        .await?;
    leader_raft.trigger().purge_log(last).await?;
    leader_raft
        .wait(Some(WAIT))
        .metrics(
            |metrics| metrics.purged.as_ref().map(|id| id.index) >= Some(last),
            "log purged",
        )
        .await?;

    // Node 4 joins after the purge: only a snapshot can catch it up.
    let (listener, addr) = bind().await?;
    let learner = start_replica(4, listener, dir.path(), config()?).await?;
    tokio::time::timeout(WAIT, leader_raft.add_learner(4, BasicNode::new(addr), true))
        .await
        .context("add_learner timed out")??;
    wait_applied(&learner.state, last).await?;
    let workspaces = learner.state.read(|applied| applied.state.workspaces.len());
    ensure!(
        workspaces >= 4,
        "the learner has {workspaces} workspaces after the snapshot"
    );
    // Only an installed snapshot gives the learner one: it builds none
    // itself this early (the snapshot policy waits for 5000 entries).
    learner
        .raft
        .wait(Some(WAIT))
        .metrics(
            |metrics| metrics.snapshot.as_ref().map(|id| id.index) >= Some(last),
            "learner installed the leader's snapshot",
        )
        .await?;

    replicas.push(learner);
    for replica in replicas {
        replica.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn unreachable_and_silent_peers() -> Result<()> {
    let clients = PeerClients::new(1);
    let mut factory = clients.network_factory();
    let vote = VoteRequest::<TypeConfig>::new(Vote::new(1, 1), None);

    // Nothing listens on a port we bound and released.
    let closed = {
        let (listener, addr) = bind().await?;
        drop(listener);
        addr
    };
    let mut client = factory.new_client(2, &BasicNode::new(closed)).await;
    match client
        .vote(vote.clone(), RPCOption::new(Duration::from_secs(2)))
        .await
    {
        Err(RPCError::Unreachable(_)) => {}
        other => bail!("a closed port is not Unreachable: {other:?}"),
    }
    ensure!(
        client.backoff().is_some(),
        "unreachable peers must be backed off"
    );

    // A peer that accepts connections but never speaks: the deadline wins.
    let (silent, addr) = bind().await?;
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let mut client = factory.new_client(3, &BasicNode::new(addr)).await;
    let ttl = Duration::from_millis(400);
    let started = tokio::time::Instant::now();
    match client.vote(vote, RPCOption::new(ttl)).await {
        Err(RPCError::Timeout(_)) => {}
        other => bail!("a silent peer did not time out: {other:?}"),
    }
    ensure!(
        started.elapsed() < ttl,
        "the RPC outlived its hard deadline: {:?}",
        started.elapsed()
    );
    hold.abort();
    Ok(())
}

/// A peer that answers only `ReadIndex` (with 7, in the request's
/// encoding) and records the encoding of every request it gets.
#[derive(Clone, Default)]
struct SpyPeer {
    seen: Arc<std::sync::Mutex<Vec<Encoding>>>,
}

type SpyStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<PeerMessage, tonic::Status>> + Send + 'static>,
>;

#[tonic::async_trait]
impl RaftPeer for SpyPeer {
    type StreamAppendStream = SpyStream;
    async fn append_entries(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn stream_append(
        &self,
        _: tonic::Request<tonic::Streaming<PeerMessage>>,
    ) -> Result<tonic::Response<SpyStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn vote(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn pre_vote(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn install_snapshot(
        &self,
        _: tonic::Request<tonic::Streaming<palisade_proto::peer::SnapshotChunk>>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn transfer_leader(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn forward_write(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
    async fn read_index(
        &self,
        request: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        let message = request.into_inner();
        let encoding = Encoding::of(&message.payload)
            .map_err(|error| tonic::Status::invalid_argument(error.to_string()))?;
        self.seen.lock().unwrap().push(encoding);
        let reply: Result<u64, String> = Ok(7);
        Ok(tonic::Response::new(PeerMessage {
            from_node: message.to_node,
            to_node: message.from_node,
            payload: palisade_codec::encode(&reply, encoding).unwrap(),
        }))
    }
    async fn supported_feature_level(
        &self,
        _: tonic::Request<PeerMessage>,
    ) -> Result<tonic::Response<PeerMessage>, tonic::Status> {
        Err(tonic::Status::unimplemented("spy"))
    }
}

/// What a replica sends follows the cluster's feature level: JSON below
/// `FEATURE_LEVEL_BINARY_PEER_PAYLOADS` (an older release among the voters
/// decodes nothing else), binary from it.
#[tokio::test]
async fn requests_are_json_below_the_binary_level_and_binary_from_it() -> Result<()> {
    let (listener, addr) = bind().await?;
    let spy = SpyPeer::default();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RaftPeerServer::new(spy.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let below = PeerClients::new(1)
        .with_cluster_level(ClusterLevel::new(FEATURE_LEVEL_BINARY_PEER_PAYLOADS - 1));
    let at = PeerClients::new(1)
        .with_cluster_level(ClusterLevel::new(FEATURE_LEVEL_BINARY_PEER_PAYLOADS));
    ensure!(below.read_index(2, &addr, WAIT).await? == 7);
    ensure!(at.read_index(2, &addr, WAIT).await? == 7);
    ensure!(PeerClients::new(1).read_index(2, &addr, WAIT).await? == 7);
    let seen = spy.seen.lock().unwrap().clone();
    ensure!(
        seen == [Encoding::Json, Encoding::BinaryV1, Encoding::Json],
        "encodings sent: {seen:?}"
    );
    server.abort();
    Ok(())
}

/// A real cluster across the switch: before the raise every replica sends
/// JSON; the raise to the binary level is applied everywhere; replication,
/// a forwarded write and a replica's raw request in either encoding work
/// after it, each answered in its own encoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_switches_to_the_binary_encoding_when_its_level_allows() -> Result<()> {
    let dir = TempDir::new()?;
    let replicas = start_cluster(3, dir.path(), config()?).await?;
    let leader = agreed_leader(&replicas).await?;
    for replica in &replicas {
        ensure!(replica.state.cluster_level().peer_encoding() == Encoding::Json);
    }
    let leader_raft = replica(&replicas, leader).raft.clone();
    let raised = leader_raft
        .client_write(
            Command::RaiseFeatureLevel {
                level: FEATURE_LEVEL_BINARY_PEER_PAYLOADS,
            }
            .into(),
        )
        .await?;
    ensure!(raised.data.is_ok(), "{:?}", raised.data);
    for replica in &replicas {
        wait_applied(&replica.state, raised.log_id.index).await?;
        ensure!(
            replica.state.cluster_level().peer_encoding() == Encoding::BinaryV1,
            "node {} still sends JSON after applying the raise",
            replica.id
        );
    }

    let follower = replicas
        .iter()
        .find(|replica| replica.id != leader)
        .context("a follower")?;
    let leader_addr = replica(&replicas, leader).addr.clone();
    let response = follower
        .clients
        .forward_write(
            leader,
            &leader_addr,
            create_workspace("after-the-switch"),
            FORWARD_TIMEOUT,
        )
        .await?;
    ensure!(response.data.is_ok(), "{:?}", response.data);
    for replica in &replicas {
        wait_applied(&replica.state, response.log_id.index).await?;
        ensure!(
            replica
                .state
                .read(|applied| { applied.state.workspaces.contains_key("after-the-switch") })
        );
    }

    // The leader answers a request in the request's encoding.
    let mut raw = RaftPeerClient::connect(format!("http://{leader_addr}")).await?;
    for encoding in [Encoding::Json, Encoding::BinaryV1] {
        let reply = raw
            .read_index(PeerMessage {
                from_node: follower.id,
                to_node: leader,
                payload: palisade_codec::encode(&(), encoding)?,
            })
            .await?
            .into_inner();
        ensure!(
            Encoding::of(&reply.payload)? == encoding,
            "a {encoding:?} request was answered in another encoding"
        );
        let index: Result<u64, String> = palisade_codec::decode(&reply.payload)?;
        ensure!(index.is_ok(), "{index:?}");
    }
    for replica in replicas {
        replica.stop().await?;
    }
    Ok(())
}
