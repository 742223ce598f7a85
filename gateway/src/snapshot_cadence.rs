//! When a replica builds a snapshot of its state: often enough that the
//! log behind the snapshot stays short, rarely enough that building
//! snapshots stays a fixed share of the work however large the state is.
//!
//! # Key decision: the entries between two snapshots grow with the state
//!
//! A snapshot copies and encodes the whole state, O(state). At a fixed
//! cadence (openraft's `SnapshotPolicy::LogsSinceLast`) the snapshot cost
//! per applied entry grows with the state, and the state grows for 24 hours
//! under sustained writes (request receipts are kept that long): in a
//! soak, 16 clients went from 920 to under 300 requests/s in four minutes,
//! each replica busy copying and encoding a snapshot every five seconds.
//!
//! So openraft never snapshots on its own (`SnapshotPolicy::Never`) and
//! [`run`] triggers a build once the entries applied since the last
//! snapshot reach the configured interval or the last snapshot's size
//! divided by [`STATE_BYTES_PER_SNAPSHOT_ENTRY`], whichever is larger
//! ([`entries_between_snapshots`]): per applied entry, snapshots then
//! encode about 256 bytes of state, whatever its size. The price is a
//! longer log behind a large snapshot, which a restart replays: about
//! `snapshot_bytes / 256` entries, never more than
//! [`ENTRIES_BETWEEN_SNAPSHOTS_MAX`]. A small state (tests, a young
//! cluster) snapshots exactly at the configured interval. The purge after
//! each build is openraft's, unchanged (`log_kept_after_snapshot_entries`).
//!
//! # Key decision: snapshots write about as many bytes as the log
//!
//! A log entry is ~290 bytes as stored (a 16-client benchmark: 139 MB of
//! segments for 470,000 entries), so at 256 bytes of state per entry the
//! log behind a snapshot holds about as many bytes as the snapshot itself,
//! and a replica writes about as much into snapshots as into its log. At
//! 1 KiB per entry, as before, it wrote four times as much: ~1 GB of
//! snapshots in one 16-client `palisade-bench` run (most of a snapshot is
//! receipts, kept 24 hours), 430 MB at 256; at 256 clients the cluster
//! made 5-9 % more requests a second with 8-12 % less CPU per request
//! (`palisade-bench --clients 256 --sandboxes 5000 --min-phase-seconds
//! 15`, four runs of each, interleaved). A restart
//! replays ~100,000 entries a second here (a replica restarted on a log of
//! 467,000 entries after its snapshot answered with all of them applied
//! 4.6 s after it started), so a 64 MiB snapshot's log (262,144 entries)
//! costs a restart ~2.6 s. [`ENTRIES_BETWEEN_SNAPSHOTS_MAX`]
//! keeps the worst case where it was: at the snapshot budget's 8 GiB, 1 KiB
//! of state per entry, 8 Mi entries.
//!
//! # Key decision: spaced by the last snapshot's size, not the estimate
//!
//! Between two measurements the state's size is an estimate that every
//! applied command grows by its own encoded size (an upper bound of what
//! it can add, `palisade_raft::StateHandle::snapshot_bytes`): ~300 bytes
//! for a small command, more than the 256 bytes of state an entry may cost.
//! Spaced by that estimate, the next snapshot moved away faster than the
//! entries came and a busy replica stopped building any (two in a whole
//! benchmark run). The same holds for the size as a digest measures it
//! (`cluster status` asks for one): where receipts grow the state by more
//! than 256 bytes an entry, as requests of one entry each do, a digest
//! taken often enough would put the next snapshot off for good. So the
//! cadence divides the size of the last snapshot,
//! `StateHandle::last_snapshot_bytes`, which stays put until the next.
//!
//! # Key decision: the replicas build a third of an interval apart
//!
//! Every replica applies the same entries and measures the same state, so
//! under that rule all three built their snapshots within the same second,
//! and a cluster under load lost a quarter of a minute's throughput each
//! time (a 30-minute soak at 16 clients: ~900 requests/s, ~660 in each
//! minute with a 240-290 MiB build, every three minutes or so). So a
//! replica's first build after it starts comes early by its phase, a
//! third of the interval per step of its node id ([`first_build_after`]);
//! later builds keep the interval, so the replicas stay apart and the
//! cluster pays for one build at a time.

use openraft::async_runtime::WatchReceiver as _;
use palisade_raft::{Raft, StateHandle};

/// State bytes a snapshot may encode per entry applied since the last one
/// (about what a log entry takes on disk: see the module doc).
pub const STATE_BYTES_PER_SNAPSHOT_ENTRY: u64 = 256;

/// Most entries between two snapshots however large the state, unless the
/// configured interval is longer: what 1 KiB per entry gave at the
/// snapshot budget's ceiling (8 GiB, `palisade_raft::SNAPSHOT_BYTES_BUDGET`),
/// so no restart replays a longer log than it could before.
pub const ENTRIES_BETWEEN_SNAPSHOTS_MAX: u64 = 8 * 1024 * 1024;

/// Entries to apply after a snapshot of `snapshot_bytes` before the next,
/// with `interval_entries` configured (`--snapshot-interval-entries`).
pub fn entries_between_snapshots(interval_entries: u64, snapshot_bytes: u64) -> u64 {
    interval_entries
        .max((snapshot_bytes / STATE_BYTES_PER_SNAPSHOT_ENTRY).min(ENTRIES_BETWEEN_SNAPSHOTS_MAX))
        .max(1)
}

/// The cadence looks at the applied index at most this often (see [`run`]).
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// The replicas' snapshot builds are spread over this many phases of an
/// interval (see the module doc): three replicas, three phases.
pub const SNAPSHOT_PHASES: u64 = 3;

