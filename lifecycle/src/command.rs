//! What can be proposed to the log.
//!
//! A client request becomes a `Begin*` command (decided at apply); the
//! leader's effect executor later proposes the matching `Complete*` command
//! once the driver confirmed the effect. Everything non-deterministic (ids,
//! times) is chosen by the proposer and carried here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::state::SandboxSpec;

/// How a command names a sandbox. Resolved at apply, in log order, so a name
/// means whatever it names when the entry is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxTarget {
    /// By name in a workspace.
    Name {
        /// Workspace name.
        workspace: String,
        /// Sandbox name.
        name: String,
    },
    /// By id; never resolves to a same-name replacement.
    Id(String),
}

/// A client request's identity, carried by every `Begin*` command so that a
/// retry (same id, same payload) replays the original result exactly once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// Chosen by the client (or by the gateway when the client gave none).
    pub id: String,
    /// Digest of the request payload, computed at the API edge.
    pub payload_digest: String,
    /// Proposer's clock, for the audit trail only: apply stamps times from
    /// the replicated clock ([`State::clock_ms`](crate::State::clock_ms)).
    pub time_ms: i64,
}

/// One execution of one sandbox: what an execution token attests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRef {
    /// Sandbox id.
    pub sandbox_id: String,
    /// Execution generation.
    pub generation: u64,
    /// Id of the token key that verified the token where the request came
    /// in. Apply refuses the command (`UNVERIFIABLE_EXECUTION_TOKEN`) if
    /// that key no longer verifies on the replicated clock at apply (rotated
    /// out, or its grace ended), so a replica that verified against a state
    /// a little behind cannot stretch a key's deadline. `None` (commands
    /// written before key rotation existed): not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<u64>,
}

/// Result of a launch, as reported by the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchResult {
    /// The execution runs.
    Running {
        /// Driver handle (e.g. "pid=42 start=9001").
        handle: String,
        /// Driver name.
        driver: String,
    },
    /// The driver refused the launch and certainly started nothing.
    Failed {
        /// Why.
        message: String,
    },
}

