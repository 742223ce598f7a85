//! Replicas for the transport tests: real openraft nodes (the redb log
//! store, the lifecycle state machine) each serving the peer protocol on a
//! free 127.0.0.1 port. Each test binary uses some of these.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use openraft::async_runtime::WatchReceiver as _;
use openraft::{BasicNode, Config};
use palisade_lifecycle::Command;
use palisade_raft::network::PeerClients;
use palisade_raft::peer_service::PeerService;
use palisade_raft::{LifecycleStateMachine, NodeId, Raft, StateHandle, TypeConfig};
use palisade_storage::LogStore;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

/// Generous: two cores, several test binaries and fsync-ing logs.
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Replica {
    pub id: NodeId,
    /// Where its peer server listens.
    pub addr: String,
    pub raft: Raft,
    pub state: StateHandle,
    pub clients: PeerClients,
    stop_server: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl Replica {
    pub fn node(&self) -> BasicNode {
        BasicNode::new(self.addr.clone())
    }

    pub async fn stop(mut self) -> Result<()> {
        self.raft.shutdown().await.context("raft shutdown")?;
        if let Some(stop) = self.stop_server.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.context("server task")?;
        }
        Ok(())
    }
}

pub async fn bind() -> Result<(TcpListener, String)> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?.to_string();
    Ok((listener, addr))
}

pub async fn start_replica(
    id: NodeId,
    listener: TcpListener,
    dir: &Path,
    config: Arc<Config>,
) -> Result<Replica> {
    let addr = listener.local_addr()?.to_string();
    let log_dir = dir.join(format!("node-{id}/log"));
    let snapshot_dir = dir.join(format!("node-{id}/snapshots"));
    let (log_store, state_machine) = tokio::task::spawn_blocking(move || -> Result<_> {
        let log_store = LogStore::<TypeConfig>::open(&log_dir)?;
        let state_machine = LifecycleStateMachine::open(&snapshot_dir)?;
        Ok((log_store, state_machine))
    })
    .await??;
    let state = state_machine.handle();
    let clients = PeerClients::new(id).with_cluster_level(state.cluster_level());
    let raft = Raft::new(
        id,
        config,
        clients.network_factory(),
        log_store,
        state_machine,
    )
    .await?;

    let (stop_server, stopped) = oneshot::channel::<()>();
    let service = PeerService::new(raft.clone()).into_server();
    let server = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await;
        if let Err(error) = served {
            panic!("peer server of node {id} failed: {error}");
        }
    });
    Ok(Replica {
        id,
        addr,
        raft,
        state,
        clients,
        stop_server: Some(stop_server),
        server: Some(server),
    })
}

/// Starts replicas 1..=count and initializes them as one cluster.
pub async fn start_cluster(count: u64, dir: &Path, config: Arc<Config>) -> Result<Vec<Replica>> {
    let mut replicas = Vec::new();
    for id in 1..=count {
        let (listener, _) = bind().await?;
        replicas.push(start_replica(id, listener, dir, Arc::clone(&config)).await?);
    }
    let members: BTreeMap<NodeId, BasicNode> = replicas
        .iter()
        .map(|replica| (replica.id, replica.node()))
        .collect();
    replicas[0].raft.initialize(members).await?;
    Ok(replicas)
}

/// Waits until every replica sees the same leader, and that leader can take
/// writes; returns it.
pub async fn agreed_leader(replicas: &[Replica]) -> Result<NodeId> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leaders: Vec<Option<NodeId>> = replicas
            .iter()
            .map(|replica| replica.raft.metrics().borrow_watched().current_leader)
            .collect();
        let agreed = match leaders.first() {
            Some(Some(leader)) if leaders.iter().all(|seen| *seen == Some(*leader)) => {
                Some(*leader)
            }
            _ => None,
        };
        if let Some(leader) = agreed {
            let metrics = replica(replicas, leader).raft.metrics();
            let metrics = metrics.borrow_watched();
            // A new leader takes writes only once a quorum acknowledged it
            // (its lease); before, it answers ForwardToLeader(LeaseExpired).
            if metrics.state.is_leader() && metrics.last_quorum_acked.is_some() {
                return Ok(leader);
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no agreed leader within {WAIT:?}: {leaders:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn replica(replicas: &[Replica], id: NodeId) -> &Replica {
    replicas
        .iter()
        .find(|replica| replica.id == id)
        .expect("the id is one of the replicas")
}

pub fn create_workspace(name: &str) -> Command {
    Command::CreateWorkspace {
        id: format!("00000000-0000-4000-8000-{:012}", name.len()),
        name: name.to_owned(),
        time_ms: 1_700_000_000_000,
    }
}

pub async fn wait_applied(state: &StateHandle, index: u64) -> Result<()> {
    tokio::time::timeout(WAIT, state.wait_applied(index))
        .await
        .with_context(|| format!("index {index} not applied within {WAIT:?}"))
}
