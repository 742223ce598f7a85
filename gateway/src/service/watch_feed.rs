//! What every WatchSandboxes stream of one replica shares: the watcher
//! limit (`--watchers-max`) and the change feed encoded once.
//!
//! - Limit: a watch takes a slot for as long as its stream lives; one
//!   beyond the limit is refused before anything starts (RESOURCE_EXHAUSTED,
//!   reason OVERLOADED, metadata `watchers_max`, a RetryInfo delay).
//! - Encoded once: an applied sandbox change is turned into its API event
//!   (`sandbox_to_proto`: copying the sandbox, minting its execution token)
//!   once, by whichever watcher asks first, and kept here behind an `Arc`
//!   for the others; a change therefore costs O(1) conversions, not one per
//!   watcher. Only the most recent [`ENCODED_EVENTS_MAX`] are kept; a watcher
//!   further behind converts what it is missing itself (it pays for its own
//!   lag, the others do not).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use palisade_metrics::Metrics;
use palisade_proto::v1;
use palisade_raft::{SandboxChange, StateHandle};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::convert::sandbox_to_proto;

/// Watch streams one replica serves at once, unless configured.
pub const WATCHERS_MAX_DEFAULT: usize = 1_024;

/// The retry delay a refused watch is given (RetryInfo): watches are long
/// lived, a slot frees more slowly than a request's.
pub const WATCHERS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Most encoded changes kept for the watchers to share.
pub const ENCODED_EVENTS_MAX: usize = 4_096;

/// One applied change, encoded for the API, with what a watcher filters on.
#[derive(Debug)]
pub(super) struct EncodedEvent {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The sandbox's workspace.
    pub workspace: String,
    /// The event as sent (its `resource_version` is the entry's index).
    pub event: v1::SandboxEvent,
}

/// The shared encoded changes: every change at an index in
/// (`floor`, `top`] is in `events`, oldest first.
#[derive(Default)]
struct Encoded {
    /// `None` until the first watcher asked.
    range: Option<(u64, u64)>,
    events: VecDeque<Arc<EncodedEvent>>,
}

/// The watcher slots and the shared feed; cheap to clone.
#[derive(Clone)]
pub struct WatchFeed {
    watchers_max: usize,
    slots: Arc<Semaphore>,
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
    /// A feed serving at most `watchers_max` watch streams at once.
    pub fn new(watchers_max: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            watchers_max,
            slots: Arc::new(Semaphore::new(watchers_max)),
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
                            floor = dropped.event.resource_version;
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
            .partition_point(|event| event.event.resource_version <= from);
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
        event: v1::SandboxEvent {
            r#type: kind as i32,
            sandbox: Some(sandbox_to_proto(&event.sandbox, cluster)),
            resource_version: event.index,
        },
    }
}
