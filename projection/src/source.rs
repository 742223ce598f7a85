//! Where the projector reads from: a replica's committed log and applied
//! state, behind [`ReplicaSource`].
//!
//! [`RaftReplica`] is the production source (the replica's redb log through
//! a [`LogReader`] and its state through a [`StateHandle`]);
//! [`MemoryReplica`](crate::memory::MemoryReplica) is an in-process one for
//! tests and benchmarks. The projector code is the same for both.

use std::future::Future;
use std::sync::Arc;

use openraft::{EntryPayload, RaftLogReader};
use palisade_lifecycle::{Command, LogPosition, State};
use palisade_raft::{StateHandle, TypeConfig};
use palisade_storage::LogReader;
use tokio::sync::watch;

use crate::error::ProjectionError;

/// What a committed log entry carries, as far as the projection cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A lifecycle command, shared with the log's copy of the entry (see
    /// `palisade_raft::TypeConfig`).
    Command(Arc<Command>),
    /// A leader's blank entry, or a membership change: no lifecycle effect.
    NotACommand,
}

/// One committed log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its index and term.
    pub position: LogPosition,
    /// What it carries.
    pub payload: Payload,
}

/// A replica, as the projector sees it.
pub trait ReplicaSource: Send + Sync + 'static {
    /// A receiver of the replica's applied index (entries up to it are
    /// committed and applied to the replica's state).
    fn applied_index(&self) -> watch::Receiver<u64>;

    /// A copy of the replica's applied state and the position of the last
    /// entry applied to it, read together (`index == 0` before any).
    fn applied_state(&self) -> (State, LogPosition);

    /// The committed entries `start..=end` (`end` at most the applied
    /// index), in order and without a gap. If the log no longer holds
    /// `start` (compacted behind a snapshot), fails with
    /// [`ProjectionError::Compacted`].
    fn read_committed(
        &self,
        start: u64,
        end: u64,
    ) -> impl Future<Output = Result<Vec<LogRecord>, ProjectionError>> + Send;
}

/// Checks that `records` are exactly `start..=end`: a log that starts above
/// `start` was compacted; anything else missing is a broken log.
pub(crate) fn check_range(
    records: &[LogRecord],
    start: u64,
    end: u64,
) -> Result<(), ProjectionError> {
    let first = records.first().map(|record| record.position.index);
    if first != Some(start) {
        return Err(ProjectionError::Compacted {
            index: start,
            first_available: first,
        });
    }
    for (offset, record) in records.iter().enumerate() {
        let expected = start + offset as u64;
        if record.position.index != expected {
            return Err(ProjectionError::Log(format!(
                "the log has a gap: expected entry {expected}, found {}",
                record.position.index
            )));
        }
    }
    let last = records.last().map_or(start, |record| record.position.index);
    if last != end {
        return Err(ProjectionError::Log(format!(
            "the log ends at {last}, before the applied index {end}"
        )));
    }
    Ok(())
}

/// The production source: one gateway replica's Raft log and state.
///
/// Take the [`LogReader`] from the `LogStore` before handing the store to
/// `Raft::new` (`log_store.reader()`); it shares the open database.
#[derive(Clone)]
pub struct RaftReplica {
    state: StateHandle,
    log: LogReader<TypeConfig>,
}

impl RaftReplica {
    /// A source reading `log` and `state` of the same replica.
    pub fn new(state: StateHandle, log: LogReader<TypeConfig>) -> Self {
        Self { state, log }
    }
}

impl ReplicaSource for RaftReplica {
    fn applied_index(&self) -> watch::Receiver<u64> {
        self.state.subscribe()
    }

    fn applied_state(&self) -> (State, LogPosition) {
        self.state.read(|applied| {
            let position =
                applied
                    .last_applied
                    .as_ref()
                    .map_or(LogPosition { index: 0, term: 0 }, |log_id| LogPosition {
                        index: log_id.index,
                        term: log_id.leader_id.term,
                    });
            (applied.state.clone(), position)
        })
    }

    async fn read_committed(
        &self,
        start: u64,
        end: u64,
    ) -> Result<Vec<LogRecord>, ProjectionError> {
        let mut reader = self.log.clone();
        let entries = reader
            .try_get_log_entries(start..=end)
            .await
            .map_err(|error| ProjectionError::Log(error.to_string()))?;
        let records: Vec<LogRecord> = entries
            .into_iter()
            .map(|entry| LogRecord {
                position: LogPosition {
                    index: entry.log_id.index,
                    term: entry.log_id.leader_id.term,
                },
                payload: match entry.payload {
                    EntryPayload::Normal(command) => Payload::Command(command),
                    EntryPayload::Blank | EntryPayload::Membership(_) => Payload::NotACommand,
                },
            })
            .collect();
        check_range(&records, start, end)?;
        Ok(records)
    }
}
