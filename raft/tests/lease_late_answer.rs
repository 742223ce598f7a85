//! A late answer renews a leader's lease only up to the request it answers.
//!
//! A leader extends its lease by the *sending time* of each request a
//! follower acknowledged: the follower cannot have followed anyone else
//! between then and its answer. openraft's replication stream answers its
//! requests in order, one answer per request, but the queue that matched
//! answers with requests credited an answer to every queued request whose
//! log range it covered, newest first. When an answer came late, after
//! newer requests with the same range (a heartbeat, a commit-only request)
//! were sent, the follower was credited with acknowledging a request it
//! had not even seen. A leader paused (SIGSTOP) through an election and
//! resumed sends a heartbeat, then reads the answer to what it sent before
//! the pause, and so renewed its lease after its followers had elected
//! another leader (`vendor/README.md`, the second openraft patch).
//!
//! Here the late answer is staged, deterministically, by relays in front of
//! the two followers (each member's address in the membership is its
//! relay's): the `late` follower's relay passes the first request carrying
//! an entry, holds its answer, and swallows every request after it; the
//! `prompt` follower's relay holds its answer to the same request until the
//! late answer is held, so the leader commits the entry, and builds its
//! next request to the late follower, only after that moment. The late
//! answer is let through when such a request (it carries the new commit)
//! reaches the relay. The leader must then credit the late follower with
//! at most the moment its answer left the follower, never later.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::Stream;
use openraft::alias::InstantOf;
use openraft::async_runtime::WatchReceiver as _;
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Config, Instant as _};
use palisade_proto::peer::raft_peer_client::RaftPeerClient;
use palisade_proto::peer::raft_peer_server::{RaftPeer, RaftPeerServer};
use palisade_proto::peer::{PeerMessage, SnapshotChunk};
use palisade_raft::{NodeId, TypeConfig};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};

mod support;
use support::{WAIT, agreed_leader, bind, create_workspace, replica, start_replica};

/// The stream's answer deadline is the heartbeat interval: long enough that
/// the staged answer (held for a few milliseconds) never times out on a
/// busy machine, and no election starts meanwhile.
fn config() -> Result<Arc<Config>> {
    let config = Config {
        cluster_name: "lease-late-answer-test".to_owned(),
        heartbeat_interval: 1_000,
        election_timeout_min: 3_000,
        election_timeout_max: 6_000,
        enable_pre_vote: Some(true),
        ..Config::default()
    };
    Ok(Arc::new(config.validate()?))
}

/// What a relay does with the replication stream it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Passes everything.
    Pass,
    /// Holds its answer to the staged request until the late answer is held.
    Prompt,
    /// Passes the staged request and holds its answer; swallows every later
    /// request; lets the answer go when a request carrying the new commit
    /// arrives.
    Late,
}

/// The plot both follower relays share.
#[derive(Debug, Default)]
struct Plot {
    state: Mutex<PlotState>,
    /// When the late follower's answer to the staged request reached its
    /// relay: the latest moment the follower can be credited with.
    late_answer_at: watch::Sender<Option<InstantOf<TypeConfig>>>,
}

#[derive(Debug, Default)]
struct PlotState {
    roles: BTreeMap<NodeId, Role>,
    /// The index of the staged request's entry, once the late relay passed it.
    staged_index: Option<u64>,
    /// The same, as the prompt relay saw it (either may see it first).
    prompt_staged_index: Option<u64>,
    /// The held late answer, and the stream it is owed to.
    held: Option<(PeerMessage, mpsc::Sender<Result<PeerMessage, Status>>)>,
    /// How many requests the late relay swallowed.
    swallowed: u64,
}

impl Plot {
    fn lock(&self) -> std::sync::MutexGuard<'_, PlotState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn role(&self, node: NodeId) -> Role {
        self.lock().roles.get(&node).copied().unwrap_or(Role::Pass)
    }
}

/// A relay in front of one replica's peer server.
struct Relay {
    node: NodeId,
    target: Channel,
    plot: Arc<Plot>,
}

type Replies = Pin<Box<dyn Stream<Item = Result<PeerMessage, Status>> + Send>>;

