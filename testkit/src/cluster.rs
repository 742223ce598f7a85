//! A local cluster: N founding replicas of one `palisade` binary on
//! loopback, sharing one driver directory (one host), each with its own
//! data directory `ROOT/node-N/` (log file `ROOT/node-N/gateway.log`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::Instant;

use crate::probe::cluster_info;
use crate::processes::kill_executions;
use crate::replica::{ReplicaProcess, TlsFiles};
use crate::{TestkitError, ports};

/// With TLS and [`Ports::Base`], replica N's peer port is
/// `BASE + PEER_PORT_OFFSET + N - 1` (`palisade up`: 7101, 7102, ...).
pub const PEER_PORT_OFFSET: u16 = 100;

/// Runs `palisade cluster init-pki --dir DIR --nodes NODES` (keeps what
/// exists, adds what is missing).
fn init_pki(palisade: &Path, dir: &Path, nodes: u64) -> Result<(), TestkitError> {
    let output = std::process::Command::new(palisade)
        .args(["cluster", "init-pki", "--dir"])
        .arg(dir)
        .args(["--nodes", &nodes.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| {
            TestkitError::Pki(format!("cannot run {}: {error}", palisade.display()))
        })?;
    if !output.status.success() {
        return Err(TestkitError::Pki(
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(())
}

/// How often the waits below ask the replicas again.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where the replicas listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Free loopback ports, found at start.
    Free,
    /// Replica N listens on `127.0.0.1:(BASE + N - 1)`.
    Base(u16),
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The `palisade` binary.
    pub palisade: PathBuf,
    /// Founding replicas (node ids 1..=replicas).
    pub replicas: u64,
    /// Directory for everything; `None`: a temporary directory, removed
    /// when the cluster is dropped.
    pub root: Option<PathBuf>,
    /// Where the replicas listen.
    pub ports: Ports,
    /// More `gateway run` flags for every replica.
    pub gateway_args: Vec<String>,
    /// Environment variables for every replica.
    pub env: Vec<(String, String)>,
    /// Environment variables every replica must not inherit.
    pub env_remove: Vec<String>,
    /// `PALISADE_LOG` of every replica.
    pub log_filter: String,
    /// On drop, also SIGKILL every shim and command of the executions under
    /// the driver directory (tests: nothing may outlive them). `palisade
    /// up` leaves sandboxes running, as the design wants.
    pub kill_executions_on_drop: bool,
    /// Each replica in a process group of its own
    /// ([`ReplicaProcess::own_process_group`]).
    pub own_process_groups: bool,
    /// TLS: `palisade cluster init-pki` writes the CA, node certificates,
    /// an admin credential and `config.json` into the root; each replica
    /// gets its own peer port (mutual TLS) and serves its public port over
    /// TLS. Off (the default for tests): every replica runs `--insecure`
    /// on one port.
    pub tls: bool,
}

impl ClusterSpec {
    /// `replicas` replicas of `palisade` in a temporary directory on free
    /// ports, killing everything they started when dropped.
    pub fn new(palisade: impl Into<PathBuf>, replicas: u64) -> Self {
        ClusterSpec {
            palisade: palisade.into(),
            replicas,
            root: None,
            ports: Ports::Free,
            gateway_args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            log_filter: "info,openraft=warn".to_string(),
            kill_executions_on_drop: true,
            own_process_groups: false,
            tls: false,
        }
    }

    /// The same spec with TLS on ([`ClusterSpec::tls`]).
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// The same spec with more `gateway run` flags.
    pub fn gateway_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.gateway_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The same spec with another `PALISADE_LOG`.
    pub fn log_filter(mut self, filter: &str) -> Self {
        self.log_filter = filter.to_string();
        self
    }
}

/// The cluster's directory: temporary (removed on drop) or the caller's.
#[derive(Debug)]
enum Root {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

/// Replica processes sharing one directory and one driver directory. On
/// drop every replica still running is SIGKILLed (after SIGCONT), and with
/// [`ClusterSpec::kill_executions_on_drop`] every execution under the
/// driver directory too.
#[derive(Debug)]
pub struct LocalCluster {
    /// The replicas, founding ones first (node ids 1..=N), then joiners.
    pub replicas: Vec<ReplicaProcess>,
    /// The process driver's directory, shared by every replica.
    pub driver_dir: PathBuf,
    root: Root,
    spec: ClusterSpec,
    initial_cluster: String,
}

impl LocalCluster {
    /// Prepares the replicas of `spec` without starting them, so a caller
    /// can adjust one (an `--advertise` address, its own flags) first; then
    /// [`LocalCluster::start_all`].
    pub fn prepare(spec: ClusterSpec) -> Result<LocalCluster, TestkitError> {
        let root = match &spec.root {
            Some(path) => {
                std::fs::create_dir_all(path).map_err(|source| TestkitError::Io {
                    action: "create",
                    path: path.clone(),
                    source,
                })?;
                Root::Kept(std::path::absolute(path).unwrap_or_else(|_| path.clone()))
            }
            None => Root::Temporary(
                tempfile::Builder::new()
                    .prefix("palisade-cluster-")
                    .tempdir()
                    .map_err(|source| TestkitError::Io {
                        action: "create a temporary directory in",
                        path: std::env::temp_dir(),
                        source,
                    })?,
            ),
        };
        let root_path = match &root {
            Root::Temporary(dir) => dir.path().to_path_buf(),
            Root::Kept(path) => path.clone(),
        };
        let count = u16::try_from(spec.replicas)
            .map_err(|_| TestkitError::Ports(format!("{} replicas", spec.replicas)))?;
        // With TLS, every replica also has a peer port: the next `count`
        // ports after the public ones (free ports), or BASE + 100 + N - 1.
        let tls = spec.tls;
        let base = match spec.ports {
            Ports::Free if tls => ports::free_ports(count * 2)?,
            Ports::Free => ports::free_ports(count)?,
            Ports::Base(base) if base.checked_add(count.saturating_sub(1)).is_some() => base,
            Ports::Base(base) => {
                return Err(TestkitError::Ports(format!(
                    "base port {base} leaves no room for {count} replicas"
                )));
            }
        };
        let peer_base = match spec.ports {
            Ports::Free => base + count,
            Ports::Base(base) => base.checked_add(PEER_PORT_OFFSET).ok_or_else(|| {
                TestkitError::Ports(format!("base port {base} leaves no room for peer ports"))
            })?,
        };
        let addresses: Vec<(u64, String)> = (1..=count)
            .map(|index| (u64::from(index), format!("127.0.0.1:{}", base + index - 1)))
            .collect();
        let peer_address =
            |id: u64| -> String { format!("127.0.0.1:{}", u64::from(peer_base) + id - 1) };
        let initial_cluster = addresses
            .iter()
            .map(|(id, address)| {
                if tls {
                    format!("{id}={}", peer_address(*id))
                } else {
                    format!("{id}={address}")
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        if tls {
            init_pki(&spec.palisade, &root_path, spec.replicas)?;
        }
        let driver_dir = root_path.join("executions");
        let mut cluster = LocalCluster {
            replicas: Vec::new(),
            driver_dir,
            root,
            spec,
            initial_cluster,
        };
        for (node_id, address) in addresses {
            let mut replica = cluster.new_replica(node_id, &address, true);
            if tls {
                replica.peer_listen = Some(peer_address(node_id));
            }
            cluster.replicas.push(replica);
        }
        Ok(cluster)
    }

    /// Prepares and starts every replica of `spec`.
    pub fn start(spec: ClusterSpec) -> Result<LocalCluster, TestkitError> {
        let mut cluster = Self::prepare(spec)?;
        cluster.start_all()?;
        Ok(cluster)
    }

    fn new_replica(&self, node_id: u64, listen: &str, founding: bool) -> ReplicaProcess {
        let mut replica = ReplicaProcess::new(
            &self.spec.palisade,
            node_id,
            listen,
            self.root().join(format!("node-{node_id}")),
            self.driver_dir.clone(),
            if founding { &self.initial_cluster } else { "" },
        );
        replica.extra_args = self.spec.gateway_args.clone();
        replica.env = self.spec.env.clone();
        replica.env_remove = self.spec.env_remove.clone();
        replica.log_filter = self.spec.log_filter.clone();
        replica.own_process_group = self.spec.own_process_groups;
        if self.spec.tls {
            let pki = self.root();
            replica.tls = Some(TlsFiles {
                ca: pki.join("ca.pem"),
                cert: pki.join(format!("node-{node_id}.pem")),
                key: pki.join(format!("node-{node_id}-key.pem")),
            });
            // The probes (wait_for_leader, ...) present the admin
            // credential init-pki wrote.
            let read = |name: &str| std::fs::read_to_string(pki.join(name)).unwrap_or_default();
            let (cert, key) = (read("admin.pem"), read("admin-key.pem"));
            crate::probe::register_tls(&replica.uri(), &read("ca.pem"), Some((&cert, &key)));
        }
        replica
    }

    /// The client config `init-pki` wrote (cluster CA and the admin
    /// credential), for `PALISADE_CONFIG`; `None` without TLS.
    pub fn client_config(&self) -> Option<PathBuf> {
        self.spec.tls.then(|| self.root().join("config.json"))
    }

    /// Starts every replica that does not run (the founding ones at first;
    /// after faults, whatever was killed).
    pub fn start_all(&mut self) -> Result<(), TestkitError> {
        for replica in &mut self.replicas {
            replica.start()?;
        }
        Ok(())
    }

    /// Recomputes `--initial-cluster` from the replicas' advertised
    /// addresses (after a caller set `advertise` on prepared replicas).
    pub fn advertise_initial_cluster(&mut self) {
        let initial_cluster = self
            .replicas
            .iter()
            .map(|replica| format!("{}={}", replica.node_id, replica.peer_address()))
            .collect::<Vec<_>>()
            .join(",");
        for replica in &mut self.replicas {
            if !replica.initial_cluster.is_empty() {
                replica.initial_cluster = initial_cluster.clone();
            }
        }
        self.initial_cluster = initial_cluster;
    }

    /// The cluster's directory.
    pub fn root(&self) -> &Path {
        match &self.root {
            Root::Temporary(dir) => dir.path(),
            Root::Kept(path) => path,
        }
    }

    /// `--initial-cluster` of the founding replicas.
    pub fn initial_cluster(&self) -> &str {
        &self.initial_cluster
    }

    /// Starts one more replica on a free port, without `--initial-cluster`:
    /// it waits to be added as a learner.
    pub fn start_joining(
        &mut self,
        node_id: u64,
        extra_args: &[&str],
    ) -> Result<&mut ReplicaProcess, TestkitError> {
        let address = format!("127.0.0.1:{}", ports::free_port()?);
        if self.spec.tls {
            init_pki(&self.spec.palisade, self.root(), node_id)?;
        }
        let mut replica = self.new_replica(node_id, &address, false);
        if self.spec.tls {
            replica.peer_listen = Some(format!("127.0.0.1:{}", ports::free_port()?));
        }
        replica.extra_args = extra_args.iter().map(|arg| arg.to_string()).collect();
        replica.start()?;
        self.replicas.push(replica);
        let index = self.replicas.len() - 1;
        Ok(&mut self.replicas[index])
    }

    /// The replica with `node_id`.
    ///
    /// # Panics
    /// If there is none (a bug in the caller); see [`LocalCluster::get`].
    pub fn replica(&self, node_id: u64) -> &ReplicaProcess {
        self.get(node_id)
            .unwrap_or_else(|| panic!("no replica {node_id}"))
    }

    /// The replica with `node_id`, mutably.
    ///
    /// # Panics
    /// If there is none (a bug in the caller).
    pub fn replica_mut(&mut self, node_id: u64) -> &mut ReplicaProcess {
        self.replicas
            .iter_mut()
            .find(|replica| replica.node_id == node_id)
            .unwrap_or_else(|| panic!("no replica {node_id}"))
    }

    /// The replica with `node_id`, if there is one.
    pub fn get(&self, node_id: u64) -> Option<&ReplicaProcess> {
        self.replicas
            .iter()
            .find(|replica| replica.node_id == node_id)
    }

    /// Every replica's node id.
    pub fn node_ids(&self) -> Vec<u64> {
        self.replicas
            .iter()
            .map(|replica| replica.node_id)
            .collect()
    }

    /// URIs of the given replicas.
    pub fn uris(&self, node_ids: &[u64]) -> Vec<String> {
        node_ids
            .iter()
            .filter_map(|id| self.get(*id))
            .map(ReplicaProcess::uri)
            .collect()
    }

    /// URIs of every replica.
    pub fn all_uris(&self) -> Vec<String> {
        self.replicas.iter().map(ReplicaProcess::uri).collect()
    }

    /// Comma-separated addresses of the given replicas, for the CLI.
    pub fn cli_endpoints(&self, node_ids: &[u64]) -> String {
        node_ids
            .iter()
            .filter_map(|id| self.get(*id))
            .map(|replica| replica.listen.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until every replica in `among` answers and names the same
    /// leader, itself one of `among`; returns (leader, term).
    pub async fn wait_for_leader(
        &self,
        among: &[u64],
        timeout: Duration,
    ) -> Result<(u64, u64), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut views = Vec::new();
            for uri in self.uris(among) {
                views.push(cluster_info(&uri).await);
            }
            let agreed: BTreeSet<(Option<u64>, u64)> = views
                .iter()
                .flatten()
                .map(|info| (info.leader_id, info.term))
                .collect();
            if views.len() == among.len()
                && views.iter().all(Option::is_some)
                && agreed.len() == 1
                && let Some((Some(leader), term)) = agreed.first().copied()
                && among.contains(&leader)
            {
                return Ok((leader, term));
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::NoLeader {
                    among: among.to_vec(),
                    waited: timeout,
                    views: format!("{views:?}"),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until every replica in `among` applied what the leader had
    /// committed when this was called.
    pub async fn wait_caught_up(
        &self,
        among: &[u64],
        timeout: Duration,
    ) -> Result<(), TestkitError> {
        let started = Instant::now();
        let (leader, _) = self.wait_for_leader(among, timeout).await?;
        let target = cluster_info(&self.replica(leader).uri())
            .await
            .map_or(0, |info| info.commit_index);
        let deadline = started + timeout;
        for id in among {
            let uri = self.get(*id).ok_or(TestkitError::NoSuchReplica(*id))?.uri();
            loop {
                let applied = cluster_info(&uri)
                    .await
                    .map_or(0, |info| info.applied_index);
                if applied >= target {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(TestkitError::Lagging {
                        node_id: *id,
                        applied,
                        target,
                        waited: timeout,
                    });
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        }
        Ok(())
    }

    /// The first replica seen to have exited since it was started, if any
    /// (it is reaped; [`ReplicaProcess::start`] starts it again).
    pub fn exited(&mut self) -> Option<(u64, ExitStatus)> {
        self.replicas.iter_mut().find_map(|replica| {
            replica
                .try_exit_status()
                .map(|status| (replica.node_id, status))
        })
    }

    /// SIGTERM to every replica at once, then waits up to `timeout` for
    /// them to exit; SIGKILLs what is left. Returns the replicas that had
    /// to be killed.
    pub fn terminate_all(&mut self, timeout: Duration) -> Vec<u64> {
        for replica in &self.replicas {
            replica.request_stop();
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut killed = Vec::new();
        for replica in &mut self.replicas {
            if !replica.is_running() {
                continue;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if replica.wait_exit(left).is_none() {
                killed.push(replica.node_id);
            }
        }
        killed
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for replica in &mut self.replicas {
            replica.kill();
        }
        if self.spec.kill_executions_on_drop {
            kill_executions(&self.driver_dir);
        }
    }
}
