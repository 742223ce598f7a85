//! Every SQL statement of the projection: the schema migrations, the
//! checkpoint, batch and resync transactions, and the reads.
//!
//! Statements are runtime queries (`sqlx::query`), so nothing needs a
//! database at build time. Every multi-row write is one statement over
//! arrays (`unnest`, `= ANY($1)`), never a loop of single-row statements;
//! a statement carries at most [`ROWS_PER_STATEMENT_MAX`] rows.
//!
//! # The batch transaction, in order
//!
//! 1. the guarded checkpoint update (`WHERE applied_index < $new AND
//!    applied_index = $from`): it takes the checkpoint row's lock, so a
//!    second projector's transaction queues behind it and then finds the
//!    checkpoint moved (0 rows) and rolls back before writing anything.
//!    The same statement NOTIFYs [`CHECKPOINT_CHANNEL`] with the new
//!    checkpoint, which PostgreSQL delivers when (and only if) the
//!    transaction commits;
//! 2. deletes, children before parents: removed sandboxes with everything
//!    they own (one statement), cleared and revoked sessions, policies,
//!    workspaces;
//! 3. upserts, parents before children: workspaces, sandboxes with their
//!    executions (one statement), sessions, policies;
//! 4. the events;
//! 5. the shadow state, when due;
//! 6. commit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use palisade_lifecycle::{
    Execution, LogPosition, Operation, Sandbox, SandboxPhase, SandboxPolicy, SandboxSpec, State,
    Workspace, WorkspacePhase,
};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::changes::{EventRow, ProjectedRows, SessionRow, WritePlan};
use crate::error::{ProjectionError, from_db, to_db};

/// Most rows one statement writes; larger sets are split into several
/// statements of the same transaction.
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

/// Reads the stored shadow state, if any.
pub(crate) async fn read_shadow(
    pool: &PgPool,
) -> Result<Option<(LogPosition, State)>, ProjectionError> {
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
    Ok(Some((position, state)))
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
    let mut tx = pool.begin().await?;
    advance_checkpoint(&mut tx, node_id, from, to, cluster_id).await?;
    at_stage(hook, BatchStage::CheckpointAdvanced).await;
    write_plan(&mut tx, plan).await?;
    insert_events(&mut tx, &plan.events).await?;
    if let Some((position, bytes)) = shadow {
        write_shadow(&mut tx, position, bytes).await?;
    }
    at_stage(hook, BatchStage::BeforeCommit).await;
    tx.commit().await?;
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
    let cluster_id = state
        .cluster
        .as_ref()
        .map(|cluster| cluster.cluster_id.as_str());
    let mut tx = pool.begin().await?;
    advance_checkpoint(&mut tx, node_id, from, to, cluster_id).await?;
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
    write_plan(&mut tx, &WritePlan::of_state(state)).await?;
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
    write_shadow(&mut tx, to, shadow).await?;
    tx.commit().await?;
    Ok(())
}

async fn advance_checkpoint(
    tx: &mut Transaction<'_, Postgres>,
    node_id: u64,
    from: u64,
    to: LogPosition,
    cluster_id: Option<&str>,
) -> Result<(), ProjectionError> {
    let advanced = sqlx::query(
        "UPDATE projection_checkpoint
            SET applied_index = $1, applied_term = $2,
                cluster_id = COALESCE($3, cluster_id),
                projected_by = $4, updated_at = now()
          WHERE applied_index < $1 AND applied_index = $5
      RETURNING pg_notify($6, json_build_object('index', applied_index,
                                                'term', applied_term)::text)",
    )
    .bind(to_db("applied_index", to.index)?)
    .bind(to_db("applied_term", to.term)?)
    .bind(cluster_id)
    .bind(to_db("node_id", node_id)?)
    .bind(to_db("checkpoint", from)?)
    .bind(CHECKPOINT_CHANNEL)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if advanced != 1 {
        return Err(ProjectionError::CheckpointMoved { expected: from });
    }
    Ok(())
}

