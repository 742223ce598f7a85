//! The in-process cluster: N replicas in this process, each exactly what
//! `palisade gateway run` runs ([`run_with_hooks`]: redb log and snapshots
//! in a temporary directory, openraft, the executor, a tonic server on a
//! loopback port), each on **its own single-threaded tokio runtime on its
//! own thread**. That is what makes two faults faithful:
//!
//! - **Crash** ([`Cluster::crash`]): the replica's `block_on` is abandoned
//!   and its runtime dropped. Every task of the replica — Raft core, log
//!   and state-machine workers, executor, gRPC server and connections — is
//!   dropped at whatever await it was in; no shutdown code runs and Raft is
//!   never shut down. What was fsynced survives; [`Cluster::restart`] opens
//!   the same directory again. (Destructors do run, unlike after SIGKILL;
//!   none of them writes durable state. The process mode uses SIGKILL.)
//! - **Pause** ([`Cluster::pause`]): a task that blocks on a `std` channel
//!   is spawned on the replica's runtime. Its only thread is then stuck
//!   there: no task, timer or socket of the replica makes progress, while
//!   the kernel still accepts connections and buffers bytes for it —
//!   SIGSTOP, for one replica of a process. Blocking-pool work already
//!   running (an fsync) completes, as an in-flight syscall would.
//!   [`Cluster::resume`] ends it; timers that expired meanwhile fire at
//!   once, as after SIGCONT.
//!
//! Every replica keeps its port across restarts (it is its address in the
//! membership). The harness reaches a replica's Raft handle and state
//! through the [`RunningNode`] the replica hands over when it starts.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_driver::ComputeDriver;
use palisade_gateway::executor::ExecutorConfig;
use palisade_gateway::node::{NodeConfig, NodeHooks, RaftTiming, RunningNode, run_with_hooks};
use palisade_gateway::replica::ReplicaTimeouts;
use palisade_proto::v1;
use palisade_raft::hooks::{FaultPoints, LinkFaults};
use palisade_raft::{NodeId, Raft};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::ChaosError;

/// How long a replica may take to bind its port again after a crash (the
/// kernel may briefly hold it).
pub const REBIND_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long a leadership transfer may take before the harness moves on.
pub const TRANSFER_WAIT_MAX: Duration = Duration::from_secs(3);
/// How long a call into a replica's Raft may take (it may be paused).
pub const RAFT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How the in-process replicas are configured.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Number of replicas (node ids 1..=replicas).
    pub replicas: u64,
    /// Raft timing.
    pub timing: RaftTiming,
    /// Executor tuning.
    pub executor: ExecutorConfig,
    /// Request-path timeouts.
    pub timeouts: ReplicaTimeouts,
    /// PostgreSQL projection every replica runs (`--postgres-url`).
    pub postgres_url: Option<String>,
    /// Spare replica slots (node ids `replicas+1..`): not founders, not
    /// started; the `membership` nemesis joins them to the cluster and
    /// retires members into them.
    pub spares: u64,
    /// The storage faults every replica's log store runs behind (the
    /// `storage` nemesis); `None`: the plain log store.
    pub disk_faults: Option<Arc<crate::storage::DiskFaults>>,
    /// The deterministic simulation (`--sim`): the replicas run as tasks
    /// of the calling thread's runtime (a current-thread runtime with
    /// paused time and a [`LocalSet`](tokio::task::LocalSet)) and serve
    /// on this simulated network instead of loopback ports. Such a
    /// replica cannot be crashed or paused (see [`Cluster::crash`]).
    pub sim: Option<palisade_raft::simnet::SimNet>,
}

