//! The projection benchmark: prints a table, asserts nothing.
//!
//! 1. Deleting a sandbox that owns 10,000 SSH sessions (the most a sandbox
//!    may own), plus its policy and execution: the projector's end-to-end
//!    time for that entry (one batch transaction), the set-based cleanup
//!    statement alone, and the same cleanup row by row — 10,000 DELETEs in
//!    one transaction, and in autocommit — on the same server in the same
//!    run.
//! 2. Projection lag (commit on the replica -> visible in PostgreSQL) at
//!    steady command rates: p50, p99, max.
//!
//! Runs against its own PostgreSQL (`TestPostgres`, fsync on), or a
//! database on `DATABASE_URL`'s server. Run it with
//! `cargo bench -p palisade-projection --bench projection`
//! (`-- --quick` for a short run).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use palisade_lifecycle::{
    Command, CompletionOf, LaunchResult, RequestMeta, SandboxSpec, SandboxTarget,
};
use palisade_projection::store::REMOVE_SANDBOXES_SQL;
use palisade_projection::workload::Workload;
use palisade_projection::{MemoryReplica, Projection, ProjectionConfig, Projector};
use palisade_testkit::TestPostgres;
use palisade_testkit::test_postgres::Durability;
use sqlx::PgPool;
use tokio::sync::watch;

/// SSH sessions owned by the deleted sandbox: as many as a sandbox may own.
const SESSIONS_COUNT: usize = palisade_lifecycle::limits::SESSIONS_PER_SANDBOX_MAX;
/// Repetitions of each cleanup variant (the median is printed).
const CLEANUP_RUNS: usize = 5;
const WAIT: Duration = Duration::from_secs(120);

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Commits a READY sandbox with `SESSIONS_COUNT` sessions and a policy;
/// returns its id.
fn busy_sandbox(replica: &MemoryReplica, run: usize) -> Result<String> {
    let id = format!("bench-sandbox-{run}");
    let request = |what: &str| RequestMeta {
        id: format!("{what}-{run}"),
        payload_digest: what.into(),
        time_ms: 1,
    };
    replica
        .commit(Command::BeginCreate {
            id: id.clone(),
            workspace: "default".into(),
            name: format!("busy-{run}"),
            spec: SandboxSpec::default(),
            labels: BTreeMap::from([("bench".into(), "cleanup".into())]),
            annotations: BTreeMap::new(),
            time_ms: 1,
            host_identity: "host".into(),
            request: request("create"),
        })
        .1?;
    replica
        .commit_bound(Command::CompleteLaunch {
            sandbox_id: id.clone(),
            of: CompletionOf::UNBOUND,
            generation: 1,
            result: LaunchResult::Running {
                handle: "pid=1".into(),
                driver: "process".into(),
            },
        })
        .1?;
    for session in 0..SESSIONS_COUNT {
        replica
            .commit(Command::CreateSshSession {
                target: SandboxTarget::Id(id.clone()),
                session_id: format!("session-{session}"),
                token_sha256: "0".repeat(64),
                expires_at_ms: i64::MAX,
                time_ms: 2,
                ttl_ms: 7 * 24 * 3600 * 1000,
            })
            .1?;
    }
    replica
        .commit(Command::SetSandboxPolicy {
            target: SandboxTarget::Id(id.clone()),
            document: "{\"allow\": []}".into(),
            expected_version: None,
            time_ms: 3,
        })
        .1?;
    Ok(id)
}

/// Rows of a sandbox like `busy_sandbox`'s, written straight into the
/// tables (outside the projector's state), for the manual variants.
async fn busy_rows(pool: &PgPool, id: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO sandboxes (id, workspace, name, phase, generation, labels, annotations, spec,
                                resource_version, created_at_ms, host_identity, restart_count)
         VALUES ($1, 'default', $1, 'READY', 1, '{}', '{}', '{}', 1, 1, 'host', 0)",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO executions (sandbox_id, generation) VALUES ($1, 1)")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO policies (sandbox_id, version, document, updated_at_ms) VALUES ($1, 1, '{}', 1)")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO ssh_sessions (sandbox_id, id, created_at_ms, expires_at_ms)
         SELECT $1, 'session-' || g, 1, 9999999999999 FROM generate_series(1, $2) AS g",
    )
    .bind(id)
    .bind(SESSIONS_COUNT as i32)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn set_based(pool: &PgPool, id: &str) -> Result<Duration> {
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    sqlx::query(REMOVE_SANDBOXES_SQL)
        .bind(vec![id.to_string()])
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(started.elapsed())
}