/// The index of the last entry a request carries, if it carries any, and
/// its commit index.
fn request_indexes(message: &PeerMessage) -> (Option<u64>, Option<u64>) {
    match palisade_codec::decode::<AppendEntriesRequest<TypeConfig>>(&message.payload) {
        Ok(request) => (
            request.entries.last().map(|entry| entry.log_id.index),
            request.leader_commit.map(|commit| commit.index),
        ),
        Err(error) => panic!("the relay could not decode an AppendEntries request: {error}"),
    }
}

impl Relay {
    fn client(&self) -> RaftPeerClient<Channel> {
        RaftPeerClient::new(self.target.clone())
    }

    /// What the relay does with one request from the leader: `Some(true)`
    /// forwards the staged request, `Some(false)` forwards another, `None`
    /// swallows it.
    fn on_request(&self, message: &PeerMessage) -> Option<bool> {
        let role = self.plot.role(self.node);
        if role == Role::Pass {
            return Some(false);
        }
        let (last_entry, commit) = request_indexes(message);
        let mut state = self.plot.lock();
        let staged = match role {
            Role::Prompt => state.prompt_staged_index,
            _ => state.staged_index,
        };
        match (role, staged) {
            (Role::Late, None) if last_entry.is_some() => {
                state.staged_index = last_entry;
                Some(true)
            }
            (Role::Late, Some(staged)) => {
                state.swallowed += 1;
                if commit >= Some(staged)
                    && let Some((answer, owed_to)) = state.held.take()
                {
                    // The leader built this request after it committed the
                    // staged entry, which it could only do after the late
                    // answer was held: now the answer may arrive late.
                    let _ = owed_to.try_send(Ok(answer));
                }
                None
            }
            (Role::Prompt, None) if last_entry.is_some() => {
                state.prompt_staged_index = last_entry;
                Some(true)
            }
            _ => Some(false),
        }
    }
}

#[tonic::async_trait]
impl RaftPeer for Relay {
    type StreamAppendStream = Replies;

    async fn stream_append(
        &self,
        request: Request<Streaming<PeerMessage>>,
    ) -> Result<Response<Replies>, Status> {
        let mut incoming = request.into_inner();
        let (to_target, target_requests) = mpsc::channel::<PeerMessage>(64);
        // Which forwarded requests (in order) are the staged one: answers
        // come in the same order.
        let (staged_tx, mut staged_rx) = mpsc::unbounded_channel::<bool>();
        let relay = Relay {
            node: self.node,
            target: self.target.clone(),
            plot: Arc::clone(&self.plot),
        };
        tokio::spawn(async move {
            while let Ok(Some(message)) = incoming.message().await {
                if let Some(staged) = relay.on_request(&message)
                    && (staged_tx.send(staged).is_err() || to_target.send(message).await.is_err())
                {
                    return;
                }
            }
        });
        let mut answers = self
            .client()
            .stream_append(ReceiverStream::new(target_requests))
            .await?
            .into_inner();
        let (to_leader, replies) = mpsc::channel::<Result<PeerMessage, Status>>(64);
        let node = self.node;
        let plot = Arc::clone(&self.plot);
        tokio::spawn(async move {
            loop {
                let answer = match answers.message().await {
                    Ok(Some(answer)) => answer,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = to_leader.send(Err(status)).await;
                        return;
                    }
                };
                let staged = staged_rx.recv().await.unwrap_or(false);
                match (plot.role(node), staged) {
                    (Role::Late, true) => {
                        plot.lock().held = Some((answer, to_leader.clone()));
                        plot.late_answer_at
                            .send_replace(Some(InstantOf::<TypeConfig>::now()));
                        continue;
                    }
                    (Role::Prompt, true) => {
                        let mut held = plot.late_answer_at.subscribe();
                        if held.wait_for(Option::is_some).await.is_err() {
                            return;
                        }
                    }
                    _ => {}
                }
                if to_leader.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(replies))))
    }

    async fn append_entries(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client().append_entries(request.into_inner()).await
    }
    async fn vote(&self, request: Request<PeerMessage>) -> Result<Response<PeerMessage>, Status> {
        self.client().vote(request.into_inner()).await
    }
    async fn pre_vote(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client().pre_vote(request.into_inner()).await
    }
    async fn install_snapshot(
        &self,
        _: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<PeerMessage>, Status> {
        Err(Status::unimplemented("the relay carries no snapshot"))
    }
    async fn transfer_leader(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client().transfer_leader(request.into_inner()).await
    }
    async fn forward_write(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client().forward_write(request.into_inner()).await
    }
    async fn read_index(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client().read_index(request.into_inner()).await
    }
    async fn supported_feature_level(
        &self,
        request: Request<PeerMessage>,
    ) -> Result<Response<PeerMessage>, Status> {
        self.client()
            .supported_feature_level(request.into_inner())
            .await
    }
}

