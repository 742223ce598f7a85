//! `palisade up`: a local cluster for trying Palisade — N replicas as
//! separate OS processes (`palisade gateway run`), each with its own data
//! directory, port and log file, sharing one process-driver directory, all
//! stopped on Ctrl-C.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use palisade_proto::v1;
use tokio::process::{Child, Command};

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
    let driver_dir = data_dir.join("executions");
    let addresses: Vec<(u64, String)> = (1..=args.replicas)
        .map(|id| {
            let port = u64::from(args.base_port) + id - 1;
            (id, format!("127.0.0.1:{port}"))
        })
        .collect();
    if addresses.iter().any(|(_, address)| {
        address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .is_none()
    }) {
        bail!(
            "--base-port {} leaves no room for {} replicas",
            args.base_port,
            args.replicas
        );
    }
    let initial_cluster = addresses
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut children: Vec<(u64, Child)> = Vec::new();
    for (id, address) in &addresses {
        let node_dir = data_dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&node_dir)?;
        let log_path = node_dir.join("gateway.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let child = Command::new(&program)
            .args([
                "gateway",
                "run",
                "--node-id",
                &id.to_string(),
                "--listen",
                address,
            ])
            .arg("--data-dir")
            .arg(&node_dir)
            .arg("--driver-dir")
            .arg(&driver_dir)
            .args(["--initial-cluster", &initial_cluster])
            .args(["--stop-grace-seconds", &args.stop_grace_seconds.to_string()])
            // Through the environment, so a password stays out of `ps`.
            .envs(
                args.postgres_url
                    .iter()
                    .map(|url| ("PALISADE_POSTGRES_URL", url)),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(false)
            .spawn()
            .with_context(|| format!("cannot start replica {id}"))?;
        println!("replica {id}: {address}  (log: {})", log_path.display());
        children.push((*id, child));
    }
    let endpoints: Vec<String> = addresses
        .iter()
        .map(|(_, address)| format!("http://{address}"))
        .collect();
    println!("waiting for a leader...");
    match wait_for_leader(&endpoints).await {
        Ok(leader) => println!(
            "Palisade is up: {} replica(s), leader node {leader}. Endpoints: {}",
            addresses.len(),
            addresses
                .iter()
                .map(|(_, address)| address.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        Err(error) => {
            eprintln!("error: {error:#}; see the gateway.log files");
            stop_all(&mut children).await;
            return Err(error);
        }
    }
    println!("Try: palisade sandbox create demo -- sleep 1000   (Ctrl-C stops the cluster)");

    let exited = async {
        loop {
            for (id, child) in children.iter_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return (*id, status);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        () = crate::serve::shutdown_signal() => {
            println!("stopping...");
        }
        (id, status) = exited => {
            eprintln!("replica {id} exited unexpectedly ({status}); stopping the others");
        }
    }
    stop_all(&mut children).await;
    println!(
        "stopped (sandboxes keep running under their shims; data in {})",
        data_dir.display()
    );
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

async fn stop_all(children: &mut [(u64, Child)]) {
    for (_, child) in children.iter() {
        if let Some(pid) = child.id() {
            // SAFETY: plain kill(2) on a pid we spawned and have not reaped.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
    }
    for (id, child) in children.iter_mut() {
        match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!("replica {id} did not stop in {STOP_TIMEOUT:?}; killing it");
                let _ = child.kill().await;
            }
        }
    }
}