async fn write_shadow(
    tx: &mut Transaction<'_, Postgres>,
    position: LogPosition,
    bytes: &[u8],
) -> Result<(), ProjectionError> {
    sqlx::query(
        "INSERT INTO projection_shadow (singleton, applied_index, applied_term, state)
         VALUES (TRUE, $1, $2, $3)
         ON CONFLICT (singleton) DO UPDATE
            SET applied_index = EXCLUDED.applied_index,
                applied_term = EXCLUDED.applied_term,
                state = EXCLUDED.state",
    )
    .bind(to_db("shadow applied_index", position.index)?)
    .bind(to_db("shadow applied_term", position.term)?)
    .bind(bytes)
    .execute(&mut **tx)
    .await?;
    Ok(())
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

async fn write_plan(
    tx: &mut Transaction<'_, Postgres>,
    plan: &WritePlan,
) -> Result<(), ProjectionError> {
    // Deletes, children before parents.
    for ids in plan.sandboxes_removed.chunks(ROWS_PER_STATEMENT_MAX) {
        sqlx::query(REMOVE_SANDBOXES_SQL)
            .bind(ids)
            .execute(&mut **tx)
            .await?;
    }
    for ids in plan.sessions_cleared.chunks(ROWS_PER_STATEMENT_MAX) {
        sqlx::query("DELETE FROM ssh_sessions WHERE sandbox_id = ANY($1)")
            .bind(ids)
            .execute(&mut **tx)
            .await?;
    }
    for keys in plan.sessions_removed.chunks(ROWS_PER_STATEMENT_MAX) {
        let (sandbox_ids, session_ids): (Vec<&str>, Vec<&str>) = keys
            .iter()
            .map(|(sandbox, session)| (sandbox.as_str(), session.as_str()))
            .unzip();
        sqlx::query(
            "DELETE FROM ssh_sessions AS s
              USING unnest($1::text[], $2::text[]) AS d(sandbox_id, id)
              WHERE s.sandbox_id = d.sandbox_id AND s.id = d.id",
        )
        .bind(sandbox_ids)
        .bind(session_ids)
        .execute(&mut **tx)
        .await?;
    }
    for ids in plan.policies_removed.chunks(ROWS_PER_STATEMENT_MAX) {
        sqlx::query("DELETE FROM policies WHERE sandbox_id = ANY($1)")
            .bind(ids)
            .execute(&mut **tx)
            .await?;
    }
    for names in plan.workspaces_removed.chunks(ROWS_PER_STATEMENT_MAX) {
        sqlx::query("DELETE FROM workspaces WHERE name = ANY($1)")
            .bind(names)
            .execute(&mut **tx)
            .await?;
    }
    // Upserts, parents before children.
    for chunk in plan.workspaces_upsert.chunks(ROWS_PER_STATEMENT_MAX) {
        upsert_workspaces(tx, chunk).await?;
    }
    for chunk in plan.sandboxes_upsert.chunks(ROWS_PER_STATEMENT_MAX) {
        upsert_sandboxes(tx, chunk).await?;
    }
    for chunk in plan.sessions_upsert.chunks(ROWS_PER_STATEMENT_MAX) {
        upsert_sessions(tx, chunk).await?;
    }
    for chunk in plan.policies_upsert.chunks(ROWS_PER_STATEMENT_MAX) {
        upsert_policies(tx, chunk).await?;
    }
    Ok(())
}

async fn upsert_workspaces(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[Workspace],
) -> Result<(), ProjectionError> {
    let mut names = Vec::with_capacity(rows.len());
    let mut ids = Vec::with_capacity(rows.len());
    let mut phases = Vec::with_capacity(rows.len());
    let mut versions = Vec::with_capacity(rows.len());
    let mut created = Vec::with_capacity(rows.len());
    for workspace in rows {
        names.push(workspace.name.as_str());
        ids.push(workspace.id.as_str());
        phases.push(workspace_phase_name(workspace.phase));
        versions.push(to_db("resource_version", workspace.resource_version)?);
        created.push(workspace.created_at_ms);
    }
    sqlx::query(
        "INSERT INTO workspaces (name, id, phase, resource_version, created_at_ms)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[])
         ON CONFLICT (name) DO UPDATE
            SET id = EXCLUDED.id, phase = EXCLUDED.phase,
                resource_version = EXCLUDED.resource_version,
                created_at_ms = EXCLUDED.created_at_ms",
    )
    .bind(names)
    .bind(ids)
    .bind(phases)
    .bind(versions)
    .bind(created)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_sandboxes(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[Sandbox],
) -> Result<(), ProjectionError> {
    let count = rows.len();
    let mut ids = Vec::with_capacity(count);
    let mut workspaces = Vec::with_capacity(count);
    let mut names = Vec::with_capacity(count);
    let mut phases = Vec::with_capacity(count);
    let mut generations = Vec::with_capacity(count);
    let mut labels = Vec::with_capacity(count);
    let mut annotations = Vec::with_capacity(count);
    let mut specs = Vec::with_capacity(count);
    let mut versions = Vec::with_capacity(count);
    let mut created = Vec::with_capacity(count);
    let mut messages = Vec::with_capacity(count);
    let mut operations = Vec::with_capacity(count);
    let mut host_identities = Vec::with_capacity(count);
    let mut restart_counts = Vec::with_capacity(count);
    let mut handles = Vec::with_capacity(count);
    let mut drivers = Vec::with_capacity(count);
    let mut exit_codes = Vec::with_capacity(count);
    for sandbox in rows {
        let execution = &sandbox.execution;
        handles.push(execution.handle.as_deref());
        drivers.push(execution.driver.as_deref());
        exit_codes.push(execution.exit_code);
        ids.push(sandbox.id.as_str());
        workspaces.push(sandbox.workspace.as_str());
        names.push(sandbox.name.as_str());
        phases.push(sandbox.phase.as_str());
        generations.push(to_db("generation", sandbox.execution.generation)?);
        labels.push(json("labels", &sandbox.labels)?);
        annotations.push(json("annotations", &sandbox.annotations)?);
        specs.push(json("spec", &sandbox.spec)?);
        versions.push(to_db("resource_version", sandbox.resource_version)?);
        created.push(sandbox.created_at_ms);
        messages.push(sandbox.message.as_deref());
        // JSON null for "no operation": the column is NULL, not 'null'.
        operations.push(match &sandbox.operation {
            Some(operation) => Some(json("operation", operation)?),
            None => None,
        });
        host_identities.push(sandbox.host_identity.as_str());
        restart_counts.push(i32::try_from(sandbox.restart_count).map_err(|_| {
            ProjectionError::OutOfRange {
                what: "restart_count",
                value: u64::from(sandbox.restart_count),
            }
        })?);
    }
    // The sandboxes and their executions in one statement (one round trip
    // fewer per batch): the executions' foreign keys are checked at the
    // end of the statement, after the sandboxes' rows are in.
    sqlx::query(
        "WITH upserted AS (
            INSERT INTO sandboxes (id, workspace, name, phase, generation, labels, annotations,
                                   spec, resource_version, created_at_ms, message, operation,
                                   host_identity, restart_count)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                                 $6::jsonb[], $7::jsonb[], $8::jsonb[], $9::int8[], $10::int8[],
                                 $11::text[], $12::jsonb[], $13::text[], $14::int4[])
            ON CONFLICT (id) DO UPDATE
               SET workspace = EXCLUDED.workspace, name = EXCLUDED.name,
                   phase = EXCLUDED.phase, generation = EXCLUDED.generation,
                   labels = EXCLUDED.labels, annotations = EXCLUDED.annotations,
                   spec = EXCLUDED.spec, resource_version = EXCLUDED.resource_version,
                   created_at_ms = EXCLUDED.created_at_ms, message = EXCLUDED.message,
                   operation = EXCLUDED.operation, host_identity = EXCLUDED.host_identity,
                   restart_count = EXCLUDED.restart_count)
         INSERT INTO executions (sandbox_id, generation, handle, driver, exit_code)
         SELECT * FROM unnest($1::text[], $5::int8[], $15::text[], $16::text[], $17::int4[])
         ON CONFLICT (sandbox_id) DO UPDATE
            SET generation = EXCLUDED.generation, handle = EXCLUDED.handle,
                driver = EXCLUDED.driver, exit_code = EXCLUDED.exit_code",
    )
    .bind(ids)
    .bind(workspaces)
    .bind(names)
    .bind(phases)
    .bind(generations)
    .bind(labels)
    .bind(annotations)
    .bind(specs)
    .bind(versions)
    .bind(created)
    .bind(messages)
    .bind(operations)
    .bind(host_identities)
    .bind(restart_counts)
    .bind(handles)
    .bind(drivers)
    .bind(exit_codes)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_sessions(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[SessionRow],
) -> Result<(), ProjectionError> {
    let mut sandbox_ids = Vec::with_capacity(rows.len());
    let mut ids = Vec::with_capacity(rows.len());
    let mut created = Vec::with_capacity(rows.len());
    let mut expires = Vec::with_capacity(rows.len());
    for session in rows {
        sandbox_ids.push(session.sandbox_id.as_str());
        ids.push(session.id.as_str());
        created.push(session.created_at_ms);
        expires.push(session.expires_at_ms);
    }
    sqlx::query(
        "INSERT INTO ssh_sessions (sandbox_id, id, created_at_ms, expires_at_ms)
         SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[])
         ON CONFLICT (sandbox_id, id) DO UPDATE
            SET created_at_ms = EXCLUDED.created_at_ms,
                expires_at_ms = EXCLUDED.expires_at_ms",
    )
    .bind(sandbox_ids)
    .bind(ids)
    .bind(created)
    .bind(expires)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_policies(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[(String, SandboxPolicy)],
) -> Result<(), ProjectionError> {
    let mut ids = Vec::with_capacity(rows.len());
    let mut versions = Vec::with_capacity(rows.len());
    let mut documents = Vec::with_capacity(rows.len());
    let mut updated = Vec::with_capacity(rows.len());
    for (id, policy) in rows {
        ids.push(id.as_str());
        versions.push(to_db("policy version", policy.version)?);
        documents.push(policy.document.as_str());
        updated.push(policy.updated_at_ms);
    }
    sqlx::query(
        "INSERT INTO policies (sandbox_id, version, document, updated_at_ms)
         SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[])
         ON CONFLICT (sandbox_id) DO UPDATE
            SET version = EXCLUDED.version, document = EXCLUDED.document,
                updated_at_ms = EXCLUDED.updated_at_ms",
    )
    .bind(ids)
    .bind(versions)
    .bind(documents)
    .bind(updated)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_events(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[EventRow],
) -> Result<(), ProjectionError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT_MAX) {
        let count = chunk.len();
        let mut indexes = Vec::with_capacity(count);
        let mut terms = Vec::with_capacity(count);
        let mut commands = Vec::with_capacity(count);
        let mut outcomes = Vec::with_capacity(count);
        let mut reasons = Vec::with_capacity(count);
        let mut messages = Vec::with_capacity(count);
        let mut workspaces = Vec::with_capacity(count);
        let mut sandbox_ids = Vec::with_capacity(count);
        let mut request_ids = Vec::with_capacity(count);
        let mut times = Vec::with_capacity(count);
        let mut responses = Vec::with_capacity(count);
        let mut callers = Vec::with_capacity(count);
        let mut caller_roles = Vec::with_capacity(count);
        for event in chunk {
            indexes.push(to_db("log_index", event.position.index)?);
            terms.push(to_db("term", event.position.term)?);
            commands.push(event.command);
            outcomes.push(event.outcome.as_str());
            reasons.push(event.reason.as_deref());
            messages.push(event.message.as_deref());
            workspaces.push(event.workspace.as_deref());
            sandbox_ids.push(event.sandbox_id.as_deref());
            request_ids.push(event.request_id.as_deref());
            times.push(event.command_time_ms);
            responses.push(&event.response);
            callers.push(event.caller.as_deref());
            caller_roles.push(event.caller_role.as_deref());
        }
        // A plain INSERT: an index already there is a double apply, which
        // the checkpoint guard rules out; the primary key makes it an error
        // rather than a silent duplicate.
        sqlx::query(
            "INSERT INTO lifecycle_events (log_index, term, command, outcome, reason, message,
                                           workspace, sandbox_id, request_id, command_time_ms,
                                           response, caller, caller_role)
             SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::int8[],
                                  $11::jsonb[], $12::text[], $13::text[])",
        )
        .bind(indexes)
        .bind(terms)
        .bind(commands)
        .bind(outcomes)
        .bind(reasons)
        .bind(messages)
        .bind(workspaces)
        .bind(sandbox_ids)
        .bind(request_ids)
        .bind(times)
        .bind(responses)
        .bind(callers)
        .bind(caller_roles)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
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
