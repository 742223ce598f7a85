//! The pure half of projecting: replaying committed entries through
//! [`palisade_lifecycle::apply`] on a shadow copy of the state, and working
//! out which rows each entry changed and what it decided.
//!
//! # How a changed row is found
//!
//! Before applying an entry, the shadow resolves the entry's *subject* (the
//! sandbox or workspace it names, resolved the way `apply` resolves it) and
//! keeps a copy of the subject's records; after applying, it compares. A
//! changed record marks its row dirty. SSH sessions are tracked per session
//! for the two commands that create or revoke one, and per sandbox
//! otherwise: when a sandbox's session count changes any other way (a stop,
//! an exit, a delete, expiry at a tick), its sessions are replaced as a
//! set. At the end of a batch the dirty rows are read from the shadow, as
//! they are after the whole batch: present rows are upserted, absent ones
//! deleted. A row changed ten times in one batch is written once.
//!
//! The tests hold this to account: after thousands of random commands the
//! projection equals the state row for row.

use std::collections::{BTreeMap, BTreeSet};

use palisade_lifecycle::{
    Command, LogPosition, Outcome, Response, Sandbox, SandboxPolicy, SandboxTarget, SshSession,
    State, Workspace,
};
use serde_json::Value;

use crate::source::{LogRecord, Payload};

/// The lifecycle state as of a log position: the projector's private
/// replica, used to learn each entry's outcome and changed rows.
#[derive(Debug, Clone)]
pub(crate) struct Shadow {
    /// The state after applying every entry up to `position`.
    pub state: State,
    /// The last entry applied to it.
    pub position: LogPosition,
}

impl Shadow {
    /// The initial state, before entry 1.
    pub fn initial() -> Self {
        Self {
            state: State::new(),
            position: LogPosition { index: 0, term: 0 },
        }
    }

    /// Applies the next entry, recording what it changed in `changes`
    /// (`None`: replay only, the entry is already projected).
    ///
    /// Panics if `record` is not the next entry: the caller reads the log
    /// in order and checks for gaps ([`crate::source`]).
    pub fn apply(&mut self, record: &LogRecord, changes: Option<&mut BatchChanges>) {
        assert_eq!(
            record.position.index,
            self.position.index + 1,
            "the shadow applies entries in order, without a gap"
        );
        if let Payload::Command(attributed) = &record.payload {
            // The caller (audit trail) goes into the event; everything
            // else is about the command itself.
            let (command, by) = attributed.unattributed();
            match changes {
                Some(changes) => {
                    let subject = Subject::of(&self.state, command);
                    let before = Before::capture(&self.state, &subject, command);
                    let response =
                        palisade_lifecycle::apply(&mut self.state, record.position, command);
                    before.compare(&self.state, &subject, command, changes);
                    let mut event = EventRow::new(record.position, command, &response, &subject);
                    event.caller = by.map(|by| by.principal.clone());
                    event.caller_role = by.map(|by| by.role.clone());
                    changes.events.push(event);
                }
                None => {
                    // Replay only: the outcome was projected already.
                    let _response =
                        palisade_lifecycle::apply(&mut self.state, record.position, command);
                }
            }
        }
        self.position = record.position;
    }

