//! What every WatchSandboxes stream of one replica shares: the watcher
//! limit (`--watchers-max`), the send budget
//! (`--watch-events-per-second-max`) and the change feed encoded once.
//!
//! - Limit: a watch takes a slot for as long as its stream lives; one
//!   beyond the limit is refused before anything starts (RESOURCE_EXHAUSTED,
//!   reason OVERLOADED, metadata `watchers_max`, a RetryInfo delay).
//! - Send budget: the changes sent to all watch streams together are
//!   paced to at most the configured number per second (a burst of up to
//!   a second's worth, at most [`WATCH_BURST_EVENTS_MAX`], goes at once);
//!   a stream over it waits its turn, first come first served. Each change
//!   costs once per watcher (a copy, the wire encoding, the HTTP/2 frame,
//!   the socket) and a client's HTTP/2 window lets a slow watcher take
//!   megabytes of changes before it reads any: 500 watchers opening at
//!   once during a write load took most of the replica's CPU for seconds
//!   while their windows filled (the load test's small reads waited
//!   200-450 ms then, 60 ms without watchers). Paced, fan-out costs at
//!   most a fixed share of the replica whatever the number of watchers;
//!   watchers that want more than their share fall behind, and once
//!   further behind than the retained changes they are told to list again
//!   (RESOURCE_VERSION_TOO_OLD). The listing a watch starts with is not
//!   paced: it is one copy per watch, not one per change.
//! - Encoded once: an applied sandbox change is turned into its API event
//!   (`sandbox_to_proto`: copying the sandbox, minting its execution token)
//!   and that into its wire encoding once, by whichever watcher asks
//!   first, and kept here behind an `Arc` for the others; every stream
//!   sends those bytes as they are (`EncodedSandboxEvent`), so a change
//!   costs O(1) conversions and encodings, not one per watcher (what is
//!   left per watcher is the HTTP/2 frame and the socket). Only the most
//!   recent [`ENCODED_EVENTS_MAX`] are kept; a watcher further behind
//!   converts what it is missing itself (it pays for its own lag, the
//!   others do not).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use palisade_metrics::Metrics;
use palisade_proto::encoded::EncodedSandboxEvent;
use palisade_proto::v1;
use palisade_raft::{SandboxChange, StateHandle};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::convert::sandbox_to_proto;

/// Watch streams one replica serves at once, unless configured.
pub const WATCHERS_MAX_DEFAULT: usize = 1_024;

/// The retry delay a refused watch is given (RetryInfo): watches are long
/// lived, a slot frees more slowly than a request's.
pub const WATCHERS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Most encoded changes kept for the watchers to share.
pub const ENCODED_EVENTS_MAX: usize = 4_096;

/// Changes one replica sends to all its watch streams together per second,
/// unless configured (`--watch-events-per-second-max`): a few tenths of one
/// of this machine's cores (measured with `palisade-load`), and four times
/// the change rate a cluster sustains at its peak, so that a few watchers
/// following every change never wait.
pub const WATCH_EVENTS_PER_SECOND_MAX_DEFAULT: u64 = 20_000;

/// Most changes sent at once after the send budget was left unused.
pub const WATCH_BURST_EVENTS_MAX: u64 = 1_000;

/// One applied change, encoded for the API, with what a watcher filters on.
#[derive(Debug)]
pub(super) struct EncodedEvent {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The sandbox's workspace.
    pub workspace: String,
    /// The event's `resource_version`: the entry's index.
    pub resource_version: u64,
    /// The event as sent, in its wire encoding: every watcher's stream
    /// sends these bytes (a reference to them), none encodes it again.
    pub wire: EncodedSandboxEvent,
}

/// The shared encoded changes: every change at an index in
/// (`floor`, `top`] is in `events`, oldest first.
#[derive(Default)]
struct Encoded {
    /// `None` until the first watcher asked.
    range: Option<(u64, u64)>,
    events: VecDeque<Arc<EncodedEvent>>,
}

/// The watch streams' send budget (see the module doc), a generic cell
/// rate algorithm: each batch of changes reserves its place on a timeline
/// that advances `per_event` per change, and waits until its place is no
/// more than `burst` ahead of now. First come, first served; one sleep per
/// batch, O(1) under the lock.
#[derive(Debug)]
struct SendBudget {
    per_event: Duration,
    burst: Duration,
    /// When every change reserved so far is paid for.
    paid_until: Mutex<Option<Instant>>,
}

