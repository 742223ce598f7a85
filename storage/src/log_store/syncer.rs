//! The syncer: the second thread of a [`LogStore`](super::LogStore) in
//! [`WriteMode::Thread`](super::WriteMode::Thread) (and its teller, the
//! third). It makes durable the groups the writer wrote and handed over,
//! so that the writer writes the next group while the disk syncs the last
//! one.
//!
//! # Why a second thread
//!
//! With one thread, a group commit is a strict sequence: collect the
//! queued appends, `pwrite` them, `fdatasync`, tell each append, drop its
//! pending entries; the next group waits for all of it. At 256 appends in
//! flight (`cargo bench -p palisade-storage --bench log_append`) a commit of
//! ~135 entries took ~0.30 ms, of which a bare `fdatasync` of its 69 KB is
//! ~0.15 ms: 3,370 commits/s against 6,600 bare `fdatasync`s of that size.
//! With the next group written while the disk syncs the last, and the
//! hundred wake-ups of a round done by a third thread (the teller) while
//! the syncer's next `fdatasync` runs, ~4,000 commits/s; at 16 in flight
//! 6,230 -> 6,760.
//!
//! Only a group with more writes queued behind it (or behind a group the
//! syncer still holds) is handed over: a lone write gains nothing from a
//! second thread and would wait for its wake-up (one append in flight:
//! 7,800 -> 5,800 appends/s when every group was handed over).
//!
//! # What is handed over, and the order kept
//!
//! Only a group of appends whose write needed nothing else durable (no
//! record of the database: no vote, truncation, purge or committed log id,
//! see `can_hand_over`). Every other group waits until the syncer has
//! finished everything handed to it ([`Syncer::drain`]) and is then made
//! durable on the writer thread as before: so a record still never becomes
//! durable before an append queued ahead of it, a truncation never races a
//! sync of what it cuts, and the outcomes reach openraft in the order the
//! writes were asked for.
//!
//! The syncer takes every group handed over since its last `fdatasync` and
//! syncs each segment they wrote once (a round): a round is one commit.
//! The teller then tells the round's writes in order. An `fdatasync` that
//! fails fails its round and every round after it (a later `fdatasync` may
//! succeed without the lost pages ever reaching the disk), and the
//! writer's next group with them (the store's failure is set).

use std::sync::Arc;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

use super::Completion;
use super::Shared;
use super::complete;
use crate::error::LogStoreError;
use crate::segment_log::Dirty;

/// Most groups one round takes: a bound on one round, far above what
/// openraft queues between two commits.
const ROUND_GROUPS_MAX: usize = 1_024;

/// How often [`Syncer::drain`] checks that the syncer thread is still
/// there while it waits (it is gone only if it panicked).
const DRAIN_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// A group the writer wrote and handed over: the segments to sync and the
/// writes to tell once they are durable.
pub(super) struct Written {
    pub(super) dirty: Vec<Dirty>,
    pub(super) jobs: Vec<Completion>,
    /// When the writer took the group (the commit's timing counts from the
    /// oldest group of its round).
    pub(super) started: Instant,
}

/// The writer's handle on the syncer thread.
pub(super) struct Syncer {
    groups: Option<mpsc::Sender<Written>>,
    thread: Option<std::thread::JoinHandle<()>>,
    finished: Arc<Finished>,
    /// Groups handed over so far.
    handed: u64,
}

/// How many groups the syncer has told, and a signal when that changes.
#[derive(Default)]
struct Finished {
    groups: Mutex<u64>,
    changed: Condvar,
}

impl Syncer {
    /// Starts the syncer thread of `shared`'s log.
    pub(super) fn start(shared: Arc<Shared>) -> std::io::Result<Syncer> {
        let (groups, handed) = mpsc::channel();
        let finished = Arc::new(Finished::default());
        let thread = {
            let finished = Arc::clone(&finished);
            std::thread::Builder::new()
                .name("raft-log-syncer".into())
                .spawn(move || sync_loop(&shared, &handed, &finished))?
        };
        Ok(Syncer {
            groups: Some(groups),
            thread: Some(thread),
            finished,
            handed: 0,
        })
    }

