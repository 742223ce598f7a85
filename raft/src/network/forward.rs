//! Forwarding to the leader: a follower hands it a client write
//! ([`PeerClients::forward_write`]) or asks it for a read index
//! ([`PeerClients::read_index`]), and [`ForwardError`] tells the caller
//! whether a failed write may still commit.

use std::time::Duration;

use openraft::errors::{ClientWriteError, Fatal, ForwardReason, RaftError};
use openraft::raft::ClientWriteResponse;
use palisade_lifecycle::Command;
use palisade_proto::peer::PeerMessage;
use tonic::Code;

use super::channels::{Failure, PeerClients, classify, describe_status, is_connect_failure};
use super::wire::{Encoding, ForwardWriteReply, ReadIndexReply, decode, encode};
use crate::hooks::{FaultPoint, LinkVerdict, PeerRpc};
use crate::types::{Node, NodeId, TypeConfig};

impl PeerClients {
    /// Forwards a client write to the leader `leader` at `leader_addr`,
    /// which proposes it with `Raft::client_write` and answers once it is
    /// applied. Gives up after `timeout`.
    ///
    /// On [`ForwardError::NotLeader`] nothing was written: retry at the
    /// leader it names. Every error for which
    /// [`ForwardError::outcome_unknown`] holds may or may not have been
    /// committed: retry with the same request id, never assume failure.
    pub async fn forward_write(
        &self,
        leader: NodeId,
        leader_addr: &str,
        command: Command,
        timeout: Duration,
    ) -> Result<ClientWriteResponse<TypeConfig>, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable {
            target: leader,
            addr: leader_addr.to_owned(),
            reason,
        };
        if let Some(fault_points) = &self.shared.fault_points {
            let point = FaultPoint::Forwarding {
                leader,
                command: command.name(),
            };
            fault_points.at(self.node_id(), point).await;
        }
        let mut client = self.rpc_client(leader, leader_addr).map_err(unreachable)?;
        let verdict = self.verdict(leader, PeerRpc::ForwardWrite);
        match verdict {
            LinkVerdict::Drop => {
                return Err(ForwardError::NotDelivered {
                    target: leader,
                    addr: leader_addr.to_owned(),
                    reason: "link fault: message dropped".into(),
                });
            }
            LinkVerdict::Delay(delay) => tokio::time::sleep(delay.min(timeout)).await,
            LinkVerdict::Duplicate => {
                let mut duplicate = tonic::Request::new(PeerMessage {
                    from_node: self.node_id(),
                    to_node: leader,
                    payload: encode(&command, self.payload_encoding()),
                });
                duplicate.set_timeout(timeout);
                let mut copy = client.clone();
                let _ = tokio::time::timeout(timeout, copy.forward_write(duplicate)).await;
            }
            LinkVerdict::Deliver | LinkVerdict::DropReply => {}
        }
        let mut request = tonic::Request::new(PeerMessage {
            from_node: self.node_id(),
            to_node: leader,
            payload: encode(&command, self.payload_encoding()),
        });
        request.set_timeout(timeout);
        // The request's trace goes with it, so the leader's lines carry it.
        if let Some(context) = palisade_metrics::trace::current()
            && let Ok(value) = context.child_header().parse()
        {
            request
                .metadata_mut()
                .insert(palisade_metrics::trace::TRACEPARENT, value);
            tracing::debug!(trace_id = %context.trace_id, leader, command = command.name(), "forwarding the write to the leader");
        }
        let reply = match tokio::time::timeout(timeout, client.forward_write(request)).await {
            Err(_elapsed) => {
                return Err(ForwardError::Timeout {
                    target: leader,
                    after: timeout,
                });
            }
            // No connection could be opened: the request never left.
            Ok(Err(status)) if is_connect_failure(&status) => {
                return Err(ForwardError::NotDelivered {
                    target: leader,
                    addr: leader_addr.to_owned(),
                    reason: describe_status(&status),
                });
            }
            Ok(Err(status)) => {
                return Err(match classify(&status) {
                    Failure::Timeout => ForwardError::Timeout {
                        target: leader,
                        after: timeout,
                    },
                    // Refusals come before the command is looked at.
                    Failure::Refused => ForwardError::Refused {
                        target: leader,
                        code: status.code(),
                        message: status.message().to_owned(),
                    },
                    Failure::Unreachable | Failure::Network => {
                        unreachable(describe_status(&status))
                    }
                });
            }
            Ok(Ok(response)) => response.into_inner(),
        };
        if verdict == LinkVerdict::DropReply {
            return Err(unreachable("link fault: the answer was lost".into()));
        }
        if reply.from_node != leader {
            return Err(ForwardError::Refused {
                target: leader,
                code: Code::FailedPrecondition,
                message: format!(
                    "{leader_addr} answered as node {}, not node {leader}",
                    reply.from_node
                ),
            });
        }
        let reply: ForwardWriteReply = decode(&reply.payload).map_err(|error| {
            // The leader may have applied the write; only its answer is unreadable.
            unreachable(format!("undecodable ForwardWrite reply: {error}"))
        })?;
        match reply {
            Ok(response) => Ok(response),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(ForwardError::NotLeader {
                    target: leader,
                    leader_id: forward.leader_id,
                    leader_node: forward.leader_node,
                    reason: forward.reason,
                })
            }
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(forward))) => {
                Err(ForwardError::Discarded {
                    target: leader,
                    leader_id: forward.leader_id,
                    leader_node: forward.leader_node,
                })
            }
            Err(RaftError::APIError(error)) => Err(ForwardError::Rejected {
                target: leader,
                error,
            }),
            Err(RaftError::Fatal(error)) => Err(ForwardError::RemoteFatal {
                target: leader,
                error,
            }),
        }
    }

    /// Asks the leader `leader` at `leader_addr` for a read index: the leader
    /// confirms with a quorum that it still leads and answers the log index
    /// this replica must apply before a linearizable read. Gives up after
    /// `timeout`. Reads change nothing, so every error is safe to retry.
    pub async fn read_index(
        &self,
        leader: NodeId,
        leader_addr: &str,
        timeout: Duration,
    ) -> Result<u64, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable {
            target: leader,
            addr: leader_addr.to_owned(),
            reason,
        };
        let mut client = self.rpc_client(leader, leader_addr).map_err(unreachable)?;
        let verdict = self.verdict(leader, PeerRpc::ReadIndex);
        match verdict {
            LinkVerdict::Drop => return Err(unreachable("link fault: message dropped".into())),
            LinkVerdict::Delay(delay) => tokio::time::sleep(delay.min(timeout)).await,
            _ => {}
        }
        let mut request = tonic::Request::new(PeerMessage {
            from_node: self.node_id(),
            to_node: leader,
            payload: encode(&(), self.payload_encoding()),
        });
        request.set_timeout(timeout);
        let reply = match tokio::time::timeout(timeout, client.read_index(request)).await {
            Err(_elapsed) => {
                return Err(ForwardError::Timeout {
                    target: leader,
                    after: timeout,
                });
            }
            Ok(Err(status)) => return Err(unreachable(describe_status(&status))),
            Ok(Ok(response)) => response.into_inner(),
        };
        if verdict == LinkVerdict::DropReply {
            return Err(unreachable("link fault: the answer was lost".into()));
        }
        if reply.from_node != leader {
            return Err(ForwardError::Refused {
                target: leader,
                code: Code::FailedPrecondition,
                message: format!(
                    "{leader_addr} answered as node {}, not node {leader}",
                    reply.from_node
                ),
            });
        }
        let reply: ReadIndexReply = decode(&reply.payload)
            .map_err(|error| unreachable(format!("undecodable ReadIndex reply: {error}")))?;
        reply.map_err(|refusal| ForwardError::Refused {
            target: leader,
            code: Code::Unavailable,
            message: refusal,
        })
    }
}

