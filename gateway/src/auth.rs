//! Who is calling, and what they may do: authentication of every public
//! and admin request, and the role checks the services make.
//!
//! # Decisions
//!
//! - **Two credentials.** A bearer token (`Authorization: Bearer
//!   ptk1.ID.SECRET`), checked against the API tokens in the replicated
//!   state (only the SHA-256 of a secret is kept there; expiry and
//!   revocation are replicated too), or a TLS client certificate chained to
//!   the cluster CA whose subject alternative names carry the role
//!   (`admin.role.palisade`, `W.editor.role.palisade`,
//!   `W.viewer.role.palisade`) and the user (`NAME.user.palisade`). A token,
//!   when present, wins: it is what the caller chose to present.
//! - **Checked before any handler.** [`Authenticate`] wraps each service:
//!   it resolves the caller (or answers UNAUTHENTICATED) and refuses the
//!   admin-only methods to anyone else (PERMISSION_DENIED), then hands the
//!   [`Caller`] to the handler in the request's extensions. Workspace
//!   checks need the request's body, so the services make them
//!   ([`Caller::require_view`], [`Caller::require_edit`]).
//! - **Nothing disclosed across workspaces.** A by-id reference to a
//!   sandbox of a workspace the caller may not see answers NOT_FOUND,
//!   exactly as if it did not exist.
//! - **`--insecure` turns authentication off**: a plaintext replica cannot
//!   authenticate anyone, so every caller is an admin named `insecure`
//!   (logged loudly at start). Only for local tests.

use std::convert::Infallible;
use std::task::{Context, Poll};

use palisade_lifecycle::State;
use palisade_raft::StateHandle;
use sha2::Digest as _;
use tonic::Code;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::errors;

/// The subject alternative name that makes a client certificate an admin's.
pub const ADMIN_CERTIFICATE_NAME: &str = "admin.role.palisade";
/// Suffix of the role names of client certificates.
pub const ROLE_NAME_SUFFIX: &str = ".role.palisade";
/// Suffix of the user name of client certificates (`NAME.user.palisade`).
pub const USER_NAME_SUFFIX: &str = ".user.palisade";
/// Prefix of every API token.
pub const TOKEN_PREFIX: &str = "ptk1";

/// Reason: no credential at all (no token, no client certificate).
pub const CREDENTIALS_MISSING: &str = "CREDENTIALS_MISSING";
/// Reason: the `authorization` header is not `Bearer ptk1.ID.SECRET`.
pub const TOKEN_MALFORMED: &str = "TOKEN_MALFORMED";
/// Reason: no such token, or its secret does not match.
pub const TOKEN_UNKNOWN: &str = "TOKEN_UNKNOWN";
/// Reason: the token expired.
pub const TOKEN_EXPIRED: &str = "TOKEN_EXPIRED";
/// Reason: the token was revoked.
pub const TOKEN_REVOKED: &str = "TOKEN_REVOKED";
/// Reason: a client certificate of the cluster CA that carries no role.
pub const CERTIFICATE_WITHOUT_ROLE: &str = "CERTIFICATE_WITHOUT_ROLE";
/// Reason: the method needs the admin role.
pub const ADMIN_REQUIRED: &str = "ADMIN_REQUIRED";
/// Reason: the caller has no role in the workspace.
pub const WORKSPACE_NOT_ALLOWED: &str = "WORKSPACE_NOT_ALLOWED";
/// Reason: the caller may read the workspace but not change it.
pub const EDITOR_REQUIRED: &str = "EDITOR_REQUIRED";

/// What a caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    Admin,
    /// Lifecycle writes, SSH sessions and policies in one workspace, and
    /// reads there.
    Editor(String),
    /// Get, list and watch in one workspace.
    Viewer(String),
}

