//! A seeded random lifecycle workload: a stream of commands shaped like a
//! busy cluster's log (creates, stops, starts, deletes with and without
//! preconditions, their completions, exits, SSH sessions, policies, ticks
//! that expire sessions and receipts, workspace churn, request-id retries,
//! stale and mismatched preconditions), for the projection's equivalence
//! tests, its benchmark and the chaos harness.
//!
//! Commands are chosen by looking at the current state, so most of them
//! act (a random stream would be almost all rejections), and some are
//! deliberately stale or invalid, so rejections are projected too. The
//! same seed and the same state sequence give the same commands.

use std::collections::BTreeMap;

use palisade_lifecycle::{
    Command, CompletionOf, ExecutionRef, LaunchResult, OperationKind, RequestMeta, RestartPolicy,
    SandboxPhase, SandboxSpec, SandboxTarget, State,
};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

/// Workspace names the workload uses besides `default`.
const WORKSPACE_NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
/// Sandbox names per workspace the workload draws from (names are reused
/// after deletes, so same-name replacements happen).
const SANDBOX_NAMES_COUNT: u32 = 24;
/// Request ids remembered for retries.
const REMEMBERED_REQUESTS_MAX: usize = 64;

/// A seeded generator of lifecycle commands.
pub struct Workload {
    rng: StdRng,
    clock_ms: i64,
    /// Recent Begin* commands, replayed as retries (same or other payload).
    recent: Vec<Command>,
    sequence: u64,
}