    /// The state as stored in `projection_shadow`: JSON, without the
    /// cluster's token secret and without the SSH sessions' token digests.
    /// Apply never reads either (it records the secret once and stores the
    /// digests), so a shadow restored from it decides every later entry,
    /// and projects every row, exactly as the replica's state does.
    ///
    /// Receipts are left out, but for the few that may expire within
    /// [`SHADOW_RECEIPTS_HORIZON_MS`] of the shadow's clock: the rest are
    /// still in the replica's state when the shadow is loaded again, and
    /// [`Shadow::restore_receipts`] takes them from there. So the stored
    /// shadow's size does not grow with the number of receipts (tens of
    /// thousands a minute under load, kept a day).
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        let state = &self.state;
        // Receipts whose retention may end (at the shortest retention)
        // within the horizon: they may be gone from the replica by then.
        let expiring_by = state
            .clock_ms
            .saturating_add(SHADOW_RECEIPTS_HORIZON_MS)
            .saturating_sub(palisade_lifecycle::limits::RECEIPT_RETENTION_MS_MIN);
        let mut copy = State {
            workspaces: state.workspaces.clone(),
            sandboxes: state.sandboxes.clone(),
            names: state.names.clone(),
            ssh_sessions: state.ssh_sessions.clone(),
            policies: state.policies.clone(),
            // Before the first tick (clock 0) every receipt is kept: the
            // tick that sets the epoch may expire any of them, and there
            // are only the few of the cluster's first seconds.
            receipts: if state.clock_ms == 0 {
                state.receipts.clone()
            } else {
                state
                    .receipts
                    .settled_up_to(expiring_by)
                    .into_iter()
                    .collect()
            },
            cluster: state.cluster.clone(),
            // Like the identity's, the carried key's secret stays out.
            carried_token_key: state.carried_token_key.clone().map(|mut carried| {
                carried.token_secret_hex.clear();
                carried
            }),
            clock_ms: state.clock_ms,
            receipt_retention_ms: state.receipt_retention_ms,
            quotas: state.quotas,
            api_tokens: state.api_tokens.clone(),
            feature_level: state.feature_level,
        };
        if let Some(cluster) = copy.cluster.as_mut() {
            cluster.token_secret_hex.clear();
            for key in &mut cluster.retired_token_keys {
                key.secret_hex.clear();
            }
        }
        for session in copy
            .ssh_sessions
            .values_mut()
            .flat_map(|sessions| sessions.values_mut())
        {
            session.token_sha256.clear();
        }
        for token in copy.api_tokens.values_mut() {
            token.secret_sha256.clear();
        }
        serde_json::to_vec(&copy)
    }

    /// Completes a shadow decoded from `projection_shadow` with the
    /// receipts [`Shadow::encode`] left out, taken from `replica` (the
    /// replica's state, at or after the shadow's position): every receipt
    /// it holds that was made at or before the shadow's position. That is
    /// exactly the receipts the shadow held, provided the replica's clock
    /// is less than [`SHADOW_RECEIPTS_HORIZON_MS`] ahead of the shadow's —
    /// a receipt alive at the shadow and gone from the replica expired in
    /// between, so it was stored with the shadow — which is checked:
    /// `false` when it is not (the caller resyncs instead); an error when
    /// the shadow's receipt store failed.
    pub fn restore_receipts(&mut self, replica: &State) -> Result<bool, String> {
        if self.state.clock_ms == 0 {
            // Stored with every receipt (see `encode`).
            return Ok(true);
        }
        // Complete when the replica's clock is below the earliest expiry
        // of a receipt left out: a settled one expires after the shadow's
        // clock plus the horizon (it was left out), a pending one a day
        // after it settles, which is after the shadow's clock.
        if replica.clock_ms.saturating_sub(self.state.clock_ms) >= SHADOW_RECEIPTS_HORIZON_MS {
            return Ok(false);
        }
        let index = self.position.index;
        self.state
            .receipts
            .copy_from(&replica.receipts, |_, receipt| {
                receipt.created_at_index <= index
            })?;
        Ok(true)
    }
}

/// How far ahead of a stored shadow's clock receipts are stored with it
/// (those that may expire by then); a stored shadow is usable while the
/// replica's clock is less than this ahead of it, and one is stored at
/// least every third of it ([`SHADOW_INTERVAL_CLOCK_MS`]). Two hours: a
/// projector that far behind resyncs (under any sustained write rate the
/// log is compacted long before), and at steady state (retention 24 h)
/// the stored shadow carries the receipts settled in one two-hour slice,
/// never the whole window; in the first 22 h of a cluster, none.
pub const SHADOW_RECEIPTS_HORIZON_MS: i64 = 2 * 3600 * 1000;
/// A shadow is stored at least this often on the replicated clock.
pub const SHADOW_INTERVAL_CLOCK_MS: i64 = SHADOW_RECEIPTS_HORIZON_MS / 3;