impl Role {
    /// `admin`, `editor` or `viewer`.
    pub fn name(&self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Editor(_) => "editor",
            Role::Viewer(_) => "viewer",
        }
    }

    /// The workspace of an editor or viewer.
    pub fn workspace(&self) -> &str {
        match self {
            Role::Admin => "",
            Role::Editor(workspace) | Role::Viewer(workspace) => workspace,
        }
    }

    /// Parses a role name and its workspace (as stored with a token).
    pub fn parse(role: &str, workspace: &str) -> Option<Role> {
        match role {
            "admin" if workspace.is_empty() => Some(Role::Admin),
            "editor" if !workspace.is_empty() => Some(Role::Editor(workspace.to_string())),
            "viewer" if !workspace.is_empty() => Some(Role::Viewer(workspace.to_string())),
            _ => None,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `token:ID`, `cert:NAME` or `insecure`: what the audit trail records.
    pub principal: String,
    /// Its role.
    pub role: Role,
}

impl Caller {
    /// Every caller of a replica run with `--insecure`.
    pub fn insecure() -> Caller {
        Caller {
            principal: "insecure".to_string(),
            role: Role::Admin,
        }
    }

    /// The caller a handler was given by [`Authenticate`]; a request that
    /// did not pass it (a bug in the server's wiring) is refused.
    pub fn of<T>(request: &tonic::Request<T>) -> Result<Caller, tonic::Status> {
        request
            .extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| {
                errors::status(
                    Code::Unauthenticated,
                    CREDENTIALS_MISSING,
                    "the request was not authenticated",
                    [],
                )
            })
    }

    /// Whether it is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether it may read `workspace`.
    pub fn may_view(&self, workspace: &str) -> bool {
        match &self.role {
            Role::Admin => true,
            Role::Editor(own) | Role::Viewer(own) => own == workspace,
        }
    }

    /// Whether it may change `workspace`.
    pub fn may_edit(&self, workspace: &str) -> bool {
        match &self.role {
            Role::Admin => true,
            Role::Editor(own) => own == workspace,
            Role::Viewer(_) => false,
        }
    }

    /// PERMISSION_DENIED unless an admin.
    pub fn require_admin(&self, what: &str) -> Result<(), tonic::Status> {
        if self.is_admin() {
            return Ok(());
        }
        Err(denied(
            ADMIN_REQUIRED,
            format!(
                "{what} needs the admin role; {} is {}",
                self.principal,
                self.describe_role()
            ),
        ))
    }

    /// PERMISSION_DENIED unless it may read `workspace`.
    pub fn require_view(&self, workspace: &str) -> Result<(), tonic::Status> {
        if self.may_view(workspace) {
            return Ok(());
        }
        Err(denied(
            WORKSPACE_NOT_ALLOWED,
            format!(
                "{} ({}) has no role in workspace {workspace:?}",
                self.principal,
                self.describe_role()
            ),
        ))
    }

    /// PERMISSION_DENIED unless it may change `workspace`.
    pub fn require_edit(&self, workspace: &str) -> Result<(), tonic::Status> {
        if self.may_edit(workspace) {
            return Ok(());
        }
        if self.may_view(workspace) {
            return Err(denied(
                EDITOR_REQUIRED,
                format!(
                    "{} may only read workspace {workspace:?} (viewer); changing it needs the editor role",
                    self.principal
                ),
            ));
        }
        self.require_view(workspace)
    }

    fn describe_role(&self) -> String {
        match &self.role {
            Role::Admin => "admin".to_string(),
            Role::Editor(workspace) => format!("editor of {workspace:?}"),
            Role::Viewer(workspace) => format!("viewer of {workspace:?}"),
        }
    }
}

fn denied(reason: &str, message: String) -> tonic::Status {
    errors::status(Code::PermissionDenied, reason, message, [])
}

fn unauthenticated(reason: &str, message: impl Into<String>) -> tonic::Status {
    errors::status(Code::Unauthenticated, reason, message, [])
}

tokio::task_local! {
    /// The caller a request handler runs for: [`attribute`] reads it when
    /// the handler proposes.
    static CALLER: Caller;
}

/// Runs a handler as `caller`: every command it proposes is attributed to
/// it ([`attribute`]).
pub async fn as_caller<F: std::future::Future>(caller: Caller, handler: F) -> F::Output {
    CALLER.scope(caller, handler).await
}

/// `command` wrapped with the caller of the running handler
/// ([`Command::Attributed`](palisade_lifecycle::Command::Attributed)), for
/// the audit trail; leader-internal commands and commands proposed outside
/// a handler stay as they are.
pub fn attribute(command: palisade_lifecycle::Command) -> palisade_lifecycle::Command {
    use palisade_lifecycle::{Attribution, Command};
    if matches!(command, Command::Attributed { .. }) || !command.is_client_proposable() {
        return command;
    }
    match CALLER.try_with(|caller| caller.clone()) {
        Ok(caller) => Command::Attributed {
            by: Attribution {
                principal: caller.principal,
                role: caller.role.name().to_string(),
            },
            command: Box::new(command),
        },
        Err(_) => command,
    }
}

