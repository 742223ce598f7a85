//! The `palisade` command line: argument parsing (clap) and the client
//! commands (`sandbox` in [`sandbox`], `ssh-session` and `policy` in
//! `owned`, `auth` in [`auth`], `workspace` and `cluster` here). The server commands
//! (`gateway run`, `up`) live in [`crate::serve`] and [`crate::up`].
//!
//! Exit codes: 0 success; 1 the request failed (the message and the
//! ErrorInfo reason are printed on stderr); 2 bad usage.

use std::path::PathBuf;

pub mod auth;
mod data_plane;
mod owned;
mod prune;
pub mod sandbox;

use clap::{Args, Parser, Subcommand, ValueEnum};
use palisade_proto::v1;
use serde_json::json;

use crate::client::{Client, ClientError, parse_endpoints};
use palisade_gateway::convert::phase_from_proto;

/// Default endpoints: the three replicas `palisade up` starts.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

/// Palisade: a highly available control plane for AI-agent sandboxes.
#[derive(Debug, Parser)]
#[command(name = "palisade", version, about, long_about = None)]
pub struct Cli {
    /// Replica endpoints, `host:port` or `https://host:port`,
    /// comma-separated; the client fails over between them. Default: the
    /// endpoints recorded in the client config by `palisade up`, else
    /// 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003.
    #[arg(long, global = true, env = "PALISADE_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Workspace of the sandbox commands.
    #[arg(
        long,
        global = true,
        env = "PALISADE_WORKSPACE",
        default_value = "default"
    )]
    pub workspace: String,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Client config (cluster CA and credential) written by `palisade up`
    /// or `palisade cluster init-pki` (default: ./.palisade/config.json
    /// when it exists).
    #[arg(long, global = true, env = "PALISADE_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Plaintext, without TLS (only against replicas run with --insecure).
    #[arg(long, global = true)]
    pub insecure: bool,
    /// API token to present (`palisade auth token create` prints one);
    /// without it the client certificate of --config, if any, is the
    /// credential.
    #[arg(long, global = true, env = "PALISADE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable table.
    Table,
    /// JSON, for scripts.
    Json,
}

/// Top-level commands.
// Parsed once per process; the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a local cluster (three replicas, process driver, data under one
    /// directory) until Ctrl-C.
    Up(crate::up::UpArgs),
    /// Run a gateway replica.
    #[command(subcommand)]
    Gateway(GatewayCommand),
    /// Create, inspect, watch, stop, start and delete sandboxes.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// Open, list and revoke SSH sessions on sandboxes.
    #[command(subcommand, name = "ssh-session")]
    SshSession(owned::SshSessionCommand),
    /// Set and read sandbox policies.
    #[command(subcommand)]
    Policy(owned::PolicyCommand),
    /// Create, inspect and delete workspaces.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Inspect the cluster.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// API tokens (create, list, revoke) and `whoami`.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// Ask each --endpoint's gRPC health service whether it serves; exit 0
    /// only when every one answers SERVING (the container HEALTHCHECK and
    /// the Kubernetes readiness probe).
    Health(crate::health::HealthArgs),
    /// Internal: supervise one execution (started by the process driver).
    #[command(hide = true)]
    Shim(ShimArgs),
    /// Run chaos campaigns: a cluster, faults, a concurrent workload and a
    /// history checker (the `palisade-chaos` library; see `palisade chaos
    /// run --help`).
    #[command(subcommand)]
    Chaos(ChaosCommand),
}

/// `palisade chaos ...`
#[derive(Debug, Subcommand)]
pub enum ChaosCommand {
    /// Run one campaign, or one per seed with --seeds. Exit status 0: no
    /// anomaly; 1: an anomaly (printed with its history excerpt and the seed
    /// to re-run); 2: the harness could not run.
    Run(palisade_chaos::cli::RunArgs),
}

/// Arguments of the hidden `palisade shim` command, passed through verbatim
/// to the process driver's shim.
#[derive(Debug, Args)]
pub struct ShimArgs {
    /// Arguments for the shim.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// `palisade gateway ...`
#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Run one replica in the foreground until SIGTERM or Ctrl-C.
    Run(crate::serve::RunArgs),
}