impl PeerClients {
    /// Asks member `target` at `addr` which cluster feature level its build
    /// supports ([`crate::feature_level`]). A member running a release
    /// before feature levels (UNIMPLEMENTED) supports the base level. Gives
    /// up after `timeout`; the caller asks again later.
    pub async fn supported_feature_level(
        &self,
        target: NodeId,
        addr: &str,
        timeout: Duration,
    ) -> Result<u32, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable {
            target,
            addr: addr.to_owned(),
            reason,
        };
        let mut client = self.rpc_client(target, addr).map_err(unreachable)?;
        let mut request = tonic::Request::new(PeerMessage {
            from_node: self.node_id(),
            to_node: target,
            // Always JSON: the question goes to replicas of any release,
            // before the level that allows the binary encoding is known.
            payload: encode(&(), Encoding::Json),
        });
        request.set_timeout(timeout);
        let reply =
            match tokio::time::timeout(timeout, client.supported_feature_level(request)).await {
                Err(_elapsed) => {
                    return Err(ForwardError::Timeout {
                        target,
                        after: timeout,
                    });
                }
                Ok(Err(status)) if status.code() == Code::Unimplemented => {
                    return Ok(crate::feature_level::FEATURE_LEVEL_BASE);
                }
                Ok(Err(status)) => return Err(unreachable(describe_status(&status))),
                Ok(Ok(response)) => response.into_inner(),
            };
        if reply.from_node != target {
            return Err(ForwardError::Refused {
                target,
                code: Code::FailedPrecondition,
                message: format!(
                    "{addr} answered as node {}, not node {target}",
                    reply.from_node
                ),
            });
        }
        decode::<u32>(&reply.payload)
            .map_err(|error| unreachable(format!("undecodable feature level: {error}")))
    }
}

