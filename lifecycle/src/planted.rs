//! TEST-ONLY planted bugs, so that the chaos harness can prove its checkers
//! catch them (`palisade-chaos`, issue 7). Nothing here exists in a normal
//! build: the switches are compiled in only with the cargo feature
//! `planted-bugs` (off by default, enabled only by the chaos crate's tests
//! and its `--plant` flag), and even then every switch is off until a test
//! turns it on at run time. Without the feature, [`skip_expected_id_check`]
//! is a constant `false` and `apply` is exactly as pure as documented: the
//! switch is process-global state, which a replicated state machine must
//! never have outside a test.

#[cfg(feature = "planted-bugs")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Planted bug (a): when set, `BeginDelete` ignores its expected sandbox
/// id, so a delete by name removes whatever the name resolves to — the
/// same-name race Palisade exists to prevent (DESIGN.md 1.1).
#[cfg(feature = "planted-bugs")]
pub static SKIP_EXPECTED_ID_CHECK: AtomicBool = AtomicBool::new(false);

/// True when planted bug (a) is on. Always false without the feature.
#[inline]
pub fn skip_expected_id_check() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        SKIP_EXPECTED_ID_CHECK.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
