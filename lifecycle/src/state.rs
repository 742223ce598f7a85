//! The replicated state: workspaces, sandboxes, their executions and the
//! operation in flight on each.
//!
//! Maps are `BTreeMap`s so that iteration order, snapshots and list pages are
//! the same on every replica.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::StringMap;

/// The workspace every cluster starts with; it cannot be deleted.
pub const DEFAULT_WORKSPACE: &str = "default";

/// The fixed id of the `default` workspace. It is part of the initial state
/// (not proposed), so it must not depend on anything random.
pub const DEFAULT_WORKSPACE_ID: &str = "00000000-0000-0000-0000-000000000000";

/// Phase of a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkspacePhase {
    /// Accepts new sandboxes.
    Active,
    /// Being deleted: no new sandboxes.
    Terminating,
}

/// A named group of sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    /// Chosen by the proposer (a UUID).
    pub id: String,
    /// Unique DNS-1123 label.
    pub name: String,
    /// Active or terminating.
    pub phase: WorkspacePhase,
    /// Log index of the entry that last changed it.
    pub resource_version: u64,
    /// Proposer's clock when it was created.
    pub created_at_ms: i64,
}

/// What happens when a sandbox's command exits on its own (or its execution
/// is lost): a new execution replaces it, with the next generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    /// Never relaunch: the sandbox settles in COMPLETED or ERROR.
    #[default]
    Never,
    /// Relaunch after a non-zero exit or a lost execution.
    OnFailure,
    /// Relaunch after every exit.
    Always,
}

/// What runs in a sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// argv; empty means the driver's long-running idle command.
    pub command: Vec<String>,
    /// Environment of the command.
    pub env: BTreeMap<String, String>,
    /// Container image, for drivers that use one.
    pub image: String,
    /// Driver-specific settings.
    pub driver_config: BTreeMap<String, String>,
    /// CPU limit in thousandths of a CPU (0: no limit), for drivers with limits.
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory limit in bytes (0: no limit), for drivers with limits.
    #[serde(default)]
    pub memory_bytes: u64,
    /// Working directory of the command (empty: the driver's default), for
    /// drivers that run images.
    #[serde(default)]
    pub workdir: String,
    /// Whether exits are followed by a replacement execution.
    #[serde(default)]
    pub restart_policy: RestartPolicy,
}

/// Phase of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SandboxPhase {
    /// Created; its first execution is being launched.
    Provisioning,
    /// Its current execution runs.
    Ready,
    /// Its current execution is being stopped.
    Stopping,
    /// Stopped on request; nothing runs.
    Stopped,
    /// A new execution is being launched.
    Starting,
    /// Being deleted.
    Deleting,
    /// Launch failed, or the command exited non-zero.
    Error,
    /// The command exited with status 0.
    Completed,
    /// The driver cannot tell.
    Unknown,
}

impl SandboxPhase {
    /// Every phase, for tests and filters.
    pub const ALL: [SandboxPhase; 9] = [
        SandboxPhase::Provisioning,
        SandboxPhase::Ready,
        SandboxPhase::Stopping,
        SandboxPhase::Stopped,
        SandboxPhase::Starting,
        SandboxPhase::Deleting,
        SandboxPhase::Error,
        SandboxPhase::Completed,
        SandboxPhase::Unknown,
    ];

    /// Upper-case name as shown to users (`READY`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxPhase::Provisioning => "PROVISIONING",
            SandboxPhase::Ready => "READY",
            SandboxPhase::Stopping => "STOPPING",
            SandboxPhase::Stopped => "STOPPED",
            SandboxPhase::Starting => "STARTING",
            SandboxPhase::Deleting => "DELETING",
            SandboxPhase::Error => "ERROR",
            SandboxPhase::Completed => "COMPLETED",
            SandboxPhase::Unknown => "UNKNOWN",
        }
    }

    /// True when nothing of the sandbox runs and no operation is in flight,
    /// so a new execution may be started.
    pub fn is_at_rest(self) -> bool {
        matches!(
            self,
            SandboxPhase::Stopped | SandboxPhase::Completed | SandboxPhase::Error
        )
    }
}

/// One run of a sandbox's compute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    /// Grows on every launch; never changes otherwise.
    pub generation: u64,
    /// Driver handle once the launch is confirmed (e.g. "pid=42 start=9001").
    pub handle: Option<String>,
    /// Driver that runs it.
    pub driver: Option<String>,
    /// Exit status once it ended on its own or was stopped.
    pub exit_code: Option<i32>,
}

