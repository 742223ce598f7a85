//! [`new_request_id`]: the request id a client makes for a write when its
//! caller gives none.
//!
//! # Key decision: time-ordered, not random
//!
//! A replica keeps every request's receipt for a day in a table on disk
//! keyed by request id (`palisade_storage::receipt_table`). Random ids
//! (UUID v4) land all over that table: once it outgrows its page cache,
//! every new request reads a leaf from the file and every commit writes
//! scattered leaves back, which cost a third of a busy cluster's
//! throughput (BENCHMARKS.md). A UUID v7 starts with the Unix time in
//! milliseconds, and its text form sorts by it, so the ids a cluster sees
//! fall at the table's right edge (the pages it already holds) and expire
//! from its left edge. Any string is still a valid request id; a client
//! that makes its own just pays for random ones.

/// A fresh request id: a UUID v7 (its first 48 bits the Unix time in
/// milliseconds, the rest random), as text.
pub fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_made_later_sort_later() {
        let ids: Vec<String> = (0..2_000).map(|_| new_request_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(
            ids, sorted,
            "ids made one after another must sort in the order they were made"
        );
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "no id repeats");
    }
}
