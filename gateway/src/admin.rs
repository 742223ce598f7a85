//! `palisade.v1.ClusterAdmin`: this replica's view of the cluster, and
//! membership changes (add a learner, promote it, remove a member, move
//! leadership).
//!
//! Membership changes must run on the leader. A replica that does not lead
//! forwards the call to the leader's peer port (the address in the
//! membership, mutual TLS; only [`RELAYED_METHODS`] are served there) and
//! relays the answer, so operators may call any replica.
//!
//! Also API tokens (create, list, revoke), `WhoAmI`, and `SaveSnapshot`
//! (a consistent copy of the state for backups, served by the replica
//! asked, after a read index); every method but
//! `WhoAmI` is admin-only, enforced by [`crate::auth`] before it gets here.
//!
//! `RotateTokenKey` is relayed like a membership change, not forwarded as
//! a command: its `Command::RotateTokenKey` carries the new key, so it is
//! leader-internal (`Command::is_client_proposable` is false and a peer's
//! `ForwardWrite` of one is refused). The leader draws the key itself, so
//! no replica but the leader ever chooses the cluster's key, and a relay
//! carries only the grace, never key material.

use openraft::async_runtime::WatchReceiver as _;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::ChangeMembers;
use openraft::error::{ClientWriteError, RaftError};
use palisade_proto::v1::{
    self, cluster_admin_client::ClusterAdminClient, cluster_admin_server::ClusterAdmin,
};
use sha2::Digest;
use tonic::{Code, Request, Response, Status};

use crate::errors::{self, NO_LEADER};
use crate::executor::Executor;
use crate::replica::Replica;

/// How long a membership change may take (a learner catching up included).
/// Normalizes `host:port` or `http://host:port` to a URI.
pub fn endpoint_uri(endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    }
}

/// The admin methods a follower relays to the leader, and that founding
/// members ask each other: all the peer port serves of `ClusterAdmin`.
pub const RELAYED_METHODS: [&str; 7] = [
    "GetClusterInfo",
    "AddLearner",
    "PromoteLearner",
    "RemoveMember",
    "TransferLeader",
    "ReconcileOrphans",
    "RotateTokenKey",
];

const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a leader transfer may take to show.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

/// Implements `palisade.v1.ClusterAdmin`.
#[derive(Clone)]
pub struct AdminService {
    replica: Replica,
    executor: Arc<Executor>,
}

impl AdminService {
    /// An admin service for `replica`, whose executor is `executor`.
    pub fn new(replica: Replica, executor: Arc<Executor>) -> Self {
        Self { replica, executor }
    }

    async fn info(&self) -> v1::ClusterInfo {
        cluster_info(&self.replica, &self.executor).await
    }

    /// The leader's admin client when this replica does not lead.
    async fn leader_client(
        &self,
    ) -> Result<Option<ClusterAdminClient<tonic::transport::Channel>>, Status> {
        let Some((leader, address)) = self.replica.leader() else {
            return Err(errors::unavailable(
                NO_LEADER,
                "no leader is known; retry shortly",
            ));
        };
        if leader == self.replica.node_id {
            return Ok(None);
        }
        // The leader's peer port (what the membership records), over the
        // same mutual TLS as Raft.
        let channel = palisade_raft::tls::peer_endpoint(&address, leader, self.replica.peers.tls())
            .map_err(|error| {
                errors::unavailable(
                    NO_LEADER,
                    format!("leader address {address:?} is invalid: {error}"),
                )
            })?
            .connect_timeout(Duration::from_secs(2));
        let channel = palisade_raft::simnet::channel(channel)
            .await
            .map_err(|error| {
                errors::unavailable(
                    NO_LEADER,
                    format!("cannot reach the leader (node {leader} at {address}): {error}"),
                )
            })?;
        Ok(Some(ClusterAdminClient::new(channel)))
    }
}

