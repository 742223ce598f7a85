//! The gateway side of the process driver: [`ProcessDriver`] checks fences,
//! creates execution directories, starts shims through the launch server, observes,
//! signals and removes executions, and keeps tombstones, all through the shared
//! driver directory.

#![allow(unused_imports)]
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use std::os::unix::process::ExitStatusExt;
use std::time::SystemTime;

use crate::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    Fence, LaunchSpec,
};

use super::fencing::*;
use super::launch_server::{LaunchOutcome, LaunchServers};
use super::*;
use super::{procfs::*, records::*, shim::*};

/// Time limits of the process driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessDriverTimeouts {
    /// How long `launch` (and `stop` of an execution that is just starting) waits for
    /// the shim to report whether the command started.
    pub shim_start_timeout: Duration,
    /// How often waiting calls re-read the execution's state.
    pub stop_poll_interval: Duration,
    /// How long `stop` waits for the process group to vanish after SIGKILL before it
    /// gives up with an uncertain outcome.
    pub kill_timeout: Duration,
    /// Grace between SIGTERM and SIGKILL when `remove` stops a running execution.
    pub remove_grace: Duration,
    /// How long a call waits for a sandbox's lock held by another call (of this or
    /// another gateway) before it gives up with an uncertain outcome.
    pub lock_timeout: Duration,
    /// How long a removed sandbox's tombstone (and highest fence) is kept before
    /// [`ProcessDriver::collect_tombstones`] deletes it. Until then every launch of
    /// the sandbox is refused; after, a launch delayed that long would not be. Keep
    /// it far longer than any operation may stay pending (default: 7 days).
    pub tombstone_retention: Duration,
}

impl Default for ProcessDriverTimeouts {
    fn default() -> Self {
        ProcessDriverTimeouts {
            shim_start_timeout: Duration::from_secs(10),
            stop_poll_interval: Duration::from_millis(20),
            kill_timeout: Duration::from_secs(10),
            remove_grace: Duration::from_secs(2),
            lock_timeout: SANDBOX_LOCK_TIMEOUT,
            tombstone_retention: TOMBSTONE_RETENTION_DEFAULT,
        }
    }
}

/// The embedded default compute driver. Cheap to clone; holds no state besides its
/// configuration and the directory's identity, because the truth lives in the
/// shared driver directory.
#[derive(Clone, Debug)]
pub struct ProcessDriver {
    driver_dir: PathBuf,
    shim_program: PathBuf,
    driver_id: String,
    timeouts: ProcessDriverTimeouts,
    /// Whom commands run as; `None`: the gateway's own user.
    sandbox_user: Option<super::SandboxUser>,
    /// When the reconciler's last tombstone collection scanned the driver
    /// directory (see [`ProcessDriver::collect_tombstones_due`]); shared by clones.
    collected_at: Arc<Mutex<Option<Instant>>>,
    /// The launch server that forks every shim; shared by clones.
    launch_servers: Arc<LaunchServers>,
}

