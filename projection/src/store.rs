//! Every SQL statement of the projection: the schema migrations, the
//! checkpoint, batch and resync transactions, and the reads.
//!
//! Statements are runtime queries (`sqlx::query`), so nothing needs a
//! database at build time. Every multi-row write is one statement over
//! arrays (`unnest`, `= ANY($1)`), never a loop of single-row statements;
//! a statement carries at most [`ROWS_PER_STATEMENT_MAX`] rows.
//!
//! # The batch, in order
//!
//! The writes of a batch are the SQL function `palisade_project_batch`
//! (migration 0004), called once per batch: a statement outside a
//! transaction is its own, so the batch is applied entirely or not at all,
//! in one round trip to the server (see [`write_batch`]). In order:
//!
//! 1. the guarded checkpoint update (`WHERE applied_index < $new AND
//!    applied_index = $from`): it takes the checkpoint row's lock, so a
//!    second projector's call queues behind it and then finds the
//!    checkpoint moved and fails (SQLSTATE `PLS01`) before writing
//!    anything. It NOTIFYs [`CHECKPOINT_CHANNEL`] with the new checkpoint,
//!    which PostgreSQL delivers when (and only if) the transaction
//!    commits;
//! 2. deletes, children before parents: removed sandboxes with everything
//!    they own (one statement), cleared and revoked sessions, policies,
//!    workspaces;
//! 3. upserts, parents before children: workspaces, sandboxes, their
//!    executions, sessions, policies;
//! 4. the events;
//! 5. the shadow state, when due.
//!
//! A batch with a set of more rows than one statement carries, and a
//! resync, are transactions of several calls: the first advances the
//! checkpoint, each later one writes one chunk of one set, in that order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use palisade_lifecycle::{
    Execution, LogPosition, Operation, Sandbox, SandboxPhase, SandboxPolicy, SandboxSpec, State,
    Workspace, WorkspacePhase,
};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Row};

use crate::changes::{EventRow, ProjectedRows, SessionRow, WritePlan};
use crate::error::{ProjectionError, from_db, to_db};

/// Most rows of one set one call of the batch function writes; larger
/// sets are split over several calls of the same transaction.
pub const ROWS_PER_STATEMENT_MAX: usize = 10_000;

/// The embedded schema migrations (`projection/migrations`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The checkpoint row: the last log entry the projection reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Log index and term of that entry (0, 0 before any).
    pub position: LogPosition,
    /// The cluster whose log was projected, once known.
    pub cluster_id: Option<String>,
}

/// The channel every batch and resync transaction NOTIFYs when it
/// commits, with the new checkpoint as JSON (`{"index": 42, "term": 3}`),
/// in commit order. Standing-by projectors LISTEN to it, so their status
/// and read-your-writes waits follow the checkpoint without polling; a
/// consumer of the projection may LISTEN too, to read what just landed.
/// A notification is a hint: after a lost connection, read the
/// checkpoint (notifications sent meanwhile are gone), and after a
/// PostgreSQL crash the checkpoint may be earlier than the last
/// notification said (see the projector's "Durability").
pub const CHECKPOINT_CHANNEL: &str = "palisade_projection_checkpoint";

/// The checkpoint a [`CHECKPOINT_CHANNEL`] notification carries, or
/// `None` if the payload is not one.
pub fn checkpoint_notified(payload: &str) -> Option<LogPosition> {
    #[derive(serde::Deserialize)]
    struct Notified {
        index: u64,
        term: u64,
    }
    let notified: Notified = serde_json::from_str(payload).ok()?;
    Some(LogPosition {
        index: notified.index,
        term: notified.term,
    })
}

/// Starts listening to [`CHECKPOINT_CHANNEL`] on a connection of `pool`
/// (held until the listener is dropped).
pub(crate) async fn listen_checkpoints(
    pool: &PgPool,
) -> Result<sqlx::postgres::PgListener, ProjectionError> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(CHECKPOINT_CHANNEL).await?;
    Ok(listener)
}

/// A point inside a batch transaction, for fault injection (tests, chaos).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchStage {
    /// The guarded checkpoint update succeeded (the row is locked).
    CheckpointAdvanced,
    /// Every row and event is written; the transaction is not committed.
    BeforeCommit,
}

/// Called at each [`BatchStage`]; the transaction waits for the returned
/// future. A test makes it never finish and aborts the projector there, to
/// crash between statements.
pub type StageHook =
    Arc<dyn Fn(BatchStage) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

async fn at_stage(hook: Option<&StageHook>, stage: BatchStage) {
    if let Some(hook) = hook {
        hook(stage).await;
    }
}

