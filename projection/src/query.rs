//! [`Projection`]: the handle the gateway reads the projection through —
//! its status, read-your-writes waits, and `ListSandboxes` served from
//! PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_lifecycle::limits::{PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX};
use palisade_lifecycle::{Sandbox, SandboxPhase};
use sqlx::{PgPool, Row};
use tokio::sync::watch;

use crate::changes::ProjectedRows;
use crate::error::{ProjectionError, from_db};
use crate::status::{LagSamples, ProjectionStatus, ProjectorState};
use crate::store::{self, Checkpoint, SANDBOX_COLUMNS};

/// How often a read-your-writes wait reads the checkpoint itself when
/// another replica projects. Only a fallback: a standing-by projector's
/// status follows the projecting replica's commits (it is notified, see
/// [`CHECKPOINT_CHANNEL`](crate::store::CHECKPOINT_CHANNEL)), and the wait
/// ends as soon as the status reaches the index.
pub const WAIT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A `ListSandboxes` query, with the semantics of the state-served one:
/// ordered by (workspace, name), filtered server side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxQuery {
    /// Only this workspace (`None`: every workspace).
    pub workspace: Option<String>,
    /// Only these phases (empty: any).
    pub phases: Vec<SandboxPhase>,
    /// Only sandboxes carrying every one of these labels with these values
    /// (JSONB containment).
    pub label_selector: BTreeMap<String, String>,
    /// At most this many (0: [`PAGE_SIZE_DEFAULT`]; capped at
    /// [`PAGE_SIZE_MAX`]).
    pub page_size: usize,
    /// Start after this (workspace, name): the last item of the previous
    /// page.
    pub after: Option<(String, String)>,
}

/// One page of sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPage {
    /// The sandboxes, ordered by (workspace, name).
    pub sandboxes: Vec<Sandbox>,
    /// (workspace, name) to pass as `after` for the next page; `None` on
    /// the last page.
    pub next: Option<(String, String)>,
    /// The checkpoint the page was read at (same snapshot): the page
    /// reflects every log entry up to this index.
    pub projected_index: u64,
}

/// The projection, as the gateway queries it. Cheap to clone.
#[derive(Clone)]
pub struct Projection {
    pool: PgPool,
    status: watch::Receiver<ProjectionStatus>,
    applied: watch::Receiver<u64>,
    lag: Arc<LagSamples>,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("status", &*self.status.borrow())
            .finish()
    }
}

impl Projection {
    pub(crate) fn new(
        pool: PgPool,
        status: watch::Receiver<ProjectionStatus>,
        applied: watch::Receiver<u64>,
        lag: Arc<LagSamples>,
    ) -> Self {
        Self {
            pool,
            status,
            applied,
            lag,
        }
    }

    /// The readers' pool (for SQL consumers in tests and tools); the
    /// projector writes through a pool of its own.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The status now, with the lag measured against this replica's
    /// applied index. Show it in `palisade cluster status`.
    pub fn status(&self) -> ProjectionStatus {
        let mut status = self.status.borrow().clone();
        status.applied_index = *self.applied.borrow();
        status.lag_entries = status.applied_index.saturating_sub(status.projected_index);
        status.lag_ms = self.lag.lag_ms(status.projected_index, Instant::now());
        status
    }

    /// A receiver that changes whenever the projector's status does (not
    /// its lag, which moves with time: call [`Projection::status`]).
    pub fn subscribe(&self) -> watch::Receiver<ProjectionStatus> {
        self.status.clone()
    }

    /// Reads the checkpoint row.
    pub async fn checkpoint(&self) -> Result<Checkpoint, ProjectionError> {
        store::read_checkpoint(&self.pool).await
    }