impl ProcessDriver {
    /// A driver keeping executions under `driver_dir` (shared by every gateway on the
    /// host; created if missing) and starting shims with `shim_program`, the
    /// `palisade` binary (in production `std::env::current_exe()`). `shim_program`
    /// should be an absolute path: shims start with `/` as their working directory.
    ///
    /// Reads the directory's identity, creating it if this is the first driver to
    /// open the directory; fails if the directory cannot be created or read.
    pub fn new(driver_dir: PathBuf, shim_program: PathBuf) -> io::Result<Self> {
        // Launchers run in `/`, so relative paths would resolve elsewhere there. A bare
        // program name (no '/') is left for PATH lookup.
        let driver_dir = std::path::absolute(&driver_dir).unwrap_or(driver_dir);
        let shim_program = if shim_program.components().count() > 1 {
            std::path::absolute(&shim_program).unwrap_or(shim_program)
        } else {
            shim_program
        };
        let driver_id = load_or_create_identity(&driver_dir).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "cannot open the process driver directory {}: {error}",
                    driver_dir.display()
                ),
            )
        })?;
        // Made here rather than by the first launch, to give it the hint. If it
        // cannot be made, the launch that needs it says why.
        let work_dirs = driver_dir.join(WORKDIRS_DIRECTORY);
        if fs::create_dir_all(&work_dirs).is_ok() {
            super::records::spread_subdirectories(&work_dirs);
        }
        Ok(ProcessDriver {
            driver_dir,
            launch_servers: Arc::new(LaunchServers::new(shim_program.clone())),
            shim_program,
            driver_id,
            timeouts: ProcessDriverTimeouts::default(),
            sandbox_user: None,
            collected_at: Arc::default(),
        })
    }

    /// The same driver running every command as `user`, in a working
    /// directory under its `work_root` ([`super::run_as`]).
    pub fn with_sandbox_user(mut self, user: Option<super::SandboxUser>) -> Self {
        self.sandbox_user = user;
        self
    }

    /// The same driver with other time limits.
    pub fn with_timeouts(mut self, timeouts: ProcessDriverTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The shared driver directory.
    pub fn driver_dir(&self) -> &Path {
        &self.driver_dir
    }

    /// Directory of one sandbox: its executions, fence and tombstone.
    pub fn sandbox_dir(&self, sandbox_id: &str) -> PathBuf {
        self.driver_dir.join(sandbox_id)
    }

    /// The sandbox's persistent working directory: every execution's
    /// command and every exec runs in it. `.workdirs/<sandbox_id>` under the
    /// driver directory, or, with a sandbox user, `<work root>/<sandbox_id>`
    /// outside the driver and data directories, owned by that user.
    pub fn work_dir(&self, sandbox_id: &str) -> PathBuf {
        match &self.sandbox_user {
            Some(user) => user.for_sandbox(sandbox_id).work_dir,
            None => super::exec::workdir_of(&self.driver_dir, sandbox_id),
        }
    }

    /// Directory of one execution.
    pub fn execution_dir(&self, sandbox_id: &str, generation: u64) -> PathBuf {
        self.sandbox_dir(sandbox_id).join(generation.to_string())
    }

    /// The highest fence admitted for a sandbox, if any (for operators and tests).
    pub async fn fence_of(&self, sandbox_id: &str) -> Result<Option<Fence>, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let sandbox_dir = self.sandbox_dir(sandbox_id);
        blocking(move || {
            read_fence(&sandbox_dir).map_err(|error| io_uncertain("reading", &sandbox_dir, error))
        })
        .await
    }

    /// The sandbox's tombstone, if it has one (for operators and tests).
    pub async fn tombstone_of(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<TombstoneRecord>, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let sandbox_dir = self.sandbox_dir(sandbox_id);
        blocking(move || {
            read_tombstone(&sandbox_dir)
                .map_err(|error| io_uncertain("reading", &sandbox_dir, error))
        })
        .await
    }

    /// Deletes the directories of sandboxes whose tombstone is older than
    /// [`ProcessDriverTimeouts::tombstone_retention`] and whose executions are all
    /// gone, fence and tombstone included. Returns how many were deleted. Safe to
    /// run from every replica at any time (each sandbox is collected under its
    /// lock); run it now and then, e.g. hourly, or tombstones pile up.
    pub async fn collect_tombstones(&self) -> Result<usize, DriverError> {
        let driver = self.clone();
        blocking(move || driver.collect_tombstones_blocking(SystemTime::now())).await
    }

    /// What the reconciler calls every round ([`ComputeDriver::collect_tombstones`]):
    /// [`ProcessDriver::collect_tombstones`], but at most once per
    /// [`TOMBSTONE_COLLECTION_INTERVAL_MAX`] or an eighth of the retention, whichever
    /// is shorter; a call in between returns 0 without listing anything. A
    /// collection scans every sandbox directory, and the tombstoned ones stay for
    /// the whole retention (7 days by default), so scanning every 10 s round would
    /// make each round cost O(every sandbox removed this week). A tombstone is
    /// never collected early by this (only up to one interval late), so what it
    /// guards is unchanged.
    pub async fn collect_tombstones_due(&self) -> Result<usize, DriverError> {
        let interval =
            (self.timeouts.tombstone_retention / 8).min(TOMBSTONE_COLLECTION_INTERVAL_MAX);
        {
            let mut collected_at = self
                .collected_at
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if collected_at.is_some_and(|at| at.elapsed() < interval) {
                return Ok(0);
            }
            *collected_at = Some(Instant::now());
        }
        self.collect_tombstones().await
    }

    pub(super) fn lock(&self, sandbox_dir: &Path) -> Result<SandboxLock, DriverError> {
        lock_sandbox(
            sandbox_dir,
            self.timeouts.lock_timeout,
            SANDBOX_LOCK_POLL_INTERVAL,
        )
        .map_err(|error| io_uncertain("locking", sandbox_dir, error))
    }

    /// `Uncertain` when the execution was recorded under another driver identity.
    fn ensure_ours(&self, observation: &Observation, dir: &Path) -> Result<(), DriverError> {
        match observation.recorded_by_other(&self.driver_id) {
            None => Ok(()),
            Some(other) => Err(recorded_elsewhere(dir, other, &self.driver_id)),
        }
    }

    async fn launch_execution(
        &self,
        spec: &LaunchSpec,
        fence: &Fence,
    ) -> Result<ExecutionHandle, DriverError> {
        validate_spec(spec)?;
        validate_fence(fence, &spec.sandbox_id, Some(spec.generation))?;
        let dir = self.execution_dir(&spec.sandbox_id, spec.generation);
        let created = {
            let (driver, spec, fence) = (self.clone(), spec.clone(), fence.clone());
            blocking(move || driver.claim_generation(&spec, &fence)).await?
        };

        let deadline = Instant::now() + self.timeouts.shim_start_timeout;
        let mut shim_started = false;
        if created {
            // This call just made the generation's directory, so no shim has
            // claimed it: start one without reading the directory first (a
            // read that found nothing, on every create and start). Another
            // gateway launching the same generation meanwhile may start one
            // too; the shims' claim decides, and the loser runs nothing.
            self.start_shim(&dir).await?;
            shim_started = true;
        }
        loop {
            let observation = observe_blocking(dir.clone()).await?;
            if !observation.exists {
                // Only `remove` deletes a claimed generation, after its tombstone.
                return Err(DriverError::Uncertain {
                    message: format!(
                        "{} vanished while launching (the sandbox is being removed?); a \
                         repeated launch answers for sure",
                        dir.display()
                    ),
                });
            }
            self.ensure_ours(&observation, &dir)?;
            if let Some(rejected) = &observation.rejected {
                return Err(DriverError::Rejected {
                    message: rejected.message.clone(),
                });
            }
            if let Some(shim) = &observation.shim {
                // A shim owns the execution; return once it has reported whether the
                // command started (or once it is gone without saying: then the
                // execution reads as Absent, which the executor resolves).
                if observation.command.is_some()
                    || observation.exit.is_some()
                    || observation.shim_presence != Presence::Live
                {
                    if observation.command.is_none()
                        && observation.exit.is_some()
                        && self.is_tombstoned(&spec.sandbox_id).await?
                    {
                        // The shim refused to start the command (commands run only
                        // once recorded): removed before it started.
                        return Err(DriverError::Fenced {
                            message: format!(
                                "sandbox {} was removed before generation {} started; \
                                 nothing ran",
                                spec.sandbox_id, spec.generation
                            ),
                        });
                    }
                    let handle = shim.handle();
                    tracing::info!(
                        sandbox_id = %spec.sandbox_id,
                        generation = spec.generation,
                        handle = %handle,
                        %fence,
                        "execution launched"
                    );
                    return Ok(handle);
                }
            } else if !shim_started {
                // A repeated launch, and no shim has claimed the execution: the
                // gateway that created it died before starting one. Start one; if
                // another gateway's shim wins the claim, ours exits without doing
                // anything. The launch ends once the shim reported: observe again
                // at once.
                self.start_shim(&dir).await?;
                shim_started = true;
                continue;
            }
            if Instant::now() >= deadline {
                return Err(DriverError::Uncertain {
                    message: format!(
                        "the shim of {} did not report within {:?}; the command may still \
                         start. Shim log: {}",
                        dir.display(),
                        self.timeouts.shim_start_timeout,
                        quote_shim_log(&dir)
                    ),
                });
            }
            tokio::time::sleep(self.timeouts.stop_poll_interval).await;
        }
    }

    /// The deciding step of `launch`, under the sandbox's lock: admit the fence,
    /// claim the generation, then check the tombstone. True if this call
    /// created the generation's directory (false: it was there already, a
    /// repeated launch).
    fn claim_generation(&self, spec: &LaunchSpec, fence: &Fence) -> Result<bool, DriverError> {
        let sandbox_dir = self.sandbox_dir(&spec.sandbox_id);
        let lock = self.lock(&sandbox_dir)?;
        let admitted = admit_fence(&lock, &sandbox_dir, fence)?;
        let run_as = self
            .sandbox_user
            .as_ref()
            .map(|user| user.for_sandbox(&spec.sandbox_id));
        // For the sandbox's first fence, the sandbox directory's entry in the driver
        // directory is fsynced together with the new generation's spec.
        let created = create_execution_dir(
            &self.driver_dir,
            spec,
            run_as.as_ref(),
            admitted.parent_to_sync(&sandbox_dir),
        )?;
        if !created {
            // A generation this call created was made durable by an fsync of the
            // sandbox directory, which made the fence record created above durable
            // too; otherwise (a repeated launch) fsync it for the fence alone.
            admitted
                .sync(&sandbox_dir)
                .map_err(|error| io_uncertain("recording the fence of", &sandbox_dir, error))?;
        }
        admitted.made_durable();
        // Claim, then check (with `remove` writing the tombstone, then listing).
        let tombstone = read_tombstone(&sandbox_dir)
            .map_err(|error| io_uncertain("reading the tombstone of", &sandbox_dir, error))?;
        let Some(tombstone) = tombstone else {
            // Admitted: the sandbox's persistent working directory, made
            // under the lock so a concurrent `remove` deletes it after.
            match &run_as {
                Some(run_as) => run_as
                    .prepare_work_dir()
                    .map_err(|error| io_uncertain("creating", &run_as.work_dir, error))?,
                None => {
                    let work_dir = self.work_dir(&spec.sandbox_id);
                    fs::create_dir_all(&work_dir)
                        .map_err(|error| io_uncertain("creating", &work_dir, error))?;
                }
            }
            return Ok(created);
        };
        if created {
            // No shim was started for a directory this call just created: take it
            // back, so nothing is left for `list` or a later shim to find.
            let dir = self.execution_dir(&spec.sandbox_id, spec.generation);
            fs::remove_dir_all(&dir)
                .and_then(|()| sync_dir(&sandbox_dir))
                .map_err(|error| io_uncertain("deleting", &dir, error))?;
        }
        Err(DriverError::Fenced {
            message: format!(
                "sandbox {} was removed ({}); generation {} is not launched",
                spec.sandbox_id, tombstone.fence, spec.generation
            ),
        })
    }

    async fn is_tombstoned(&self, sandbox_id: &str) -> Result<bool, DriverError> {
        Ok(self.tombstone_of(sandbox_id).await?.is_some())
    }

    /// Starts the shim of `dir` through the gateway's launch server and
    /// waits for the shim's status, which it sends as soon as it has
    /// reported.
    async fn start_shim(&self, dir: &Path) -> Result<(), DriverError> {
        let outcome = tokio::time::timeout(
            self.timeouts.shim_start_timeout,
            self.launch_servers.launch(dir),
        )
        .await;
        match outcome {
            Ok(LaunchOutcome::Launched) => Ok(()),
            // Nothing was sent, so no shim was forked.
            Ok(LaunchOutcome::NotSent(message)) => Err(DriverError::Rejected { message }),
            // The shim ended without its status (it died, before or after its
            // claim), or the server died with the launch queued: what the
            // execution directory holds tells. A claim is observed as any report
            // (a dead shim's execution reads as gone, which the executor
            // resolves); without one, nothing this launch started runs.
            Ok(LaunchOutcome::Died) => {
                if observe_blocking(dir.to_path_buf()).await?.shim.is_some() {
                    return Ok(());
                }
                Err(DriverError::Uncertain {
                    message: format!(
                        "the launch of {} ended without a word from its shim, and no shim \
                         claimed the execution",
                        dir.display()
                    ),
                })
            }
            Ok(LaunchOutcome::Failed(report)) => {
                // It failed on its own, so it started no shim; but another
                // gateway's may have claimed the execution meanwhile.
                let observation = observe_blocking(dir.to_path_buf()).await?;
                if observation.shim.is_some() {
                    return Ok(());
                }
                if !observation.exists {
                    return Err(DriverError::Uncertain {
                        message: format!(
                            "{} vanished while launching (the sandbox is being removed?)",
                            dir.display()
                        ),
                    });
                }
                Err(DriverError::Rejected {
                    message: format!(
                        "the shim program {} failed to start the shim: {report}",
                        self.shim_program.display()
                    ),
                })
            }
            Err(_) => Err(DriverError::Uncertain {
                message: format!(
                    "the shim of {} did not report within {:?}",
                    dir.display(),
                    self.timeouts.shim_start_timeout
                ),
            }),
        }
    }

    /// The pid of this driver's launch server, if it runs (started by the
    /// first launch; see the `launch_server` module).
    pub async fn launch_server_pid(&self) -> Option<u32> {
        self.launch_servers.server_pid().await
    }

    async fn inspect_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
    ) -> Result<ExecutionStatus, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let dir = self.execution_dir(sandbox_id, generation);
        // One blocking-pool task, not one to observe and one to judge: the
        // executor inspects every running execution in turn, and each
        // hand-off to the pool wakes a thread.
        let driver = self.clone();
        blocking(move || {
            let observation =
                observe(&dir).map_err(|error| io_uncertain("reading", &dir, error))?;
            driver.ensure_ours(&observation, &dir)?;
            observation
                .status()
                .map_err(|error| io_uncertain("inspecting", &dir, error))
        })
        .await
    }

    async fn stop_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
        grace: Duration,
        fence: &Fence,
    ) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        validate_fence(fence, sandbox_id, Some(generation))?;
        let requested = {
            let (driver, sandbox_id, fence) = (self.clone(), sandbox_id.to_owned(), fence.clone());
            blocking(move || {
                // The deciding step, under the lock: admit the fence, mark stopping.
                let sandbox_dir = driver.sandbox_dir(&sandbox_id);
                let lock = driver.lock(&sandbox_dir)?;
                let admitted = admit_fence(&lock, &sandbox_dir, &fence)?;
                admitted
                    .sync(&sandbox_dir)
                    .map_err(|error| io_uncertain("recording the fence of", &sandbox_dir, error))?;
                admitted.made_durable();
                driver.mark_stopping(&driver.execution_dir(&sandbox_id, generation))
            })
            .await?
        };
        if !requested {
            return Ok(()); // no such execution
        }
        self.finish_stop(sandbox_id, generation, grace).await?;
        // Commands exec'd in the execution's context end with it.
        let sandbox_dir = self.sandbox_dir(sandbox_id);
        blocking(move || {
            super::exec::kill_execs(&sandbox_dir)
                .map_err(|error| io_uncertain("killing the execs of", &sandbox_dir, error))
        })
        .await
    }

    /// Creates `stop-requested` in an execution recorded by this driver. Returns false
    /// if the execution does not exist. Blocking.
    fn mark_stopping(&self, dir: &Path) -> Result<bool, DriverError> {
        let shim: Option<ShimRecord> = read_record(&dir.join(SHIM_FILE))
            .map_err(|error| io_uncertain("reading the claim of", dir, error))?;
        if let Some(shim) = shim
            && shim.driver_id != self.driver_id
        {
            return Err(recorded_elsewhere(dir, &shim.driver_id, &self.driver_id));
        }
        request_stop(dir).map_err(|error| io_uncertain("requesting a stop of", dir, error))
    }

    /// After `stop-requested` exists: waits for a starting shim to report, then
    /// SIGTERM, the grace, SIGKILL, until the execution's processes are gone.
    async fn finish_stop(
        &self,
        sandbox_id: &str,
        generation: u64,
        grace: Duration,
    ) -> Result<(), DriverError> {
        let dir = self.execution_dir(sandbox_id, generation);
        // A shim that claimed the execution may be between its claim and starting the
        // command; wait until it says what it did, so there is something to signal.
        let deadline = Instant::now() + self.timeouts.shim_start_timeout;
        loop {
            let observation = observe_blocking(dir.clone()).await?;
            self.ensure_ours(&observation, &dir)?;
            if observation.shim.is_none() {
                // Any shim that claims it from now on sees stop-requested and never
                // starts the command.
                return Ok(());
            }
            if observation.command.is_some()
                || observation.exit.is_some()
                || observation.rejected.is_some()
                || observation.shim_presence != Presence::Live
            {
                break;
            }
            if Instant::now() >= deadline {
                return Err(DriverError::Uncertain {
                    message: format!(
                        "the shim of {} did not report within {:?}",
                        dir.display(),
                        self.timeouts.shim_start_timeout
                    ),
                });
            }
            tokio::time::sleep(self.timeouts.stop_poll_interval).await;
        }

        if self.signal_until_gone(&dir, libc::SIGTERM, grace).await? {
            tracing::info!(sandbox_id, generation, "execution stopped");
            return Ok(());
        }
        tracing::info!(
            sandbox_id,
            generation,
            ?grace,
            "execution ignored SIGTERM; killing"
        );
        if self
            .signal_until_gone(&dir, libc::SIGKILL, self.timeouts.kill_timeout)
            .await?
        {
            tracing::info!(sandbox_id, generation, "execution killed");
            return Ok(());
        }
        Err(DriverError::Uncertain {
            message: format!(
                "{} is still running {:?} after SIGKILL",
                dir.display(),
                self.timeouts.kill_timeout
            ),
        })
    }

    /// Sends `signal` to the execution's processes, then waits up to `timeout` for them
    /// (and the shim, which records the exit) to be gone. Returns whether they are.
    async fn signal_until_gone(
        &self,
        dir: &Path,
        signal: libc::c_int,
        timeout: Duration,
    ) -> Result<bool, DriverError> {
        let observation = observe_blocking(dir.to_path_buf()).await?;
        if observation.is_gone() {
            return Ok(true);
        }
        // The shim records the exit, then exits itself: its end is what to wait for.
        let shim = observation.shim.as_ref().map(ShimRecord::identity);
        {
            let dir = dir.to_path_buf();
            blocking(move || {
                observation
                    .signal(signal)
                    .map_err(|error| io_uncertain("signalling", &dir, error))
            })
            .await?;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if observe_blocking(dir.to_path_buf()).await?.is_gone() {
                return Ok(true);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(false);
            }
            // Until the shim exits (then observe at once), at most one poll interval.
            let wait = self.timeouts.stop_poll_interval.min(remaining);
            match &shim {
                Some(shim) => wait_exited(shim, wait).await,
                None => tokio::time::sleep(wait).await,
            }
        }
    }

    async fn remove_sandbox(&self, sandbox_id: &str, fence: &Fence) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        validate_fence(fence, sandbox_id, None)?;
        let sandbox_dir = self.sandbox_dir(sandbox_id);
        // Mark, then list, in one call under one lock: the tombstone is durable
        // before anything is stopped, so a launch that claims a generation after
        // this sees it. When nothing runs any more (the common case: a sandbox is
        // stopped before it is deleted), the files go in the same call, so a delete
        // costs one lock, one listing pass and one fsync, as before fencing.
        let removed = {
            let (driver, sandbox_dir, fence) = (self.clone(), sandbox_dir.clone(), fence.clone());
            let work_dir = self.work_dir(sandbox_id);
            blocking(move || driver.tombstone_and_delete_if_idle(&sandbox_dir, &work_dir, &fence))
                .await?
        };
        if removed {
            tracing::info!(sandbox_id, %fence, "sandbox removed (tombstone kept)");
            return Ok(());
        }
        // Stop everything, then delete the files under the lock. A shim started by a
        // launch that claimed before the tombstone may claim its execution only now
        // (it will not run the command: it checks the tombstone); then the deletion
        // finds it busy, and the round is repeated.
        let mut busy = String::new();
        for _round in 0..REMOVE_ROUNDS_MAX {
            let generations = {
                let sandbox_dir = sandbox_dir.clone();
                blocking(move || {
                    generations_of(&sandbox_dir)
                        .map_err(|error| io_uncertain("listing", &sandbox_dir, error))
                })
                .await?
            };
            for generation in generations {
                let requested = {
                    let (driver, dir) = (self.clone(), self.execution_dir(sandbox_id, generation));
                    blocking(move || driver.mark_stopping(&dir)).await?
                };
                if requested {
                    self.finish_stop(sandbox_id, generation, self.timeouts.remove_grace)
                        .await?;
                }
            }
            // Every execution is confirmed gone; only files remain (and
            // execs, killed under the lock: none starts after the tombstone).
            let (driver, sandbox_dir) = (self.clone(), sandbox_dir.clone());
            let deleted = blocking(move || {
                let lock = driver.lock(&sandbox_dir)?;
                super::exec::kill_execs(&sandbox_dir)
                    .map_err(|error| io_uncertain("killing the execs of", &sandbox_dir, error))?;
                delete_executions(&lock, &sandbox_dir, &driver.driver_id)
            })
            .await?;
            match deleted {
                Deletion::Done => {
                    // Then the working directory: nothing runs in it any more.
                    let work_dir = self.work_dir(sandbox_id);
                    blocking(move || remove_work_dir(&work_dir)).await?;
                    tracing::info!(sandbox_id, %fence, "sandbox removed (tombstone kept)");
                    return Ok(());
                }
                Deletion::Busy(reason) => busy = reason,
            }
            tokio::time::sleep(self.timeouts.stop_poll_interval).await;
        }
        Err(DriverError::Uncertain {
            message: format!(
                "removing sandbox {sandbox_id}: its executions kept changing ({busy}); retry"
            ),
        })
    }

    /// The first step of `remove`, blocking, under the sandbox's lock: admits the
    /// fence, writes the tombstone and makes both durable; marks every execution
    /// stopping; then, if none of them runs, kills the execs and deletes the
    /// executions and the working directory. Returns whether the sandbox is
    /// removed; if not, an execution still runs and the caller stops it.
    fn tombstone_and_delete_if_idle(
        &self,
        sandbox_dir: &Path,
        work_dir: &Path,
        fence: &Fence,
    ) -> Result<bool, DriverError> {
        let lock = self.lock(sandbox_dir)?;
        let (admitted, generations) = admit_removal(&lock, sandbox_dir, fence)?;
        // One fsync makes the fence and the tombstone durable, before anything is
        // stopped or deleted.
        admitted
            .sync(sandbox_dir)
            .map_err(|error| io_uncertain("writing the tombstone of", sandbox_dir, error))?;
        admitted.made_durable();
        // Generations claimed after the listing see the tombstone (claim, then
        // check) and never start their command.
        for generation in generations {
            self.mark_stopping(&sandbox_dir.join(generation.to_string()))?;
        }
        super::exec::kill_execs(sandbox_dir)
            .map_err(|error| io_uncertain("killing the execs of", sandbox_dir, error))?;
        // Checks each execution is gone before it deletes it: `Busy` if one runs.
        if delete_executions(&lock, sandbox_dir, &self.driver_id)? != Deletion::Done {
            return Ok(false);
        }
        remove_work_dir(work_dir)?;
        Ok(true)
    }

    async fn list_executions(&self) -> Result<Vec<(String, u64, ExecutionStatus)>, DriverError> {
        let (driver_dir, driver_id) = (self.driver_dir.clone(), self.driver_id.clone());
        blocking(move || {
            list_blocking(&driver_dir, &driver_id)
                .map_err(|error| io_uncertain("listing", &driver_dir, error))
        })
        .await
    }

    fn collect_tombstones_blocking(&self, now: SystemTime) -> Result<usize, DriverError> {
        let uncertain = |error| io_uncertain("collecting tombstones in", &self.driver_dir, error);
        let entries = match fs::read_dir(&self.driver_dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(uncertain(error)),
        };
        let retention_ms =
            u64::try_from(self.timeouts.tombstone_retention.as_millis()).unwrap_or(u64::MAX);
        let now_ms = unix_ms(now);
        let is_old = |tombstone: &TombstoneRecord| {
            now_ms.saturating_sub(tombstone.removed_at_unix_ms) >= retention_ms
        };
        let mut collected = 0;
        for (walked, entry) in entries.enumerate() {
            if walked >= SANDBOXES_COLLECTED_MAX {
                break; // the next run goes on
            }
            let entry = entry.map_err(uncertain)?;
            let Some(sandbox_id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if validate_sandbox_id(&sandbox_id).is_err()
                || !entry.file_type().map_err(uncertain)?.is_dir()
            {
                continue;
            }
            let sandbox_dir = entry.path();
            match read_tombstone(&sandbox_dir).map_err(uncertain)? {
                Some(tombstone) if is_old(&tombstone) => {}
                _ => continue,
            }
            let lock = self.lock(&sandbox_dir)?;
            // Under the lock, the directory is still the tombstoned one (collection is
            // the only thing that deletes a tombstone).
            if !read_tombstone(&sandbox_dir)
                .map_err(uncertain)?
                .is_some_and(|tombstone| is_old(&tombstone))
            {
                continue;
            }
            match delete_executions(&lock, &sandbox_dir, &self.driver_id) {
                Ok(Deletion::Done) => {}
                Ok(Deletion::Busy(reason)) => {
                    tracing::warn!(sandbox_id, reason, "tombstone kept: executions remain");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(sandbox_id, %error, "tombstone kept: executions remain");
                    continue;
                }
            }
            fs::remove_dir_all(&sandbox_dir)
                .and_then(|()| sync_dir(&self.driver_dir))
                .map_err(|error| io_uncertain("deleting", &sandbox_dir, error))?;
            drop(lock);
            tracing::info!(sandbox_id, "tombstone collected");
            collected += 1;
        }
        Ok(collected)
    }
}

