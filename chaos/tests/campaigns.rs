//! The CI campaign: the default in-process campaign (400 operations, five
//! clients on six names, three replicas, every nemesis) for a few seeds,
//! which must find no anomaly — one of them with the PostgreSQL projection
//! running on every replica and compared with the state at the end. Longer
//! campaigns are a command, not a test: `palisade-chaos run --seeds 100
//! --ops 1000` (see the README, "Chaos campaigns").

use palisade_chaos::{CampaignConfig, run_campaign};

/// The seeds CI runs on every build (and [`PROJECTION_SEED`]).
const CI_SEEDS: [u64; 2] = [11, 12];

/// The seed CI runs with the PostgreSQL projection.
const PROJECTION_SEED: u64 = 13;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_campaign_finds_no_anomaly() {
    for seed in CI_SEEDS {
        let report = run_campaign(&CampaignConfig::new(seed))
            .await
            .unwrap_or_else(|error| panic!("seed {seed}: the campaign could not run: {error}"));
        println!("{report}");
        assert!(report.is_clean(), "seed {seed} found anomalies:\n{report}");
        assert!(
            report.operations.ok > 0 && !report.faults.is_empty(),
            "seed {seed} did too little to mean anything:\n{report}"
        );
        assert!(
            report
                .faults
                .keys()
                .any(|kind| kind.starts_with("handoff:")),
            "seed {seed} injected no handoff:\n{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projection_equals_the_state_after_the_default_campaign() {
    let config = CampaignConfig {
        postgres: true,
        ..CampaignConfig::new(PROJECTION_SEED)
    };
    let report = run_campaign(&config).await.unwrap_or_else(|error| {
        panic!(
            "the campaign could not run (is PostgreSQL installed? scripts/ensure-postgres): {error}"
        )
    });
    println!("{report}");
    assert!(report.checks.projection_checked, "{report}");
    assert!(
        report.is_clean(),
        "anomalies with the projection:\n{report}"
    );
}
