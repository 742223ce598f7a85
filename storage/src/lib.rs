//! Durable Raft state on a replica's local disk: the log, the vote, the
//! committed log id, and the state machine's current snapshot.
//!
//! This crate owns the bytes on disk and their integrity. It does not know
//! what a command means: the log store is generic over openraft's
//! [`RaftTypeConfig`](openraft::RaftTypeConfig) (the concrete type config
//! lives in `palisade-raft`), and snapshots are opaque bytes plus a
//! metadata value of the caller's type.
//!
//! # Key decision: redb, and what "durable" means here
//!
//! The log is a [redb](https://docs.rs/redb) database, one file per replica.
//! redb is pure Rust (no C++ build, unlike RocksDB), has ACID transactions
//! with copy-on-write pages and checksummed commit slots, and recovers
//! itself after a crash. A transaction is therefore never torn: after a
//! crash it is wholly there or wholly absent.
//!
//! Durable means: the write transaction was committed with
//! `Durability::Immediate`, i.e. fsynced, before the caller is told. `append`
//! reports `io_completed` only after its commit returned; `save_vote` and
//! `save_committed` return only after theirs. A batch of entries handed to
//! one `append` is one transaction and one fsync (group commit).
//!
//! On top of redb's own page checksums, every record carries a CRC-32 over
//! its key and payload that is verified on every read; a mismatch is an
//! error naming the record, never a silently skipped entry.
//!
//! Snapshots are plain files written with the classic atomic-replace dance
//! (temporary file, fsync, rename, fsync the directory), also checksummed.
//!
//! # Layout
//!
//! - [`log_store`]: [`LogStore`] (implements openraft's `RaftLogStorage`) and
//!   [`LogReader`] (implements `RaftLogReader`);
//! - [`snapshot_files`]: [`SnapshotFiles`], the current snapshot on disk;
//! - [`receipt_table`]: [`ReceiptTable`], request receipts on disk (a
//!   cache of the replicated state, rebuilt from the snapshot on restart);
//! - [`error`]: [`LogStoreError`] and how it maps to `io::Error`;
//! - `record`: the checksummed record format used inside the database;
//! - [`planted`]: a TEST-ONLY planted bug for the chaos harness, compiled in
//!   only with the `planted-bugs` feature (off by default).

#![deny(missing_docs)]

pub mod error;
pub mod log_store;
pub mod planted;
pub mod receipt_table;
mod record;
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
