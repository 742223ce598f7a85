//! The state transition function.
//!
//! `apply` decides every precondition (name free, workspace active, phase
//! allows the operation) in log order, so a decision is made once for the
//! whole cluster. A rejection changes nothing.

use serde::{Deserialize, Serialize};

use crate::command::{
    Command, CompletionOf, ExecutionRef, LaunchResult, RequestMeta, SandboxTarget,
};
use crate::limits::{
    API_TOKEN_TTL_MS_MAX, API_TOKENS_COUNT_MAX, OPERATION_WAITERS_MAX, RECEIPT_RETENTION_MS_MAX,
    RECEIPT_RETENTION_MS_MIN, RESTARTS_MAX, RETIRED_TOKEN_KEYS_COUNT_MAX,
    STATUS_MESSAGE_LENGTH_MAX, TICK_STEP_MS_MAX, TOKEN_KEY_GRACE_MS_MAX, TOKEN_KEY_HEX_LENGTH,
    WORKSPACES_COUNT_MAX,
};
use crate::owned;
use crate::state::{
    ApiToken, ClusterIdentity, DEFAULT_WORKSPACE, Execution, Operation, OperationKind, Quotas,
    Receipt, ReceiptResult, ReceiptRpc, Receipts, RestartPolicy, RetiredTokenKey, Sandbox,
    SandboxPhase, State, Workspace, WorkspacePhase, assert_sandbox_invariants,
};
use crate::validate;

/// Where the entry being applied sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// Log index; becomes the `resource_version` of what the entry changes.
    pub index: u64,
    /// Term of the leader that appended the entry.
    pub term: u64,
}

/// What an accepted command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A workspace was created.
    WorkspaceCreated {
        /// Its name.
        name: String,
    },
    /// A workspace was removed.
    WorkspaceDeleted {
        /// Its name.
        name: String,
    },
    /// A `Begin*` command started an operation; the executor takes it on.
    OperationBegun {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        kind: OperationKind,
        /// Target generation.
        generation: u64,
    },
    /// The same operation was already in flight; the caller joins it.
    OperationJoined {
        /// Sandbox id.
        sandbox_id: String,
        /// Operation kind.
        kind: OperationKind,
        /// Target generation.
        generation: u64,
    },
    /// The sandbox already is where the command would take it (stop of a
    /// stopped sandbox, start of a running one); nothing changed.
    AlreadyDone {
        /// Sandbox id.
        sandbox_id: String,
    },
    /// A `Complete*` or `Observe*` command took effect.
    Completed {
        /// Sandbox id.
        sandbox_id: String,
    },
    /// A retry of a request already applied (same id, same payload): the
    /// caller reads the receipt for the original result.
    Replayed {
        /// The request id.
        request_id: String,
    },
    /// The workspace was marked TERMINATING but still holds sandboxes.
    WorkspaceTerminating {
        /// Its name.
        name: String,
        /// Up to ten names of the sandboxes it still holds.
        remaining: Vec<String>,
        /// How many sandboxes it still holds.
        remaining_count: usize,
    },
    /// An SSH session was opened.
    SshSessionCreated {
        /// Sandbox id.
        sandbox_id: String,
        /// Session id.
        session_id: String,
        /// The replicated clock when it was created.
        #[serde(default)]
        created_at_ms: i64,
        /// When it expires on the replicated clock.
        #[serde(default)]
        expires_at_ms: i64,
    },
    /// An SSH session was revoked.
    SshSessionRevoked {
        /// Sandbox id.
        sandbox_id: String,
    },
    /// A policy was set.
    PolicySet {
        /// Sandbox id.
        sandbox_id: String,
        /// The new version.
        version: u64,
        /// The replicated clock at the change.
        #[serde(default)]
        updated_at_ms: i64,
    },
    /// A time tick or cluster initialization was applied.
    Housekeeping,
    /// The execution-token key was replaced (`RotateTokenKey`). Ids and
    /// the deadline only: never a key.
    TokenKeyRotated {
        /// Id of the new current key.
        key_id: u64,
        /// Id of the replaced key.
        retired_key_id: u64,
        /// The replicated clock from which the replaced key's tokens are
        /// refused (the clock at apply when the grace is 0).
        retired_valid_until_ms: i64,
    },
    /// The log entry carried no lifecycle command (a leader's blank entry or
    /// a membership change); the state is unchanged.
    NotACommand,
    /// A `Complete*` or `Observe*` command that no longer matches the
    /// sandbox (stale generation, superseded operation, sandbox gone) and
    /// changed nothing.
    Ignored {
        /// Sandbox id.
        sandbox_id: String,
    },
}

/// Why a command was rejected: a stable reason (the API's ErrorInfo reason).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Malformed input; names the field.
    InvalidArgument {
        /// API field name.
        field: String,
    },
    /// The name is in use.
    NameTaken,
    /// No such workspace.
    WorkspaceNotFound,
    /// No such sandbox.
    SandboxNotFound,
    /// The sandbox's phase does not allow the operation.
    InvalidPhase,
    /// The workspace still holds sandboxes.
    WorkspaceNotEmpty,
    /// The workspace is being deleted.
    WorkspaceTerminating,
    /// The default workspace cannot be deleted.
    DefaultWorkspaceProtected,
    /// A bound of [`crate::limits`] would be exceeded.
    ResourceExhausted,
    /// A per-workspace quota ([`Quotas`]) would be exceeded.
    QuotaExceeded {
        /// The quota's name: `receipts_per_workspace`,
        /// `sandboxes_per_workspace` or `owned_records_per_workspace`.
        quota: String,
        /// The workspace at its quota.
        workspace: String,
        /// The quota's value.
        limit: u64,
    },
    /// The expected sandbox id does not match what the name resolves to.
    SandboxIdentityMismatch,
    /// The expected execution is not the sandbox's current execution.
    StaleExecution,
    /// The request id was used before with another payload.
    RequestIdReused,
    /// No such SSH session.
    SessionNotFound,
    /// The policy's version is not the expected one.
    PolicyVersionMismatch,
    /// No such API token.
    TokenNotFound,
    /// The execution token's key no longer verifies (rotated out, or its
    /// grace ended before the command applied).
    UnverifiableExecutionToken,
}

