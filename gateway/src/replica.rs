//! `Replica`: one gateway replica's handle on consensus — proposing
//! commands (locally when it leads, forwarded to the leader otherwise),
//! linearizing reads, and waiting for the applied state to reach a
//! condition.
//!
//! Every outcome that is not a definite answer is reported as "outcome
//! unknown" (UNAVAILABLE, OUTCOME_PENDING), never as a failure: a timed-out
//! or discarded proposal may still commit.
//!
//! # Handoff semantics
//!
//! | what happened | answer |
//! |---|---|
//! | no leader known, or the leader could not be reached, within the propose timeout; nothing was sent | UNAVAILABLE, NO_LEADER |
//! | the entry was appended and then discarded (`LogEntryDiscarded`), a forwarded write got no answer, or the commit did not come in time | UNAVAILABLE, OUTCOME_PENDING |
//! | the entry committed, this replica proposed it as leader and lost leadership before the operation ended | UNAVAILABLE, LEADERSHIP_CHANGED |
//! | the operation did not end within the operation wait limit | UNAVAILABLE, OUTCOME_PENDING |
//!
//! All of them are retryable, none is a failure: the client retries and
//! learns the outcome (the new leader resumes every pending operation).
//! A write refused before it was appended (`ForwardToLeader`), or a forward
//! that could not even be sent, is retried here, at the leader known next.

use openraft::async_runtime::WatchReceiver as _;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::ReadPolicy;
use openraft::error::{ClientWriteError, RaftError};
use palisade_lifecycle::{Command, Response};
use palisade_raft::network::{ForwardError, PeerClients};
use palisade_raft::state_machine::AppliedState;
use palisade_raft::{NodeId, Raft, StateHandle};
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use crate::errors::{self, LEADERSHIP_CHANGED, NO_LEADER, OUTCOME_PENDING};

/// Timeouts of the request path.
#[derive(Debug, Clone)]
pub struct ReplicaTimeouts {
    /// How long a proposal may wait for a leader and for its commit.
    pub propose_timeout: Duration,
    /// How long a handler waits for an operation's terminal state before
    /// answering OUTCOME_PENDING (the operation goes on).
    pub operation_wait_max: Duration,
}

impl Default for ReplicaTimeouts {
    fn default() -> Self {
        Self {
            propose_timeout: Duration::from_secs(10),
            operation_wait_max: Duration::from_secs(120),
        }
    }
}

/// A committed command and what apply decided.
#[derive(Debug, Clone)]
pub struct Proposed {
    /// Log index of the entry.
    pub index: u64,
    /// The apply result.
    pub response: Response,
    /// The term this replica led in when it proposed locally; `None` when
    /// the proposal was forwarded.
    pub proposed_as_leader_in: Option<u64>,
}

/// One replica: Raft handle, applied state, peers.
#[derive(Clone)]
pub struct Replica {
    /// This replica's node id.
    pub node_id: NodeId,
    /// The Raft handle.
    pub raft: Raft,
    /// Read side of the state machine.
    pub state: StateHandle,
    /// Clients to the other replicas.
    pub peers: PeerClients,
    /// Request-path timeouts.
    pub timeouts: ReplicaTimeouts,
    /// The node ids this replica has exchanged Raft messages with
    /// ([`crate::founding`]).
    pub members_heard: crate::founding::MembersHeard,
    /// The compute driver's name (`process`, `docker`, ...), for messages.
    pub driver_name: &'static str,
    /// Whether the driver runs images, CPU and memory limits and working
    /// directories: if not, the API refuses a create that asks for them.
    pub driver_runs_containers: bool,
    /// PostgreSQL read projection (`--postgres-url`); `None`: no projection.
    pub projection: Option<palisade_projection::Projection>,
    /// The applied state's digest for `GetClusterInfo`, computed at most
    /// once per applied index and within a CPU budget
    /// ([`crate::digest_cache`]).
    pub state_digest: Arc<crate::digest_cache::DigestCache>,
    /// This replica's wall clock (proposer times in commands; see
    /// [`crate::clock`]).
    pub clock: Arc<dyn crate::clock::WallClock>,
    /// This replica's metrics ([`palisade_metrics`]).
    pub metrics: std::sync::Arc<palisade_metrics::Metrics>,
    /// Where a backup of the state is encoded before it is served (the
    /// snapshot directory: on the data volume, not a small `/tmp`).
    pub spool_dir: std::path::PathBuf,
}