/// What an entry names, resolved against the state before it applies.
#[derive(Debug, Default)]
struct Subject {
    sandbox_id: Option<String>,
    workspace: Option<String>,
    request_id: Option<String>,
    time_ms: Option<i64>,
    /// The session of `CreateSshSession` / `RevokeSshSession`.
    session_id: Option<String>,
    /// A tick: every sandbox's sessions may expire.
    tick: bool,
}

fn resolve(state: &State, target: &SandboxTarget) -> Option<String> {
    match target {
        SandboxTarget::Id(id) => state.sandboxes.contains_key(id).then(|| id.clone()),
        SandboxTarget::Name { workspace, name } => state
            .names
            .get(workspace)
            .and_then(|names| names.get(name))
            .cloned(),
    }
}

impl Subject {
    fn of(state: &State, command: &Command) -> Self {
        let on = |id: Option<String>| {
            let workspace = id
                .as_ref()
                .and_then(|id| state.sandboxes.get(id))
                .map(|sandbox| sandbox.workspace.clone());
            Subject {
                sandbox_id: id,
                workspace,
                ..Subject::default()
            }
        };
        match command {
            Command::CreateWorkspace { name, time_ms, .. } => Subject {
                workspace: Some(name.clone()),
                time_ms: Some(*time_ms),
                ..Subject::default()
            },
            Command::DeleteWorkspace { name } => Subject {
                workspace: Some(name.clone()),
                ..Subject::default()
            },
            Command::BeginCreate {
                id,
                workspace,
                request,
                ..
            } => Subject {
                sandbox_id: Some(id.clone()),
                workspace: Some(workspace.clone()),
                request_id: Some(request.id.clone()),
                time_ms: Some(request.time_ms),
                ..Subject::default()
            },
            Command::BeginStop {
                target, request, ..
            }
            | Command::BeginStart {
                target, request, ..
            }
            | Command::BeginDelete {
                target, request, ..
            } => Subject {
                request_id: Some(request.id.clone()),
                time_ms: Some(request.time_ms),
                ..on(resolve(state, target))
            },
            Command::CreateSshSession {
                target,
                session_id,
                time_ms,
                ..
            } => Subject {
                session_id: Some(session_id.clone()),
                time_ms: Some(*time_ms),
                ..on(resolve(state, target))
            },
            Command::RevokeSshSession { target, session_id } => Subject {
                session_id: Some(session_id.clone()),
                ..on(resolve(state, target))
            },
            Command::SetSandboxPolicy {
                target, time_ms, ..
            } => Subject {
                time_ms: Some(*time_ms),
                ..on(resolve(state, target))
            },
            Command::CompleteLaunch { sandbox_id, .. }
            | Command::CompleteStop { sandbox_id, .. }
            | Command::CompleteDelete { sandbox_id, .. }
            | Command::ObserveLost { sandbox_id, .. }
            | Command::ObserveExit { sandbox_id, .. } => on(Some(sandbox_id.clone())),
            Command::InitializeCluster { .. }
            | Command::RotateTokenKey { .. }
            | Command::AdoptDriverIdentity { .. }
            | Command::ConfigureReceiptRetention { .. }
            | Command::ConfigureQuotas { .. }
            | Command::RaiseFeatureLevel { .. }
            | Command::CreateApiToken { .. }
            | Command::RevokeApiToken { .. } => Subject::default(),
            // Unwrapped by the caller (`Shadow::apply`); kept for a nested
            // one, which the gateway never writes.
            Command::Attributed { command, .. } => Subject::of(state, command),
            Command::Tick { now_ms, .. } => Subject {
                time_ms: Some(*now_ms),
                tick: true,
                ..Subject::default()
            },
        }
    }
}

/// The subject's records before the entry applies.
struct Before {
    sandbox: Option<Sandbox>,
    policy: Option<SandboxPolicy>,
    sessions_count: usize,
    workspace: Option<Workspace>,
    /// Tick only: session count of every sandbox that has sessions.
    all_sessions_counts: BTreeMap<String, usize>,
}

