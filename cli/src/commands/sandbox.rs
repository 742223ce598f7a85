//! `palisade sandbox ...`: create, get, list, watch, stop, start, delete.
//!
//! Every write carries a request id — the caller's (`--request-id`) or one
//! made here — and keeps it across the client's own retries and failovers,
//! so even a plain CLI call takes effect exactly once.

use std::collections::HashMap;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use palisade_proto::v1;
use serde_json::json;

use super::prune::run_prune;
use super::{
    Output, SANDBOX_HEADER, consistency, parse_key_value, parse_phase, print_json, print_sandbox,
    print_table, sandbox_json, sandbox_row, settled_ok,
};
use crate::client::{Client, ClientError};

/// Names a sandbox by name (in --workspace) or by --id.
#[derive(Debug, Args)]
pub struct SandboxSelector {
    /// Sandbox name (or give --id; stop/start/delete may instead name the
    /// sandbox through --expected-execution).
    #[arg(conflicts_with = "id")]
    pub name: Option<String>,
    /// Sandbox id (never resolves to a same-name replacement).
    #[arg(long)]
    pub id: Option<String>,
}

impl SandboxSelector {
    fn to_ref(&self, workspace: &str) -> Option<v1::SandboxRef> {
        match (&self.name, &self.id) {
            (_, Some(id)) => Some(v1::SandboxRef {
                id: id.clone(),
                ..Default::default()
            }),
            (Some(name), None) => Some(v1::SandboxRef {
                workspace: workspace.to_string(),
                name: name.clone(),
                id: String::new(),
            }),
            // Only with --expected-execution: the token names the sandbox.
            (None, None) => None,
        }
    }
}

/// Where `sandbox list` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListSourceArg {
    /// The replicated state (default).
    State,
    /// The PostgreSQL projection.
    Projection,
}

/// Restart policy of a new sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RestartPolicyArg {
    /// Never relaunch (default).
    Never,
    /// Relaunch after a non-zero exit or a lost execution.
    OnFailure,
    /// Relaunch after every exit.
    Always,
}