/// The cleanup as a loop: one DELETE per session, then the policy, the
/// execution and the sandbox; in one transaction or in autocommit.
async fn row_by_row(pool: &PgPool, id: &str, one_transaction: bool) -> Result<Duration> {
    let session_ids: Vec<String> =
        sqlx::query_scalar("SELECT id FROM ssh_sessions WHERE sandbox_id = $1")
            .bind(id)
            .fetch_all(pool)
            .await?;
    let mut connection = pool.acquire().await?;
    let started = Instant::now();
    if one_transaction {
        sqlx::query("BEGIN").execute(&mut *connection).await?;
    }
    for session in &session_ids {
        sqlx::query("DELETE FROM ssh_sessions WHERE sandbox_id = $1 AND id = $2")
            .bind(id)
            .bind(session)
            .execute(&mut *connection)
            .await?;
    }
    for statement in [
        "DELETE FROM policies WHERE sandbox_id = $1",
        "DELETE FROM executions WHERE sandbox_id = $1",
        "DELETE FROM sandboxes WHERE id = $1",
    ] {
        sqlx::query(statement)
            .bind(id)
            .execute(&mut *connection)
            .await?;
    }
    if one_transaction {
        sqlx::query("COMMIT").execute(&mut *connection).await?;
    }
    Ok(started.elapsed())
}

struct Cleanup {
    projector: Vec<Duration>,
    projector_batch_ms: Vec<u64>,
    set_based: Vec<Duration>,
    row_by_row: Vec<Duration>,
    row_by_row_autocommit: Duration,
}

async fn cleanup(replica: &MemoryReplica, projection: &Projection, runs: usize) -> Result<Cleanup> {
    let pool = projection.pool();
    let mut result = Cleanup {
        projector: Vec::new(),
        projector_batch_ms: Vec::new(),
        set_based: Vec::new(),
        row_by_row: Vec::new(),
        row_by_row_autocommit: Duration::ZERO,
    };
    for run in 0..runs {
        // Through the projector: the entry that removes the sandbox and its
        // owned records, committed alone, projected as one batch.
        let id = busy_sandbox(replica, run)?;
        replica
            .commit(Command::BeginDelete {
                target: SandboxTarget::Id(id.clone()),
                expected_sandbox_id: None,
                expected_execution: None,
                request: RequestMeta {
                    id: format!("delete-{run}"),
                    payload_digest: "delete".into(),
                    time_ms: 4,
                },
            })
            .1?;
        projection
            .wait_for_index(replica.last().index, WAIT)
            .await?;
        let sessions: i64 =
            sqlx::query_scalar("SELECT count(*) FROM ssh_sessions WHERE sandbox_id = $1")
                .bind(&id)
                .fetch_one(pool)
                .await?;
        anyhow::ensure!(sessions == 0 || sessions == SESSIONS_COUNT as i64);
        let started = Instant::now();
        let (deleted, _) = replica.commit_bound(Command::CompleteDelete {
            sandbox_id: id.clone(),
            of: CompletionOf::UNBOUND,
        });
        projection.wait_for_index(deleted.index, WAIT).await?;
        result.projector.push(started.elapsed());
        let status = projection.status();
        result.projector_batch_ms.push(status.last_batch_ms);
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM ssh_sessions WHERE sandbox_id = $1")
                .bind(&id)
                .fetch_one(pool)
                .await?;
        anyhow::ensure!(left == 0, "{left} sessions left after the delete");

        let id = format!("manual-set-{run}");
        busy_rows(pool, &id).await?;
        result.set_based.push(set_based(pool, &id).await?);

        let id = format!("manual-rows-{run}");
        busy_rows(pool, &id).await?;
        result.row_by_row.push(row_by_row(pool, &id, true).await?);
    }
    let id = "manual-autocommit".to_string();
    busy_rows(pool, &id).await?;
    result.row_by_row_autocommit = row_by_row(pool, &id, false).await?;
    Ok(result)
}

struct Lag {
    rate: u64,
    entries: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    batches: u64,
}

