//! Owned records of a sandbox: SSH sessions and its policy. They live in
//! maps keyed by sandbox id, so the entry that removes a sandbox removes
//! all of them in one step, however many there are.
//!
//! Their times come from the replicated clock at apply: a session expires at
//! `State::clock_ms` when it is created plus its TTL (the command carries the
//! duration, not an instant), a policy's `updated_at_ms` is the clock at the
//! change.

use crate::apply::{Outcome, Reason, Rejection, Response, resolve_id};
use crate::command::SandboxTarget;
use crate::limits::{SESSION_TTL_SECONDS_MAX, SESSIONS_PER_SANDBOX_MAX};
use crate::state::{SandboxPhase, SandboxPolicy, SshSession, State};
use crate::validate;

fn reject(reason: Reason, message: impl Into<String>) -> Response {
    Err(Rejection {
        reason,
        message: message.into(),
    })
}

/// When a new session expires, as its command says.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SessionExpiry {
    /// After this long on the replicated clock.
    Ttl(i64),
    /// At this instant: entries written before sessions carried a TTL.
    Legacy(i64),
}

impl SessionExpiry {
    /// From a `CreateSshSession`'s fields: a TTL of 0 is an old entry.
    pub(crate) fn from_command(ttl_ms: i64, expires_at_ms: i64) -> SessionExpiry {
        if ttl_ms == 0 {
            SessionExpiry::Legacy(expires_at_ms)
        } else {
            SessionExpiry::Ttl(ttl_ms)
        }
    }
}

/// Refuses a new owned record of `sandbox_id` when its workspace is at its
/// `owned_records_per_workspace` quota. Counting walks the workspace's
/// sandboxes (at most its sandbox quota), only when a record is added.
fn check_owned_record_quota(state: &State, sandbox_id: &str) -> Result<(), Rejection> {
    let workspace = &state.sandboxes[sandbox_id].workspace;
    let owned_max = state.quotas.clamped().owned_records_per_workspace;
    if state.owned_record_count(workspace) as u64 >= owned_max {
        return Err(crate::apply::quota_exceeded(
            "owned_records_per_workspace",
            workspace,
            owned_max,
            "SSH sessions and policies",
        ));
    }
    Ok(())
}

pub(crate) fn create_ssh_session(
    state: &mut State,
    target: &SandboxTarget,
    session_id: &str,
    token_sha256: &str,
    expiry: SessionExpiry,
) -> Response {
    let created_at_ms = state.clock_ms;
    let expires_at_ms = match expiry {
        SessionExpiry::Ttl(ttl_ms)
            if ttl_ms < 0 || ttl_ms > (SESSION_TTL_SECONDS_MAX * 1000) as i64 =>
        {
            return reject(
                Reason::InvalidArgument {
                    field: "ttl_ms".into(),
                },
                format!(
                    "an SSH session lives 1 ms to {SESSION_TTL_SECONDS_MAX} s, not {ttl_ms} ms"
                ),
            );
        }
        SessionExpiry::Ttl(ttl_ms) => created_at_ms.saturating_add(ttl_ms),
        SessionExpiry::Legacy(expires_at_ms) => expires_at_ms,
    };
    let sandbox_id = resolve_id(state, target)?;
    let sandbox = &state.sandboxes[&sandbox_id];
    if sandbox.phase != SandboxPhase::Ready {
        return reject(
            Reason::InvalidPhase,
            format!(
                "SSH sessions need a READY sandbox; {:?} is {}",
                sandbox.name,
                sandbox.phase.as_str()
            ),
        );
    }
    if session_id.is_empty() || token_sha256.len() != 64 {
        return reject(
            Reason::InvalidArgument {
                field: "session".into(),
            },
            "the proposer must choose a session id and a SHA-256 token digest",
        );
    }
    check_owned_record_quota(state, &sandbox_id)?;
    let sessions = state.ssh_sessions.entry(sandbox_id.clone()).or_default();
    if sessions.len() >= SESSIONS_PER_SANDBOX_MAX {
        return reject(
            Reason::ResourceExhausted,
            format!(
                "the sandbox already has the maximum of {SESSIONS_PER_SANDBOX_MAX} SSH sessions"
            ),
        );
    }
    sessions.insert(
        session_id.to_string(),
        SshSession {
            id: session_id.to_string(),
            sandbox_id: sandbox_id.clone(),
            token_sha256: token_sha256.to_string(),
            created_at_ms,
            expires_at_ms,
        },
    );
    Ok(Outcome::SshSessionCreated {
        sandbox_id,
        session_id: session_id.to_string(),
        created_at_ms,
        expires_at_ms,
    })
}

pub(crate) fn revoke_ssh_session(
    state: &mut State,
    target: &SandboxTarget,
    session_id: &str,
) -> Response {
    let sandbox_id = resolve_id(state, target)?;
    let Some(sessions) = state.ssh_sessions.get_mut(&sandbox_id) else {
        return reject(
            Reason::SessionNotFound,
            format!("no SSH session {session_id}"),
        );
    };
    if sessions.remove(session_id).is_none() {
        return reject(
            Reason::SessionNotFound,
            format!("no SSH session {session_id}"),
        );
    }
    if sessions.is_empty() {
        state.ssh_sessions.remove(&sandbox_id);
    }
    Ok(Outcome::SshSessionRevoked { sandbox_id })
}

pub(crate) fn set_policy(
    state: &mut State,
    target: &SandboxTarget,
    document: &str,
    expected_version: Option<u64>,
) -> Response {
    if let Err(invalid) = validate::policy_document(document) {
        return reject(
            Reason::InvalidArgument {
                field: invalid.field.into(),
            },
            invalid.to_string(),
        );
    }
    let sandbox_id = resolve_id(state, target)?;
    if state.sandboxes[&sandbox_id].phase == SandboxPhase::Deleting {
        return reject(Reason::InvalidPhase, "the sandbox is being deleted");
    }
    let current = state
        .policies
        .get(&sandbox_id)
        .map_or(0, |policy| policy.version);
    if let Some(expected) = expected_version
        && expected != current
    {
        return reject(
            Reason::PolicyVersionMismatch,
            format!("the policy is at version {current}, not {expected}; read it again"),
        );
    }
    if current == 0 {
        check_owned_record_quota(state, &sandbox_id)?;
    }
    let version = current + 1;
    state.policies.insert(
        sandbox_id.clone(),
        SandboxPolicy {
            version,
            document: document.to_string(),
            updated_at_ms: state.clock_ms,
        },
    );
    Ok(Outcome::PolicySet {
        sandbox_id,
        version,
        updated_at_ms: state.clock_ms,
    })
}