/// An open SSH session: an owned record of its sandbox. Only the SHA-256 of
/// its token is kept; the token itself is shown once, to the caller that
/// created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshSession {
    /// Session id (chosen by the proposer).
    pub id: String,
    /// The sandbox it belongs to.
    pub sandbox_id: String,
    /// Hex SHA-256 of the session token.
    pub token_sha256: String,
    /// The replicated clock ([`State::clock_ms`]) when it was created.
    pub created_at_ms: i64,
    /// When it stops being valid on the replicated clock: creation plus the
    /// session's TTL (removed by the first tick at or after it).
    pub expires_at_ms: i64,
}

/// A sandbox's policy: an owned record, versioned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Grows by one on every change, starting at 1.
    pub version: u64,
    /// The policy document (opaque to Palisade).
    pub document: String,
    /// The replicated clock ([`State::clock_ms`]) at the last change.
    pub updated_at_ms: i64,
}

/// The cluster's identity, chosen once by the first leader: the secret
/// execution tokens are signed with. Lives in the replicated state (so
/// every replica verifies tokens, and it survives snapshots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdentity {
    /// Random cluster id.
    pub cluster_id: String,
    /// Hex of the 32-byte token secret.
    pub token_secret_hex: String,
    /// What execution tokens are bound to besides the secret: empty means
    /// `cluster_id` (every cluster founded from scratch). A cluster restored
    /// from a backup with its token key kept gets a new `cluster_id` but
    /// keeps the source's domain ([`CarriedTokenKey`]), so the tokens its
    /// clients hold still verify. Not serialized when empty, so states
    /// written before it existed encode (and digest) exactly as before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_domain: String,
    /// The identity of the compute driver's authority the cluster runs
    /// executions on (`ComputeDriver::identity`): a leader whose driver has
    /// another identity (another host's process driver) must not act on
    /// them. Empty until a leader records it.
    #[serde(default)]
    pub driver_identity: String,
    /// Id of the key in `token_secret_hex`: 1 for the key the first leader
    /// chose, one more at each rotation. Only ids are ever shown.
    #[serde(default = "first_token_key_id")]
    pub token_key_id: u64,
    /// Keys replaced by `RotateTokenKey` that still verify the tokens they
    /// signed until their deadline (oldest first; at most
    /// [`RETIRED_TOKEN_KEYS_COUNT_MAX`](crate::limits::RETIRED_TOKEN_KEYS_COUNT_MAX)).
    /// New tokens are always minted with the current key.
    #[serde(default)]
    pub retired_token_keys: Vec<RetiredTokenKey>,
}

fn first_token_key_id() -> u64 {
    1
}

impl ClusterIdentity {
    /// The keys a token may be verified with when the replicated clock
    /// reads `clock_ms`: the current key, then each retired key whose
    /// deadline is still ahead (`clock_ms < valid_until_ms`).
    pub fn verifying_keys(&self, clock_ms: i64) -> impl Iterator<Item = (u64, &str)> {
        std::iter::once((self.token_key_id, self.token_secret_hex.as_str())).chain(
            self.retired_token_keys
                .iter()
                .rev()
                .filter(move |key| clock_ms < key.valid_until_ms)
                .map(|key| (key.key_id, key.secret_hex.as_str())),
        )
    }
}

/// An execution-token key replaced by a rotation, kept until its deadline
/// so that the tokens it signed keep verifying for a stated grace.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredTokenKey {
    /// The key's id ([`ClusterIdentity::token_key_id`] while it was current).
    pub key_id: u64,
    /// Hex of the key (secret: never shown, blanked in the projection).
    pub secret_hex: String,
    /// The replicated clock ([`State::clock_ms`]) from which tokens it
    /// signed are refused; the first tick at or after it removes the key.
    pub valid_until_ms: i64,
}

/// Never prints the key itself (a state dump in a log must not leak it).
impl std::fmt::Debug for RetiredTokenKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RetiredTokenKey")
            .field("key_id", &self.key_id)
            .field("secret_hex", &"<redacted>")
            .field("valid_until_ms", &self.valid_until_ms)
            .finish()
    }
}

impl ClusterIdentity {
    /// The domain execution tokens are bound to: [`ClusterIdentity::token_domain`],
    /// or the cluster id when it is empty.
    pub fn token_domain(&self) -> &str {
        if self.token_domain.is_empty() {
            &self.cluster_id
        } else {
            &self.token_domain
        }
    }
}