/// How long to wait before asking again who leads, while an election runs.
const LEADER_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A handler waiting on one sandbox re-reads its receipt at least this often,
/// woken or not: a safety net should a change that settles it ever not be
/// attributed to its sandbox (see `palisade_raft::waiters`). Not a latency:
/// the wake-up on the sandbox is.
const WAIT_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

impl Replica {
    /// The leader this replica currently knows of, and its address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let leader = metrics.current_leader?;
        let address = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node.addr.clone())
            .unwrap_or_default();
        Some((leader, address))
    }

    /// Refuses a command that can grow the state while the state's tracked
    /// size is at a ceiling: [`palisade_raft::STATE_BYTES_MAX`] without its
    /// request receipts (what a replica holds in memory), or
    /// [`palisade_raft::SNAPSHOT_BYTES_BUDGET`] with them (what a snapshot
    /// carries). Deletes, and retries of requests that already have a
    /// receipt (they add nothing), pass.
    fn check_state_budget(&self, command: &Command) -> Result<(), tonic::Status> {
        let state_bytes = self.state.state_bytes();
        let snapshot_bytes = self.state.snapshot_bytes();
        let exhausted = if state_bytes >= palisade_raft::STATE_BYTES_MAX {
            (
                "state_bytes_max",
                palisade_raft::STATE_BYTES_MAX,
                format!(
                    "the replicated state holds {state_bytes} bytes besides its request receipts, its ceiling is {} bytes (what a replica keeps in memory); delete sandboxes, then retry",
                    palisade_raft::STATE_BYTES_MAX
                ),
            )
        } else if snapshot_bytes >= palisade_raft::SNAPSHOT_BYTES_BUDGET {
            (
                "snapshot_bytes_max",
                palisade_raft::SNAPSHOT_BYTES_BUDGET,
                format!(
                    "the replicated state holds {snapshot_bytes} bytes with its request receipts, its ceiling is {} bytes (what a snapshot carries, with margin); delete sandboxes or wait for receipts to expire, then retry",
                    palisade_raft::SNAPSHOT_BYTES_BUDGET
                ),
            )
        } else {
            return Ok(());
        };
        let request_id = match command {
            Command::BeginCreate { request, .. }
            | Command::BeginStop { request, .. }
            | Command::BeginStart { request, .. } => Some(&request.id),
            Command::CreateWorkspace { .. }
            | Command::CreateSshSession { .. }
            | Command::SetSandboxPolicy { .. } => None,
            _ => return Ok(()),
        };
        if let Some(request_id) = request_id
            && self
                .state
                .read(|applied| applied.state.receipts.contains_key(request_id))
        {
            return Ok(());
        }
        let (quota, limit, message) = exhausted;
        Err(errors::status(
            tonic::Code::ResourceExhausted,
            "STATE_BUDGET_EXHAUSTED",
            message,
            [("quota", quota.to_string()), ("limit", limit.to_string())],
        ))
    }

    /// This replica's term if it currently leads.
    pub fn leading_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        (metrics.current_leader == Some(self.node_id)).then_some(metrics.current_term)
    }

    /// Proposes a leader-internal `command` (one a peer may not forward,
    /// e.g. `RotateTokenKey`) if this replica leads, and waits until it is
    /// committed and applied here. Never forwards: a caller on a follower
    /// relays its whole request to the leader instead
    /// ([`crate::admin::RELAYED_METHODS`]).
    pub async fn propose_as_leader(&self, command: Command) -> Result<Proposed, tonic::Status> {
        let Some(term) = self.leading_term() else {
            return Err(errors::unavailable(
                errors::LEADERSHIP_CHANGED,
                "this replica stopped leading while asked; retry",
            ));
        };
        let name = command.name();
        let written = tokio::time::timeout(
            self.timeouts.propose_timeout,
            self.raft.client_write(command.into()),
        )
        .await;
        match written {
            Ok(Ok(written)) => {
                tracing::debug!(
                    command = name,
                    index = written.log_id.index,
                    "committed and applied"
                );
                Ok(Proposed {
                    index: written.log_id.index,
                    response: written.data,
                    proposed_as_leader_in: Some(term),
                })
            }
            // Refused before append: nothing was written.
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Err(errors::unavailable(
                    errors::LEADERSHIP_CHANGED,
                    "leadership moved before the command was appended; nothing changed: retry",
                ))
            }
            Ok(Err(_)) | Err(_) => Err(errors::unavailable(
                OUTCOME_PENDING,
                "the command was not committed in time or leadership changed; its outcome is unknown: check before retrying",
            )),
        }
    }

    /// Proposes `command` and waits until it is committed and applied on the
    /// leader. Waits through elections up to the propose timeout.
    ///
    /// The request's trace context (if it runs in one) is remembered by
    /// request id, for the applied command's and the effect's log lines
    /// ([`palisade_metrics::trace`]); a failure is counted by reason.
    pub async fn propose(&self, command: Command) -> Result<Proposed, tonic::Status> {
        self.check_state_budget(&command)?;
        // The audit trail: who asked, when a request handler proposes.
        let command = crate::auth::attribute(command);
        let context = palisade_metrics::trace::current();
        if let (Some(request), Some(context)) = (command.request(), &context) {
            palisade_metrics::trace::remember(&request.id, context);
        }
        let name = command.name();
        let proposed = self.propose_untraced(command).await;
        match &proposed {
            Ok(proposed) => tracing::debug!(
                command = name,
                index = proposed.index,
                forwarded = proposed.proposed_as_leader_in.is_none(),
                "command committed and applied"
            ),
            Err(status) => {
                let reason = errors::reason_of(status)
                    .unwrap_or_else(|| format!("{:?}", status.code()))
                    .to_ascii_lowercase();
                tracing::debug!(command = name, %reason, "proposal failed");
                self.metrics.proposal_failed(&reason);
            }
        }
        proposed
    }

    async fn propose_untraced(&self, command: Command) -> Result<Proposed, tonic::Status> {
        // Shared, not copied, by each attempt (see `palisade_raft::TypeConfig`).
        let command = Arc::new(command);
        let deadline = Instant::now() + self.timeouts.propose_timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(errors::unavailable(
                    NO_LEADER,
                    "no leader could take the request in time; retry (the cluster may be electing a leader or lack a quorum)",
                ));
            }
            let Some((leader, address)) = self.leader() else {
                tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                continue;
            };
            if leader == self.node_id {
                let term = self.leading_term();
                let written =
                    tokio::time::timeout(remaining, self.raft.client_write(command.clone())).await;
                match written {
                    Ok(Ok(written)) => {
                        return Ok(Proposed {
                            index: written.log_id.index,
                            response: written.data,
                            proposed_as_leader_in: term,
                        });
                    }
                    // Rejected before append: nothing was written; ask again who leads.
                    Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                        tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                    }
                    // Appended, then truncated by another leader's log: it may
                    // still have been replicated and committed by the next leader.
                    Ok(Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)))) => {
                        return Err(errors::unavailable(
                            OUTCOME_PENDING,
                            "leadership changed while the request was being committed; its outcome is unknown: retry to learn it",
                        ));
                    }
                    Ok(Err(other)) => {
                        return Err(errors::unavailable(
                            errors::INTERNAL,
                            format!("the replica cannot propose: {other}"),
                        ));
                    }
                    Err(_elapsed) => {
                        return Err(errors::unavailable(
                            OUTCOME_PENDING,
                            "the request was not committed in time; its outcome is unknown: retry to learn it",
                        ));
                    }
                }
                continue;
            }
            let forwarded = self
                .while_leader_is(
                    leader,
                    self.peers
                        .forward_write(leader, &address, Command::clone(&command), remaining),
                )
                .await;
            let Some(forwarded) = forwarded else {
                // The leader we forwarded to was replaced (it may be paused or
                // partitioned): stop waiting for it, it may never answer.
                return Err(errors::unavailable(
                    OUTCOME_PENDING,
                    format!(
                        "leadership moved away from node {leader} while it held the forwarded request; its outcome is unknown: retry to learn it"
                    ),
                ));
            };
            match forwarded {
                Ok(written) => {
                    // Make our own state reflect the entry before the caller reads it.
                    let index = written.log_id.index;
                    self.wait_applied(index, deadline).await?;
                    return Ok(Proposed {
                        index,
                        response: written.data,
                        proposed_as_leader_in: None,
                    });
                }
                // Nothing was written: ask again who leads (a dead leader is
                // replaced within an election timeout).
                Err(ForwardError::NotLeader { .. } | ForwardError::NotDelivered { .. }) => {
                    tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                }
                Err(ForwardError::Discarded { .. }) => {
                    return Err(errors::unavailable(
                        OUTCOME_PENDING,
                        "leadership changed while the request was being committed; its outcome is unknown: retry to learn it",
                    ));
                }
                Err(error @ ForwardError::Refused { .. }) => {
                    return Err(errors::unavailable(
                        errors::INTERNAL,
                        format!(
                            "the leader (node {leader} at {address}) refused the forwarded request: {error}"
                        ),
                    ));
                }
                Err(error) => {
                    return Err(errors::unavailable(
                        OUTCOME_PENDING,
                        format!(
                            "forwarding to the leader (node {leader} at {address}) failed: {error}; the outcome is unknown: retry to learn it"
                        ),
                    ));
                }
            }
        }
    }

    /// Runs `work` while this replica believes `leader` leads; `None` as
    /// soon as it learns of another leader (or of none, or its Raft stops).
    /// A request sent to a leader that was then paused or cut off may never
    /// be answered; this stops waiting for it once an election moved on.
    async fn while_leader_is<T>(&self, leader: NodeId, work: impl Future<Output = T>) -> Option<T> {
        let mut metrics = self.raft.metrics();
        let replaced = async move {
            loop {
                if metrics.borrow_watched().current_leader != Some(leader) {
                    return;
                }
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            // `biased`: deterministic for `--sim`; finished work wins.
            biased;
            done = work => Some(done),
            () = replaced => None,
        }
    }

    /// Waits until this replica applied `index`.
    pub async fn wait_applied(&self, index: u64, deadline: Instant) -> Result<(), tonic::Status> {
        match tokio::time::timeout_at(deadline, self.state.wait_applied(index)).await {
            Ok(()) => Ok(()),
            Err(_) => Err(errors::unavailable(
                OUTCOME_PENDING,
                format!("this replica did not apply entry {index} in time; retry"),
            )),
        }
    }

    /// Makes the next read linearizable: confirms leadership (read index)
    /// with a quorum and waits until the local state applied that index.
    /// Returns the read index: every write acknowledged before the call is
    /// at or below it (a reader of something that lags the state, such as
    /// the projection, waits for it, not for the applied index, which may
    /// by then include later writes).
    ///
    /// The wait is on this replica's own applied index, not openraft's
    /// (`ensure_linearizable`): openraft learns of an apply only when its
    /// core task gets to the state machine's notice, and under write load
    /// that core is busy; in the load test (`palisade-load`) reads whose
    /// entry was applied here waited another 50-100 ms for it.
    pub async fn linearize(&self) -> Result<u64, tonic::Status> {
        let deadline = Instant::now() + self.timeouts.propose_timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(errors::unavailable(
                    NO_LEADER,
                    "could not confirm the read with a leader in time; retry, or read with consistency=stale",
                ));
            }
            let Some((leader, address)) = self.leader() else {
                tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                continue;
            };
            let read_index = if leader == self.node_id {
                match tokio::time::timeout(
                    remaining,
                    self.raft.get_read_linearizer(ReadPolicy::ReadIndex),
                )
                .await
                {
                    Ok(Ok(linearizer)) => linearizer.read_log_id().index(),
                    Ok(Err(_)) => {
                        tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                        continue;
                    }
                    Err(_) => continue,
                }
            } else {
                // A read changes nothing: on any failure, or when the leader is
                // replaced while we ask it, ask the leader known next.
                match self
                    .while_leader_is(leader, self.peers.read_index(leader, &address, remaining))
                    .await
                {
                    Some(Ok(index)) => index,
                    Some(Err(_)) => {
                        tokio::time::sleep(LEADER_POLL_INTERVAL.min(remaining)).await;
                        continue;
                    }
                    None => continue,
                }
            };
            self.wait_applied(read_index, deadline).await?;
            return Ok(read_index);
        }
    }

    /// Waits until `done` holds on the applied state, and returns what it
    /// returned. Answers LEADERSHIP_CHANGED if this replica proposed as
    /// leader in `proposed_as_leader_in` and stopped leading in that term,
    /// and OUTCOME_PENDING after the operation wait limit.
    ///
    /// With `sandbox_id`, it wakes only when an applied batch touched that
    /// sandbox (or changed something not tied to one), when leadership
    /// changes, and every [`WAIT_RECHECK_INTERVAL`] as a safety net; without
    /// it, on every applied batch.
    pub async fn wait_until<T>(
        &self,
        proposed_as_leader_in: Option<u64>,
        sandbox_id: Option<&str>,
        mut done: impl FnMut(&AppliedState) -> Option<T>,
    ) -> Result<T, tonic::Status> {
        let deadline = Instant::now() + self.timeouts.operation_wait_max;
        let mut applied = self.state.subscribe();
        // Leadership changes only (vote, state, leader, membership), not every
        // log or apply step as `metrics()` does.
        let mut server = self.raft.server_metrics();
        let waiter = sandbox_id.map(|sandbox_id| self.state.wait_on_sandbox(sandbox_id));
        loop {
            // Armed before the state is read: a change applied between the
            // read and the wait still wakes this handler.
            let touched = waiter.as_ref().map(|waiter| waiter.sandbox.notified());
            let everyone = waiter.as_ref().map(|waiter| waiter.everyone.notified());
            tokio::pin!(touched, everyone);
            if let Some(touched) = touched.as_mut().as_pin_mut() {
                touched.enable();
            }
            if let Some(everyone) = everyone.as_mut().as_pin_mut() {
                everyone.enable();
            }
            if let Some(value) = self.state.read(&mut done) {
                return Ok(value);
            }
            // The server metrics (which woke us) are published just before
            // the full metrics `leading_term` reads: a leader that stepped
            // down shows in the former first.
            if let Some(term) = proposed_as_leader_in
                && (server.borrow_watched().current_leader != Some(self.node_id)
                    || self.leading_term() != Some(term))
            {
                return Err(errors::unavailable(
                    LEADERSHIP_CHANGED,
                    "this replica lost leadership while the operation was in flight; retry: the new leader finishes it",
                ));
            }
            let shutting_down = || {
                // The operation was accepted and goes on without us.
                Err(errors::unavailable(
                    OUTCOME_PENDING,
                    "this replica is shutting down while the operation is in flight; retry on another replica to wait for its result",
                ))
            };
            tokio::select! {
                // `biased` (deterministic for `--sim`): the deadline first,
                // so that a stream of new entries cannot hold a caller past it.
                biased;
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(errors::unavailable(
                        OUTCOME_PENDING,
                        "the operation is still in flight; retry to wait for its result",
                    ));
                }
                changed = applied.changed(), if waiter.is_none() => {
                    if changed.is_err() {
                        return shutting_down();
                    }
                }
                true = wait_armed(touched.as_mut().as_pin_mut()) => {}
                true = wait_armed(everyone.as_mut().as_pin_mut()) => {}
                _ = tokio::time::sleep(WAIT_RECHECK_INTERVAL), if waiter.is_some() => {}
                changed = server.changed() => {
                    if changed.is_err() {
                        return shutting_down();
                    }
                }
            }
        }
    }
}

/// Waits for an armed wake-up, if there is one: true once it fired, false at
/// once without one (a `select!` branch that then never matches).
async fn wait_armed(notified: Option<Pin<&mut Notified<'_>>>) -> bool {
    match notified {
        Some(notified) => {
            notified.await;
            true
        }
        None => false,
    }
}
