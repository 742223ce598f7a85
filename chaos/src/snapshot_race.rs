//! The snapshot race (`handoff:snapshot-build:hold`): a snapshot build
//! that finishes after a newer snapshot was installed.
//!
//! A replica builds a snapshot from a copy of its state taken at index N,
//! and serializes and saves it in the background. Meanwhile it may install
//! the leader's snapshot up to M > N and purge its log up to M. If the late
//! build's save then replaced the installed snapshot, the replica's files
//! would hold the state at N followed by a log that starts after M: its
//! next restart would go back in time over entries it no longer has (it
//! cannot start, or serves a state missing acknowledged writes). The save
//! must keep the newer snapshot ([`palisade_storage::snapshot_files`]);
//! planted bug (g) removes that check.
//!
//! The nemesis makes the interleaving happen on purpose:
//!
//! 1. asks a follower F to build a snapshot and holds the build at the
//!    `snapshot-build` fault point (after the copy, before the save);
//! 2. cuts F off while the workload writes, has the leader snapshot and
//!    purge its log past the copy, and heals: F must install the leader's
//!    snapshot;
//! 3. once F installed it, lets the held build finish, then crashes F and
//!    restarts it from its files.
//!
//! With the check in place F restarts from the installed snapshot and
//! converges; without it the campaign reports `replicas-not-converged`
//! (F cannot restart) or `replicas-diverged`.

use std::time::Duration;

use palisade_raft::hooks::FaultPoint;
use tokio::sync::watch;

use crate::cluster::RAFT_CALL_TIMEOUT;
use crate::nemesis::{Nemesis, TRIGGER_WAIT_MAX};
use crate::points::{PointAction, PointKind};

/// Longest a build is held at its fault point (the task goes on after it
/// whatever happened).
pub const HOLD_MAX: Duration = Duration::from_secs(12);
/// How long the follower may take to install the leader's snapshot after
/// the links heal.
pub const INSTALL_WAIT_MAX: Duration = Duration::from_secs(5);
/// How long the released build is given to save before the crash.
pub const SAVE_GRACE: Duration = Duration::from_millis(500);

const LABEL: &str = "handoff:snapshot-build:hold";

impl Nemesis {
    /// Runs the snapshot race once (see the module docs). Counted as
    /// injected only when the follower installed a snapshot newer than the
    /// held copy, i.e. when the late save really came after the install.
    pub(crate) async fn snapshot_race(
        &mut self,
        wait_max: Duration,
        stop: &mut watch::Receiver<bool>,
    ) {
        let Some(leader) = self.cluster.leader() else {
            self.miss(LABEL.into(), "no leader".into());
            return;
        };
        let Some(follower) = self.other_than(leader) else {
            self.miss(
                LABEL.into(),
                "a single replica has no leader to install from".into(),
            );
            return;
        };
        let Some(raft) = self.cluster.raft(follower) else {
            self.miss(LABEL.into(), format!("node {follower} is not serving"));
            return;
        };
        self.triggers.arm(
            PointKind::SnapshotBuild,
            PointAction::HoldBuild { wait_max },
            None,
        );
        let _ = tokio::time::timeout(RAFT_CALL_TIMEOUT, raft.trigger().snapshot()).await;
        let fired = tokio::select! {
            fired = tokio::time::timeout(TRIGGER_WAIT_MAX, self.fired.recv()) => fired.ok().flatten(),
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        let Some(fired) = fired else {
            self.disarm();
            self.miss(
                LABEL.into(),
                format!("node {follower} built no snapshot in time"),
            );
            return;
        };
        let built_at = match fired.point {
            FaultPoint::SnapshotBuild { last_index } if fired.node == follower => last_index,
            point => {
                // Another replica's build reached the point first: let it go.
                drop(fired.done);
                self.miss(
                    LABEL.into(),
                    format!("{point:?} at node {} instead of {follower}", fired.node),
                );
                return;
            }
        };
        // 2. Away while the log moves on and the leader purges past the copy.
        let nodes = self.cluster.node_ids();
        self.links.isolate(follower, &nodes);
        self.history.fault(
            "handoff-setup",
            format!("node {follower}: snapshot build of index {built_at} held; node cut off"),
        );
        let away = self.ms(600, 1_400);
        tokio::time::sleep(away).await;
        let purged = match self.cluster.leader() {
            Some(leader) if leader != follower => self.cluster.snapshot_and_purge(leader).await,
            _ => None,
        };
        self.links.heal();
        self.history.fault(
            "heal-links",
            format!("node {follower} back; leader purged up to {purged:?}"),
        );
        let installed = raft
            .wait(Some(INSTALL_WAIT_MAX))
            .metrics(
                |metrics| {
                    metrics
                        .snapshot
                        .as_ref()
                        .is_some_and(|snapshot| snapshot.index > built_at)
                },
                "a newer snapshot installed",
            )
            .await
            .ok()
            .and_then(|metrics| metrics.snapshot.map(|snapshot| snapshot.index));
        let Some(installed) = installed else {
            drop(fired.done);
            self.miss(
                LABEL.into(),
                format!(
                    "node {follower} installed no snapshot past {built_at} (leader purged up to {purged:?})"
                ),
            );
            return;
        };
        // 3. The late save, then a restart from the files.
        let fault = self.count(
            LABEL.into(),
            format!(
                "node {follower}: build of index {built_at} released after installing the leader's snapshot up to {installed}; crash and restart"
            ),
        );
        let _ = fired.done.send(());
        tokio::time::sleep(SAVE_GRACE).await;
        self.cluster.crash(follower).await;
        let down = self.ms(100, 400);
        tokio::time::sleep(down).await;
        self.restart(follower);
        self.history.fault_ended(fault);
    }
}
