//! Executions seen running on the host while a process-mode campaign runs:
//! the driver's effects counted from the host itself, not from anything
//! the replicas report. With the process driver, the process table (every
//! shim and command under the campaign's driver directory, zombies not
//! counted: `palisade_testkit::processes::execution_processes`); with the
//! Docker driver, the engine's containers by their labels (what the
//! driver's own listing reads).
//!
//! A sample is stamped with the campaign clock *before* it is taken, so an
//! execution a sample saw was running at that moment or later: seen after
//! its sandbox's delete was acknowledged is an anomaly
//! (`execution-after-delete`, see [`crate::checker`]), never a race of
//! the sampler.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use palisade_driver::docker::DockerDriver;
use palisade_driver::{ComputeDriver, ExecutionStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::checker::ObservedExecution;
use crate::clock::Clock;

/// Pause between two samples of the process table (a scan of /proc takes
/// a few milliseconds; an execution left running after a delete's
/// acknowledgement for tens of milliseconds is caught often enough).
pub const PROCESS_SAMPLE_INTERVAL: Duration = Duration::from_millis(50);
/// Pause between two listings of the engine's containers.
pub const CONTAINER_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// Longest wait for one listing of the containers.
pub const CONTAINER_LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where executions are looked for.
pub enum Source {
    /// The process table: shims and commands under this driver directory.
    ProcessTable(PathBuf),
    /// The engine's containers, through the Docker driver's listing.
    Containers(Box<DockerDriver>),
}

/// What the sampler saw, and how often it looked.
#[derive(Debug, Default)]
pub struct Observations {
    /// Every execution seen, with the first and last sample that saw it.
    pub executions: Vec<ObservedExecution>,
    /// Samples taken.
    pub samples: u64,
    /// Samples that failed (a container listing that errored or timed out).
    pub failed_samples: u64,
}

/// Samples `source` until `stop` turns true; answers what it saw.
pub fn spawn(
    source: Source,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<Observations> {
    tokio::spawn(async move {
        let mut seen: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
        let mut observations = Observations::default();
        let interval = match source {
            Source::ProcessTable(_) => PROCESS_SAMPLE_INTERVAL,
            Source::Containers(_) => CONTAINER_SAMPLE_INTERVAL,
        };
        loop {
            let at_us = clock.now_us();
            let running = sample(&source).await;
            observations.samples += 1;
            match running {
                Some(running) => {
                    for execution in running {
                        let entry = seen.entry(execution).or_insert((at_us, at_us));
                        entry.1 = at_us;
                    }
                }
                None => observations.failed_samples += 1,
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
        }
        observations.executions = seen
            .into_iter()
            .map(
                |((sandbox_id, generation), (first, last))| ObservedExecution {
                    sandbox_id,
                    generation,
                    first_seen_us: first,
                    last_seen_us: last,
                },
            )
            .collect();
        observations
    })
}

/// The executions running now (`None`: the listing failed).
async fn sample(source: &Source) -> Option<Vec<(String, u64)>> {
    match source {
        Source::ProcessTable(driver_dir) => {
            let driver_dir = driver_dir.clone();
            let processes = tokio::task::spawn_blocking(move || {
                palisade_testkit::processes::execution_processes(&driver_dir)
            })
            .await
            .ok()?;
            let mut running: Vec<(String, u64)> = processes
                .shims
                .into_keys()
                .chain(processes.commands.into_keys())
                .collect();
            running.sort();
            running.dedup();
            Some(running)
        }
        Source::Containers(driver) => {
            let listed = tokio::time::timeout(CONTAINER_LIST_TIMEOUT, driver.list())
                .await
                .ok()?
                .ok()?;
            Some(
                listed
                    .into_iter()
                    .filter(|(_, _, status)| matches!(status, ExecutionStatus::Running { .. }))
                    .map(|(sandbox_id, generation, _)| (sandbox_id, generation))
                    .collect(),
            )
        }
    }
}
