//! The process-level mode, briefly: the same workload and checks against
//! three real gateway processes on loopback, with SIGKILL, SIGSTOP/SIGCONT,
//! proxy partitions and leadership transfers, through the real `palisade`
//! binary (which is why this test lives in the crate that builds it).

use palisade_chaos::{CampaignConfig, Mode, NemesisKind, run_campaign};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_processes_under_kills_pauses_and_partitions_stay_correct() {
    let config = CampaignConfig {
        operations: 300,
        nemeses: vec![
            NemesisKind::Handoff,
            NemesisKind::Kill,
            NemesisKind::Pause,
            NemesisKind::Partition,
            NemesisKind::Driver,
        ],
        mode: Mode::Processes {
            docker: None,
            palisade: env!("CARGO_BIN_EXE_palisade").into(),
        },
        ..CampaignConfig::new(21)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    println!("{report}");
    assert!(
        report.is_clean(),
        "anomalies against real processes:\n{report}"
    );
    assert!(
        report.final_applied_index.is_some(),
        "the replicas must converge:\n{report}"
    );
    for kind in ["kill", "pause", "partition:isolate"] {
        assert!(
            report.faults.contains_key(kind),
            "no {kind} was injected:\n{report}"
        );
    }
}
