//! What the projection shows operators: [`ProjectionStatus`], and how its
//! lag in milliseconds is measured.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::time::Instant;

/// Most applied-index samples kept for measuring lag in milliseconds.
/// Beyond it new samples are dropped, so a projection more than this many
/// apply batches behind under-reports its lag in milliseconds (its lag in
/// entries stays exact).
pub const LAG_SAMPLES_MAX: usize = 4_096;

/// What the projector on this replica is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProjectorState {
    /// Not projecting (this replica does not lead); watching the
    /// checkpoint.
    #[default]
    Standby,
    /// Loading the shadow state and replaying the log up to the checkpoint.
    Preparing,
    /// Projecting committed entries.
    Projecting,
    /// Rebuilding the projection from the replica's state (the log was
    /// compacted past the checkpoint).
    Resyncing,
    /// The last attempt failed (see `last_error`); retrying with backoff.
    Retrying,
}

impl ProjectorState {
    /// Lower-case name, as shown by `palisade cluster status`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectorState::Standby => "standby",
            ProjectorState::Preparing => "preparing",
            ProjectorState::Projecting => "projecting",
            ProjectorState::Resyncing => "resyncing",
            ProjectorState::Retrying => "retrying",
        }
    }
}

/// The projection as seen from one replica. Read it with
/// [`Projection::status`](crate::Projection::status).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectionStatus {
    /// This replica.
    pub node_id: u64,
    /// What its projector does.
    pub state: ProjectorState,
    /// The checkpoint as last seen: the projection reflects the log up to
    /// this index.
    pub projected_index: u64,
    /// Term of that entry.
    pub projected_term: u64,
    /// This replica's applied index.
    pub applied_index: u64,
    /// `applied_index - projected_index`.
    pub lag_entries: u64,
    /// How long ago the oldest entry not yet projected was applied on this
    /// replica (0 when caught up).
    pub lag_ms: u64,
    /// Batches this replica committed.
    pub batches: u64,
    /// Events this replica inserted.
    pub events: u64,
    /// Batches rolled back because another projector moved the checkpoint.
    pub conflicts: u64,
    /// Resyncs this replica did.
    pub resyncs: u64,
    /// Failed attempts (PostgreSQL down or slow, log read errors).
    pub failures: u64,
    /// Entries in the last committed batch.
    pub last_batch_entries: u64,
    /// Duration of the last committed batch transaction.
    pub last_batch_ms: u64,
    /// The last error, until the next success.
    pub last_error: Option<String>,
}

impl fmt::Display for ProjectionStatus {
    /// One line: `projecting at 1234 (lag 2 entries, 5 ms)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {} (lag {} entries, {} ms)",
            self.state.as_str(),
            self.projected_index,
            self.lag_entries,
            self.lag_ms
        )?;
        if let Some(error) = &self.last_error {
            write!(f, "; last error: {error}")?;
        }
        Ok(())
    }
}

/// When each applied index was first seen, to turn a lag in entries into a
/// lag in time. A `std::sync::Mutex`: every critical section is a few
/// deque operations and never awaits.
#[derive(Debug, Default)]
pub(crate) struct LagSamples {
    samples: Mutex<VecDeque<(u64, Instant)>>,
}

impl LagSamples {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Instant)>> {
        self.samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The replica applied up to `index` at `at`.
    pub fn record(&self, index: u64, at: Instant) {
        let mut samples = self.lock();
        if samples.len() < LAG_SAMPLES_MAX && samples.back().is_none_or(|(last, _)| index > *last) {
            samples.push_back((index, at));
        }
    }

    /// The projection reached `projected`: older samples are no longer
    /// needed.
    pub fn forget_through(&self, projected: u64) {
        let mut samples = self.lock();
        while samples
            .front()
            .is_some_and(|(index, _)| *index <= projected)
        {
            samples.pop_front();
        }
    }

    /// Milliseconds since the first entry above `projected` was applied.
    pub fn lag_ms(&self, projected: u64, now: Instant) -> u64 {
        let samples = self.lock();
        samples
            .iter()
            .find(|(index, _)| *index > projected)
            .map_or(0, |(_, at)| {
                u64::try_from(now.saturating_duration_since(*at).as_millis()).unwrap_or(u64::MAX)
            })
    }
}
