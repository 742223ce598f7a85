//! Owned records of a sandbox: SSH sessions and its policy. They live in
//! maps keyed by sandbox id, so the entry that removes a sandbox removes
//! all of them in one step, however many there are.

use crate::apply::{Outcome, Reason, Rejection, Response, resolve_id};
use crate::command::SandboxTarget;
use crate::limits::SESSIONS_PER_SANDBOX_MAX;
use crate::state::{SandboxPhase, SandboxPolicy, SshSession, State};
use crate::validate;

fn reject(reason: Reason, message: impl Into<String>) -> Response {
    Err(Rejection {
        reason,
        message: message.into(),
    })
}

pub(crate) fn create_ssh_session(
    state: &mut State,
    target: &SandboxTarget,
    session_id: &str,
    token_sha256: &str,
    expires_at_ms: i64,
    time_ms: i64,
) -> Response {
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
            created_at_ms: time_ms,
            expires_at_ms,
        },
    );
    Ok(Outcome::SshSessionCreated {
        sandbox_id,
        session_id: session_id.to_string(),
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
    time_ms: i64,
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
    let version = current + 1;
    state.policies.insert(
        sandbox_id.clone(),
        SandboxPolicy {
            version,
            document: document.to_string(),
            updated_at_ms: time_ms,
        },
    );
    Ok(Outcome::PolicySet {
        sandbox_id,
        version,
    })
}
