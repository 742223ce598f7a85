//! TEST-ONLY planted bugs, so that the chaos harness can prove its checkers
//! catch them (`palisade-chaos`, issue 7). The switches are compiled in
//! only with the cargo feature `planted-bugs` (off by default, enabled only
//! by the chaos crate's tests and its `--plant` flag), and even then every
//! switch is off until a test turns it on at run time. Without the feature
//! both functions are a constant `false`.
//!
//! The others live in `palisade_lifecycle::planted`: (a) "skip the
//! expected-id check at apply", (e) "receipts stamped from the proposer's
//! clock" and (f) "a forwarded leader-internal command accepted" (read by
//! `palisade_raft`'s peer service); (d) "the driver's fence check off" is
//! the chaos harness's own in-memory host (`palisade_chaos::host`).

#[cfg(feature = "planted-bugs")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Planted bug (b): when set, the executor drops its term fence — before an
/// effect or a completion it confirms that this replica leads, but not
/// that it still leads in the term the work began in, it proposes
/// completions without `with_leader(term)`, and it lets its old term's
/// effect tasks run on instead of aborting them. A replica that lost
/// leadership and won it back then carries out its old term's effects and
/// completions.
#[cfg(feature = "planted-bugs")]
pub static SKIP_TERM_FENCE: AtomicBool = AtomicBool::new(false);

/// Planted bug (c): when set, DeleteSandbox answers "deleted" as soon as
/// its `BeginDelete` entry commits, before the driver removed anything and
/// before the sandbox left the state; and the executor starts the removal
/// [`EARLY_ACK_CLEANUP_DELAY`] later, as behind a slow driver.
#[cfg(feature = "planted-bugs")]
pub static ACK_DELETE_BEFORE_CLEANUP: AtomicBool = AtomicBool::new(false);

/// How long planted bug (c) holds a removal back. Without it the removal
/// races the early answer and, with a fast driver, ends within a few
/// milliseconds of it: the host's process table, sampled every 50 ms,
/// then saw an execution after an acknowledged delete in only some
/// campaigns, and the test that requires it was flaky. Four sample
/// intervals make what the early answer hides visible to every sampler.
pub const EARLY_ACK_CLEANUP_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// True when planted bug (b) is on. Always false without the feature.
#[inline]
pub fn skip_term_fence() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        SKIP_TERM_FENCE.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

/// True when planted bug (c) is on. Always false without the feature.
#[inline]
pub fn ack_delete_before_cleanup() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        ACK_DELETE_BEFORE_CLEANUP.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
