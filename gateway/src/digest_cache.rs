//! The applied state's digest that `GetClusterInfo` reports, computed
//! within a CPU budget.
//!
//! # Key decision: a digest may cost at most 1/20 of a core
//!
//! A digest serializes and hashes the whole state under the state's read
//! lock (apply waits for it), so it costs O(state) — about 0.1 s per 20 MiB
//! of state on this hardware. Caching it per applied index is enough for an
//! idle or slowly moving cluster, but not for one taking writes: every
//! applied batch moves the index, and a monitor polling `GetClusterInfo`
//! once a second on every replica then re-encodes the state once a second
//! on every replica. With a state of receipts that grows for 24 hours, that
//! alone took a 30-minute soak from 920 to under 300 requests/s.
//!
//! So a new digest is computed only when the previous one is older than
//! [`DIGEST_COST_RATIO`] times what it cost; until then callers get the
//! previous digest *with the index it was taken at* (`applied_index` in
//! `ClusterInfo` is the digest's index), which is consistent, just older.
//! A digest cheaper than [`DIGEST_COST_FREE`] (a small state) is always
//! fresh; an idle cluster's digest is computed once per index, as before.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A new digest waits at least this many times the previous one's cost
/// after it: digests take at most 1/(ratio + 1) of a core.
pub const DIGEST_COST_RATIO: u32 = 20;

/// A digest cheaper than this is always recomputed for a new index (a
/// small state: tests, chaos campaigns, a young cluster).
pub const DIGEST_COST_FREE: Duration = Duration::from_millis(1);

/// One digest and when and at what cost it was taken.
#[derive(Debug, Clone)]
struct Computed {
    index: u64,
    digest: String,
    finished_at: Instant,
    cost: Duration,
}

/// The cached digest (see the module doc). The mutex is held while a
/// digest is computed, so concurrent callers compute it once; it is a
/// `std` mutex, never held across an await.
#[derive(Debug, Default)]
pub struct DigestCache {
    last: Mutex<Option<Computed>>,
}

impl DigestCache {
    /// The digest to report when the state is at `applied_index`:
    /// `(index it was taken at, digest)`. `compute` encodes and hashes the
    /// state as it is then and returns the index it saw with the digest.
    pub fn get(
        &self,
        applied_index: u64,
        compute: impl FnOnce() -> (u64, String),
    ) -> (u64, String) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = &*last
            && (last.index == applied_index || !last.may_recompute(Instant::now()))
        {
            return (last.index, last.digest.clone());
        }
        let started = Instant::now();
        let (index, digest) = compute();
        let finished_at = Instant::now();
        *last = Some(Computed {
            index,
            digest: digest.clone(),
            finished_at,
            cost: finished_at - started,
        });
        (index, digest)
    }
}

impl Computed {
    fn may_recompute(&self, now: Instant) -> bool {
        self.cost < DIGEST_COST_FREE || now >= self.finished_at + self.cost * DIGEST_COST_RATIO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn computing(index: u64, cost: Duration) -> impl FnOnce() -> (u64, String) {
        move || {
            std::thread::sleep(cost);
            (index, format!("digest at {index}"))
        }
    }

    #[test]
    fn the_same_index_is_computed_once() {
        let cache = DigestCache::default();
        assert_eq!(cache.get(5, computing(5, Duration::ZERO)).0, 5);
        let again = cache.get(5, || panic!("recomputed at an unchanged index"));
        assert_eq!(again, (5, "digest at 5".to_string()));
    }

    #[test]
    fn a_costly_digest_is_not_recomputed_until_its_budget_allows() {
        let finished_at = Instant::now();
        let last = Computed {
            index: 1,
            digest: "digest at 1".into(),
            finished_at,
            cost: Duration::from_millis(30),
        };
        // It cost 30 ms: the next one waits 20 x 30 ms = 600 ms.
        assert!(!last.may_recompute(finished_at + Duration::from_millis(599)));
        assert!(last.may_recompute(finished_at + Duration::from_millis(600)));

        // Until then, the index moved but callers get the old digest with
        // the index it was taken at.
        let cache = DigestCache {
            last: Mutex::new(Some(Computed {
                cost: Duration::from_secs(3_600),
                ..last
            })),
        };
        let stale = cache.get(2, || panic!("recomputed within the budget"));
        assert_eq!(stale, (1, "digest at 1".to_string()));
    }

    #[test]
    fn a_cheap_digest_follows_every_index() {
        let cache = DigestCache::default();
        for index in 1..=50 {
            assert_eq!(cache.get(index, computing(index, Duration::ZERO)).0, index);
        }
    }
}