impl ComputeDriver for ProcessDriver {
    fn name(&self) -> &'static str {
        "process"
    }

    fn identity(&self) -> &str {
        &self.driver_id
    }

    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.launch_execution(spec, fence))
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        Box::pin(self.inspect_execution(sandbox_id, generation))
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.stop_execution(sandbox_id, generation, grace, fence))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()> {
        Box::pin(self.remove_sandbox(sandbox_id, fence))
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(self.list_executions())
    }

    fn collect_tombstones(&self) -> DriverFuture<'_, usize> {
        Box::pin(ProcessDriver::collect_tombstones_due(self))
    }

    fn read_log<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        stream: crate::LogStream,
        start: &'a crate::LogStart,
        bytes_max: usize,
    ) -> DriverFuture<'a, crate::LogRead> {
        Box::pin(async move {
            validate_sandbox_id(sandbox_id)?;
            let dir = self.execution_dir(sandbox_id, generation);
            let start = start.clone();
            let file_name = match stream {
                crate::LogStream::Stdout => STDOUT_FILE,
                crate::LogStream::Stderr => STDERR_FILE,
            };
            blocking(move || {
                super::logs::read_log(&dir, file_name, &start, bytes_max).map_err(|error| {
                    if error.kind() == io::ErrorKind::InvalidInput {
                        DriverError::Rejected {
                            message: format!("{error}: pass a cursor a log read returned"),
                        }
                    } else {
                        io_uncertain("reading the logs in", &dir, error)
                    }
                })
            })
            .await
        })
    }

    fn exec<'a>(&'a self, spec: &'a crate::ExecSpec) -> DriverFuture<'a, crate::ExecStream> {
        Box::pin(self.exec_command(spec))
    }
}