/// Applies the schema migrations (idempotent; concurrent callers serialize
/// on sqlx's advisory lock).
pub async fn migrate(pool: &PgPool) -> Result<(), ProjectionError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Reads the checkpoint row.
pub async fn read_checkpoint(pool: &PgPool) -> Result<Checkpoint, ProjectionError> {
    let row =
        sqlx::query("SELECT applied_index, applied_term, cluster_id FROM projection_checkpoint")
            .fetch_one(pool)
            .await?;
    Ok(Checkpoint {
        position: LogPosition {
            index: from_db("applied_index", row.try_get("applied_index")?)?,
            term: from_db("applied_term", row.try_get("applied_term")?)?,
        },
        cluster_id: row.try_get("cluster_id")?,
    })
}

/// Reclaims the dead versions of `projection_shadow`'s row (each stored
/// shadow replaces the previous one). Runs outside any transaction, as
/// VACUUM must.
pub(crate) async fn vacuum_shadow(pool: &PgPool) -> Result<(), ProjectionError> {
    sqlx::query("VACUUM projection_shadow")
        .execute(pool)
        .await?;
    Ok(())
}

/// Vacuums the tables whose rows the projection deletes (see
/// `projector::vacuum_due`). Outside any transaction, as VACUUM must;
/// `SKIP_LOCKED` passes over a table autovacuum is vacuuming rather than
/// wait for it.
pub(crate) async fn vacuum_removals(pool: &PgPool) -> Result<(), ProjectionError> {
    sqlx::query("VACUUM (SKIP_LOCKED) sandboxes, executions, ssh_sessions, policies")
        .execute(pool)
        .await?;
    Ok(())
}

/// Deletes the `lifecycle_events` rows of entries in (`after`, `through`]
/// (from the first row when `after` is `None`); returns how many. The
/// range is on the primary key: the cost is the rows deleted. Only here
/// may rows be deleted (the append-only trigger, migration 0003).
pub(crate) async fn prune_events(
    pool: &PgPool,
    after: Option<u64>,
    through: u64,
) -> Result<u64, ProjectionError> {
    let after = after.map_or(-1, |index| index as i64);
    let mut transaction = pool.begin().await?;
    // The table refuses deletes unless this transaction says it is the
    // retention (migration 0003).
    sqlx::query("SET LOCAL palisade.events_retention = 'on'")
        .execute(&mut *transaction)
        .await?;
    let deleted =
        sqlx::query("DELETE FROM lifecycle_events WHERE log_index > $1 AND log_index <= $2")
            .bind(after)
            .bind(through as i64)
            .execute(&mut *transaction)
            .await?;
    transaction.commit().await?;
    Ok(deleted.rows_affected())
}

/// Reads the stored shadow state, if any: its position, the state and
/// the size it is stored in.
pub(crate) async fn read_shadow(
    pool: &PgPool,
) -> Result<Option<(LogPosition, State, u64)>, ProjectionError> {
    let Some(row) = sqlx::query("SELECT applied_index, applied_term, state FROM projection_shadow")
        .fetch_optional(pool)
        .await?
    else {
        return Ok(None);
    };
    let position = LogPosition {
        index: from_db("shadow applied_index", row.try_get("applied_index")?)?,
        term: from_db("shadow applied_term", row.try_get("applied_term")?)?,
    };
    let bytes: Vec<u8> = row.try_get("state")?;
    let state = serde_json::from_slice(&bytes).map_err(|source| ProjectionError::Decode {
        what: "the stored shadow state",
        source,
    })?;
    Ok(Some((position, state, bytes.len() as u64)))
}

/// What a committed batch or resync wrote.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Written {
    pub events: usize,
}

/// One batch: the guarded checkpoint advance from `from` to `to` and the
/// rows of `plan`, in one transaction. Fails with
/// [`ProjectionError::CheckpointMoved`] (rolled back) when the checkpoint
/// is no longer at `from`.
///
/// One call of the `palisade_project_batch` function (migration 0004),
/// which runs the batch's statements in order: a statement outside a
/// transaction is its own, so the batch costs one round trip to the
/// server instead of one per statement and two for BEGIN and COMMIT. A
/// plan with a set of more than [`ROWS_PER_STATEMENT_MAX`] rows (a tick
/// that replaced the sessions of sandboxes holding thousands) is written
/// by a transaction of calls instead: the first advances the checkpoint,
/// each of the others writes one chunk of one set. So is a batch with a
/// stage hook (tests), for the hook to stop it between the calls and
/// before the commit.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn write_batch(
    pool: &PgPool,
    node_id: u64,
    from: u64,
    to: LogPosition,
    cluster_id: Option<&str>,
    plan: &WritePlan,
    shadow: Option<(LogPosition, &[u8])>,
    hook: Option<&StageHook>,
) -> Result<Written, ProjectionError> {
    // The commit returns before its WAL is flushed: the projector's
    // sessions run with `synchronous_commit = off` (see the projector's
    // module doc, "Durability"), so a batch never waits for PostgreSQL's
    // disk.
    let advance = Advance {
        node_id,
        from,
        to,
        cluster_id,
    };
    let all = Rows::all(plan);
    let fits_one_call = all.largest_set() <= ROWS_PER_STATEMENT_MAX;
    if fits_one_call && hook.is_none() {
        project_call(Some(&advance), all, shadow)?
            .execute(pool)
            .await
            .map_err(|error| advance.failed(error))?;
    } else {
        let mut tx = pool.begin().await?;
        let first = if fits_one_call { all } else { Rows::default() };
        project_call(Some(&advance), first, shadow)?
            .execute(&mut *tx)
            .await
            .map_err(|error| advance.failed(error))?;
        at_stage(hook, BatchStage::CheckpointAdvanced).await;
        if !fits_one_call {
            for rows in Rows::chunked(plan) {
                project_call(None, rows, None)?.execute(&mut *tx).await?;
            }
        }
        at_stage(hook, BatchStage::BeforeCommit).await;
        tx.commit().await?;
    }
    Ok(Written {
        events: plan.events.len(),
    })
}

