//! The replica's wall clock, through an injectable source: what a replica
//! reads when it stamps a proposer time into a command (`RequestMeta::time_ms`,
//! the `Tick` a leader proposes, audit times). Production replicas use
//! [`SystemClock`]; the chaos harness installs a skewed or jumping clock per
//! replica ([`crate::node::NodeHooks::clock`]) to show that nothing the
//! cluster decides depends on one replica's clock: apply stamps every time
//! in the state from the replicated clock (`State::clock_ms`).

use std::fmt::Debug;

/// A source of wall-clock time, milliseconds since the Unix epoch.
pub trait WallClock: Send + Sync + Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_now_ms()
    }
}

/// The operating system's clock, milliseconds since the Unix epoch (0
/// before the epoch).
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
