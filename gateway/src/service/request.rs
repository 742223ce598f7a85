//! Request plumbing the resources share: request ids and payload digests
//! (what receipts are keyed and checked by), running an operation to its
//! receipt, read consistency, the wait-for-projection header, page tokens.

use palisade_lifecycle::{self as core, Command, Outcome, ReceiptResult, RequestMeta, validate};
use palisade_proto::v1;
use sha2::{Digest, Sha256};
use tonic::Status;

use super::PalisadeService;
use crate::errors;

/// This replica's wall clock. It goes into commands for the audit trail
/// only (`RequestMeta::time_ms` and the like): apply stamps every time in
/// the state from the replicated clock (`State::clock_ms`).
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

pub(super) fn workspace_or_default(workspace: &str) -> &str {
    if workspace.is_empty() {
        core::DEFAULT_WORKSPACE
    } else {
        workspace
    }
}

/// Request header asking a write to be answered only once the PostgreSQL
/// projection reached it.
pub const WAIT_FOR_PROJECTION_HEADER: &str = "palisade-wait-for-projection";

pub(super) fn wants_projection(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get(WAIT_FOR_PROJECTION_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("true"))
}

/// What a finished operation left.
pub(super) enum Settled {
    Sandbox(Box<core::Sandbox>),
    Gone { sandbox_id: String },
}

/// The request's id (the caller's, or a fresh one) and its payload digest.
pub(super) fn request_meta(
    request_id: &str,
    payload: &impl serde::Serialize,
) -> Result<RequestMeta, Status> {
    let id = if request_id.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        validate::request_id(request_id).map_err(errors::invalid_input)?;
        request_id.to_string()
    };
    let canonical = serde_json::to_vec(payload).map_err(|error| {
        errors::unavailable(
            errors::INTERNAL,
            format!("cannot digest the request: {error}"),
        )
    })?;
    Ok(RequestMeta {
        id,
        payload_digest: hex::encode(Sha256::digest(&canonical)),
        time_ms: now_ms(),
    })
}

/// Longest page token: hex of "workspace/name", both at most
/// `NAME_LENGTH_MAX` (a session id is shorter still).
const PAGE_TOKEN_BYTES_MAX: usize = 2 * (2 * core::limits::NAME_LENGTH_MAX + 1);

/// Page tokens are opaque to clients: hex of "workspace/name" of the last
/// item of the previous page.
pub(super) fn encode_page_token(workspace: &str, name: &str) -> String {
    format!("{workspace}/{name}")
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

pub(super) fn decode_page_token(token: &str) -> Result<Option<(String, String)>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || {
        errors::invalid_input(validate::InvalidInput {
            field: "page_token",
            problem: "not a token this server issued; pass next_page_token unchanged".into(),
        })
    };
    // Checked as bytes first: slicing the text two by two would split a
    // multi-byte character ("aéa") and panic.
    if !token.len().is_multiple_of(2)
        || token.len() > PAGE_TOKEN_BYTES_MAX
        || !token.bytes().all(|byte| byte.is_ascii_hexdigit())
    {
        return Err(bad());
    }
    let bytes = token
        .as_bytes()
        .chunks_exact(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).map_err(|_| bad())?;
            u8::from_str_radix(digits, 16).map_err(|_| bad())
        })
        .collect::<Result<Vec<u8>, _>>()?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (first, second) = text.split_once('/').ok_or_else(bad)?;
    // What the server issues: names (DNS labels) and session ids (UUIDs),
    // the second part empty for one-part keys.
    let part_ok = |part: &str| {
        part.len() <= core::limits::NAME_LENGTH_MAX
            && part
                .bytes()
                .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
    };
    if first.is_empty() || !part_ok(first) || !part_ok(second) {
        return Err(bad());
    }
    Ok(Some((first.to_string(), second.to_string())))
}

