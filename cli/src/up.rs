//! `palisade up`: a local cluster for trying Palisade — N replicas as
//! separate OS processes (`palisade gateway run`, started through
//! `palisade-testkit`), each with its own data directory, port and log
//! file, sharing one process-driver directory — and their supervisor:
//!
//! - a replica that exits (crash, fail-stop, `kill -9`) is restarted from
//!   its data directory after a backoff ([`Backoff`]: 2 s, doubling up to
//!   30 s, back to 2 s once it ran a minute), while the others keep
//!   serving. The first delay is longer than an election (about 1.3 s):
//!   a crashed leader is replaced by the others rather than racing them
//!   back into its old term. A replica that exits by itself has its
//!   reason printed under the exit (its log's last `error:` line); one
//!   that exits before the cluster was first up ends `up` with that
//!   reason, since a port in use or a bad flag would only fail again;
//! - leader changes are printed as they happen: the new leader, its term,
//!   and how long the cluster was without a confirmed leader
//!   ([`LeaderWatch`]);
//! - Ctrl-C (or SIGTERM) stops every replica in order: each hands off
//!   leadership and drains. The replicas run in process groups of their
//!   own, so the terminal's Ctrl-C reaches only `up`, which stops them.
//!
//! Secure with zero set-up: it first makes (or reuses) the cluster CA, a
//! certificate per replica and an admin client certificate under its data
//! directory (0700, files 0600, [`crate::pki`]), runs every replica with
//! TLS on its public port and mutual TLS on its own peer port, and writes
//! `config.json` there, which the CLI finds (`./.palisade/config.json`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_testkit::{ClusterSpec, LocalCluster, Ports};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::client::Client;
use crate::serve::{DockerArgs, DriverKind};

/// Flags of `palisade up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Directory for everything: node-N/ (log, snapshots, gateway.log) and
    /// executions/ (sandboxes).
    #[arg(long, default_value = ".palisade")]
    pub data_dir: PathBuf,
    /// Number of replicas: 1, 3 or 5 (an odd number: a majority of 3
    /// survives one failure, of 5 two).
    #[arg(long, default_value_t = 3, value_parser = parse_replicas)]
    pub replicas: u64,
    /// Port of replica 1; replica N listens on BASE_PORT + N - 1, and its
    /// peer port (Raft, mutual TLS) is BASE_PORT + 100 + N - 1.
    #[arg(long, default_value_t = 7001)]
    pub base_port: u16,
    /// Seconds between SIGTERM and SIGKILL when stopping a sandbox.
    #[arg(long, default_value_t = 10)]
    pub stop_grace_seconds: u64,
    /// Keep a read projection in this PostgreSQL database
    /// (postgres://USER:PASSWORD@HOST:PORT/DATABASE); passed to every replica.
    #[arg(long, env = "PALISADE_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// Compute driver of every replica: `process` (local processes under
    /// shims) or `docker` (containers on the engine --docker-host names).
    #[arg(long, value_enum, default_value_t = DriverKind::Process)]
    pub driver: DriverKind,
    /// The Docker driver's flags (`--docker-*`).
    #[command(flatten)]
    pub docker: DockerArgs,
    /// Where the replicas serve `/metrics` (Prometheus) and their status
    /// page (`/`): replica N on http://127.0.0.1:METRICS_BASE_PORT + N - 1
    /// (plain HTTP, loopback only). Default: BASE_PORT + 200.
    #[arg(long, conflicts_with = "no_metrics")]
    pub metrics_base_port: Option<u16>,
    /// Serve no `/metrics` and no status page.
    #[arg(long)]
    pub no_metrics: bool,
    /// Threads of each replica's async runtime (1-1024; default: one per
    /// core). See `palisade gateway run --help`.
    #[arg(long, value_parser = crate::serve::worker_threads_parser())]
    pub worker_threads: Option<u16>,
}

/// Offset of the default `--metrics-base-port` from `--base-port` (the
/// peer ports are at + 100).
pub const METRICS_PORT_OFFSET: u16 = 200;