/// Commits workload commands at `rate` per second for `duration`, and
/// measures for each entry the time from its commit on the replica to the
/// moment the projector's checkpoint covered it.
async fn lag(
    replica: &MemoryReplica,
    projection: &Projection,
    workload: &mut Workload,
    rate: u64,
    duration: Duration,
) -> Result<Lag> {
    let batches_before = projection.status().batches;
    let mut status = projection.subscribe();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    // Records when each checkpoint value was first seen.
    let watcher = tokio::spawn(async move {
        let mut seen: Vec<(u64, Instant)> = Vec::new();
        loop {
            let projected = status.borrow_and_update().projected_index;
            if seen.last().is_none_or(|(last, _)| projected > *last) {
                seen.push((projected, Instant::now()));
            }
            tokio::select! {
                changed = status.changed() => if changed.is_err() { return seen },
                _ = &mut stopped => return seen,
            }
        }
    });
    let mut committed: Vec<(u64, Instant)> = Vec::new();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    while started.elapsed() < duration {
        ticker.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate as f64) as usize;
        while committed.len() < due {
            let command = replica.read(|state| workload.next_command(state));
            let (position, _) = replica.commit(command);
            committed.push((position.index, Instant::now()));
        }
    }
    let last = replica.last().index;
    projection.wait_for_index(last, WAIT).await?;
    // Let the watcher see the final value, then stop it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    let seen = watcher.await?;
    let mut lags: Vec<Duration> = committed
        .iter()
        .filter_map(|(index, at)| {
            seen.iter()
                .find(|(projected, _)| projected >= index)
                .map(|(_, seen_at)| seen_at.saturating_duration_since(*at))
        })
        .collect();
    lags.sort();
    let percentile = |p: f64| lags[((lags.len() as f64 * p) as usize).min(lags.len() - 1)];
    Ok(Lag {
        rate,
        entries: committed.len(),
        p50: percentile(0.50),
        p99: percentile(0.99),
        max: lags.last().copied().unwrap_or_default(),
        batches: projection.status().batches - batches_before,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|argument| argument == "--quick");
    let postgres = TestPostgres::start_with(Durability::Durable)
        .await
        .context("cannot start PostgreSQL")?;
    let replica = MemoryReplica::new();
    let config = ProjectionConfig::new(postgres.url(), 1);
    let (projector, projection) = Projector::new(config, replica.clone())?;
    let (_active, receiver) = watch::channel(true);
    let task = tokio::spawn(projector.run(receiver, std::future::pending()));
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(projection.pool())
        .await?;

    println!("Palisade projection benchmark — PostgreSQL {version}, fsync on, 127.0.0.1");
    println!();
    let runs = if quick { 2 } else { CLEANUP_RUNS };
    let cleanup = cleanup(&replica, &projection, runs).await?;
    println!(
        "Deleting a sandbox that owns {SESSIONS_COUNT} SSH sessions + policy + execution (median of {runs})"
    );
    println!("  {:<62} {:>10}", "how", "time");
    println!(
        "  {:<62} {:>7.1} ms",
        "projector: CompleteDelete committed -> projected (1 batch tx)",
        millis(median(cleanup.projector.clone()))
    );
    println!(
        "  {:<62} {:>7} ms",
        "  of which the batch transaction (status.last_batch_ms)",
        {
            let mut batch = cleanup.projector_batch_ms.clone();
            batch.sort();
            batch[batch.len() / 2]
        }
    );
    println!(
        "  {:<62} {:>7.1} ms",
        "set-based: 1 statement (= ANY($1)), 1 transaction",
        millis(median(cleanup.set_based))
    );
    println!(
        "  {:<62} {:>7.1} ms",
        format!("row by row: {} DELETEs, 1 transaction", SESSIONS_COUNT + 3),
        millis(median(cleanup.row_by_row))
    );
    println!(
        "  {:<62} {:>7.1} ms",
        format!(
            "row by row: {} DELETEs, autocommit (1 run)",
            SESSIONS_COUNT + 3
        ),
        millis(cleanup.row_by_row_autocommit)
    );
    println!();

    let mut workload = Workload::new(7);
    // Warm up: a populated state.
    for _ in 0..2_000 {
        let command = replica.read(|state| workload.next_command(state));
        let _response = replica.commit(command);
    }
    projection
        .wait_for_index(replica.last().index, WAIT)
        .await?;
    let duration = if quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(8)
    };
    println!(
        "Projection lag at a steady load (commit on the replica -> covered by the checkpoint), {}s each",
        duration.as_secs()
    );
    println!(
        "  {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "commands/s", "entries", "p50 ms", "p99 ms", "max ms", "batches", "entries/batch"
    );
    for rate in [100, 500, 2_000, 5_000] {
        let lag = lag(&replica, &projection, &mut workload, rate, duration).await?;
        println!(
            "  {:>12} {:>8} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>12.1}",
            lag.rate,
            lag.entries,
            millis(lag.p50),
            millis(lag.p99),
            millis(lag.max),
            lag.batches,
            lag.entries as f64 / lag.batches.max(1) as f64
        );
    }
    task.abort();
    Ok(())
}