/// Hex SHA-256 of a token's secret, as the state keeps it.
pub fn secret_sha256(secret: &str) -> String {
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

/// A new token: (id, secret, the whole bearer token). 128 bits of id-space
/// randomness for the id, 256 bits for the secret.
pub fn new_token() -> (String, String, String) {
    use rand::RngCore as _;
    let mut id = [0_u8; 8];
    let mut secret = [0_u8; 32];
    rand::rng().fill_bytes(&mut id);
    rand::rng().fill_bytes(&mut secret);
    let (id, secret) = (hex::encode(id), hex::encode(secret));
    let token = format!("{TOKEN_PREFIX}.{id}.{secret}");
    (id, secret, token)
}

/// Resolves a bearer token against the state; `now_ms` is this replica's
/// clock (expiry is a point in time, and the replicated clock follows the
/// leader's).
pub fn authenticate_token(
    state: &State,
    token: &str,
    now_ms: i64,
) -> Result<Caller, tonic::Status> {
    let mut parts = token.split('.');
    let (Some(TOKEN_PREFIX), Some(id), Some(secret), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(unauthenticated(
            TOKEN_MALFORMED,
            "the bearer token is not a Palisade API token (ptk1.ID.SECRET)",
        ));
    };
    let stored = state
        .api_tokens
        .get(id)
        .ok_or_else(|| unauthenticated(TOKEN_UNKNOWN, "unknown API token; ask an admin for one"))?;
    // Both are hex SHA-256 digests of equal length; the comparison leaks
    // nothing useful about the secret.
    if stored.secret_sha256 != secret_sha256(secret) {
        return Err(unauthenticated(
            TOKEN_UNKNOWN,
            "unknown API token; ask an admin for one",
        ));
    }
    if stored.revoked {
        return Err(unauthenticated(
            TOKEN_REVOKED,
            format!("API token {id} was revoked"),
        ));
    }
    if stored.expires_at_ms != 0 && now_ms >= stored.expires_at_ms {
        return Err(unauthenticated(
            TOKEN_EXPIRED,
            format!("API token {id} expired"),
        ));
    }
    let role = Role::parse(&stored.role, &stored.workspace).ok_or_else(|| {
        unauthenticated(TOKEN_UNKNOWN, format!("API token {id} has no valid role"))
    })?;
    Ok(Caller {
        principal: format!("token:{id}"),
        role,
    })
}

/// Resolves a client certificate (DER, already verified against the
/// cluster CA by TLS) to its caller.
pub fn authenticate_certificate(der: &[u8]) -> Result<Caller, tonic::Status> {
    let names = palisade_raft::tls::dns_names_of_certificate(der)
        .map_err(|problem| unauthenticated(CERTIFICATE_WITHOUT_ROLE, problem))?;
    let user = names
        .iter()
        .find_map(|name| name.strip_suffix(USER_NAME_SUFFIX))
        .map(str::to_string);
    let role = names.iter().find_map(|name| {
        if name == ADMIN_CERTIFICATE_NAME {
            return Some(Role::Admin);
        }
        let scoped = name.strip_suffix(ROLE_NAME_SUFFIX)?;
        let (workspace, role) = scoped.rsplit_once('.')?;
        Role::parse(role, workspace)
    });
    let Some(role) = role else {
        return Err(unauthenticated(
            CERTIFICATE_WITHOUT_ROLE,
            "the client certificate carries no Palisade role (admin.role.palisade, \
             W.editor.role.palisade or W.viewer.role.palisade); use a user's certificate or a token",
        ));
    };
    let user = user.unwrap_or_else(|| names.first().cloned().unwrap_or_default());
    Ok(Caller {
        principal: format!("cert:{user}"),
        role,
    })
}

/// The methods only an admin may call, by gRPC method path.
fn admin_only(path: &str) -> bool {
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
        return true;
    };
    match service {
        "palisade.v1.ClusterAdmin" => method != "WhoAmI",
        "palisade.v1.Palisade" => matches!(method, "CreateWorkspace" | "DeleteWorkspace"),
        _ => false,
    }
}

/// How [`Authenticate`] finds callers.
#[derive(Clone)]
pub enum Authenticator {
    /// TLS: tokens against the state, certificates by their role names.
    Verify(StateHandle),
    /// `--insecure`: everyone is [`Caller::insecure`].
    Insecure,
}

