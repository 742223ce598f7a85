//! The `storage` nemesis: the next append to one replica's Raft log fails
//! (an fsync error, a full disk) or is torn (half the batch written, then
//! a crash), on a cluster under load. The replica must fail-stop on a
//! failed append (`storage-fault-ignored` otherwise), nothing acknowledged
//! may be lost, the cluster goes on, and the replica comes back from its
//! files (the replicas must converge at the end).

use palisade_chaos::nemesis::NemesisKind;
use palisade_chaos::{CampaignConfig, run_campaign};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_faults_fail_stop_the_replica_and_lose_nothing() {
    let config = CampaignConfig {
        operations: 300,
        nemeses: vec![NemesisKind::Storage],
        ..CampaignConfig::new(31)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    println!("{report}");
    assert!(report.is_clean(), "anomalies:\n{report}");
    assert!(report.vacuous.is_empty(), "{report}");
    for variant in [
        "storage:fsync-error",
        "storage:disk-full",
        "storage:torn-write",
    ] {
        assert!(
            report.faults.get(variant).copied().unwrap_or(0) > 0,
            "no {variant} in the campaign:\n{report}"
        );
    }
}