// ---------------------------------------------------------------------------------
// Driver-side file operations (blocking; run through `blocking`)

/// Creates the execution directory with its spec, unless it exists. Returns whether
/// this call created it. A second launch with a different spec for the same
/// generation is refused: generations are never reused, so that is a caller bug, not
/// something to paper over.
///
/// `sync_with`: a directory fsynced together with the new generation's files,
/// before it is renamed into place (the driver directory, when the sandbox
/// directory's entry in it is not durable yet).
pub(crate) fn create_execution_dir(
    driver_dir: &Path,
    spec: &LaunchSpec,
    run_as: Option<&super::RunAs>,
    sync_with: Option<&Path>,
) -> Result<bool, DriverError> {
    let sandbox_dir = driver_dir.join(&spec.sandbox_id);
    let dir = sandbox_dir.join(spec.generation.to_string());
    let uncertain = |error: io::Error| io_uncertain("creating", &dir, error);
    if !dir.try_exists().map_err(uncertain)? {
        fs::create_dir_all(&sandbox_dir).map_err(uncertain)?;
        let staging = sandbox_dir.join(format!(
            "{STAGING_PREFIX}{}-{}",
            spec.generation,
            uuid::Uuid::new_v4()
        ));
        let built = build_staging_dir(&staging, spec, run_as, sync_with);
        let renamed = built.and_then(|()| fs::rename(&staging, &dir));
        match renamed {
            Ok(()) => {
                sync_dir(&sandbox_dir).map_err(uncertain)?;
                return Ok(true);
            }
            // Another launch renamed its directory into place first (renaming onto a
            // directory that holds a spec fails): use theirs.
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ENOTEMPTY) | Some(libc::EEXIST)
                ) =>
            {
                let _ = fs::remove_dir_all(&staging);
            }
            Err(error) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(uncertain(error));
            }
        }
    }
    let existing: Option<LaunchSpec> = read_record(&dir.join(SPEC_FILE)).map_err(uncertain)?;
    match existing {
        Some(existing) if existing == *spec => Ok(false),
        Some(_) => Err(DriverError::Rejected {
            message: format!(
                "generation {} of sandbox {} was already launched with a different spec",
                spec.generation, spec.sandbox_id
            ),
        }),
        None => Err(DriverError::Uncertain {
            message: format!("{} exists without {SPEC_FILE}", dir.display()),
        }),
    }
}

