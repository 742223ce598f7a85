//! `palisade up`: a local cluster for trying Palisade — N replicas as
//! separate OS processes (`palisade gateway run`, started through
//! `palisade-testkit`), each with its own data directory, port and log
//! file, sharing one process-driver directory, all stopped on Ctrl-C.
//!
//! Secure with zero set-up: it first makes (or reuses) the cluster CA, a
//! certificate per replica and an admin client certificate under its data
//! directory (0700, files 0600, [`crate::pki`]), runs every replica with
//! TLS on its public port and mutual TLS on its own peer port, and writes
//! `config.json` there, which the CLI finds (`./.palisade/config.json`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use palisade_proto::v1;
use palisade_testkit::{ClusterSpec, LocalCluster, Ports};

use crate::client::Client;

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
}

/// How long `up` waits for the cluster to elect a leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `up` waits for replicas to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

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
    spec.gateway_args = vec![
        "--stop-grace-seconds".to_string(),
        args.stop_grace_seconds.to_string(),
    ];
    // Through the environment, so a password stays out of `ps`.
    if let Some(url) = &args.postgres_url {
        spec.env
            .push(("PALISADE_POSTGRES_URL".to_string(), url.clone()));
    }
    let mut cluster = LocalCluster::start(spec)?;
    for replica in &cluster.replicas {
        println!(
            "replica {}: {}  (peer port {}; log: {})",
            replica.node_id,
            replica.listen,
            replica.peer_address(),
            replica.log_path.display()
        );
    }
    let config = data_dir.join("config.json");
    println!(
        "TLS on; the CLI's credential (admin) is {} (found from this directory, \
         or set PALISADE_CONFIG)",
        config.display()
    );
    let tls = crate::config::load(&config)?;
    let endpoints = cluster.all_uris();
    println!("waiting for a leader...");
    match wait_for_leader(&endpoints, tls).await {
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
    println!(
        "stopped (sandboxes keep running under their shims; data in {})",
        data_dir.display()
    );
    Ok(())
}

async fn wait_for_leader(
    endpoints: &[String],
    tls: crate::client::ClientTls,
) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let mut client = Client::new(endpoints.to_vec()).with_tls(Some(tls));
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