impl UpArgs {
    /// Replica `node_id`'s metrics and status page address, unless
    /// `--no-metrics`.
    pub fn metrics_listen(&self, node_id: u64) -> anyhow::Result<Option<String>> {
        if self.no_metrics {
            return Ok(None);
        }
        let base = match self.metrics_base_port {
            Some(base) => base,
            None => self
                .base_port
                .checked_add(METRICS_PORT_OFFSET)
                .with_context(|| {
                    format!(
                        "--base-port {} leaves no room for the metrics ports (BASE_PORT + {METRICS_PORT_OFFSET}); pass --metrics-base-port or --no-metrics",
                        self.base_port
                    )
                })?,
        };
        let port = u64::from(base) + node_id - 1;
        let port = u16::try_from(port)
            .ok()
            .filter(|port| *port != 0)
            .with_context(|| {
                format!(
                    "--metrics-base-port {base} leaves no room for replica {node_id}'s metrics port"
                )
            })?;
        Ok(Some(format!("127.0.0.1:{port}")))
    }
}

/// `--replicas`: 1, 3 or 5.
fn parse_replicas(text: &str) -> Result<u64, String> {
    match text.trim() {
        "1" => Ok(1),
        "3" => Ok(3),
        "5" => Ok(5),
        other => Err(format!(
            "{other:?} is not 1, 3 or 5 (a local cluster has an odd number of replicas, at most 5)"
        )),
    }
}

/// How long `up` waits for the cluster to elect a leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `up` waits for replicas to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the supervisor looks for exited replicas and asks who leads.
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(200);
/// How long one replica may take to answer who it thinks leads.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Restart delays of one replica: [`Backoff::FIRST`], doubled after each
/// exit up to [`Backoff::MAX`]; a replica that ran [`Backoff::STABLE`]
/// before it exited starts over from the first delay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Exits in a row, each after less than [`Backoff::STABLE`] of running.
    failures: u32,
}

impl Backoff {
    /// The first restart delay.
    pub const FIRST: Duration = Duration::from_secs(2);
    /// The longest restart delay.
    pub const MAX: Duration = Duration::from_secs(30);
    /// How long a replica must run for its next exit to count as the first.
    pub const STABLE: Duration = Duration::from_secs(60);

    /// Records an exit after the replica ran for `ran`; returns how long to
    /// wait before starting it again and which restart in a row it is.
    pub fn exited(&mut self, ran: Duration) -> (Duration, u32) {
        if ran >= Self::STABLE {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let doublings = self.failures.saturating_sub(1).min(16);
        let delay = Self::FIRST.saturating_mul(1 << doublings).min(Self::MAX);
        (delay, self.failures)
    }
}

/// What one replica said about the cluster (`None`: it did not answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// The replica asked.
    pub node_id: u64,
    /// Whom it names as leader.
    pub leader_id: Option<u64>,
    /// Its term.
    pub term: u64,
}

/// A change [`LeaderWatch`] reports.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaderEvent {
    /// A leader confirmed itself (the first one, or a new one).
    Elected {
        /// The new leader.
        leader: u64,
        /// Its term.
        term: u64,
        /// The leader before it, and its term.
        previous: Option<(u64, u64)>,
        /// From the last time the previous leader confirmed itself to now
        /// (zero for the first leader).
        without_leader: Duration,
    },
    /// The leader stopped confirming itself (it exited, hangs, or lost
    /// its quorum); no other leader yet.
    Lost {
        /// The leader that went silent.
        leader: u64,
        /// Its term.
        term: u64,
    },
}

/// Follows who leads from the replicas' own views. A leader counts only
/// when it says so itself (a follower may still name a leader that died):
/// so "time without a leader" runs from the old leader's last answer as
/// leader to the new leader's first.
#[derive(Debug, Default)]
pub struct LeaderWatch {
    current: Option<(u64, u64)>,
    confirmed_at: Option<Instant>,
    lost_reported: bool,
}

impl LeaderWatch {
    /// After how long without a confirmation the leader is reported lost.
    pub const LOST_AFTER: Duration = Duration::from_millis(600);