impl Reason {
    /// The stable ErrorInfo reason string.
    pub fn as_str(&self) -> String {
        match self {
            Reason::InvalidArgument { field } => {
                format!("INVALID_{}", field.replace('.', "_").to_ascii_uppercase())
            }
            Reason::NameTaken => "NAME_TAKEN".into(),
            Reason::WorkspaceNotFound => "WORKSPACE_NOT_FOUND".into(),
            Reason::SandboxNotFound => "SANDBOX_NOT_FOUND".into(),
            Reason::InvalidPhase => "INVALID_PHASE".into(),
            Reason::WorkspaceNotEmpty => "WORKSPACE_NOT_EMPTY".into(),
            Reason::WorkspaceTerminating => "WORKSPACE_TERMINATING".into(),
            Reason::DefaultWorkspaceProtected => "DEFAULT_WORKSPACE_PROTECTED".into(),
            Reason::ResourceExhausted => "RESOURCE_EXHAUSTED".into(),
            Reason::QuotaExceeded { .. } => "QUOTA_EXCEEDED".into(),
            Reason::SandboxIdentityMismatch => "SANDBOX_IDENTITY_MISMATCH".into(),
            Reason::StaleExecution => "STALE_EXECUTION".into(),
            Reason::RequestIdReused => "REQUEST_ID_REUSED".into(),
            Reason::SessionNotFound => "SESSION_NOT_FOUND".into(),
            Reason::PolicyVersionMismatch => "POLICY_VERSION_MISMATCH".into(),
            Reason::TokenNotFound => "TOKEN_NOT_FOUND".into(),
            Reason::UnverifiableExecutionToken => "UNVERIFIABLE_EXECUTION_TOKEN".into(),
        }
    }
}

/// A deterministic rejection: applied identically on every replica, changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// Stable reason.
    pub reason: Reason,
    /// What happened and what to do next.
    pub message: String,
}

/// The result of applying one command.
pub type Response = Result<Outcome, Rejection>;

fn reject(reason: Reason, message: impl Into<String>) -> Response {
    Err(Rejection {
        reason,
        message: message.into(),
    })
}

/// The rejection of a request that would take `workspace` past `quota`.
pub(crate) fn quota_exceeded(quota: &str, workspace: &str, limit: u64, what: &str) -> Rejection {
    Rejection {
        reason: Reason::QuotaExceeded {
            quota: quota.into(),
            workspace: workspace.into(),
            limit,
        },
        message: format!(
            "workspace {workspace:?} is at its {quota} quota ({limit} {what}); nothing was changed (retry later, or raise the quota)"
        ),
    }
}

