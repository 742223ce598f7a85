//! Pruning: deleting the sandboxes that no longer run, in bulk, safely.
//! `palisade sandbox prune` and `palisade sandbox delete --prune` are this
//! module; other Rust tools call [`prune`] (re-exported by
//! [`crate::client`]) instead of writing the loop again.
//!
//! # Decisions (each one a bug of the client-side prune it replaces)
//!
//! - **Every page, by key range.** The listing walks every page with the
//!   server's `next_page_token`, a key-range cursor (the last (workspace,
//!   name) returned), never an offset: deletes running meanwhile (ours or
//!   anyone's) cannot shift a page and hide a sandbox.
//! - **List first, then delete.** The whole listing is taken before the
//!   first delete, so the total is known (progress, dry run) and a
//!   listing page is never read while our own deletes change it.
//! - **Each delete bound to what was listed.** Every delete names the
//!   sandbox by (workspace, name) with `expected_sandbox_id` = the listed
//!   id, and `expected_execution` = the listed execution token: a
//!   same-name replacement created since the listing is never touched
//!   (SANDBOX_IDENTITY_MISMATCH), nor a sandbox started again since
//!   (STALE_EXECUTION); both are reported as skipped, with the reason, as
//!   is a sandbox already gone (SANDBOX_NOT_FOUND).
//! - **All workspaces without a workspace.** With `all_workspaces` the
//!   listing sends no workspace at all (sending the default one alongside
//!   is what got such requests refused), and each delete names the
//!   sandbox's own workspace.
//! - **Bounded concurrency** ([`PRUNE_CONCURRENCY_DEFAULT`], at most
//!   [`PRUNE_CONCURRENCY_MAX`]), never a sequential loop.
//! - **Only inactive phases**: ERROR, STOPPED and COMPLETED (the command
//!   exited 0) by default ([`PRUNE_PHASES_DEFAULT`]); a phase in which
//!   something runs or an operation is in flight is refused.

use futures::StreamExt;
use palisade_lifecycle::limits::PRUNE_CONCURRENCY_MAX;
use palisade_proto::v1;
use serde::Serialize;

use crate::client::{Client, ClientError};

/// How many deletes run at once by default.
pub const PRUNE_CONCURRENCY_DEFAULT: usize = 8;
/// The phases pruned when none is given: every phase in which nothing runs.
pub const PRUNE_PHASES_DEFAULT: [v1::SandboxPhase; 3] = [
    v1::SandboxPhase::Error,
    v1::SandboxPhase::Stopped,
    v1::SandboxPhase::Completed,
];
/// Page size of the listing (the server's maximum is 1,000).
pub const PRUNE_PAGE_SIZE_DEFAULT: u32 = 500;

/// What to prune.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// The workspace (ignored with `all_workspaces`).
    pub workspace: String,
    /// Every workspace's sandboxes, each deleted in its own workspace.
    pub all_workspaces: bool,
    /// Only these phases, all inactive (empty: [`PRUNE_PHASES_DEFAULT`]).
    pub phases: Vec<v1::SandboxPhase>,
    /// A Kubernetes label selector (`env=dev,tier!=db,owner,!keep`).
    pub label_expression: String,
    /// Only sandboxes created at least this long ago (0: any age).
    pub older_than_seconds: u64,
    /// Deletes at once (1 to [`PRUNE_CONCURRENCY_MAX`]).
    pub concurrency: usize,
    /// Page size of the listing.
    pub page_size: u32,
    /// List what would be pruned; delete nothing.
    pub dry_run: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        Self {
            workspace: palisade_lifecycle::DEFAULT_WORKSPACE.to_string(),
            all_workspaces: false,
            phases: Vec::new(),
            label_expression: String::new(),
            older_than_seconds: 0,
            concurrency: PRUNE_CONCURRENCY_DEFAULT,
            page_size: PRUNE_PAGE_SIZE_DEFAULT,
            dry_run: false,
        }
    }
}

/// What happened to one listed sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum PruneOutcome {
    /// Deleted.
    Pruned,
    /// Would be deleted (dry run).
    WouldPrune,
    /// Left alone, and why (the server's reason: SANDBOX_IDENTITY_MISMATCH,
    /// STALE_EXECUTION, SANDBOX_NOT_FOUND).
    Skipped {
        /// The ErrorInfo reason.
        reason: String,
        /// What it means.
        message: String,
    },
    /// The delete failed.
    Failed {
        /// The ErrorInfo reason (or the gRPC code when there is none).
        reason: String,
        /// The error.
        message: String,
    },
}

/// One listed sandbox and its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct PruneItem {
    /// Its workspace.
    pub workspace: String,
    /// Its name when listed.
    pub name: String,
    /// Its id when listed.
    pub id: String,
    /// Its phase when listed.
    pub phase: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: PruneOutcome,
}

/// The summary of a prune.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PruneReport {
    /// Sandboxes the listing matched.
    pub listed: usize,
    /// Deleted (or, in a dry run, would be).
    pub pruned: usize,
    /// Left alone (see each item's reason).
    pub skipped: usize,
    /// Deletes that failed.
    pub failed: usize,
    /// A dry run: nothing was deleted.
    pub dry_run: bool,
    /// Every listed sandbox, in the order the deletes ended.
    pub items: Vec<PruneItem>,
}