    /// Takes one round of views, seen at `now`; returns what changed.
    pub fn observe(&mut self, now: Instant, views: &[View]) -> Option<LeaderEvent> {
        let confirmed = views
            .iter()
            .filter(|view| view.leader_id == Some(view.node_id))
            .map(|view| (view.node_id, view.term))
            .max_by_key(|(_, term)| *term);
        match confirmed {
            Some((leader, term)) if self.current != Some((leader, term)) => {
                // A stale leader of an older term (partitioned, not yet
                // told) does not count as a change back.
                if let Some((_, current_term)) = self.current
                    && term < current_term
                {
                    return None;
                }
                let previous = self.current.replace((leader, term));
                let without_leader = match (previous, self.confirmed_at) {
                    (Some(_), Some(at)) => now.saturating_duration_since(at),
                    _ => Duration::ZERO,
                };
                self.confirmed_at = Some(now);
                self.lost_reported = false;
                Some(LeaderEvent::Elected {
                    leader,
                    term,
                    previous,
                    without_leader,
                })
            }
            Some((leader, term)) => {
                // The same leader: silent, unless it had been reported lost
                // (restarted fast enough to resume its term).
                let back = self.lost_reported.then(|| LeaderEvent::Elected {
                    leader,
                    term,
                    previous: Some((leader, term)),
                    without_leader: self
                        .confirmed_at
                        .map_or(Duration::ZERO, |at| now.saturating_duration_since(at)),
                });
                self.confirmed_at = Some(now);
                self.lost_reported = false;
                back
            }
            None => {
                let (leader, term) = self.current?;
                let silent = now.saturating_duration_since(self.confirmed_at?);
                if silent >= Self::LOST_AFTER && !self.lost_reported {
                    self.lost_reported = true;
                    return Some(LeaderEvent::Lost { leader, term });
                }
                None
            }
        }
    }
}

impl std::fmt::Display for LeaderEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaderEvent::Elected {
                leader,
                term,
                previous: None,
                ..
            } => write!(f, "leader: node {leader} (term {term})"),
            LeaderEvent::Elected {
                leader,
                term,
                previous: Some(previous),
                without_leader,
            } if *previous == (*leader, *term) => write!(
                f,
                "leader: node {leader} (term {term}) again; {:.1} s without a leader",
                without_leader.as_secs_f64()
            ),
            LeaderEvent::Elected {
                leader,
                term,
                previous: Some((old, old_term)),
                without_leader,
            } => write!(
                f,
                "leader: node {leader} (term {term}), was node {old} (term {old_term}); {:.1} s without a leader",
                without_leader.as_secs_f64()
            ),
            LeaderEvent::Lost { leader, term } => write!(
                f,
                "no leader: node {leader} (term {term}) stopped answering as leader; waiting for an election"
            ),
        }
    }
}