fn truncate_message(mut message: String) -> String {
    if message.len() > STATUS_MESSAGE_LENGTH_MAX {
        let mut cut = STATUS_MESSAGE_LENGTH_MAX;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

/// Records a new API token; its times come from the replicated clock.
fn create_api_token(state: &mut State, mut token: ApiToken, ttl_ms: i64) -> Response {
    let field = |field: &str| Reason::InvalidArgument {
        field: field.to_string(),
    };
    match token.role.as_str() {
        "admin" if !token.workspace.is_empty() => {
            return reject(
                field("workspace"),
                "an admin token is not bound to a workspace",
            );
        }
        "admin" => {}
        "editor" | "viewer" => {
            if !state.workspaces.contains_key(&token.workspace) {
                return reject(
                    Reason::WorkspaceNotFound,
                    format!("workspace {:?} does not exist", token.workspace),
                );
            }
        }
        other => {
            return reject(
                field("role"),
                format!("unknown role {other:?}: admin, editor or viewer"),
            );
        }
    }
    if !(0..=API_TOKEN_TTL_MS_MAX).contains(&ttl_ms) {
        return reject(
            field("ttl_seconds"),
            format!("a token lives at most {API_TOKEN_TTL_MS_MAX} ms"),
        );
    }
    if state.api_tokens.contains_key(&token.id) {
        return reject(field("id"), format!("API token id {:?} is taken", token.id));
    }
    if state.api_tokens.len() >= API_TOKENS_COUNT_MAX {
        return reject(
            Reason::ResourceExhausted,
            format!("the cluster keeps at most {API_TOKENS_COUNT_MAX} API tokens"),
        );
    }
    token.created_at_ms = state.clock_ms;
    token.expires_at_ms = if ttl_ms == 0 {
        0
    } else {
        state.clock_ms.saturating_add(ttl_ms)
    };
    state.api_tokens.insert(token.id.clone(), token);
    Ok(Outcome::Housekeeping)
}

/// Applies one committed command at `position`. Deterministic: depends only
/// on `state`, `position` and `command`.
pub fn apply(state: &mut State, position: LogPosition, command: &Command) -> Response {
    let response = match command {
        // Who asked changes nothing in what the command does.
        Command::Attributed { command, .. } => return apply(state, position, command),
        Command::CreateWorkspace { id, name, .. } => create_workspace(state, position, id, name),
        Command::DeleteWorkspace { name } => delete_workspace(state, position, name),
        Command::BeginCreate {
            request, workspace, ..
        } => with_receipt(
            state,
            position,
            ReceiptRpc::CreateSandbox,
            request,
            workspace.clone(),
            |state| begin_create(state, position, command),
        ),
        Command::BeginStop {
            target,
            expected_execution,
            request,
        } => with_receipt(
            state,
            position,
            ReceiptRpc::StopSandbox,
            request,
            receipt_workspace(state, target),
            |state| begin_stop(state, position, target, expected_execution.as_ref()),
        ),
        Command::BeginStart {
            target,
            expected_execution,
            request,
        } => with_receipt(
            state,
            position,
            ReceiptRpc::StartSandbox,
            request,
            receipt_workspace(state, target),
            |state| begin_start(state, position, target, expected_execution.as_ref()),
        ),
        Command::BeginDelete {
            target,
            expected_sandbox_id,
            expected_execution,
            request,
        } => with_receipt(
            state,
            position,
            ReceiptRpc::DeleteSandbox,
            request,
            receipt_workspace(state, target),
            |state| {
                begin_delete(
                    state,
                    position,
                    target,
                    expected_sandbox_id.as_deref(),
                    expected_execution.as_ref(),
                )
            },
        ),
        Command::CompleteLaunch {
            sandbox_id,
            of,
            generation,
            result,
        } => complete_launch(state, position, sandbox_id, *of, *generation, result),
        Command::CompleteStop {
            sandbox_id,
            of,
            generation,
            exit_code,
        } => complete_stop(state, position, sandbox_id, *of, *generation, *exit_code),
        Command::CompleteDelete { sandbox_id, of } => complete_delete(state, sandbox_id, *of),
        Command::ObserveExit {
            sandbox_id,
            of,
            generation,
            exit_code,
        } => observe_exit(
            state,
            position,
            sandbox_id,
            *of,
            *generation,
            Some(*exit_code),
        ),
        Command::ObserveLost {
            sandbox_id,
            of,
            generation,
        } => observe_exit(state, position, sandbox_id, *of, *generation, None),
        Command::CreateSshSession {
            target,
            session_id,
            token_sha256,
            expires_at_ms,
            ttl_ms,
            ..
        } => owned::create_ssh_session(
            state,
            target,
            session_id,
            token_sha256,
            owned::SessionExpiry::from_command(*ttl_ms, *expires_at_ms),
        ),
        Command::RevokeSshSession { target, session_id } => {
            owned::revoke_ssh_session(state, target, session_id)
        }
        Command::SetSandboxPolicy {
            target,
            document,
            expected_version,
            ..
        } => owned::set_policy(state, target, document, *expected_version),
        Command::CreateApiToken {
            id,
            secret_sha256,
            role,
            workspace,
            ttl_ms,
            created_by,
        } => create_api_token(
            state,
            ApiToken {
                id: id.clone(),
                secret_sha256: secret_sha256.clone(),
                role: role.clone(),
                workspace: workspace.clone(),
                created_by: created_by.clone(),
                created_at_ms: 0,
                expires_at_ms: 0,
                revoked: false,
            },
            *ttl_ms,
        ),
        Command::RevokeApiToken { id } => match state.api_tokens.get_mut(id) {
            Some(token) => {
                token.revoked = true;
                Ok(Outcome::Housekeeping)
            }
            None => reject(Reason::TokenNotFound, format!("no API token {id:?}")),
        },
        Command::InitializeCluster {
            cluster_id,
            token_secret_hex,
            driver_identity,
        } => {
            if state.cluster.is_none() {
                // A restored backup's kept token key wins over the proposed
                // one, so tokens issued before the backup still verify.
                let (token_secret_hex, token_domain) = match state.carried_token_key.take() {
                    Some(carried) => (carried.token_secret_hex, carried.token_domain),
                    None => (token_secret_hex.clone(), String::new()),
                };
                state.cluster = Some(ClusterIdentity {
                    cluster_id: cluster_id.clone(),
                    token_secret_hex,
                    token_domain,
                    driver_identity: driver_identity.clone(),
                    token_key_id: 1,
                    retired_token_keys: Vec::new(),
                });
            }
            Ok(Outcome::Housekeeping)
        }
        Command::RotateTokenKey {
            token_secret_hex,
            grace_ms,
        } => rotate_token_key(state, token_secret_hex, *grace_ms),
        Command::AdoptDriverIdentity { driver_identity } => {
            if let Some(cluster) = &mut state.cluster
                && cluster.driver_identity.is_empty()
            {
                cluster.driver_identity = driver_identity.clone();
            }
            Ok(Outcome::Housekeeping)
        }
        Command::Tick { now_ms, .. } => {
            tick(state, *now_ms);
            Ok(Outcome::Housekeeping)
        }
        Command::RaiseFeatureLevel { level } => {
            // Up only; whether this build supports the level is the
            // replica layer's check, not apply's (see `crate::feature`).
            state.feature_level = state.feature_level.max(*level);
            Ok(Outcome::Housekeeping)
        }
        Command::ConfigureReceiptRetention { retention_ms } => {
            state.receipt_retention_ms =
                (*retention_ms).clamp(RECEIPT_RETENTION_MS_MIN, RECEIPT_RETENTION_MS_MAX);
            Ok(Outcome::Housekeeping)
        }
        Command::ConfigureQuotas {
            receipts_per_workspace,
            sandboxes_per_workspace,
            owned_records_per_workspace,
        } => {
            state.quotas = Quotas {
                receipts_per_workspace: *receipts_per_workspace,
                sandboxes_per_workspace: *sandboxes_per_workspace,
                owned_records_per_workspace: *owned_records_per_workspace,
            }
            .clamped();
            Ok(Outcome::Housekeeping)
        }
    };
    if let Ok(
        Outcome::OperationBegun { sandbox_id, .. }
        | Outcome::OperationJoined { sandbox_id, .. }
        | Outcome::Completed { sandbox_id },
    ) = &response
        && let Some(sandbox) = state.sandboxes.get(sandbox_id)
    {
        assert_sandbox_invariants(sandbox);
    }
    response
}

/// The workspace a request on `target` is counted against: the target's
/// workspace as it resolves now, `default` for an id that resolves to
/// nothing.
fn receipt_workspace(state: &State, target: &SandboxTarget) -> String {
    match target {
        SandboxTarget::Name { workspace, .. } => workspace.clone(),
        SandboxTarget::Id(id) => state.sandboxes.get(id).map_or_else(
            || DEFAULT_WORKSPACE.to_string(),
            |sandbox| sandbox.workspace.clone(),
        ),
    }
}

/// Decides a `Begin*` command under its request id: a retry with the same
/// payload replays (the caller reads the receipt), another payload is
/// refused, a new id runs `decide` and records its receipt — rejections
/// included, so they replay too — counted against `workspace`'s receipt
/// quota. A request refused for a quota or bound leaves no receipt: it is
/// not an outcome to replay but a "retry later", and it must cost nothing.
fn with_receipt(
    state: &mut State,
    position: LogPosition,
    rpc: ReceiptRpc,
    request: &RequestMeta,
    workspace: String,
    decide: impl FnOnce(&mut State) -> Response,
) -> Response {
    if let Some(receipt) = state.receipts.get(&request.id) {
        if receipt.rpc != rpc || receipt.payload_digest != request.payload_digest {
            return reject(
                Reason::RequestIdReused,
                format!(
                    "request id {:?} was already used for a different request; use a new request id",
                    request.id
                ),
            );
        }
        return Ok(Outcome::Replayed {
            request_id: request.id.clone(),
        });
    }
    if let Err(invalid) = validate::request_id(&request.id) {
        return reject(
            Reason::InvalidArgument {
                field: invalid.field.into(),
            },
            invalid.to_string(),
        );
    }
    let receipts_max = state.quotas.clamped().receipts_per_workspace;
    if state.receipts.count_in(&workspace) as u64 >= receipts_max {
        return Err(quota_exceeded(
            "receipts_per_workspace",
            &workspace,
            receipts_max,
            "request receipts",
        ));
    }
    let response = decide(state);
    let result = match &response {
        // A quota refusal inside `decide` is a "retry later" too.
        Err(Rejection {
            reason: Reason::QuotaExceeded { .. },
            ..
        }) => return response,
        Err(rejection) => ReceiptResult::Rejected(rejection.clone()),
        Ok(Outcome::OperationBegun {
            sandbox_id,
            kind,
            generation,
        })
        | Ok(Outcome::OperationJoined {
            sandbox_id,
            kind,
            generation,
        }) => {
            let operation = state
                .sandboxes
                .get_mut(sandbox_id)
                .and_then(|sandbox| sandbox.operation.as_mut())
                .expect("a begun or joined operation is in flight");
            if operation.request_ids.len() >= OPERATION_WAITERS_MAX {
                return reject(
                    Reason::ResourceExhausted,
                    format!(
                        "{OPERATION_WAITERS_MAX} requests already wait on this operation; retry later"
                    ),
                );
            }
            operation.request_ids.push(request.id.clone());
            ReceiptResult::Pending {
                sandbox_id: sandbox_id.clone(),
                kind: *kind,
                generation: *generation,
            }
        }
        Ok(Outcome::AlreadyDone { sandbox_id }) => {
            ReceiptResult::settled(&state.sandboxes[sandbox_id])
        }
        Ok(other) => unreachable!("Begin* commands do not answer {other:?}"),
    };
    // Planted bug (e), test-only: the proposer's clock instead of the
    // replicated one (see `crate::planted`).
    let stamp_ms = if crate::planted::receipts_from_proposer_clock() {
        request.time_ms
    } else {
        state.clock_ms
    };
    state.receipts.insert(
        request.id.clone(),
        Receipt {
            rpc,
            payload_digest: request.payload_digest.clone(),
            created_at_ms: stamp_ms,
            created_at_index: position.index,
            settled_at_ms: (!matches!(result, ReceiptResult::Pending { .. })).then_some(stamp_ms),
            workspace,
            result,
        },
    );
    response
}

/// Settles the receipts of the requests waiting on `sandbox`'s operation
/// (which just ended or was superseded) with `result`.
/// Their retention counts from `clock_ms`, the replicated clock now.
fn settle_waiters(
    receipts: &mut Receipts,
    operation: &Operation,
    result: &ReceiptResult,
    clock_ms: i64,
) {
    for request_id in &operation.request_ids {
        // Planted bug (e), test-only: settled at the proposer's time the
        // receipt was created with (see `crate::planted`).
        let clock_ms = if crate::planted::receipts_from_proposer_clock() {
            receipts
                .get(request_id)
                .map_or(clock_ms, |receipt| receipt.created_at_ms)
        } else {
            clock_ms
        };
        receipts.settle(request_id, result, clock_ms);
    }
}

/// Ends `sandbox_id`'s operation: settles its waiters with the sandbox as
/// it now is.
fn end_operation(state: &mut State, sandbox_id: &str) {
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return;
    };
    let Some(operation) = sandbox.operation.take() else {
        return;
    };
    let result = ReceiptResult::settled(sandbox);
    settle_waiters(&mut state.receipts, &operation, &result, state.clock_ms);
}

/// Moves the replicated clock towards the leader's `now_ms`: never back,
/// and forward by at most [`TICK_STEP_MS_MAX`], except on the first tick of
/// a cluster (clock 0), which sets the epoch. Then expires what the clock
/// passed: settled receipts older than the configured retention (counted
/// from settlement) and SSH sessions past their expiry.
fn tick(state: &mut State, now_ms: i64) {
    state.clock_ms = if state.clock_ms == 0 {
        now_ms.max(0)
    } else {
        state.clock_ms.saturating_add(
            now_ms
                .saturating_sub(state.clock_ms)
                .clamp(0, TICK_STEP_MS_MAX),
        )
    };
    let clock = state.clock_ms;
    let retention_ms = state.receipt_retention_ms();
    // Pending receipts are kept until their operation ends, however old;
    // settled ones leave in settlement order, O(expired).
    state.receipts.expire(clock, retention_ms);
    state.ssh_sessions.retain(|_, sessions| {
        sessions.retain(|_, session| session.expires_at_ms > clock);
        !sessions.is_empty()
    });
    // A retired key whose deadline passed verifies nothing: drop it.
    if let Some(cluster) = &mut state.cluster {
        cluster
            .retired_token_keys
            .retain(|key| key.valid_until_ms > clock);
    }
}

/// `RotateTokenKey`: the new key becomes current; the replaced one is kept
/// until the replicated clock plus the grace (not at all with no grace).
fn rotate_token_key(state: &mut State, token_secret_hex: &str, grace_ms: i64) -> Response {
    let clock = state.clock_ms;
    let Some(cluster) = &mut state.cluster else {
        return reject(
            Reason::InvalidPhase,
            "the cluster has no execution-token key yet (its first leader chooses one right \
             after election); retry",
        );
    };
    if !(0..=TOKEN_KEY_GRACE_MS_MAX).contains(&grace_ms) {
        return reject(
            Reason::InvalidArgument {
                field: "grace_seconds".into(),
            },
            format!(
                "a retired key verifies for at most {} s",
                TOKEN_KEY_GRACE_MS_MAX / 1000
            ),
        );
    }
    let well_formed = token_secret_hex.len() == TOKEN_KEY_HEX_LENGTH
        && token_secret_hex
            .bytes()
            .all(|byte| byte.is_ascii_hexdigit());
    if !well_formed || token_secret_hex == cluster.token_secret_hex {
        return reject(
            Reason::InvalidArgument {
                field: "token_secret_hex".into(),
            },
            format!(
                "a new execution-token key is {TOKEN_KEY_HEX_LENGTH} hex digits, unlike the current one"
            ),
        );
    }
    // Keys past their deadline (the tick that drops them may not have
    // come yet) make no room problem.
    cluster
        .retired_token_keys
        .retain(|key| key.valid_until_ms > clock);
    let retired_valid_until_ms = clock.saturating_add(grace_ms);
    if grace_ms > 0 && cluster.retired_token_keys.len() >= RETIRED_TOKEN_KEYS_COUNT_MAX {
        let next_free_ms = cluster
            .retired_token_keys
            .iter()
            .map(|key| key.valid_until_ms)
            .min()
            .unwrap_or(clock);
        return reject(
            Reason::ResourceExhausted,
            format!(
                "{RETIRED_TOKEN_KEYS_COUNT_MAX} retired keys are still in their grace period \
                 (the first ends at {next_free_ms} ms on the replicated clock); rotate again \
                 after it, or with --grace-seconds 0"
            ),
        );
    }
    let retired_key_id = cluster.token_key_id;
    let retired_secret = std::mem::replace(
        &mut cluster.token_secret_hex,
        token_secret_hex.to_ascii_lowercase(),
    );
    cluster.token_key_id = retired_key_id.saturating_add(1);
    if grace_ms > 0 {
        cluster.retired_token_keys.push(RetiredTokenKey {
            key_id: retired_key_id,
            secret_hex: retired_secret,
            valid_until_ms: retired_valid_until_ms,
        });
    }
    assert!(
        cluster.retired_token_keys.len() <= RETIRED_TOKEN_KEYS_COUNT_MAX,
        "retired token keys are bounded"
    );
    Ok(Outcome::TokenKeyRotated {
        key_id: cluster.token_key_id,
        retired_key_id,
        retired_valid_until_ms,
    })
}

fn create_workspace(state: &mut State, position: LogPosition, id: &str, name: &str) -> Response {
    if let Err(invalid) = validate::name("name", name) {
        return reject(
            Reason::InvalidArgument {
                field: invalid.field.into(),
            },
            invalid.to_string(),
        );
    }
    if state.workspaces.contains_key(name) {
        return reject(
            Reason::NameTaken,
            format!("workspace {name:?} already exists"),
        );
    }
    if state.workspaces.len() >= WORKSPACES_COUNT_MAX {
        return reject(
            Reason::ResourceExhausted,
            format!("the cluster holds the maximum of {WORKSPACES_COUNT_MAX} workspaces"),
        );
    }
    state.workspaces.insert(
        name.to_string(),
        Workspace {
            id: id.to_string(),
            name: name.to_string(),
            phase: WorkspacePhase::Active,
            resource_version: position.index,
            created_at_ms: state.clock_ms,
        },
    );
    state.names.insert(name.to_string(), Default::default());
    Ok(Outcome::WorkspaceCreated { name: name.into() })
}

fn delete_workspace(state: &mut State, position: LogPosition, name: &str) -> Response {
    if name == DEFAULT_WORKSPACE {
        return reject(
            Reason::DefaultWorkspaceProtected,
            "the default workspace cannot be deleted",
        );
    }
    let Some(workspace) = state.workspaces.get_mut(name) else {
        return reject(
            Reason::WorkspaceNotFound,
            format!("workspace {name:?} does not exist"),
        );
    };
    // TERMINATING first: no new sandboxes from this entry on, whether or not
    // the workspace can be removed yet. Retrying is safe.
    if workspace.phase != WorkspacePhase::Terminating {
        workspace.phase = WorkspacePhase::Terminating;
        workspace.resource_version = position.index;
    }
    let remaining_count = state.sandbox_count(name);
    if remaining_count > 0 {
        let remaining = state.names[name].keys().take(10).cloned().collect();
        return Ok(Outcome::WorkspaceTerminating {
            name: name.into(),
            remaining,
            remaining_count,
        });
    }
    state.workspaces.remove(name);
    state.names.remove(name);
    Ok(Outcome::WorkspaceDeleted { name: name.into() })
}

fn invalid_argument(invalid: validate::InvalidInput) -> Response {
    reject(
        Reason::InvalidArgument {
            field: invalid.field.into(),
        },
        invalid.to_string(),
    )
}

fn begin_create(state: &mut State, position: LogPosition, command: &Command) -> Response {
    let Command::BeginCreate {
        id,
        workspace,
        name,
        spec,
        labels,
        annotations,
        time_ms: _,
        host_identity,
        request: _,
    } = command
    else {
        unreachable!("begin_create is called with BeginCreate only");
    };
    let checks = validate::name("name", name)
        .and_then(|()| validate::spec(spec))
        .and_then(|()| validate::labels("labels", labels))
        .and_then(|()| validate::annotations(annotations));
    if let Err(invalid) = checks {
        return invalid_argument(invalid);
    }
    if id.is_empty() {
        return reject(
            Reason::InvalidArgument { field: "id".into() },
            "the proposer must choose a sandbox id",
        );
    }
    let Some(ws) = state.workspaces.get(workspace) else {
        return reject(
            Reason::WorkspaceNotFound,
            format!("workspace {workspace:?} does not exist; create it first"),
        );
    };
    if ws.phase == WorkspacePhase::Terminating {
        return reject(
            Reason::WorkspaceTerminating,
            format!("workspace {workspace:?} is being deleted"),
        );
    }
    if let Some(existing) = state.sandbox_by_name(workspace, name) {
        return reject(
            Reason::NameTaken,
            format!(
                "a sandbox named {name:?} already exists in workspace {workspace:?} (phase {})",
                existing.phase.as_str()
            ),
        );
    }
    if state.sandboxes.contains_key(id) {
        return reject(
            Reason::NameTaken,
            format!("sandbox id {id} is already in use"),
        );
    }
    let sandboxes_max = state.quotas.clamped().sandboxes_per_workspace;
    if state.sandbox_count(workspace) as u64 >= sandboxes_max {
        return Err(quota_exceeded(
            "sandboxes_per_workspace",
            workspace,
            sandboxes_max,
            "sandboxes",
        ));
    }
    let generation = 1;
    let sandbox = Sandbox {
        id: id.clone(),
        name: name.clone(),
        workspace: workspace.clone(),
        labels: labels.clone().into(),
        annotations: annotations.clone().into(),
        resource_version: position.index,
        created_at_ms: state.clock_ms,
        spec: spec.clone(),
        phase: SandboxPhase::Provisioning,
        execution: Execution {
            generation,
            handle: None,
            driver: None,
            exit_code: None,
        },
        message: None,
        operation: Some(Operation {
            kind: OperationKind::Create,
            generation,
            begun_at_index: position.index,
            request_ids: Vec::new(),
        }),
        host_identity: host_identity.clone(),
        restart_count: 0,
    };
    state.sandboxes.insert(id.clone(), Box::new(sandbox));
    state
        .names
        .get_mut(workspace)
        .expect("every workspace has a name index (State::assert_invariants)")
        .insert(name.clone(), id.clone());
    Ok(Outcome::OperationBegun {
        sandbox_id: id.clone(),
        kind: OperationKind::Create,
        generation,
    })
}

/// The id a target resolves to now.
pub(crate) fn resolve_id(state: &State, target: &SandboxTarget) -> Result<String, Rejection> {
    match target {
        SandboxTarget::Id(id) => {
            if state.sandboxes.contains_key(id) {
                Ok(id.clone())
            } else {
                Err(Rejection {
                    reason: Reason::SandboxNotFound,
                    message: format!("no sandbox with id {id}"),
                })
            }
        }
        SandboxTarget::Name { workspace, name } => {
            match state.names.get(workspace).and_then(|names| names.get(name)) {
                Some(id) => Ok(id.clone()),
                None if !state.workspaces.contains_key(workspace) => Err(Rejection {
                    reason: Reason::WorkspaceNotFound,
                    message: format!("workspace {workspace:?} does not exist"),
                }),
                None => Err(Rejection {
                    reason: Reason::SandboxNotFound,
                    message: format!("no sandbox named {name:?} in workspace {workspace:?}"),
                }),
            }
        }
    }
}

/// Resolves a target and checks the optional execution precondition: the
/// token's execution must be the sandbox's current one.
fn resolve_checked<'a>(
    state: &'a mut State,
    target: &SandboxTarget,
    expected_execution: Option<&ExecutionRef>,
) -> Result<&'a mut Sandbox, Rejection> {
    if let Some(ExecutionRef {
        key_id: Some(key_id),
        ..
    }) = expected_execution
    {
        let verifies = state.cluster.as_ref().is_some_and(|cluster| {
            cluster
                .verifying_keys(state.clock_ms)
                .any(|(id, _)| id == *key_id)
        });
        if !verifies {
            return Err(Rejection {
                reason: Reason::UnverifiableExecutionToken,
                message: format!(
                    "the execution token cannot be verified: its key ({key_id}) was rotated out \
                     or its grace ended; nothing was changed (observe the sandbox for a valid token)"
                ),
            });
        }
    }
    let id = resolve_id(state, target)?;
    let sandbox = state
        .sandboxes
        .get_mut(&id)
        .expect("resolve_id returns existing ids");
    if let Some(expected) = expected_execution
        && (expected.sandbox_id != sandbox.id
            || expected.generation != sandbox.execution.generation)
    {
        return Err(Rejection {
            reason: Reason::StaleExecution,
            message: "the execution token does not name the sandbox's current execution; nothing was changed (observe the sandbox again for a fresh token)".into(),
        });
    }
    Ok(sandbox)
}