/// Checks the options; `Err` says what to change.
pub fn check_options(options: &PruneOptions) -> Result<(), String> {
    if options.concurrency == 0 || options.concurrency > PRUNE_CONCURRENCY_MAX {
        return Err(format!(
            "--concurrency must be 1 to {PRUNE_CONCURRENCY_MAX}, not {}",
            options.concurrency
        ));
    }
    if let Some(active) = options
        .phases
        .iter()
        .find(|phase| !PRUNE_PHASES_DEFAULT.contains(phase))
    {
        return Err(format!(
            "prune deletes only sandboxes in which nothing runs (ERROR, STOPPED, COMPLETED), not {}; \
             delete others by name",
            active.as_str_name().trim_start_matches("SANDBOX_PHASE_")
        ));
    }
    Ok(())
}

/// Lists every sandbox `options` selects, through every page.
pub async fn list_prunable(
    client: &mut Client,
    options: &PruneOptions,
) -> Result<Vec<v1::Sandbox>, ClientError> {
    let phases = if options.phases.is_empty() {
        PRUNE_PHASES_DEFAULT.to_vec()
    } else {
        options.phases.clone()
    };
    let request = v1::ListSandboxesRequest {
        // No workspace at all with all_workspaces.
        workspace: if options.all_workspaces {
            String::new()
        } else {
            options.workspace.clone()
        },
        all_workspaces: options.all_workspaces,
        page_size: options.page_size,
        phases: phases.iter().map(|phase| *phase as i32).collect(),
        label_expression: options.label_expression.clone(),
        older_than_seconds: options.older_than_seconds,
        ..Default::default()
    };
    client.list_all_sandboxes(request).await
}

/// Prunes what `options` selects: lists every page, calls `on_listed` with
/// the count, then (unless a dry run) deletes with bounded concurrency,
/// calling `on_item` as each delete ends. Errors of the listing end the
/// prune; errors of single deletes are in the report.
pub async fn prune(
    client: &mut Client,
    options: &PruneOptions,
    on_listed: impl FnOnce(usize),
    on_item: impl FnMut(&PruneItem),
) -> Result<PruneReport, ClientError> {
    let listed = list_prunable(client, options).await?;
    on_listed(listed.len());
    Ok(delete_listed(client, options, listed, on_item).await)
}

/// The second half of [`prune`]: deletes (or, in a dry run, reports) what
/// [`list_prunable`] listed, each delete bound to the listed id and
/// execution, `options.concurrency` at a time.
pub async fn delete_listed(
    client: &mut Client,
    options: &PruneOptions,
    listed: Vec<v1::Sandbox>,
    mut on_item: impl FnMut(&PruneItem),
) -> PruneReport {
    let mut report = PruneReport {
        listed: listed.len(),
        dry_run: options.dry_run,
        ..Default::default()
    };
    let describe = |sandbox: &v1::Sandbox| {
        let meta = sandbox.metadata.clone().unwrap_or_default();
        let phase = sandbox
            .status
            .as_ref()
            .and_then(|status| v1::SandboxPhase::try_from(status.phase).ok())
            .map(|phase| {
                phase
                    .as_str_name()
                    .trim_start_matches("SANDBOX_PHASE_")
                    .to_string()
            })
            .unwrap_or_default();
        (meta, phase)
    };
    if options.dry_run {
        for sandbox in &listed {
            let (meta, phase) = describe(sandbox);
            let item = PruneItem {
                workspace: meta.workspace,
                name: meta.name,
                id: meta.id,
                phase,
                outcome: PruneOutcome::WouldPrune,
            };
            on_item(&item);
            report.pruned += 1;
            report.items.push(item);
        }
        return report;
    }
    let deletes = listed.into_iter().map(|sandbox| {
        let mut client = client.clone();
        let (meta, phase) = describe(&sandbox);
        let token = sandbox.execution_token;
        async move {
            let request = v1::DeleteSandboxRequest {
                sandbox: Some(v1::SandboxRef {
                    workspace: meta.workspace.clone(),
                    name: meta.name.clone(),
                    id: String::new(),
                }),
                no_wait: false,
                // Kept across the client's own retries: exactly once.
                request_id: palisade_proto::new_request_id(),
                expected_sandbox_id: meta.id.clone(),
                expected_execution: token,
            };
            let result = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.delete_sandbox(request).await }
                })
                .await;
            let outcome = match result {
                Ok(_) => PruneOutcome::Pruned,
                Err(error) => outcome_of(&error),
            };
            PruneItem {
                workspace: meta.workspace,
                name: meta.name,
                id: meta.id,
                phase,
                outcome,
            }
        }
    });
    let mut results = futures::stream::iter(deletes).buffer_unordered(options.concurrency);
    while let Some(item) = results.next().await {
        match &item.outcome {
            PruneOutcome::Pruned | PruneOutcome::WouldPrune => report.pruned += 1,
            PruneOutcome::Skipped { .. } => report.skipped += 1,
            PruneOutcome::Failed { .. } => report.failed += 1,
        }
        on_item(&item);
        report.items.push(item);
    }
    report
}

fn outcome_of(error: &ClientError) -> PruneOutcome {
    let reason = error.reason();
    let skipped = |message: &str| PruneOutcome::Skipped {
        reason: reason.clone().unwrap_or_default(),
        message: message.to_string(),
    };
    match reason.as_deref() {
        Some("SANDBOX_IDENTITY_MISMATCH") => {
            skipped("the name now belongs to another sandbox (a replacement); left alone")
        }
        Some("STALE_EXECUTION") => {
            skipped("the sandbox was started again since it was listed; left alone")
        }
        Some("SANDBOX_NOT_FOUND") => skipped("already deleted"),
        _ => PruneOutcome::Failed {
            reason: reason
                .or_else(|| error.code().map(|code| format!("{code:?}")))
                .unwrap_or_else(|| "UNREACHABLE".to_string()),
            message: error.to_string(),
        },
    }
}
