//! The CI campaign: the default in-process campaign (400 operations, five
//! clients on six names, three replicas, every nemesis) for a few seeds,
//! which must find no anomaly — one of them with the PostgreSQL projection
//! running on every replica, its server stopped and restarted by the
//! `postgres` nemesis among all the others (`--postgres`, `all`), and
//! compared with the state at the end. Longer
//! campaigns are a command, not a test: `palisade-chaos run --seeds 100
//! --ops 1000` (see the README, "Chaos campaigns").

use palisade_chaos::{CampaignConfig, NemesisKind, run_campaign};

/// The seeds CI runs on every build (and [`PROJECTION_SEED`]), one test
/// each.
const CI_SEEDS: [u64; 2] = [11, 12];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_campaign_finds_no_anomaly() {
    default_campaign_is_clean(CI_SEEDS[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_campaign_of_another_seed_finds_no_anomaly() {
    default_campaign_is_clean(CI_SEEDS[1]).await;
}

/// A campaign shorter than the nemesis's first round goes on until every
/// kind of fault had its turn. 100 operations are 2.5 s at the default
/// pace, less than the seven faults of the cluster lane's first round take;
/// at 300 (the density run, `scripts/chaos-density`) seeds 8, 14, 18 and 20
/// were vacuous before (seed 18: kill, membership and storage never fired,
/// the snapshot race held the cluster lane while the operations ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_campaign_goes_on_until_every_nemesis_fired() {
    let seed = 18;
    let report = run_campaign(&CampaignConfig {
        operations: 100,
        ..CampaignConfig::new(seed)
    })
    .await
    .unwrap_or_else(|error| panic!("seed {seed}: the campaign could not run: {error}"));
    println!("{report}");
    assert!(
        !report.is_vacuous(),
        "seed {seed}: a requested nemesis never fired:\n{report}"
    );
    assert!(report.is_clean(), "seed {seed} found anomalies:\n{report}");
    assert!(
        report.faults_total() >= 10,
        "seed {seed} injected fewer than 10 faults:\n{report}"
    );
}

/// The seed CI runs with the PostgreSQL projection.
const PROJECTION_SEED: u64 = 13;

/// Runs the default campaign for `seed`: no anomaly, every nemesis fired,
/// at least ten faults.
async fn default_campaign_is_clean(seed: u64) {
    {
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
            !report.is_vacuous(),
            "seed {seed}: a requested nemesis never fired:\n{report}"
        );
        assert!(
            report.faults_total() >= 10,
            "seed {seed} injected fewer than 10 faults:\n{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projection_equals_the_state_after_the_default_campaign() {
    let config = CampaignConfig {
        postgres: true,
        // `--nemesis all` with `--postgres`: the `postgres` nemesis too.
        nemeses: NemesisKind::all(true),
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
    assert!(
        report.faults_by_kind.get("postgres").copied().unwrap_or(0) >= 1,
        "PostgreSQL was never stopped:\n{report}"
    );
    assert!(
        !report.is_vacuous(),
        "a requested nemesis never fired:\n{report}"
    );
}

/// A requested nemesis that cannot fire — a partition of a single replica
/// has no link to cut — makes the campaign vacuous, and the report says
/// which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nemesis_that_never_fires_makes_the_campaign_vacuous() {
    let config = CampaignConfig {
        operations: 120,
        replicas: 1,
        nemeses: vec![NemesisKind::Partition, NemesisKind::Kill],
        ..CampaignConfig::new(5)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    println!("{report}");
    assert_eq!(report.vacuous, vec!["partition".to_string()], "{report}");
    assert!(
        report.faults_by_kind.get("kill").copied().unwrap_or(0) > 0,
        "{report}"
    );
    assert!(report.faults_missed.contains_key("partition"), "{report}");
    assert!(
        report
            .to_string()
            .contains("VACUOUS: requested nemesis never fired: partition"),
        "{report}"
    );
}

/// `--report-dir`: the history, the timeline and a page with one band per
/// injected fault and one bar per operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_dir_holds_the_history_the_timeline_and_a_page() {
    let config = CampaignConfig {
        operations: 80,
        nemeses: vec![NemesisKind::Kill, NemesisKind::Driver, NemesisKind::Clock],
        ..CampaignConfig::new(8)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    assert!(report.faults_total() > 0, "{report}");
    let dir = tempfile::tempdir().expect("temporary directory");
    palisade_chaos::report_dir::write(&report, dir.path()).expect("the report is written");
    for file in ["report.txt", "history.json", "timeline.txt", "index.html"] {
        assert!(dir.path().join(file).is_file(), "{file} is missing");
    }
    let history: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("history.json")).expect("history.json"),
    )
    .expect("history.json is JSON");
    assert_eq!(
        history["operations"].as_array().map(Vec::len),
        Some(report.history.len())
    );
    let html = std::fs::read_to_string(dir.path().join("index.html")).expect("index.html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(r#"<svg id="timeline""#) && html.contains(r#"<svg id="latency""#));
    assert_eq!(
        html.matches(r#"class="fault-band""#).count() as u64,
        report.faults_total(),
        "one band per injected fault"
    );
    assert_eq!(
        html.matches(r#"<rect class="op "#).count(),
        report.history.len(),
        "one bar per operation"
    );
    for outside in ["<script", "<link", " src=", " href="] {
        assert!(!html.contains(outside), "self-contained: no {outside}");
    }
}