fn invalid_phase(sandbox: &Sandbox, operation: &str) -> Response {
    reject(
        Reason::InvalidPhase,
        format!(
            "cannot {operation} sandbox {:?}: it is {}{}",
            sandbox.name,
            sandbox.phase.as_str(),
            match &sandbox.operation {
                Some(op) => format!(" ({:?} of generation {} in flight)", op.kind, op.generation),
                None => String::new(),
            }
        ),
    )
}

fn begin_operation(
    sandbox: &mut Sandbox,
    position: LogPosition,
    kind: OperationKind,
    phase: SandboxPhase,
) -> Response {
    sandbox.phase = phase;
    sandbox.operation = Some(Operation {
        kind,
        generation: sandbox.execution.generation,
        begun_at_index: position.index,
        request_ids: Vec::new(),
    });
    sandbox.resource_version = position.index;
    Ok(Outcome::OperationBegun {
        sandbox_id: sandbox.id.clone(),
        kind,
        generation: sandbox.execution.generation,
    })
}

fn joined(sandbox: &Sandbox) -> Response {
    let op = sandbox
        .operation
        .as_ref()
        .expect("joined() is called only while an operation is in flight");
    Ok(Outcome::OperationJoined {
        sandbox_id: sandbox.id.clone(),
        kind: op.kind,
        generation: op.generation,
    })
}

