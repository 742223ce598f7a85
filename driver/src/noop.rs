//! The `noop` driver: runs nothing. For benchmarks and tests of the control
//! plane (consensus, forwarding, handoff) where real compute would only add
//! noise; never for real sandboxes.
//!
//! # Key decision: nothing runs, but the fencing rule holds
//!
//! Executions are a pure function of their key, so every replica's driver
//! agrees with every other's about them, and any leader can take over
//! mid-operation. Only what the fencing contract (crate docs, "Fencing reaches
//! the effect") requires is kept, in memory:
//!
//! - per sandbox, the highest fence admitted; a lower one (or one of another
//!   cluster) is refused with [`DriverError::Fenced`]. The check and the record
//!   happen under one mutex, which is the whole "effect", so they are atomic
//!   with it.
//! - per removed sandbox, a tombstone: every later `launch` is refused, and
//!   `inspect` answers `Absent`.
//! - `launch` otherwise succeeds at once with an [`ExecutionIdentity::Opaque`]
//!   handle derived from (sandbox id, generation) alone, so a repeated launch
//!   returns the same handle: idempotent, as the trait requires.
//! - `inspect` reports every execution of a sandbox without tombstone as
//!   running (a noop execution never exits on its own).
//! - `list` is empty: there is nothing to find, so nothing is ever an orphan.
//! - a launch whose spec sets [`NOOP_REJECT_LAUNCH_VARIABLE`] is refused
//!   ([`DriverError::Rejected`]), a pure function of the spec like the rest:
//!   how tests of the control plane put sandboxes in ERROR in bulk.
//! - `read_log` and `exec` answer [`DriverError::Unsupported`]: nothing runs,
//!   so there is no output and no context to run a command in.
//!
//! The memory is per driver value (clones share it), hence per gateway
//! process: replicas in different processes do not share fences, so across a
//! leader change the noop driver refuses only what one process saw. That is
//! enough for what it is for; the process driver shares its fences through
//! the host's directory. Tombstones are bounded by [`NOOP_TOMBSTONES_MAX`]: the
//! oldest is forgotten first, with its sandbox's fence. The identity is the
//! constant [`NOOP_IDENTITY`]: every noop driver runs the same nothing.
//!
//! Select it with `palisade gateway run --driver noop`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    Fence, LaunchSpec,
};

/// Most tombstones a noop driver remembers; beyond, the oldest is forgotten
/// (with its sandbox's fence). What a tombstone is for, refusing a launch
/// that a deposed leader still sends after the removal, arrives within
/// seconds; 100,000 removals cover minutes at benchmark rates. Each costs
/// ~150 bytes (one shared copy of the sandbox id, its fence's order): a
/// heap profile of a 10-minute soak put a million of them (then copies of
/// the whole fence, the id three times) behind most of a leader's growth.
pub const NOOP_TOMBSTONES_MAX: usize = 100_000;

/// A launch whose spec's environment sets this variable (to anything) is
/// rejected, as a launch whose command cannot start would be: the sandbox
/// goes to ERROR. For tests of the control plane (e.g. `prune`).
pub const NOOP_REJECT_LAUNCH_VARIABLE: &str = "PALISADE_NOOP_REJECT_LAUNCH";

/// The identity of every noop driver.
pub const NOOP_IDENTITY: &str = "noop";

/// The highest fence a noop driver admitted for one sandbox, without the
/// sandbox id (the map's key) and with its cluster id shared.
#[derive(Debug)]
struct SeenFence {
    cluster_id: Arc<str>,
    term: u64,
    operation_index: u64,
    generation: u64,
}

impl SeenFence {
    fn admits(&self, fence: &Fence) -> bool {
        *self.cluster_id == *fence.cluster_id && fence.order() >= (self.term, self.operation_index)
    }
}

impl std::fmt::Display for SeenFence {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "fence(term {}, operation {}, generation {})",
            self.term, self.operation_index, self.generation
        )
    }
}

/// What the driver remembers of one sandbox.
#[derive(Debug)]
struct SandboxRecord {
    fence: SeenFence,
    removed: bool,
}

#[derive(Debug, Default)]
struct NoopState {
    /// Per sandbox, the highest fence admitted and whether it was removed.
    sandboxes: HashMap<Arc<str>, SandboxRecord>,
    /// Removed sandboxes, oldest first (the ids are the map's keys,
    /// shared).
    removal_order: VecDeque<Arc<str>>,
    /// The cluster id of the last fence admitted, shared by every record
    /// of that cluster (a driver serves one cluster).
    cluster_id: Option<Arc<str>>,
}

impl NoopState {
    fn is_removed(&self, sandbox_id: &str) -> bool {
        self.sandboxes
            .get(sandbox_id)
            .is_some_and(|record| record.removed)
    }

    fn shared_cluster_id(&mut self, cluster_id: &str) -> Arc<str> {
        match &self.cluster_id {
            Some(shared) if **shared == *cluster_id => shared.clone(),
            _ => {
                let shared: Arc<str> = Arc::from(cluster_id);
                self.cluster_id = Some(shared.clone());
                shared
            }
        }
    }