/// `palisade sandbox ...`
// The flattened selectors are documented on `SandboxSelector`; a doc comment
// on the field would not reach `--help`.
#[allow(missing_docs)]
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox running CMD (default: a long-running idle command)
    /// and wait until it is READY.
    ///
    /// Example: palisade sandbox create demo -- sleep 1000
    Create {
        /// Sandbox name: a DNS-1123 label (lowercase letters, digits, '-'; at
        /// most 63 characters), unique in the workspace.
        name: String,
        /// Label KEY=VALUE (repeatable).
        #[arg(long = "label", value_parser = parse_key_value)]
        labels: Vec<(String, String)>,
        /// Environment variable KEY=VALUE for the command (repeatable).
        #[arg(long = "env", value_parser = parse_key_value)]
        env: Vec<(String, String)>,
        /// Relaunch the command when it exits (a new generation each time).
        #[arg(long, value_enum, default_value_t = RestartPolicyArg::Never)]
        restart_policy: RestartPolicyArg,
        /// Container image to run the command in (`--driver docker`; default:
        /// the cluster's --docker-default-image). The process driver refuses
        /// it (INVALID_SPEC_IMAGE).
        #[arg(long)]
        image: Option<String>,
        /// CPU limit, in CPUs (e.g. 0.5; 0.01 to 1024). Docker driver only.
        #[arg(long)]
        cpus: Option<f64>,
        /// Memory limit: bytes, or with a suffix k, m, g (powers of 1024),
        /// e.g. 256m; at least 6m. Docker driver only.
        #[arg(long, value_parser = parse_memory)]
        memory: Option<u64>,
        /// Working directory of the command inside the image (absolute).
        /// Docker driver only.
        #[arg(long)]
        workdir: Option<String>,
        /// Idempotency key: retrying with the same id returns the original
        /// result instead of creating twice (default: a fresh, time-ordered
        /// UUID v7).
        #[arg(long)]
        request_id: Option<String>,
        /// Answer once the create is committed, without waiting for READY.
        #[arg(long)]
        no_wait: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Show one sandbox, with the execution token of its current execution.
    Get {
        #[command(flatten)]
        selector: SandboxSelector,
        /// Read this replica's local state (may be behind the leader).
        #[arg(long)]
        stale: bool,
    },
    /// List sandboxes (all pages).
    List {
        /// List every workspace.
        #[arg(long, short = 'A')]
        all_workspaces: bool,
        /// Only these phases (repeatable), e.g. --phase READY.
        #[arg(long = "phase")]
        phases: Vec<String>,
        /// Label selector, Kubernetes syntax (repeatable; all must hold):
        /// KEY=VALUE, KEY!=VALUE (or absent), KEY (exists), !KEY (absent),
        /// 'KEY in (A,B)', 'KEY notin (A,B)', comma-separated, e.g.
        /// -l env=dev,tier!=db,owner. Filtered by the server.
        #[arg(long = "selector", short = 'l')]
        selector: Vec<String>,
        /// Only sandboxes created at least this long ago, e.g. 90s, 30m,
        /// 12h, 7d, 1h30m (on the cluster's replicated clock).
        #[arg(long, value_parser = parse_duration_seconds)]
        older_than: Option<u64>,
        /// Page size of each request to the server.
        #[arg(long, default_value_t = 100)]
        page_size: u32,
        /// Read this replica's local state (may be behind the leader).
        #[arg(long)]
        stale: bool,
        /// Where to read: the replicated state, or the PostgreSQL projection
        /// (read-your-writes; needs replicas started with --postgres-url).
        #[arg(long, value_enum, default_value_t = ListSourceArg::State)]
        source: ListSourceArg,
    },
    /// Stream sandbox changes (phase changes, exits, replacements) until
    /// Ctrl-C; resumes after a disconnect or a leader change, on any
    /// endpoint, without losing or repeating an event.
    Watch {
        /// Watch one sandbox by name.
        name: Option<String>,
        /// Watch one sandbox by id.
        #[arg(long, conflicts_with = "name")]
        id: Option<String>,
        /// Watch every workspace.
        #[arg(long, short = 'A')]
        all_workspaces: bool,
        /// Resume after this resource version (default: list first).
        #[arg(long, default_value_t = 0)]
        resource_version: u64,
        /// Stop after this many events (default: never).
        #[arg(long)]
        max_events: Option<u64>,
    },
    /// Stop a sandbox's execution (SIGTERM, then SIGKILL) and wait for STOPPED.
    ///
    /// With --expected-execution TOKEN (from `get -o json`, `list` or
    /// `watch`), only that execution is stopped: if the sandbox runs another
    /// one by now, nothing happens and the command fails with
    /// STALE_EXECUTION.
    Stop {
        #[command(flatten)]
        selector: SandboxSelector,
        /// Stop only this execution (an execution token).
        #[arg(long)]
        expected_execution: Option<String>,
        /// Idempotency key (default: a fresh, time-ordered UUID v7).
        #[arg(long)]
        request_id: Option<String>,
        /// Answer once the stop is committed, without waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Start a new execution (generation + 1) and wait for READY.
    Start {
        #[command(flatten)]
        selector: SandboxSelector,
        /// Start only if this (stopped) execution is still the current one.
        #[arg(long)]
        expected_execution: Option<String>,
        /// Idempotency key (default: a fresh, time-ordered UUID v7).
        #[arg(long)]
        request_id: Option<String>,
        /// Answer once the start is committed, without waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Delete the sandboxes in which nothing runs (ERROR, STOPPED and
    /// COMPLETED by default), through every page of the listing, each
    /// delete bound to the id (and execution) it was listed with: a
    /// same-name replacement created meanwhile is left alone and reported
    /// as skipped. Prints a summary (pruned / skipped / failed, with
    /// reasons); exits 0 only when no delete failed. Same as `sandbox
    /// delete --prune`.
    ///
    /// Example: palisade sandbox prune --phase ERROR -l team=ml --older-than 7d
    Prune {
        #[command(flatten)]
        args: PruneArgs,
    },
    /// Print an execution's output (stdout to stdout, stderr to stderr).
    ///
    /// Served by the replica the CLI reaches, through its own compute
    /// driver (every replica holds it); with -f the CLI follows the output
    /// until the execution ends, resuming at another replica from where it
    /// was if its replica goes away (nothing lost, nothing repeated).
    Logs {
        #[command(flatten)]
        selector: SandboxSelector,
        /// Keep printing new output until the execution ends.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Which execution (default: the current one).
        #[arg(long)]
        generation: Option<u64>,
        /// Start with the last N lines of each stream.
        #[arg(long)]
        tail: Option<u32>,
    },
    /// Run a command in a READY sandbox: in its working directory, with its
    /// environment, as its user; print its output and exit with its exit
    /// code. Refused (INVALID_PHASE) unless the sandbox is READY.
    ///
    /// Example: palisade sandbox exec demo -- sh -c 'echo hi > note.txt'
    Exec {
        #[command(flatten)]
        selector: SandboxSelector,
        /// Extra environment variable KEY=VALUE (repeatable).
        #[arg(long = "env", value_parser = parse_key_value)]
        env: Vec<(String, String)>,
        /// Kill the command after this many seconds (default: one hour).
        #[arg(long)]
        timeout_seconds: Option<u32>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Delete a sandbox; waits until its executions are gone and the
    /// sandbox, its name and everything it owns are removed.
    ///
    /// Forms:
    ///
    ///   delete NAME                     delete whatever NAME names now
    ///
    ///   delete --id ID                  delete only that sandbox; if it is
    ///                                   already gone (even if its name now
    ///                                   belongs to a replacement) say so and
    ///                                   exit 0, leaving the replacement alone
    ///
    ///   delete NAME --expected-id ID    strict: if NAME now names another
    ///                                   sandbox, delete nothing and exit 1
    ///                                   (SANDBOX_IDENTITY_MISMATCH); if NAME
    ///                                   names nothing, "already deleted", exit 0
    ///
    ///   delete --all                    every sandbox of the workspace, each
    ///                                   bound to the id it was listed with
    ///
    ///   delete --prune [FILTERS]        = `sandbox prune`: the sandboxes in
    ///                                   which nothing runs (see its help)
    #[command(verbatim_doc_comment)]
    Delete {
        /// Sandbox name.
        #[arg(required_unless_present_any = ["id", "all", "expected_execution", "prune"], conflicts_with_all = ["id", "all", "prune"])]
        name: Option<String>,
        /// Prune instead: delete the sandboxes in inactive phases (exactly
        /// `palisade sandbox prune`, with the same flags).
        #[arg(long, conflicts_with_all = ["id", "all", "expected_id", "expected_execution", "request_id", "no_wait"])]
        prune: bool,
        #[command(flatten)]
        prune_args: PruneArgs,
        /// Delete only the sandbox with this id.
        #[arg(long, conflicts_with = "all")]
        id: Option<String>,
        /// Every sandbox of the workspace (through all pages).
        #[arg(long)]
        all: bool,
        /// With --all: how many sandboxes each list request returns.
        #[arg(long, default_value_t = DELETE_ALL_PAGE_SIZE, requires = "all")]
        page_size: u32,
        /// With NAME: delete only if NAME still names this sandbox id.
        #[arg(long, requires = "name")]
        expected_id: Option<String>,
        /// Delete only if this is still the current execution.
        #[arg(long, conflicts_with = "all")]
        expected_execution: Option<String>,
        /// Idempotency key (default: a fresh, time-ordered UUID v7).
        #[arg(long, conflicts_with = "all")]
        request_id: Option<String>,
        /// Answer once the delete is committed, without waiting.
        #[arg(long)]
        no_wait: bool,
    },
}

/// The filters and knobs of `sandbox prune` (and `delete --prune`).
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Every workspace (admins): each sandbox is deleted in its own
    /// workspace.
    #[arg(long = "all-workspaces", short = 'A')]
    pub all_workspaces: bool,
    /// Only these phases (repeatable): ERROR, STOPPED, COMPLETED (the
    /// default is all three; phases in which something runs are refused).
    #[arg(long = "phase")]
    pub phases: Vec<String>,
    /// Label selector, Kubernetes syntax (repeatable), as for `list`.
    #[arg(long = "selector", short = 'l')]
    pub selector: Vec<String>,
    /// Only sandboxes created at least this long ago (90s, 30m, 12h, 7d).
    #[arg(long, value_parser = parse_duration_seconds)]
    pub older_than: Option<u64>,
    /// How many deletes run at once.
    #[arg(long, default_value_t = crate::prune::PRUNE_CONCURRENCY_DEFAULT)]
    pub concurrency: usize,
    /// Show what would be pruned; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Page size of the listing (for tests of pagination).
    #[arg(long = "prune-page-size", hide = true, env = "PALISADE_PRUNE_PAGE_SIZE",
          default_value_t = crate::prune::PRUNE_PAGE_SIZE_DEFAULT)]
    pub prune_page_size: u32,
}

