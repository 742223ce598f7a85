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

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use palisade_codec::Encoding;
pub use palisade_lifecycle::feature::{
    FEATURE_LEVEL_BASE, FEATURE_LEVEL_BINARY_PEER_PAYLOADS, FEATURE_LEVEL_MAX,
};

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

/// The cluster feature level this replica applied, readable without the
/// state's lock: the peer transport reads it for every message it sends.
/// Published by the state machine after it applies a raise or installs a
/// snapshot; cheap to clone (one shared atomic).
#[derive(Debug, Clone)]
pub struct ClusterLevel(Arc<AtomicU32>);

impl Default for ClusterLevel {
    /// The base level: what a replica knows before it applied anything.
    fn default() -> Self {
        ClusterLevel::new(FEATURE_LEVEL_BASE)
    }
}

impl ClusterLevel {
    /// A level of `level`, not shared with any state machine.
    pub fn new(level: u32) -> Self {
        ClusterLevel(Arc::new(AtomicU32::new(level)))
    }

    /// The level applied last.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Publishes the applied level (levels only rise; a lower one is
    /// ignored).
    pub(crate) fn publish(&self, level: u32) {
        self.0.fetch_max(level, Ordering::AcqRel);
    }

    /// How this replica encodes what it sends to its peers: in the binary
    /// encoding once the cluster reached
    /// [`FEATURE_LEVEL_BINARY_PEER_PAYLOADS`] (every voter then decodes
    /// it), as JSON before.
    pub fn peer_encoding(&self) -> Encoding {
        if self.get() >= FEATURE_LEVEL_BINARY_PEER_PAYLOADS {
            Encoding::BinaryV1
        } else {
            Encoding::Json
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_get_json_until_the_cluster_reaches_the_binary_level() {
        let level = ClusterLevel::default();
        assert_eq!(level.peer_encoding(), Encoding::Json);
        level.publish(FEATURE_LEVEL_BINARY_PEER_PAYLOADS - 1);
        assert_eq!(level.peer_encoding(), Encoding::Json);
        let shared = level.clone();
        shared.publish(FEATURE_LEVEL_BINARY_PEER_PAYLOADS);
        assert_eq!(level.peer_encoding(), Encoding::BinaryV1);
        level.publish(FEATURE_LEVEL_BASE);
        assert_eq!(
            level.get(),
            FEATURE_LEVEL_BINARY_PEER_PAYLOADS,
            "never lowered"
        );
    }
}