impl AdminService {
    /// The API token `id` as this replica applied it.
    fn api_token(&self, id: &str) -> Result<v1::ApiToken, Status> {
        self.replica
            .state
            .read(|applied| applied.state.api_tokens.get(id).map(api_token_to_proto))
            .ok_or_else(|| {
                errors::status(
                    Code::NotFound,
                    "TOKEN_NOT_FOUND",
                    format!("no API token {id:?}"),
                    [],
                )
            })
    }
}

fn api_token_to_proto(token: &palisade_lifecycle::ApiToken) -> v1::ApiToken {
    v1::ApiToken {
        id: token.id.clone(),
        role: token.role.clone(),
        workspace: token.workspace.clone(),
        created_by: token.created_by.clone(),
        created_at_ms: token.created_at_ms,
        expires_at_ms: token.expires_at_ms,
        revoked: token.revoked,
    }
}

/// This replica's view of the cluster.
pub async fn cluster_info(replica: &Replica, executor: &Executor) -> v1::ClusterInfo {
    let (orphans_found, orphans_reaped) = executor.orphan_counts();
    let metrics = replica.raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let matched = metrics.replication.clone().unwrap_or_default();
    let members = membership
        .nodes()
        .map(|(id, node)| v1::ClusterMember {
            node_id: *id,
            address: node.addr.clone(),
            role: if voters.contains(id) {
                "voter"
            } else {
                "learner"
            }
            .to_string(),
            matched_index: matched
                .get(id)
                .and_then(|log_id| log_id.as_ref().map(|log_id| log_id.index)),
        })
        .collect();
    let leader_address = metrics
        .current_leader
        .and_then(|leader| membership.get_node(&leader).map(|node| node.addr.clone()))
        .unwrap_or_default();
    // A digest serializes the whole state under the state's read lock
    // (apply waits for it): at most once per applied index, within a CPU
    // budget (`crate::digest_cache`), and on the blocking pool, so it never
    // holds up the runtime's few threads (Raft heartbeats run there). It
    // encodes through `with_encoded`, which also measures the state's exact
    // size (`state_bytes`).
    let (digests, state) = (replica.state_digest.clone(), replica.state.clone());
    let digest = palisade_raft::runtime::blocking(move || {
        digests.get(state.applied_index(), || {
            // Hashed as it is encoded: the encoding is never all in memory.
            let mut hasher = sha2::Sha256::new();
            match state.encode_into(&mut hasher) {
                Ok(applied) => (
                    applied.map_or(0, |id| id.index),
                    hex::encode(hasher.finalize()),
                ),
                Err(error) => {
                    tracing::error!(%error, "encoding the state for its digest failed");
                    (0, String::new())
                }
            }
        })
    })
    .await;
    let (state_applied_index, state_digest) = digest.unwrap_or_else(|error| {
        // Only a panic inside the encoding (a poisoned state, which stops
        // this replica) gets here.
        tracing::error!(%error, "computing the state digest failed");
        (0, String::new())
    });
    let cluster_id = replica.state.read(|applied| {
        applied
            .state
            .cluster
            .as_ref()
            .map(|cluster| cluster.cluster_id.clone())
            .unwrap_or_default()
    });
    let projection = replica.projection.as_ref().map(|projection| {
        let status = projection.status();
        v1::ProjectionStatus {
            state: status.state.as_str().into(),
            projected_index: status.projected_index,
            applied_index: status.applied_index,
            lag_entries: status.lag_entries,
            lag_ms: status.lag_ms,
            conflicts: status.conflicts,
            resyncs: status.resyncs,
            failures: status.failures,
            last_error: status.last_error.unwrap_or_default(),
        }
    });
    v1::ClusterInfo {
        state_bytes: replica.state.state_bytes(),
        state_bytes_max: palisade_raft::STATE_BYTES_MAX,
        snapshot_bytes: replica.state.snapshot_bytes(),
        snapshot_bytes_max: palisade_raft::SNAPSHOT_BYTES_BUDGET,
        receipts: replica
            .state
            .read(|applied| applied.state.receipts.len() as u64),
        feature_level: replica.state.read(|applied| applied.state.feature_level),
        supported_feature_level: palisade_raft::feature_level::supported(),
        members_heard_from: replica.members_heard.ids(),
        projection,
        state_digest,
        node_id: replica.node_id,
        leader_id: metrics.current_leader,
        term: metrics.current_term,
        commit_index: metrics.local_committed.map_or(0, |id| id.index),
        // The index the digest was taken at (see `crate::digest_cache`).
        applied_index: state_applied_index,
        server_state: format!("{:?}", metrics.state),
        members,
        leader_address,
        orphans_found,
        orphans_reaped,
        cluster_id,
        executor_blocked: executor.blocked_reason().unwrap_or_default(),
    }
}