/// Builds the generation's directory under a temporary name: its files and the
/// directory itself durable (with `sync_with`, all fsynced at once) before the
/// caller renames it into place, so a visible generation always has its spec.
pub(crate) fn build_staging_dir(
    staging: &Path,
    spec: &LaunchSpec,
    run_as: Option<&super::RunAs>,
    sync_with: Option<&Path>,
) -> io::Result<()> {
    fs::create_dir(staging)?;
    let mut files = Vec::with_capacity(4);
    if let Some(run_as) = run_as {
        files.push(write_file(
            &staging.join(super::RUN_AS_FILE),
            &serde_json::to_vec(run_as)?,
        )?);
    }
    files.push(write_file(
        &staging.join(SPEC_FILE),
        &serde_json::to_vec(spec)?,
    )?);
    files.push(File::open(staging)?);
    if let Some(dir) = sync_with {
        files.push(File::open(dir)?);
    }
    sync_together(&files.iter().collect::<Vec<_>>())
}

/// Marks the execution as stopping. Returns false if it does not exist.
pub(crate) fn request_stop(dir: &Path) -> io::Result<bool> {
    // Not fsynced: the marker only has to be seen by shims starting in this boot;
    // after a reboot no shim of the old boot runs.
    match OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(STOP_REQUESTED_FILE))
    {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// The generations under a sandbox directory (empty if it does not exist).
pub(crate) fn generations_of(sandbox_dir: &Path) -> io::Result<Vec<u64>> {
    let entries = match read_sandbox_dir(sandbox_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut generations = Vec::new();
    for entry in entries {
        let entry = entry?;
        // Anything else (staging directories of interrupted launches) is not an
        // execution: nothing was ever started from it.
        if let Some(generation) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        {
            if generations.len() >= EXECUTIONS_LISTED_MAX {
                return Err(too_many_executions(sandbox_dir));
            }
            generations.push(generation);
        }
    }
    generations.sort_unstable();
    Ok(generations)
}

/// What [`delete_executions`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Deletion {
    /// Only the lock, fence and tombstone remain.
    Done,
    /// An execution is not (or no longer) confirmed gone, or its directory changed
    /// while it was deleted: stop it again, then retry.
    Busy(String),
}

/// Deletes everything in a removed sandbox's directory but its lock, fence and
/// tombstone records: the generation directories (once their executions are confirmed gone)
/// and the leftovers of interrupted launches and writes. Call with the lock held.
pub(crate) fn delete_executions(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    driver_id: &str,
) -> Result<Deletion, DriverError> {
    let uncertain = |error| io_uncertain("deleting the executions of", sandbox_dir, error);
    let entries = match read_sandbox_dir(sandbox_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Deletion::Done),
        Err(error) => return Err(uncertain(error)),
    };
    for (walked, entry) in entries.enumerate() {
        if walked >= EXECUTIONS_LISTED_MAX {
            return Err(uncertain(too_many_executions(sandbox_dir)));
        }
        let entry = entry.map_err(uncertain)?;
        let name = entry.file_name();
        if is_fencing_entry(&name) {
            continue;
        }
        let path = entry.path();
        if !entry.file_type().map_err(uncertain)?.is_dir() {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(uncertain(error)),
            }
            continue;
        }
        if name
            .to_str()
            .and_then(|name| name.parse::<u64>().ok())
            .is_some()
        {
            // Stopped by the caller; make sure, since the files are the only trace.
            let observation = observe(&path).map_err(uncertain)?;
            if let Some(other) = observation.recorded_by_other(driver_id) {
                return Err(recorded_elsewhere(&path, other, driver_id));
            }
            if !observation.is_gone() {
                return Ok(Deletion::Busy(format!("{} runs", path.display())));
            }
        }
        match fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            // A shim that was started before the tombstone wrote into it meanwhile.
            Err(error) if error.raw_os_error() == Some(libc::ENOTEMPTY) => {
                return Ok(Deletion::Busy(format!("{} changed", path.display())));
            }
            Err(error) => return Err(uncertain(error)),
        }
    }
    // Not fsynced: the durable tombstone already says the sandbox is removed. Files
    // a crash brings back are those of executions that were confirmed gone in a
    // boot that is over; `list` does not report them (tombstoned, not running),
    // no launch or shim may use them (the tombstone), and a repeated `remove` or
    // the tombstone's collection deletes them again.
    Ok(Deletion::Done)
}

