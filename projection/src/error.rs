//! What can go wrong while projecting or querying the projection.
//!
//! Only [`ProjectionError::ForeignDatabase`] and
//! [`ProjectionError::Inconsistent`] need an operator; everything else is
//! retried by the projector with backoff (PostgreSQL down or slow, a lost
//! race with another projector, a log read that failed).

use std::time::Duration;

/// An error of the projection.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// PostgreSQL refused or failed a statement, or could not be reached.
    #[error("PostgreSQL: {0}; the projector retries with backoff")]
    Database(#[from] sqlx::Error),
    /// The schema migrations failed.
    #[error("cannot migrate the projection schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A statement or transaction took longer than its bound.
    #[error("PostgreSQL did not answer within {0:?}; the projector retries with backoff")]
    Timeout(Duration),
    /// Another projector advanced the checkpoint first: this batch was
    /// rolled back and the projector reloads from the new checkpoint.
    #[error(
        "the checkpoint moved from {expected} (another projector committed first); rolled back"
    )]
    CheckpointMoved {
        /// The checkpoint this projector built its batch on.
        expected: u64,
    },
    /// The replica's log no longer holds an entry the projector needs (it
    /// was purged behind a snapshot): the projector resyncs from the state.
    #[error("log entry {index} was compacted away (first available: {first_available:?})")]
    Compacted {
        /// The entry that is missing.
        index: u64,
        /// The first entry the log still holds, if any.
        first_available: Option<u64>,
    },
    /// Reading the replica's log failed.
    #[error("cannot read the Raft log: {0}")]
    Log(String),
    /// The projection database was written from another cluster's log.
    #[error(
        "the projection database belongs to another cluster ({detail}); point --postgres-url at a database of this cluster or an empty one"
    )]
    ForeignDatabase {
        /// What did not match.
        detail: String,
    },
    /// The projection holds something the state cannot (a bug, or a
    /// database edited by hand).
    #[error("the projection is inconsistent: {0}")]
    Inconsistent(String),
    /// The shadow state's receipt table on disk failed.
    #[error(
        "the projector's receipt table failed: {0}; the projector retries with backoff (check the disk under the data directory)"
    )]
    ShadowReceipts(String),
    /// A value does not fit the column it goes to.
    #[error("{what} = {value} does not fit a PostgreSQL BIGINT")]
    OutOfRange {
        /// Which value.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// Read-your-writes: the projection did not reach the index in time.
    #[error(
        "the projection has not reached log index {index} within {waited:?} (it is at {projected}); retry, or read from the replicated state"
    )]
    Lagging {
        /// The index waited for.
        index: u64,
        /// Where the projection was when the wait gave up.
        projected: u64,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// The workspace a list asked for is not in the projection.
    #[error("workspace {0:?} does not exist")]
    WorkspaceNotFound(String),
    /// A JSON column did not decode.
    #[error("cannot decode {what}: {source}")]
    Decode {
        /// Which value.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
}

impl ProjectionError {
    /// True when retrying the same thing later may succeed without an
    /// operator.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            ProjectionError::ForeignDatabase { .. }
                | ProjectionError::Inconsistent(_)
                | ProjectionError::OutOfRange { .. }
                | ProjectionError::Decode { .. }
        )
    }
}

/// `u64` -> `BIGINT`, refusing values above `i64::MAX`.
pub(crate) fn to_db(what: &'static str, value: u64) -> Result<i64, ProjectionError> {
    i64::try_from(value).map_err(|_| ProjectionError::OutOfRange { what, value })
}

/// `BIGINT` -> `u64`, refusing negative values (the schema's CHECKs forbid
/// them).
pub(crate) fn from_db(what: &'static str, value: i64) -> Result<u64, ProjectionError> {
    u64::try_from(value)
        .map_err(|_| ProjectionError::Inconsistent(format!("{what} is negative ({value})")))
}
