//! The records a sandbox owns (deleted with it): SSH sessions and the
//! sandbox policy.

use palisade_lifecycle::{self as core, Command, Outcome, validate};
use palisade_proto::v1;
use sha2::{Digest, Sha256};
use tonic::{Request, Response, Status};

use super::PalisadeService;
use super::request::{decode_page_token, encode_page_token};
use super::sandboxes::target_from_ref;
use crate::errors;

/// Default SSH session lifetime.
const SESSION_TTL_SECONDS_DEFAULT: u32 = 3600;

pub(super) async fn create_ssh_session(
    service: &PalisadeService,
    request: Request<v1::CreateSshSessionRequest>,
) -> Result<Response<v1::SshSession>, Status> {
    let request = request.into_inner();
    let target = target_from_ref(request.sandbox)?;
    let ttl_seconds = match request.ttl_seconds {
        0 => SESSION_TTL_SECONDS_DEFAULT,
        ttl if u64::from(ttl) > core::limits::SESSION_TTL_SECONDS_MAX => {
            return Err(errors::invalid_input(validate::InvalidInput {
                field: "ttl_seconds",
                problem: format!(
                    "{ttl} is longer than the maximum {}",
                    core::limits::SESSION_TTL_SECONDS_MAX
                ),
            }));
        }
        ttl => ttl,
    };
    let token_bytes: [u8; 32] = crate::ids::random_bytes();
    let session_token = format!("pss1.{}", hex::encode(token_bytes));
    // The session's expiry is the replicated clock at apply plus its TTL;
    // this replica's clock only goes into the audit trail.
    let time_ms = service.now_ms();
    let ttl_ms = i64::from(ttl_seconds) * 1000;
    let session_id = crate::ids::new_uuid().to_string();
    let proposed = service
        .replica
        .propose(Command::CreateSshSession {
            target,
            session_id: session_id.clone(),
            token_sha256: hex::encode(Sha256::digest(session_token.as_bytes())),
            expires_at_ms: time_ms + ttl_ms,
            time_ms,
            ttl_ms,
        })
        .await?;
    let Outcome::SshSessionCreated {
        sandbox_id,
        created_at_ms,
        expires_at_ms,
        ..
    } = proposed.response.map_err(errors::rejection)?
    else {
        return Err(errors::unavailable(
            errors::INTERNAL,
            "unexpected apply outcome",
        ));
    };
    Ok(Response::new(v1::SshSession {
        id: session_id,
        sandbox_id,
        token: session_token,
        created_at_ms,
        expires_at_ms,
    }))
}

pub(super) async fn revoke_ssh_session(
    service: &PalisadeService,
    request: Request<v1::RevokeSshSessionRequest>,
) -> Result<Response<v1::RevokeSshSessionResponse>, Status> {
    let request = request.into_inner();
    let target = target_from_ref(request.sandbox)?;
    if request.session_id.is_empty() || request.session_id.len() > 64 {
        return Err(errors::invalid_input(validate::InvalidInput {
            field: "session_id",
            problem: "must be 1 to 64 characters".into(),
        }));
    }
    let proposed = service
        .replica
        .propose(Command::RevokeSshSession {
            target,
            session_id: request.session_id,
        })
        .await?;
    proposed.response.map_err(errors::rejection)?;
    Ok(Response::new(v1::RevokeSshSessionResponse {}))
}

pub(super) async fn list_ssh_sessions(
    service: &PalisadeService,
    request: Request<v1::ListSshSessionsRequest>,
) -> Result<Response<v1::ListSshSessionsResponse>, Status> {
    let request = request.into_inner();
    let page_size = validate::page_size(request.page_size).map_err(errors::invalid_input)?;
    let after = decode_page_token(&request.page_token)?;
    service.read_consistency(request.consistency).await?;
    let sandbox_id = service.sandbox_id_of(request.sandbox)?;
    let page = service.replica.state.read(|applied| {
        let mut sessions = Vec::new();
        let mut next_page_token = String::new();
        if let Some(open) = applied.state.ssh_sessions.get(&sandbox_id) {
            for (id, session) in open {
                if let Some((after_id, _)) = &after
                    && id <= after_id
                {
                    continue;
                }
                if sessions.len() == page_size {
                    next_page_token = encode_page_token(&sessions_last_id(&sessions), "");
                    break;
                }
                sessions.push(v1::SshSession {
                    id: session.id.clone(),
                    sandbox_id: session.sandbox_id.clone(),
                    token: String::new(),
                    created_at_ms: session.created_at_ms,
                    expires_at_ms: session.expires_at_ms,
                });
            }
        }
        v1::ListSshSessionsResponse {
            sessions,
            next_page_token,
        }
    });
    Ok(Response::new(page))
}

fn sessions_last_id(sessions: &[v1::SshSession]) -> String {
    sessions
        .last()
        .map(|session| session.id.clone())
        .unwrap_or_default()
}

pub(super) async fn set_sandbox_policy(
    service: &PalisadeService,
    request: Request<v1::SetSandboxPolicyRequest>,
) -> Result<Response<v1::SandboxPolicy>, Status> {
    let request = request.into_inner();
    let target = target_from_ref(request.sandbox)?;
    validate::policy_document(&request.document).map_err(errors::invalid_input)?;
    let proposed = service
        .replica
        .propose(Command::SetSandboxPolicy {
            target,
            document: request.document.clone(),
            expected_version: request.expected_version,
            time_ms: service.now_ms(),
        })
        .await?;
    let Outcome::PolicySet {
        sandbox_id,
        version,
        updated_at_ms,
    } = proposed.response.map_err(errors::rejection)?
    else {
        return Err(errors::unavailable(
            errors::INTERNAL,
            "unexpected apply outcome",
        ));
    };
    Ok(Response::new(v1::SandboxPolicy {
        sandbox_id,
        version,
        document: request.document,
        updated_at_ms,
    }))
}

pub(super) async fn get_sandbox_policy(
    service: &PalisadeService,
    request: Request<v1::GetSandboxPolicyRequest>,
) -> Result<Response<v1::SandboxPolicy>, Status> {
    let request = request.into_inner();
    service.read_consistency(request.consistency).await?;
    let sandbox_id = service.sandbox_id_of(request.sandbox)?;
    let policy = service.replica.state.read(|applied| {
        applied.state.policies.get(&sandbox_id).map_or_else(
            || v1::SandboxPolicy {
                sandbox_id: sandbox_id.clone(),
                ..Default::default()
            },
            |policy| v1::SandboxPolicy {
                sandbox_id: sandbox_id.clone(),
                version: policy.version,
                document: policy.document.clone(),
                updated_at_ms: policy.updated_at_ms,
            },
        )
    });
    Ok(Response::new(policy))
}