    /// Records `fence` as the highest admitted for its sandbox.
    fn admit(&mut self, fence: &Fence) {
        let seen = SeenFence {
            cluster_id: self.shared_cluster_id(&fence.cluster_id),
            term: fence.term,
            operation_index: fence.operation_index,
            generation: fence.generation,
        };
        match self.sandboxes.get_mut(fence.sandbox_id.as_str()) {
            Some(record) => record.fence = seen,
            None => {
                self.sandboxes.insert(
                    Arc::from(fence.sandbox_id.as_str()),
                    SandboxRecord {
                        fence: seen,
                        removed: false,
                    },
                );
            }
        }
    }

    /// Marks an admitted sandbox removed; forgets the oldest removed one
    /// beyond [`NOOP_TOMBSTONES_MAX`].
    fn mark_removed(&mut self, sandbox_id: &str) {
        let Some((key, record)) = self.sandboxes.get_key_value(sandbox_id) else {
            unreachable!("a sandbox is admitted before it is removed");
        };
        if record.removed {
            return;
        }
        let key = key.clone();
        if let Some(record) = self.sandboxes.get_mut(sandbox_id) {
            record.removed = true;
        }
        self.removal_order.push_back(key);
        if self.removal_order.len() > NOOP_TOMBSTONES_MAX
            && let Some(oldest) = self.removal_order.pop_front()
        {
            self.sandboxes.remove(&oldest);
        }
    }
}

/// The no-op compute driver. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct NoopDriver {
    /// `std` mutex: held only to check and record a fence, never across an await.
    state: Arc<Mutex<NoopState>>,
}