fn membership_error(
    error: RaftError<palisade_raft::TypeConfig, ClientWriteError<palisade_raft::TypeConfig>>,
) -> Status {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => errors::unavailable(
            errors::LEADERSHIP_CHANGED,
            "leadership moved during the membership change; retry",
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => errors::status(
            Code::FailedPrecondition,
            "MEMBERSHIP_CHANGE_REFUSED",
            format!("membership change refused: {error}"),
            [],
        ),
        other => errors::unavailable(
            errors::INTERNAL,
            format!("membership change failed: {other}"),
        ),
    }
}

fn invalid_node_id(node_id: u64) -> Result<(), Status> {
    if node_id == 0 {
        return Err(errors::invalid_input(
            palisade_lifecycle::validate::InvalidInput {
                field: "node_id",
                problem: "node ids start at 1".into(),
            },
        ));
    }
    Ok(())
}

async fn bounded<T>(
    future: impl Future<Output = Result<T, Status>>,
    timeout: Duration,
    what: &str,
) -> Result<T, Status> {
    tokio::time::timeout(timeout, future).await.map_err(|_| {
        errors::unavailable(
            errors::OUTCOME_PENDING,
            format!("{what} did not finish within {timeout:?}; check `palisade cluster status`"),
        )
    })?
}

#[tonic::async_trait]
impl ClusterAdmin for AdminService {
    async fn get_cluster_info(
        &self,
        _request: Request<v1::GetClusterInfoRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        Ok(Response::new(self.info().await))
    }

    async fn add_learner(
        &self,
        request: Request<v1::AddLearnerRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        let request = request.into_inner();
        invalid_node_id(request.node_id)?;
        let address = palisade_lifecycle::validate::address("address", &request.address)
            .map_err(errors::invalid_input)?;
        if let Some(mut leader) = self.leader_client().await? {
            return leader
                .add_learner(v1::AddLearnerRequest {
                    node_id: request.node_id,
                    address,
                })
                .await;
        }
        let node = palisade_raft::Node { addr: address };
        bounded(
            async {
                self.replica
                    .raft
                    .add_learner(request.node_id, node, true)
                    .await
                    .map_err(membership_error)
            },
            MEMBERSHIP_CHANGE_TIMEOUT,
            "adding the learner",
        )
        .await?;
        Ok(Response::new(self.info().await))
    }

