//! Founding the cluster: once, and never again from a wiped data directory.
//!
//! `--initial-cluster` founds a cluster the first time a replica starts:
//! a replica whose storage was never initialized calls openraft's
//! `initialize` with the founding members (every founder may; the first
//! wins). That is also what a founder whose data directory was wiped (a
//! replaced disk, an operator's `rm -rf`) would do when restarted with the
//! same flags — and it would come back with no log and no vote: it could
//! vote a second time in a term it already voted in, or help elect a
//! leader that lacks writes it had acknowledged. So before founding, an
//! uninitialized replica asks the other founding members
//! (`ClusterAdmin.GetClusterInfo`, each within [`FOUNDING_CHECK_TIMEOUT`])
//! and refuses to start when one of them answers that
//!
//! - a cluster runs and **has heard from this node id before** (see
//!   below): the node's data was lost ([`NodeError::WipedMember`]); or
//! - a cluster runs **without this node id** among its members: it was
//!   removed, or never was a member ([`NodeError::NotAMember`]).
//!
//! Either error says what to do: remove the node id from the cluster
//! (`palisade cluster remove N`), start the replica with an empty data
//! directory *without* `--initial-cluster`, and add it back
//! (`palisade cluster add-learner N ADDRESS`, then `promote`).
//!
//! # Key decision: "heard from", kept by every replica
//!
//! A founder that was merely slow to start (its peers founded the cluster
//! and run without it) is a member that never ran: it must found-and-join
//! normally. It cannot be told from a wiped one by the membership alone
//! (both are members from the first entry on), nor by the leader's
//! replication progress alone (a new leader elected while the node was
//! down has none for it). So every replica keeps, in its data directory,
//! the set of node ids it has exchanged Raft messages with
//! ([`MembersHeard`], file [`MEMBERS_HEARD_FILE`]): as leader, the members
//! that acknowledged its log; as follower, the leaders it followed. That is
//! etcd's "member has already been bootstrapped" check, with the evidence
//! kept by the peers instead of published in the replicated state. It is
//! written only when the set grows (a handful of times in a replica's
//! life), and reported in `ClusterInfo.members_heard_from`.
//!
//! If no founding member answers in time, the replica founds: a cluster
//! first started all at once looks exactly like that, and a wiped founder
//! restarted while every other founder is down has no cluster to harm
//! until they return (it then cannot win an election: its log is empty).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_raft::{NodeId, Raft};
use tracing::{info, warn};

use crate::node::NodeError;

/// How long an uninitialized replica waits for each founding member to
/// answer before founding (they are asked at once).
pub const FOUNDING_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The file in the data directory that keeps [`MembersHeard`]: node ids,
/// one per line.
pub const MEMBERS_HEARD_FILE: &str = "members-heard";

/// The node ids this replica has exchanged Raft messages with, durable in
/// its data directory (see the module doc). Cheap to clone.
#[derive(Clone, Debug)]
pub struct MembersHeard {
    path: PathBuf,
    /// The set as last written. A std mutex: held only to copy or compare
    /// the set, never across an await or the file write.
    ids: Arc<Mutex<BTreeSet<NodeId>>>,
    /// Serializes writers of the file (the recorder is the only one; a
    /// mutex rather than a promise).
    writing: Arc<tokio::sync::Mutex<()>>,
}