fn sessions_count(state: &State, sandbox_id: &str) -> usize {
    state.ssh_sessions.get(sandbox_id).map_or(0, BTreeMap::len)
}

impl Before {
    fn capture(state: &State, subject: &Subject, command: &Command) -> Self {
        let sandbox_id = subject.sandbox_id.as_deref();
        // Only workspace commands can change a workspace row.
        let workspace_command = matches!(
            command,
            Command::CreateWorkspace { .. } | Command::DeleteWorkspace { .. }
        );
        Before {
            sandbox: sandbox_id
                .and_then(|id| state.sandboxes.get(id).map(|sandbox| (**sandbox).clone())),
            policy: sandbox_id.and_then(|id| state.policies.get(id).cloned()),
            sessions_count: sandbox_id.map_or(0, |id| sessions_count(state, id)),
            workspace: if workspace_command {
                subject
                    .workspace
                    .as_ref()
                    .and_then(|name| state.workspaces.get(name).cloned())
            } else {
                None
            },
            all_sessions_counts: if subject.tick {
                state
                    .ssh_sessions
                    .iter()
                    .map(|(id, sessions)| (id.clone(), sessions.len()))
                    .collect()
            } else {
                BTreeMap::new()
            },
        }
    }

    fn compare(
        self,
        state: &State,
        subject: &Subject,
        command: &Command,
        changes: &mut BatchChanges,
    ) {
        if let Some(id) = &subject.sandbox_id {
            if self.sandbox.as_ref() != state.sandboxes.get(id).map(|sandbox| &**sandbox) {
                changes.sandboxes.insert(id.clone());
            }
            if self.policy.as_ref() != state.policies.get(id) {
                changes.policies.insert(id.clone());
            }
            let after = sessions_count(state, id);
            // The one change a session command explains: its own session
            // appeared (create) or went (revoke).
            let explained = match (command, &subject.session_id) {
                (Command::CreateSshSession { .. }, Some(session)) => {
                    changes.sessions.insert((id.clone(), session.clone()));
                    after == self.sessions_count || after == self.sessions_count + 1
                }
                (Command::RevokeSshSession { .. }, Some(session)) => {
                    changes.sessions.insert((id.clone(), session.clone()));
                    after == self.sessions_count || after + 1 == self.sessions_count
                }
                _ => after == self.sessions_count,
            };
            if !explained {
                changes.sessions_replaced.insert(id.clone());
            }
        }
        if matches!(
            command,
            Command::CreateWorkspace { .. } | Command::DeleteWorkspace { .. }
        ) && let Some(name) = &subject.workspace
            && self.workspace.as_ref() != state.workspaces.get(name)
        {
            changes.workspaces.insert(name.clone());
        }
        for (id, count) in self.all_sessions_counts {
            if sessions_count(state, &id) != count {
                changes.sessions_replaced.insert(id);
            }
        }
    }
}

/// One row of `lifecycle_events`.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    pub position: LogPosition,
    pub command: &'static str,
    pub outcome: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub workspace: Option<String>,
    pub sandbox_id: Option<String>,
    pub request_id: Option<String>,
    pub command_time_ms: Option<i64>,
    pub response: Value,
    /// Who asked (`token:ID`, `cert:NAME`, `insecure`); `None` for
    /// leader-internal commands and entries from before the audit trail.
    pub caller: Option<String>,
    /// The caller's role.
    pub caller_role: Option<String>,
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::WorkspaceCreated { .. } => "WorkspaceCreated",
        Outcome::WorkspaceDeleted { .. } => "WorkspaceDeleted",
        Outcome::OperationBegun { .. } => "OperationBegun",
        Outcome::OperationJoined { .. } => "OperationJoined",
        Outcome::AlreadyDone { .. } => "AlreadyDone",
        Outcome::Completed { .. } => "Completed",
        Outcome::Replayed { .. } => "Replayed",
        Outcome::WorkspaceTerminating { .. } => "WorkspaceTerminating",
        Outcome::SshSessionCreated { .. } => "SshSessionCreated",
        Outcome::SshSessionRevoked { .. } => "SshSessionRevoked",
        Outcome::PolicySet { .. } => "PolicySet",
        Outcome::Housekeeping => "Housekeeping",
        Outcome::TokenKeyRotated { .. } => "TokenKeyRotated",
        Outcome::NotACommand => "NotACommand",
        Outcome::Ignored { .. } => "Ignored",
    }
}

