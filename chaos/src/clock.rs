//! The time base of a campaign: microseconds since its start, read from one
//! monotonic clock by the workload (invocations and answers), the shared
//! host (driver effects) and the nemesis (faults), so that their records
//! can be ordered against each other.
//!
//! It is tokio's clock, which is the system's monotonic clock except in
//! the deterministic simulation (`--sim`), whose paused runtime makes it
//! simulated time: the same seed then records the same timestamps.

use std::sync::Arc;

use tokio::time::Instant;

/// A campaign's monotonic clock; cheap to clone.
#[derive(Clone, Debug)]
pub struct Clock {
    start: Arc<Instant>,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self {
            start: Arc::new(Instant::now()),
        }
    }

    /// Microseconds since the clock started.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Formats microseconds as seconds with millisecond precision ("12.345s").
pub fn seconds(us: u64) -> String {
    format!("{}.{:03}s", us / 1_000_000, (us / 1_000) % 1_000)
}

/// The wall-clock time a simulation starts at (2026-01-01T00:00:00Z), ms.
pub const SIM_EPOCH_MS: i64 = 1_767_225_600_000;

/// A replica's wall clock under the `clock` nemesis: the system clock plus
/// an offset the nemesis sets (a skew, or a jump when it changes at once).
/// Installed in every in-process replica through
/// [`palisade_gateway::node::NodeHooks::clock`]. In the simulation the
/// base is simulated time from [`SIM_EPOCH_MS`] instead of the system
/// clock ([`SkewedClock::simulated`]).
#[derive(Debug, Default)]
pub struct SkewedClock {
    offset_ms: std::sync::atomic::AtomicI64,
    /// The simulation's start (`None`: the system clock).
    simulated_since: Option<Instant>,
}

impl SkewedClock {
    /// A clock reading simulated time: [`SIM_EPOCH_MS`] at `since`.
    pub fn simulated(since: Instant) -> Self {
        Self {
            offset_ms: Default::default(),
            simulated_since: Some(since),
        }
    }

    /// Sets the offset (milliseconds, may be negative).
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms
            .store(offset_ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// The offset now.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl palisade_gateway::clock::WallClock for SkewedClock {
    fn now_ms(&self) -> i64 {
        let base = match self.simulated_since {
            Some(since) => SIM_EPOCH_MS
                .saturating_add(since.elapsed().as_millis().min(i64::MAX as u128) as i64),
            None => palisade_gateway::clock::system_now_ms(),
        };
        base.saturating_add(self.offset_ms())
    }
}
