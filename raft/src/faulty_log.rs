//! [`FaultyLogStore`]: the replica's log store behind a fault-injecting
//! wrapper, for tests and the chaos harness (a replica runs with it only
//! when [`crate::hooks::StorageFaults`] are given; production never does).
//!
//! Every call goes to the real [`LogStore`]; before an append the wrapper
//! asks the hooks whether to fail it (an fsync error, a full disk: openraft
//! treats a storage error as fatal and the replica fail-stops) or to cut it
//! short (a prefix of the batch made durable, the rest lost, and the
//! append never completes: the torn write before a crash).

use std::io;
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftTypeConfig};
use palisade_storage::{LogReader, LogStore};

use crate::hooks::{AppendFault, StorageFaults};
use crate::types::{NodeId, TypeConfig};

type LogIdOf = openraft::alias::LogIdOf<TypeConfig>;
type VoteOf = openraft::alias::VoteOf<TypeConfig>;

/// A [`LogStore`] whose appends may fail or be torn. See the module docs.
pub struct FaultyLogStore {
    inner: LogStore<TypeConfig>,
    node: NodeId,
    faults: Arc<dyn StorageFaults>,
}

impl FaultyLogStore {
    /// Wraps `inner`, the log store of node `node`.
    pub fn new(inner: LogStore<TypeConfig>, node: NodeId, faults: Arc<dyn StorageFaults>) -> Self {
        Self {
            inner,
            node,
            faults,
        }
    }
}

impl RaftLogStorage<TypeConfig> for FaultyLogStore {
    type LogReader = LogReader<TypeConfig>;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        self.inner.get_log_state().await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.inner.get_log_reader().await
    }

    async fn save_vote(&mut self, vote: &VoteOf) -> Result<(), io::Error> {
        self.inner.save_vote(vote).await
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf>) -> Result<(), io::Error> {
        self.inner.save_committed(committed).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf>, io::Error> {
        self.inner.read_committed().await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = <TypeConfig as RaftTypeConfig>::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        match self.faults.append(self.node, entries.len()) {
            AppendFault::Proceed => self.inner.append(entries, callback).await,
            AppendFault::Fail(kind) => {
                let error = io::Error::new(kind, format!("injected storage fault: {kind}"));
                callback.io_completed(Err(io::Error::new(kind, error.to_string())));
                Err(error)
            }
            AppendFault::Torn { keep } => {
                let kept: Vec<_> = entries.into_iter().take(keep).collect();
                if !kept.is_empty() {
                    self.inner.append(kept, IOFlushed::noop()).await?;
                }
                // The rest never reaches the disk and the append never
                // completes: the harness crashes the replica.
                drop(callback);
                std::future::pending::<()>().await;
                Ok(())
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf>) -> Result<(), io::Error> {
        self.inner.truncate_after(last_log_id).await
    }

    async fn purge(&mut self, log_id: LogIdOf) -> Result<(), io::Error> {
        self.inner.purge(log_id).await
    }
}