    async fn promote_learner(
        &self,
        request: Request<v1::PromoteLearnerRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        let request = request.into_inner();
        invalid_node_id(request.node_id)?;
        if let Some(mut leader) = self.leader_client().await? {
            return leader.promote_learner(request).await;
        }
        // A learner, or a node whose promotion was cut short (the leader
        // changed between the joint and the final configuration, and
        // openraft leaves a joint configuration to whoever changes the
        // membership next): a voter in some configurations of a joint
        // membership but not in all. Promoting it again finishes the change.
        let is_learner = {
            let metrics = self.replica.raft.metrics();
            let metrics = metrics.borrow_watched();
            let membership = metrics.membership_config.membership();
            membership.get_node(&request.node_id).is_some()
                && !membership
                    .get_joint_config()
                    .iter()
                    .all(|config| config.contains(&request.node_id))
        };
        if !is_learner {
            return Err(errors::status(
                Code::FailedPrecondition,
                "NOT_A_LEARNER",
                format!(
                    "node {} is not a learner; add it with `palisade cluster add-learner` first",
                    request.node_id
                ),
                [],
            ));
        }
        bounded(
            async {
                self.replica
                    .raft
                    .change_membership(
                        ChangeMembers::AddVoterIds(BTreeSet::from([request.node_id])),
                        false,
                    )
                    .await
                    .map_err(membership_error)
            },
            MEMBERSHIP_CHANGE_TIMEOUT,
            "promoting the learner",
        )
        .await?;
        Ok(Response::new(self.info().await))
    }

    async fn remove_member(
        &self,
        request: Request<v1::RemoveMemberRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        let request = request.into_inner();
        invalid_node_id(request.node_id)?;
        if let Some(mut leader) = self.leader_client().await? {
            return leader.remove_member(request).await;
        }
        let (is_voter, is_member) = {
            let metrics = self.replica.raft.metrics();
            let metrics = metrics.borrow_watched();
            let membership = metrics.membership_config.membership();
            (
                membership.voter_ids().any(|id| id == request.node_id),
                membership.get_node(&request.node_id).is_some(),
            )
        };
        if !is_member {
            return Err(errors::status(
                Code::NotFound,
                "MEMBER_NOT_FOUND",
                format!("node {} is not a member", request.node_id),
                [],
            ));
        }
        let change = if is_voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([request.node_id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([request.node_id]))
        };
        bounded(
            async {
                // retain = false: a removed voter is dropped from the nodes too.
                self.replica
                    .raft
                    .change_membership(change, false)
                    .await
                    .map_err(membership_error)
            },
            MEMBERSHIP_CHANGE_TIMEOUT,
            "removing the member",
        )
        .await?;
        Ok(Response::new(self.info().await))
    }

    async fn transfer_leader(
        &self,
        request: Request<v1::TransferLeaderRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        let request = request.into_inner();
        invalid_node_id(request.node_id)?;
        if let Some(mut leader) = self.leader_client().await? {
            return leader.transfer_leader(request).await;
        }
        let target = request.node_id;
        if target == self.replica.node_id {
            return Ok(Response::new(self.info().await));
        }
        let is_voter = {
            let metrics = self.replica.raft.metrics();
            let metrics = metrics.borrow_watched();
            metrics
                .membership_config
                .membership()
                .voter_ids()
                .any(|id| id == target)
        };
        if !is_voter {
            return Err(errors::status(
                Code::FailedPrecondition,
                "NOT_A_VOTER",
                format!("node {target} is not a voter; only voters can lead"),
                [],
            ));
        }
        self.replica
            .raft
            .trigger()
            .transfer_leader(target)
            .await
            .map_err(|error| {
                errors::unavailable(errors::INTERNAL, format!("transfer failed: {error}"))
            })?;
        let moved = self
            .replica
            .raft
            .wait(Some(TRANSFER_TIMEOUT))
            .metrics(
                |metrics| metrics.current_leader == Some(target),
                "leader moved",
            )
            .await;
        if moved.is_err() {
            return Err(errors::unavailable(
                errors::OUTCOME_PENDING,
                format!(
                    "node {target} did not take over within {TRANSFER_TIMEOUT:?}; check `palisade cluster status`"
                ),
            ));
        }
        Ok(Response::new(self.info().await))
    }