/// A resync: replaces every projected row with the rows of `state` (at
/// `to`) in one transaction, records the gap in `projection_resyncs`, and
/// stores the shadow. Guarded like a batch.
pub(crate) async fn write_resync(
    pool: &PgPool,
    node_id: u64,
    from: u64,
    to: LogPosition,
    state: &State,
    shadow: &[u8],
) -> Result<(), ProjectionError> {
    let advance = Advance {
        node_id,
        from,
        to,
        cluster_id: state
            .cluster
            .as_ref()
            .map(|cluster| cluster.cluster_id.as_str()),
    };
    let mut tx = pool.begin().await?;
    project_call(Some(&advance), Rows::default(), Some((to, shadow)))?
        .execute(&mut *tx)
        .await
        .map_err(|error| advance.failed(error))?;
    // DELETE, not TRUNCATE: readers keep seeing the old rows until commit.
    for table in [
        "ssh_sessions",
        "policies",
        "executions",
        "sandboxes",
        "workspaces",
    ] {
        sqlx::query(&format!("DELETE FROM {table}"))
            .execute(&mut *tx)
            .await?;
    }
    let plan = WritePlan::of_state(state);
    for rows in Rows::chunked(&plan) {
        project_call(None, rows, None)?.execute(&mut *tx).await?;
    }
    sqlx::query(
        "INSERT INTO projection_resyncs (from_index, to_index, to_term, projected_by)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(to_db("from_index", from)?)
    .bind(to_db("to_index", to.index)?)
    .bind(to_db("to_term", to.term)?)
    .bind(to_db("node_id", node_id)?)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The guarded checkpoint advance of a batch or resync.
struct Advance<'a> {
    node_id: u64,
    from: u64,
    to: LogPosition,
    cluster_id: Option<&'a str>,
}

impl Advance<'_> {
    /// The error of a call that advanced the checkpoint: the guard's
    /// refusal is [`ProjectionError::CheckpointMoved`].
    fn failed(&self, error: sqlx::Error) -> ProjectionError {
        match error {
            sqlx::Error::Database(error) if error.code().as_deref() == Some(CHECKPOINT_MOVED) => {
                ProjectionError::CheckpointMoved {
                    expected: self.from,
                }
            }
            error => error.into(),
        }
    }
}

/// The SQLSTATE `palisade_project_batch` fails with when the checkpoint is
/// not where the batch starts (migration 0004).
const CHECKPOINT_MOVED: &str = "PLS01";

/// The rows one call of `palisade_project_batch` writes: a plan's sets, or
/// chunks of them.
#[derive(Debug, Default, Clone, Copy)]
struct Rows<'a> {
    sandboxes_removed: &'a [String],
    sessions_cleared: &'a [String],
    sessions_removed: &'a [(String, String)],
    policies_removed: &'a [String],
    workspaces_removed: &'a [String],
    workspaces_upsert: &'a [Workspace],
    sandboxes_upsert: &'a [Sandbox],
    sessions_upsert: &'a [SessionRow],
    policies_upsert: &'a [(String, SandboxPolicy)],
    events: &'a [EventRow],
}

impl<'a> Rows<'a> {
    fn all(plan: &'a WritePlan) -> Self {
        Rows {
            sandboxes_removed: &plan.sandboxes_removed,
            sessions_cleared: &plan.sessions_cleared,
            sessions_removed: &plan.sessions_removed,
            policies_removed: &plan.policies_removed,
            workspaces_removed: &plan.workspaces_removed,
            workspaces_upsert: &plan.workspaces_upsert,
            sandboxes_upsert: &plan.sandboxes_upsert,
            sessions_upsert: &plan.sessions_upsert,
            policies_upsert: &plan.policies_upsert,
            events: &plan.events,
        }
    }