/// Runs `palisade up`.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("cannot find the palisade executable")?;
    crate::pki::private_dir(&args.data_dir)?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", args.data_dir.display()))?;
    let mut spec = ClusterSpec::new(program, args.replicas).with_tls();
    spec.root = Some(data_dir.clone());
    spec.ports = Ports::Base(args.base_port);
    spec.log_filter = std::env::var("PALISADE_LOG").unwrap_or_else(|_| "info,openraft=warn".into());
    // Sandboxes outlive `up`: the next `up` re-adopts them.
    spec.kill_executions_on_drop = false;
    if args.driver == DriverKind::Fault {
        bail!(
            "`up` runs the process, docker or noop driver; --driver fault needs a fault plan (use `gateway run`)"
        );
    }
    // Ctrl-C reaches `up` only; it stops the replicas in order.
    spec.own_process_groups = true;
    spec.gateway_args = vec![
        "--stop-grace-seconds".to_string(),
        args.stop_grace_seconds.to_string(),
        "--driver".to_string(),
        args.driver.flag_value().to_string(),
    ];
    if let Some(threads) = args.worker_threads {
        spec.gateway_args
            .extend(["--worker-threads".to_string(), threads.to_string()]);
    }
    if args.driver == DriverKind::Docker {
        spec.gateway_args.extend(args.docker.to_gateway_args());
    }
    // Through the environment, so a password stays out of `ps`.
    if let Some(url) = &args.postgres_url {
        spec.env
            .push(("PALISADE_POSTGRES_URL".to_string(), url.clone()));
    }
    let mut cluster = LocalCluster::prepare(spec)?;
    let mut status_pages = Vec::new();
    for replica in &mut cluster.replicas {
        if let Some(address) = args.metrics_listen(replica.node_id)? {
            replica
                .extra_args
                .extend(["--metrics-listen".to_string(), address.clone()]);
            status_pages.push((replica.node_id, format!("http://{address}/")));
        }
    }
    cluster.start_all()?;
    for replica in &cluster.replicas {
        println!(
            "replica {}: {}  (pid {}, peer port {}; log: {})",
            replica.node_id,
            replica.listen,
            replica.try_pid().unwrap_or_default(),
            replica.peer_address(),
            replica.log_path.display()
        );
    }
    for (node_id, url) in &status_pages {
        println!("replica {node_id} status page: {url}  (Prometheus: {url}metrics)");
    }
    let config = data_dir.join("config.json");
    println!(
        "TLS on; the CLI's credential (admin) is {} (found from this directory, \
         or set PALISADE_CONFIG)",
        config.display()
    );
    let tls = crate::config::load(&config)?;
    crate::config::record_endpoints(&config, &cluster.cli_endpoints(&cluster.node_ids()))?;
    let endpoints = cluster.all_uris();
    println!("waiting for a leader...");
    let ready = tokio::select! {
        () = crate::serve::shutdown_signal() => None,
        ready = wait_for_leader(&mut cluster, &endpoints, tls.clone()) => Some(ready),
    };
    match ready {
        None => {
            println!("stopping...");
            stop_all(&mut cluster).await;
            return Ok(());
        }
        Some(Ok(leader)) => println!(
            "Palisade is up: {} replica(s), leader node {leader}. Endpoints: {}",
            cluster.replicas.len(),
            cluster.cli_endpoints(&cluster.node_ids())
        ),
        Some(Err(error)) => {
            // The caller prints the error.
            stop_all(&mut cluster).await;
            return Err(error);
        }
    }
    println!(
        "Try: palisade sandbox create demo -- sleep 1000   (Ctrl-C stops the cluster; a replica that dies is restarted)"
    );
    supervise(&mut cluster, &tls).await;
    println!("stopping...");
    stop_all(&mut cluster).await;
    let running = match args.driver {
        DriverKind::Docker => "sandboxes keep running as containers",
        _ => "sandboxes keep running under their shims",
    };
    println!("stopped ({running}; data in {})", data_dir.display());
    Ok(())
}

