//! Errors of the log store, and how they become the `io::Error` that
//! openraft's storage traits speak.
//!
//! Inside the crate every failure is a typed [`LogStoreError`]. At the trait
//! boundary it is converted with `io::Error::from`, which keeps the typed
//! error as the source (so callers can `downcast_ref` it) and picks an
//! [`io::ErrorKind`] a caller can act on: [`io::ErrorKind::InvalidData`] for
//! anything read back that cannot be trusted, [`io::ErrorKind::InvalidInput`]
//! for a request that would break the log's invariants.
//!
//! openraft treats every storage error as fatal and stops the replica. That
//! is the intent: a replica that cannot trust its log must not vote or apply.
//! Each message says what the operator should do next.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::log_store::{FORMAT_CURRENT, FORMAT_VERSION};

/// Names a record in the log database, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKey {
    /// The log entry stored at `index`.
    Entry {
        /// Log index of the entry.
        index: u64,
    },
    /// A metadata record (vote, committed log id, last purged log id, format).
    Meta {
        /// Name of the record inside the metadata table.
        name: &'static str,
    },
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKey::Entry { index } => write!(f, "log entry at index {index}"),
            RecordKey::Meta { name } => write!(f, "log metadata record `{name}`"),
        }
    }
}

/// What is wrong with a record that fails verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// The stored checksum does not match the record's key and payload.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Checksum read from the record.
        stored: u32,
        /// Checksum computed over the record's key and payload.
        computed: u32,
    },
    /// The record is too short to hold its checksum.
    #[error("the record is {record_bytes} bytes long, shorter than its checksum")]
    Truncated {
        /// Length of the stored record.
        record_bytes: usize,
    },
    /// The entry's payload names another log index than the key it is stored under.
    #[error("it holds the entry for index {found}")]
    IndexMismatch {
        /// Index found inside the entry.
        found: u64,
    },
    /// The log skips indexes: the entry before this one is missing.
    #[error("the entry before it is missing: the log jumps from index {previous} to here")]
    Hole {
        /// Index of the previous entry present in the log.
        previous: u64,
    },
    /// The entry is at or below the last purged index, which must never happen.
    #[error("it survived a purge up to index {purged}")]
    BelowPurged {
        /// Index of the last purged log id.
        purged: u64,
    },
}

