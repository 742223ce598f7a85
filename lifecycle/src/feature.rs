//! The cluster feature level: which command kinds the replicated log may
//! carry.
//!
//! A release can decode every command kind it knows; an older release
//! cannot decode a kind added after it. So a command kind added by a
//! release is proposed only once the cluster's *feature level* — a
//! replicated value ([`State::feature_level`](crate::State::feature_level),
//! part of every snapshot) — says every voter understands it. The level is
//! raised by the leader-internal [`Command::RaiseFeatureLevel`], which the
//! leader proposes only once every voter of the current membership reports
//! (over the peer port) that its build supports the new level.
//!
//! | level | command kinds it adds                                       |
//! |-------|-------------------------------------------------------------|
//! | 1     | every kind of the first release (all but the ones below)     |
//! | 2     | `RaiseFeatureLevel`                                           |
//! | 3     | none: replicas send each other their payloads in the binary   |
//! |       | encoding (`palisade_codec`), which the releases of level 2    |
//! |       | cannot decode ([`FEATURE_LEVEL_BINARY_PEER_PAYLOADS`])         |
//!
//! A new command kind gets the next level here ([`FEATURE_LEVEL_MAX`]
//! moves up with it) and its proposer checks [`permits`] first. So does a
//! change of what replicas send each other that older releases do not
//! understand: its sender checks the cluster's level.
//!
//! Apply raises the level and never lowers it, whatever the level: whether
//! *this* replica's build supports a level is not a deterministic question
//! (another release applies the same entry), so it is no outcome of apply;
//! the replica layer (`palisade_raft::feature_level`) fail-stops a replica
//! whose build supports less than the level it applied or installed, and
//! refuses to start one on a data directory of a higher level.

use crate::command::Command;

/// The level of a state that never saw a raise (every state written
/// before feature levels existed decodes to it).
pub const FEATURE_LEVEL_BASE: u32 = 1;

/// The highest level this code knows the command kinds of: what a build of
/// it supports.
pub const FEATURE_LEVEL_MAX: u32 = 3;

/// The level from which replicas send each other their payloads (peer
/// messages) in the binary encoding instead of JSON. Every release decodes
/// both from this level on, so a reply may follow its request's encoding.
pub const FEATURE_LEVEL_BINARY_PEER_PAYLOADS: u32 = 3;

/// The feature level a command needs: the cluster must be at least at it
/// before the command is proposed (see the table in the module doc).
pub fn required_level(command: &Command) -> u32 {
    match command {
        Command::RaiseFeatureLevel { .. } => 2,
        Command::Attributed { command, .. } => required_level(command),
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
        | Command::RevokeApiToken { .. }
        | Command::InitializeCluster { .. }
        | Command::RotateTokenKey { .. }
        | Command::AdoptDriverIdentity { .. }
        | Command::Tick { .. }
        | Command::ConfigureReceiptRetention { .. }
        | Command::ConfigureQuotas { .. }
        | Command::CompleteLaunch { .. }
        | Command::CompleteStop { .. }
        | Command::CompleteDelete { .. }
        | Command::ObserveLost { .. }
        | Command::ObserveExit { .. } => FEATURE_LEVEL_BASE,
    }
}

/// Whether a cluster at feature level `cluster_level` may carry `command`.
/// The raise itself is the exception that makes the rule work: a raise to
/// level N is proposed while the cluster is below N, once every voter
/// supports N (so every voter decodes it).
pub fn permits(cluster_level: u32, command: &Command) -> bool {
    match command {
        Command::RaiseFeatureLevel { level } => *level <= FEATURE_LEVEL_MAX,
        other => required_level(other) <= cluster_level,
    }
}

/// The level a serialized state without the field decodes to.
pub(crate) fn base() -> u32 {
    FEATURE_LEVEL_BASE
}

/// Whether `level` is the base level (then the state encodes exactly as
/// before feature levels existed, so a mixed cluster of that release and
/// this one computes the same state digest).
pub(crate) fn is_base(level: &u32) -> bool {
    *level == FEATURE_LEVEL_BASE
}