impl ClusterConfig {
    /// The chaos defaults: fast elections, short driver and request
    /// timeouts, so that faults resolve within a campaign's time.
    pub fn chaos(replicas: u64) -> Self {
        Self {
            replicas,
            timing: RaftTiming {
                heartbeat_ms: 50,
                election_timeout_min_ms: 300,
                election_timeout_max_ms: 600,
            },
            executor: ExecutorConfig {
                stop_grace: Duration::from_millis(100),
                observe_interval: Duration::from_millis(300),
                retry_backoff: Duration::from_millis(100),
                driver_call_timeout: Duration::from_millis(1_000),
                // Ticks often enough that the replicated clock moves (and
                // receipts expire) within a campaign's seconds.
                tick_interval: Duration::from_millis(200),
                ..ExecutorConfig::default()
            },
            timeouts: ReplicaTimeouts {
                propose_timeout: Duration::from_secs(3),
                operation_wait_max: Duration::from_secs(4),
            },
            postgres_url: None,
            spares: 0,
            disk_faults: None,
            sim: None,
        }
    }
}

/// One replica's view, for convergence checks.
#[derive(Debug, Clone)]
pub struct ReplicaView {
    /// Node id.
    pub node_id: NodeId,
    /// What the replica reports (`palisade cluster status`).
    pub info: v1::ClusterInfo,
}

struct Running {
    /// The replica's own thread (`None` in the simulation: a task).
    thread: Option<std::thread::JoinHandle<()>>,
    crash: oneshot::Sender<()>,
    runtime: tokio::runtime::Handle,
    node: Arc<Mutex<Option<RunningNode>>>,
    /// Set while paused: dropping it resumes the replica.
    paused: Option<std::sync::mpsc::Sender<()>>,
}

struct Slot {
    node_id: NodeId,
    addr: SocketAddr,
    data_dir: PathBuf,
    /// `std` mutex: held to start, stop or look at the replica, never
    /// across an await (a crash takes the `Running` out first).
    running: Mutex<Option<Running>>,
    /// Its wall clock, which the `clock` nemesis skews (kept across
    /// restarts, like a host's clock).
    clock: Arc<crate::clock::SkewedClock>,
    /// While the replica is down: a socket bound to its address but not
    /// listening. Connections to it are refused, as to a crashed process,
    /// but the kernel does not hand the port to an outgoing connection of
    /// this process as its local port meanwhile — which happened (chaos
    /// seed 42: a client connection made while node 1 was down took its
    /// port for the rest of the campaign, and node 1 could never listen
    /// again). The restarted replica listens on this very socket.
    reserved: Mutex<Option<tokio::net::TcpSocket>>,
}