/// Why a forwarded write failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The target refused the write before appending it: nothing was
    /// written. It is not the leader (any more), or it is handing leadership
    /// over, or it is a leader not yet (or no longer) acknowledged by a
    /// quorum (`reason` says which). Retry at `leader_id` when known, else
    /// shortly at the same or another replica.
    #[error(
        "node {target} does not take writes now ({reason:?}); {}",
        leader_hint(.leader_id, .leader_node)
    )]
    NotLeader {
        /// The node the write was sent to.
        target: NodeId,
        /// The leader it knows of, if any.
        leader_id: Option<NodeId>,
        /// That leader's address record, if known.
        leader_node: Option<Node>,
        /// Why it refused.
        reason: ForwardReason,
    },
    /// The leader appended the write, then lost its log entry to another
    /// leader's log: the write may still commit. Outcome unknown.
    #[error(
        "node {target} lost leadership after appending the write; its outcome is unknown, \
         retry with the same request id; {}",
        leader_hint(.leader_id, .leader_node)
    )]
    Discarded {
        /// The node the write was sent to.
        target: NodeId,
        /// The leader it knows of now, if any.
        leader_id: Option<NodeId>,
        /// That leader's address record, if known.
        leader_node: Option<Node>,
    },
    /// No answer within the deadline. Outcome unknown.
    #[error(
        "node {target} did not answer within {after:?}; the write's outcome is unknown, \
         retry with the same request id"
    )]
    Timeout {
        /// The node the write was sent to.
        target: NodeId,
        /// The deadline that passed.
        after: Duration,
    },
    /// The target could not be reached, or the connection broke. Outcome
    /// unknown (the write may have been sent before the break).
    #[error(
        "node {target} at {addr} is unreachable ({reason}); the write's outcome is unknown, \
         retry with the same request id"
    )]
    Unreachable {
        /// The node the write was sent to.
        target: NodeId,
        /// Its address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// No connection to the target could be opened (refused, no route,
    /// connect timeout): the write was never sent, so nothing was written.
    /// The target is likely down; retry once a leader is known again.
    #[error("node {target} at {addr} cannot be reached ({reason}); the write was not sent")]
    NotDelivered {
        /// The node the write was sent to.
        target: NodeId,
        /// Its address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// The target refused the message before looking at the command (this
    /// replica is not in its membership, the address points at another
    /// node, ...): nothing was written. A configuration problem.
    #[error("node {target} refused the forwarded write ({code:?}): {message}")]
    Refused {
        /// The node the write was sent to.
        target: NodeId,
        /// The gRPC status code of the refusal.
        code: Code,
        /// Its message.
        message: String,
    },
    /// The target's Raft has stopped (shutdown, storage failure). Outcome
    /// unknown: it may have stopped after appending the write.
    #[error(
        "node {target}'s Raft has stopped ({error}); the write's outcome is unknown, \
         retry with the same request id at another replica"
    )]
    RemoteFatal {
        /// The node the write was sent to.
        target: NodeId,
        /// Why it stopped.
        error: Fatal<TypeConfig>,
    },
    /// openraft rejected the write for another reason (a membership change
    /// or precondition error; not expected for a plain command). Nothing
    /// was written.
    #[error("node {target} rejected the write: {error}")]
    Rejected {
        /// The node the write was sent to.
        target: NodeId,
        /// openraft's reason.
        error: ClientWriteError<TypeConfig>,
    },
}

impl ForwardError {
    /// Whether the write may have been (or may still be) committed: the
    /// caller must resolve it by retrying with the same request id.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            ForwardError::Discarded { .. }
            | ForwardError::Timeout { .. }
            | ForwardError::Unreachable { .. }
            | ForwardError::RemoteFatal { .. } => true,
            ForwardError::NotLeader { .. }
            | ForwardError::NotDelivered { .. }
            | ForwardError::Refused { .. }
            | ForwardError::Rejected { .. } => false,
        }
    }
}

fn leader_hint(leader_id: &Option<NodeId>, leader_node: &Option<Node>) -> String {
    match (leader_id, leader_node) {
        (Some(id), Some(node)) => format!("the leader is node {id} at {}", node.addr),
        (Some(id), None) => format!("the leader is node {id}"),
        (None, _) => "no leader is known yet; retry shortly".to_owned(),
    }
}
