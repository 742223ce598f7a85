//! The projection check (`--postgres`): every in-process replica runs its
//! PostgreSQL projector (`palisade gateway run --postgres-url`) against one
//! throwaway server ([`TestPostgres`]: `initdb` + `pg_ctl` on a temporary
//! directory and port, never a mock). The projection lives through the
//! same faults as the cluster — the projecting leader crashes, pauses, is
//! cut off, hands off — and at the end, once its checkpoint reached the
//! leader's applied index, its rows must equal the rows derived from the
//! replicated state ([`ProjectedRows::of_state`]).

use std::time::Duration;

use palisade_projection::{ProjectedRows, TestPostgres, store};
use tokio::time::Instant;

use crate::ChaosError;
use crate::cluster::Cluster;

/// How long the projection may take, after healing, to reach the leader.
pub const PROJECTION_CATCH_UP_MAX: Duration = Duration::from_secs(60);

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
