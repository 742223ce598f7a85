//! TEST-ONLY planted bug, so that the chaos harness can prove its checkers
//! catch it (`palisade-chaos`, issue 15 item 7). Compiled in only with the
//! cargo feature `planted-bugs` (off by default, enabled only by the chaos
//! crate's tests and its `--plant` flag), and even then off until a test
//! turns it on at run time. Without the feature [`save_older_snapshot`] is
//! a constant `false`.

#[cfg(feature = "planted-bugs")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Planted bug (g): when set, [`SnapshotFiles::save`](crate::SnapshotFiles::save)
/// replaces the snapshot in place even when the offered one covers less of
/// the log — a snapshot build that finishes after a newer snapshot was
/// installed from the leader puts the older state back on disk, and the
/// replica's next restart goes back in time (over a log already purged
/// past it).
#[cfg(feature = "planted-bugs")]
pub static SAVE_OLDER_SNAPSHOT: AtomicBool = AtomicBool::new(false);

/// True when planted bug (g) is on. Always false without the feature.
#[inline]
pub fn save_older_snapshot() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        SAVE_OLDER_SNAPSHOT.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