/// The execution-token key of a restored backup, waiting for the restored
/// cluster's first leader: `palisade cluster restore` clears the source's
/// [`ClusterIdentity`] (the new cluster gets a new id, chosen by its first
/// leader like any cluster's) and, unless told to rotate the key, keeps the
/// key here; the `InitializeCluster` that chooses the new id takes this key
/// instead of the proposed random one. Lives only between a restore and
/// that first entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedTokenKey {
    /// Hex of the 32-byte token secret of the source cluster.
    pub token_secret_hex: String,
    /// The domain the source's tokens are bound to
    /// ([`ClusterIdentity::token_domain`] of the source).
    pub token_domain: String,
}

pub use crate::receipts::{
    MemoryReceipts, Receipt, ReceiptResult, ReceiptRpc, ReceiptStore, Receipts, StoredReceipt,
};

/// Kind of a lifecycle operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationKind {
    /// Launch of the first execution.
    Create,
    /// Stop of the current execution.
    Stop,
    /// Launch of a new execution.
    Start,
    /// Removal of every execution, then of the sandbox.
    Delete,
}

/// A lifecycle operation in flight: at most one per sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// What is being done.
    pub kind: OperationKind,
    /// The execution generation it targets.
    pub generation: u64,
    /// Log index of the entry that began it.
    pub begun_at_index: u64,
    /// Request ids waiting on it; their receipts settle when it ends.
    #[serde(default)]
    pub request_ids: Vec<String>,
}

/// A sandbox: identity, spec, status and the operation in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    /// UUID chosen by the proposer and written into the log before any
    /// compute exists.
    pub id: String,
    /// Unique within the workspace.
    pub name: String,
    /// Name of the workspace.
    pub workspace: String,
    /// User labels (filterable). A [`StringMap`]: encoded as a map, held
    /// as a vector (a million sandboxes, see its module doc).
    pub labels: StringMap,
    /// User annotations (a [`StringMap`] too).
    pub annotations: StringMap,
    /// Log index of the entry that last changed it.
    pub resource_version: u64,
    /// The replicated clock ([`State::clock_ms`]) when it was created.
    pub created_at_ms: i64,
    /// What runs.
    pub spec: SandboxSpec,
    /// Current phase.
    pub phase: SandboxPhase,
    /// Current (or last) execution.
    pub execution: Execution,
    /// Detail of the last failure.
    pub message: Option<String>,
    /// Operation in flight, if any.
    pub operation: Option<Operation>,
    /// The sandbox's persistent SSH host identity, chosen at create; it
    /// survives every execution (runtime replacements included).
    #[serde(default)]
    pub host_identity: String,
    /// How many times the restart policy replaced an execution.
    #[serde(default)]
    pub restart_count: u32,
}

/// The whole replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Workspaces by name.
    pub workspaces: BTreeMap<String, Workspace>,
    /// Sandboxes by id. Boxed: a B-tree node keeps room for 11 values,
    /// and a spare slot then costs a pointer, not a whole sandbox (memory
    /// per sandbox, `lifecycle/tests/state_memory.rs`).
    pub sandboxes: BTreeMap<String, Box<Sandbox>>,
    /// workspace name -> sandbox name -> sandbox id.
    pub names: BTreeMap<String, BTreeMap<String, String>>,
    /// Owned records: sandbox id -> session id -> SSH session. Keyed by
    /// sandbox so the sandbox's removal drops all of them in one step.
    #[serde(default)]
    pub ssh_sessions: BTreeMap<String, BTreeMap<String, SshSession>>,
    /// Owned records: sandbox id -> policy.
    #[serde(default)]
    pub policies: BTreeMap<String, SandboxPolicy>,
    /// request id -> receipt (compact outcomes, indexed by expiry and
    /// workspace: see [`crate::receipts`]).
    #[serde(default)]
    pub receipts: Receipts,
    /// The cluster's identity, once the first leader chose it.
    #[serde(default)]
    pub cluster: Option<ClusterIdentity>,
    /// A restored backup's token key, kept for the first leader's
    /// `InitializeCluster` ([`CarriedTokenKey`]). Not serialized when
    /// absent (states written before it existed encode as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_token_key: Option<CarriedTokenKey>,
    /// The replicated clock: moved only by `Tick`, never back and by at
    /// most [`TICK_STEP_MS_MAX`](crate::limits::TICK_STEP_MS_MAX) per tick.
    /// Every time in the state is stamped from it at apply.
    #[serde(default)]
    pub clock_ms: i64,
    /// Replicated configuration: how long a settled receipt is kept, set by
    /// `ConfigureReceiptRetention` and clamped at apply to
    /// [`RECEIPT_RETENTION_MS_MIN`](crate::limits::RECEIPT_RETENTION_MS_MIN)..=
    /// [`RECEIPT_RETENTION_MS_MAX`](crate::limits::RECEIPT_RETENTION_MS_MAX).
    /// 0 (never configured) means the minimum: read it through
    /// [`State::receipt_retention_ms`].
    #[serde(default)]
    pub receipt_retention_ms: i64,
    /// Replicated configuration: per-workspace quotas, set by
    /// `ConfigureQuotas`. Absent from states written before quotas existed
    /// (then the defaults apply).
    #[serde(default)]
    pub quotas: Quotas,
    /// API tokens (bearer credentials) by id; only a hash of each secret.
    #[serde(default)]
    pub api_tokens: BTreeMap<String, ApiToken>,
    /// The cluster feature level ([`crate::feature`]): raised by
    /// `RaiseFeatureLevel`, never lowered. Not serialized at the base
    /// level, so a state that never saw a raise encodes (and digests)
    /// exactly as it did before feature levels existed.
    #[serde(
        default = "crate::feature::base",
        skip_serializing_if = "crate::feature::is_base"
    )]
    pub feature_level: u32,
}