impl SendBudget {
    fn new(events_per_second: u64) -> Self {
        let events_per_second = events_per_second.max(1);
        let per_event =
            Duration::from_secs(1) / u32::try_from(events_per_second).unwrap_or(u32::MAX);
        let burst_events = events_per_second.min(WATCH_BURST_EVENTS_MAX) as u32;
        Self {
            per_event,
            burst: per_event * burst_events,
            paid_until: Mutex::new(None),
        }
    }

    /// Reserves the sending of `events` changes at `now`: when they may be
    /// sent, if that is later than `now`.
    fn reserve(&self, events: usize, now: Instant) -> Option<Instant> {
        let mut paid_until = self
            .paid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let start = paid_until.map_or(now, |paid_until| paid_until.max(now));
        let events = u32::try_from(events).unwrap_or(u32::MAX);
        let until = start + self.per_event.saturating_mul(events);
        *paid_until = Some(until);
        until
            .checked_sub(self.burst)
            .filter(|&send_at| send_at > now)
    }
}

/// The watcher slots, the send budget and the shared feed; cheap to clone.
#[derive(Clone)]
pub struct WatchFeed {
    watchers_max: usize,
    slots: Arc<Semaphore>,
    budget: Arc<SendBudget>,
    events_per_second_max: u64,
    encoded: Arc<Mutex<Encoded>>,
    /// `watch_streams` and `watch_events_encoded`.
    metrics: Arc<Metrics>,
}

/// A watch stream's slot, released when the stream ends.
pub(super) struct WatcherSlot {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.metrics.rpc.watch_streams.dec();
    }
}

impl WatchFeed {
    /// A feed serving at most `watchers_max` watch streams at once, which
    /// together are sent at most `events_per_second_max` changes a second.
    pub fn new(watchers_max: usize, events_per_second_max: u64, metrics: Arc<Metrics>) -> Self {
        Self {
            watchers_max,
            slots: Arc::new(Semaphore::new(watchers_max)),
            budget: Arc::new(SendBudget::new(events_per_second_max)),
            events_per_second_max,
            encoded: Arc::default(),
            metrics,
        }
    }

    /// The limit.
    pub fn watchers_max(&self) -> usize {
        self.watchers_max
    }

    /// Watch streams open now.
    pub fn watchers(&self) -> usize {
        self.watchers_max - self.slots.available_permits()
    }

    /// The send budget, changes per second.
    pub fn events_per_second_max(&self) -> u64 {
        self.events_per_second_max
    }

    /// Waits until `events` changes may be sent to one watch stream (see
    /// "Send budget" in the module doc).
    pub(super) async fn before_sending(&self, events: usize) {
        if events == 0 {
            return;
        }
        if let Some(send_at) = self.budget.reserve(events, Instant::now()) {
            self.metrics.rpc.watch_events_delayed.inc_by(events as u64);
            tokio::time::sleep_until(send_at).await;
        }
    }