/// Entries to apply before the first snapshot build after a replica
/// started, `between` apart otherwise: earlier by `node_id`'s phase.
pub fn first_build_after(between: u64, node_id: u64) -> u64 {
    let phase = node_id % SNAPSHOT_PHASES;
    (between - between / SNAPSHOT_PHASES * phase).max(1)
}

/// The state without its receipts (what a replica holds in memory, see
/// `palisade_raft::StateHandle::state_bytes`) is measured again once
/// commands of this many bytes were applied since it last was, or a
/// quarter of its size if that is more: its estimate only grows between
/// measurements, and snapshots of a state made mostly of receipts (which
/// measure it too) can be hundreds of thousands of entries apart.
pub const MEMORY_REMEASURE_GROWTH_BYTES_MIN: u64 = 16 * 1024 * 1024;

/// Whether the state without its receipts is due to be measured again,
/// `growth` bytes of commands after it was measured at `estimate -
/// growth` bytes.
pub fn memory_remeasure_due(estimate: u64, growth: u64) -> bool {
    growth >= MEMORY_REMEASURE_GROWTH_BYTES_MIN.max(estimate.saturating_sub(growth) / 4)
}

/// Triggers snapshot builds (see the module doc) until the state machine
/// or Raft stops; measures the state without its receipts when due (for
/// its budget, not for the cadence).
pub async fn run(node_id: u64, raft: Raft, state: StateHandle, interval_entries: u64) {
    let mut applied = state.subscribe();
    // Where the last build was asked for: a build takes a while to show in
    // the metrics, and asking again meanwhile would be ignored anyway.
    let mut triggered_at = 0u64;
    while applied.changed().await.is_ok() {
        let applied_index = *applied.borrow_and_update();
        let snapshot_index = raft
            .metrics()
            .borrow_watched()
            .snapshot
            .as_ref()
            .map_or(0, |id| id.index);
        if memory_remeasure_due(state.state_bytes(), state.in_memory_growth()) {
            // O(sandboxes), off the runtime's threads.
            let handle = state.clone();
            match palisade_raft::runtime::blocking(move || handle.measure_in_memory()).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) | Err(_) => return, // The state machine stopped.
            }
        }
        let mut due = entries_between_snapshots(interval_entries, state.last_snapshot_bytes());
        if triggered_at == 0 {
            due = first_build_after(due, node_id);
        }
        if applied_index >= snapshot_index.max(triggered_at).saturating_add(due) {
            triggered_at = applied_index;
            if raft.trigger().snapshot().await.is_err() {
                return; // Raft stopped.
            }
        }
        // Applied entries arrive in batches, hundreds to thousands a second
        // under load; this task woken by each cost a busy replica a wake-up
        // (often of another thread) per batch. Looking at most once per
        // CHECK_INTERVAL makes a build at most that late.
        tokio::time::sleep(CHECK_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_in_memory_is_measured_again_after_enough_growth() {
        let mib = 1024 * 1024;
        // A small state: after 16 MiB of commands.
        assert!(!memory_remeasure_due(10 * mib, 8 * mib));
        assert!(memory_remeasure_due(20 * mib, 16 * mib));
        // A large one: after a quarter of its measured size.
        assert!(!memory_remeasure_due(400 * mib + 60 * mib, 60 * mib));
        assert!(memory_remeasure_due(400 * mib + 100 * mib, 100 * mib));
    }

    #[test]
    fn a_small_state_snapshots_at_the_configured_interval() {
        assert_eq!(entries_between_snapshots(5_000, 0), 5_000);
        assert_eq!(entries_between_snapshots(5_000, 1024 * 1024), 5_000);
        assert_eq!(entries_between_snapshots(50, 10_000), 50);
    }

    #[test]
    fn a_large_state_spaces_its_snapshots_in_proportion() {
        // 64 MiB of state: 262,144 entries between snapshots, so each
        // entry pays for encoding 256 bytes of it.
        assert_eq!(entries_between_snapshots(5_000, 64 * 1024 * 1024), 262_144);
        // The in-memory ceiling (1 GiB): 4 Mi entries.
        assert_eq!(
            entries_between_snapshots(5_000, palisade_raft::STATE_BYTES_MAX),
            4 * 1024 * 1024
        );
    }

    #[test]
    fn the_log_behind_a_snapshot_is_never_longer_than_before() {
        // The snapshot budget's ceiling: 8 Mi entries, as at 1 KiB per entry.
        assert_eq!(
            entries_between_snapshots(5_000, palisade_raft::SNAPSHOT_BYTES_BUDGET),
            ENTRIES_BETWEEN_SNAPSHOTS_MAX
        );
        assert_eq!(
            ENTRIES_BETWEEN_SNAPSHOTS_MAX,
            palisade_raft::SNAPSHOT_BYTES_BUDGET / 1024
        );
        assert_eq!(
            entries_between_snapshots(5_000, u64::MAX),
            ENTRIES_BETWEEN_SNAPSHOTS_MAX
        );
        // A configured interval longer than that is the operator's choice.
        assert_eq!(entries_between_snapshots(10_000_000, u64::MAX), 10_000_000);
    }

    #[test]
    fn the_replicas_first_builds_are_a_third_of_an_interval_apart() {
        let firsts: Vec<u64> = (1..=3)
            .map(|node_id| first_build_after(300_000, node_id))
            .collect();
        assert_eq!(firsts, [200_000, 100_000, 300_000]);
        // Never before the first entry, never after the interval.
        assert_eq!(first_build_after(1, 2), 1);
        assert!((1..=10).all(|node_id| first_build_after(5_000, node_id) <= 5_000));
    }

    #[test]
    fn a_zero_interval_still_waits_for_one_entry() {
        assert_eq!(entries_between_snapshots(0, 0), 1);
    }
}
