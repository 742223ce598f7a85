//! The `membership` nemesis: membership changes under load through the
//! admin API (add a learner on the spare slot, promote it, remove a voter
//! that does not lead, re-add it), with the replicas otherwise left alone.
//! Nothing acknowledged may be lost (the usual checks), and the membership
//! must end valid: one configuration, every member running and agreeing on
//! it (`membership-invalid` otherwise).

use palisade_chaos::nemesis::NemesisKind;
use palisade_chaos::{CampaignConfig, run_campaign};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_under_load_lose_nothing_and_end_valid() {
    let config = CampaignConfig {
        operations: 300,
        nemeses: vec![NemesisKind::Membership],
        ..CampaignConfig::new(21)
    };
    let report = run_campaign(&config)
        .await
        .unwrap_or_else(|error| panic!("the campaign could not run: {error}"));
    println!("{report}");
    assert!(report.is_clean(), "anomalies:\n{report}");
    assert!(report.vacuous.is_empty(), "{report}");
    for step in [
        "membership:add-learner",
        "membership:promote",
        "membership:remove",
        "membership:re-add",
    ] {
        assert!(
            report.faults.get(step).copied().unwrap_or(0) > 0,
            "no {step} in the campaign:\n{report}"
        );
    }
}
