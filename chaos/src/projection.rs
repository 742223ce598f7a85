//! The projection check (`--postgres`): every in-process replica runs its
//! PostgreSQL projector (`palisade gateway run --postgres-url`) against one
//! throwaway server ([`TestPostgres`]: `initdb` + `pg_ctl` on a temporary
//! directory and port, never a mock). The projection lives through the
//! same faults as the cluster — the projecting leader crashes, pauses, is
//! cut off, hands off — and at the end, once its checkpoint reached the
//! leader's applied index, its rows must equal the rows derived from the
//! replicated state ([`ProjectedRows::of_state`]).
//!
//! With the `postgres` nemesis ([`crate::nemesis`]) the server itself goes
//! away, again and again: stopped with `pg_ctl stop -m fast` (connections
//! cut, open transactions rolled back) or `-m immediate` (a crash: no
//! checkpoint, WAL recovery at the next start), held down, and started
//! again at the same data directory and port ([`stop`], [`restart`]); the
//! heal makes sure it runs ([`ensure_running`]). The projector must
//! reconnect and resume from its checkpoint, so the same final check is
//! then *projection equals state after PostgreSQL faults*. The `pg_ctl`
//! calls block, so they run on tokio's blocking pool.

use std::sync::Arc;
use std::time::Duration;

use palisade_projection::{ProjectedRows, store};
use palisade_testkit::TestPostgres;
use palisade_testkit::test_postgres::Shutdown;
use tokio::time::Instant;

use crate::ChaosError;
use crate::cluster::Cluster;
use crate::history::History;

/// How long the projection may take, after healing, to reach the leader.
pub const PROJECTION_CATCH_UP_MAX: Duration = Duration::from_secs(60);
/// How many times [`restart`] tries to start the server before it gives
/// up (the final check then reports a projection that cannot be read).
pub const POSTGRES_RESTART_ATTEMPTS_MAX: u32 = 5;
/// The pause between two restart attempts.
pub const POSTGRES_RESTART_RETRY_DELAY: Duration = Duration::from_millis(500);

/// Runs a blocking `pg_ctl` call on the blocking pool.
async fn blocking<T: Send + 'static>(
    postgres: &Arc<TestPostgres>,
    call: impl FnOnce(&TestPostgres) -> T + Send + 'static,
) -> Result<T, String> {
    let postgres = postgres.clone();
    tokio::task::spawn_blocking(move || call(&postgres))
        .await
        .map_err(|error| format!("the pg_ctl task failed: {error}"))
}

/// Stops the server (`pg_ctl stop -m fast|immediate`) and waits until it
/// is down. `Err` says why it could not (then nothing was injected): a
/// server the harness did not start (`DATABASE_URL`) is not stopped.
pub async fn stop(postgres: &Arc<TestPostgres>, shutdown: Shutdown) -> Result<(), String> {
    if !postgres.is_local() {
        return Err(
            "DATABASE_URL names the server; the harness stops only a server it started".into(),
        );
    }
    blocking(postgres, move |postgres| postgres.stop_with(shutdown))
        .await?
        .map_err(|error| format!("pg_ctl stop -m {} failed: {error}", shutdown.mode()))
}

/// Starts the stopped server again, at the same data directory and port,
/// trying up to [`POSTGRES_RESTART_ATTEMPTS_MAX`] times; records
/// `postgres-restarted`, or `postgres-restart-failed` for each failed try.
pub async fn restart(postgres: &Arc<TestPostgres>, history: &History) {
    for attempt in 1..=POSTGRES_RESTART_ATTEMPTS_MAX {
        let started = blocking(postgres, |postgres| postgres.restart())
            .await
            .and_then(|started| started.map_err(|error| error.to_string()));
        match started {
            Ok(()) => {
                history.fault(
                    "postgres-restarted",
                    "PostgreSQL started again at the same data directory and port",
                );
                return;
            }
            Err(error) => history.fault(
                "postgres-restart-failed",
                format!("attempt {attempt}: {error}"),
            ),
        }
        tokio::time::sleep(POSTGRES_RESTART_RETRY_DELAY).await;
    }
}

/// The heal: starts the server if it is not running.
pub async fn ensure_running(postgres: &Arc<TestPostgres>, history: &History) {
    if !matches!(
        blocking(postgres, |postgres| postgres.is_running()).await,
        Ok(true)
    ) {
        restart(postgres, history).await;
    }
}

/// Starts the throwaway server.
pub async fn start_postgres() -> Result<TestPostgres, ChaosError> {
    TestPostgres::start()
        .await
        .map_err(|error| ChaosError::Config(format!("--postgres: {error}")))
}

/// Compares the projection with the leader's state once it caught up.
/// `Err` describes an anomaly: a difference, or a projection that did not
/// catch up in time.
pub async fn check(url: &str, cluster: &Cluster) -> Result<(), String> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(|error| format!("cannot connect to the projection's database: {error}"))?;
    let deadline = Instant::now() + PROJECTION_CATCH_UP_MAX;
    let mut last = String::from("no leader");
    loop {
        let expected = cluster
            .leader()
            .and_then(|leader| cluster.node(leader))
            .map(|node| {
                node.replica.state.read(|applied| {
                    (
                        applied.last_applied.map_or(0, |id| id.index),
                        ProjectedRows::of_state(&applied.state),
                    )
                })
            });
        if let Some((index, rows)) = expected {
            match store::read_checkpoint(&pool).await {
                Ok(checkpoint) if checkpoint.position.index >= index => {
                    // Entries after `index` (time ticks) change no row.
                    let projected = store::read_rows(&pool)
                        .await
                        .map_err(|error| format!("cannot read the projection: {error}"))?;
                    pool.close().await;
                    return match rows.first_difference(&projected) {
                        None => Ok(()),
                        Some(difference) => Err(format!(
                            "the projection at index {} differs from the state at index {index} (left: state, right: projection): {difference}",
                            checkpoint.position.index
                        )),
                    };
                }
                Ok(checkpoint) => {
                    last = format!(
                        "projection checkpoint {} behind the leader's applied index {index}",
                        checkpoint.position.index
                    );
                }
                Err(error) => last = format!("cannot read the checkpoint: {error}"),
            }
        }
        if Instant::now() >= deadline {
            pool.close().await;
            return Err(format!(
                "the projection did not catch up within {PROJECTION_CATCH_UP_MAX:?} after healing: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
