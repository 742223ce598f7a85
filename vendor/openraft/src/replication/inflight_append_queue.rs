use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;

use display_more::DisplayOptionExt;

use crate::RaftTypeConfig;
use crate::replication::inflight_append::InflightAppend;
use crate::type_config::alias::InstantOf;
use crate::type_config::alias::LogIdOf;

/// A queue tracking in-flight AppendEntries requests for measuring replication latency.
///
/// When an AppendEntries request is sent, its metadata is pushed to this queue.
/// When a response arrives with a matching log id, all requests up to and including
/// that log id are drained. The sending time of the last fully or partially acknowledged
/// request is returned for RTT calculation.
#[derive(Clone)]
pub(crate) struct InflightAppendQueue<C>
where C: RaftTypeConfig
{
    queue: Arc<Mutex<VecDeque<InflightAppend<C>>>>,
}

impl<C> InflightAppendQueue<C>
where C: RaftTypeConfig
{
    pub(crate) fn new() -> Self {
        Self {
            queue: Arc::new(Mutex::new(VecDeque::with_capacity(32))),
        }
    }

    /// Records a new in-flight AppendEntries request.
    pub(crate) fn push(&self, prev_log_id: Option<LogIdOf<C>>, last_log_id: Option<LogIdOf<C>>) {
        let mut q = self.queue.lock().unwrap();
        let inflight = InflightAppend::new(prev_log_id, last_log_id);

        tracing::debug!("Inflight queue push: {}", inflight);

        q.push_back(inflight)
    }

    /// Removes stale requests through the first request at or containing a conflict point and
    /// returns that request's sending time.
    ///
    /// At a shared boundary, the request starting at the conflict point is selected.
    pub(crate) fn drain_conflicted(&self, conflict_log_id: &LogIdOf<C>) -> Option<InstantOf<C>> {
        let mut q = self.queue.lock().unwrap();

        while let Some(first) = q.front() {
            let starts_at_conflict = first.prev_log_id.as_ref() == Some(conflict_log_id);
            let ends_at_or_before_conflict = first.last_log_id.as_ref() <= Some(conflict_log_id);
            let is_stale = !starts_at_conflict && ends_at_or_before_conflict;
            if is_stale {
                q.pop_front();
                continue;
            }

            let contains_conflict = first.prev_log_id.as_ref() < Some(conflict_log_id);
            let matches_conflict = starts_at_conflict || contains_conflict;
            if matches_conflict {
                let sending_time = first.sending_time;
                q.pop_front();
                return Some(sending_time);
            }

            break;
        }

        None
    }

    /// Removes the oldest queued request, the one a successful response answers, and returns
    /// its sending time.
    ///
    /// PALISADE PATCH: a stream answers its requests in order, one response per request
    /// (`NetStreamAppend::stream_append`), so a response is evidence that the follower accepted
    /// this leader *after the oldest unanswered request was sent*, and of nothing later.
    /// Upstream removed every queued request whose last log id `matching` covered and returned
    /// the newest one's sending time: an answer to an old request was credited to newer
    /// requests with the same log range (heartbeats, commit-only requests) whose answers had
    /// not come yet. A leader paused (SIGSTOP) and resumed sends a heartbeat, then reads the
    /// answer to the request it sent before the pause, and renewed its lease from it although
    /// its followers had elected another leader meanwhile: a lease read there could be stale.
    ///
    /// `matching` is only logged: whatever it acknowledges, the answer is the oldest request's.
    /// Returns `None` if no request is queued (an answer nothing asked for credits nothing).
    pub(crate) fn drain_acked(&self, matching: &Option<LogIdOf<C>>) -> Option<InstantOf<C>> {
        let mut q = self.queue.lock().unwrap();

        tracing::debug!(
            "Inflight queue drain_acked: matching: {}; data: {:?}",
            matching.display(),
            q.as_slices()
        );

        q.pop_front().map(|answered| answered.sending_time)
    }

    /// Returns `true` if every recorded request is fully acknowledged.
    pub(crate) fn is_empty(&self) -> bool {
        let q = self.queue.lock().unwrap();
        q.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::UTConfig;
    use crate::engine::testing::log_id;

    #[test]
    fn test_new() {
        let q = InflightAppendQueue::<UTConfig>::new();
        assert_eq!(q.drain_acked(&None), None);
    }

    #[test]
    fn test_drain_conflicted() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(Some(log_id(1, 1, 0)), Some(log_id(1, 1, 10)));
        q.push(Some(log_id(1, 1, 10)), Some(log_id(1, 1, 10)));
        q.push(Some(log_id(1, 1, 10)), Some(log_id(1, 1, 30)));

        let (boundary_time, interior_time) = {
            let mut queue = q.queue.lock().unwrap();
            let boundary_time = queue[0].sending_time + std::time::Duration::from_secs(1);
            queue[1].sending_time = boundary_time;
            let interior_time = boundary_time + std::time::Duration::from_secs(1);
            queue[2].sending_time = interior_time;
            (boundary_time, interior_time)
        };

        // Conflict(10) rejects B's prev, even when A's last is also 10.
        let actual = q.drain_conflicted(&log_id(1, 1, 10));
        assert_eq!(actual, Some(boundary_time));

        {
            let queue = q.queue.lock().unwrap();
            assert_eq!(queue.len(), 1);
            assert_eq!(queue[0].last_log_id, Some(log_id(1, 1, 30)));
        }

        // Conflict(25) falls inside C's range.
        let actual = q.drain_conflicted(&log_id(1, 1, 25));
        assert_eq!(actual, Some(interior_time));

        {
            let queue = q.queue.lock().unwrap();
            assert!(queue.is_empty());
        }

        let actual = q.drain_conflicted(&log_id(1, 1, 30));
        assert_eq!(actual, None);
    }

    /// Sets the sending times of the queued requests to `base + i` seconds, and returns them.
    fn spread_sending_times(q: &InflightAppendQueue<UTConfig>) -> Vec<InstantOf<UTConfig>> {
        let mut queue = q.queue.lock().unwrap();
        let base = queue[0].sending_time;
        for (i, inflight) in queue.iter_mut().enumerate() {
            inflight.sending_time = base + std::time::Duration::from_secs(i as u64);
        }
        queue.iter().map(|inflight| inflight.sending_time).collect()
    }

    // PALISADE PATCH: each answer removes one request, the oldest (see `drain_acked`).

    #[test]
    fn test_drain_acked_answers_the_oldest_request_only() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(Some(log_id(1, 1, 0)), Some(log_id(1, 1, 10)));
        q.push(Some(log_id(1, 1, 10)), Some(log_id(1, 1, 20)));
        let times = spread_sending_times(&q);

        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 10))), Some(times[0]));
        assert_eq!(q.queue.lock().unwrap().len(), 1);
        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 20))), Some(times[1]));
        assert!(q.is_empty());
        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 20))), None);
    }

    /// The paused leader: a heartbeat sent after the pause has the range of the request sent
    /// before it, whose answer is read only now. That answer is the old request's; the
    /// heartbeat stays queued until its own answer comes.
    #[test]
    fn test_drain_acked_late_answer_is_not_credited_to_a_newer_request_with_the_same_range() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(Some(log_id(2, 1, 10)), Some(log_id(2, 1, 10)));
        q.push(Some(log_id(2, 1, 10)), Some(log_id(2, 1, 10)));
        let times = spread_sending_times(&q);

        assert_eq!(q.drain_acked(&Some(log_id(2, 1, 10))), Some(times[0]));
        assert_eq!(q.queue.lock().unwrap().len(), 1);
        assert_eq!(q.drain_acked(&Some(log_id(2, 1, 10))), Some(times[1]));
        assert!(q.is_empty());
    }

    /// A commit-only request queued behind the request carrying its entries.
    #[test]
    fn test_drain_acked_entries_then_commit_only_request() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(Some(log_id(1, 1, 10)), Some(log_id(1, 1, 11)));
        q.push(Some(log_id(1, 1, 11)), Some(log_id(1, 1, 11)));
        let times = spread_sending_times(&q);

        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 11))), Some(times[0]));
        assert_eq!(q.queue.lock().unwrap().len(), 1);
    }

    /// A partial success answers its request too.
    #[test]
    fn test_drain_acked_partial_success() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(Some(log_id(1, 1, 0)), Some(log_id(1, 1, 10)));
        q.push(Some(log_id(1, 1, 10)), Some(log_id(1, 1, 20)));
        let times = spread_sending_times(&q);

        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 5))), Some(times[0]));
        assert_eq!(q.queue.lock().unwrap().len(), 1);
        assert_eq!(q.queue.lock().unwrap()[0].last_log_id, Some(log_id(1, 1, 20)));
    }

    #[test]
    fn test_drain_acked_empty_queue() {
        let q = InflightAppendQueue::<UTConfig>::new();
        assert_eq!(q.drain_acked(&Some(log_id(1, 1, 10))), None);
    }

    #[test]
    fn test_drain_acked_with_none_log_id() {
        let q = InflightAppendQueue::<UTConfig>::new();
        q.push(None, None);
        q.push(None, Some(log_id(1, 1, 5)));
        let times = spread_sending_times(&q);

        assert_eq!(q.drain_acked(&None), Some(times[0]));
        let deque = q.queue.lock().unwrap();
        assert_eq!(deque.len(), 1);
        assert_eq!(deque[0].last_log_id, Some(log_id(1, 1, 5)));
    }
}