impl EventRow {
    fn new(
        position: LogPosition,
        command: &Command,
        response: &Response,
        subject: &Subject,
    ) -> Self {
        let (outcome, reason, message) = match response {
            Ok(outcome) => (outcome_name(outcome).to_string(), None, None),
            Err(rejection) => (
                "Rejected".to_string(),
                Some(rejection.reason.as_str()),
                Some(rejection.message.clone()),
            ),
        };
        EventRow {
            position,
            command: command.name(),
            outcome,
            reason,
            message,
            workspace: subject.workspace.clone(),
            sandbox_id: subject.sandbox_id.clone(),
            request_id: subject.request_id.clone(),
            command_time_ms: subject.time_ms,
            // A Response holds ids, names, reasons and sandbox records, never
            // the cluster secret; serializing plain data cannot fail.
            response: serde_json::to_value(response).unwrap_or(Value::Null),
            caller: None,
            caller_role: None,
        }
    }
}

/// The rows a batch of entries changed, by key, and its events.
#[derive(Debug, Default)]
pub(crate) struct BatchChanges {
    pub workspaces: BTreeSet<String>,
    /// Sandbox row and its execution row.
    pub sandboxes: BTreeSet<String>,
    pub policies: BTreeSet<String>,
    /// (sandbox id, session id) of sessions created or revoked one by one.
    pub sessions: BTreeSet<(String, String)>,
    /// Sandboxes whose sessions are replaced as a set.
    pub sessions_replaced: BTreeSet<String>,
    pub events: Vec<EventRow>,
}

/// A projected SSH session: the state's session without its token digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// The sandbox it belongs to.
    pub sandbox_id: String,
    /// Session id.
    pub id: String,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it expires.
    pub expires_at_ms: i64,
}

impl From<&SshSession> for SessionRow {
    fn from(session: &SshSession) -> Self {
        SessionRow {
            sandbox_id: session.sandbox_id.clone(),
            id: session.id.clone(),
            created_at_ms: session.created_at_ms,
            expires_at_ms: session.expires_at_ms,
        }
    }
}

/// What one transaction writes: final rows of everything a batch changed.
#[derive(Debug, Default)]
pub(crate) struct WritePlan {
    /// Sandboxes removed: they, their execution, sessions and policy go in
    /// one set-based statement.
    pub sandboxes_removed: Vec<String>,
    /// Sandboxes whose every session is deleted before `sessions_upsert`
    /// puts back the current ones.
    pub sessions_cleared: Vec<String>,
    pub sessions_removed: Vec<(String, String)>,
    pub policies_removed: Vec<String>,
    pub workspaces_removed: Vec<String>,
    pub workspaces_upsert: Vec<Workspace>,
    pub sandboxes_upsert: Vec<Sandbox>,
    pub sessions_upsert: Vec<SessionRow>,
    pub policies_upsert: Vec<(String, SandboxPolicy)>,
    pub events: Vec<EventRow>,
}

impl WritePlan {
    /// Rows this plan deletes that no upsert of it writes back, as far as
    /// the plan knows them: a removed sandbox counts once (its execution,
    /// sessions and policy go with it), a cleared set of sessions once, a
    /// removed workspace once (it goes with its last sandbox; its own small
    /// table is left to autovacuum).
    pub fn rows_removed(&self) -> u64 {
        (self.sandboxes_removed.len()
            + self.sessions_cleared.len()
            + self.sessions_removed.len()
            + self.policies_removed.len()
            + self.workspaces_removed.len()) as u64
    }