/// Restarts replicas that exit and prints leader changes, until SIGTERM or
/// Ctrl-C.
async fn supervise(cluster: &mut LocalCluster, tls: &crate::client::ClientTls) {
    let started = Instant::now();
    let stamp = |now: Instant| format!("[{:>7.1}s]", (now - started).as_secs_f64());
    let mut probes: BTreeMap<u64, ClusterAdminClient<Channel>> = BTreeMap::new();
    for replica in &cluster.replicas {
        if let Ok(endpoint) = Endpoint::from_shared(replica.uri())
            .and_then(|endpoint| endpoint.tls_config(tls.config()))
        {
            let channel = palisade_raft::simnet::channel_lazy(
                endpoint
                    .connect_timeout(PROBE_TIMEOUT)
                    .timeout(PROBE_TIMEOUT),
            );
            probes.insert(replica.node_id, ClusterAdminClient::new(channel));
        }
    }
    let mut backoffs: BTreeMap<u64, Backoff> = BTreeMap::new();
    let mut running_since: BTreeMap<u64, Instant> = cluster
        .node_ids()
        .into_iter()
        .map(|id| (id, started))
        .collect();
    let mut restart_at: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut leaders = LeaderWatch::default();
    let mut interval = tokio::time::interval(SUPERVISE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = crate::serve::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = interval.tick() => {}
        }
        let now = Instant::now();
        while let Some((id, status)) = cluster.exited() {
            let ran = running_since
                .get(&id)
                .map_or(Duration::ZERO, |since| now - *since);
            let (delay, nth) = backoffs.entry(id).or_default().exited(ran);
            restart_at.insert(id, now + delay);
            println!(
                "{} replica {id} exited ({status}) after {:.1} s; restarting it in {:.1} s (restart {nth} in a row; log: {})",
                stamp(now),
                ran.as_secs_f64(),
                delay.as_secs_f64(),
                cluster.replica(id).log_path.display()
            );
            if let Some(reason) = cluster.replica(id).exit_reason() {
                println!("{} replica {id}: {reason}", stamp(now));
            }
        }
        let due: Vec<u64> = restart_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            restart_at.remove(&id);
            let replica = cluster.replica_mut(id);
            match replica.start() {
                Ok(()) => {
                    running_since.insert(id, now);
                    println!(
                        "{} replica {id} restarted (pid {})",
                        stamp(now),
                        replica.try_pid().unwrap_or_default()
                    );
                }
                Err(error) => {
                    let (delay, nth) = backoffs.entry(id).or_default().exited(Duration::ZERO);
                    restart_at.insert(id, now + delay);
                    eprintln!(
                        "{} replica {id} could not be restarted: {error}; trying again in {:.1} s (attempt {nth})",
                        stamp(now),
                        delay.as_secs_f64()
                    );
                }
            }
        }
        let views = futures::future::join_all(probes.iter().map(|(id, client)| {
            let mut client = client.clone();
            let id = *id;
            async move {
                // The channel's own timeouts do not bound a TLS handshake
                // that never finishes (a replica paused by SIGSTOP, whose
                // kernel still accepts connections, or anything else on its
                // port): without this bound one such replica stopped the
                // whole loop, restarts included.
                let info = tokio::time::timeout(
                    PROBE_TIMEOUT,
                    client.get_cluster_info(v1::GetClusterInfoRequest {}),
                )
                .await
                .ok()?
                .ok()?
                .into_inner();
                Some(View {
                    node_id: id,
                    leader_id: info.leader_id,
                    term: info.term,
                })
            }
        }))
        .await;
        let views: Vec<View> = views.into_iter().flatten().collect();
        if let Some(event) = leaders.observe(Instant::now(), &views) {
            println!("{} {event}", stamp(Instant::now()));
        }
    }
}