impl PruneArgs {
    /// Whether a prune-only flag was given.
    fn is_given(&self) -> bool {
        self.all_workspaces
            || !self.phases.is_empty()
            || !self.selector.is_empty()
            || self.older_than.is_some()
            || self.dry_run
            || self.concurrency != crate::prune::PRUNE_CONCURRENCY_DEFAULT
    }
}

/// Parses a duration (`90s`, `30m`, `12h`, `7d`, `2w`, `1h30m`; a bare
/// number is seconds) into seconds.
pub fn parse_duration_seconds(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; e.g. 30m, 12h, 7d".into());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(seconds);
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {text:?}; use s, m, h, d or w (e.g. 1h30m)"
                ));
            }
        };
        let value: u64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a unit needs a number before it (e.g. 30m)"))?;
        number.clear();
        total = value
            .checked_mul(unit)
            .and_then(|seconds| total.checked_add(seconds))
            .ok_or_else(|| format!("{text:?} is too long"))?;
    }
    if !number.is_empty() {
        return Err(format!(
            "{text:?}: the last number has no unit (s, m, h, d, w)"
        ));
    }
    Ok(total)
}

fn fresh_request_id(given: Option<String>) -> String {
    given.unwrap_or_else(palisade_proto::new_request_id)
}

/// Runs `palisade sandbox ...`.
pub async fn run(
    client: &mut Client,
    workspace: &str,
    output: Output,
    command: SandboxCommand,
) -> anyhow::Result<()> {
    match command {
        SandboxCommand::Create {
            name,
            labels,
            env,
            restart_policy,
            image,
            cpus,
            memory,
            workdir,
            request_id,
            no_wait,
            command,
        } => {
            let request = v1::CreateSandboxRequest {
                workspace: workspace.to_string(),
                name,
                spec: Some(v1::SandboxSpec {
                    command,
                    env: env.into_iter().collect(),
                    restart_policy: match restart_policy {
                        RestartPolicyArg::Never => v1::RestartPolicy::Never,
                        RestartPolicyArg::OnFailure => v1::RestartPolicy::OnFailure,
                        RestartPolicyArg::Always => v1::RestartPolicy::Always,
                    } as i32,
                    image: image.unwrap_or_default(),
                    cpus: cpus.unwrap_or_default(),
                    memory_bytes: memory.unwrap_or_default(),
                    workdir: workdir.unwrap_or_default(),
                    ..Default::default()
                }),
                labels: labels.into_iter().collect::<HashMap<_, _>>(),
                annotations: HashMap::new(),
                no_wait,
                request_id: fresh_request_id(request_id),
            };
            let sandbox = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.create_sandbox(request).await }
                })
                .await?;
            print_sandbox(output, &sandbox);
            settled_ok(&sandbox)
        }
        SandboxCommand::Prune { args } => run_prune(client, workspace, output, args).await,
        SandboxCommand::Logs {
            selector,
            follow,
            generation,
            tail,
        } => {
            let Some(reference) = selector.to_ref(workspace) else {
                anyhow::bail!("name the sandbox: NAME or --id ID");
            };
            super::data_plane::logs(client, reference, follow, generation, tail).await
        }
        SandboxCommand::Exec {
            selector,
            env,
            timeout_seconds,
            command,
        } => {
            let Some(reference) = selector.to_ref(workspace) else {
                anyhow::bail!("name the sandbox: NAME or --id ID");
            };
            let code = super::data_plane::exec(
                client,
                reference,
                command,
                env.into_iter().collect(),
                timeout_seconds.unwrap_or(0),
            )
            .await?;
            std::process::exit(code);
        }
        SandboxCommand::Get { selector, stale } => {
            let Some(reference) = selector.to_ref(workspace) else {
                anyhow::bail!("name the sandbox: NAME or --id ID");
            };
            let request = v1::GetSandboxRequest {
                sandbox: Some(reference),
                consistency: consistency(stale),
            };
            let sandbox = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.get_sandbox(request).await }
                })
                .await?;
            print_sandbox(output, &sandbox);
            Ok(())
        }
        SandboxCommand::List {
            all_workspaces,
            phases,
            selector,
            older_than,
            page_size,
            stale,
            source,
        } => {
            let phases = phases
                .iter()
                .map(|phase| parse_phase(phase))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let filter = ListFilter {
                all_workspaces,
                phases,
                selector: HashMap::new(),
                label_expression: selector.join(","),
                older_than_seconds: older_than.unwrap_or(0),
                page_size,
                consistency: consistency(stale),
                source: match source {
                    ListSourceArg::State => v1::ListSource::State,
                    ListSourceArg::Projection => v1::ListSource::Projection,
                } as i32,
            };
            let sandboxes = list_all(client, workspace, &filter).await?;
            match output {
                Output::Json => print_json(&serde_json::Value::Array(
                    sandboxes.iter().map(sandbox_json).collect(),
                )),
                Output::Table => {
                    let rows: Vec<Vec<String>> = sandboxes.iter().map(sandbox_row).collect();
                    print_table(&SANDBOX_HEADER, &rows);
                }
            }
            Ok(())
        }
        SandboxCommand::Watch {
            name,
            id,
            all_workspaces,
            resource_version,
            max_events,
        } => {
            let sandbox_id = match (name, id) {
                (_, Some(id)) => id,
                (Some(name), None) => {
                    let request = v1::GetSandboxRequest {
                        sandbox: Some(v1::SandboxRef {
                            workspace: workspace.to_string(),
                            name,
                            id: String::new(),
                        }),
                        consistency: 0,
                    };
                    let sandbox = client
                        .palisade(|mut api| {
                            let request = request.clone();
                            async move { api.get_sandbox(request).await }
                        })
                        .await?;
                    sandbox.metadata.unwrap_or_default().id
                }
                (None, None) => String::new(),
            };
            let request = v1::WatchSandboxesRequest {
                workspace: workspace.to_string(),
                all_workspaces,
                sandbox_id,
                resource_version,
            };
            watch(client, request, output, max_events).await
        }
        SandboxCommand::Stop {
            selector,
            expected_execution,
            request_id,
            no_wait,
        } => {
            if selector.to_ref(workspace).is_none() && expected_execution.is_none() {
                anyhow::bail!("name the sandbox: NAME, --id ID or --expected-execution TOKEN");
            }
            let request = v1::StopSandboxRequest {
                sandbox: selector.to_ref(workspace),
                no_wait,
                request_id: fresh_request_id(request_id),
                expected_execution: expected_execution.unwrap_or_default(),
            };
            let sandbox = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.stop_sandbox(request).await }
                })
                .await?;
            print_sandbox(output, &sandbox);
            Ok(())
        }
        SandboxCommand::Start {
            selector,
            expected_execution,
            request_id,
            no_wait,
        } => {
            if selector.to_ref(workspace).is_none() && expected_execution.is_none() {
                anyhow::bail!("name the sandbox: NAME, --id ID or --expected-execution TOKEN");
            }
            let request = v1::StartSandboxRequest {
                sandbox: selector.to_ref(workspace),
                no_wait,
                request_id: fresh_request_id(request_id),
                expected_execution: expected_execution.unwrap_or_default(),
            };
            let sandbox = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.start_sandbox(request).await }
                })
                .await?;
            print_sandbox(output, &sandbox);
            settled_ok(&sandbox)
        }
        SandboxCommand::Delete {
            name,
            prune,
            prune_args,
            id,
            all,
            expected_id,
            expected_execution,
            request_id,
            no_wait,
            page_size,
        } => {
            if prune {
                return run_prune(client, workspace, output, prune_args).await;
            }
            if prune_args.is_given() {
                anyhow::bail!(
                    "--all-workspaces, --phase, -l, --older-than, --concurrency and --dry-run \
                     go with --prune (or `palisade sandbox prune`)"
                );
            }
            if all {
                return delete_all(client, workspace, output, no_wait, page_size).await;
            }
            let reference = match (&name, &id) {
                (_, Some(id)) => Some(v1::SandboxRef {
                    id: id.clone(),
                    ..Default::default()
                }),
                (Some(name), None) => Some(v1::SandboxRef {
                    workspace: workspace.to_string(),
                    name: name.clone(),
                    id: String::new(),
                }),
                (None, None) => None,
            };
            let request = v1::DeleteSandboxRequest {
                sandbox: reference,
                no_wait,
                request_id: fresh_request_id(request_id),
                expected_sandbox_id: expected_id.clone().unwrap_or_default(),
                expected_execution: expected_execution.unwrap_or_default(),
            };
            // Already gone counts as done for `--id` and `NAME --expected-id`:
            // the sandbox the caller meant no longer exists.
            let gone_is_done = id.is_some() || expected_id.is_some();
            let deleted = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.delete_sandbox(request).await }
                })
                .await;
            match deleted {
                Ok(deleted) => {
                    print_deleted(output, &deleted.id, deleted.deleted, false);
                    Ok(())
                }
                Err(error)
                    if gone_is_done && error.reason().as_deref() == Some("SANDBOX_NOT_FOUND") =>
                {
                    let what = id.or(expected_id).unwrap_or_default();
                    print_deleted(output, &what, true, true);
                    Ok(())
                }
                Err(error) => Err(error.into()),
            }
        }
    }
}