/// A socket bound to `addr` (`SO_REUSEADDR`, so over the old listener's
/// connections in TIME_WAIT), not listening: see [`Slot::reserved`].
fn reserve(addr: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// The in-process cluster. See the module docs.
pub struct Cluster {
    _root: tempfile::TempDir,
    slots: Vec<Slot>,
    /// The slots that are members (founders at first; the `membership`
    /// nemesis changes it). `std` mutex, never held across an await.
    members: Mutex<BTreeSet<NodeId>>,
    /// Slots started empty to join (founders too, once retired): they start
    /// without the initial cluster, never founding one again.
    joiners: Mutex<BTreeSet<NodeId>>,
    initial_cluster: BTreeMap<NodeId, String>,
    config: ClusterConfig,
    driver: Arc<dyn ComputeDriver>,
    link_faults: Arc<dyn LinkFaults>,
    fault_points: Arc<dyn FaultPoints>,
    /// Replicas that ended without being crashed, and why (see
    /// [`Cluster::unexpected_stops`]). `std` mutex, never held across an
    /// await.
    stops: Arc<Mutex<Vec<(NodeId, String)>>>,
}

/// Records that replica `node_id` ended on its own, and why.
fn record_stop(stops: &Mutex<Vec<(NodeId, String)>>, node_id: NodeId, why: String) {
    stops
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push((node_id, why));
}

impl Cluster {
    /// Starts `config.replicas` founding replicas sharing `driver`.
    pub fn start(
        config: ClusterConfig,
        driver: Arc<dyn ComputeDriver>,
        link_faults: Arc<dyn LinkFaults>,
        fault_points: Arc<dyn FaultPoints>,
    ) -> Result<Cluster, ChaosError> {
        let mut root = tempfile::Builder::new();
        root.prefix("palisade-chaos-");
        let shm = std::path::Path::new("/dev/shm");
        let root = if config.sim.is_some() && shm.is_dir() {
            // The simulation's replicas wait for each fsync on the one
            // thread (storage work runs inline there): on tmpfs an fsync
            // costs nothing, and the files are still real redb files.
            root.tempdir_in(shm)?
        } else {
            root.tempdir()?
        };
        let mut slots = Vec::new();
        let mut initial_cluster = BTreeMap::new();
        for node_id in 1..=config.replicas + config.spares {
            let (addr, reserved): (SocketAddr, _) = if config.sim.is_some() {
                // Fixed, so that a seed's run does not depend on free ports.
                (([10, 0, 0, node_id.min(250) as u8], 7000).into(), None)
            } else {
                let socket = reserve(([127, 0, 0, 1], 0).into())?;
                (socket.local_addr()?, Some(socket))
            };
            if node_id <= config.replicas {
                initial_cluster.insert(node_id, addr.to_string());
            }
            slots.push(Slot {
                node_id,
                addr,
                data_dir: root.path().join(format!("replica-{node_id}")),
                running: Mutex::new(None),
                clock: Arc::new(match config.sim {
                    Some(_) => crate::clock::SkewedClock::simulated(Instant::now()),
                    None => crate::clock::SkewedClock::default(),
                }),
                reserved: Mutex::new(reserved),
            });
        }
        let cluster = Cluster {
            _root: root,
            slots,
            members: Mutex::new(initial_cluster.keys().copied().collect()),
            joiners: Mutex::default(),
            initial_cluster,
            config,
            driver,
            link_faults,
            fault_points,
            stops: Arc::default(),
        };
        for node_id in cluster.node_ids() {
            cluster.start_replica(node_id)?;
        }
        Ok(cluster)
    }

    /// The node ids of the members (the founders, unless the `membership`
    /// nemesis changed them).
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.lock_members().iter().copied().collect()
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, BTreeSet<NodeId>> {
        self.members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The slots that are not members (spares, and retired members).
    pub fn spares(&self) -> Vec<NodeId> {
        let members = self.lock_members();
        self.slots
            .iter()
            .map(|slot| slot.node_id)
            .filter(|node_id| !members.contains(node_id))
            .collect()
    }

    /// Starts spare `node_id` from an empty directory, without an initial
    /// cluster (it waits to be added, as `palisade gateway run` without
    /// `--initial-cluster` does). It becomes a member for the harness once
    /// [`Cluster::set_members`] says so.
    pub fn start_spare(&self, node_id: NodeId) -> Result<(), ChaosError> {
        let slot = self
            .slot(node_id)
            .ok_or_else(|| ChaosError::Config(format!("no replica {node_id}")))?;
        if self.is_running(node_id) {
            return Ok(());
        }
        self.joiners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(node_id);
        match std::fs::remove_dir_all(&slot.data_dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error.into()),
        }
        self.start_replica(node_id)
    }

    /// Crashes a replica that left the membership and deletes its files
    /// (a retired host; it may join again later, empty).
    pub async fn retire(&self, node_id: NodeId) {
        self.crash(node_id).await;
        self.lock_members().remove(&node_id);
        // Its files are gone: it may only ever join again, never found a
        // cluster with the initial membership (a wiped founder started
        // with `--initial-cluster` would).
        self.joiners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(node_id);
        if let Some(slot) = self.slot(node_id) {
            let _ = std::fs::remove_dir_all(&slot.data_dir);
        }
    }

    /// True if the slot was ever started to join (it is re-added next).
    pub fn has_joined(&self, node_id: NodeId) -> bool {
        self.joiners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(&node_id)
            || (self.initial_cluster.contains_key(&node_id) && !self.node_ids().contains(&node_id))
    }

    /// Sets the harness's member set (what the Raft membership holds).
    pub fn set_members(&self, members: BTreeSet<NodeId>) {
        *self.lock_members() = members;
    }

    /// `http://` URIs of every replica slot (spares too), by node id.
    pub fn endpoints(&self) -> Vec<(NodeId, String)> {
        self.slots
            .iter()
            .map(|slot| (slot.node_id, format!("http://{}", slot.addr)))
            .collect()
    }

    fn slot(&self, node_id: NodeId) -> Option<&Slot> {
        self.slots.iter().find(|slot| slot.node_id == node_id)
    }

    /// Starts (or restarts from its directory) one replica.
    pub fn start_replica(&self, node_id: NodeId) -> Result<(), ChaosError> {
        let slot = self
            .slot(node_id)
            .ok_or_else(|| ChaosError::Config(format!("no replica {node_id}")))?;
        let mut running = slot
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if running.is_some() {
            return Ok(());
        }
        let config = NodeConfig {
            node_id,
            listen: slot.addr,
            // In-process, plaintext: one listener serves peers too.
            peer_listen: None,
            advertise: slot.addr.to_string(),
            tls: None,
            data_dir: slot.data_dir.clone(),
            // Founders know the founding membership; a spare joins empty.
            initial_cluster: if self.initial_cluster.contains_key(&node_id)
                && !self
                    .joiners
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .contains(&node_id)
            {
                self.initial_cluster.clone()
            } else {
                BTreeMap::new()
            },
            timing: self.config.timing.clone(),
            log_policy: palisade_gateway::node::RaftLogPolicy::default(),
            limits: palisade_gateway::node::ServerLimits::default(),
            executor: self.config.executor.clone(),
            timeouts: self.config.timeouts.clone(),
            drain_timeout: Duration::from_secs(1),
            postgres_url: self.config.postgres_url.clone(),
            projection_events_kept_entries:
                palisade_projection::projector::EVENTS_KEPT_ENTRIES_DEFAULT,
            metrics_listen: None,
        };
        let node: Arc<Mutex<Option<RunningNode>>> = Arc::default();
        let handed_over = node.clone();
        let hooks = NodeHooks {
            link_faults: Some(self.link_faults.clone()),
            fault_points: Some(self.fault_points.clone()),
            clock: Some(slot.clock.clone()),
            storage_faults: self
                .config
                .disk_faults
                .clone()
                .map(|faults| -> Arc<dyn palisade_raft::hooks::StorageFaults> { faults }),
            on_started: Some(Arc::new(move |running: RunningNode| {
                *handed_over
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(running);
            })),
        };
        let driver = self.driver.clone();
        let addr = slot.addr;
        let (crash, crashed) = oneshot::channel::<()>();
        let stops = self.stops.clone();
        if let Some(net) = &self.config.sim {
            let incoming = net.listen(&addr.to_string());
            tokio::task::spawn_local(async move {
                tokio::select! {
                    biased;
                    _ = crashed => debug!(node = node_id, "replica stopped"),
                    result = palisade_gateway::node::run_simulated(config, driver, incoming, hooks, std::future::pending()) => {
                        let why = ended_why(result);
                        warn!(node = node_id, why, "replica stopped");
                        record_stop(&stops, node_id, why);
                    }
                }
            });
            *running = Some(Running {
                thread: None,
                crash,
                runtime: tokio::runtime::Handle::current(),
                node,
                paused: None,
            });
            return Ok(());
        }
        let reserved = slot
            .reserved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let (runtime_tx, runtime_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("replica-{node_id}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = runtime_tx.send(Err(error.to_string()));
                        return;
                    }
                };
                let _ = runtime_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async move {
                    let listener = match reserved {
                        Some(socket) => {
                            socket.listen(palisade_gateway::node::LISTEN_BACKLOG_CONNECTIONS)
                        }
                        // Not reserved (the port was taken in the moment
                        // between the crash and the reservation).
                        None => bind(addr).await,
                    };
                    let listener = match listener {
                        Ok(listener) => listener,
                        Err(error) => {
                            let why = format!(
                                "it cannot bind its port {addr} (waited up to {REBIND_WAIT_MAX:?}): {error}"
                            );
                            warn!(node = node_id, why, "replica stopped");
                            record_stop(&stops, node_id, why);
                            return;
                        }
                    };
                    tokio::select! {
                        result = run_with_hooks(config, driver, listener, hooks, std::future::pending()) => {
                            let why = ended_why(result);
                            warn!(node = node_id, why, "replica stopped");
                            record_stop(&stops, node_id, why);
                        }
                        _ = crashed => debug!(node = node_id, "replica crashed"),
                    }
                });
                // The crash: every task of the replica is dropped here.
                drop(runtime);
            })?;
        let runtime = runtime_rx
            .recv()
            .map_err(|_| ChaosError::ReplicaStart {
                node_id,
                message: "its thread ended before its runtime started".into(),
            })?
            .map_err(|message| ChaosError::ReplicaStart { node_id, message })?;
        *running = Some(Running {
            thread: Some(thread),
            crash,
            runtime,
            node,
            paused: None,
        });
        Ok(())
    }

    /// Crashes a replica (see the module docs) and waits until everything
    /// it ran is gone. A paused replica is resumed first (SIGKILL of a
    /// stopped process is the same crash).
    ///
    /// In the simulation this stops only the replica's main task (the
    /// tasks it spawned go with the simulation's runtime): it is how the
    /// campaign ends there, never a fault.
    pub async fn crash(&self, node_id: NodeId) {
        let Some(slot) = self.slot(node_id) else {
            return;
        };
        let running = slot
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(running) = running else {
            return;
        };
        let _ = running.crash.send(());
        drop(running.paused);
        running
            .node
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(thread) = running.thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            // Every socket of the replica is closed now: hold its port.
            let reserved = reserve(slot.addr);
            if let Err(error) = &reserved {
                warn!(node = node_id, %error, "cannot hold the port of a crashed replica");
            }
            *slot
                .reserved
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = reserved.ok();
        }
    }

    /// True when the replicas run in the deterministic simulation, where
    /// they cannot be crashed or paused: they share the simulation's one
    /// runtime, so the tasks one replica spawned cannot be dropped (or
    /// frozen) apart from the others'. The nemesis injects neither there.
    pub fn is_simulated(&self) -> bool {
        self.config.sim.is_some()
    }

    /// A replica's address (`host:port`, as the membership holds it).
    pub fn addr(&self, node_id: NodeId) -> Option<String> {
        self.slot(node_id).map(|slot| slot.addr.to_string())
    }

    /// A replica's data directory (its Raft log, snapshots and receipts).
    pub fn data_dir(&self, node_id: NodeId) -> Option<PathBuf> {
        self.slot(node_id).map(|slot| slot.data_dir.clone())
    }

    /// The wall clock of a replica (see [`crate::clock::SkewedClock`]).
    pub fn clock(&self, node_id: NodeId) -> Option<Arc<crate::clock::SkewedClock>> {
        self.slot(node_id).map(|slot| slot.clock.clone())
    }

    /// Restarts a crashed replica from its directory.
    pub fn restart(&self, node_id: NodeId) -> Result<(), ChaosError> {
        self.start_replica(node_id)
    }

    /// True while the replica runs (paused or not).
    pub fn is_running(&self, node_id: NodeId) -> bool {
        self.slot(node_id).is_some_and(|slot| {
            slot.running
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .is_some()
        })
    }

    /// Freezes a running replica (see the module docs).
    pub fn pause(&self, node_id: NodeId) {
        if self.is_simulated() {
            // Blocking the only thread would freeze the whole simulation.
            warn!(node = node_id, "a simulated replica cannot be paused");
            return;
        }
        let Some(slot) = self.slot(node_id) else {
            return;
        };
        let mut running = slot
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(running) = running.as_mut() else {
            return;
        };
        if running.paused.is_some() {
            return;
        }
        let (resume, resumed) = std::sync::mpsc::channel::<()>();
        running.runtime.spawn(async move {
            // Blocks the replica's only thread until resumed: deliberate.
            let _ = resumed.recv();
        });
        running.paused = Some(resume);
    }

    /// Resumes a paused replica.
    pub fn resume(&self, node_id: NodeId) {
        if let Some(slot) = self.slot(node_id)
            && let Some(running) = slot
                .running
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .as_mut()
        {
            running.paused = None;
        }
    }

    /// True if the replica stopped on its own (fail-stop: its thread
    /// ended without a crash). Never in the simulation (no `storage`
    /// nemesis there, see [`NemesisKind::SIMULATION`](crate::nemesis::NemesisKind::SIMULATION)).
    pub fn has_stopped(&self, node_id: NodeId) -> bool {
        self.slot(node_id).is_some_and(|slot| {
            slot.running
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .as_ref()
                .is_some_and(|running| {
                    running
                        .thread
                        .as_ref()
                        .is_some_and(std::thread::JoinHandle::is_finished)
                })
        })
    }

    /// Replicas that ended on their own (an error at start, a fail-stop,
    /// a port that stayed taken), with why, in the order they ended; less
    /// those [`Cluster::expect_stop`] took.
    pub fn unexpected_stops(&self) -> Vec<(NodeId, String)> {
        self.stops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Takes the stops of `node_id` recorded so far: they were expected
    /// (the `storage` nemesis made the replica fail-stop). Answers them.
    pub fn expect_stop(&self, node_id: NodeId) -> Vec<String> {
        let mut stops = self
            .stops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (taken, kept) = std::mem::take(&mut *stops)
            .into_iter()
            .partition(|(node, _)| *node == node_id);
        *stops = kept;
        taken.into_iter().map(|(_, why)| why).collect()
    }

    /// Why `node_id` is not serving, when it ended on its own (the last
    /// reason recorded for it).
    pub fn why_stopped(&self, node_id: NodeId) -> Option<String> {
        self.stops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .rev()
            .find(|(node, _)| *node == node_id)
            .map(|(_, why)| why.clone())
    }

    /// The storage faults the replicas run behind, if any.
    pub fn disk_faults(&self) -> Option<Arc<crate::storage::DiskFaults>> {
        self.config.disk_faults.clone()
    }

    /// True while the replica is paused.
    pub fn is_paused(&self, node_id: NodeId) -> bool {
        self.slot(node_id).is_some_and(|slot| {
            slot.running
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .as_ref()
                .is_some_and(|running| running.paused.is_some())
        })
    }

    /// The handles of a running replica (`None` before it started serving,
    /// or after a crash).
    pub fn node(&self, node_id: NodeId) -> Option<RunningNode> {
        let slot = self.slot(node_id)?;
        let running = slot
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let running = running.as_ref()?;
        let node = running
            .node
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        node.as_ref().map(|node| RunningNode {
            replica: node.replica.clone(),
            executor: node.executor.clone(),
        })
    }

    /// The Raft handle of a running replica.
    pub fn raft(&self, node_id: NodeId) -> Option<Raft> {
        self.node(node_id).map(|node| node.replica.raft)
    }

    /// The leader: the running, unpaused replica that believes it leads in
    /// the highest term.
    pub fn leader(&self) -> Option<NodeId> {
        self.node_ids()
            .into_iter()
            .filter(|node_id| !self.is_paused(*node_id))
            .filter_map(|node_id| {
                let raft = self.raft(node_id)?;
                let metrics = raft.metrics().borrow_watched().clone();
                (metrics.current_leader == Some(node_id)).then_some((metrics.current_term, node_id))
            })
            .max()
            .map(|(_, node_id)| node_id)
    }

    /// Waits until a leader is known and every running replica agrees.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, ChaosError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                let agreed = self.node_ids().into_iter().all(|node_id| {
                    self.is_paused(node_id)
                        || self.raft(node_id).is_none_or(|raft| {
                            raft.metrics().borrow_watched().current_leader == Some(leader)
                        })
                });
                if agreed {
                    return Ok(leader);
                }
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::NoLeader(timeout));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a leader (as [`Cluster::wait_for_leader`]) and connects a
    /// gRPC client to its endpoint (loopback clusters; not the simulation).
    pub async fn connect_to_leader(
        &self,
        timeout: Duration,
    ) -> Result<
        (
            NodeId,
            v1::palisade_client::PalisadeClient<tonic::transport::Channel>,
        ),
        ChaosError,
    > {
        let leader = self.wait_for_leader(timeout).await?;
        let (_, uri) = self
            .endpoints()
            .into_iter()
            .find(|(node, _)| *node == leader)
            .ok_or_else(|| ChaosError::Config(format!("leader {leader} has no endpoint")))?;
        let client = v1::palisade_client::PalisadeClient::connect(uri.clone())
            .await
            .map_err(|error| std::io::Error::other(format!("connecting to {uri}: {error}")))?;
        Ok((leader, client))
    }

    /// Asks `from` (if it leads) to hand leadership to `to`, and waits
    /// (bounded) until `from` no longer leads. True if it moved.
    pub async fn transfer_leader(&self, from: NodeId, to: NodeId) -> bool {
        let Some(raft) = self.raft(from) else {
            return false;
        };
        let triggered =
            tokio::time::timeout(RAFT_CALL_TIMEOUT, raft.trigger().transfer_leader(to)).await;
        if !matches!(triggered, Ok(Ok(()))) {
            return false;
        }
        let moved = raft
            .wait(Some(TRANSFER_WAIT_MAX))
            .metrics(
                |metrics| metrics.current_leader != Some(from),
                "leadership moved",
            )
            .await;
        moved.is_ok()
    }

    /// Waits (bounded) until `node` leads and has applied an entry of its
    /// own term: its leadership is established and its writes go through.
    pub async fn wait_established(&self, node: NodeId) -> bool {
        let Some(raft) = self.raft(node) else {
            return false;
        };
        raft.wait(Some(TRANSFER_WAIT_MAX))
            .metrics(
                |metrics| {
                    metrics.current_leader == Some(node)
                        && metrics
                            .last_applied
                            .is_some_and(|applied| applied.leader_id.term == metrics.current_term)
                },
                "leadership established",
            )
            .await
            .is_ok()
    }

    /// Makes the leader build a snapshot and purge its log up to it, so
    /// that a replica that was away must install the snapshot. Returns the
    /// leader's purged index afterwards (`None`: nothing was purged).
    pub async fn snapshot_and_purge(&self, leader: NodeId) -> Option<u64> {
        let raft = self.raft(leader)?;
        let before = raft.metrics().borrow_watched().snapshot;
        if !matches!(
            tokio::time::timeout(RAFT_CALL_TIMEOUT, raft.trigger().snapshot()).await,
            Ok(Ok(()))
        ) {
            return None;
        }
        let built = raft
            .wait(Some(RAFT_CALL_TIMEOUT))
            .metrics(|metrics| metrics.snapshot > before, "snapshot built")
            .await
            .ok()?;
        let snapshot = built.snapshot?;
        let _ =
            tokio::time::timeout(RAFT_CALL_TIMEOUT, raft.trigger().purge_log(snapshot.index)).await;
        let purged = raft
            .wait(Some(RAFT_CALL_TIMEOUT))
            .metrics(
                |metrics| {
                    metrics
                        .purged
                        .is_some_and(|purged| purged.index >= snapshot.index)
                },
                "log purged",
            )
            .await
            .ok()?;
        purged.purged.map(|purged| purged.index)
    }

    /// What every running replica reports.
    pub async fn views(&self) -> Vec<ReplicaView> {
        let mut views = Vec::new();
        for node_id in self.node_ids() {
            if let Some(node) = self.node(node_id) {
                views.push(ReplicaView {
                    node_id,
                    info: palisade_gateway::admin::cluster_info(&node.replica, &node.executor)
                        .await,
                });
            }
        }
        views
    }

    /// Crashes every replica (the temporary directory goes when the
    /// cluster is dropped).
    pub async fn shutdown(&self) {
        let every: Vec<NodeId> = self.slots.iter().map(|slot| slot.node_id).collect();
        for node_id in every {
            self.crash(node_id).await;
        }
    }
}

/// Why a replica's run ended (it was not crashed).
fn ended_why<E: std::fmt::Display>(result: Result<(), E>) -> String {
    match result {
        Ok(()) => "its run returned without a crash or an error".to_string(),
        Err(error) => format!("{error:#}"),
    }
}

/// Binds `addr`, retrying while the kernel still holds it after a crash.
async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let deadline = Instant::now() + REBIND_WAIT_MAX;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error),
        }
    }
}