    async fn reconcile_orphans(
        &self,
        request: Request<v1::ReconcileOrphansRequest>,
    ) -> Result<Response<v1::ReconcileOrphansReport>, Status> {
        let request = request.into_inner();
        if let Some(mut leader) = self.leader_client().await? {
            return leader.reconcile_orphans(request).await;
        }
        let Some(term) = self.replica.leading_term() else {
            return Err(errors::unavailable(
                NO_LEADER,
                "this replica stopped leading while asked; retry",
            ));
        };
        let report = self
            .executor
            .reconcile(term, request.dry_run)
            .await
            .map_err(|message| {
                errors::unavailable(
                    errors::LEADERSHIP_CHANGED,
                    format!("reconciliation did not run: {message}; retry"),
                )
            })?;
        let orphans = report
            .orphans
            .into_iter()
            .map(|seen| v1::OrphanExecution {
                sandbox_id: seen.orphan.sandbox_id,
                generation: seen.orphan.generation,
                reason: seen.orphan.reason.name().into(),
                action: seen.orphan.action.name().into(),
                seen_for_ms: u64::try_from(seen.seen_for.as_millis()).unwrap_or(u64::MAX),
                due: seen.due,
                reaped: matches!(seen.reaped, Some(Ok(()))),
                error: match seen.reaped {
                    Some(Err(error)) => error,
                    _ => String::new(),
                },
            })
            .collect();
        Ok(Response::new(v1::ReconcileOrphansReport {
            leader_id: self.replica.node_id,
            dry_run: report.dry_run,
            orphans,
            orphans_found_total: report.found_total,
            orphans_reaped_total: report.reaped_total,
        }))
    }

    async fn create_api_token(
        &self,
        request: Request<v1::CreateApiTokenRequest>,
    ) -> Result<Response<v1::CreateApiTokenResponse>, Status> {
        let caller = crate::auth::Caller::of(&request)?;
        let request = request.into_inner();
        let ttl_ms = i64::try_from(request.ttl_seconds)
            .ok()
            .and_then(|seconds| seconds.checked_mul(1000))
            .filter(|ttl| *ttl <= palisade_lifecycle::limits::API_TOKEN_TTL_MS_MAX)
            .ok_or_else(|| {
                errors::status(
                    Code::InvalidArgument,
                    "INVALID_TTL_SECONDS",
                    format!(
                        "ttl_seconds {} exceeds the longest token lifetime ({} s)",
                        request.ttl_seconds,
                        palisade_lifecycle::limits::API_TOKEN_TTL_MS_MAX / 1000
                    ),
                    [("field", "ttl_seconds".to_string())],
                )
            })?;
        if crate::auth::Role::parse(&request.role, &request.workspace).is_none() {
            return Err(errors::status(
                Code::InvalidArgument,
                "INVALID_ROLE",
                format!(
                    "role {:?} with workspace {:?}: use admin (no workspace), or editor / viewer \
                     with a workspace",
                    request.role, request.workspace
                ),
                [("field", "role".to_string())],
            ));
        }
        // Expiry counts from the replicated clock, which the first leader's
        // first tick starts: until then a lifetime has no origin.
        if ttl_ms > 0 && self.replica.state.read(|applied| applied.state.clock_ms) == 0 {
            return Err(errors::unavailable(
                errors::NO_LEADER,
                "the cluster's replicated clock has not started yet; retry in a few seconds",
            ));
        }
        let (id, secret, token) = crate::auth::new_token();
        let command = palisade_lifecycle::Command::CreateApiToken {
            id: id.clone(),
            secret_sha256: crate::auth::secret_sha256(&secret),
            role: request.role,
            workspace: request.workspace,
            ttl_ms,
            created_by: caller.principal.clone(),
        };
        let proposed = crate::auth::as_caller(caller, self.replica.propose(command)).await?;
        proposed.response.map_err(errors::rejection)?;
        let stored = self.api_token(&id)?;
        Ok(Response::new(v1::CreateApiTokenResponse {
            token: Some(stored),
            secret: token,
        }))
    }

    async fn list_api_tokens(
        &self,
        _request: Request<v1::ListApiTokensRequest>,
    ) -> Result<Response<v1::ListApiTokensResponse>, Status> {
        let tokens = self.replica.state.read(|applied| {
            applied
                .state
                .api_tokens
                .values()
                .map(api_token_to_proto)
                .collect()
        });
        Ok(Response::new(v1::ListApiTokensResponse { tokens }))
    }