/// Starts a relay for `node` in front of `target`; returns its address.
async fn start_relay(node: NodeId, target: &str, plot: &Arc<Plot>) -> Result<String> {
    let (listener, addr): (TcpListener, String) = bind().await?;
    let relay = Relay {
        node,
        target: Endpoint::from_shared(format!("http://{target}"))?.connect_lazy(),
        plot: Arc::clone(plot),
    };
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(RaftPeerServer::new(relay))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
        if let Err(error) = served {
            panic!("relay of node {node} failed: {error}");
        }
    });
    Ok(addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_is_credited_with_its_own_request_not_a_newer_one() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let plot = Arc::new(Plot::default());
    let mut replicas = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        let (listener, addr) = bind().await?;
        replicas.push(start_replica(id, listener, dir.path(), config()?).await?);
        members.insert(id, BasicNode::new(start_relay(id, &addr, &plot).await?));
    }
    replicas[0].raft.initialize(members).await?;
    let leader = agreed_leader(&replicas).await?;
    let followers: Vec<NodeId> = (1..=3).filter(|id| *id != leader).collect();
    let (prompt, late) = (followers[0], followers[1]);
    {
        let mut state = plot.lock();
        state.roles.insert(prompt, Role::Prompt);
        state.roles.insert(late, Role::Late);
    }

    let leader_raft = replica(&replicas, leader).raft.clone();
    let written = tokio::time::timeout(
        WAIT,
        leader_raft.client_write(create_workspace("staged").into()),
    )
    .await
    .context("the staged write did not commit")??;
    let staged_index = written.log_id.index;
    ensure!(
        plot.lock().staged_index == Some(staged_index),
        "the late relay staged index {:?}, the write is {staged_index}",
        plot.lock().staged_index
    );

    // The late answer arrives when the leader sends the late follower a
    // request carrying the commit; wait until the leader has taken it in.
    let mut metrics = leader_raft.metrics();
    let deadline = tokio::time::Instant::now() + WAIT;
    let credited = loop {
        let (matched, credited) = {
            let current = metrics.borrow_watched();
            let matched = current
                .replication
                .as_ref()
                .and_then(|replication| replication.get(&late).cloned().flatten())
                .map(|log_id| log_id.index);
            let credited = current
                .heartbeat
                .as_ref()
                .and_then(|heartbeat| heartbeat.get(&late).cloned().flatten())
                .map(|at| *at);
            (matched, credited)
        };
        if matched >= Some(staged_index) {
            break credited;
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the leader never took in the late answer (matched {matched:?}, {} requests swallowed)",
                plot.lock().swallowed
            );
        }
        tokio::time::timeout(Duration::from_millis(100), metrics.changed())
            .await
            .ok();
    };
    let answered_at = (*plot.late_answer_at.borrow()).context("no late answer was held")?;
    let credited = credited.context("the late follower was never credited")?;
    ensure!(
        credited <= answered_at,
        "the leader credited node {late} with acknowledging it {:?} after its answer \
         left it: the answer to an old request renewed the lease with a newer request's \
         sending time ({} requests were queued behind it)",
        credited - answered_at,
        plot.lock().swallowed
    );

    for replica in replicas {
        replica.stop().await?;
    }
    Ok(())
}