/// Deletes a removed sandbox's working directory (nothing runs in it any more).
fn remove_work_dir(work_dir: &Path) -> Result<(), DriverError> {
    match fs::remove_dir_all(work_dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_uncertain("deleting", work_dir, error)),
    }
}

pub(crate) fn list_blocking(
    driver_dir: &Path,
    driver_id: &str,
) -> io::Result<Vec<(String, u64, ExecutionStatus)>> {
    let entries = match fs::read_dir(driver_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut executions = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(sandbox_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if validate_sandbox_id(&sandbox_id).is_err() || !entry.file_type()?.is_dir() {
            continue; // not ours
        }
        // One listing of the sandbox directory gives both its tombstone and its
        // generations.
        let records = read_sandbox_records(&entry.path())?;
        let tombstoned = records.fencing.tombstone.is_some();
        for generation in records.generations {
            if executions.len() >= EXECUTIONS_LISTED_MAX {
                return Err(too_many_executions(driver_dir));
            }
            let observation = observe(&entry.path().join(generation.to_string()))?;
            if let Some(other) = observation.recorded_by_other(driver_id) {
                // Out of this driver's sight: neither running nor absent to it.
                tracing::warn!(
                    sandbox_id,
                    generation,
                    recorded_by = other,
                    "not listing an execution recorded by another driver identity"
                );
                continue;
            }
            let status = observation.status()?;
            if tombstoned && !matches!(status, ExecutionStatus::Running { .. }) {
                continue; // what a removal left behind, not an execution
            }
            executions.push((sandbox_id.clone(), generation, status));
        }
    }
    executions.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    Ok(executions)
}

pub(crate) fn too_many_executions(dir: &Path) -> io::Error {
    io::Error::other(format!(
        "more than {EXECUTIONS_LISTED_MAX} executions under {}",
        dir.display()
    ))
}

pub(crate) fn quote_shim_log(dir: &Path) -> String {
    let mut text = String::new();
    match File::open(dir.join(SHIM_LOG_FILE)) {
        Ok(file) => {
            let _ = file
                .take(SHIM_LOG_QUOTED_BYTES_MAX)
                .read_to_string(&mut text);
        }
        Err(error) => return format!("unreadable ({error})"),
    }
    if text.trim().is_empty() {
        "empty".to_owned()
    } else {
        text.trim().to_owned()
    }
}

// ---------------------------------------------------------------------------------
// Validation

pub(crate) fn validate_sandbox_id(sandbox_id: &str) -> Result<(), DriverError> {
    let valid = !sandbox_id.is_empty()
        && sandbox_id.len() <= SANDBOX_ID_LENGTH_MAX
        && !sandbox_id.starts_with('.')
        && sandbox_id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(DriverError::Rejected {
            message: format!(
                "sandbox id {sandbox_id:?} is not usable as a directory name: use 1 to \
                 {SANDBOX_ID_LENGTH_MAX} ASCII letters, digits, '-', '_' or '.', not starting with '.'"
            ),
        })
    }
}