fn begin_stop(
    state: &mut State,
    position: LogPosition,
    target: &SandboxTarget,
    expected_execution: Option<&ExecutionRef>,
) -> Response {
    let sandbox = resolve_checked(state, target, expected_execution)?;
    let response = match sandbox.phase {
        SandboxPhase::Ready | SandboxPhase::Unknown => begin_operation(
            sandbox,
            position,
            OperationKind::Stop,
            SandboxPhase::Stopping,
        ),
        SandboxPhase::Stopping => return joined(sandbox),
        phase if phase.is_at_rest() => {
            return Ok(Outcome::AlreadyDone {
                sandbox_id: sandbox.id.clone(),
            });
        }
        _ => return invalid_phase(sandbox, "stop"),
    };
    // Stopping revokes the sandbox's SSH sessions.
    let sandbox_id = sandbox.id.clone();
    state.ssh_sessions.remove(&sandbox_id);
    response
}

fn launch_next_generation(sandbox: &mut Sandbox, position: LogPosition) -> Response {
    let generation = sandbox
        .execution
        .generation
        .checked_add(1)
        .expect("generation overflow: 2^64 launches of one sandbox");
    sandbox.execution = Execution {
        generation,
        handle: None,
        driver: None,
        exit_code: None,
    };
    sandbox.message = None;
    begin_operation(
        sandbox,
        position,
        OperationKind::Start,
        SandboxPhase::Starting,
    )
}

