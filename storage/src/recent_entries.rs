//! [`RecentEntries`]: the log's last appended entries, kept decoded in
//! memory, so that the reads that follow an append are answered without
//! the disk, the decoder or a blocking thread.
//!
//! # Key decision: a copy of the log's tail, dropped whenever in doubt
//!
//! Right after an append the leader reads the new entries once per
//! follower to replicate them, and every replica reads them again to apply
//! them once they are committed. From the segments each read is a trip to
//! the blocking pool (two thread wake-ups), a copy out of the file and a
//! decode per entry: in a profile of 256 clients on three replicas, about
//! a twentieth of the machine's CPU. The entries were decoded in hand when
//! they were appended, so the log keeps the last [`RECENT_ENTRIES_MAX`] of
//! them (at most [`RECENT_BYTES_MAX`] as stored) and answers a read from
//! here when every entry it asks for is here.
//!
//! The copy must never answer an entry the log does not hold: it is cut
//! where the log is truncated (before the truncation is written, so a read
//! meanwhile goes to the segments), cleared when an append fails, and an
//! append that does not continue it exactly (after a snapshot install, or a
//! truncation it did not see) replaces what it held from that index on.
//! Reads of what it does not hold go to the segments as before, so being
//! empty is always correct; the log's other rules (purged entries are not
//! read, no holes) stay the reader's.

use std::collections::VecDeque;

/// Entries kept at most.
pub const RECENT_ENTRIES_MAX: usize = 4096;
/// Stored bytes of the entries kept at most.
pub const RECENT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The log's last appended entries (see the module doc): consecutive
/// indexes, each with its stored size.
#[derive(Debug)]
pub struct RecentEntries<E> {
    entries: VecDeque<(u64, usize, E)>,
    bytes: usize,
}

impl<E> Default for RecentEntries<E> {
    fn default() -> Self {
        RecentEntries {
            entries: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<E> RecentEntries<E> {
    /// Keeps `entries` (index, stored bytes, entry; consecutive indexes),
    /// just appended to the log, dropping the oldest beyond the limits.
    pub fn appended(&mut self, entries: impl IntoIterator<Item = (u64, usize, E)>) {
        for (index, stored_bytes, entry) in entries {
            match self.entries.back() {
                Some((last, _, _)) if index == last + 1 => {}
                Some((last, _, _)) if index <= *last => self.truncate_after(index.checked_sub(1)),
                // A gap (a snapshot installed), or nothing kept yet.
                _ => self.clear(),
            }
            self.entries.push_back((index, stored_bytes, entry));
            self.bytes += stored_bytes;
        }
        while self.entries.len() > RECENT_ENTRIES_MAX
            || (self.bytes > RECENT_BYTES_MAX && self.entries.len() > 1)
        {
            self.drop_oldest();
        }
    }

    /// Drops the entries after `last_kept` (all: `None`).
    pub fn truncate_after(&mut self, last_kept: Option<u64>) {
        while let Some((index, stored_bytes, _)) = self.entries.back() {
            if last_kept.is_some_and(|kept| *index <= kept) {
                break;
            }
            self.bytes -= stored_bytes;
            self.entries.pop_back();
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn drop_oldest(&mut self) {
        if let Some((_, stored_bytes, _)) = self.entries.pop_front() {
            self.bytes -= stored_bytes;
        }
    }

    /// How many entries are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<E: Clone> RecentEntries<E> {
    /// The entries with index in `start..end` if every one of them is
    /// here (else `None`: read the segments), as the log answers them: at
    /// least the first, then as many as fit in `bytes_max` stored bytes.
    pub fn range(&self, start: u64, end: u64, bytes_max: Option<usize>) -> Option<Vec<E>> {
        let (first, _, _) = self.entries.front()?;
        let (last, _, _) = self.entries.back()?;
        if start < *first || end > last + 1 || end <= start {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let count = usize::try_from(end - start).ok()?;
        let mut answer = Vec::with_capacity(count);
        let mut bytes = 0usize;
        for (_, stored_bytes, entry) in self.entries.range(from..from + count) {
            if let Some(bytes_max) = bytes_max
                && !answer.is_empty()
                && bytes + stored_bytes > bytes_max
            {
                break;
            }
            bytes += stored_bytes;
            answer.push(entry.clone());
        }
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(indexes: impl IntoIterator<Item = u64>) -> RecentEntries<u64> {
        let mut recent = RecentEntries::default();
        recent.appended(indexes.into_iter().map(|index| (index, 10, index)));
        recent
    }

    #[test]
    fn a_range_is_answered_only_when_all_of_it_is_kept() {
        let recent = kept(5..=9);
        assert_eq!(recent.range(5, 10, None), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(recent.range(7, 8, None), Some(vec![7]));
        assert_eq!(recent.range(4, 6, None), None, "4 is not kept");
        assert_eq!(recent.range(9, 11, None), None, "10 is not kept");
        assert_eq!(recent.range(6, 6, None), None, "an empty range");
        assert_eq!(RecentEntries::<u64>::default().range(1, 2, None), None);
    }

    #[test]
    fn a_byte_limit_answers_the_first_entry_and_what_fits() {
        let recent = kept(1..=5);
        assert_eq!(recent.range(1, 6, Some(25)), Some(vec![1, 2]));
        assert_eq!(recent.range(1, 6, Some(3)), Some(vec![1]));
    }

    #[test]
    fn a_truncation_or_an_overwrite_drops_what_the_log_no_longer_holds() {
        let mut recent = kept(1..=6);
        recent.truncate_after(Some(4));
        assert_eq!(recent.range(5, 6, None), None);
        assert_eq!(recent.range(1, 5, None), Some(vec![1, 2, 3, 4]));

        // An append at 3 (a new leader's entries) replaces 3 and 4.
        recent.appended([(3, 10, 30), (4, 10, 40)]);
        assert_eq!(recent.range(1, 5, None), Some(vec![1, 2, 30, 40]));

        recent.truncate_after(None);
        assert!(recent.is_empty());
    }

    #[test]
    fn an_append_after_a_gap_starts_over() {
        let mut recent = kept(1..=3);
        recent.appended([(100, 10, 100)]);
        assert_eq!(recent.len(), 1);
        assert_eq!(recent.range(3, 4, None), None);
        assert_eq!(recent.range(100, 101, None), Some(vec![100]));
    }

    #[test]
    fn the_oldest_entries_leave_beyond_the_limits() {
        let recent = kept(0..(RECENT_ENTRIES_MAX as u64 + 10));
        assert_eq!(recent.len(), RECENT_ENTRIES_MAX);
        assert_eq!(recent.range(9, 10, None), None);
        assert_eq!(recent.range(10, 11, None), Some(vec![10]));

        let mut large = RecentEntries::default();
        large.appended((0..4).map(|index| (index, RECENT_BYTES_MAX / 2, index)));
        assert_eq!(large.len(), 2, "two entries of half the byte limit each");
        large.appended([(4, RECENT_BYTES_MAX * 2, 4)]);
        assert_eq!(large.len(), 1, "one entry over the limit is still kept");
    }
}