/// `palisade workspace ...`
#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Create a workspace.
    Create {
        /// Workspace name (DNS-1123 label).
        name: String,
    },
    /// Show a workspace.
    Get {
        /// Workspace name.
        name: String,
    },
    /// List workspaces.
    List,
    /// Delete an empty workspace (`default` cannot be deleted).
    Delete {
        /// Workspace name.
        name: String,
    },
}

/// `palisade cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create the cluster CA, a certificate per node and an admin client
    /// certificate, plus config.json for the CLI (what `palisade up` does
    /// for itself), for a real deployment. Keeps files that exist.
    #[command(name = "init-pki")]
    InitPki(crate::pki::InitPkiArgs),
    /// Show each replica's view: leader, term, commit and applied index,
    /// and how far it lags the leader.
    Status {
        /// Keep refreshing the view in place (the screen is cleared and
        /// redrawn; with -o json, one JSON document per refresh) until
        /// interrupted with Ctrl-C. An unreachable cluster is shown as such
        /// and watched on.
        #[arg(long)]
        watch: bool,
        /// Seconds between refreshes with --watch.
        #[arg(long, default_value_t = 2, requires = "watch",
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval_seconds: u64,
    },
    /// Add a replica as a learner (it replicates the log but does not
    /// vote); returns once it caught up. Start it first with
    /// `palisade gateway run --node-id ID --listen ADDRESS --peer-listen
    /// PEER_ADDRESS --data-dir DIR` (no --initial-cluster).
    AddLearner {
        /// The new replica's node id (never reuse one).
        node_id: u64,
        /// HOST:PORT of the new replica's peer port (its --advertise, by
        /// default its --peer-listen; with a single-port --insecure replica,
        /// its --listen).
        address: String,
    },
    /// Make a caught-up learner a voter.
    Promote {
        /// The learner's node id.
        node_id: u64,
    },
    /// Remove a replica (voter or learner) from the cluster.
    Remove {
        /// The replica's node id.
        node_id: u64,
    },
    /// Move leadership to another voter.
    TransferLeader {
        /// The voter to lead.
        node_id: u64,
    },
    /// Find orphan executions — compute the state does not account for
    /// (a sandbox that is gone, a stale generation) — and reap those seen
    /// orphaned for the grace period (the leader also does this on its own
    /// every few seconds). Exits 0 when the round ran.
    Reconcile {
        /// Only list what would be reaped; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Backups: save a consistent copy of the replicated state to a file.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Seed one replica of a NEW cluster from a backup file (offline: run
    /// it for every member, each with its own --node-id and --data-dir and
    /// the same FILE and --initial-cluster, then start them with `gateway
    /// run`). The new cluster gets a new cluster id; the execution-token
    /// key is kept unless --rotate-token-key.
    Restore(crate::backup::RestoreArgs),
    /// Replace the key execution tokens are signed with (admin only). New
    /// tokens use the new key at once; tokens of the replaced key keep
    /// verifying until the printed deadline (UTC, on the cluster's
    /// replicated clock), then are refused (UNVERIFIABLE_EXECUTION_TOKEN).
    /// Prints key ids, never keys.
    #[command(name = "rotate-token-key")]
    RotateTokenKey {
        /// Seconds the replaced key still verifies the tokens it signed
        /// (0: refuse them at once, e.g. after a leak; at most 604800, seven
        /// days). At most four replaced keys may be in their grace at once.
        #[arg(long, default_value_t = 3600,
              value_parser = clap::value_parser!(u64).range(0..=604_800))]
        grace_seconds: u64,
    },
}

/// `palisade cluster snapshot ...`
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save the replicated state (workspaces, sandboxes, owned records,
    /// receipts, API token hashes, configuration, the execution-token key;
    /// no membership) at one applied index to FILE, checksummed (SHA-256).
    /// Linearizable: it holds every write acknowledged before it started.
    /// FILE is written atomically, mode 0600 (it holds the token key).
    Save {
        /// Where to write the backup (replaced if it exists).
        file: std::path::PathBuf,
    },
}

pub(crate) fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

pub(crate) fn phase_name(phase: i32) -> &'static str {
    v1::SandboxPhase::try_from(phase)
        .ok()
        .and_then(phase_from_proto)
        .map_or("UNSPECIFIED", |phase| phase.as_str())
}