fn print_deleted(output: Output, id: &str, deleted: bool, already: bool) {
    match output {
        Output::Json => print_json(&json!({
            "id": id,
            "deleted": deleted,
            "already_deleted": already,
        })),
        Output::Table if already => println!(
            "sandbox {id} is already deleted (nothing was touched; a same-name replacement is left alone)"
        ),
        Output::Table if deleted => println!("sandbox {id} deleted"),
        Output::Table => println!("sandbox {id} is being deleted"),
    }
}

struct ListFilter {
    all_workspaces: bool,
    phases: Vec<i32>,
    selector: HashMap<String, String>,
    label_expression: String,
    older_than_seconds: u64,
    page_size: u32,
    consistency: i32,
    source: i32,
}

async fn list_all(
    client: &mut Client,
    workspace: &str,
    filter: &ListFilter,
) -> Result<Vec<v1::Sandbox>, ClientError> {
    let request = v1::ListSandboxesRequest {
        // No workspace with all_workspaces: the flag says it all.
        workspace: if filter.all_workspaces {
            String::new()
        } else {
            workspace.to_string()
        },
        all_workspaces: filter.all_workspaces,
        page_size: filter.page_size,
        phases: filter.phases.clone(),
        label_selector: filter.selector.clone(),
        consistency: filter.consistency,
        source: filter.source,
        label_expression: filter.label_expression.clone(),
        older_than_seconds: filter.older_than_seconds,
        page_token: String::new(),
    };
    client.list_all_sandboxes(request).await
}