    /// The final rows of everything `changes` marked, read from `state`
    /// (the shadow after the whole batch).
    pub fn of_changes(state: &State, changes: BatchChanges) -> Self {
        let mut plan = WritePlan {
            events: changes.events,
            ..WritePlan::default()
        };
        let mut removed = BTreeSet::new();
        for id in changes.sandboxes {
            match state.sandboxes.get(&id) {
                Some(sandbox) => plan.sandboxes_upsert.push((**sandbox).clone()),
                None => {
                    removed.insert(id.clone());
                    plan.sandboxes_removed.push(id);
                }
            }
        }
        for id in changes.policies {
            if removed.contains(&id) {
                continue;
            }
            match state.policies.get(&id) {
                Some(policy) => plan.policies_upsert.push((id, policy.clone())),
                None => plan.policies_removed.push(id),
            }
        }
        for id in &changes.sessions_replaced {
            if removed.contains(id) {
                continue;
            }
            plan.sessions_cleared.push(id.clone());
            if let Some(sessions) = state.ssh_sessions.get(id) {
                plan.sessions_upsert
                    .extend(sessions.values().map(SessionRow::from));
            }
        }
        for (sandbox_id, session_id) in changes.sessions {
            if removed.contains(&sandbox_id) || changes.sessions_replaced.contains(&sandbox_id) {
                continue;
            }
            match state
                .ssh_sessions
                .get(&sandbox_id)
                .and_then(|sessions| sessions.get(&session_id))
            {
                Some(session) => plan.sessions_upsert.push(SessionRow::from(session)),
                None => plan.sessions_removed.push((sandbox_id, session_id)),
            }
        }
        for name in changes.workspaces {
            match state.workspaces.get(&name) {
                Some(workspace) => plan.workspaces_upsert.push(workspace.clone()),
                None => plan.workspaces_removed.push(name),
            }
        }
        plan
    }

    /// Every row of `state`, for a resync (written into emptied tables).
    pub fn of_state(state: &State) -> Self {
        WritePlan {
            workspaces_upsert: state.workspaces.values().cloned().collect(),
            sandboxes_upsert: state
                .sandboxes
                .values()
                .map(|sandbox| (**sandbox).clone())
                .collect(),
            sessions_upsert: state
                .ssh_sessions
                .values()
                .flat_map(|sessions| sessions.values().map(SessionRow::from))
                .collect(),
            policies_upsert: state
                .policies
                .iter()
                .map(|(id, policy)| (id.clone(), policy.clone()))
                .collect(),
            ..WritePlan::default()
        }
    }
}

/// The whole projection, as rows: what [`crate::Projection::rows`] reads
/// back, and what [`ProjectedRows::of_state`] derives from a state. Equal
/// when the projection reflects the state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectedRows {
    /// Workspaces by name.
    pub workspaces: BTreeMap<String, Workspace>,
    /// Sandboxes (with their current execution) by id.
    pub sandboxes: BTreeMap<String, Sandbox>,
    /// SSH sessions by (sandbox id, session id).
    pub ssh_sessions: BTreeMap<(String, String), SessionRow>,
    /// Policies by sandbox id.
    pub policies: BTreeMap<String, SandboxPolicy>,
}

impl ProjectedRows {
    /// The rows the projection of `state` must hold.
    pub fn of_state(state: &State) -> Self {
        ProjectedRows {
            workspaces: state.workspaces.clone(),
            sandboxes: state
                .sandboxes
                .iter()
                .map(|(id, sandbox)| (id.clone(), (**sandbox).clone()))
                .collect(),
            ssh_sessions: state
                .ssh_sessions
                .values()
                .flat_map(|sessions| sessions.values())
                .map(|session| {
                    (
                        (session.sandbox_id.clone(), session.id.clone()),
                        SessionRow::from(session),
                    )
                })
                .collect(),
            policies: state.policies.clone(),
        }
    }