    /// The number of rows of the largest set (of removals, of upserts, of
    /// events).
    fn largest_set(&self) -> usize {
        [
            self.sandboxes_removed.len(),
            self.sessions_cleared.len(),
            self.sessions_removed.len(),
            self.policies_removed.len(),
            self.workspaces_removed.len(),
            self.workspaces_upsert.len(),
            self.sandboxes_upsert.len(),
            self.sessions_upsert.len(),
            self.policies_upsert.len(),
            self.events.len(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// `plan`'s rows as calls of one chunk of at most
    /// [`ROWS_PER_STATEMENT_MAX`] rows of one set each, in the order the
    /// function writes the sets (deletes, then upserts, then events): in
    /// sequence they do what one call of the whole plan would.
    fn chunked(plan: &'a WritePlan) -> Vec<Self> {
        fn chunks<'a, T>(
            calls: &mut Vec<Rows<'a>>,
            set: &'a [T],
            rows: impl Fn(&'a [T]) -> Rows<'a>,
        ) {
            calls.extend(set.chunks(ROWS_PER_STATEMENT_MAX).map(rows));
        }
        let mut calls = Vec::new();
        chunks(&mut calls, &plan.sandboxes_removed, |chunk| Rows {
            sandboxes_removed: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.sessions_cleared, |chunk| Rows {
            sessions_cleared: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.sessions_removed, |chunk| Rows {
            sessions_removed: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.policies_removed, |chunk| Rows {
            policies_removed: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.workspaces_removed, |chunk| Rows {
            workspaces_removed: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.workspaces_upsert, |chunk| Rows {
            workspaces_upsert: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.sandboxes_upsert, |chunk| Rows {
            sandboxes_upsert: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.sessions_upsert, |chunk| Rows {
            sessions_upsert: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.policies_upsert, |chunk| Rows {
            policies_upsert: chunk,
            ..Rows::default()
        });
        chunks(&mut calls, &plan.events, |chunk| Rows {
            events: chunk,
            ..Rows::default()
        });
        calls
    }
}

/// A call of `palisade_project_batch` (its parameters in the order
/// migration 0004 declares them): advancing the checkpoint as `advance`
/// says (`None`: a later call of the same transaction), writing `rows`
/// and, if given, the shadow state.
fn project_call<'a>(
    advance: Option<&Advance<'a>>,
    rows: Rows<'a>,
    shadow: Option<(LogPosition, &'a [u8])>,
) -> Result<Bound<'a>, ProjectionError> {
    let (node_id, from, to_index, to_term, cluster_id) = match advance {
        Some(advance) => (
            Some(to_db("node_id", advance.node_id)?),
            Some(to_db("checkpoint", advance.from)?),
            Some(to_db("applied_index", advance.to.index)?),
            Some(to_db("applied_term", advance.to.term)?),
            advance.cluster_id,
        ),
        None => (None, None, None, None, None),
    };
    let (sessions_removed_sandbox, sessions_removed_id): (Vec<&str>, Vec<&str>) = rows
        .sessions_removed
        .iter()
        .map(|(sandbox, session)| (sandbox.as_str(), session.as_str()))
        .unzip();
    let (shadow_index, shadow_term, shadow_bytes) = match shadow {
        Some((position, bytes)) => (
            Some(to_db("shadow applied_index", position.index)?),
            Some(to_db("shadow applied_term", position.term)?),
            Some(bytes),
        ),
        None => (None, None, None),
    };
    let query = sqlx::query(
        "SELECT palisade_project_batch(
            $1, $2, $3, $4, $5, $6,
            $7, $8, $9, $10, $11, $12,
            $13, $14, $15, $16, $17,
            $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31,
            $32, $33, $34,
            $35, $36, $37, $38,
            $39, $40, $41, $42,
            $43, $44, $45, $46, $47, $48, $49, $50, $51, $52, $53, $54, $55,
            $56, $57, $58)",
    )
    .bind(node_id)
    .bind(from)
    .bind(to_index)
    .bind(to_term)
    .bind(cluster_id)
    .bind(CHECKPOINT_CHANNEL)
    .bind(rows.sandboxes_removed)
    .bind(rows.sessions_cleared)
    .bind(sessions_removed_sandbox)
    .bind(sessions_removed_id)
    .bind(rows.policies_removed)
    .bind(rows.workspaces_removed);
    let query = WorkspaceColumns::of(rows.workspaces_upsert)?.bind(query);
    let query = SandboxColumns::of(rows.sandboxes_upsert)?.bind(query);
    let query = SessionColumns::of(rows.sessions_upsert).bind(query);
    let query = PolicyColumns::of(rows.policies_upsert)?.bind(query);
    let query = EventColumns::of(rows.events)?.bind(query);
    Ok(query
        .bind(shadow_index)
        .bind(shadow_term)
        .bind(shadow_bytes))
}

fn json<T: serde::Serialize>(what: &'static str, value: &T) -> Result<Value, ProjectionError> {
    serde_json::to_value(value).map_err(|source| ProjectionError::Decode { what, source })
}

fn workspace_phase_name(phase: WorkspacePhase) -> &'static str {
    match phase {
        WorkspacePhase::Active => "ACTIVE",
        WorkspacePhase::Terminating => "TERMINATING",
    }
}

/// The sandbox-removal statement: each removed sandbox with its execution,
/// sessions and policy, however many, in one statement (data-modifying
/// CTEs; the foreign keys are checked at the end of the statement).
pub const REMOVE_SANDBOXES_SQL: &str = "
    WITH removed_sessions AS (DELETE FROM ssh_sessions WHERE sandbox_id = ANY($1)),
         removed_policies AS (DELETE FROM policies WHERE sandbox_id = ANY($1)),
         removed_executions AS (DELETE FROM executions WHERE sandbox_id = ANY($1))
    DELETE FROM sandboxes WHERE id = ANY($1)";

/// A bound query (`sqlx::query(...)` with some arguments bound).
type Bound<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// Workspace rows as column arrays, the way the statements take them.
struct WorkspaceColumns<'a> {
    names: Vec<&'a str>,
    ids: Vec<&'a str>,
    phases: Vec<&'static str>,
    versions: Vec<i64>,
    created: Vec<i64>,
}

impl<'a> WorkspaceColumns<'a> {
    fn of(rows: &'a [Workspace]) -> Result<Self, ProjectionError> {
        let mut columns = WorkspaceColumns {
            names: Vec::with_capacity(rows.len()),
            ids: Vec::with_capacity(rows.len()),
            phases: Vec::with_capacity(rows.len()),
            versions: Vec::with_capacity(rows.len()),
            created: Vec::with_capacity(rows.len()),
        };
        for workspace in rows {
            columns.names.push(workspace.name.as_str());
            columns.ids.push(workspace.id.as_str());
            columns.phases.push(workspace_phase_name(workspace.phase));
            columns
                .versions
                .push(to_db("resource_version", workspace.resource_version)?);
            columns.created.push(workspace.created_at_ms);
        }
        Ok(columns)
    }

    fn bind(self, query: Bound<'a>) -> Bound<'a> {
        query
            .bind(self.names)
            .bind(self.ids)
            .bind(self.phases)
            .bind(self.versions)
            .bind(self.created)
    }
}

/// Sandbox rows and their executions as column arrays.
struct SandboxColumns<'a> {
    ids: Vec<&'a str>,
    workspaces: Vec<&'a str>,
    names: Vec<&'a str>,
    phases: Vec<&'a str>,
    generations: Vec<i64>,
    labels: Vec<Value>,
    annotations: Vec<Value>,
    specs: Vec<Value>,
    versions: Vec<i64>,
    created: Vec<i64>,
    messages: Vec<Option<&'a str>>,
    operations: Vec<Option<Value>>,
    host_identities: Vec<&'a str>,
    restart_counts: Vec<i32>,
    handles: Vec<Option<&'a str>>,
    drivers: Vec<Option<&'a str>>,
    exit_codes: Vec<Option<i32>>,
}

impl<'a> SandboxColumns<'a> {
    fn of(rows: &'a [Sandbox]) -> Result<Self, ProjectionError> {
        let count = rows.len();
        let mut columns = SandboxColumns {
            ids: Vec::with_capacity(count),
            workspaces: Vec::with_capacity(count),
            names: Vec::with_capacity(count),
            phases: Vec::with_capacity(count),
            generations: Vec::with_capacity(count),
            labels: Vec::with_capacity(count),
            annotations: Vec::with_capacity(count),
            specs: Vec::with_capacity(count),
            versions: Vec::with_capacity(count),
            created: Vec::with_capacity(count),
            messages: Vec::with_capacity(count),
            operations: Vec::with_capacity(count),
            host_identities: Vec::with_capacity(count),
            restart_counts: Vec::with_capacity(count),
            handles: Vec::with_capacity(count),
            drivers: Vec::with_capacity(count),
            exit_codes: Vec::with_capacity(count),
        };
        for sandbox in rows {
            let execution = &sandbox.execution;
            columns.handles.push(execution.handle.as_deref());
            columns.drivers.push(execution.driver.as_deref());
            columns.exit_codes.push(execution.exit_code);
            columns.ids.push(sandbox.id.as_str());
            columns.workspaces.push(sandbox.workspace.as_str());
            columns.names.push(sandbox.name.as_str());
            columns.phases.push(sandbox.phase.as_str());
            columns
                .generations
                .push(to_db("generation", sandbox.execution.generation)?);
            columns.labels.push(json("labels", &sandbox.labels)?);
            columns
                .annotations
                .push(json("annotations", &sandbox.annotations)?);
            columns.specs.push(json("spec", &sandbox.spec)?);
            columns
                .versions
                .push(to_db("resource_version", sandbox.resource_version)?);
            columns.created.push(sandbox.created_at_ms);
            columns.messages.push(sandbox.message.as_deref());
            // JSON null for "no operation": the column is NULL, not 'null'.
            columns.operations.push(match &sandbox.operation {
                Some(operation) => Some(json("operation", operation)?),
                None => None,
            });
            columns.host_identities.push(sandbox.host_identity.as_str());
            columns
                .restart_counts
                .push(i32::try_from(sandbox.restart_count).map_err(|_| {
                    ProjectionError::OutOfRange {
                        what: "restart_count",
                        value: u64::from(sandbox.restart_count),
                    }
                })?);
        }
        Ok(columns)
    }

    /// Binds the sandboxes' 14 columns, then the executions' 3 (handle,
    /// driver, exit code).
    fn bind(self, query: Bound<'a>) -> Bound<'a> {
        query
            .bind(self.ids)
            .bind(self.workspaces)
            .bind(self.names)
            .bind(self.phases)
            .bind(self.generations)
            .bind(self.labels)
            .bind(self.annotations)
            .bind(self.specs)
            .bind(self.versions)
            .bind(self.created)
            .bind(self.messages)
            .bind(self.operations)
            .bind(self.host_identities)
            .bind(self.restart_counts)
            .bind(self.handles)
            .bind(self.drivers)
            .bind(self.exit_codes)
    }
}

/// SSH session rows as column arrays.
struct SessionColumns<'a> {
    sandbox_ids: Vec<&'a str>,
    ids: Vec<&'a str>,
    created: Vec<i64>,
    expires: Vec<i64>,
}

impl<'a> SessionColumns<'a> {
    fn of(rows: &'a [SessionRow]) -> Self {
        let mut columns = SessionColumns {
            sandbox_ids: Vec::with_capacity(rows.len()),
            ids: Vec::with_capacity(rows.len()),
            created: Vec::with_capacity(rows.len()),
            expires: Vec::with_capacity(rows.len()),
        };
        for session in rows {
            columns.sandbox_ids.push(session.sandbox_id.as_str());
            columns.ids.push(session.id.as_str());
            columns.created.push(session.created_at_ms);
            columns.expires.push(session.expires_at_ms);
        }
        columns
    }

    fn bind(self, query: Bound<'a>) -> Bound<'a> {
        query
            .bind(self.sandbox_ids)
            .bind(self.ids)
            .bind(self.created)
            .bind(self.expires)
    }
}

/// Policy rows as column arrays.
struct PolicyColumns<'a> {
    ids: Vec<&'a str>,
    versions: Vec<i64>,
    documents: Vec<&'a str>,
    updated: Vec<i64>,
}

impl<'a> PolicyColumns<'a> {
    fn of(rows: &'a [(String, SandboxPolicy)]) -> Result<Self, ProjectionError> {
        let mut columns = PolicyColumns {
            ids: Vec::with_capacity(rows.len()),
            versions: Vec::with_capacity(rows.len()),
            documents: Vec::with_capacity(rows.len()),
            updated: Vec::with_capacity(rows.len()),
        };
        for (id, policy) in rows {
            columns.ids.push(id.as_str());
            columns
                .versions
                .push(to_db("policy version", policy.version)?);
            columns.documents.push(policy.document.as_str());
            columns.updated.push(policy.updated_at_ms);
        }
        Ok(columns)
    }

    fn bind(self, query: Bound<'a>) -> Bound<'a> {
        query
            .bind(self.ids)
            .bind(self.versions)
            .bind(self.documents)
            .bind(self.updated)
    }
}

/// Event rows as column arrays.
struct EventColumns<'a> {
    indexes: Vec<i64>,
    terms: Vec<i64>,
    commands: Vec<&'static str>,
    outcomes: Vec<&'a str>,
    reasons: Vec<Option<&'a str>>,
    messages: Vec<Option<&'a str>>,
    workspaces: Vec<Option<&'a str>>,
    sandbox_ids: Vec<Option<&'a str>>,
    request_ids: Vec<Option<&'a str>>,
    times: Vec<Option<i64>>,
    responses: Vec<&'a Value>,
    callers: Vec<Option<&'a str>>,
    caller_roles: Vec<Option<&'a str>>,
}

impl<'a> EventColumns<'a> {
    fn of(rows: &'a [EventRow]) -> Result<Self, ProjectionError> {
        let count = rows.len();
        let mut columns = EventColumns {
            indexes: Vec::with_capacity(count),
            terms: Vec::with_capacity(count),
            commands: Vec::with_capacity(count),
            outcomes: Vec::with_capacity(count),
            reasons: Vec::with_capacity(count),
            messages: Vec::with_capacity(count),
            workspaces: Vec::with_capacity(count),
            sandbox_ids: Vec::with_capacity(count),
            request_ids: Vec::with_capacity(count),
            times: Vec::with_capacity(count),
            responses: Vec::with_capacity(count),
            callers: Vec::with_capacity(count),
            caller_roles: Vec::with_capacity(count),
        };
        for event in rows {
            columns
                .indexes
                .push(to_db("log_index", event.position.index)?);
            columns.terms.push(to_db("term", event.position.term)?);
            columns.commands.push(event.command);
            columns.outcomes.push(event.outcome.as_str());
            columns.reasons.push(event.reason.as_deref());
            columns.messages.push(event.message.as_deref());
            columns.workspaces.push(event.workspace.as_deref());
            columns.sandbox_ids.push(event.sandbox_id.as_deref());
            columns.request_ids.push(event.request_id.as_deref());
            columns.times.push(event.command_time_ms);
            columns.responses.push(&event.response);
            columns.callers.push(event.caller.as_deref());
            columns.caller_roles.push(event.caller_role.as_deref());
        }
        Ok(columns)
    }

    fn bind(self, query: Bound<'a>) -> Bound<'a> {
        query
            .bind(self.indexes)
            .bind(self.terms)
            .bind(self.commands)
            .bind(self.outcomes)
            .bind(self.reasons)
            .bind(self.messages)
            .bind(self.workspaces)
            .bind(self.sandbox_ids)
            .bind(self.request_ids)
            .bind(self.times)
            .bind(self.responses)
            .bind(self.callers)
            .bind(self.caller_roles)
    }
}

// ---- reads -------------------------------------------------------------

fn decode_json<T: serde::de::DeserializeOwned>(
    what: &'static str,
    value: Value,
) -> Result<T, ProjectionError> {
    serde_json::from_value(value).map_err(|source| ProjectionError::Decode { what, source })
}

fn sandbox_phase(text: &str) -> Result<SandboxPhase, ProjectionError> {
    SandboxPhase::ALL
        .into_iter()
        .find(|phase| phase.as_str() == text)
        .ok_or_else(|| ProjectionError::Inconsistent(format!("unknown sandbox phase {text:?}")))
}

/// The columns [`sandbox_from_row`] reads, for `FROM sandboxes s LEFT JOIN
/// executions e ON e.sandbox_id = s.id`.
pub(crate) const SANDBOX_COLUMNS: &str = "
    s.id, s.workspace, s.name, s.phase, s.generation, s.labels, s.annotations, s.spec,
    s.resource_version, s.created_at_ms, s.message, s.operation, s.host_identity,
    s.restart_count, e.generation AS execution_generation, e.handle, e.driver, e.exit_code";

pub(crate) fn sandbox_from_row(row: &PgRow) -> Result<Sandbox, ProjectionError> {
    let id: String = row.try_get("id")?;
    let generation = from_db("generation", row.try_get("generation")?)?;
    let execution_generation: Option<i64> = row.try_get("execution_generation")?;
    let Some(execution_generation) = execution_generation else {
        return Err(ProjectionError::Inconsistent(format!(
            "sandbox {id} has no execution row"
        )));
    };
    let execution_generation = from_db("execution generation", execution_generation)?;
    if generation != execution_generation {
        return Err(ProjectionError::Inconsistent(format!(
            "sandbox {id} is at generation {generation} but its execution row at {execution_generation}"
        )));
    }
    let operation: Option<Value> = row.try_get("operation")?;
    let restart_count: i32 = row.try_get("restart_count")?;
    let restart_count = u32::try_from(restart_count).map_err(|_| {
        ProjectionError::Inconsistent(format!("sandbox {id} has restart_count {restart_count}"))
    })?;
    Ok(Sandbox {
        id,
        name: row.try_get("name")?,
        workspace: row.try_get("workspace")?,
        labels: decode_json("labels", row.try_get("labels")?)?,
        annotations: decode_json("annotations", row.try_get("annotations")?)?,
        resource_version: from_db("resource_version", row.try_get("resource_version")?)?,
        created_at_ms: row.try_get("created_at_ms")?,
        spec: decode_json::<SandboxSpec>("spec", row.try_get("spec")?)?,
        phase: sandbox_phase(row.try_get::<&str, _>("phase")?)?,
        execution: Execution {
            generation: execution_generation,
            handle: row.try_get("handle")?,
            driver: row.try_get("driver")?,
            exit_code: row.try_get("exit_code")?,
        },
        message: row.try_get("message")?,
        operation: operation
            .map(|value| decode_json::<Operation>("operation", value))
            .transpose()?,
        host_identity: row.try_get("host_identity")?,
        restart_count,
    })
}

/// Reads the whole projection back (tests, the chaos checker, audits).
pub async fn read_rows(pool: &PgPool) -> Result<ProjectedRows, ProjectionError> {
    let mut rows = ProjectedRows::default();
    for row in
        sqlx::query("SELECT name, id, phase, resource_version, created_at_ms FROM workspaces")
            .fetch_all(pool)
            .await?
    {
        let phase = match row.try_get::<&str, _>("phase")? {
            "ACTIVE" => WorkspacePhase::Active,
            "TERMINATING" => WorkspacePhase::Terminating,
            other => {
                return Err(ProjectionError::Inconsistent(format!(
                    "unknown workspace phase {other:?}"
                )));
            }
        };
        let workspace = Workspace {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            phase,
            resource_version: from_db("resource_version", row.try_get("resource_version")?)?,
            created_at_ms: row.try_get("created_at_ms")?,
        };
        rows.workspaces.insert(workspace.name.clone(), workspace);
    }
    let sandboxes = sqlx::query(&format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes s LEFT JOIN executions e ON e.sandbox_id = s.id"
    ))
    .fetch_all(pool)
    .await?;
    for row in &sandboxes {
        let sandbox = sandbox_from_row(row)?;
        rows.sandboxes.insert(sandbox.id.clone(), sandbox);
    }
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM executions e WHERE NOT EXISTS
            (SELECT 1 FROM sandboxes s WHERE s.id = e.sandbox_id)",
    )
    .fetch_one(pool)
    .await?;
    if orphans != 0 {
        return Err(ProjectionError::Inconsistent(format!(
            "{orphans} execution rows without a sandbox"
        )));
    }
    for row in sqlx::query("SELECT sandbox_id, id, created_at_ms, expires_at_ms FROM ssh_sessions")
        .fetch_all(pool)
        .await?
    {
        let session = SessionRow {
            sandbox_id: row.try_get("sandbox_id")?,
            id: row.try_get("id")?,
            created_at_ms: row.try_get("created_at_ms")?,
            expires_at_ms: row.try_get("expires_at_ms")?,
        };
        rows.ssh_sessions
            .insert((session.sandbox_id.clone(), session.id.clone()), session);
    }
    for row in sqlx::query("SELECT sandbox_id, version, document, updated_at_ms FROM policies")
        .fetch_all(pool)
        .await?
    {
        rows.policies.insert(
            row.try_get("sandbox_id")?,
            SandboxPolicy {
                version: from_db("policy version", row.try_get("version")?)?,
                document: row.try_get("document")?,
                updated_at_ms: row.try_get("updated_at_ms")?,
            },
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_testkit::TestPostgres;

    fn at(index: u64) -> LogPosition {
        LogPosition { index, term: 1 }
    }

    fn events(indexes: std::ops::RangeInclusive<u64>) -> Vec<EventRow> {
        indexes
            .map(|index| EventRow {
                position: at(index),
                command: "Tick",
                outcome: "Ticked".to_string(),
                reason: None,
                message: None,
                workspace: None,
                sandbox_id: None,
                request_id: None,
                command_time_ms: None,
                response: Value::Null,
                caller: None,
                caller_role: None,
            })
            .collect()
    }

    async fn events_projected(pool: &PgPool) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM lifecycle_events")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// A batch is one call of `palisade_project_batch`, unless one of its
    /// sets is too large for one statement: then it is written statement
    /// by statement. Either way the checkpoint guards it: a batch that
    /// does not start at the checkpoint writes nothing and is reported as
    /// the checkpoint having moved.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_is_one_call_or_statements_and_the_checkpoint_guards_both() {
        let postgres = TestPostgres::start().await.unwrap();
        let pool = PgPool::connect(postgres.url()).await.unwrap();
        migrate(&pool).await.unwrap();

        let small = WritePlan {
            events: events(1..=3),
            ..WritePlan::default()
        };
        assert!(Rows::all(&small).largest_set() <= ROWS_PER_STATEMENT_MAX);
        let last = 3 + ROWS_PER_STATEMENT_MAX as u64 + 1;
        let large = WritePlan {
            events: events(4..=last),
            ..WritePlan::default()
        };
        assert!(Rows::all(&large).largest_set() > ROWS_PER_STATEMENT_MAX);

        // Not at the checkpoint (0): refused, nothing written.
        for (from, to, plan) in [(2, 3, &small), (2, last, &large)] {
            let refused = write_batch(&pool, 1, from, at(to), None, plan, None, None).await;
            assert!(
                matches!(
                    refused,
                    Err(ProjectionError::CheckpointMoved { expected }) if expected == from
                ),
                "{refused:?}"
            );
        }
        assert_eq!(events_projected(&pool).await, 0);

        write_batch(&pool, 1, 0, at(3), Some("cluster"), &small, None, None)
            .await
            .unwrap();
        write_batch(
            &pool,
            2,
            3,
            at(last),
            None,
            &large,
            Some((at(last), b"{}")),
            None,
        )
        .await
        .unwrap();
        let checkpoint = read_checkpoint(&pool).await.unwrap();
        assert_eq!(checkpoint.position, at(last));
        assert_eq!(checkpoint.cluster_id.as_deref(), Some("cluster"));
        assert_eq!(events_projected(&pool).await, last as i64);
        // Replayed: the guard refuses it (the checkpoint is past it).
        let replayed = write_batch(&pool, 1, 0, at(3), None, &small, None, None).await;
        assert!(
            matches!(replayed, Err(ProjectionError::CheckpointMoved { .. })),
            "{replayed:?}"
        );
        assert_eq!(events_projected(&pool).await, last as i64);
    }
}