fn begin_start(
    state: &mut State,
    position: LogPosition,
    target: &SandboxTarget,
    expected_execution: Option<&ExecutionRef>,
) -> Response {
    let sandbox = resolve_checked(state, target, expected_execution)?;
    match sandbox.phase {
        phase if phase.is_at_rest() => {
            sandbox.restart_count = 0;
            launch_next_generation(sandbox, position)
        }
        SandboxPhase::Ready => Ok(Outcome::AlreadyDone {
            sandbox_id: sandbox.id.clone(),
        }),
        SandboxPhase::Starting => joined(sandbox),
        _ => invalid_phase(sandbox, "start"),
    }
}

fn begin_delete(
    state: &mut State,
    position: LogPosition,
    target: &SandboxTarget,
    expected_sandbox_id: Option<&str>,
    expected_execution: Option<&ExecutionRef>,
) -> Response {
    if let Some(expected) = expected_sandbox_id
        && !crate::planted::skip_expected_id_check()
    {
        let current = resolve_id(state, target)?;
        if current != expected {
            // The current id is not disclosed: the caller may not be allowed
            // to read the replacement.
            return reject(
                Reason::SandboxIdentityMismatch,
                "the name now belongs to another sandbox than the expected id; nothing was deleted",
            );
        }
    }
    let clock_ms = state.clock_ms;
    let sandbox = resolve_checked(state, target, expected_execution)?;
    if sandbox.phase == SandboxPhase::Deleting {
        return joined(sandbox);
    }
    // Delete supersedes any other operation in flight: the executor runs one
    // effect per sandbox at a time, so the superseded launch or stop finishes
    // (or is abandoned) before the removal starts, and its late completion no
    // longer matches and is ignored. Its waiters settle now, with the sandbox
    // as it is (DELETING).
    let superseded = sandbox.operation.take();
    let response = begin_operation(
        sandbox,
        position,
        OperationKind::Delete,
        SandboxPhase::Deleting,
    );
    if let Some(superseded) = superseded {
        let result = ReceiptResult::settled(sandbox);
        settle_waiters(&mut state.receipts, &superseded, &result, clock_ms);
    }
    response
}