/// Per-workspace quotas: replicated configuration (`ConfigureQuotas`,
/// proposed by a leader from its flags), checked at apply. A request that
/// would exceed one is refused with RESOURCE_EXHAUSTED / QUOTA_EXCEEDED
/// naming the quota, changes nothing and leaves no receipt, so it costs
/// the cluster nothing and never blocks another workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quotas {
    /// Most request receipts one workspace holds
    /// (`receipts_per_workspace`).
    pub receipts_per_workspace: u64,
    /// Most sandboxes in one workspace (`sandboxes_per_workspace`).
    pub sandboxes_per_workspace: u64,
    /// Most owned records (SSH sessions and policies) of the sandboxes of
    /// one workspace (`owned_records_per_workspace`).
    pub owned_records_per_workspace: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            receipts_per_workspace: crate::limits::RECEIPTS_PER_WORKSPACE_DEFAULT,
            sandboxes_per_workspace: crate::limits::SANDBOXES_PER_WORKSPACE_DEFAULT,
            owned_records_per_workspace: crate::limits::OWNED_RECORDS_PER_WORKSPACE_DEFAULT,
        }
    }
}

impl Quotas {
    /// The quotas with each value clamped to
    /// 1..=[`QUOTA_VALUE_MAX`](crate::limits::QUOTA_VALUE_MAX) (0 means the default).
    pub fn clamped(self) -> Self {
        let defaults = Quotas::default();
        let clamp = |value: u64, default: u64| {
            if value == 0 {
                default
            } else {
                value.min(crate::limits::QUOTA_VALUE_MAX)
            }
        };
        Quotas {
            receipts_per_workspace: clamp(
                self.receipts_per_workspace,
                defaults.receipts_per_workspace,
            ),
            sandboxes_per_workspace: clamp(
                self.sandboxes_per_workspace,
                defaults.sandboxes_per_workspace,
            ),
            owned_records_per_workspace: clamp(
                self.owned_records_per_workspace,
                defaults.owned_records_per_workspace,
            ),
        }
    }
}