/// A lifecycle command, as written into the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create a workspace.
    CreateWorkspace {
        /// UUID chosen by the proposer.
        id: String,
        /// DNS-1123 label.
        name: String,
        /// Proposer's clock, for the audit trail only (not used by apply).
        time_ms: i64,
    },
    /// Delete an empty workspace.
    DeleteWorkspace {
        /// Workspace name.
        name: String,
    },
    /// Create a sandbox and begin launching generation 1.
    BeginCreate {
        /// UUID chosen by the proposer: the sandbox's identity from the
        /// moment the entry exists.
        id: String,
        /// Workspace name.
        workspace: String,
        /// Sandbox name.
        name: String,
        /// What runs.
        spec: SandboxSpec,
        /// Labels.
        labels: BTreeMap<String, String>,
        /// Annotations.
        annotations: BTreeMap<String, String>,
        /// Proposer's clock, for the audit trail only (not used by apply).
        time_ms: i64,
        /// The persistent SSH host identity, chosen by the proposer.
        host_identity: String,
        /// The request.
        request: RequestMeta,
    },
    /// Begin stopping the current execution.
    BeginStop {
        /// Which sandbox.
        target: SandboxTarget,
        /// Only if this is still the current execution.
        expected_execution: Option<ExecutionRef>,
        /// The request.
        request: RequestMeta,
    },
    /// Begin launching a new execution.
    BeginStart {
        /// Which sandbox.
        target: SandboxTarget,
        /// Only if this is still the current (stopped) execution.
        expected_execution: Option<ExecutionRef>,
        /// The request.
        request: RequestMeta,
    },
    /// Begin deleting a sandbox.
    BeginDelete {
        /// Which sandbox.
        target: SandboxTarget,
        /// Only if the target (a name) still resolves to this id.
        expected_sandbox_id: Option<String>,
        /// Only if this is still the current execution.
        expected_execution: Option<ExecutionRef>,
        /// The request.
        request: RequestMeta,
    },
    /// Open an SSH session on a READY sandbox.
    CreateSshSession {
        /// Which sandbox.
        target: SandboxTarget,
        /// Session id chosen by the proposer.
        session_id: String,
        /// Hex SHA-256 of the token (the token itself never enters the log).
        token_sha256: String,
        /// The proposer's estimate of the expiry, for the audit trail; apply
        /// uses it only for entries written before `ttl_ms` existed
        /// (`ttl_ms` 0).
        expires_at_ms: i64,
        /// Proposer's clock, for the audit trail only (not used by apply).
        time_ms: i64,
        /// How long the session lives: it expires at the replicated clock at
        /// apply plus this.
        #[serde(default)]
        ttl_ms: i64,
    },
    /// Revoke one SSH session.
    RevokeSshSession {
        /// Which sandbox.
        target: SandboxTarget,
        /// The session.
        session_id: String,
    },
    /// Set a sandbox's policy (version + 1).
    SetSandboxPolicy {
        /// Which sandbox.
        target: SandboxTarget,
        /// The document.
        document: String,
        /// Only if the current version is this one (0: no policy yet).
        expected_version: Option<u64>,
        /// Proposer's clock, for the audit trail only (not used by apply).
        time_ms: i64,
    },
    /// Create an API token (an admin's request). The secret never enters
    /// the log, only its hash.
    CreateApiToken {
        /// Public id chosen by the proposer.
        id: String,
        /// Hex SHA-256 of the secret.
        secret_sha256: String,
        /// `admin`, `editor` or `viewer`.
        role: String,
        /// Workspace of an editor or viewer; empty for an admin.
        workspace: String,
        /// Lifetime from the replicated clock at apply; 0: never expires.
        ttl_ms: i64,
        /// The caller who asked (audit).
        created_by: String,
    },
    /// Revoke an API token (kept, marked revoked).
    RevokeApiToken {
        /// The token's id.
        id: String,
    },
    /// A client's command with who asked for it (the audit trail): applied
    /// exactly as `command`. Only client-proposable commands are wrapped,
    /// once.
    Attributed {
        /// The authenticated caller.
        by: Attribution,
        /// The command.
        command: Box<Command>,
    },
    /// Record the cluster's identity (once; later ones are ignored).
    InitializeCluster {
        /// Random cluster id.
        cluster_id: String,
        /// Hex of a random 32-byte secret.
        token_secret_hex: String,
        /// The proposing leader's compute driver identity.
        #[serde(default)]
        driver_identity: String,
    },
    /// Replace the execution-token key: new tokens are minted with
    /// `token_secret_hex` (id: the current id plus one); the replaced key
    /// keeps verifying the tokens it signed until the replicated clock
    /// reaches its deadline, the clock at apply plus `grace_ms` (0: it
    /// stops verifying at once). Leader-internal: the leader draws the key
    /// (apply has no randomness) when an admin asks (`ClusterAdmin.
    /// RotateTokenKey`, relayed to the leader by a follower), and a peer
    /// can never forward one (it would choose the cluster's key).
    RotateTokenKey {
        /// Hex of a random 32-byte key, drawn by the proposing leader.
        token_secret_hex: String,
        /// How long the replaced key still verifies, from apply; at most
        /// [`TOKEN_KEY_GRACE_MS_MAX`](crate::limits::TOKEN_KEY_GRACE_MS_MAX).
        grace_ms: i64,
    },
    /// Records the compute driver identity of a cluster initialized before
    /// identities were recorded; ignored once one is recorded.
    AdoptDriverIdentity {
        /// The proposing leader's compute driver identity.
        driver_identity: String,
    },
    /// The leader's clock, brought into the state: moves the replicated
    /// clock towards it (never back, by at most
    /// [`TICK_STEP_MS_MAX`](crate::limits::TICK_STEP_MS_MAX)), then expires
    /// settled receipts older than the retention and SSH sessions past their
    /// expiry.
    Tick {
        /// Leader's clock.
        now_ms: i64,
        /// The proposing leader's retention flag, for the audit trail only:
        /// apply uses the replicated configuration
        /// ([`State::receipt_retention_ms`](crate::State::receipt_retention_ms)).
        #[serde(default)]
        receipt_retention_ms: i64,
    },
    /// Sets the replicated receipt retention, clamped at apply to
    /// [`RECEIPT_RETENTION_MS_MIN`](crate::limits::RECEIPT_RETENTION_MS_MIN)..=
    /// [`RECEIPT_RETENTION_MS_MAX`](crate::limits::RECEIPT_RETENTION_MS_MAX).
    /// A leader proposes it when its configured retention differs from the
    /// state's.
    ConfigureReceiptRetention {
        /// How long a settled receipt is kept, from its settlement.
        retention_ms: i64,
    },
    /// Sets the replicated per-workspace quotas
    /// ([`Quotas`](crate::Quotas)); 0 means the default, values above
    /// [`QUOTA_VALUE_MAX`](crate::limits::QUOTA_VALUE_MAX) are lowered to
    /// it. A leader proposes it when its configured quotas differ from the
    /// state's. Lowering a quota removes nothing: it refuses new records
    /// until the workspace is below it again.
    ConfigureQuotas {
        /// Most request receipts per workspace.
        receipts_per_workspace: u64,
        /// Most sandboxes per workspace.
        sandboxes_per_workspace: u64,
        /// Most SSH sessions plus policies per workspace.
        owned_records_per_workspace: u64,
    },
    /// Raises the cluster feature level ([`crate::feature`]) to `level`;
    /// a level at or below the current one changes nothing (the level
    /// never goes down). Leader-internal: the leader proposes it once every
    /// voter reports that its build supports `level`. Needs feature level 2
    /// itself: a release before feature levels cannot decode it.
    RaiseFeatureLevel {
        /// The new level.
        level: u32,
    },
    /// The driver finished launching `generation`.
    CompleteLaunch {
        /// Sandbox id.
        sandbox_id: String,
        /// The operation this completes, and the term it is proposed in.
        #[serde(default)]
        of: CompletionOf,
        /// The generation that was launched.
        generation: u64,
        /// Running or failed.
        result: LaunchResult,
    },
    /// The driver confirmed `generation` no longer runs.
    CompleteStop {
        /// Sandbox id.
        sandbox_id: String,
        /// The operation this completes, and the term it is proposed in.
        #[serde(default)]
        of: CompletionOf,
        /// The generation that was stopped.
        generation: u64,
        /// Its exit status, if the driver saw one.
        exit_code: Option<i32>,
    },
    /// The driver confirmed every execution of the sandbox is gone: remove
    /// the sandbox and its name in this one entry.
    CompleteDelete {
        /// Sandbox id.
        sandbox_id: String,
        /// The operation this completes, and the term it is proposed in.
        #[serde(default)]
        of: CompletionOf,
    },
    /// The driver lost `generation`: it no longer runs and left no exit
    /// status (its supervisor was killed, the host rebooted).
    ObserveLost {
        /// Sandbox id.
        sandbox_id: String,
        /// The sandbox as it was observed, and the term it is proposed in.
        #[serde(default)]
        of: CompletionOf,
        /// The generation that was lost.
        generation: u64,
    },
    /// The driver saw `generation` exit on its own.
    ObserveExit {
        /// Sandbox id.
        sandbox_id: String,
        /// The sandbox as it was observed, and the term it is proposed in.
        #[serde(default)]
        of: CompletionOf,
        /// The generation that exited.
        generation: u64,
        /// Its exit status.
        exit_code: i32,
    },
}

