//! The deterministic simulation (`palisade chaos run --sim`): the same seed
//! records the same history, byte for byte (`history.json` of
//! `--report-dir`), and another seed records another. The campaign itself
//! must be clean and must have injected faults, so that the comparison is
//! of a run that did something.

use palisade_chaos::campaign::simulate;
use palisade_chaos::{CampaignConfig, Mode, NemesisKind, Report};

/// Operations per campaign: enough for every simulated nemesis to fire.
const OPERATIONS: usize = 200;

fn simulated(seed: u64) -> Report {
    let config = CampaignConfig {
        operations: OPERATIONS,
        nemeses: NemesisKind::SIMULATION.to_vec(),
        mode: Mode::Simulated,
        ..CampaignConfig::new(seed)
    };
    let report = simulate(&config)
        .unwrap_or_else(|error| panic!("seed {seed}: the simulation could not run: {error}"));
    println!("{report}");
    assert!(report.is_clean(), "seed {seed} found anomalies:\n{report}");
    assert!(
        report.operations.ok > 0 && report.faults_total() > 0,
        "seed {seed} did too little to mean anything:\n{report}"
    );
    report
}

fn history(report: &Report) -> Vec<u8> {
    palisade_chaos::report_dir::history_json(report).expect("the history encodes")
}

#[test]
fn the_same_seed_records_the_same_history_byte_for_byte() {
    let first = history(&simulated(5));
    let second = history(&simulated(5));
    if first != second {
        // Both kept, to be compared with `diff`.
        let dir = std::env::temp_dir();
        let _ = std::fs::write(dir.join("palisade-sim-seed-5-first.json"), &first);
        let _ = std::fs::write(dir.join("palisade-sim-seed-5-second.json"), &second);
        let first = String::from_utf8_lossy(&first);
        let second = String::from_utf8_lossy(&second);
        let line = first
            .lines()
            .zip(second.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "seed 5 recorded two different histories ({} and {} bytes); first difference at line {}:\n  {}\n  {}",
            first.len(),
            second.len(),
            line + 1,
            first.lines().nth(line).unwrap_or(""),
            second.lines().nth(line).unwrap_or("")
        );
    }
    let other = history(&simulated(6));
    assert_ne!(first, other, "seeds 5 and 6 recorded the same history");
}