/// How many deletes `--all` runs at once.
const DELETE_ALL_CONCURRENCY: usize = 16;
/// Default page size of the listing behind `delete --all`.
const DELETE_ALL_PAGE_SIZE: u32 = 500;

async fn delete_all(
    client: &mut Client,
    workspace: &str,
    output: Output,
    no_wait: bool,
    page_size: u32,
) -> anyhow::Result<()> {
    let filter = ListFilter {
        all_workspaces: false,
        phases: Vec::new(),
        selector: HashMap::new(),
        label_expression: String::new(),
        older_than_seconds: 0,
        page_size,
        consistency: 0,
        source: 0,
    };
    let listed = list_all(client, workspace, &filter).await?;
    let total = listed.len();
    if output == Output::Table {
        eprintln!("deleting {total} sandbox(es) in workspace {workspace:?}...");
    }
    let deletes = listed.into_iter().map(|sandbox| {
        let mut client = client.clone();
        let meta = sandbox.metadata.unwrap_or_default();
        async move {
            // Bound to the listed id: a same-name replacement created since
            // the listing is never touched.
            let request = v1::DeleteSandboxRequest {
                sandbox: Some(v1::SandboxRef {
                    id: meta.id.clone(),
                    ..Default::default()
                }),
                no_wait,
                request_id: palisade_proto::new_request_id(),
                expected_sandbox_id: String::new(),
                expected_execution: String::new(),
            };
            let result = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.delete_sandbox(request).await }
                })
                .await;
            (meta, result)
        }
    });
    let mut results = futures::stream::iter(deletes).buffer_unordered(DELETE_ALL_CONCURRENCY);
    let mut report = Vec::new();
    let mut failures = 0;
    let mut done = 0;
    while let Some((meta, result)) = results.next().await {
        done += 1;
        let (status, error) = match result {
            Ok(_) => ("deleted", None),
            Err(error) if error.reason().as_deref() == Some("SANDBOX_NOT_FOUND") => {
                ("already deleted", None)
            }
            Err(error) => {
                failures += 1;
                ("failed", Some(error.to_string()))
            }
        };
        if output == Output::Table {
            match &error {
                Some(error) => eprintln!(
                    "[{done}/{total}] {} ({}): failed: {error}",
                    meta.name, meta.id
                ),
                None => eprintln!("[{done}/{total}] {} ({}): {status}", meta.name, meta.id),
            }
        }
        report.push(json!({"name": meta.name, "id": meta.id, "status": status, "error": error}));
    }
    if output == Output::Json {
        print_json(&serde_json::Value::Array(report));
    }
    if failures > 0 {
        anyhow::bail!("{failures} of {total} deletes failed");
    }
    Ok(())
}