    /// A short description of the first difference from `other`, for test
    /// failures and the chaos checker (`None` when equal).
    pub fn first_difference(&self, other: &ProjectedRows) -> Option<String> {
        fn differ<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
            table: &str,
            left: &BTreeMap<K, V>,
            right: &BTreeMap<K, V>,
        ) -> Option<String> {
            for (key, value) in left {
                match right.get(key) {
                    None => return Some(format!("{table}: {key:?} only on the left: {value:?}")),
                    Some(other) if other != value => {
                        return Some(format!(
                            "{table}: {key:?} differs:\n  left:  {value:?}\n  right: {other:?}"
                        ));
                    }
                    Some(_) => {}
                }
            }
            right
                .iter()
                .find(|(key, _)| !left.contains_key(key))
                .map(|(key, value)| format!("{table}: {key:?} only on the right: {value:?}"))
        }
        differ("workspaces", &self.workspaces, &other.workspaces)
            .or_else(|| differ("sandboxes", &self.sandboxes, &other.sandboxes))
            .or_else(|| differ("ssh_sessions", &self.ssh_sessions, &other.ssh_sessions))
            .or_else(|| differ("policies", &self.policies, &other.policies))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use palisade_lifecycle::{
        Command, CompletionOf, LaunchResult, RequestMeta, SandboxSpec, SandboxTarget,
    };

    use super::*;

    /// Applies `commands` as entries 1.. to a fresh shadow, as one batch.
    fn batch(shadow: &mut Shadow, commands: Vec<Command>) -> WritePlan {
        let mut changes = BatchChanges::default();
        for command in commands {
            // Completions bound to the operation pending now, as the
            // executor binds them.
            let command = command.bound_to(&shadow.state, 1);
            let record = LogRecord {
                position: LogPosition {
                    index: shadow.position.index + 1,
                    term: 1,
                },
                payload: Payload::Command(command.into()),
            };
            shadow.apply(&record, Some(&mut changes));
        }
        WritePlan::of_changes(&shadow.state, changes)
    }

    fn request(id: &str) -> RequestMeta {
        RequestMeta {
            id: id.into(),
            payload_digest: id.into(),
            time_ms: 1,
        }
    }