/// Who asked for a command: the caller the API edge authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    /// `token:ID`, `cert:NAME`, or `insecure` (a replica run plaintext).
    pub principal: String,
    /// `admin`, `editor` or `viewer`.
    pub role: String,
}

/// What a completion or an observation is bound to, so apply can refuse one
/// that is not about the sandbox as it is now (DESIGN.md section 6:
/// "completions carry the operation they complete; apply refuses any
/// other").
///
/// - `operation_index`: for `Complete*`, the log index of the entry that
///   began the pending operation (`Operation::begun_at_index`); for
///   `Observe*`, the sandbox's `resource_version` when the execution was
///   observed, so an observation made before the sandbox changed is ignored.
/// - `term`: the term of the leader whose executor performed the effect and
///   proposes this (the term of its driver fence). Recorded for the audit
///   trail; the term fence itself is `write(..).with_leader(term)` and the
///   driver's fence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionOf {
    /// See the type's doc.
    pub operation_index: u64,
    /// See the type's doc.
    pub term: u64,
}

impl CompletionOf {
    /// Not bound to anything: what an entry written before completions were
    /// bound decodes to. Apply ignores it (the executor then completes the
    /// operation again, bound).
    pub const UNBOUND: CompletionOf = CompletionOf {
        operation_index: 0,
        term: 0,
    };

    /// Binds a completion to `sandbox`'s pending operation (unbound if none),
    /// proposed in `term`.
    pub fn pending(sandbox: &crate::Sandbox, term: u64) -> CompletionOf {
        CompletionOf {
            operation_index: sandbox
                .operation
                .as_ref()
                .map_or(0, |operation| operation.begun_at_index),
            term,
        }
    }

    /// Binds an observation to `sandbox` as it is now, proposed in `term`.
    pub fn observed(sandbox: &crate::Sandbox, term: u64) -> CompletionOf {
        CompletionOf {
            operation_index: sandbox.resource_version,
            term,
        }
    }
}

