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

/// Planted bug (e): when set, receipts are stamped from the *proposer's*
/// clock (`RequestMeta::time_ms`, the clock of the replica that took the
/// request) instead of the replicated clock: their creation and settlement
/// times, from which their retention counts. A replica whose clock lags
/// by more than the retention makes its requests' receipts expire at the
/// next tick, so a retry of such a request id is executed again.
#[cfg(feature = "planted-bugs")]
pub static RECEIPTS_FROM_PROPOSER_CLOCK: AtomicBool = AtomicBool::new(false);

/// True when planted bug (e) is on. Always false without the feature.
#[inline]
pub fn receipts_from_proposer_clock() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        RECEIPTS_FROM_PROPOSER_CLOCK.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

/// Planted bug (f): when set, the peer service accepts a *forwarded*
/// leader-internal command (a completion, an observation, a tick) from the
/// wire, as if a member's write could complete an operation the leader's
/// executor never performed. The switch lives here, at the bottom of the
/// crates, so that `palisade-raft` (which refuses such commands) can read it.
#[cfg(feature = "planted-bugs")]
pub static ACCEPT_FORWARDED_INTERNAL: AtomicBool = AtomicBool::new(false);

/// True when planted bug (f) is on. Always false without the feature.
#[inline]
pub fn accept_forwarded_internal() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        ACCEPT_FORWARDED_INTERNAL.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