pub(crate) fn parse_phase(text: &str) -> anyhow::Result<i32> {
    let wanted = text.trim().to_ascii_uppercase();
    palisade_lifecycle::SandboxPhase::ALL
        .iter()
        .find(|phase| phase.as_str() == wanted)
        .map(|phase| palisade_gateway::convert::phase_to_proto(*phase) as i32)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown phase {text:?}; one of {}",
                palisade_lifecycle::SandboxPhase::ALL
                    .iter()
                    .map(|phase| phase.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The JSON shape of a sandbox (stable for scripts).
pub fn sandbox_json(sandbox: &v1::Sandbox) -> serde_json::Value {
    let meta = sandbox.metadata.clone().unwrap_or_default();
    let status = sandbox.status.clone().unwrap_or_default();
    let spec = sandbox.spec.clone().unwrap_or_default();
    let execution = status.execution.clone().unwrap_or_default();
    json!({
        "id": meta.id,
        "name": meta.name,
        "workspace": meta.workspace,
        "phase": phase_name(status.phase),
        "generation": execution.generation,
        "resource_version": meta.resource_version,
        "created_at_ms": meta.created_at_ms,
        "labels": meta.labels,
        "annotations": meta.annotations,
        "command": spec.command,
        "image": spec.image,
        "cpus": spec.cpus,
        "memory_bytes": spec.memory_bytes,
        "workdir": spec.workdir,
        "execution": {
            "generation": execution.generation,
            "handle": execution.handle,
            "driver": execution.driver,
            "exit_code": execution.exit_code,
        },
        "pid": pid_of_handle(&execution.handle),
        "execution_token": sandbox.execution_token,
        "ssh_host_identity": status.ssh_host_identity,
        "restart_policy": v1::RestartPolicy::try_from(spec.restart_policy)
            .map(|policy| policy.as_str_name().trim_start_matches("RESTART_POLICY_"))
            .unwrap_or("UNSPECIFIED"),
        "restart_count": status.restart_count,
        "exit_code": status.exit_code,
        "message": status.message,
        "operation": status.operation.map(|op| json!({
            "kind": v1::OperationKind::try_from(op.kind).map(|kind| kind.as_str_name()).unwrap_or("UNSPECIFIED"),
            "generation": op.generation,
            "begun_at_index": op.begun_at_index,
        })),
    })
}

/// The shim pid in a process-driver handle ("pid=42 start=..."), if any.
fn pid_of_handle(handle: &str) -> Option<u32> {
    handle
        .split_whitespace()
        .find_map(|part| part.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
}

fn workspace_json(workspace: &v1::Workspace) -> serde_json::Value {
    json!({
        "id": workspace.id,
        "name": workspace.name,
        "phase": v1::WorkspacePhase::try_from(workspace.phase)
            .map(|phase| phase.as_str_name().trim_start_matches("WORKSPACE_PHASE_"))
            .unwrap_or("UNSPECIFIED"),
        "resource_version": workspace.resource_version,
        "created_at_ms": workspace.created_at_ms,
        "sandbox_count": workspace.sandbox_count,
    })
}

pub(crate) fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("a serde_json::Value always serializes")
    );
}

/// Prints rows as a left-aligned table with a header.
pub(crate) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|title| title.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(header.iter().map(|title| title.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

pub(crate) fn sandbox_row(sandbox: &v1::Sandbox) -> Vec<String> {
    let value = sandbox_json(sandbox);
    let text = |key: &str| match &value[key] {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let handle = value["execution"]["handle"]
        .as_str()
        .unwrap_or("")
        .to_string();
    vec![
        text("name"),
        text("id"),
        text("phase"),
        text("generation"),
        if handle.is_empty() {
            "-".into()
        } else {
            handle
        },
        text("resource_version"),
    ]
}

pub(crate) const SANDBOX_HEADER: [&str; 6] =
    ["NAME", "ID", "PHASE", "GENERATION", "HANDLE", "VERSION"];

pub(crate) fn print_sandbox(output: Output, sandbox: &v1::Sandbox) {
    match output {
        Output::Json => print_json(&sandbox_json(sandbox)),
        Output::Table => print_table(&SANDBOX_HEADER, &[sandbox_row(sandbox)]),
    }
}

/// Fails when an operation settled in ERROR (e.g. the command was not found).
pub(crate) fn settled_ok(sandbox: &v1::Sandbox) -> anyhow::Result<()> {
    let status = sandbox.status.clone().unwrap_or_default();
    if status.phase == v1::SandboxPhase::Error as i32 {
        let name = sandbox
            .metadata
            .as_ref()
            .map_or("", |meta| meta.name.as_str());
        anyhow::bail!(
            "sandbox {name:?} is in phase ERROR: {}",
            if status.message.is_empty() {
                "no detail"
            } else {
                &status.message
            }
        );
    }
    Ok(())
}

/// `https://` for an endpoint given bare (`host:port` became `http://`).
fn secure_uri(endpoint: &str) -> String {
    match endpoint.strip_prefix("http://") {
        Some(bare) => format!("https://{bare}"),
        None => endpoint.to_string(),
    }
}

/// Runs a client command; returns the process exit code.
pub async fn run_client(cli: Cli) -> anyhow::Result<()> {
    if let Command::Cluster(ClusterCommand::InitPki(args)) = &cli.command {
        return crate::pki::init(args);
    }
    if let Command::Cluster(ClusterCommand::Restore(args)) = &cli.command {
        return crate::backup::restore(args, cli.output);
    }
    let tls = crate::config::discover(cli.config.as_deref(), cli.insecure)?;
    let endpoints = match &cli.endpoint {
        Some(endpoint) => endpoint.clone(),
        None => crate::config::discover_endpoints(cli.config.as_deref(), cli.insecure)?
            .unwrap_or_else(|| DEFAULT_ENDPOINTS.to_string()),
    };
    let mut endpoints = parse_endpoints(&endpoints)?;
    if tls.is_some() {
        // What is dialed, so errors name it.
        endpoints = endpoints
            .iter()
            .map(|endpoint| secure_uri(endpoint))
            .collect();
    }
    let token = match &cli.token {
        Some(token) => crate::client::BearerToken::new(token)?,
        None => crate::client::BearerToken::default(),
    };
    let mut client = Client::new(endpoints.clone())
        .with_tls(tls.clone())
        .with_token(token.clone());
    let workspace = cli.workspace.clone();
    let output = cli.output;
    match cli.command {
        Command::Sandbox(command) => sandbox::run(&mut client, &workspace, output, command).await,
        Command::SshSession(command) => {
            owned::ssh_session(&mut client, &workspace, output, command).await
        }
        Command::Policy(command) => owned::policy(&mut client, &workspace, output, command).await,
        Command::Workspace(command) => workspace_command(&mut client, output, command).await,
        Command::Cluster(ClusterCommand::Status {
            watch: false,
            interval_seconds: _,
        }) => cluster_status(&endpoints, tls, token, output).await,
        Command::Cluster(ClusterCommand::Status {
            watch: true,
            interval_seconds,
        }) => watch_cluster_status(&endpoints, tls, token, output, interval_seconds).await,
        Command::Auth(command) => auth::run(&mut client, &workspace, output, command).await,
        Command::Health(args) => {
            crate::health::run(&endpoints, tls, cli.insecure, &args, output).await
        }
        Command::Cluster(command) => cluster_change(&mut client, output, command).await,
        Command::Up(_) | Command::Gateway(_) | Command::Shim(_) | Command::Chaos(_) => {
            unreachable!("server, shim and chaos commands are dispatched in main")
        }
    }
}

pub(crate) fn consistency(stale: bool) -> i32 {
    if stale {
        v1::Consistency::Stale as i32
    } else {
        v1::Consistency::Linearizable as i32
    }
}

async fn workspace_command(
    client: &mut Client,
    output: Output,
    command: WorkspaceCommand,
) -> anyhow::Result<()> {
    let print = |workspaces: &[v1::Workspace]| match output {
        Output::Json if workspaces.len() == 1 => print_json(&workspace_json(&workspaces[0])),
        Output::Json => print_json(&serde_json::Value::Array(
            workspaces.iter().map(workspace_json).collect(),
        )),
        Output::Table => {
            let rows: Vec<Vec<String>> = workspaces
                .iter()
                .map(|ws| {
                    let value = workspace_json(ws);
                    vec![
                        ws.name.clone(),
                        ws.id.clone(),
                        value["phase"].as_str().unwrap_or("").to_string(),
                        ws.sandbox_count.to_string(),
                        ws.resource_version.to_string(),
                    ]
                })
                .collect();
            print_table(&["NAME", "ID", "PHASE", "SANDBOXES", "VERSION"], &rows);
        }
    };
    match command {
        WorkspaceCommand::Create { name } => {
            let workspace = client
                .palisade(|mut api| {
                    let request = v1::CreateWorkspaceRequest { name: name.clone() };
                    async move { api.create_workspace(request).await }
                })
                .await?;
            print(&[workspace]);
        }
        WorkspaceCommand::Get { name } => {
            let workspace = client
                .palisade(|mut api| {
                    let request = v1::GetWorkspaceRequest {
                        name: name.clone(),
                        consistency: 0,
                    };
                    async move { api.get_workspace(request).await }
                })
                .await?;
            print(&[workspace]);
        }
        WorkspaceCommand::List => {
            let mut workspaces = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .palisade(|mut api| {
                        let request = v1::ListWorkspacesRequest {
                            page_size: 0,
                            page_token: page_token.clone(),
                            consistency: 0,
                        };
                        async move { api.list_workspaces(request).await }
                    })
                    .await?;
                workspaces.extend(page.workspaces);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            if output == Output::Json {
                print_json(&serde_json::Value::Array(
                    workspaces.iter().map(workspace_json).collect(),
                ));
            } else {
                print(&workspaces);
            }
        }
        WorkspaceCommand::Delete { name } => {
            client
                .palisade(|mut api| {
                    let request = v1::DeleteWorkspaceRequest { name: name.clone() };
                    async move { api.delete_workspace(request).await }
                })
                .await?;
            match output {
                Output::Json => print_json(&json!({"name": name, "deleted": true})),
                Output::Table => println!("workspace {name} deleted"),
            }
        }
    }
    Ok(())
}

/// ANSI: cursor home, then clear the screen (what `watch(1)` does).
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// `cluster status --watch`: redraws the view every `interval_seconds`
/// until Ctrl-C. A round where no endpoint answered shows the error and
/// the watch goes on: watching a cluster come back is the point.
async fn watch_cluster_status(
    endpoints: &[String],
    tls: Option<crate::client::ClientTls>,
    token: crate::client::BearerToken,
    output: Output,
    interval_seconds: u64,
) -> anyhow::Result<()> {
    let interval = std::time::Duration::from_secs(interval_seconds);
    loop {
        if output == Output::Table {
            print!("{CLEAR_SCREEN}");
        }
        let started = std::time::Instant::now();
        if let Err(error) = cluster_status(endpoints, tls.clone(), token.clone(), output).await {
            println!("no replica answered: {error:#}");
        }
        if output == Output::Table {
            println!(
                "\nEvery {interval_seconds}s ({} UTC). Ctrl-C to stop.",
                utc_now()
            );
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = tokio::time::sleep(interval.saturating_sub(started.elapsed())) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// The wall clock as HH:MM:SS, UTC.
fn utc_now() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let of_day = seconds % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// `cluster status`: asks every endpoint for its own view, so a replica
/// that is down or behind shows as such.
async fn cluster_status(
    endpoints: &[String],
    tls: Option<crate::client::ClientTls>,
    token: crate::client::BearerToken,
    output: Output,
) -> anyhow::Result<()> {
    let mut views = Vec::new();
    for endpoint in endpoints {
        let mut single = Client::new(vec![endpoint.clone()])
            .with_tls(tls.clone())
            .with_token(token.clone());
        single.failover_deadline = std::time::Duration::ZERO;
        let view =
            single
                .admin(|mut admin| async move {
                    admin.get_cluster_info(v1::GetClusterInfoRequest {}).await
                })
                .await;
        views.push((endpoint.clone(), view));
    }
    let leader_commit = views
        .iter()
        .filter_map(|(_, view)| view.as_ref().ok())
        .filter(|info| info.leader_id == Some(info.node_id))
        .map(|info| info.commit_index)
        .max();
    if views.iter().all(|(_, view)| view.is_err()) {
        let (_, error) = views.into_iter().next().expect("at least one endpoint");
        return Err(error.expect_err("all views failed").into());
    }
    let json_views: Vec<serde_json::Value> = views
        .iter()
        .map(|(endpoint, view)| match view {
            Ok(info) => json!({
                "endpoint": endpoint,
                "node_id": info.node_id,
                "state": info.server_state,
                "leader_id": info.leader_id,
                "leader_address": info.leader_address,
                "term": info.term,
                "commit_index": info.commit_index,
                "applied_index": info.applied_index,
                "state_digest": info.state_digest,
                "cluster_id": info.cluster_id,
                "orphans_found": info.orphans_found,
                "orphans_reaped": info.orphans_reaped,
                "state_bytes": info.state_bytes,
                "state_bytes_max": info.state_bytes_max,
                "snapshot_bytes": info.snapshot_bytes,
                "snapshot_bytes_max": info.snapshot_bytes_max,
                "receipts": info.receipts,
                "feature_level": info.feature_level,
                "supported_feature_level": info.supported_feature_level,
                "executor_blocked": (!info.executor_blocked.is_empty()).then_some(&info.executor_blocked),
                "projection": info.projection.as_ref().map(|projection| json!({
                    "state": projection.state,
                    "projected_index": projection.projected_index,
                    "lag_entries": projection.lag_entries,
                    "lag_ms": projection.lag_ms,
                    "last_error": projection.last_error,
                })),
                "lag": leader_commit.map(|commit| commit.saturating_sub(info.applied_index)),
                "members": info.members.iter().map(|member| json!({
                    "node_id": member.node_id,
                    "address": member.address,
                    "role": member.role,
                    "matched_index": member.matched_index,
                })).collect::<Vec<_>>(),
            }),
            Err(error) => json!({"endpoint": endpoint, "error": error.to_string()}),
        })
        .collect();
    match output {
        Output::Json => print_json(&json!({ "replicas": json_views })),
        Output::Table => {
            let rows: Vec<Vec<String>> = json_views
                .iter()
                .map(|view| {
                    let text = |key: &str| match &view[key] {
                        serde_json::Value::String(text) => text.clone(),
                        serde_json::Value::Null => "-".into(),
                        other => other.to_string(),
                    };
                    if view.get("error").is_some() {
                        vec![
                            text("endpoint"),
                            "-".into(),
                            "UNREACHABLE".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                        ]
                    } else {
                        let projection = match &view["projection"] {
                            serde_json::Value::Null => "-".to_string(),
                            projection => format!(
                                "{}@{} lag {}/{}ms",
                                projection["state"].as_str().unwrap_or("?"),
                                projection["projected_index"],
                                projection["lag_entries"],
                                projection["lag_ms"]
                            ),
                        };
                        vec![
                            text("endpoint"),
                            text("node_id"),
                            text("state"),
                            text("leader_id"),
                            text("term"),
                            text("commit_index"),
                            text("applied_index"),
                            text("lag"),
                            format!(
                                "{:.1}/{} MiB",
                                view["state_bytes"].as_u64().unwrap_or(0) as f64 / 1048576.0,
                                view["state_bytes_max"].as_u64().unwrap_or(0) / 1048576
                            ),
                            format!(
                                "{} (supports {})",
                                text("feature_level"),
                                text("supported_feature_level")
                            ),
                            projection,
                        ]
                    }
                })
                .collect();
            print_table(
                &[
                    "ENDPOINT",
                    "NODE",
                    "STATE",
                    "LEADER",
                    "TERM",
                    "COMMIT",
                    "APPLIED",
                    "LAG",
                    "STATE SIZE",
                    "FEATURE LEVEL",
                    "PROJECTION",
                ],
                &rows,
            );
            if let Some(info) = views.iter().find_map(|(_, view)| view.as_ref().ok()) {
                let members: Vec<String> = info
                    .members
                    .iter()
                    .map(|member| {
                        format!("{}={} ({})", member.node_id, member.address, member.role)
                    })
                    .collect();
                println!("members: {}", members.join(", "));
            }
            for info in views.iter().filter_map(|(_, view)| view.as_ref().ok()) {
                if !info.executor_blocked.is_empty() {
                    println!(
                        "node {}: performs no effect: {}",
                        info.node_id, info.executor_blocked
                    );
                }
                if info.orphans_found > 0 {
                    println!(
                        "node {}: orphan executions found {}, reaped {} (palisade cluster reconcile --dry-run lists them)",
                        info.node_id, info.orphans_found, info.orphans_reaped
                    );
                }
            }
        }
    }
    Ok(())
}

/// Finds and reaps orphan executions (`cluster reconcile`), on the leader.
async fn cluster_reconcile(
    client: &mut Client,
    output: Output,
    dry_run: bool,
) -> anyhow::Result<()> {
    let report = client
        .admin(|mut admin| async move {
            admin
                .reconcile_orphans(v1::ReconcileOrphansRequest { dry_run })
                .await
        })
        .await?;
    match output {
        Output::Json => print_json(&json!({
            "leader_id": report.leader_id,
            "dry_run": report.dry_run,
            "orphans": report.orphans.iter().map(|orphan| json!({
                "sandbox_id": orphan.sandbox_id,
                "generation": orphan.generation,
                "reason": orphan.reason,
                "action": orphan.action,
                "seen_for_ms": orphan.seen_for_ms,
                "due": orphan.due,
                "reaped": orphan.reaped,
                "error": orphan.error,
            })).collect::<Vec<_>>(),
            "orphans_found_total": report.orphans_found_total,
            "orphans_reaped_total": report.orphans_reaped_total,
        })),
        Output::Table => {
            let rows: Vec<Vec<String>> = report
                .orphans
                .iter()
                .map(|orphan| {
                    let outcome = if !orphan.error.is_empty() {
                        format!("failed: {}", orphan.error)
                    } else if orphan.reaped {
                        "reaped".to_string()
                    } else if report.dry_run && orphan.due {
                        "would reap".to_string()
                    } else if orphan.due {
                        "due next round".to_string()
                    } else {
                        "in grace period".to_string()
                    };
                    vec![
                        orphan.sandbox_id.clone(),
                        orphan.generation.to_string(),
                        orphan.reason.clone(),
                        orphan.action.clone(),
                        format!("{:.1}s", orphan.seen_for_ms as f64 / 1000.0),
                        outcome,
                    ]
                })
                .collect();
            print_table(
                &[
                    "SANDBOX",
                    "GENERATION",
                    "REASON",
                    "ACTION",
                    "SEEN FOR",
                    "OUTCOME",
                ],
                &rows,
            );
            println!(
                "{} orphan(s){} — leader {}; found {} and reaped {} since it started",
                report.orphans.len(),
                if report.dry_run {
                    " (dry run: nothing changed)"
                } else {
                    ""
                },
                report.leader_id,
                report.orphans_found_total,
                report.orphans_reaped_total
            );
        }
    }
    Ok(())
}

/// `cluster rotate-token-key`: any replica relays it to the leader, which
/// draws the new key. Shows key ids and deadlines only.
async fn cluster_rotate_token_key(
    client: &mut Client,
    output: Output,
    grace_seconds: u64,
) -> anyhow::Result<()> {
    let rotated = client
        .admin(|mut admin| async move {
            admin
                .rotate_token_key(v1::RotateTokenKeyRequest { grace_seconds })
                .await
        })
        .await?;
    match output {
        Output::Json => print_json(&json!({
            "key_id": rotated.key_id,
            "retired_key_id": rotated.retired_key_id,
            "retired_valid_until_ms": rotated.retired_valid_until_ms,
            "retired_valid_until": utc_timestamp(rotated.retired_valid_until_ms),
            "rotated_at_ms": rotated.rotated_at_ms,
            "retired_keys": rotated.retired_keys.iter().map(|key| json!({
                "key_id": key.key_id,
                "valid_until_ms": key.valid_until_ms,
                "valid_until": utc_timestamp(key.valid_until_ms),
            })).collect::<Vec<_>>(),
        })),
        Output::Table => {
            println!(
                "execution tokens are now minted with key {}",
                rotated.key_id
            );
            if grace_seconds == 0 {
                println!(
                    "tokens of key {} are refused from now on",
                    rotated.retired_key_id
                );
            } else {
                println!(
                    "tokens of key {} verify until {} (cluster clock), then are refused",
                    rotated.retired_key_id,
                    utc_timestamp(rotated.retired_valid_until_ms)
                );
            }
            for key in rotated
                .retired_keys
                .iter()
                .filter(|key| key.key_id != rotated.retired_key_id)
            {
                println!(
                    "tokens of key {} verify until {}",
                    key.key_id,
                    utc_timestamp(key.valid_until_ms)
                );
            }
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
/// The civil date from the day count is Howard Hinnant's `civil_from_days`
/// (proleptic Gregorian), a few lines rather than a date crate for one
/// timestamp.
pub(crate) fn utc_timestamp(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let of_day = ms.rem_euclid(86_400_000);
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600_000,
        of_day % 3_600_000 / 60_000,
        of_day % 60_000 / 1000,
        of_day % 1000
    )
}

/// Membership changes: sent to any replica, which forwards to the leader.
async fn cluster_change(
    client: &mut Client,
    output: Output,
    command: ClusterCommand,
) -> anyhow::Result<()> {
    let (info, done) = match command {
        ClusterCommand::AddLearner { node_id, address } => (
            client
                .admin(|mut admin| {
                    let request = v1::AddLearnerRequest {
                        node_id,
                        address: address.clone(),
                    };
                    async move { admin.add_learner(request).await }
                })
                .await?,
            format!("node {node_id} added as a learner"),
        ),
        ClusterCommand::Promote { node_id } => (
            client
                .admin(|mut admin| async move {
                    admin
                        .promote_learner(v1::PromoteLearnerRequest { node_id })
                        .await
                })
                .await?,
            format!("node {node_id} is now a voter"),
        ),
        ClusterCommand::Remove { node_id } => (
            client
                .admin(|mut admin| async move {
                    admin
                        .remove_member(v1::RemoveMemberRequest { node_id })
                        .await
                })
                .await?,
            format!("node {node_id} removed"),
        ),
        ClusterCommand::TransferLeader { node_id } => (
            client
                .admin(|mut admin| async move {
                    admin
                        .transfer_leader(v1::TransferLeaderRequest { node_id })
                        .await
                })
                .await?,
            format!("node {node_id} now leads"),
        ),
        ClusterCommand::Status { .. } | ClusterCommand::InitPki(_) | ClusterCommand::Restore(_) => {
            unreachable!("status, init-pki and restore are handled in run_client")
        }
        ClusterCommand::Snapshot(SnapshotCommand::Save { file }) => {
            return crate::backup::save(client, output, &file).await;
        }
        ClusterCommand::Reconcile { dry_run } => {
            return cluster_reconcile(client, output, dry_run).await;
        }
        ClusterCommand::RotateTokenKey { grace_seconds } => {
            return cluster_rotate_token_key(client, output, grace_seconds).await;
        }
    };
    match output {
        Output::Json => print_json(&json!({
            "leader_id": info.leader_id,
            "term": info.term,
            "members": info.members.iter().map(|member| json!({
                "node_id": member.node_id,
                "address": member.address,
                "role": member.role,
            })).collect::<Vec<_>>(),
        })),
        Output::Table => {
            println!("{done}");
            let members: Vec<String> = info
                .members
                .iter()
                .map(|member| format!("{}={} ({})", member.node_id, member.address, member.role))
                .collect();
            println!("members: {}", members.join(", "));
        }
    }
    Ok(())
}

/// Exit code for an error: 1 for failed requests.
pub fn report_error(error: &anyhow::Error) -> i32 {
    match error.downcast_ref::<ClientError>() {
        Some(client_error) => {
            eprintln!("error: {client_error}");
            1
        }
        None => {
            eprintln!("error: {}", describe(error));
            1
        }
    }
}

/// `error`'s message and its causes, joined by ": " like `{:#}`, without
/// a cause the message before it already ends with (an error that names
/// its source in its own message, as `cannot listen on ADDRESS: SOURCE`
/// does, would otherwise print the source twice).
pub fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.ends_with(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Where `palisade up` keeps its data by default.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from(".palisade")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// An error naming its source in its own message prints it once; a
    /// context added above it stays.
    #[test]
    fn describe_prints_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot listen on 127.0.0.1:7001: {source}")]
        struct Listen {
            source: std::io::Error,
        }
        let source = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let error = anyhow::Error::new(Listen { source }).context("replica 1");
        assert_eq!(
            format!("{error:#}"),
            "replica 1: cannot listen on 127.0.0.1:7001: address in use: address in use"
        );
        assert_eq!(
            describe(&error),
            "replica 1: cannot listen on 127.0.0.1:7001: address in use"
        );
        let plain = anyhow::anyhow!("no leader").context("palisade up");
        assert_eq!(describe(&plain), "palisade up: no leader");
    }

    #[test]
    fn timestamps_print_as_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_timestamp(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
        assert_eq!(utc_timestamp(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_and_trailing_commands_parse() {
        let cli = Cli::try_parse_from([
            "palisade", "-o", "json", "sandbox", "create", "demo", "--", "sleep", "-o",
        ])
        .unwrap();
        assert_eq!(cli.output, Output::Json);
        let Command::Sandbox(sandbox::SandboxCommand::Create { command, .. }) = cli.command else {
            panic!("parsed as sandbox create");
        };
        assert_eq!(command, vec!["sleep", "-o"]);
    }
}
