//! The `noop` driver: runs nothing. For benchmarks and tests of the control
//! plane (consensus, forwarding, handoff) where real compute would only add
//! noise; never for real sandboxes.
//!
//! # Key decision: stateless
//!
//! The driver keeps no state at all, so every replica's copy agrees with
//! every other's by construction and any leader can take over mid-operation:
//!
//! - `launch` succeeds at once and returns an [`ExecutionIdentity::Opaque`]
//!   handle derived from (sandbox id, generation) alone, so a repeated launch
//!   (a retry, or a new leader resuming the operation) returns the same
//!   handle: idempotent, as the trait requires.
//! - `inspect` reports every execution as running (an execution of the noop
//!   driver never exits on its own, so the executor never observes an exit).
//! - `stop` and `remove` succeed at once (there is nothing to stop).
//! - `list` is empty: there is nothing to find, so nothing is ever an orphan.
//!
//! Select it with `palisade gateway run --driver noop`.

use std::time::Duration;

use super::{
    ComputeDriver, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus, LaunchSpec,
};

/// The no-op compute driver. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopDriver;

impl NoopDriver {
    /// The handle of one execution: a pure function of its key.
    pub fn handle(sandbox_id: &str, generation: u64) -> ExecutionHandle {
        ExecutionHandle {
            generation,
            identity: ExecutionIdentity::Opaque {
                id: format!("noop-{sandbox_id}-{generation}"),
            },
        }
    }
}

impl ComputeDriver for NoopDriver {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn launch<'a>(&'a self, spec: &'a LaunchSpec) -> DriverFuture<'a, ExecutionHandle> {
        let handle = Self::handle(&spec.sandbox_id, spec.generation);
        Box::pin(async move { Ok(handle) })
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        let handle = Self::handle(sandbox_id, generation);
        Box::pin(async move { Ok(ExecutionStatus::Running { handle }) })
    }

    fn stop<'a>(
        &'a self,
        _sandbox_id: &'a str,
        _generation: u64,
        _grace: Duration,
    ) -> DriverFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn remove<'a>(&'a self, _sandbox_id: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(async { Ok(Vec::new()) })
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
        }
    }

    #[tokio::test]
    async fn launch_is_idempotent_and_keyed_by_generation() {
        let (one, other) = (NoopDriver, NoopDriver);
        let first = one.launch(&spec(1)).await.unwrap();
        assert_eq!(
            first,
            other.launch(&spec(1)).await.unwrap(),
            "any replica agrees"
        );
        assert_ne!(first, one.launch(&spec(2)).await.unwrap());
        assert_eq!(first.to_string(), "id=noop-4f1c-1");
    }

    #[tokio::test]
    async fn everything_runs_and_everything_stops() {
        let driver = NoopDriver;
        assert_eq!(
            driver.inspect("4f1c", 3).await.unwrap(),
            ExecutionStatus::Running {
                handle: NoopDriver::handle("4f1c", 3)
            }
        );
        driver.stop("4f1c", 3, Duration::ZERO).await.unwrap();
        driver.remove("4f1c").await.unwrap();
        assert!(driver.list().await.unwrap().is_empty());
    }
}
