//! API tokens and attributed commands in the replicated state: a token's
//! times come from the replicated clock at apply, its role is checked, a
//! revoke marks it (kept for the audit trail), and an attributed command is
//! applied exactly as the command it wraps.

use palisade_lifecycle::{Attribution, Command, LogPosition, Outcome, Reason, State, apply};

struct Log {
    state: State,
    index: u64,
}

impl Log {
    fn new() -> Self {
        Log {
            state: State::new(),
            index: 0,
        }
    }

    fn apply(&mut self, command: Command) -> palisade_lifecycle::Response {
        self.index += 1;
        apply(
            &mut self.state,
            LogPosition {
                index: self.index,
                term: 1,
            },
            &command,
        )
    }
}

fn create(id: &str, role: &str, workspace: &str, ttl_ms: i64) -> Command {
    Command::CreateApiToken {
        id: id.to_string(),
        secret_sha256: "ab".repeat(32),
        role: role.to_string(),
        workspace: workspace.to_string(),
        ttl_ms,
        created_by: "cert:admin".to_string(),
    }
}

fn reason(response: palisade_lifecycle::Response) -> Reason {
    response.expect_err("rejected").reason
}

#[test]
fn a_token_expires_on_the_replicated_clock_and_a_revoke_keeps_it() {
    let mut log = Log::new();
    log.apply(Command::Tick {
        now_ms: 1_000_000,
        receipt_retention_ms: 0,
    })
    .expect("tick");
    assert_eq!(
        log.apply(create("t1", "viewer", "default", 60_000)),
        Ok(Outcome::Housekeeping)
    );
    let token = &log.state.api_tokens["t1"];
    assert_eq!(token.created_at_ms, 1_000_000);
    assert_eq!(token.expires_at_ms, 1_060_000);
    assert!(!token.revoked);

    log.apply(create("t2", "admin", "", 0))
        .expect("an admin token");
    assert_eq!(log.state.api_tokens["t2"].expires_at_ms, 0, "never expires");

    log.apply(Command::RevokeApiToken { id: "t1".into() })
        .expect("revoked");
    assert!(log.state.api_tokens["t1"].revoked);
    assert_eq!(
        reason(log.apply(Command::RevokeApiToken { id: "nope".into() })),
        Reason::TokenNotFound
    );
}

#[test]
fn roles_workspaces_and_ids_are_checked_at_apply() {
    let mut log = Log::new();
    assert_eq!(
        reason(log.apply(create("a", "owner", "default", 0))),
        Reason::InvalidArgument {
            field: "role".into()
        }
    );
    assert_eq!(
        reason(log.apply(create("a", "admin", "default", 0))),
        Reason::InvalidArgument {
            field: "workspace".into()
        }
    );
    assert_eq!(
        reason(log.apply(create("a", "editor", "missing", 0))),
        Reason::WorkspaceNotFound
    );
    assert_eq!(
        reason(log.apply(create("a", "editor", "default", -1))),
        Reason::InvalidArgument {
            field: "ttl_seconds".into()
        }
    );
    log.apply(create("a", "editor", "default", 0))
        .expect("created");
    assert_eq!(
        reason(log.apply(create("a", "viewer", "default", 0))),
        Reason::InvalidArgument { field: "id".into() }
    );
    assert!(log.state.api_tokens.len() == 1);
}

#[test]
fn an_attributed_command_applies_as_the_command_it_wraps() {
    let mut plain = Log::new();
    let mut attributed = Log::new();
    let command = Command::CreateWorkspace {
        id: "w-1".into(),
        name: "team".into(),
        time_ms: 0,
    };
    let by = Attribution {
        principal: "token:abc".into(),
        role: "admin".into(),
    };
    let wrapped = Command::Attributed {
        by,
        command: Box::new(command.clone()),
    };
    assert!(wrapped.is_client_proposable());
    assert_eq!(wrapped.name(), "CreateWorkspace");
    assert_eq!(plain.apply(command), attributed.apply(wrapped.clone()));
    assert_eq!(plain.state, attributed.state);

    // Never a leader-internal command, never twice.
    let tick = Command::Attributed {
        by: Attribution {
            principal: "token:abc".into(),
            role: "admin".into(),
        },
        command: Box::new(Command::Tick {
            now_ms: 1,
            receipt_retention_ms: 0,
        }),
    };
    assert!(!tick.is_client_proposable());
    let nested = Command::Attributed {
        by: Attribution {
            principal: "token:abc".into(),
            role: "admin".into(),
        },
        command: Box::new(wrapped),
    };
    assert!(!nested.is_client_proposable());
}