pub(crate) fn validate_spec(spec: &LaunchSpec) -> Result<(), DriverError> {
    if spec.wants_container() {
        return Err(DriverError::Rejected {
            message: "the process driver runs host processes: it takes no image, CPU or \
                      memory limit or working directory (run the cluster with --driver \
                      docker for those)"
                .to_owned(),
        });
    }
    validate_spec_fields(spec)
}

/// The checks every driver makes of a spec (sandbox id, command, environment, size).
pub(crate) fn validate_spec_fields(spec: &LaunchSpec) -> Result<(), DriverError> {
    validate_sandbox_id(&spec.sandbox_id)?;
    let rejected = |message: String| Err(DriverError::Rejected { message });
    if spec.command.len() > COMMAND_ARGUMENTS_MAX {
        return rejected(format!(
            "the command has {} arguments; at most {COMMAND_ARGUMENTS_MAX} are accepted",
            spec.command.len()
        ));
    }
    if spec.env.len() > ENVIRONMENT_VARIABLES_MAX {
        return rejected(format!(
            "the environment has {} variables; at most {ENVIRONMENT_VARIABLES_MAX} are accepted",
            spec.env.len()
        ));
    }
    if spec.command.first().is_some_and(String::is_empty) {
        return rejected("the command's program is empty".to_owned());
    }

    if spec.command.iter().any(|argument| argument.contains('\0')) {
        return rejected("a command argument contains a NUL byte".to_owned());
    }
    for (name, value) in &spec.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
            return rejected(format!(
                "environment variable {name:?} is invalid: names must be non-empty without \
                 '=' or NUL, values without NUL"
            ));
        }
    }
    let size = serde_json::to_vec(spec).map_or(usize::MAX, |bytes| bytes.len());
    if size > SPEC_BYTES_MAX {
        return rejected(format!(
            "the spec is {size} bytes; at most {SPEC_BYTES_MAX} are accepted"
        ));
    }
    Ok(())
}