impl Command {
    /// This command with an unbound completion or observation bound to its
    /// sandbox in `state` as it is now ([`CompletionOf::pending`] /
    /// [`CompletionOf::observed`]), proposed in `term`; any other command as
    /// it is. For scripted tests and tools that play the executor's part;
    /// the executor itself binds to the state it read *before* the effect.
    pub fn bound_to(mut self, state: &crate::State, term: u64) -> Command {
        match &mut self {
            Command::CompleteLaunch { sandbox_id, of, .. }
            | Command::CompleteStop { sandbox_id, of, .. }
            | Command::CompleteDelete { sandbox_id, of } => {
                if *of == CompletionOf::UNBOUND
                    && let Some(sandbox) = state.sandboxes.get(sandbox_id.as_str())
                {
                    *of = CompletionOf::pending(sandbox, term);
                }
            }
            Command::ObserveExit { sandbox_id, of, .. }
            | Command::ObserveLost { sandbox_id, of, .. } => {
                if *of == CompletionOf::UNBOUND
                    && let Some(sandbox) = state.sandboxes.get(sandbox_id.as_str())
                {
                    *of = CompletionOf::observed(sandbox, term);
                }
            }
            _ => {}
        }
        self
    }

    /// The client request a `Begin*` command carries (its id keys the
    /// receipt); `None` for every other command.
    pub fn request(&self) -> Option<&RequestMeta> {
        match self {
            Command::BeginCreate { request, .. }
            | Command::BeginStop { request, .. }
            | Command::BeginStart { request, .. }
            | Command::BeginDelete { request, .. } => Some(request),
            Command::Attributed { command, .. } => command.request(),
            _ => None,
        }
    }

    /// Whether a client request may propose this command, so that a
    /// follower may forward it to the leader over the peer port. Everything
    /// else is leader-internal (completions and observations of the effect
    /// executor, the replicated clock, the cluster's identity and
    /// configuration): only the leader's own executor proposes those, never
    /// through the wire, so the peer service refuses them even from a
    /// member with a valid certificate.
    pub fn is_client_proposable(&self) -> bool {
        match self {
            Command::CreateWorkspace { .. }
            | Command::DeleteWorkspace { .. }
            | Command::BeginCreate { .. }
            | Command::BeginStop { .. }
            | Command::BeginStart { .. }
            | Command::BeginDelete { .. }
            | Command::CreateSshSession { .. }
            | Command::RevokeSshSession { .. }
            | Command::SetSandboxPolicy { .. }
            | Command::CreateApiToken { .. }
            | Command::RevokeApiToken { .. } => true,
            Command::Attributed { command, .. } => {
                !matches!(**command, Command::Attributed { .. }) && command.is_client_proposable()
            }
            Command::InitializeCluster { .. }
            | Command::RotateTokenKey { .. }
            | Command::AdoptDriverIdentity { .. }
            | Command::Tick { .. }
            | Command::ConfigureReceiptRetention { .. }
            | Command::ConfigureQuotas { .. }
            | Command::RaiseFeatureLevel { .. }
            | Command::CompleteLaunch { .. }
            | Command::CompleteStop { .. }
            | Command::CompleteDelete { .. }
            | Command::ObserveLost { .. }
            | Command::ObserveExit { .. } => false,
        }
    }

    /// The command itself and who asked for it, if it is attributed.
    pub fn unattributed(&self) -> (&Command, Option<&Attribution>) {
        match self {
            Command::Attributed { by, command } => (command.as_ref(), Some(by)),
            other => (other, None),
        }
    }

    /// Short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::CreateWorkspace { .. } => "CreateWorkspace",
            Command::DeleteWorkspace { .. } => "DeleteWorkspace",
            Command::BeginCreate { .. } => "BeginCreate",
            Command::BeginStop { .. } => "BeginStop",
            Command::BeginStart { .. } => "BeginStart",
            Command::BeginDelete { .. } => "BeginDelete",
            Command::CompleteLaunch { .. } => "CompleteLaunch",
            Command::CompleteStop { .. } => "CompleteStop",
            Command::CompleteDelete { .. } => "CompleteDelete",
            Command::ObserveExit { .. } => "ObserveExit",
            Command::ObserveLost { .. } => "ObserveLost",
            Command::CreateSshSession { .. } => "CreateSshSession",
            Command::RevokeSshSession { .. } => "RevokeSshSession",
            Command::SetSandboxPolicy { .. } => "SetSandboxPolicy",
            Command::Attributed { command, .. } => command.name(),
            Command::CreateApiToken { .. } => "CreateApiToken",
            Command::RevokeApiToken { .. } => "RevokeApiToken",
            Command::InitializeCluster { .. } => "InitializeCluster",
            Command::RotateTokenKey { .. } => "RotateTokenKey",
            Command::AdoptDriverIdentity { .. } => "AdoptDriverIdentity",
            Command::Tick { .. } => "Tick",
            Command::ConfigureReceiptRetention { .. } => "ConfigureReceiptRetention",
            Command::ConfigureQuotas { .. } => "ConfigureQuotas",
            Command::RaiseFeatureLevel { .. } => "RaiseFeatureLevel",
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
