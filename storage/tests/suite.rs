//! openraft's storage conformance suite, run against [`LogStore`] with a
//! minimal in-memory state machine whose snapshots go through
//! [`SnapshotFiles`] (test fixture only: Palisade's state machine lives in
//! `palisade-raft`).

mod common;

use std::io;
use std::sync::Arc;
use std::sync::Mutex;

use futures::Stream;
use futures::TryStreamExt;
use openraft::EntryPayload;
use openraft::OptionalSend;
use openraft::RaftSnapshotBuilder;
use openraft::StorageError;
use openraft::alias::LogIdOf;
use openraft::alias::SnapshotMetaOf;
use openraft::alias::SnapshotOf;
use openraft::alias::StoredMembershipOf;
use openraft::storage::EntryResponder;
use openraft::storage::RaftStateMachine;
use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::type_config::TypeConfigExt;
use palisade_storage::LogStore;
use palisade_storage::SnapshotFiles;
use palisade_storage::WriteMode;
use serde::Deserialize;
use serde::Serialize;
use tempfile::TempDir;

use common::TestConfig;

type Snapshot = SnapshotOf<TestConfig, Vec<u8>>;
type SnapshotMeta = SnapshotMetaOf<TestConfig>;

/// Everything the fixture state machine holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogIdOf<TestConfig>>,
    last_membership: StoredMembershipOf<TestConfig>,
    commands: Vec<String>,
}

/// An in-memory state machine whose current snapshot lives in [`SnapshotFiles`].
#[derive(Clone)]
struct StateMachine {
    /// A std mutex: held only for short, non-async sections.
    state: Arc<Mutex<State>>,
    snapshots: SnapshotFiles<SnapshotMeta>,
}

impl StateMachine {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("a test panicked while holding the state")
    }
}

impl RaftSnapshotBuilder<TestConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let state = self.state().clone();
        let data = serde_json::to_vec(&state).map_err(io::Error::other)?;
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.last_membership,
        };
        self.snapshots.save(&meta, &data)?;
        Ok(Snapshot {
            meta,
            snapshot: data,
        })
    }
}

impl RaftStateMachine<TestConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TestConfig>>, StoredMembershipOf<TestConfig>), io::Error> {
        let state = self.state();
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TestConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            {
                let mut state = self.state();
                state.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(command) => state.commands.push(command),
                    EntryPayload::Membership(membership) => {
                        state.last_membership =
                            StoredMembershipOf::<TestConfig>::new(Some(entry.log_id), membership);
                    }
                }
            }
            if let Some(responder) = responder {
                responder.send(String::new());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let installed: State = serde_json::from_slice(&snapshot)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        self.snapshots.save(meta, &snapshot)?;
        *self.state() = installed;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self
            .snapshots
            .load()?
            .map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

/// Builds a fresh log store (committing as the mode says) and state
/// machine in a temporary directory.
struct Builder(WriteMode);

impl StoreBuilder<TestConfig, LogStore<TestConfig>, StateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<TestConfig>, StateMachine), StorageError<TestConfig>> {
        let storage_error =
            |error: io::Error| StorageError::read(TestConfig::err_from_error(&error));
        let dir = tempfile::tempdir().map_err(storage_error)?;
        let store = LogStore::open_with(dir.path().join("log"), self.0)
            .map_err(|error| storage_error(error.into()))?;
        let snapshots = SnapshotFiles::open(dir.path().join("snapshot"))
            .map_err(|error| storage_error(error.into()))?;
        let state_machine = StateMachine {
            state: Arc::new(Mutex::new(State::default())),
            snapshots,
        };
        Ok((dir, store, state_machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() -> anyhow::Result<()> {
    Suite::test_all(Builder(WriteMode::Thread)).await?;
    Ok(())
}

/// The deterministic simulation's mode (writes on the calling thread).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_with_inline_writes() -> anyhow::Result<()> {
    Suite::test_all(Builder(WriteMode::Inline)).await?;
    Ok(())
}