    async fn revoke_api_token(
        &self,
        request: Request<v1::RevokeApiTokenRequest>,
    ) -> Result<Response<v1::ApiToken>, Status> {
        let caller = crate::auth::Caller::of(&request)?;
        let request = request.into_inner();
        let command = palisade_lifecycle::Command::RevokeApiToken {
            id: request.id.clone(),
        };
        let proposed = crate::auth::as_caller(caller, self.replica.propose(command)).await?;
        proposed.response.map_err(errors::rejection)?;
        Ok(Response::new(self.api_token(&request.id)?))
    }

    async fn rotate_token_key(
        &self,
        request: Request<v1::RotateTokenKeyRequest>,
    ) -> Result<Response<v1::RotateTokenKeyResponse>, Status> {
        // The audit trail of a leader-internal command is this line, on the
        // replica the admin called (a relay reaches the leader as a peer).
        let caller = crate::auth::Caller::of(&request)
            .map(|caller| caller.principal.clone())
            .unwrap_or_default();
        let request = request.into_inner();
        tracing::info!(
            %caller,
            grace_seconds = request.grace_seconds,
            "execution-token key rotation asked"
        );
        let grace_ms = i64::try_from(request.grace_seconds)
            .ok()
            .and_then(|seconds| seconds.checked_mul(1000))
            .filter(|grace| *grace <= palisade_lifecycle::limits::TOKEN_KEY_GRACE_MS_MAX)
            .ok_or_else(|| {
                errors::status(
                    Code::InvalidArgument,
                    "INVALID_GRACE_SECONDS",
                    format!(
                        "grace_seconds {} exceeds the longest grace of a retired key ({} s)",
                        request.grace_seconds,
                        palisade_lifecycle::limits::TOKEN_KEY_GRACE_MS_MAX / 1000
                    ),
                    [("field", "grace_seconds".to_string())],
                )
            })?;
        if let Some(mut leader) = self.leader_client().await? {
            return leader.rotate_token_key(request).await;
        }
        // A deadline counts from the replicated clock, which the first
        // leader's first tick starts: until then it has no origin.
        let (initialized, clock_ms) = self
            .replica
            .state
            .read(|applied| (applied.state.cluster.is_some(), applied.state.clock_ms));
        if !initialized || clock_ms == 0 {
            return Err(errors::unavailable(
                NO_LEADER,
                "the cluster has no execution-token key or replicated clock yet; retry in a few seconds",
            ));
        }
        // Drawn here, on the leader, and written into the command: apply
        // has no randomness.
        let key: [u8; 32] = crate::ids::random_bytes();
        let command = palisade_lifecycle::Command::RotateTokenKey {
            token_secret_hex: hex::encode(key),
            grace_ms,
        };
        let proposed = self.replica.propose_as_leader(command).await?;
        let outcome = proposed.response.map_err(errors::rejection)?;
        let palisade_lifecycle::Outcome::TokenKeyRotated {
            key_id,
            retired_key_id,
            retired_valid_until_ms,
        } = outcome
        else {
            return Err(errors::unavailable(
                errors::INTERNAL,
                format!("a key rotation applied as {outcome:?}; check `palisade cluster status`"),
            ));
        };
        let retired_keys = self.replica.state.read(|applied| {
            applied
                .state
                .cluster
                .iter()
                .flat_map(|cluster| cluster.retired_token_keys.iter())
                .map(|key| v1::RetiredTokenKey {
                    key_id: key.key_id,
                    valid_until_ms: key.valid_until_ms,
                })
                .collect()
        });
        tracing::info!(
            key_id,
            retired_key_id,
            retired_valid_until_ms,
            "execution-token key rotated"
        );
        Ok(Response::new(v1::RotateTokenKeyResponse {
            key_id,
            retired_key_id,
            retired_valid_until_ms,
            retired_keys,
            rotated_at_ms: retired_valid_until_ms.saturating_sub(grace_ms),
        }))
    }