/// Everything that can go wrong in the log store.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// The directory of the log could not be created or synced.
    #[error(
        "cannot prepare the log directory {path}: {source}; check that it exists or can be \
         created, and that it is writable by this user"
    )]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Another process holds the database open.
    #[error(
        "the log database {path} is already open in another process; two replicas must never \
         share a data directory: stop the other process or give this replica its own data \
         directory"
    )]
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
    },

    /// redb could not open (or repair) the database file.
    #[error(
        "cannot open the log database {path}: {source}; if the file is damaged, move the data \
         directory aside and re-add this replica to the cluster under a new node id"
    )]
    Open {
        /// The database file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: redb::DatabaseError,
    },

    /// The database was written by an incompatible release.
    #[error(
        "the log database {path} has format version {found} but this build reads versions \
         {FORMAT_VERSION} to {FORMAT_CURRENT}; run the palisade release that wrote it"
    )]
    UnsupportedFormat {
        /// The database file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
    },

    /// A segment file of the log could not be created, written, read,
    /// synced or removed.
    #[error(
        "cannot {operation} the log segment {path}: {source}; check free space and the health \
         of the data volume, then restart the replica"
    )]
    SegmentIo {
        /// The segment file.
        path: PathBuf,
        /// What the store was doing.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A file in the segment directory is not a segment the log wrote.
    #[error(
        "the log segment {path} {problem}; this replica's log can no longer be trusted: stop \
         it, move its data directory aside for inspection, and re-add the replica to the \
         cluster under a new node id so that it copies the log from its peers"
    )]
    SegmentFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },

    /// A redb operation failed (disk full, I/O error, ...).
    #[error(
        "log database {operation} failed: {source}; check free space and the health of the \
         data volume, then restart the replica"
    )]
    Database {
        /// What the store was doing.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: redb::Error,
    },

    /// A record failed verification. The record is never returned.
    #[error(
        "{record} is corrupt: {problem}; this replica's log can no longer be trusted: stop it, \
         move its data directory aside for inspection, and re-add the replica to the cluster \
         under a new node id so that it copies the log from its peers"
    )]
    Corrupt {
        /// The record that failed.
        record: RecordKey,
        /// What is wrong with it.
        problem: Corruption,
    },

    /// A record has a valid checksum but does not deserialize.
    #[error(
        "{record} has a valid checksum but does not decode ({source}); it was probably \
         written by another palisade release: run that release, or move the data directory \
         aside and re-add the replica under a new node id"
    )]
    Undecodable {
        /// The record that failed.
        record: RecordKey,
        /// The decoding error.
        #[source]
        source: palisade_codec::DecodeError,
    },

    /// A value could not be serialized.
    #[error("cannot encode {record}: {source}; this is a bug in palisade, please report it")]
    Encode {
        /// The record being written.
        record: RecordKey,
        /// The encoding error.
        #[source]
        source: palisade_codec::EncodeError,
    },

    /// An append does not continue the log.
    #[error(
        "refusing an append that would break the log: the next index is {expected} but the \
         entry has index {got}; this is a bug in the Raft layer, and the replica stops rather \
         than store a log with a hole"
    )]
    NotContiguous {
        /// The index the next entry must have.
        expected: u64,
        /// The index it has.
        got: u64,
    },

    /// A truncation would remove committed entries.
    #[error(
        "refusing to remove log entries from index {first_removed}: entries up to the \
         committed index {committed} must never be removed; this is a bug in the Raft layer, \
         and the replica stops rather than lose committed entries"
    )]
    TruncateCommitted {
        /// First index the truncation would remove.
        first_removed: u64,
        /// The persisted committed index.
        committed: u64,
    },

    /// A write shared its transaction with one that failed; neither was
    /// committed.
    #[error(
        "log database {operation} failed: it was committed together with another write that \
         failed ({cause})"
    )]
    FailedWithBatch {
        /// What the store was doing.
        operation: &'static str,
        /// The other write's error.
        cause: String,
    },

    /// The thread that writes the log could not be started, or is gone.
    #[error("the log's writer thread {problem}; restart the replica")]
    WriterStopped {
        /// What happened to it.
        problem: String,
    },
}

impl LogStoreError {
    /// The [`io::ErrorKind`] this error becomes at the openraft boundary.
    pub fn io_kind(&self) -> io::ErrorKind {
        match self {
            LogStoreError::Directory { source, .. } => source.kind(),
            LogStoreError::AlreadyOpen { .. } => io::ErrorKind::ResourceBusy,
            LogStoreError::Open { .. } => io::ErrorKind::Other,
            LogStoreError::Database { source, .. } => match source {
                redb::Error::Io(io) => io.kind(),
                redb::Error::Corrupted(_) => io::ErrorKind::InvalidData,
                _ => io::ErrorKind::Other,
            },
            LogStoreError::SegmentIo { source, .. } => source.kind(),
            LogStoreError::UnsupportedFormat { .. }
            | LogStoreError::SegmentFile { .. }
            | LogStoreError::Corrupt { .. }
            | LogStoreError::Undecodable { .. } => io::ErrorKind::InvalidData,
            LogStoreError::FailedWithBatch { .. } | LogStoreError::WriterStopped { .. } => {
                io::ErrorKind::Other
            }
            LogStoreError::Encode { .. }
            | LogStoreError::NotContiguous { .. }
            | LogStoreError::TruncateCommitted { .. } => io::ErrorKind::InvalidInput,
        }
    }

    /// Wraps a redb error with what the store was doing.
    pub(crate) fn database<E: Into<redb::Error>>(
        operation: &'static str,
    ) -> impl FnOnce(E) -> Self {
        move |source| LogStoreError::Database {
            operation,
            source: source.into(),
        }
    }
}

impl From<LogStoreError> for io::Error {
    fn from(error: LogStoreError) -> io::Error {
        io::Error::new(error.io_kind(), error)
    }
}