/// A bearer credential of the public API. Only the SHA-256 of its secret
/// is kept; the token itself is shown once, to the admin who created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    /// Public id (the middle part of the token).
    pub id: String,
    /// Hex SHA-256 of the secret.
    pub secret_sha256: String,
    /// `admin`, `editor` or `viewer`.
    pub role: String,
    /// The workspace of an editor or viewer; empty for an admin.
    pub workspace: String,
    /// Who created it (principal of the caller).
    pub created_by: String,
    /// Replicated clock at creation.
    pub created_at_ms: i64,
    /// Replicated clock at which it expires; 0: never.
    pub expires_at_ms: i64,
    /// Revoked tokens are refused (and kept for the audit trail).
    pub revoked: bool,
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// The initial state every replica starts from: only the `default`
    /// workspace.
    pub fn new() -> Self {
        let default = Workspace {
            id: DEFAULT_WORKSPACE_ID.to_string(),
            name: DEFAULT_WORKSPACE.to_string(),
            phase: WorkspacePhase::Active,
            resource_version: 0,
            created_at_ms: 0,
        };
        State {
            workspaces: BTreeMap::from([(DEFAULT_WORKSPACE.to_string(), default)]),
            sandboxes: BTreeMap::new(),
            names: BTreeMap::from([(DEFAULT_WORKSPACE.to_string(), BTreeMap::new())]),
            ssh_sessions: BTreeMap::new(),
            policies: BTreeMap::new(),
            receipts: Receipts::default(),
            cluster: None,
            carried_token_key: None,
            clock_ms: 0,
            receipt_retention_ms: 0,
            quotas: Quotas::default(),
            api_tokens: BTreeMap::new(),
            feature_level: crate::feature::FEATURE_LEVEL_BASE,
        }
    }

    /// How long a settled receipt is kept: the configured retention, never
    /// less than [`RECEIPT_RETENTION_MS_MIN`](crate::limits::RECEIPT_RETENTION_MS_MIN).
    pub fn receipt_retention_ms(&self) -> i64 {
        self.receipt_retention_ms.clamp(
            crate::limits::RECEIPT_RETENTION_MS_MIN,
            crate::limits::RECEIPT_RETENTION_MS_MAX,
        )
    }

    /// The sandbox a name resolves to now.
    pub fn sandbox_by_name(&self, workspace: &str, name: &str) -> Option<&Sandbox> {
        let id = self.names.get(workspace)?.get(name)?;
        self.sandboxes.get(id).map(|sandbox| &**sandbox)
    }

    /// Number of sandboxes in a workspace.
    pub fn sandbox_count(&self, workspace: &str) -> usize {
        self.names.get(workspace).map_or(0, BTreeMap::len)
    }

    /// Owned records (SSH sessions and policies) of the sandboxes of
    /// `workspace`: O(sandboxes in the workspace).
    pub fn owned_record_count(&self, workspace: &str) -> usize {
        self.names.get(workspace).map_or(0, |names| {
            names
                .values()
                .map(|id| {
                    self.ssh_sessions.get(id).map_or(0, BTreeMap::len)
                        + usize::from(self.policies.contains_key(id))
                })
                .sum()
        })
    }

    /// Sandboxes with an operation in flight, for the effect executor.
    pub fn pending_operations(&self) -> impl Iterator<Item = (&Sandbox, &Operation)> {
        self.sandboxes
            .values()
            .filter_map(|sandbox| sandbox.operation.as_ref().map(|op| (&**sandbox, op)))
    }

    /// Panics if an invariant of the state is broken. Cheap enough to run in
    /// tests after every step; `apply` checks the touched sandbox itself.
    pub fn assert_invariants(&self) {
        assert!(
            self.workspaces.contains_key(DEFAULT_WORKSPACE),
            "the default workspace must always exist"
        );
        assert_eq!(
            self.workspaces.keys().collect::<Vec<_>>(),
            self.names.keys().collect::<Vec<_>>(),
            "every workspace has exactly one name index"
        );
        let mut indexed = 0;
        for (workspace, names) in &self.names {
            for (name, id) in names {
                let sandbox = self
                    .sandboxes
                    .get(id)
                    .unwrap_or_else(|| panic!("name {workspace}/{name} points at missing id {id}"));
                assert_eq!(
                    (&sandbox.workspace, &sandbox.name),
                    (workspace, name),
                    "name index disagrees with sandbox {id}"
                );
                indexed += 1;
            }
        }
        assert_eq!(
            indexed,
            self.sandboxes.len(),
            "every sandbox is named exactly once"
        );
        for sandbox in self.sandboxes.values() {
            assert_sandbox_invariants(sandbox);
        }
        self.receipts.assert_invariants();
    }
}

/// Panics if a sandbox's own invariants are broken.
pub(crate) fn assert_sandbox_invariants(sandbox: &Sandbox) {
    assert!(!sandbox.id.is_empty(), "a sandbox always has an id");
    assert!(sandbox.execution.generation >= 1, "generation starts at 1");
    let expected_operation = match sandbox.phase {
        SandboxPhase::Provisioning => Some(OperationKind::Create),
        SandboxPhase::Stopping => Some(OperationKind::Stop),
        SandboxPhase::Starting => Some(OperationKind::Start),
        SandboxPhase::Deleting => Some(OperationKind::Delete),
        _ => None,
    };
    assert_eq!(
        sandbox.operation.as_ref().map(|op| op.kind),
        expected_operation,
        "sandbox {} in phase {:?} has operation {:?}",
        sandbox.id,
        sandbox.phase,
        sandbox.operation
    );
    if let Some(op) = &sandbox.operation {
        assert_eq!(
            op.generation, sandbox.execution.generation,
            "an operation targets the current execution"
        );
    }
}
