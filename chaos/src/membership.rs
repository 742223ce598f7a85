//! The `membership` nemesis: membership changes under load, through the
//! admin API an operator uses (`palisade cluster add-learner`, `promote`,
//! `remove`: `ClusterAdmin` on any replica, forwarded to the leader).
//!
//! The cluster has one spare replica slot ([`crate::cluster::ClusterConfig::spares`]).
//! Each fault is the next step of a cycle, chosen from what the leader's
//! membership holds:
//!
//! - a learner in the membership: **promote** it to voter;
//! - else a spare slot: start it empty (no initial cluster) and **add** it
//!   as a learner (`membership:add-learner`; `membership:re-add` for a slot
//!   that was a member before and was removed);
//! - else (every slot a voter): **remove** a voter that does not lead,
//!   then crash it and delete its files (a retired host).
//!
//! A call that fails or times out is a *missed* fault; its outcome may
//! still land, so after every step, and when healing, the harness takes
//! its member set from the leader's membership. At the end the campaign
//! checks the membership ([`check`]): one configuration (not joint), every
//! member running and agreeing on it — `membership-invalid` otherwise. That
//! nothing acknowledged was lost is the usual checks' job.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_raft::NodeId;
use rand::seq::IndexedRandom;
use tonic::transport::Endpoint;

use crate::cluster::Cluster;
use crate::nemesis::Nemesis;

/// How long one admin call may take (adding a learner waits until it
/// caught up).
pub const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The leader's membership: voters, learners, and whether it is joint
/// (a change half done). `None` without a leader.
pub fn leader_membership(cluster: &Cluster) -> Option<(BTreeSet<NodeId>, BTreeSet<NodeId>, bool)> {
    let leader = cluster.leader()?;
    let raft = cluster.raft(leader)?;
    let metrics = raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let voters = membership.voter_ids().collect();
    let learners = membership.learner_ids().collect();
    let joint = membership.get_joint_config().len() > 1;
    Some((voters, learners, joint))
}

