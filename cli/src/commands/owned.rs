//! `palisade ssh-session ...` and `palisade policy ...`: the records a
//! sandbox owns. They are removed with their sandbox, in the same step.

use std::path::PathBuf;

use clap::Subcommand;
use palisade_proto::v1;
use serde_json::json;

use super::{Output, consistency, print_json, print_table};
use crate::client::Client;

/// `palisade ssh-session ...`
#[derive(Debug, Subcommand)]
pub enum SshSessionCommand {
    /// Open an SSH session on a READY sandbox; prints its token once (only
    /// its hash is stored).
    Create {
        /// Sandbox name.
        sandbox: String,
        /// Lifetime in seconds (default one hour, at most seven days).
        #[arg(long, default_value_t = 3600)]
        ttl_seconds: u32,
    },
    /// List a sandbox's open sessions (never their tokens).
    List {
        /// Sandbox name.
        sandbox: String,
    },
    /// Revoke one session.
    Revoke {
        /// Sandbox name.
        sandbox: String,
        /// Session id.
        session_id: String,
    },
}

/// `palisade policy ...`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Set a sandbox's policy document (the version grows by one).
    Set {
        /// Sandbox name.
        sandbox: String,
        /// The document, inline.
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        document: Option<String>,
        /// Read the document from this file.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Set only if the current version is this (0: no policy yet).
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Show a sandbox's policy.
    Get {
        /// Sandbox name.
        sandbox: String,
        /// Read this replica's local state (may be behind the leader).
        #[arg(long)]
        stale: bool,
    },
}

fn by_name(workspace: &str, name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: workspace.to_string(),
        name: name.to_string(),
        id: String::new(),
    })
}

fn session_json(session: &v1::SshSession) -> serde_json::Value {
    let mut value = json!({
        "id": session.id,
        "sandbox_id": session.sandbox_id,
        "created_at_ms": session.created_at_ms,
        "expires_at_ms": session.expires_at_ms,
    });
    if !session.token.is_empty() {
        value["token"] = json!(session.token);
    }
    value
}

/// Runs `palisade ssh-session ...`.
pub async fn ssh_session(
    client: &mut Client,
    workspace: &str,
    output: Output,
    command: SshSessionCommand,
) -> anyhow::Result<()> {
    match command {
        SshSessionCommand::Create {
            sandbox,
            ttl_seconds,
        } => {
            let request = v1::CreateSshSessionRequest {
                sandbox: by_name(workspace, &sandbox),
                ttl_seconds,
            };
            let session = client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.create_ssh_session(request).await }
                })
                .await?;
            match output {
                Output::Json => print_json(&session_json(&session)),
                Output::Table => {
                    println!("session {} on sandbox {}", session.id, session.sandbox_id);
                    println!("token (shown once): {}", session.token);
                }
            }
        }
        SshSessionCommand::List { sandbox } => {
            let mut sessions = Vec::new();
            let mut page_token = String::new();
            loop {
                let request = v1::ListSshSessionsRequest {
                    sandbox: by_name(workspace, &sandbox),
                    page_size: 1000,
                    page_token: page_token.clone(),
                    consistency: consistency(false),
                };
                let page = client
                    .palisade(|mut api| {
                        let request = request.clone();
                        async move { api.list_ssh_sessions(request).await }
                    })
                    .await?;
                sessions.extend(page.sessions);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match output {
                Output::Json => print_json(&serde_json::Value::Array(
                    sessions.iter().map(session_json).collect(),
                )),
                Output::Table => {
                    let rows: Vec<Vec<String>> = sessions
                        .iter()
                        .map(|session| {
                            vec![
                                session.id.clone(),
                                session.created_at_ms.to_string(),
                                session.expires_at_ms.to_string(),
                            ]
                        })
                        .collect();
                    print_table(&["SESSION", "CREATED_AT_MS", "EXPIRES_AT_MS"], &rows);
                }
            }
        }
        SshSessionCommand::Revoke {
            sandbox,
            session_id,
        } => {
            let request = v1::RevokeSshSessionRequest {
                sandbox: by_name(workspace, &sandbox),
                session_id: session_id.clone(),
            };
            client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.revoke_ssh_session(request).await }
                })
                .await?;
            match output {
                Output::Json => print_json(&json!({"id": session_id, "revoked": true})),
                Output::Table => println!("session {session_id} revoked"),
            }
        }
    }
    Ok(())
}

fn policy_json(policy: &v1::SandboxPolicy) -> serde_json::Value {
    json!({
        "sandbox_id": policy.sandbox_id,
        "version": policy.version,
        "document": policy.document,
        "updated_at_ms": policy.updated_at_ms,
    })
}

/// Runs `palisade policy ...`.
pub async fn policy(
    client: &mut Client,
    workspace: &str,
    output: Output,
    command: PolicyCommand,
) -> anyhow::Result<()> {
    let policy = match command {
        PolicyCommand::Set {
            sandbox,
            document,
            file,
            expected_version,
        } => {
            let document = match (document, file) {
                (Some(document), _) => document,
                (None, Some(file)) => std::fs::read_to_string(&file).map_err(|error| {
                    anyhow::anyhow!("cannot read the policy from {}: {error}", file.display())
                })?,
                (None, None) => unreachable!("clap requires --document or --file"),
            };
            let request = v1::SetSandboxPolicyRequest {
                sandbox: by_name(workspace, &sandbox),
                document,
                expected_version,
            };
            client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.set_sandbox_policy(request).await }
                })
                .await?
        }
        PolicyCommand::Get { sandbox, stale } => {
            let request = v1::GetSandboxPolicyRequest {
                sandbox: by_name(workspace, &sandbox),
                consistency: consistency(stale),
            };
            client
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.get_sandbox_policy(request).await }
                })
                .await?
        }
    };
    match output {
        Output::Json => print_json(&policy_json(&policy)),
        Output::Table => {
            println!(
                "sandbox {} policy version {}",
                policy.sandbox_id, policy.version
            );
            println!("{}", policy.document);
        }
    }
    Ok(())
}