    /// A slot for a new watch stream, or the refusal to answer with.
    pub(super) fn enter(&self) -> Result<WatcherSlot, tonic::Status> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.metrics.rpc.watch_streams.inc();
                Ok(WatcherSlot {
                    _permit: permit,
                    metrics: self.metrics.clone(),
                })
            }
            Err(_) => Err(crate::errors::watchers_exhausted(
                self.watchers_max,
                WATCHERS_RETRY_AFTER,
            )),
        }
    }

    /// The first `limit` changes applied after `from`, encoded, oldest
    /// first; `None` if some are no longer retained (the watcher must list
    /// again). A watcher takes its changes in batches of `limit`: one far
    /// behind (up to [`WATCH_EVENTS_RETAINED_MAX`] changes, each encoded for
    /// it alone when it is behind the shared feed) must not hold them all
    /// while it reads slowly.
    ///
    /// [`WATCH_EVENTS_RETAINED_MAX`]: palisade_raft::state_machine::WATCH_EVENTS_RETAINED_MAX
    pub(super) fn after(
        &self,
        state: &StateHandle,
        from: u64,
        limit: usize,
    ) -> Option<Vec<Arc<EncodedEvent>>> {
        let mut encoded = self.encoded.lock().unwrap_or_else(PoisonError::into_inner);
        let (floor, top) = *encoded.range.get_or_insert((from, from));
        if from < floor {
            // Further behind than what is shared: convert for this one
            // watcher only, leaving the shared feed where it is.
            drop(encoded);
            let events = state.events_after(from, limit)?;
            let cluster = state.read(|applied| applied.state.cluster.clone());
            return Some(
                events
                    .iter()
                    .map(|event| Arc::new(self.encode(event, cluster.as_ref())))
                    .collect(),
            );
        }
        match state.events_after(top, usize::MAX) {
            Some(new) => {
                if !new.is_empty() {
                    let cluster = state.read(|applied| applied.state.cluster.clone());
                    let mut floor = floor;
                    let mut top = top;
                    for event in &new {
                        top = event.index;
                        encoded
                            .events
                            .push_back(Arc::new(self.encode(event, cluster.as_ref())));
                        if encoded.events.len() > ENCODED_EVENTS_MAX
                            && let Some(dropped) = encoded.events.pop_front()
                        {
                            floor = dropped.resource_version;
                        }
                    }
                    encoded.range = Some((floor, top));
                }
            }
            None => {
                // The retained changes moved past the shared feed (a
                // snapshot was installed): start it again from here.
                let applied = state.applied_index();
                encoded.events.clear();
                encoded.range = Some((applied, applied));
                if from < applied {
                    drop(encoded);
                    return self.after(state, from, limit);
                }
            }
        }
        let (floor, _) = encoded.range.unwrap_or_default();
        if from < floor {
            // Trimmed past `from` just now (a burst of changes).
            drop(encoded);
            return self.after(state, from, limit);
        }
        let start = encoded
            .events
            .partition_point(|event| event.resource_version <= from);
        Some(encoded.events.range(start..).take(limit).cloned().collect())
    }

    fn encode(
        &self,
        event: &palisade_raft::state_machine::SandboxEvent,
        cluster: Option<&palisade_lifecycle::ClusterIdentity>,
    ) -> EncodedEvent {
        encode(&self.metrics, event, cluster)
    }
}

/// A change as the API sends it.
fn encode(
    metrics: &Metrics,
    event: &palisade_raft::state_machine::SandboxEvent,
    cluster: Option<&palisade_lifecycle::ClusterIdentity>,
) -> EncodedEvent {
    metrics.rpc.watch_events_encoded.inc();
    let kind = match event.change {
        SandboxChange::Added => v1::SandboxEventType::Added,
        SandboxChange::Modified => v1::SandboxEventType::Modified,
        SandboxChange::Deleted => v1::SandboxEventType::Deleted,
    };
    EncodedEvent {
        sandbox_id: event.sandbox.id.clone(),
        workspace: event.sandbox.workspace.clone(),
        resource_version: event.index,
        wire: EncodedSandboxEvent::new(&v1::SandboxEvent {
            r#type: kind as i32,
            sandbox: Some(sandbox_to_proto(&event.sandbox, cluster)),
            resource_version: event.index,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unused_budget_lets_a_burst_through_at_once() {
        let budget = SendBudget::new(1_000);
        let now = Instant::now();
        // A second's worth (1,000 changes) goes at once...
        for _ in 0..1_000 / 50 {
            assert_eq!(budget.reserve(50, now), None);
        }
        // ... the next change waits its 1 ms.
        assert_eq!(budget.reserve(1, now), Some(now + Duration::from_millis(1)));
    }

    #[test]
    fn batches_over_the_budget_wait_in_turn_at_its_rate() {
        let budget = SendBudget::new(20_000);
        let now = Instant::now();
        // The burst: 1,000 changes (50 ms at 20,000 a second).
        assert_eq!(budget.reserve(1_000, now), None);
        // Then each batch of 64 waits 3.2 ms after the one before it,
        // first come first served, whoever asks.
        let mut previous = now;
        for _ in 0..100 {
            let send_at = budget.reserve(64, now).expect("over the budget");
            assert_eq!(send_at - previous, Duration::from_micros(3_200));
            previous = send_at;
        }
        // Later, with nothing reserved meanwhile, a burst is allowed again.
        let later = previous + Duration::from_secs(1);
        assert_eq!(budget.reserve(1_000, later), None);
    }

    #[test]
    fn a_small_budget_bursts_no_more_than_a_second_of_it() {
        let budget = SendBudget::new(10);
        let now = Instant::now();
        assert_eq!(budget.reserve(10, now), None);
        assert_eq!(budget.reserve(10, now), Some(now + Duration::from_secs(1)));
    }
}
