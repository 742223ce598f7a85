//! `palisade up`: a local cluster for trying Palisade — N replicas as
//! separate OS processes (`palisade gateway run`, started through
//! `palisade-testkit`), each with its own data directory, port and log
//! file, sharing one process-driver directory, all stopped on Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use palisade_proto::v1;
use palisade_testkit::{ClusterSpec, LocalCluster, Ports};

use crate::client::Client;
use crate::serve::{DockerArgs, DriverKind};

/// Flags of `palisade up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Directory for everything: node-N/ (log, snapshots, gateway.log) and
    /// executions/ (sandboxes).
    #[arg(long, default_value = ".palisade")]
    pub data_dir: PathBuf,
    /// Number of replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub replicas: u64,
    /// Port of replica 1; replica N listens on BASE_PORT + N - 1.
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
}

/// How long `up` waits for the cluster to elect a leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `up` waits for replicas to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `palisade up`.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("cannot find the palisade executable")?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", args.data_dir.display()))?;
    let mut spec = ClusterSpec::new(program, args.replicas);
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
    spec.gateway_args = vec![
        "--stop-grace-seconds".to_string(),
        args.stop_grace_seconds.to_string(),
        "--driver".to_string(),
        args.driver.flag_value().to_string(),
    ];
    if args.driver == DriverKind::Docker {
        spec.gateway_args.extend(args.docker.to_gateway_args());
    }
    // Through the environment, so a password stays out of `ps`.
    if let Some(url) = &args.postgres_url {
        spec.env
            .push(("PALISADE_POSTGRES_URL".to_string(), url.clone()));
    }
    let mut cluster = LocalCluster::start(spec)?;
    for replica in &cluster.replicas {
        println!(
            "replica {}: {}  (log: {})",
            replica.node_id,
            replica.listen,
            replica.log_path.display()
        );
    }
    let endpoints = cluster.all_uris();
    println!("waiting for a leader...");
    match wait_for_leader(&endpoints).await {
        Ok(leader) => println!(
            "Palisade is up: {} replica(s), leader node {leader}. Endpoints: {}",
            cluster.replicas.len(),
            cluster.cli_endpoints(&cluster.node_ids())
        ),
        Err(error) => {
            eprintln!("error: {error:#}; see the gateway.log files");
            stop_all(&mut cluster).await;
            return Err(error);
        }
    }
    println!("Try: palisade sandbox create demo -- sleep 1000   (Ctrl-C stops the cluster)");

    let exited = async {
        loop {
            if let Some(exit) = cluster.exited() {
                return exit;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let exit = tokio::select! {
        () = crate::serve::shutdown_signal() => None,
        exit = exited => Some(exit),
    };
    match exit {
        None => println!("stopping..."),
        Some((id, status)) => {
            eprintln!("replica {id} exited unexpectedly ({status}); stopping the others")
        }
    }
    stop_all(&mut cluster).await;
    let running = match args.driver {
        DriverKind::Docker => "sandboxes keep running as containers",
        _ => "sandboxes keep running under their shims",
    };
    println!("stopped ({running}; data in {})", data_dir.display());
    Ok(())
}

async fn wait_for_leader(endpoints: &[String]) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let mut client = Client::new(endpoints.to_vec());
    client.failover_deadline = Duration::ZERO;
    loop {
        let info =
            client
                .admin(|mut admin| async move {
                    admin.get_cluster_info(v1::GetClusterInfoRequest {}).await
                })
                .await;
        if let Ok(v1::ClusterInfo {
            leader_id: Some(leader),
            ..
        }) = info
        {
            return Ok(leader);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no leader was elected within {READY_TIMEOUT:?}");
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
