//! The sandbox census: how many sandboxes each workspace holds in each
//! phase, and how many have an operation pending. Metrics and the status
//! page show these numbers; counting them by walking every sandbox under
//! the state's lock at each scrape cost a busy cluster a noticeable share
//! of its throughput, so the census is kept up to date at apply instead.
//!
//! # Key decision: tally the one sandbox a command touches
//!
//! Every command changes at most one sandbox (the one its `Begin*` target
//! or its `sandbox_id` names; `Tick`, workspace, token and configuration
//! commands change none). [`Census::apply`] tallies that sandbox before
//! and after [`crate::apply`], so keeping the census costs two map
//! lookups per entry, O(log n). [`Census::of`] counts a whole state, once,
//! when a state is loaded (snapshot restore or install); the property test
//! checks the two always agree.

use std::collections::BTreeMap;

use crate::apply::{LogPosition, Response, resolve_id};
use crate::command::Command;
use crate::state::{SandboxPhase, State};

/// Sandbox counts by phase, in the order of [`SandboxPhase::ALL`].
pub type PhaseCounts = [u64; SandboxPhase::ALL.len()];

/// Sandbox counts of a state (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Workspace name -> sandboxes by phase. Workspaces with no sandbox are
    /// absent.
    by_workspace: BTreeMap<String, PhaseCounts>,
    /// Sandboxes held.
    sandboxes: u64,
    /// Sandboxes with an operation in flight (waiting for, or in, its
    /// effect).
    pending: u64,
}

/// What one sandbox adds to the census.
#[derive(Debug, PartialEq, Eq)]
struct Tally {
    workspace: String,
    phase: usize,
    pending: bool,
}

fn phase_slot(phase: SandboxPhase) -> usize {
    SandboxPhase::ALL
        .iter()
        .position(|each| *each == phase)
        .expect("SandboxPhase::ALL lists every phase")
}

impl Census {
    /// Counts every sandbox of `state`: O(sandboxes), for a state just
    /// loaded.
    pub fn of(state: &State) -> Self {
        let mut census = Census::default();
        for sandbox in state.sandboxes.values() {
            census.add(&Tally {
                workspace: sandbox.workspace.clone(),
                phase: phase_slot(sandbox.phase),
                pending: sandbox.operation.is_some(),
            });
        }
        census
    }

    /// Applies `command` to `state` (exactly [`crate::apply`]) and keeps
    /// the census in step with it.
    pub fn apply(
        &mut self,
        state: &mut State,
        position: LogPosition,
        command: &Command,
    ) -> Response {
        let touched = touched_sandbox(state, command);
        let before = touched.as_deref().and_then(|id| tally(state, id));
        let response = crate::apply(state, position, command);
        let after = touched.as_deref().and_then(|id| tally(state, id));
        if before != after {
            if let Some(before) = &before {
                self.remove(before);
            }
            if let Some(after) = &after {
                self.add(after);
            }
        }
        response
    }

    /// Sandboxes held.
    pub fn sandboxes(&self) -> u64 {
        self.sandboxes
    }

    /// Sandboxes with an operation in flight.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Sandboxes by phase (ordered as [`SandboxPhase::ALL`]) per workspace
    /// that holds any.
    pub fn by_workspace(&self) -> &BTreeMap<String, PhaseCounts> {
        &self.by_workspace
    }

    fn add(&mut self, tally: &Tally) {
        let counts = match self.by_workspace.get_mut(&tally.workspace) {
            Some(counts) => counts,
            None => self
                .by_workspace
                .entry(tally.workspace.clone())
                .or_default(),
        };
        counts[tally.phase] += 1;
        self.sandboxes += 1;
        self.pending += u64::from(tally.pending);
    }

    fn remove(&mut self, tally: &Tally) {
        let emptied = match self.by_workspace.get_mut(&tally.workspace) {
            Some(counts) => {
                counts[tally.phase] = counts[tally.phase].saturating_sub(1);
                counts.iter().all(|count| *count == 0)
            }
            None => false,
        };
        if emptied {
            self.by_workspace.remove(&tally.workspace);
        }
        self.sandboxes = self.sandboxes.saturating_sub(1);
        self.pending = self.pending.saturating_sub(u64::from(tally.pending));
    }
}

fn tally(state: &State, sandbox_id: &str) -> Option<Tally> {
    state.sandboxes.get(sandbox_id).map(|sandbox| Tally {
        workspace: sandbox.workspace.clone(),
        phase: phase_slot(sandbox.phase),
        pending: sandbox.operation.is_some(),
    })
}

/// The one sandbox `command` may change in `state`, if any.
fn touched_sandbox(state: &State, command: &Command) -> Option<String> {
    match command {
        Command::Attributed { command, .. } => touched_sandbox(state, command),
        Command::BeginCreate { id, .. } => Some(id.clone()),
        Command::BeginStop { target, .. }
        | Command::BeginStart { target, .. }
        | Command::BeginDelete { target, .. } => resolve_id(state, target).ok(),
        Command::CompleteLaunch { sandbox_id, .. }
        | Command::CompleteStop { sandbox_id, .. }
        | Command::CompleteDelete { sandbox_id, .. }
        | Command::ObserveLost { sandbox_id, .. }
        | Command::ObserveExit { sandbox_id, .. } => Some(sandbox_id.clone()),
        // None of these changes a sandbox's phase or operation: workspaces
        // (a workspace is removed only once it holds no sandbox), owned
        // records, tokens, the clock, the cluster's identity and
        // configuration.
        Command::CreateWorkspace { .. }
        | Command::DeleteWorkspace { .. }
        | Command::CreateSshSession { .. }
        | Command::RevokeSshSession { .. }
        | Command::SetSandboxPolicy { .. }
        | Command::CreateApiToken { .. }
        | Command::RevokeApiToken { .. }
        | Command::InitializeCluster { .. }
        | Command::RotateTokenKey { .. }
        | Command::AdoptDriverIdentity { .. }
        | Command::Tick { .. }
        | Command::ConfigureReceiptRetention { .. }
        | Command::ConfigureQuotas { .. }
        | Command::RaiseFeatureLevel { .. } => None,
    }
}