/// Whether a completion proposed as `of` completes the sandbox's pending
/// operation: one of `kinds`, for `generation`, begun at
/// `of.operation_index` — not merely an operation of the same kind (a stop
/// that ended and a new stop of the same generation are two operations).
fn completes_pending(
    sandbox: &Sandbox,
    of: CompletionOf,
    kinds: &[OperationKind],
    generation: Option<u64>,
) -> bool {
    sandbox.operation.as_ref().is_some_and(|op| {
        kinds.contains(&op.kind)
            && generation.is_none_or(|generation| op.generation == generation)
            && op.begun_at_index == of.operation_index
    })
}

fn complete_launch(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    of: CompletionOf,
    generation: u64,
    result: &LaunchResult,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    if !completes_pending(
        sandbox,
        of,
        &[OperationKind::Create, OperationKind::Start],
        Some(generation),
    ) {
        return ignored;
    }
    match result {
        LaunchResult::Running { handle, driver } => {
            sandbox.phase = SandboxPhase::Ready;
            sandbox.execution.handle = Some(handle.clone());
            sandbox.execution.driver = Some(driver.clone());
            sandbox.message = None;
        }
        LaunchResult::Failed { message } => {
            sandbox.phase = SandboxPhase::Error;
            sandbox.message = Some(truncate_message(message.clone()));
        }
    }
    sandbox.resource_version = position.index;
    end_operation(state, sandbox_id);
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

fn complete_stop(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    of: CompletionOf,
    generation: u64,
    exit_code: Option<i32>,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    if !completes_pending(sandbox, of, &[OperationKind::Stop], Some(generation)) {
        return ignored;
    }
    sandbox.phase = SandboxPhase::Stopped;
    sandbox.execution.exit_code = exit_code;
    sandbox.resource_version = position.index;
    end_operation(state, sandbox_id);
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

fn complete_delete(state: &mut State, sandbox_id: &str, of: CompletionOf) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get(sandbox_id) else {
        return ignored;
    };
    if !completes_pending(sandbox, of, &[OperationKind::Delete], None) {
        return ignored;
    }
    // One step removes the sandbox, its name and every owned record, however
    // many: the owned maps are keyed by sandbox id.
    let sandbox = state
        .sandboxes
        .remove(sandbox_id)
        .expect("checked just above");
    state.ssh_sessions.remove(sandbox_id);
    state.policies.remove(sandbox_id);
    let removed = state
        .names
        .get_mut(&sandbox.workspace)
        .and_then(|names| names.remove(&sandbox.name));
    assert_eq!(
        removed.as_deref(),
        Some(sandbox_id),
        "the name {}/{} must point at the sandbox being deleted",
        sandbox.workspace,
        sandbox.name
    );
    let operation = sandbox
        .operation
        .as_ref()
        .expect("a deleted sandbox had its delete in flight");
    settle_waiters(
        &mut state.receipts,
        operation,
        &ReceiptResult::Deleted {
            sandbox_id: sandbox_id.into(),
        },
        state.clock_ms,
    );
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}

/// An execution ended on its own (`Some(code)`) or was lost (`None`). With
/// a restart policy that asks for it, a replacement execution (the next
/// generation) is launched; otherwise the sandbox settles.
fn observe_exit(
    state: &mut State,
    position: LogPosition,
    sandbox_id: &str,
    of: CompletionOf,
    generation: u64,
    exit_code: Option<i32>,
) -> Response {
    let ignored = Ok(Outcome::Ignored {
        sandbox_id: sandbox_id.into(),
    });
    let Some(sandbox) = state.sandboxes.get_mut(sandbox_id) else {
        return ignored;
    };
    // Only an execution that runs undisturbed can "exit on its own"; an exit
    // during a stop or delete is that operation's business. An observation
    // made before the sandbox last changed is about a state that is gone.
    if sandbox.phase != SandboxPhase::Ready
        || sandbox.execution.generation != generation
        || sandbox.resource_version != of.operation_index
    {
        return ignored;
    }
    sandbox.execution.exit_code = exit_code;
    let failed = exit_code != Some(0);
    let replace = match sandbox.spec.restart_policy {
        RestartPolicy::Never => false,
        RestartPolicy::OnFailure => failed,
        RestartPolicy::Always => true,
    };
    if replace && sandbox.restart_count < RESTARTS_MAX {
        sandbox.restart_count += 1;
        launch_next_generation(sandbox, position)?;
        return Ok(Outcome::Completed {
            sandbox_id: sandbox_id.into(),
        });
    }
    sandbox.phase = if failed {
        SandboxPhase::Error
    } else {
        SandboxPhase::Completed
    };
    sandbox.message = match exit_code {
        Some(0) => None,
        Some(code) => Some(format!("the command exited with status {code}")),
        None => Some("the execution was lost: it stopped without recording an exit status".into()),
    };
    sandbox.resource_version = position.index;
    // Nothing runs any more: its SSH sessions go with the execution.
    state.ssh_sessions.remove(sandbox_id);
    Ok(Outcome::Completed {
        sandbox_id: sandbox_id.into(),
    })
}