impl Authenticator {
    fn caller(&self, request: &http::Request<tonic::body::Body>) -> Result<Caller, tonic::Status> {
        let state = match self {
            Authenticator::Insecure => return Ok(Caller::insecure()),
            Authenticator::Verify(state) => state,
        };
        if let Some(header) = request.headers().get(http::header::AUTHORIZATION) {
            let token = header
                .to_str()
                .ok()
                .and_then(|value| value.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    unauthenticated(
                        TOKEN_MALFORMED,
                        "the authorization header must be `Bearer TOKEN`",
                    )
                })?;
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| {
                    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
                });
            return state.read(|applied| authenticate_token(&applied.state, token.trim(), now_ms));
        }
        let certificate = request
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(TlsConnectInfo::peer_certs)
            .and_then(|certificates| certificates.first().map(|der| der.as_ref().to_vec()));
        match certificate {
            Some(der) => authenticate_certificate(&der),
            None => Err(unauthenticated(
                CREDENTIALS_MISSING,
                "no credential: present an API token (--token / PALISADE_TOKEN) or a client \
                 certificate of the cluster CA",
            )),
        }
    }
}

/// Wraps a service so that every request is authenticated (see the module
/// doc) and admin-only methods are refused to others.
pub fn authenticate<S>(inner: S, authenticator: Authenticator) -> Authenticate<S> {
    Authenticate {
        inner,
        authenticator,
    }
}

/// A service behind [`authenticate`].
#[derive(Clone)]
pub struct Authenticate<S> {
    inner: S,
    authenticator: Authenticator,
}

impl<S: NamedService> NamedService for Authenticate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for Authenticate<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Send,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let caller = self.authenticator.caller(&request).and_then(|caller| {
            if admin_only(request.uri().path()) {
                let method = request.uri().path().rsplit('/').next().unwrap_or_default();
                caller.require_admin(method)?;
            }
            Ok(caller)
        });
        match caller {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Box::pin(self.inner.call(request))
            }
            Err(refusal) => Box::pin(async move { Ok(refusal.into_http()) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(token: palisade_lifecycle::ApiToken) -> State {
        let mut state = State::new();
        state.api_tokens.insert(token.id.clone(), token);
        state
    }

    fn stored(id: &str, secret: &str) -> palisade_lifecycle::ApiToken {
        palisade_lifecycle::ApiToken {
            id: id.to_string(),
            secret_sha256: secret_sha256(secret),
            role: "viewer".to_string(),
            workspace: "team".to_string(),
            created_by: "cert:admin".to_string(),
            created_at_ms: 0,
            expires_at_ms: 1_000,
            revoked: false,
        }
    }

    fn reason(result: Result<Caller, tonic::Status>) -> String {
        errors::reason_of(&result.expect_err("refused")).unwrap_or_default()
    }

    #[test]
    fn tokens_are_checked_for_form_secret_expiry_and_revocation() {
        let state = state_with(stored("abc", "s3cret"));
        let caller = authenticate_token(&state, "ptk1.abc.s3cret", 999).expect("valid");
        assert_eq!(caller.principal, "token:abc");
        assert_eq!(caller.role, Role::Viewer("team".into()));
        assert_eq!(
            reason(authenticate_token(&state, "abc.s3cret", 0)),
            TOKEN_MALFORMED
        );
        assert_eq!(
            reason(authenticate_token(&state, "ptk1.abc.wrong", 0)),
            TOKEN_UNKNOWN
        );
        assert_eq!(
            reason(authenticate_token(&state, "ptk1.zzz.s3cret", 0)),
            TOKEN_UNKNOWN
        );
        assert_eq!(
            reason(authenticate_token(&state, "ptk1.abc.s3cret", 1_000)),
            TOKEN_EXPIRED
        );
        let mut revoked = stored("abc", "s3cret");
        revoked.revoked = true;
        let state = state_with(revoked);
        assert_eq!(
            reason(authenticate_token(&state, "ptk1.abc.s3cret", 0)),
            TOKEN_REVOKED
        );
    }

    #[test]
    fn roles_reach_only_their_workspace() {
        let viewer = Caller {
            principal: "token:v".into(),
            role: Role::Viewer("team".into()),
        };
        assert!(viewer.require_view("team").is_ok());
        assert!(viewer.require_edit("team").is_err());
        assert!(viewer.require_view("other").is_err());
        let editor = Caller {
            principal: "token:e".into(),
            role: Role::Editor("team".into()),
        };
        assert!(editor.require_edit("team").is_ok());
        assert!(editor.require_edit("other").is_err());
        assert!(editor.require_admin("AddLearner").is_err());
        assert!(Caller::insecure().require_admin("AddLearner").is_ok());
        assert!(admin_only("/palisade.v1.ClusterAdmin/AddLearner"));
        assert!(admin_only("/palisade.v1.ClusterAdmin/RotateTokenKey"));
        assert!(!admin_only("/palisade.v1.ClusterAdmin/WhoAmI"));
        assert!(admin_only("/palisade.v1.Palisade/CreateWorkspace"));
        assert!(!admin_only("/palisade.v1.Palisade/GetSandbox"));
    }
}