impl MembersHeard {
    /// Opens the record in `data_dir` (empty when there is none yet).
    pub fn open(data_dir: &Path) -> Result<Self, NodeError> {
        let path = data_dir.join(MEMBERS_HEARD_FILE);
        let ids = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(|line| {
                    line.parse::<NodeId>().map_err(|_| NodeError::DataDir {
                        path: path.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{line:?} is not a node id"),
                        ),
                    })
                })
                .collect::<Result<BTreeSet<_>, _>>()?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(source) => return Err(NodeError::DataDir { path, source }),
        };
        Ok(Self {
            path,
            ids: Arc::new(Mutex::new(ids)),
            writing: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The node ids heard from, ascending.
    pub fn ids(&self) -> Vec<NodeId> {
        self.lock().iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<NodeId>> {
        // The set is only ever replaced whole: a poisoned lock holds a
        // complete set.
        self.ids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `heard` to the record, durably, if it holds new ids.
    pub async fn record(&self, heard: &BTreeSet<NodeId>) -> std::io::Result<()> {
        let _writing = self.writing.lock().await;
        let grown = {
            let ids = self.lock();
            if heard.is_subset(&ids) {
                return Ok(());
            }
            ids.union(heard).copied().collect::<BTreeSet<_>>()
        };
        let path = self.path.clone();
        let contents: String = grown.iter().map(|id| format!("{id}\n")).collect();
        palisade_raft::runtime::blocking(move || write_atomically(&path, contents.as_bytes()))
            .await
            .map_err(std::io::Error::other)??;
        info!(members = ?grown, "recorded the members this replica has heard from");
        *self.lock() = grown;
        Ok(())
    }
}

/// Temporary file, fsync, rename, fsync the directory.
fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The node ids the metrics show this replica exchanging Raft messages
/// with: as leader, those that acknowledged its log; otherwise the leader
/// whose entries it accepted (its vote for it is committed).
fn heard_in(
    node_id: NodeId,
    metrics: &openraft::RaftMetrics<palisade_raft::TypeConfig>,
) -> BTreeSet<NodeId> {
    let mut heard: BTreeSet<NodeId> = metrics
        .replication
        .iter()
        .flatten()
        .filter(|(_, matched)| matched.is_some())
        .map(|(id, _)| *id)
        .collect();
    heard.extend(metrics.current_leader);
    heard.remove(&node_id);
    heard
}

/// Keeps `record` up to date from `raft`'s metrics until Raft stops.
///
/// openraft's full metrics change with every append, commit and apply, and
/// a task woken by each change costs a busy replica a wake-up (often of
/// another thread) per change. So the recorder watches them only while
/// they may still show a member not heard from ([`may_hear_more`]); once
/// everything they can show is recorded, it waits on the server metrics
/// (vote, state, leader, membership), which change only with an election
/// or a membership change: the only events after which more can be heard.
pub fn spawn_recorder(
    node_id: NodeId,
    raft: &Raft,
    record: MembersHeard,
) -> tokio::task::JoinHandle<()> {
    let mut metrics = raft.metrics();
    let mut server = raft.server_metrics();
    tokio::spawn(async move {
        loop {
            let (heard, more) = {
                let server = server.borrow_and_update();
                let metrics = metrics.borrow_and_update();
                (
                    heard_in(node_id, &metrics),
                    may_hear_more(node_id, &metrics, &server),
                )
            };
            let recorded = match record.record(&heard).await {
                Ok(()) => true,
                Err(error) => {
                    // Not fatal: the record only strengthens a startup check.
                    warn!(%error, "cannot record the members heard from; will retry");
                    false
                }
            };
            let changed = if recorded && !more {
                server.changed().await
            } else {
                metrics.changed().await
            };
            if changed.is_err() {
                return;
            }
        }
    })
}

/// Whether `metrics` may yet show a member heard from that they do not
/// show now, before `server` (the server metrics) changes: when they lag
/// behind the server metrics (those are published first), or when this
/// replica leads and a replication target has not acknowledged its log
/// yet. A follower hears only its leader, which the server metrics show.
fn may_hear_more(
    node_id: NodeId,
    metrics: &openraft::RaftMetrics<palisade_raft::TypeConfig>,
    server: &openraft::metrics::RaftServerMetrics<palisade_raft::TypeConfig>,
) -> bool {
    let agree = metrics.state == server.state
        && metrics.current_leader == server.current_leader
        && metrics.vote == server.vote
        && metrics.membership_config.log_id() == server.membership_config.log_id();
    let unacknowledged = metrics
        .replication
        .iter()
        .flatten()
        .any(|(id, matched)| *id != node_id && matched.is_none());
    !agree || unacknowledged
}

/// What a founding member answered.
#[derive(Debug, Clone)]
pub struct PeerView {
    /// The member asked.
    pub node_id: NodeId,
    /// Where it was asked.
    pub address: String,
    /// Its answer.
    pub info: v1::ClusterInfo,
}

/// Whether `node_id`, uninitialized, may found the cluster, given what the
/// founding members that answered said. Pure, so the rule reads (and is
/// tested) on its own.
pub fn may_found(node_id: NodeId, data_dir: &Path, views: &[PeerView]) -> Result<(), NodeError> {
    for view in views {
        // An uninitialized member knows no cluster yet.
        if view.info.members.is_empty() {
            continue;
        }
        if !view
            .info
            .members
            .iter()
            .any(|member| member.node_id == node_id)
        {
            return Err(NodeError::NotAMember {
                node_id,
                peer: view.node_id,
                peer_address: view.address.clone(),
                members: view
                    .info
                    .members
                    .iter()
                    .map(|member| member.node_id)
                    .collect(),
            });
        }
        if view.info.members_heard_from.contains(&node_id) {
            return Err(NodeError::WipedMember {
                node_id,
                data_dir: data_dir.to_path_buf(),
                peer: view.node_id,
                peer_address: view.address.clone(),
            });
        }
    }
    Ok(())
}

/// Asks every other founding member for its cluster view, at once, each
/// within [`FOUNDING_CHECK_TIMEOUT`]; returns the answers that came.
pub async fn ask_founding_members(
    node_id: NodeId,
    initial_cluster: &BTreeMap<NodeId, String>,
    tls: Option<&palisade_raft::tls::TlsMaterial>,
) -> Vec<PeerView> {
    let asks = initial_cluster
        .iter()
        .filter(|(id, _)| **id != node_id)
        .map(|(id, address)| async move {
            let asked = tokio::time::timeout(FOUNDING_CHECK_TIMEOUT, async {
                // The members' peer ports, over the same mutual TLS as Raft.
                let channel = palisade_raft::tls::peer_endpoint(address, *id, tls)
                    .map_err(|error| error.to_string())?
                    .connect_timeout(FOUNDING_CHECK_TIMEOUT);
                let channel = palisade_raft::simnet::channel(channel)
                    .await
                    .map_err(|error| error.to_string())?;
                ClusterAdminClient::new(channel)
                    .get_cluster_info(v1::GetClusterInfoRequest {})
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|status| status.to_string())
            })
            .await;
            match asked {
                Ok(Ok(info)) => Some(PeerView {
                    node_id: *id,
                    address: address.clone(),
                    info,
                }),
                Ok(Err(error)) => {
                    info!(peer = id, %address, %error, "founding member did not answer");
                    None
                }
                Err(_) => {
                    info!(peer = id, %address, "founding member did not answer in time");
                    None
                }
            }
        });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(peer: NodeId, members: &[NodeId], heard: &[NodeId]) -> PeerView {
        PeerView {
            node_id: peer,
            address: format!("10.0.0.{peer}:7001"),
            info: v1::ClusterInfo {
                node_id: peer,
                members: members
                    .iter()
                    .map(|id| v1::ClusterMember {
                        node_id: *id,
                        role: "voter".into(),
                        ..Default::default()
                    })
                    .collect(),
                members_heard_from: heard.to_vec(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_founder_may_found_when_nobody_heard_from_it() {
        let dir = Path::new("/data/node-3");
        // Nobody answered, or nobody runs a cluster yet.
        assert!(may_found(3, dir, &[]).is_ok());
        assert!(may_found(3, dir, &[view(1, &[], &[])]).is_ok());
        // A slow founder: the others founded and run without it so far.
        assert!(
            may_found(
                3,
                dir,
                &[view(1, &[1, 2, 3], &[2]), view(2, &[1, 2, 3], &[1])]
            )
            .is_ok()
        );
    }

    #[test]
    fn a_wiped_member_is_refused() {
        let dir = Path::new("/data/node-3");
        let refused = may_found(
            3,
            dir,
            &[view(2, &[1, 2, 3], &[1]), view(1, &[1, 2, 3], &[2, 3])],
        );
        let Err(NodeError::WipedMember {
            node_id: 3,
            peer: 1,
            ..
        }) = refused
        else {
            panic!("{refused:?}");
        };
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("palisade cluster remove 3"), "{message}");
        assert!(message.contains("without --initial-cluster"), "{message}");
    }

    #[test]
    fn a_removed_member_is_refused() {
        let refused = may_found(
            3,
            Path::new("/data/node-3"),
            &[view(1, &[1, 2, 4], &[2, 4])],
        );
        let Err(NodeError::NotAMember {
            node_id: 3,
            peer: 1,
            ..
        }) = refused
        else {
            panic!("{refused:?}");
        };
    }

    #[tokio::test]
    async fn the_record_survives_a_restart_and_only_grows() {
        let dir = tempfile::tempdir().unwrap();
        let record = MembersHeard::open(dir.path()).unwrap();
        assert!(record.ids().is_empty());
        record.record(&BTreeSet::from([2, 3])).await.unwrap();
        record.record(&BTreeSet::from([2])).await.unwrap();
        let reopened = MembersHeard::open(dir.path()).unwrap();
        assert_eq!(reopened.ids(), [2, 3]);
        reopened.record(&BTreeSet::from([5])).await.unwrap();
        assert_eq!(MembersHeard::open(dir.path()).unwrap().ids(), [2, 3, 5]);
    }
}