    /// Read-your-writes: returns once the projection reflects log entry
    /// `index` (e.g. the index of the caller's write, or a read index), or
    /// fails with [`ProjectionError::Lagging`] after `timeout`.
    pub async fn wait_for_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<(), ProjectionError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut status = self.status.clone();
        let mut channel_open = true;
        loop {
            let (projected, projecting_here) = {
                let current = status.borrow_and_update();
                (
                    current.projected_index,
                    current.state == ProjectorState::Projecting,
                )
            };
            if projected >= index {
                return Ok(());
            }
            let lagging = || ProjectionError::Lagging {
                index,
                projected,
                waited: started.elapsed(),
            };
            if projecting_here && channel_open {
                // This replica projects: its status moves with each batch.
                tokio::select! {
                    changed = status.changed() => channel_open = changed.is_ok(),
                    () = tokio::time::sleep_until(deadline) => return Err(lagging()),
                }
            } else {
                // Another replica projects: this one's status follows its
                // commits; read the checkpoint now and then in case the
                // notifications stopped (or there is no projector here).
                tokio::select! {
                    changed = status.changed(), if channel_open => {
                        channel_open = changed.is_ok();
                        continue;
                    }
                    () = tokio::time::sleep(WAIT_POLL_INTERVAL) => {}
                    () = tokio::time::sleep_until(deadline) => return Err(lagging()),
                }
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                if let Ok(Ok(checkpoint)) =
                    tokio::time::timeout(remaining, store::read_checkpoint(&self.pool)).await
                    && checkpoint.position.index >= index
                {
                    return Ok(());
                }
            }
        }
    }

    /// `ListSandboxes` from the projection. Fails with
    /// [`ProjectionError::WorkspaceNotFound`] when a named workspace is
    /// not projected.
    pub async fn list_sandboxes(
        &self,
        query: &SandboxQuery,
    ) -> Result<SandboxPage, ProjectionError> {
        let page_size = match query.page_size {
            0 => PAGE_SIZE_DEFAULT,
            size => size.min(PAGE_SIZE_MAX),
        };
        let phases: Vec<&str> = query.phases.iter().map(|phase| phase.as_str()).collect();
        let selector = serde_json::to_value(&query.label_selector).map_err(|source| {
            ProjectionError::Decode {
                what: "label_selector",
                source,
            }
        })?;
        let (after_workspace, after_name) = match &query.after {
            Some((workspace, name)) => (Some(workspace.as_str()), Some(name.as_str())),
            None => (None, None),
        };
        // One statement, so the checkpoint is read in the page's snapshot.
        let rows = sqlx::query(&format!(
            "SELECT {SANDBOX_COLUMNS},
                    (SELECT applied_index FROM projection_checkpoint) AS projected_index
               FROM sandboxes s LEFT JOIN executions e ON e.sandbox_id = s.id
              WHERE ($1::text IS NULL OR s.workspace = $1)
                AND (cardinality($2::text[]) = 0 OR s.phase = ANY($2))
                AND s.labels @> $3::jsonb
                AND ($4::text IS NULL
                     OR (s.workspace, s.name) > ($4 COLLATE \"C\", $5 COLLATE \"C\"))
              ORDER BY s.workspace, s.name
              LIMIT $6"
        ))
        .bind(query.workspace.as_deref())
        .bind(&phases)
        .bind(&selector)
        .bind(after_workspace)
        .bind(after_name)
        .bind(i64::try_from(page_size + 1).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        let projected_index = match rows.first() {
            Some(row) => from_db("projected_index", row.try_get("projected_index")?)?,
            None => self.checkpoint().await?.position.index,
        };
        if rows.is_empty()
            && let Some(workspace) = &query.workspace
        {
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM workspaces WHERE name = $1)")
                    .bind(workspace)
                    .fetch_one(&self.pool)
                    .await?;
            if !exists {
                return Err(ProjectionError::WorkspaceNotFound(workspace.clone()));
            }
        }
        let mut sandboxes = rows
            .iter()
            .map(store::sandbox_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if sandboxes.len() > page_size {
            sandboxes.truncate(page_size);
            sandboxes
                .last()
                .map(|last| (last.workspace.clone(), last.name.clone()))
        } else {
            None
        };
        Ok(SandboxPage {
            sandboxes,
            next,
            projected_index,
        })
    }

    /// Reads every projected row back (tests, the chaos checker, audits).
    pub async fn rows(&self) -> Result<ProjectedRows, ProjectionError> {
        store::read_rows(&self.pool).await
    }
}
