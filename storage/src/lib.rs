//! Durable Raft state on a replica's local disk: the log, the vote, the
//! committed log id, and the state machine's current snapshot.
//!
//! This crate owns the bytes on disk and their integrity. It does not know
//! what a command means: the log store is generic over openraft's
//! [`RaftTypeConfig`](openraft::RaftTypeConfig) (the concrete type config
//! lives in `palisade-raft`), and snapshots are opaque bytes plus a
//! metadata value of the caller's type.
//!
//! # Key decision: segment files for entries, redb for the rest
//!
//! The entries are append-only segment files ([`segment_log`]): a Raft log
//! is only appended at its end, cut at its end and dropped from its front,
//! so a group commit is one write and one `fdatasync`. The small records
//! beside them (vote, committed log id, purge point, format) are a
//! [redb](https://docs.rs/redb) database, one file per replica: pure Rust
//! (no C++ build, unlike RocksDB), ACID transactions with copy-on-write
//! pages and checksummed commit slots, recovering itself after a crash.
//! Until segment files, the entries were a redb table too; a commit then
//! wrote several pages per group and cost ~1.7x a bare `fdatasync`, and
//! opening such a log moves its entries (see [`log_store`]).
//!
//! Durable means: written and `fdatasync`ed (entries), or committed with
//! `Durability::Immediate` (records), before the caller is told. `append`
//! reports `io_completed` only after that; `save_vote` and `purge` return
//! only after theirs. `save_committed` returns at once: the committed log
//! id is written behind apply, within
//! [`log_store::COMMITTED_SAVE_INTERVAL`] (Raft does not need it durable;
//! see the module doc of [`log_store`]). Appends queued together are one
//! write and one `fdatasync` (group commit).
//!
//! Every record carries a CRC-32 over its key and payload that is verified
//! on every read (and, for entries, at open); a mismatch is an error naming
//! the record, never a silently skipped entry. The only thing open repairs
//! on its own is the unacknowledged end of the last segment that a crash
//! tore (see [`segment_log`]).
//!
//! Snapshots are plain files written with the classic atomic-replace dance
//! (temporary file, fsync, rename, fsync the directory), also checksummed.
//!
//! # Layout
//!
//! - [`log_store`]: [`LogStore`] (implements openraft's `RaftLogStorage`) and
//!   [`LogReader`] (implements `RaftLogReader`);
//! - [`segment_log`]: the segment files holding the entries;
//! - [`snapshot_files`]: [`SnapshotFiles`], the current snapshot on disk;
//! - [`receipt_table`]: [`ReceiptTable`], request receipts on disk (a
//!   cache of the replicated state, rebuilt from the snapshot on restart);
//! - [`error`]: [`LogStoreError`] and how it maps to `io::Error`;
//! - `record`: the checksummed record format of every stored value;
//! - `recent_entries`: the log's last appended entries, decoded, for the
//!   reads that follow an append;
//! - [`planted`]: a TEST-ONLY planted bug for the chaos harness, compiled in
//!   only with the `planted-bugs` feature (off by default).

#![deny(missing_docs)]

pub mod error;
pub mod log_store;
pub mod planted;
pub mod receipt_table;
mod recent_entries;
mod record;
pub mod segment_log;
pub mod snapshot_bytes;
pub mod snapshot_files;

#[cfg(test)]
mod testing;

pub use error::Corruption;
pub use error::LogStoreError;
pub use error::RecordKey;
pub use log_store::FormatRecord;
pub use log_store::LOG_FILE_NAME;
pub use log_store::LogReader;
pub use log_store::LogStore;
pub use log_store::LogTimings;
pub use log_store::READ_BATCH_BYTES_MAX;
pub use log_store::WriteMode;
pub use receipt_table::{ReceiptTable, ReceiptTableError, ReceiptView};
pub use snapshot_bytes::{SnapshotBytes, SnapshotReader, SnapshotSpool};
pub use snapshot_files::SNAPSHOT_FILE_NAME;
pub use snapshot_files::Saved;
pub use snapshot_files::SnapshotCorruption;
pub use snapshot_files::SnapshotError;
pub use snapshot_files::SnapshotFiles;
pub use snapshot_files::SnapshotPosition;