/// A fence must name the call's sandbox, and the call's generation when it has one.
pub(crate) fn validate_fence(
    fence: &Fence,
    sandbox_id: &str,
    generation: Option<u64>,
) -> Result<(), DriverError> {
    let generation_differs = generation.is_some_and(|generation| generation != fence.generation);
    if fence.sandbox_id != sandbox_id || generation_differs {
        return Err(DriverError::Rejected {
            message: format!(
                "{fence} does not name the call's sandbox {sandbox_id}{}; the caller must \
                 fence each call with its own target",
                generation.map_or_else(String::new, |generation| format!(
                    " generation {generation}"
                ))
            ),
        });
    }
    if fence.cluster_id.len() > CLUSTER_ID_BYTES_MAX {
        return Err(DriverError::Rejected {
            message: format!(
                "{fence} names a cluster id of {} bytes; the process driver records fences \
                 in file names and accepts at most {CLUSTER_ID_BYTES_MAX} (cluster ids are UUIDs)",
                fence.cluster_id.len()
            ),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Errors and threads

pub(crate) fn recorded_elsewhere(dir: &Path, other: &str, mine: &str) -> DriverError {
    DriverError::Uncertain {
        message: format!(
            "{} was recorded by driver {other}, not by this one ({mine}): its processes are \
             out of this driver's sight (another host, or a replaced driver directory); \
             resolve it where it was recorded",
            dir.display()
        ),
    }
}

pub(crate) fn io_uncertain(action: &str, path: &Path, error: io::Error) -> DriverError {
    DriverError::Uncertain {
        message: format!("{action} {} failed: {error}", path.display()),
    }
}

/// Runs filesystem and `/proc` work off the async workers (fsync can take
/// milliseconds; a `/proc` scan more).
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, DriverError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, DriverError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| DriverError::Uncertain {
            message: format!("driver worker thread failed: {error}"),
        })?
}