impl NoopDriver {
    /// A driver that has seen no fence and removed nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle of one execution: a pure function of its key.
    pub fn handle(sandbox_id: &str, generation: u64) -> ExecutionHandle {
        ExecutionHandle {
            generation,
            identity: ExecutionIdentity::Opaque {
                id: format!("noop-{sandbox_id}-{generation}"),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NoopState> {
        // The state is a map and a queue updated together under the lock, and no
        // code that holds it can panic between the two updates, so a poisoned
        // lock is whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Checks the fence, records it, and then runs `effect`, all under the lock.
    fn fenced<T>(
        &self,
        sandbox_id: &str,
        generation: Option<u64>,
        fence: &Fence,
        effect: impl FnOnce(&mut NoopState) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        if fence.sandbox_id != sandbox_id || generation.is_some_and(|g| g != fence.generation) {
            return Err(DriverError::Rejected {
                message: format!("{fence} does not name the call's target"),
            });
        }
        let mut state = self.lock();
        if let Some(record) = state.sandboxes.get(sandbox_id)
            && !record.fence.admits(fence)
        {
            return Err(DriverError::Fenced {
                message: format!(
                    "{fence} refused: the driver already saw {} of sandbox {sandbox_id}",
                    record.fence
                ),
            });
        }
        state.admit(fence);
        effect(&mut state)
    }
}

impl ComputeDriver for NoopDriver {
    fn name(&self) -> &'static str {
        "noop"
    }

    /// Runs nothing, so it takes any spec (benchmarks of the control plane).
    fn runs_containers(&self) -> bool {
        true
    }

    fn identity(&self) -> &str {
        NOOP_IDENTITY
    }

    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle> {
        if spec.env.contains_key(NOOP_REJECT_LAUNCH_VARIABLE) {
            let message =
                format!("the noop driver rejects launches with {NOOP_REJECT_LAUNCH_VARIABLE} set");
            return Box::pin(async move { Err(DriverError::Rejected { message }) });
        }
        let result = self.fenced(&spec.sandbox_id, Some(spec.generation), fence, |state| {
            if state.is_removed(&spec.sandbox_id) {
                return Err(DriverError::Fenced {
                    message: format!("sandbox {} was removed", spec.sandbox_id),
                });
            }
            Ok(Self::handle(&spec.sandbox_id, spec.generation))
        });
        Box::pin(async move { result })
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        let status = if self.lock().is_removed(sandbox_id) {
            ExecutionStatus::Absent
        } else {
            ExecutionStatus::Running {
                handle: Self::handle(sandbox_id, generation),
            }
        };
        Box::pin(async move { Ok(status) })
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        _grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()> {
        let result = self.fenced(sandbox_id, Some(generation), fence, |_| Ok(()));
        Box::pin(async move { result })
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()> {
        let result = self.fenced(sandbox_id, None, fence, |state| {
            state.mark_removed(sandbox_id);
            Ok(())
        });
        Box::pin(async move { result })
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn read_log<'a>(
        &'a self,
        _sandbox_id: &'a str,
        _generation: u64,
        _stream: crate::LogStream,
        _start: &'a crate::LogStart,
        _bytes_max: usize,
    ) -> DriverFuture<'a, crate::LogRead> {
        Box::pin(async {
            Err(DriverError::Unsupported {
                message: "the noop driver runs nothing, so there is no output to read; \
                          use the process driver (gateway run --driver process)"
                    .into(),
            })
        })
    }

    fn exec<'a>(&'a self, _spec: &'a crate::ExecSpec) -> DriverFuture<'a, crate::ExecStream> {
        Box::pin(async {
            Err(DriverError::Unsupported {
                message: "the noop driver runs nothing, so there is no sandbox to run a \
                          command in; use the process driver (gateway run --driver process)"
                    .into(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(generation: u64) -> LaunchSpec {
        LaunchSpec {
            sandbox_id: "4f1c".into(),
            generation,
            command: vec!["sleep".into(), "1".into()],
            env: Default::default(),
            ..Default::default()
        }
    }

    fn fence(cluster_id: &str, term: u64, generation: u64, operation_index: u64) -> Fence {
        Fence {
            cluster_id: cluster_id.into(),
            term,
            sandbox_id: "4f1c".into(),
            generation,
            operation_index,
        }
    }

    #[tokio::test]
    async fn launch_is_idempotent_and_keyed_by_generation() {
        let (one, other) = (NoopDriver::new(), NoopDriver::new());
        let first = one.launch(&spec(1), &fence("c", 1, 1, 5)).await.unwrap();
        assert_eq!(
            first,
            other.launch(&spec(1), &fence("c", 1, 1, 5)).await.unwrap(),
            "any replica agrees"
        );
        assert_ne!(
            first,
            one.launch(&spec(2), &fence("c", 1, 2, 9)).await.unwrap()
        );
        assert_eq!(first.to_string(), "id=noop-4f1c-1");
    }

    #[tokio::test]
    async fn everything_runs_until_removed_and_everything_stops() {
        let driver = NoopDriver::new();
        assert_eq!(
            driver.inspect("4f1c", 3).await.unwrap(),
            ExecutionStatus::Running {
                handle: NoopDriver::handle("4f1c", 3)
            }
        );
        driver
            .stop("4f1c", 3, Duration::ZERO, &fence("c", 1, 3, 7))
            .await
            .unwrap();
        driver.remove("4f1c", &fence("c", 1, 3, 8)).await.unwrap();
        assert_eq!(
            driver.inspect("4f1c", 3).await.unwrap(),
            ExecutionStatus::Absent
        );
        assert!(driver.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn lower_fences_and_other_clusters_are_refused_equal_ones_admitted() {
        let driver = NoopDriver::new();
        driver
            .launch(&spec(1), &fence("c", 2, 1, 10))
            .await
            .unwrap();
        // The same operation again (a retry), and a later one of the same term.
        driver
            .launch(&spec(1), &fence("c", 2, 1, 10))
            .await
            .unwrap();
        driver
            .stop("4f1c", 1, Duration::ZERO, &fence("c", 2, 1, 12))
            .await
            .unwrap();
        for (late, why) in [
            (fence("c", 1, 1, 99), "a lower term"),
            (
                fence("c", 2, 1, 11),
                "an earlier operation of the same term",
            ),
            (fence("other", 3, 1, 20), "another cluster"),
        ] {
            let error = driver
                .stop("4f1c", 1, Duration::ZERO, &late)
                .await
                .unwrap_err();
            assert!(error.is_fenced(), "{why}: {error}");
        }
        let mismatched = driver
            .launch(&spec(2), &fence("c", 3, 1, 30))
            .await
            .unwrap_err();
        assert!(mismatched.is_definite_no_effect(), "{mismatched}");
    }

    #[tokio::test]
    async fn tombstones_are_bounded_the_oldest_forgotten_first() {
        let driver = NoopDriver::new();
        let removed = NOOP_TOMBSTONES_MAX + 10;
        for n in 0..removed {
            let id = format!("s{n}");
            let fence = Fence {
                sandbox_id: id.clone(),
                ..fence("c", 1, 1, n as u64 + 1)
            };
            driver.remove(&id, &fence).await.unwrap();
            // A retry of the removal is idempotent: one tombstone.
            driver.remove(&id, &fence).await.unwrap();
        }
        {
            let state = driver.lock();
            assert_eq!(state.removal_order.len(), NOOP_TOMBSTONES_MAX);
            assert_eq!(state.sandboxes.len(), NOOP_TOMBSTONES_MAX);
            let first = state.sandboxes.values().next().unwrap();
            assert!(
                Arc::ptr_eq(&first.fence.cluster_id, state.cluster_id.as_ref().unwrap()),
                "every record shares the cluster id"
            );
        }
        assert_eq!(
            driver.inspect("s0", 1).await.unwrap(),
            ExecutionStatus::Running {
                handle: NoopDriver::handle("s0", 1)
            },
            "the oldest tombstone was forgotten"
        );
        let newest = format!("s{}", removed - 1);
        assert_eq!(
            driver.inspect(&newest, 1).await.unwrap(),
            ExecutionStatus::Absent
        );
    }

    #[tokio::test]
    async fn a_removed_sandbox_is_never_launched_again() {
        let driver = NoopDriver::new();
        driver.remove("4f1c", &fence("c", 1, 1, 4)).await.unwrap();
        let error = driver
            .launch(&spec(2), &fence("c", 9, 2, 50))
            .await
            .unwrap_err();
        assert!(error.is_fenced(), "{error}");
    }
}