/// Checks the membership at the end of a campaign (after healing and
/// convergence): one configuration, every member running and serving,
/// every member's view equal to the leader's, at least `voters_min`
/// voters. `Err` says what is wrong.
pub fn check(cluster: &Cluster, voters_min: usize) -> Result<(), String> {
    let leader = cluster.leader().ok_or("no leader at the end")?;
    let raft = cluster.raft(leader).ok_or("the leader is not serving")?;
    let membership = raft
        .metrics()
        .borrow_watched()
        .membership_config
        .membership()
        .clone();
    if membership.get_joint_config().len() > 1 {
        return Err(format!(
            "the membership is still joint at the end: {:?}",
            membership.get_joint_config()
        ));
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if voters.len() < voters_min {
        return Err(format!(
            "{} voters at the end ({voters:?}), fewer than the {voters_min} founded",
            voters.len()
        ));
    }
    let members: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
    for member in &members {
        let Some(raft) = cluster.raft(*member) else {
            return Err(match cluster.why_stopped(*member) {
                Some(why) => {
                    format!("member {member} is not running at the end: it stopped: {why}")
                }
                None => format!("member {member} is not running at the end"),
            });
        };
        let view = raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .clone();
        if view != membership {
            return Err(format!(
                "member {member} sees the membership {view:?}, the leader {leader} {membership:?}"
            ));
        }
        let expected = cluster.addr(*member).unwrap_or_default();
        let recorded = membership
            .get_node(member)
            .map(|node| node.addr.clone())
            .unwrap_or_default();
        if recorded != expected {
            return Err(format!(
                "member {member} is recorded at {recorded:?}, it listens on {expected:?}"
            ));
        }
    }
    Ok(())
}

fn admin(cluster: &Cluster, node: NodeId) -> Option<ClusterAdminClient<tonic::transport::Channel>> {
    let addr = cluster.addr(node)?;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .timeout(ADMIN_CALL_TIMEOUT)
        .connect_lazy();
    Some(ClusterAdminClient::new(channel))
}

/// The change that finishes a joint membership left by a change cut
/// short (`None`: not joint): promote again what the newest configuration
/// adds, or remove again what it drops.
fn finish_joint(cluster: &Cluster) -> Option<Step> {
    let leader = cluster.leader()?;
    let raft = cluster.raft(leader)?;
    let metrics = raft.metrics().borrow_watched().clone();
    let joint = metrics
        .membership_config
        .membership()
        .get_joint_config()
        .clone();
    let (oldest, newest) = (joint.first()?, joint.last()?);
    if joint.len() < 2 {
        return None;
    }
    if let Some(added) = newest.difference(oldest).next() {
        return Some(Step::Promote(*added));
    }
    oldest
        .difference(newest)
        .next()
        .map(|dropped| Step::Remove(*dropped))
}

/// Finishes, through the admin API, a joint membership a change cut short
/// left (bounded tries; at the end of a campaign).
pub(crate) async fn finish_joint_changes(cluster: &Cluster) {
    for _ in 0..3 {
        let Some(step) = finish_joint(cluster) else {
            return;
        };
        let Some(via) = cluster.leader() else {
            return;
        };
        let Some(mut admin) = admin(cluster, via) else {
            return;
        };
        let _ = match step {
            Step::Promote(node) => admin
                .promote_learner(v1::PromoteLearnerRequest { node_id: node })
                .await
                .map(drop),
            Step::Remove(node) => admin
                .remove_member(v1::RemoveMemberRequest { node_id: node })
                .await
                .map(drop),
            Step::Add { .. } => return,
        };
    }
}

/// One membership change.
enum Step {
    Promote(NodeId),
    Add { node: NodeId, again: bool },
    Remove(NodeId),
}

impl Nemesis {
    /// The next step of the membership cycle (see the module docs).
    pub(crate) async fn membership(&mut self) {
        let Some((voters, learners, _)) = leader_membership(&self.cluster) else {
            self.miss("membership".into(), "no leader".into());
            return;
        };
        let leader = self.cluster.leader();
        let spares: Vec<NodeId> = self
            .cluster
            .spares()
            .into_iter()
            .filter(|node| !voters.contains(node) && !learners.contains(node))
            .collect();
        let step = if let Some(step) = finish_joint(&self.cluster) {
            // A change cut short by a leader change: finish it first, as
            // an operator retrying the command would.
            step
        } else if let Some(&learner) = learners.iter().next() {
            Step::Promote(learner)
        } else if let Some(&node) = spares.choose(&mut self.rng) {
            Step::Add {
                node,
                again: self.cluster.has_joined(node),
            }
        } else {
            let removable: Vec<NodeId> = voters
                .iter()
                .copied()
                .filter(|voter| Some(*voter) != leader)
                .collect();
            match removable.choose(&mut self.rng) {
                Some(&voter) => Step::Remove(voter),
                None => {
                    self.miss("membership".into(), "no voter to remove".into());
                    return;
                }
            }
        };
        // Ask any running member: a follower forwards to the leader.
        let members = self.cluster.node_ids();
        let Some(&via) = members.choose(&mut self.rng) else {
            return;
        };
        let Some(mut admin) = admin(&self.cluster, via) else {
            return;
        };
        let (label, detail, result) = match step {
            Step::Promote(node) => {
                let result = admin
                    .promote_learner(v1::PromoteLearnerRequest { node_id: node })
                    .await;
                (
                    "membership:promote",
                    format!("promote learner {node} (asked node {via})"),
                    result.map(drop),
                )
            }
            Step::Add { node, again } => {
                let label = if again {
                    "membership:re-add"
                } else {
                    "membership:add-learner"
                };
                if let Err(error) = self.cluster.start_spare(node) {
                    self.miss(label.into(), format!("node {node} cannot start: {error}"));
                    return;
                }
                let address = self.cluster.addr(node).unwrap_or_default();
                let result = admin
                    .add_learner(v1::AddLearnerRequest {
                        node_id: node,
                        address: address.clone(),
                    })
                    .await;
                (
                    label,
                    format!("add node {node} at {address} as a learner (asked node {via})"),
                    result.map(drop),
                )
            }
            Step::Remove(node) => {
                let result = admin
                    .remove_member(v1::RemoveMemberRequest { node_id: node })
                    .await;
                (
                    "membership:remove",
                    format!("remove voter {node} (asked node {via})"),
                    result.map(drop),
                )
            }
        };
        let removed = match step {
            Step::Remove(node) => Some(node),
            _ => None,
        };
        match result {
            Ok(()) => {
                let fault = self.count(label.into(), detail);
                // The removal committed (the call returns once the final
                // configuration did): retire that node, and only it.
                if let Some(node) = removed
                    && leader_membership(&self.cluster).is_some_and(|(voters, learners, _)| {
                        !voters.contains(&node) && !learners.contains(&node)
                    })
                {
                    self.cluster.retire(node).await;
                    self.history
                        .fault("retired", format!("node {node} left the membership"));
                }
                self.sync_members(false).await;
                self.history.fault_ended(fault);
            }
            Err(status) => {
                self.miss(
                    label.into(),
                    format!("{detail}: {:?} {}", status.code(), status.message()),
                );
                self.sync_members(false).await;
            }
        }
    }

    /// Takes the harness's member set from the leader's membership. During
    /// the campaign (`full` false) members are only added: a leader's
    /// view may be stale there, and retiring (deleting the files of) a node
    /// that is still a voter would be a lost disk, not a membership change.
    /// When healing (`full`: the replicas agree on one leader), a member
    /// that left is crashed and its files deleted. Either way a slot
    /// started to join that is not a member is stopped.
    pub(crate) async fn sync_members(&mut self, full: bool) {
        let Some((voters, learners, _)) = leader_membership(&self.cluster) else {
            return;
        };
        let before: BTreeSet<NodeId> = self.cluster.node_ids().into_iter().collect();
        let mut members: BTreeSet<NodeId> = voters.union(&learners).copied().collect();
        if !full {
            members.extend(before.iter().copied());
        }
        self.cluster.set_members(members.clone());
        for gone in before.difference(&members) {
            self.cluster.retire(*gone).await;
            self.history
                .fault("retired", format!("node {gone} left the membership"));
        }
        for spare in self.cluster.spares() {
            if self.cluster.is_running(spare) {
                self.cluster.crash(spare).await;
                self.history
                    .fault("stopped", format!("node {spare} is not a member"));
            }
        }
    }
}