async fn wait_for_leader(
    cluster: &mut LocalCluster,
    endpoints: &[String],
    tls: crate::client::ClientTls,
) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let mut client = Client::new(endpoints.to_vec()).with_tls(Some(tls));
    client.failover_deadline = Duration::ZERO;
    loop {
        // Bounded for the reason `supervise`'s probes are.
        let info = tokio::time::timeout(
            PROBE_TIMEOUT * endpoints.len() as u32,
            client.admin(|mut admin| async move {
                admin.get_cluster_info(v1::GetClusterInfoRequest {}).await
            }),
        )
        .await;
        if let Ok(Ok(v1::ClusterInfo {
            leader_id: Some(leader),
            ..
        })) = info
        {
            return Ok(leader);
        }
        // Nothing restarts a replica before the cluster is up: one that
        // exits now (a port in use, a bad flag) would only exit again.
        if let Some((id, status)) = cluster.exited() {
            let replica = cluster.replica(id);
            bail!(
                "replica {id} exited ({status}) before the cluster was up: {} (log: {})",
                replica
                    .exit_reason()
                    .unwrap_or_else(|| "its log names no error".to_string()),
                replica.log_path.display()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no leader was elected within {READY_TIMEOUT:?}; see the replicas' gateway.log files"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGTERM to every replica (each hands leadership off and drains), then
/// SIGKILL for any that does not exit within [`STOP_TIMEOUT`].
async fn stop_all(cluster: &mut LocalCluster) {
    let killed = tokio::task::block_in_place(|| cluster.terminate_all(STOP_TIMEOUT));
    for id in killed {
        eprintln!("replica {id} did not stop in {STOP_TIMEOUT:?}; killed it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_one_three_or_five() {
        assert_eq!(parse_replicas("1"), Ok(1));
        assert_eq!(parse_replicas("3"), Ok(3));
        assert_eq!(parse_replicas("5"), Ok(5));
        for bad in ["0", "2", "4", "7", "", "three"] {
            assert!(parse_replicas(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets_after_a_stable_run() {
        let mut backoff = Backoff::default();
        let quick = Duration::from_secs(1);
        assert_eq!(backoff.exited(quick), (Duration::from_secs(2), 1));
        assert_eq!(backoff.exited(quick), (Duration::from_secs(4), 2));
        assert_eq!(backoff.exited(quick), (Duration::from_secs(8), 3));
        for _ in 0..20 {
            backoff.exited(quick);
        }
        assert_eq!(backoff.exited(quick).0, Backoff::MAX);
        assert_eq!(backoff.exited(Backoff::STABLE), (Backoff::FIRST, 1));
    }

    fn view(node_id: u64, leader_id: Option<u64>, term: u64) -> View {
        View {
            node_id,
            leader_id,
            term,
        }
    }

    #[test]
    fn leader_changes_are_reported_with_the_time_without_a_leader() {
        let mut watch = LeaderWatch::default();
        let t0 = Instant::now();
        assert_eq!(watch.observe(t0, &[view(1, None, 1)]), None);
        let first = watch.observe(t0, &[view(1, Some(1), 2), view(2, Some(1), 2)]);
        assert_eq!(
            first,
            Some(LeaderEvent::Elected {
                leader: 1,
                term: 2,
                previous: None,
                without_leader: Duration::ZERO
            })
        );
        // Followers still naming the old leader do not confirm it.
        let t1 = t0 + Duration::from_millis(200);
        assert_eq!(watch.observe(t1, &[view(1, Some(1), 2)]), None);
        let t2 = t1 + Duration::from_millis(300);
        assert_eq!(watch.observe(t2, &[view(2, Some(1), 2)]), None);
        let t3 = t1 + LeaderWatch::LOST_AFTER;
        assert_eq!(
            watch.observe(t3, &[view(2, Some(1), 2)]),
            Some(LeaderEvent::Lost { leader: 1, term: 2 })
        );
        assert_eq!(watch.observe(t3, &[view(2, None, 3)]), None);
        let t4 = t1 + Duration::from_millis(1_400);
        let elected = watch.observe(t4, &[view(2, Some(2), 3), view(3, Some(2), 3)]);
        assert_eq!(
            elected,
            Some(LeaderEvent::Elected {
                leader: 2,
                term: 3,
                previous: Some((1, 2)),
                without_leader: Duration::from_millis(1_400)
            })
        );
        assert_eq!(
            elected.unwrap().to_string(),
            "leader: node 2 (term 3), was node 1 (term 2); 1.4 s without a leader"
        );
        // The old leader, back and not yet told, is not a change back.
        assert_eq!(watch.observe(t4, &[view(1, Some(1), 2)]), None);
    }

    #[test]
    fn a_leader_that_resumes_its_term_is_reported_back() {
        let mut watch = LeaderWatch::default();
        let t0 = Instant::now();
        assert!(watch.observe(t0, &[view(2, Some(2), 2)]).is_some());
        let t1 = t0 + LeaderWatch::LOST_AFTER;
        assert_eq!(
            watch.observe(t1, &[]),
            Some(LeaderEvent::Lost { leader: 2, term: 2 })
        );
        let t2 = t0 + Duration::from_millis(900);
        let back = watch.observe(t2, &[view(2, Some(2), 2)]).unwrap();
        assert_eq!(
            back.to_string(),
            "leader: node 2 (term 2) again; 0.9 s without a leader"
        );
        assert_eq!(watch.observe(t2, &[view(2, Some(2), 2)]), None);
    }
}