    fn ready_sandbox(id: &str) -> Vec<Command> {
        vec![
            Command::BeginCreate {
                id: id.into(),
                workspace: "default".into(),
                name: id.into(),
                spec: SandboxSpec::default(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                time_ms: 1,
                host_identity: "host".into(),
                request: request(&format!("create-{id}")),
            },
            Command::CompleteLaunch {
                sandbox_id: id.into(),
                of: CompletionOf::UNBOUND,
                generation: 1,
                result: LaunchResult::Running {
                    handle: "pid=1".into(),
                    driver: "process".into(),
                },
            },
        ]
    }

    fn session(sandbox: &str, id: &str) -> Command {
        Command::CreateSshSession {
            target: SandboxTarget::Id(sandbox.into()),
            session_id: id.into(),
            token_sha256: "0".repeat(64),
            expires_at_ms: 1_000,
            time_ms: 1,
            ttl_ms: 999,
        }
    }

    #[test]
    fn a_row_changed_many_times_in_a_batch_is_written_once_as_it_ends() {
        let mut shadow = Shadow::initial();
        let plan = batch(&mut shadow, ready_sandbox("a"));
        assert_eq!(plan.sandboxes_upsert.len(), 1);
        assert_eq!(
            plan.sandboxes_upsert[0].phase,
            palisade_lifecycle::SandboxPhase::Ready
        );
        assert_eq!(plan.events.len(), 2);
        assert!(plan.sandboxes_removed.is_empty());
    }

    #[test]
    fn sessions_are_written_one_by_one_when_created_or_revoked() {
        let mut shadow = Shadow::initial();
        batch(&mut shadow, ready_sandbox("a"));
        let plan = batch(
            &mut shadow,
            vec![
                session("a", "s1"),
                session("a", "s2"),
                Command::RevokeSshSession {
                    target: SandboxTarget::Id("a".into()),
                    session_id: "s1".into(),
                },
            ],
        );
        assert!(plan.sessions_cleared.is_empty());
        assert_eq!(plan.sessions_upsert.len(), 1);
        assert_eq!(plan.sessions_upsert[0].id, "s2");
        assert_eq!(
            plan.sessions_removed,
            vec![("a".to_string(), "s1".to_string())]
        );
        assert!(
            plan.sandboxes_upsert.is_empty(),
            "sessions do not change the sandbox row"
        );
    }

    #[test]
    fn deleting_a_sandbox_removes_it_with_its_owned_records_as_one_set() {
        let mut shadow = Shadow::initial();
        batch(&mut shadow, ready_sandbox("a"));
        batch(
            &mut shadow,
            (0..100).map(|n| session("a", &format!("s{n}"))).collect(),
        );
        let plan = batch(
            &mut shadow,
            vec![
                Command::BeginDelete {
                    target: SandboxTarget::Id("a".into()),
                    expected_sandbox_id: None,
                    expected_execution: None,
                    request: request("delete"),
                },
                Command::CompleteDelete {
                    sandbox_id: "a".into(),
                    of: CompletionOf::UNBOUND,
                },
            ],
        );
        assert_eq!(plan.sandboxes_removed, vec!["a".to_string()]);
        assert!(plan.sessions_removed.is_empty() && plan.sessions_cleared.is_empty());
        assert!(plan.sessions_upsert.is_empty() && plan.sandboxes_upsert.is_empty());
    }

    #[test]
    fn a_tick_replaces_the_sessions_of_the_sandboxes_it_expired() {
        let mut shadow = Shadow::initial();
        batch(&mut shadow, ready_sandbox("a"));
        batch(&mut shadow, ready_sandbox("b"));
        batch(&mut shadow, vec![session("a", "s1")]);
        let plan = batch(
            &mut shadow,
            vec![Command::Tick {
                now_ms: 5_000,
                receipt_retention_ms: 1_000_000,
            }],
        );
        assert_eq!(plan.sessions_cleared, vec!["a".to_string()]);
        assert!(plan.sessions_upsert.is_empty());
    }

    #[test]
    fn a_rejection_is_an_event_and_changes_no_row() {
        let mut shadow = Shadow::initial();
        let plan = batch(
            &mut shadow,
            vec![Command::DeleteWorkspace {
                name: "default".into(),
            }],
        );
        assert!(plan.workspaces_upsert.is_empty() && plan.workspaces_removed.is_empty());
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].outcome, "Rejected");
        assert_eq!(
            plan.events[0].reason.as_deref(),
            Some("DEFAULT_WORKSPACE_PROTECTED")
        );
    }

    #[test]
    fn the_stored_shadow_holds_no_secret_and_no_token_digest() {
        let mut shadow = Shadow::initial();
        batch(
            &mut shadow,
            vec![Command::InitializeCluster {
                cluster_id: "cluster".into(),
                token_secret_hex: "5ec2e7".repeat(10),
                driver_identity: String::new(),
            }],
        );
        // A rotation retires the first key (kept for its grace) and makes
        // another current: neither may be stored.
        batch(
            &mut shadow,
            vec![
                Command::Tick {
                    now_ms: 1_000,
                    receipt_retention_ms: 0,
                },
                Command::RotateTokenKey {
                    token_secret_hex: "ab12cd".repeat(10) + "ab12",
                    grace_ms: 60_000,
                },
            ],
        );
        let cluster = shadow.state.cluster.as_ref().unwrap();
        assert_eq!(cluster.token_key_id, 2);
        assert_eq!(
            cluster.retired_token_keys.len(),
            1,
            "the first key is retired"
        );
        batch(&mut shadow, ready_sandbox("a"));
        batch(
            &mut shadow,
            vec![Command::CreateSshSession {
                target: SandboxTarget::Id("a".into()),
                session_id: "s1".into(),
                token_sha256: "d1".repeat(32),
                expires_at_ms: 1_000,
                time_ms: 1,
                ttl_ms: 999,
            }],
        );
        let stored = String::from_utf8(shadow.encode().unwrap()).unwrap();
        assert!(stored.contains("cluster") && stored.contains("s1"));
        assert!(!stored.contains("5ec2e7"), "the retired key is stored");
        assert!(!stored.contains("ab12cd"), "the current key is stored");
        assert!(!stored.contains("d1d1"));
        // The in-memory shadow keeps it: it is what apply saw.
        assert!(shadow.state.cluster.is_some());
    }
}