/// The answer a settled receipt replays. A receipt keeps a compact outcome
/// (sandbox id, generation, phase), not a copy of the sandbox: the answer
/// is the sandbox as it is now, showing the phase and execution the
/// request left it in when it has moved on since (a later start does not
/// turn a stop's answer into READY). A sandbox deleted since answers as
/// gone.
fn replay_settled(
    state: &core::State,
    sandbox_id: &str,
    generation: u64,
    phase: core::SandboxPhase,
) -> Settled {
    let Some(current) = state.sandboxes.get(sandbox_id) else {
        return Settled::Gone {
            sandbox_id: sandbox_id.to_string(),
        };
    };
    let mut sandbox = current.clone();
    if sandbox.execution.generation != generation {
        sandbox.execution = core::Execution {
            generation,
            handle: None,
            driver: None,
            exit_code: None,
        };
    }
    if sandbox.phase != phase || sandbox.execution.generation != current.execution.generation {
        sandbox.phase = phase;
        sandbox.operation = None;
    }
    Settled::Sandbox(Box::new(sandbox))
}

impl PalisadeService {
    pub(super) async fn read_consistency(&self, consistency: i32) -> Result<(), Status> {
        match v1::Consistency::try_from(consistency) {
            Ok(v1::Consistency::Stale) => Ok(()),
            Ok(v1::Consistency::Unspecified | v1::Consistency::Linearizable) => {
                self.replica.linearize().await
            }
            Err(_) => Err(errors::invalid_input(validate::InvalidInput {
                field: "consistency",
                problem: format!(
                    "unknown value {consistency}; use CONSISTENCY_LINEARIZABLE or CONSISTENCY_STALE"
                ),
            })),
        }
    }

    /// Proposes a `Begin*` command carrying `request`, then (unless
    /// `no_wait`) waits until the request's receipt settles and answers
    /// with it: the original result, for a retry as for the first call.
    pub(super) async fn run_operation(
        &self,
        command: Command,
        request: &RequestMeta,
        no_wait: bool,
    ) -> Result<Settled, Status> {
        let proposed = self.replica.propose(command).await?;
        let outcome = proposed.response.map_err(errors::rejection)?;
        let request_id = request.id.clone();
        let settled = |applied: &palisade_raft::state_machine::AppliedState| {
            let receipt = applied.state.receipts.get(&request_id)?;
            match &receipt.result {
                ReceiptResult::Pending { sandbox_id, .. } if no_wait => {
                    Some(match applied.state.sandboxes.get(sandbox_id) {
                        Some(sandbox) => Ok(Settled::Sandbox(Box::new(sandbox.clone()))),
                        None => Ok(Settled::Gone {
                            sandbox_id: sandbox_id.clone(),
                        }),
                    })
                }
                ReceiptResult::Pending { .. } => None,
                ReceiptResult::Settled {
                    sandbox_id,
                    generation,
                    phase,
                } => Some(Ok(replay_settled(
                    &applied.state,
                    sandbox_id,
                    *generation,
                    *phase,
                ))),
                ReceiptResult::Deleted { sandbox_id } => Some(Ok(Settled::Gone {
                    sandbox_id: sandbox_id.clone(),
                })),
                ReceiptResult::Rejected(rejection) => {
                    Some(Err(errors::rejection(rejection.clone())))
                }
            }
        };
        if matches!(outcome, Outcome::Replayed { .. })
            && self
                .replica
                .state
                .read(|applied| !applied.state.receipts.contains_key(&request.id))
        {
            return Err(errors::unavailable(
                errors::INTERNAL,
                "the request's receipt vanished; retry with a new request id",
            ));
        }
        self.replica
            .wait_until(proposed.proposed_as_leader_in, settled)
            .await?
    }

    /// With the `palisade-wait-for-projection: true` request header: waits
    /// until the PostgreSQL projection reached everything this replica
    /// applied (which includes the write just settled), so SQL consumers
    /// read it (read-your-writes).
    pub(super) async fn projection_caught_up(
        &self,
        wait_for_projection: bool,
    ) -> Result<(), Status> {
        if !wait_for_projection {
            return Ok(());
        }
        let projection = self
            .replica
            .projection
            .as_ref()
            .ok_or_else(crate::projection::not_configured)?;
        projection
            .wait_for_index(
                self.replica.state.applied_index(),
                crate::projection::PROJECTION_READ_WAIT_MAX,
            )
            .await
            .map_err(crate::projection::status_of)?;
        Ok(())
    }
}
