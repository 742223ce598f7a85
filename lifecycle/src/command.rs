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
        /// Proposer's clock.
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
        /// Proposer's clock.
        time_ms: i64,
    },
    /// Begin stopping the current execution.
    BeginStop {
        /// Which sandbox.
        target: SandboxTarget,
    },
    /// Begin launching a new execution.
    BeginStart {
        /// Which sandbox.
        target: SandboxTarget,
    },
    /// Begin deleting a sandbox.
    BeginDelete {
        /// Which sandbox.
        target: SandboxTarget,
    },
    /// The driver finished launching `generation`.
    CompleteLaunch {
        /// Sandbox id.
        sandbox_id: String,
        /// The generation that was launched.
        generation: u64,
        /// Running or failed.
        result: LaunchResult,
    },
    /// The driver confirmed `generation` no longer runs.
    CompleteStop {
        /// Sandbox id.
        sandbox_id: String,
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
    },
    /// The driver saw `generation` exit on its own.
    ObserveExit {
        /// Sandbox id.
        sandbox_id: String,
        /// The generation that exited.
        generation: u64,
        /// Its exit status.
        exit_code: i32,
    },
}

impl Command {
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
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
