//! Raising the cluster feature level ([`palisade_lifecycle::feature`]):
//! while this replica leads and the cluster's level is below what its
//! build supports, it asks every voter of the current membership which
//! level its build supports (`RaftPeer.SupportedFeatureLevel`), and once
//! every one of them supports a higher level it proposes
//! `RaiseFeatureLevel` to the lowest of them. A voter that does not answer
//! (down, restarting with a new build) holds the level where it is: the
//! leader asks again every [`POLL_INTERVAL`].
//!
//! Races it accepts: a voter added, or restarted with an older build,
//! between the poll and the apply of the raise stops at the apply with a
//! message naming both levels (`palisade_raft::feature_level`) instead of
//! running below the cluster's level. Learners are not asked (a learner
//! that is down must not hold the cluster back); one of an older build
//! stops the same way. Upgrade learners before voters, or add them after
//! the upgrade.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_lifecycle::Command;
use palisade_raft::{PeerClients, Raft, StateHandle, feature_level};
use tracing::{debug, info};

/// How often a leader below its build's level asks the voters again.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long one voter has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Raises the level whenever this replica leads and every voter supports
/// more; runs until aborted (the node aborts it when it stops).
pub async fn run(
    node_id: palisade_raft::NodeId,
    raft: Raft,
    state: StateHandle,
    peers: PeerClients,
) {
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        poll.tick().await;
        let current = state.read(|applied| applied.state.feature_level);
        if current >= feature_level::supported() {
            continue;
        }
        let metrics = raft.metrics().borrow_watched().clone();
        if metrics.current_leader != Some(node_id) {
            continue;
        }
        let Some(level) = voters_support(node_id, &metrics, &peers).await else {
            continue;
        };
        if level <= current {
            continue;
        }
        let command = Command::RaiseFeatureLevel { level };
        // The gate every new command kind goes through (the raise is its
        // own exception: see `palisade_lifecycle::feature::permits`).
        if !palisade_lifecycle::feature::permits(current, &command) {
            continue;
        }
        match raft.client_write(command.into()).await {
            Ok(written) => info!(
                from = current,
                to = level,
                index = written.log_id.index,
                "raised the cluster feature level: every voter supports it"
            ),
            Err(error) => debug!(%error, level, "feature level raise not committed; will retry"),
        }
    }
}

/// The lowest level the voters of `metrics`' membership support, or
/// `None` while one of them does not answer.
async fn voters_support(
    node_id: palisade_raft::NodeId,
    metrics: &openraft::RaftMetrics<palisade_raft::TypeConfig>,
    peers: &PeerClients,
) -> Option<u32> {
    let membership = metrics.membership_config.membership();
    let mut lowest = feature_level::supported();
    for voter in membership.voter_ids() {
        if voter == node_id {
            continue;
        }
        let address = membership.get_node(&voter)?.addr.clone();
        match peers
            .supported_feature_level(voter, &address, ASK_TIMEOUT)
            .await
        {
            Ok(level) => lowest = lowest.min(level),
            Err(error) => {
                debug!(voter, %error, "voter's feature level unknown; not raising");
                return None;
            }
        }
    }
    Some(lowest)
}
