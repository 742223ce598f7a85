//! The process-level mode, briefly: the same workload and checks against
//! three real gateway processes on loopback, with SIGKILL, SIGSTOP/SIGCONT,
//! proxy partitions and handoffs at the fault points inside requests
//! (armed over the control directory: this binary is a `test-hooks`
//! build), through the real `palisade` binary (which is why this test
//! lives in the crate that builds it); executions are counted from the
//! process table, and a planted early delete acknowledgement is caught
//! there.

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
            planted: Vec::new(),
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
    assert!(
        !report.faults_by_point.is_empty(),
        "no handoff at a fault point inside a request:\n{report}"
    );
    for point in [
        "before-effect",
        "begin-committed",
        "effect-done",
        "forwarding",
    ] {
        assert!(
            report
                .points_reached
                .get(point)
                .is_some_and(|count| *count > 0),
            "the replicas never reached {point}:\n{report}"
        );
    }
    assert!(
        report
            .checks
            .effects
            .get("observed-executions")
            .is_some_and(|count| *count > 0),
        "no execution seen in the process table:\n{report}"
    );
}

/// A gateway that acknowledges a delete before the driver removed the
/// sandbox's executions (planted: `early-delete-ack`) is caught by what
/// the process table shows after the acknowledgement, not only by the
/// history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_left_running_after_an_acknowledged_delete_is_seen_in_the_process_table() {
    let config = CampaignConfig {
        operations: 600,
        nemeses: vec![NemesisKind::Kill],
        mode: Mode::Processes {
            docker: None,
            palisade: env!("CARGO_BIN_EXE_palisade").into(),
            planted: vec!["early-delete-ack".into()],
        },
        ..CampaignConfig::new(5)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    println!("{report}");
    assert!(
        report
            .anomalies
            .iter()
            .any(|anomaly| anomaly.kind == "execution-after-delete"),
        "the planted early acknowledgement was not seen on the host:\n{report}"
    );
}