impl Workload {
    /// A workload seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            clock_ms: 1_700_000_000_000,
            recent: Vec::new(),
            sequence: 0,
        }
    }

    fn id(&mut self) -> String {
        let value: u128 = self.rng.random();
        let hex = format!("{value:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }

    fn request(&mut self, payload: &str) -> RequestMeta {
        self.sequence += 1;
        RequestMeta {
            id: format!("request-{}-{}", self.sequence, self.rng.random::<u32>()),
            payload_digest: format!("digest-{payload}"),
            time_ms: self.clock_ms,
        }
    }

    fn workspace_name(&mut self) -> String {
        if self.rng.random_bool(0.5) {
            palisade_lifecycle::DEFAULT_WORKSPACE.to_string()
        } else {
            WORKSPACE_NAMES
                .choose(&mut self.rng)
                .map_or("alpha", |name| name)
                .to_string()
        }
    }

    fn remember(&mut self, command: &Command) {
        if self.recent.len() >= REMEMBERED_REQUESTS_MAX {
            let at = self.rng.random_range(0..self.recent.len());
            self.recent.swap_remove(at);
        }
        self.recent.push(command.clone());
    }

    /// A sandbox of `state`, picked at random, optionally only among those
    /// matching `filter`.
    fn pick<'a>(
        &mut self,
        state: &'a State,
        filter: impl Fn(&palisade_lifecycle::Sandbox) -> bool,
    ) -> Option<&'a palisade_lifecycle::Sandbox> {
        let candidates: Vec<_> = state.sandboxes.values().filter(|s| filter(s)).collect();
        candidates.choose(&mut self.rng).map(|sandbox| &***sandbox)
    }

    fn target(&mut self, sandbox: &palisade_lifecycle::Sandbox) -> SandboxTarget {
        if self.rng.random_bool(0.5) {
            SandboxTarget::Id(sandbox.id.clone())
        } else {
            SandboxTarget::Name {
                workspace: sandbox.workspace.clone(),
                name: sandbox.name.clone(),
            }
        }
    }

    /// An execution precondition: usually absent, sometimes current,
    /// sometimes stale.
    fn expected_execution(
        &mut self,
        sandbox: &palisade_lifecycle::Sandbox,
    ) -> Option<ExecutionRef> {
        match self.rng.random_range(0..10) {
            0..=5 => None,
            6..=8 => Some(ExecutionRef {
                sandbox_id: sandbox.id.clone(),
                generation: sandbox.execution.generation,
                key_id: None,
            }),
            _ => Some(ExecutionRef {
                sandbox_id: sandbox.id.clone(),
                generation: sandbox.execution.generation.saturating_sub(1),
                key_id: None,
            }),
        }
    }

    /// The next command, chosen against `state` (the state the command will
    /// be applied to).
    pub fn next_command(&mut self, state: &State) -> Command {
        self.clock_ms += self.rng.random_range(1..=250);
        loop {
            if let Some(command) = self.try_command(state) {
                return command;
            }
        }
    }

    fn try_command(&mut self, state: &State) -> Option<Command> {
        let roll = self.rng.random_range(0..1000);
        let command = match roll {
            0..=19 => Command::CreateWorkspace {
                id: self.id(),
                name: WORKSPACE_NAMES.choose(&mut self.rng)?.to_string(),
                time_ms: self.clock_ms,
            },
            20..=29 => Command::DeleteWorkspace {
                name: self.workspace_name(),
            },
            30..=179 => {
                let workspace = self.workspace_name();
                let name = format!("box-{}", self.rng.random_range(0..SANDBOX_NAMES_COUNT));
                let mut labels = BTreeMap::new();
                labels.insert(
                    "team".to_string(),
                    ["red", "green", "blue"].choose(&mut self.rng)?.to_string(),
                );
                if self.rng.random_bool(0.5) {
                    labels.insert(
                        "tier".to_string(),
                        ["dev", "prod"].choose(&mut self.rng)?.to_string(),
                    );
                }
                let restart_policy = *[
                    RestartPolicy::Never,
                    RestartPolicy::OnFailure,
                    RestartPolicy::Always,
                ]
                .choose(&mut self.rng)?;
                let payload = format!("create-{workspace}-{name}");
                let command = Command::BeginCreate {
                    id: self.id(),
                    workspace,
                    name,
                    spec: SandboxSpec {
                        command: vec!["sleep".into(), self.rng.random_range(1..1000).to_string()],
                        env: BTreeMap::from([("MODE".to_string(), "test".to_string())]),
                        image: String::new(),
                        driver_config: BTreeMap::new(),
                        restart_policy,
                        ..Default::default()
                    },
                    labels,
                    annotations: BTreeMap::from([(
                        "note".to_string(),
                        format!("made at {}", self.clock_ms),
                    )]),
                    time_ms: self.clock_ms,
                    host_identity: self.id(),
                    request: self.request(&payload),
                };
                self.remember(&command);
                command
            }
            180..=199 => {
                // A retry of a recent request: same payload (replay), or the
                // same request id with another payload (conflict).
                let mut command = self.recent.choose(&mut self.rng)?.clone();
                if self.rng.random_bool(0.3)
                    && let Command::BeginCreate { name, .. } = &mut command
                {
                    name.push('x');
                }
                command
            }
            200..=289 => {
                let sandbox = self.pick(state, |s| {
                    matches!(s.phase, SandboxPhase::Ready | SandboxPhase::Unknown) || self_rarely(s)
                })?;
                let command = Command::BeginStop {
                    target: self.target(sandbox),
                    expected_execution: self.expected_execution(sandbox),
                    request: self.request(&format!("stop-{}", sandbox.id)),
                };
                self.remember(&command);
                command
            }
            290..=359 => {
                let sandbox = self.pick(state, |s| s.phase.is_at_rest() || self_rarely(s))?;
                let command = Command::BeginStart {
                    target: self.target(sandbox),
                    expected_execution: self.expected_execution(sandbox),
                    request: self.request(&format!("start-{}", sandbox.id)),
                };
                self.remember(&command);
                command
            }
            360..=429 => {
                let sandbox = self.pick(state, |_| true)?;
                let expected_sandbox_id = match self.rng.random_range(0..4) {
                    0 => Some(sandbox.id.clone()),
                    1 => Some(self.id()),
                    _ => None,
                };
                let target = if expected_sandbox_id.is_some() {
                    SandboxTarget::Name {
                        workspace: sandbox.workspace.clone(),
                        name: sandbox.name.clone(),
                    }
                } else {
                    self.target(sandbox)
                };
                let command = Command::BeginDelete {
                    target,
                    expected_sandbox_id,
                    expected_execution: self.expected_execution(sandbox),
                    request: self.request(&format!("delete-{}", sandbox.id)),
                };
                self.remember(&command);
                command
            }
            430..=539 => {
                let sandbox = self.pick(state, |s| {
                    s.operation.as_ref().is_some_and(|op| {
                        matches!(op.kind, OperationKind::Create | OperationKind::Start)
                    })
                })?;
                let generation = sandbox.execution.generation;
                let result = if self.rng.random_bool(0.85) {
                    LaunchResult::Running {
                        handle: format!("pid={} start={}", self.rng.random::<u16>(), self.clock_ms),
                        driver: "process".into(),
                    }
                } else {
                    LaunchResult::Failed {
                        message: "the driver refused the launch".into(),
                    }
                };
                Command::CompleteLaunch {
                    sandbox_id: sandbox.id.clone(),
                    of: CompletionOf::pending(sandbox, 1),
                    generation,
                    result,
                }
            }
            540..=609 => {
                let sandbox = self.pick(state, |s| {
                    s.operation
                        .as_ref()
                        .is_some_and(|op| op.kind == OperationKind::Stop)
                })?;
                Command::CompleteStop {
                    sandbox_id: sandbox.id.clone(),
                    of: CompletionOf::pending(sandbox, 1),
                    generation: sandbox.execution.generation,
                    exit_code: if self.rng.random_bool(0.5) {
                        Some(self.rng.random_range(0..3))
                    } else {
                        None
                    },
                }
            }
            610..=679 => {
                let sandbox = self.pick(state, |s| {
                    s.operation
                        .as_ref()
                        .is_some_and(|op| op.kind == OperationKind::Delete)
                })?;
                Command::CompleteDelete {
                    sandbox_id: sandbox.id.clone(),
                    of: CompletionOf::pending(sandbox, 1),
                }
            }
            680..=719 => {
                let sandbox = self.pick(state, |s| s.phase == SandboxPhase::Ready)?;
                let generation = sandbox.execution.generation;
                if self.rng.random_bool(0.2) {
                    Command::ObserveLost {
                        sandbox_id: sandbox.id.clone(),
                        of: CompletionOf::observed(sandbox, 1),
                        generation,
                    }
                } else {
                    Command::ObserveExit {
                        sandbox_id: sandbox.id.clone(),
                        of: CompletionOf::observed(sandbox, 1),
                        generation,
                        exit_code: self.rng.random_range(0..2),
                    }
                }
            }
            720..=859 => {
                let sandbox = self.pick(state, |s| s.phase == SandboxPhase::Ready)?;
                let token: u128 = self.rng.random();
                let ttl_ms = self.rng.random_range(1_000..120_000);
                Command::CreateSshSession {
                    target: self.target(sandbox),
                    session_id: self.id(),
                    token_sha256: format!("{token:032x}{token:032x}"),
                    expires_at_ms: self.clock_ms + ttl_ms,
                    time_ms: self.clock_ms,
                    ttl_ms,
                }
            }
            860..=899 => {
                let (sandbox_id, session_id) = {
                    let sessions: Vec<(&String, &String)> = state
                        .ssh_sessions
                        .iter()
                        .flat_map(|(sandbox, sessions)| sessions.keys().map(move |s| (sandbox, s)))
                        .collect();
                    let (sandbox, session) = sessions.choose(&mut self.rng)?;
                    ((*sandbox).clone(), (*session).clone())
                };
                Command::RevokeSshSession {
                    target: SandboxTarget::Id(sandbox_id),
                    session_id,
                }
            }
            900..=949 => {
                let sandbox = self.pick(state, |_| true)?;
                let current = state.policies.get(&sandbox.id).map_or(0, |p| p.version);
                Command::SetSandboxPolicy {
                    target: self.target(sandbox),
                    document: format!("{{\"allow\": [\"net-{}\"]}}", self.rng.random::<u8>()),
                    expected_version: match self.rng.random_range(0..3) {
                        0 => None,
                        1 => Some(current),
                        _ => Some(current + 1),
                    },
                    time_ms: self.clock_ms,
                }
            }
            950..=989 => {
                self.clock_ms += self.rng.random_range(0..30_000);
                Command::Tick {
                    now_ms: self.clock_ms,
                    receipt_retention_ms: 120_000,
                }
            }
            _ => Command::InitializeCluster {
                cluster_id: "workload-cluster".into(),
                token_secret_hex: format!("{:064x}", self.rng.random::<u128>()),
                driver_identity: String::new(),
            },
        };
        Some(command)
    }
}

/// Every phase sometimes gets a command its phase refuses, so rejections
/// are projected too.
fn self_rarely(sandbox: &palisade_lifecycle::Sandbox) -> bool {
    // Deterministic in the sandbox, so the choice needs no extra randomness.
    sandbox.resource_version.is_multiple_of(7)
}