/// Pause before resuming a broken watch.
const WATCH_RESUME_BACKOFF: Duration = Duration::from_millis(300);

async fn watch(
    client: &mut Client,
    mut request: v1::WatchSandboxesRequest,
    output: Output,
    max_events: Option<u64>,
) -> anyhow::Result<()> {
    let mut seen = 0u64;
    loop {
        let stream = client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.watch_sandboxes(request).await }
            })
            .await?;
        let mut stream = stream;
        loop {
            match stream.message().await {
                Ok(Some(event)) => {
                    request.resource_version = request.resource_version.max(event.resource_version);
                    print_event(output, &event);
                    seen += 1;
                    if max_events.is_some_and(|max| seen >= max) {
                        return Ok(());
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    let error = ClientError::Status(status);
                    if error.code() != Some(tonic::Code::Unavailable) {
                        return Err(error.into());
                    }
                    break;
                }
            }
        }
        // The replica went away (or lost its leader): resume where we were,
        // on whichever endpoint answers.
        client.forget_preferred();
        tokio::time::sleep(WATCH_RESUME_BACKOFF).await;
    }
}

fn print_event(output: Output, event: &v1::SandboxEvent) {
    let kind = v1::SandboxEventType::try_from(event.r#type)
        .map(|kind| kind.as_str_name().trim_start_matches("SANDBOX_EVENT_TYPE_"))
        .unwrap_or("UNSPECIFIED");
    let sandbox = event.sandbox.clone().unwrap_or_default();
    match output {
        Output::Json => {
            let line = json!({
                "type": kind,
                "resource_version": event.resource_version,
                "sandbox": sandbox_json(&sandbox),
            });
            println!("{line}");
        }
        Output::Table => {
            let row = sandbox_row(&sandbox);
            println!(
                "{:<8} rv={:<8} {} {} {} generation={}",
                kind, event.resource_version, row[0], row[1], row[2], row[3]
            );
        }
    }
}

/// Parses a memory size: bytes, or a number with k, m, g or t (powers of 1024,
/// case-insensitive, an optional trailing `b` or `i`/`ib`): `256m`, `1GiB`, `1048576`.
fn parse_memory(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: use bytes or a number with k, m, g or t"))?;
    let shift = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use k, m, g or t)"
            ));
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod memory_tests {
    use super::parse_memory;

    #[test]
    fn memory_sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_memory("1048576"), Ok(1_048_576));
        assert_eq!(parse_memory("256m"), Ok(256 << 20));
        assert_eq!(parse_memory("1GiB"), Ok(1 << 30));
        assert_eq!(parse_memory("8K"), Ok(8 << 10));
        assert!(parse_memory("12x").is_err());
        assert!(parse_memory("m").is_err());
        assert!(parse_memory("99999999999t").is_err());
    }
}