    async fn who_am_i(
        &self,
        request: Request<v1::WhoAmIRequest>,
    ) -> Result<Response<v1::WhoAmIResponse>, Status> {
        let caller = crate::auth::Caller::of(&request)?;
        Ok(Response::new(v1::WhoAmIResponse {
            principal: caller.principal.clone(),
            role: caller.role.name().to_string(),
            workspace: caller.role.workspace().to_string(),
        }))
    }

    type SaveSnapshotStream = SnapshotChunkStream;

    async fn save_snapshot(
        &self,
        _request: Request<v1::SaveSnapshotRequest>,
    ) -> Result<Response<Self::SaveSnapshotStream>, Status> {
        // Linearizable: the copy holds every write acknowledged before the
        // call (read index confirmed with a quorum, then applied here).
        self.replica.linearize().await?;
        // Encoding is O(state): on the blocking pool, not on the runtime's
        // few threads (Raft heartbeats run there); into a file, not memory
        // (a state of a day's receipts is hundreds of megabytes).
        let (state, node_id) = (self.replica.state.clone(), self.replica.node_id);
        let spool_dir = self.replica.spool_dir.clone();
        let spooled = palisade_raft::runtime::blocking(move || {
            palisade_raft::backup::spool_state(&state, Some(&spool_dir))
        })
        .await
        .and_then(|spooled| spooled)
        .map_err(|error| {
            Status::internal(format!(
                "encoding the state for the snapshot failed: {error}"
            ))
        })?;
        let (applied_index, applied_term) = spooled
            .last_applied
            .map_or((0, 0), |id| (id.index, id.leader_id.term));
        let header = v1::SnapshotHeader {
            applied_index,
            applied_term,
            cluster_id: spooled.cluster_id,
            state_digest: spooled.digest,
            state_bytes: spooled.bytes.len(),
            node_id,
            state_encoding: palisade_raft::backup::STATE_ENCODING_JSON.to_string(),
        };
        // The first message is the header; each data message is read from
        // the spool file only when the stream gets to it (the file has no
        // name: it goes when the stream is dropped).
        let first = futures::stream::once(async move {
            Ok(v1::SnapshotChunk {
                header: Some(header),
                data: Vec::new(),
            })
        });
        let bytes = spooled.bytes;
        let data = futures::stream::unfold(0u64, move |offset| {
            let bytes = bytes.clone();
            async move {
                if offset >= bytes.len() {
                    return None;
                }
                let piece = palisade_raft::runtime::blocking(move || {
                    let mut piece = vec![0u8; SNAPSHOT_CHUNK_BYTES];
                    let read = bytes.read_at(offset, &mut piece)?;
                    piece.truncate(read);
                    std::io::Result::Ok(piece)
                })
                .await
                .and_then(|piece| piece);
                // An error ends the stream after it (offset past the end).
                Some(match piece {
                    Ok(piece) if !piece.is_empty() => {
                        let next = offset + piece.len() as u64;
                        let chunk = v1::SnapshotChunk {
                            header: None,
                            data: piece,
                        };
                        (Ok(chunk), next)
                    }
                    Ok(_) => (
                        Err(Status::internal(
                            "the snapshot's spool file ended before its length",
                        )),
                        u64::MAX,
                    ),
                    Err(error) => (
                        Err(Status::internal(format!(
                            "reading the snapshot's spool file failed: {error}"
                        ))),
                        u64::MAX,
                    ),
                })
            }
        });
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            first, data,
        ))))
    }
}

/// State bytes per `SaveSnapshot` message: well under the 4 MiB a client
/// decodes by default.
const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// The stream a `SaveSnapshot` call answers with.
pub type SnapshotChunkStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<v1::SnapshotChunk, Status>> + Send + 'static>,
>;