    /// Whether the syncer thread is still there (it ends only with this
    /// handle, or if it panicked).
    pub(super) fn is_running(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|thread| !thread.is_finished())
    }

    /// Hands `group` over; answers it back if the syncer is gone.
    pub(super) fn hand_over(&mut self, group: Written) -> Result<(), Written> {
        let Some(groups) = &self.groups else {
            return Err(group);
        };
        groups.send(group).map_err(|mpsc::SendError(group)| group)?;
        self.handed += 1;
        Ok(())
    }

    /// Whether every group handed over is durable and told.
    pub(super) fn is_idle(&self) -> bool {
        *self
            .finished
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            >= self.handed
    }

    /// Waits until every group handed over is durable and told (or the
    /// syncer is gone).
    pub(super) fn drain(&self) {
        let mut finished = self
            .finished
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *finished < self.handed && self.is_running() {
            finished = self
                .finished
                .changed
                .wait_timeout(finished, DRAIN_CHECK_INTERVAL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // The syncer ends after the groups already handed over.
        drop(self.groups.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the Raft log's syncer thread panicked");
        }
    }
}

/// A round the syncer made durable (or failed), for the teller.
struct Synced {
    round: Vec<Written>,
    /// The error of the round's `fdatasync`, if it failed.
    error: Option<LogStoreError>,
    /// Why an earlier round (or this one) failed: the round fails with it.
    failure: Option<String>,
}

/// The syncer thread: makes the handed groups durable in rounds until the
/// writer drops its handle, and hands each round to the teller thread.
fn sync_loop(shared: &Arc<Shared>, handed: &mpsc::Receiver<Written>, finished: &Arc<Finished>) {
    let (synced, to_tell) = mpsc::channel::<Synced>();
    let teller = {
        let shared = Arc::clone(shared);
        let finished = Arc::clone(finished);
        std::thread::Builder::new()
            .name("raft-log-teller".into())
            .spawn(move || tell_loop(&shared, &to_tell, &finished))
    };
    let teller = match teller {
        Ok(teller) => Some(teller),
        Err(error) => {
            tracing::warn!(%error, "cannot start the Raft log's teller thread; the syncer tells");
            None
        }
    };
    // Why the first failed `fdatasync` failed: every later round fails too.
    let mut failure: Option<String> = None;
    while let Ok(first) = handed.recv() {
        let mut round = vec![first];
        while round.len() < ROUND_GROUPS_MAX {
            match handed.try_recv() {
                Ok(group) => round.push(group),
                Err(_) => break,
            }
        }
        let error = match &failure {
            Some(_) => None,
            None => sync_round(&round).err(),
        };
        if let Some(error) = &error {
            let cause = error.to_string();
            shared
                .failed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(|| cause.clone());
            failure = Some(cause);
        } else if failure.is_none()
            && let Some(timings) = shared.timings.get()
        {
            timings.committed(round[0].started.elapsed());
        }
        let done = Synced {
            round,
            error,
            failure: failure.clone(),
        };
        match &teller {
            Some(_) => {
                if let Err(mpsc::SendError(done)) = synced.send(done) {
                    // The teller panicked: tell here.
                    tell(shared, done, finished);
                }
            }
            None => tell(shared, done, finished),
        }
    }
    drop(synced);
    if let Some(teller) = teller
        && teller.join().is_err()
    {
        tracing::error!("the Raft log's teller thread panicked");
    }
}

/// The teller thread: tells the writes of each synced round their outcome,
/// off the syncer's thread, so that the syncer's next `fdatasync` does not
/// wait for a hundred wake-ups and the pending map.
fn tell_loop(shared: &Shared, to_tell: &mpsc::Receiver<Synced>, finished: &Finished) {
    while let Ok(done) = to_tell.recv() {
        tell(shared, done, finished);
    }
}

/// Tells the writes of a synced round their outcome, in order.
fn tell(shared: &Shared, done: Synced, finished: &Finished) {
    let Synced {
        round,
        mut error,
        failure,
    } = done;
    let told = round.len() as u64;
    for group in round {
        // The error itself goes to the first write of the round; every
        // other write learns the cause (as the writes of a failed group do
        // on the writer thread).
        let outcome = match (error.take(), &failure) {
            (Some(error), _) => Some((0, error)),
            (None, Some(cause)) => Some((
                usize::MAX,
                LogStoreError::WriterStopped {
                    problem: format!("stopped writing after a write failed ({cause})"),
                },
            )),
            (None, None) => None,
        };
        complete(shared, group.jobs, outcome);
    }
    let mut groups = finished
        .groups
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    *groups += told;
    finished.changed.notify_all();
}

/// `fdatasync`s each segment the round's groups wrote, once.
fn sync_round(round: &[Written]) -> Result<(), LogStoreError> {
    let mut synced: Vec<&Dirty> = Vec::new();
    for dirty in round.iter().flat_map(|group| &group.dirty) {
        if !synced.iter().any(|done| done.is_same_file(dirty)) {
            dirty.sync()?;
            synced.push(dirty);
        }
    }
    Ok(())
}
