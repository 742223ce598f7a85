//! Seeds that once made a campaign report an anomaly, kept so that what
//! was fixed stays fixed. Each runs with the configuration it failed with,
//! and must now be clean.
//!
//! Real threads and sockets do not replay an interleaving exactly, so a
//! seed reproduces its schedule (operations and faults) rather than its
//! exact history; that is why each is run as it failed, not reduced.

use palisade_chaos::{CampaignConfig, run_campaign};

/// One kept seed.
struct Regression {
    seed: u64,
    operations: usize,
    /// What it caught, and the fix.
    why: &'static str,
}

const REGRESSIONS: &[Regression] = &[
    Regression {
        seed: 1,
        operations: 300,
        why: "two deletes of the same id, the second arriving while the first ran, both \
          answered `deleted`: the second joins the delete in flight. The model said the \
          second must find the name free (NotFound) and reported the history as not \
          linearizable. A checker bug, not a Palisade bug: the model now lets a joined \
          delete share the first one's point (NameState::Freed).",
    },
    Regression {
        seed: 57,
        operations: 1_000,
        why: "found by the 100 x 1000 campaign: a start whose token named the generation \
              still being launched (STARTING) joined that launch, which the driver refused, \
              and answered that generation ERROR. The model said a start of an ERROR \
              sandbox launches the next generation. A checker bug, not a Palisade bug: the \
              model now lets a start answer the token's own generation when it joined its \
              launch (see model.rs and linearizability.rs, seed_57_...).",
    },
];

/// Runs the kept seed at `REGRESSIONS[at]`. The workload runs unpaced, as
/// it did when these seeds failed (the pacing of issue 15 came later), so
/// the clients issue the same operations as fast as then; the nemesis's
/// schedule is today's.
async fn stays_clean(at: usize) {
    for regression in &REGRESSIONS[at..=at] {
        let config = CampaignConfig {
            operations: regression.operations,
            rate: 0.0,
            ..CampaignConfig::new(regression.seed)
        };
        let report = run_campaign(&config).await.unwrap_or_else(|error| {
            panic!(
                "seed {}: the campaign could not run: {error}",
                regression.seed
            )
        });
        assert!(
            report.is_clean(),
            "regression seed {} ({}) fails again:\n{report}",
            regression.seed,
            regression.why
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_1_joined_deletes_stays_clean() {
    stays_clean(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_57_start_joining_a_launch_stays_clean() {
    stays_clean(1).await;
}
