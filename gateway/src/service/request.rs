//! Request plumbing the resources share: request ids and payload digests
//! (what receipts are keyed and checked by), running an operation to its
//! receipt, read consistency, the wait-for-projection header, page tokens.

use palisade_lifecycle::{self as core, Command, Outcome, ReceiptResult, RequestMeta, validate};
use palisade_proto::v1;
use sha2::{Digest, Sha256};
use tonic::Status;

use super::PalisadeService;
use crate::errors;

impl PalisadeService {
    /// This replica's wall clock ([`crate::clock`]). It goes into commands
    /// for the audit trail only (`RequestMeta::time_ms` and the like):
    /// apply stamps every time in the state from the replicated clock
    /// (`State::clock_ms`).
    pub(super) fn now_ms(&self) -> i64 {
        self.replica.clock.now_ms()
    }
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
    time_ms: i64,
    request_id: &str,
    payload: &impl serde::Serialize,
) -> Result<RequestMeta, Status> {
    let id = if request_id.is_empty() {
        crate::ids::new_time_ordered_uuid(time_ms).to_string()
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
        time_ms,
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

/// What a settled receipt keeps of its request's outcome (see
/// [`replay_settled`]).
struct SettledOutcome<'a> {
    sandbox_id: &'a str,
    generation: u64,
    phase: core::SandboxPhase,
    resource_version: u64,
    name: &'a str,
    workspace: &'a str,
}

/// The answer a settled receipt replays. A receipt keeps a compact outcome
/// (sandbox id, name, workspace, generation, phase, resource version), not
/// a copy of the sandbox: the answer carries those exactly as the first
/// answer did — however the sandbox moved on since, and even once it was
/// deleted — and the rest (spec, labels) from the sandbox as it is now, if
/// it still exists. Receipts from before the resource version was kept
/// (0) answer the sandbox's current one.
fn replay_settled(state: &core::State, outcome: SettledOutcome<'_>) -> Settled {
    let execution_of = |generation| core::Execution {
        generation,
        handle: None,
        driver: None,
        exit_code: None,
    };
    let mut sandbox = match state.sandboxes.get(outcome.sandbox_id) {
        Some(current) => (**current).clone(),
        None if outcome.name.is_empty() => {
            // An older receipt of a sandbox deleted since: too little kept
            // to answer it.
            return Settled::Gone {
                sandbox_id: outcome.sandbox_id.to_string(),
            };
        }
        None => core::Sandbox {
            id: outcome.sandbox_id.to_string(),
            name: outcome.name.to_string(),
            workspace: outcome.workspace.to_string(),
            labels: Default::default(),
            annotations: Default::default(),
            resource_version: outcome.resource_version,
            created_at_ms: 0,
            spec: Default::default(),
            phase: outcome.phase,
            execution: execution_of(outcome.generation),
            message: None,
            operation: None,
            host_identity: String::new(),
            restart_count: 0,
        },
    };
    let moved_on = sandbox.execution.generation != outcome.generation
        || sandbox.phase != outcome.phase
        || (outcome.resource_version != 0 && sandbox.resource_version != outcome.resource_version);
    if sandbox.execution.generation != outcome.generation {
        sandbox.execution = execution_of(outcome.generation);
    }
    if moved_on {
        sandbox.phase = outcome.phase;
        sandbox.operation = None;
    }
    if outcome.resource_version != 0 {
        sandbox.resource_version = outcome.resource_version;
    }
    Settled::Sandbox(Box::new(sandbox))
}

impl PalisadeService {
    /// Makes the read as consistent as asked. Returns the read index of a
    /// linearizable read, 0 for a stale one.
    pub(super) async fn read_consistency(&self, consistency: i32) -> Result<u64, Status> {
        match v1::Consistency::try_from(consistency) {
            Ok(v1::Consistency::Stale) => Ok(0),
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
                        Some(sandbox) => Ok(Settled::Sandbox(sandbox.clone())),
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
                    resource_version,
                    name,
                    workspace,
                } => Some(Ok(replay_settled(
                    &applied.state,
                    SettledOutcome {
                        sandbox_id,
                        generation: *generation,
                        phase: *phase,
                        resource_version: *resource_version,
                        name,
                        workspace,
                    },
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
        // The sandbox the request acts on: only its changes can settle it.
        let sandbox_id = self.replica.state.read(|applied| {
            match applied
                .state
                .receipts
                .get(&request.id)
                .map(|receipt| receipt.result)
            {
                Some(ReceiptResult::Pending { sandbox_id, .. }) => Some(sandbox_id),
                _ => None,
            }
        });
        self.replica
            .wait_until(
                proposed.proposed_as_leader_in,
                sandbox_id.as_deref(),
                settled,
            )
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
