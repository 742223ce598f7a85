//! What feature level this replica's build supports, and the checks that
//! keep a replica from running below the cluster's level (the level
//! itself, and which command kinds need which level:
//! [`palisade_lifecycle::feature`]).
//!
//! # Decisions
//!
//! - **Advertised over the peer port.** The leader asks every voter
//!   (`RaftPeer.SupportedFeatureLevel`) before it proposes a raise; a
//!   release before feature levels answers UNIMPLEMENTED, which counts as
//!   the base level, so a cluster with such a replica stays at level 1.
//! - **Fail-stop, not a decode error.** A replica that applies or installs a
//!   level above what its build supports stops with a message naming both
//!   levels (the leader only raises once every voter supports the level,
//!   so this takes a replica restarted with an older build in between).
//!   A replica refuses to start on a data directory whose recorded level
//!   is above its build's.
//! - **The log database records the level** (its `format` record, raised
//!   before the raise is applied in memory): releases before feature
//!   levels accept only format 1, so they too refuse an upgraded data
//!   directory at open ("has format version 2 but this build reads version
//!   1") instead of starting with a state they half understand.
//! - **A TEST-ONLY lower supported level** ([`lower_supported_for_tests`]),
//!   set by `gateway run` only in builds with the `test-hooks` feature
//!   (`PALISADE_TEST_SUPPORTED_FEATURE_LEVEL`): how the mixed-level test
//!   plays an older replica without building one.

use std::sync::atomic::{AtomicU32, Ordering};

pub use palisade_lifecycle::feature::{FEATURE_LEVEL_BASE, FEATURE_LEVEL_MAX};

/// The highest feature level this build supports.
pub const SUPPORTED: u32 = FEATURE_LEVEL_MAX;

/// Process-wide: one replica per process in every real deployment.
static SUPPORTED_NOW: AtomicU32 = AtomicU32::new(SUPPORTED);

/// The feature level this process supports: [`SUPPORTED`], unless a test
/// lowered it.
pub fn supported() -> u32 {
    SUPPORTED_NOW.load(Ordering::Relaxed)
}

/// TEST-ONLY: makes this process support only `level` (clamped to
/// `FEATURE_LEVEL_BASE..=SUPPORTED`), as an older release would. Called
/// only by `gateway run` in builds with the `test-hooks` feature.
pub fn lower_supported_for_tests(level: u32) {
    SUPPORTED_NOW.store(
        level.clamp(FEATURE_LEVEL_BASE, SUPPORTED),
        Ordering::Relaxed,
    );
}

/// A data directory, a snapshot or an entry at a feature level above what
/// this build supports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is at cluster feature level {found}, but this build of palisade supports feature \
     levels up to {supported}: the cluster was upgraded and its feature level raised, so an \
     older release cannot run it; run a release that supports feature level {found} (a \
     downgrade below a raised feature level is not possible)"
)]
pub struct LevelTooHigh {
    /// What carries the level ("the data directory /var/lib/...", "a
    /// received snapshot", ...).
    pub what: String,
    /// Its level.
    pub found: u32,
    /// This build's.
    pub supported: u32,
}

/// Refuses `found` if this process does not support it.
pub fn check(what: impl FnOnce() -> String, found: u32) -> Result<(), LevelTooHigh> {
    let supported = supported();
    if found > supported {
        return Err(LevelTooHigh {
            what: what(),
            found,
            supported,
        });
    }
    Ok(())
}
