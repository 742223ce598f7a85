//! The `postgres` nemesis (issue 15): the projection's PostgreSQL server
//! is stopped — `pg_ctl stop -m fast`, or `-m immediate` like a crash —
//! held down and started again at the same data directory and port, again
//! and again, while the cluster works. The projector must reconnect and
//! resume from its checkpoint: once the faults heal, the projection equals
//! the state ("projection equals state after PostgreSQL faults"), and
//! nothing else went wrong. Needs PostgreSQL installed
//! (`scripts/ensure-postgres`). The same nemesis runs among all the others
//! in `campaigns.rs` (`--postgres`, `all`).

use palisade_chaos::checker::POSTGRES_FAULTS_CHECK;
use palisade_chaos::nemesis::NemesisKind;
use palisade_chaos::{CampaignConfig, run_campaign};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projection_equals_the_state_after_postgres_stops_and_restarts() {
    let config = CampaignConfig {
        operations: 240,
        nemeses: vec![NemesisKind::Postgres],
        postgres: true,
        ..CampaignConfig::new(41)
    };
    let report = run_campaign(&config).await.unwrap_or_else(|error| {
        panic!(
            "the campaign could not run (is PostgreSQL installed? scripts/ensure-postgres): {error}"
        )
    });
    println!("{report}");
    assert!(report.is_clean(), "anomalies:\n{report}");
    assert!(!report.is_vacuous(), "{report}");
    assert!(report.checks.projection_checked, "{report}");
    assert!(
        report.faults_by_kind.get("postgres").copied().unwrap_or(0) >= 1,
        "PostgreSQL was never stopped:\n{report}"
    );
    assert!(
        report.to_string().contains(POSTGRES_FAULTS_CHECK),
        "the report names the check:\n{report}"
    );
    assert!(
        report
            .timeline
            .iter()
            .any(|event| event.kind == "postgres-restarted"),
        "PostgreSQL was never restarted:\n{report}"
    );
}
