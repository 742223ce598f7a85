//! [`MemoryReplica`]: an in-process replica — a log of committed entries
//! and the state they produce — for tests, benchmarks and the chaos
//! harness. It applies through the same pure `palisade_lifecycle::apply`
//! as a real replica, and can compact its log like a real one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use palisade_lifecycle::{Command, LogPosition, Response, State};
use tokio::sync::watch;

use crate::error::ProjectionError;
use crate::source::{LogRecord, Payload, ReplicaSource, check_range};

struct Inner {
    /// Entries after `purged`, in order.
    log: VecDeque<LogRecord>,
    /// Index of the last entry compacted away (0: none).
    purged: u64,
    state: State,
    last: LogPosition,
    term: u64,
}

/// An in-process replica. Cloning shares it. A `std::sync::Mutex` guards
/// it: every critical section is a short in-memory step that never awaits.
#[derive(Clone)]
pub struct MemoryReplica {
    inner: Arc<Mutex<Inner>>,
    applied: watch::Sender<u64>,
}

impl Default for MemoryReplica {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryReplica {
    /// An empty log at term 1 and the initial state.
    pub fn new() -> Self {
        let (applied, _) = watch::channel(0);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                log: VecDeque::new(),
                purged: 0,
                state: State::new(),
                last: LogPosition { index: 0, term: 0 },
                term: 1,
            })),
            applied,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Like [`MemoryReplica::commit`], with an unbound completion or
    /// observation first bound to its sandbox as it is now
    /// (`Command::bound_to`), as the executor would bind it.
    pub fn commit_bound(&self, command: Command) -> (LogPosition, Response) {
        let command = {
            let inner = self.lock();
            command.bound_to(&inner.state, inner.term)
        };
        self.commit(command)
    }

    /// Commits and applies `command` as the next entry; returns its position
    /// and response.
    pub fn commit(&self, command: Command) -> (LogPosition, Response) {
        let (position, response) = {
            let mut inner = self.lock();
            let position = LogPosition {
                index: inner.last.index + 1,
                term: inner.term,
            };
            let response = palisade_lifecycle::apply(&mut inner.state, position, &command);
            inner.log.push_back(LogRecord {
                position,
                payload: Payload::Command(command.into()),
            });
            inner.last = position;
            (position, response)
        };
        self.applied.send_replace(position.index);
        (position, response)
    }

    /// Commits a new term's blank entry (what a new leader appends).
    pub fn elect(&self) -> LogPosition {
        let position = {
            let mut inner = self.lock();
            inner.term += 1;
            let position = LogPosition {
                index: inner.last.index + 1,
                term: inner.term,
            };
            inner.log.push_back(LogRecord {
                position,
                payload: Payload::NotACommand,
            });
            inner.last = position;
            position
        };
        self.applied.send_replace(position.index);
        position
    }

    /// Drops every entry up to `index` (as a purge behind a snapshot does).
    pub fn compact(&self, index: u64) {
        let mut inner = self.lock();
        while inner
            .log
            .front()
            .is_some_and(|record| record.position.index <= index)
        {
            inner.log.pop_front();
        }
        inner.purged = inner.purged.max(index.min(inner.last.index));
    }

    /// A copy of the state.
    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Runs `read` on the state.
    pub fn read<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        read(&self.lock().state)
    }

    /// The last committed position.
    pub fn last(&self) -> LogPosition {
        self.lock().last
    }

    /// Indexes of the entries still in the log (not compacted) that are
    /// lifecycle commands, in order.
    pub fn command_indexes(&self) -> Vec<u64> {
        self.lock()
            .log
            .iter()
            .filter(|record| matches!(record.payload, Payload::Command(_)))
            .map(|record| record.position.index)
            .collect()
    }
}

impl ReplicaSource for MemoryReplica {
    fn applied_index(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    fn applied_state(&self) -> (State, LogPosition) {
        let inner = self.lock();
        (inner.state.clone(), inner.last)
    }

    async fn read_committed(
        &self,
        start: u64,
        end: u64,
    ) -> Result<Vec<LogRecord>, ProjectionError> {
        let records: Vec<LogRecord> = {
            let inner = self.lock();
            if start <= inner.purged {
                return Err(ProjectionError::Compacted {
                    index: start,
                    first_available: inner.log.front().map(|record| record.position.index),
                });
            }
            let offset = (start - inner.purged - 1) as usize;
            let count = (end + 1).saturating_sub(start) as usize;
            inner.log.iter().skip(offset).take(count).cloned().collect()
        };
        check_range(&records, start, end)?;
        Ok(records)
    }
}
