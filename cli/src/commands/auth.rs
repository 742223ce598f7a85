//! `palisade auth ...`: API tokens (create, list, revoke) and `whoami`.
//! Creating, listing and revoking tokens needs the admin role; the token
//! itself is printed once, at creation (the cluster keeps only its hash).

use clap::Subcommand;
use palisade_proto::v1;
use serde_json::json;

use super::{Output, print_json, print_table};
use crate::client::Client;

/// `palisade auth ...`
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Manage API tokens (bearer credentials; admin only).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show who the cluster authenticates this CLI as, and its role.
    #[command(name = "whoami")]
    WhoAmI,
}

/// `palisade auth token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it once. `--role editor|viewer` is bound to
    /// the workspace given with the global `--workspace` (default
    /// `default`); `--role admin` to none.
    Create {
        /// admin, editor or viewer.
        #[arg(long, value_parser = ["admin", "editor", "viewer"])]
        role: String,
        /// Lifetime: NUMBER with s, m, h or d (e.g. 30m, 24h, 90d); a bare
        /// number is seconds. Default: never expires.
        #[arg(long, value_parser = parse_ttl)]
        ttl: Option<u64>,
    },
    /// List tokens (ids, roles, expiry; never the secrets).
    List,
    /// Revoke a token by id: it is refused from then on.
    Revoke {
        /// The token's id (the middle part of ptk1.ID.SECRET).
        id: String,
    },
}

/// Parses `30m`, `24h`, `90d`, `3600s` or `3600` into seconds.
pub fn parse_ttl(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1),
        Some((at, 'm')) => (&text[..at], 60),
        Some((at, 'h')) => (&text[..at], 3600),
        Some((at, 'd')) => (&text[..at], 86_400),
        _ => (text, 1),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 3600, 30m, 24h, 90d)"))?;
    number
        .checked_mul(unit)
        .filter(|seconds| *seconds > 0)
        .ok_or_else(|| format!("{text:?}: a lifetime must be positive and fit in 64 bits"))
}

fn token_json(token: &v1::ApiToken) -> serde_json::Value {
    json!({
        "id": token.id,
        "role": token.role,
        "workspace": token.workspace,
        "created_by": token.created_by,
        "created_at_ms": token.created_at_ms,
        "expires_at_ms": token.expires_at_ms,
        "revoked": token.revoked,
    })
}

fn token_row(token: &v1::ApiToken) -> Vec<String> {
    vec![
        token.id.clone(),
        token.role.clone(),
        token.workspace.clone(),
        if token.expires_at_ms == 0 {
            "never".to_string()
        } else {
            token.expires_at_ms.to_string()
        },
        token.revoked.to_string(),
        token.created_by.clone(),
    ]
}

const TOKEN_HEADER: [&str; 6] = [
    "ID",
    "ROLE",
    "WORKSPACE",
    "EXPIRES_MS",
    "REVOKED",
    "CREATED_BY",
];

/// Runs an `auth` command.
pub async fn run(
    client: &mut Client,
    workspace: &str,
    output: Output,
    command: AuthCommand,
) -> anyhow::Result<()> {
    match command {
        AuthCommand::WhoAmI => {
            let me = client
                .admin(|mut admin| async move { admin.who_am_i(v1::WhoAmIRequest {}).await })
                .await?;
            match output {
                Output::Json => print_json(&json!({
                    "principal": me.principal,
                    "role": me.role,
                    "workspace": me.workspace,
                })),
                Output::Table => print_table(
                    &["PRINCIPAL", "ROLE", "WORKSPACE"],
                    &[vec![me.principal, me.role, me.workspace]],
                ),
            }
        }
        AuthCommand::Token(TokenCommand::Create { role, ttl }) => {
            let request = v1::CreateApiTokenRequest {
                workspace: if role == "admin" {
                    String::new()
                } else {
                    workspace.to_string()
                },
                role,
                ttl_seconds: ttl.unwrap_or(0),
            };
            let created = client
                .admin(|mut admin| {
                    let request = request.clone();
                    async move { admin.create_api_token(request).await }
                })
                .await?;
            let token = created.token.unwrap_or_default();
            match output {
                Output::Json => {
                    let mut value = token_json(&token);
                    value["token"] = json!(created.secret);
                    print_json(&value);
                }
                Output::Table => {
                    print_table(&TOKEN_HEADER, &[token_row(&token)]);
                    println!(
                        "token (shown once; use it as PALISADE_TOKEN or --token): {}",
                        created.secret
                    );
                }
            }
        }
        AuthCommand::Token(TokenCommand::List) => {
            let listed = client
                .admin(|mut admin| async move {
                    admin.list_api_tokens(v1::ListApiTokensRequest {}).await
                })
                .await?;
            match output {
                Output::Json => print_json(&json!(
                    listed.tokens.iter().map(token_json).collect::<Vec<_>>()
                )),
                Output::Table => print_table(
                    &TOKEN_HEADER,
                    &listed.tokens.iter().map(token_row).collect::<Vec<_>>(),
                ),
            }
        }
        AuthCommand::Token(TokenCommand::Revoke { id }) => {
            let request = v1::RevokeApiTokenRequest { id };
            let revoked = client
                .admin(|mut admin| {
                    let request = request.clone();
                    async move { admin.revoke_api_token(request).await }
                })
                .await?;
            match output {
                Output::Json => print_json(&token_json(&revoked)),
                Output::Table => println!("token {} revoked", revoked.id),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn lifetimes_take_a_unit() {
        assert_eq!(parse_ttl("3600"), Ok(3600));
        assert_eq!(parse_ttl("30m"), Ok(1800));
        assert_eq!(parse_ttl("24h"), Ok(86_400));
        assert_eq!(parse_ttl("2d"), Ok(172_800));
        for bad in ["", "0", "h", "-1h", "1w", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
