//! The gateway side of the process driver: [`ProcessDriver`] creates execution
//! directories, starts shims through a launcher, observes, signals and removes
//! executions, all through the shared driver directory.

#![allow(unused_imports)]
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    LaunchSpec,
};

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
}

impl Default for ProcessDriverTimeouts {
    fn default() -> Self {
        ProcessDriverTimeouts {
            shim_start_timeout: Duration::from_secs(10),
            stop_poll_interval: Duration::from_millis(20),
            kill_timeout: Duration::from_secs(10),
            remove_grace: Duration::from_secs(2),
        }
    }
}

/// The embedded default compute driver. Cheap to clone; holds no state besides its
/// configuration, because the truth lives in the shared driver directory.
#[derive(Clone, Debug)]
pub struct ProcessDriver {
    driver_dir: PathBuf,
    shim_program: PathBuf,
    timeouts: ProcessDriverTimeouts,
}

impl ProcessDriver {
    /// A driver keeping executions under `driver_dir` (shared by every gateway on the
    /// host) and starting shims with `shim_program`, the `palisade` binary (in
    /// production `std::env::current_exe()`). `shim_program` should be an absolute
    /// path: launchers run with `/` as their working directory.
    pub fn new(driver_dir: PathBuf, shim_program: PathBuf) -> Self {
        // Launchers run in `/`, so relative paths would resolve elsewhere there. A bare
        // program name (no '/') is left for PATH lookup.
        let driver_dir = std::path::absolute(&driver_dir).unwrap_or(driver_dir);
        let shim_program = if shim_program.components().count() > 1 {
            std::path::absolute(&shim_program).unwrap_or(shim_program)
        } else {
            shim_program
        };
        ProcessDriver {
            driver_dir,
            shim_program,
            timeouts: ProcessDriverTimeouts::default(),
        }
    }

    /// The same driver with other time limits.
    pub fn with_timeouts(mut self, timeouts: ProcessDriverTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Directory of one execution.
    pub fn execution_dir(&self, sandbox_id: &str, generation: u64) -> PathBuf {
        self.driver_dir
            .join(sandbox_id)
            .join(generation.to_string())
    }

    async fn launch_execution(&self, spec: &LaunchSpec) -> Result<ExecutionHandle, DriverError> {
        validate_spec(spec)?;
        let dir = self.execution_dir(&spec.sandbox_id, spec.generation);
        {
            let driver_dir = self.driver_dir.clone();
            let spec = spec.clone();
            blocking(move || create_execution_dir(&driver_dir, &spec)).await?;
        }

        let deadline = Instant::now() + self.timeouts.shim_start_timeout;
        let mut shim_started = false;
        loop {
            let observation = observe_blocking(dir.clone()).await?;
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
                    let handle = shim.handle();
                    tracing::info!(
                        sandbox_id = %spec.sandbox_id,
                        generation = spec.generation,
                        handle = %handle,
                        "execution launched"
                    );
                    return Ok(handle);
                }
            } else if !shim_started {
                // No shim has claimed the execution: either this call created it, or
                // the gateway that did died before starting one. Start one; if another
                // gateway's shim wins the claim, ours exits without doing anything.
                self.start_shim(&dir).await?;
                shim_started = true;
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

    /// Runs the launcher and waits for it; it exits as soon as the shim is started.
    async fn start_shim(&self, dir: &Path) -> Result<(), DriverError> {
        let mut launcher = tokio::process::Command::new(&self.shim_program);
        launcher
            .args(
                ShimArgs::Launch {
                    execution_dir: dir.to_path_buf(),
                }
                .to_argv(),
            )
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let output = match launcher.spawn() {
            Ok(child) => child.wait_with_output(),
            Err(error) => {
                return Err(DriverError::Rejected {
                    message: format!(
                        "cannot start the shim program {}: {error}",
                        self.shim_program.display()
                    ),
                });
            }
        };
        match tokio::time::timeout(self.timeouts.shim_start_timeout, output).await {
            Ok(Ok(output)) if output.status.success() => Ok(()),
            Ok(Ok(output)) => Err(DriverError::Rejected {
                message: format!(
                    "the shim launcher {} failed ({}): {}",
                    self.shim_program.display(),
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            }),
            Ok(Err(error)) => Err(DriverError::Uncertain {
                message: format!("waiting for the shim launcher failed: {error}"),
            }),
            Err(_) => Err(DriverError::Uncertain {
                message: format!(
                    "the shim launcher did not exit within {:?}",
                    self.timeouts.shim_start_timeout
                ),
            }),
        }
    }

    async fn inspect_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
    ) -> Result<ExecutionStatus, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let dir = self.execution_dir(sandbox_id, generation);
        blocking(move || {
            observe(&dir)
                .and_then(|observation| observation.status())
                .map_err(|error| io_uncertain("inspecting", &dir, error))
        })
        .await
    }

    async fn stop_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
        grace: Duration,
    ) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let dir = self.execution_dir(sandbox_id, generation);
        let requested = {
            let dir = dir.clone();
            blocking(move || {
                request_stop(&dir)
                    .map_err(|error| io_uncertain("requesting a stop of", &dir, error))
            })
            .await?
        };
        if !requested {
            return Ok(()); // no such execution
        }

        // A shim that claimed the execution may be between its claim and starting the
        // command; wait until it says what it did, so there is something to signal.
        let deadline = Instant::now() + self.timeouts.shim_start_timeout;
        loop {
            let observation = observe_blocking(dir.clone()).await?;
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
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(self.timeouts.stop_poll_interval).await;
        }
    }

    async fn remove_sandbox(&self, sandbox_id: &str) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let sandbox_dir = self.driver_dir.join(sandbox_id);
        let generations = {
            let sandbox_dir = sandbox_dir.clone();
            blocking(move || {
                generations_of(&sandbox_dir)
                    .map_err(|error| io_uncertain("listing", &sandbox_dir, error))
            })
            .await?
        };
        for generation in generations {
            self.stop_execution(sandbox_id, generation, self.timeouts.remove_grace)
                .await?;
        }
        // Every execution is confirmed gone; only files remain.
        let driver_dir = self.driver_dir.clone();
        blocking(move || {
            match fs::remove_dir_all(&sandbox_dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(error) => return Err(io_uncertain("deleting", &sandbox_dir, error)),
            }
            sync_dir(&driver_dir).map_err(|error| io_uncertain("syncing", &driver_dir, error))
        })
        .await?;
        tracing::info!(sandbox_id, "sandbox removed");
        Ok(())
    }

    async fn list_executions(&self) -> Result<Vec<(String, u64, ExecutionStatus)>, DriverError> {
        let driver_dir = self.driver_dir.clone();
        blocking(move || {
            list_blocking(&driver_dir).map_err(|error| io_uncertain("listing", &driver_dir, error))
        })
        .await
    }
}

impl ComputeDriver for ProcessDriver {
    fn name(&self) -> &'static str {
        "process"
    }

    fn launch<'a>(&'a self, spec: &'a LaunchSpec) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.launch_execution(spec))
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
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.stop_execution(sandbox_id, generation, grace))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(self.remove_sandbox(sandbox_id))
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(self.list_executions())
    }
}

// ---------------------------------------------------------------------------------
// Driver-side file operations (blocking; run through `blocking`)

/// Creates the execution directory with its spec, unless it exists. A second launch
/// with a different spec for the same generation is refused: generations are never
/// reused, so that is a caller bug, not something to paper over.
pub(super) fn create_execution_dir(
    driver_dir: &Path,
    spec: &LaunchSpec,
) -> Result<(), DriverError> {
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
        let built = build_staging_dir(&staging, spec);
        let renamed = built.and_then(|()| fs::rename(&staging, &dir));
        match renamed {
            Ok(()) => {
                sync_dir(&sandbox_dir).map_err(uncertain)?;
                return Ok(());
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
        Some(existing) if existing == *spec => Ok(()),
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

pub(super) fn build_staging_dir(staging: &Path, spec: &LaunchSpec) -> io::Result<()> {
    fs::create_dir(staging)?;
    fs::create_dir(staging.join(WORK_DIRECTORY))?;
    write_file_synced(&staging.join(SPEC_FILE), &serde_json::to_vec(spec)?)?;
    sync_dir(staging)
}

/// Marks the execution as stopping. Returns false if it does not exist.
pub(super) fn request_stop(dir: &Path) -> io::Result<bool> {
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
pub(super) fn generations_of(sandbox_dir: &Path) -> io::Result<Vec<u64>> {
    let entries = match fs::read_dir(sandbox_dir) {
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

pub(super) fn list_blocking(driver_dir: &Path) -> io::Result<Vec<(String, u64, ExecutionStatus)>> {
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
        for generation in generations_of(&entry.path())? {
            if executions.len() >= EXECUTIONS_LISTED_MAX {
                return Err(too_many_executions(driver_dir));
            }
            let status = observe(&entry.path().join(generation.to_string()))?.status()?;
            executions.push((sandbox_id.clone(), generation, status));
        }
    }
    executions.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    Ok(executions)
}

pub(super) fn too_many_executions(dir: &Path) -> io::Error {
    io::Error::other(format!(
        "more than {EXECUTIONS_LISTED_MAX} executions under {}",
        dir.display()
    ))
}

pub(super) fn quote_shim_log(dir: &Path) -> String {
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

pub(super) fn validate_sandbox_id(sandbox_id: &str) -> Result<(), DriverError> {
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

pub(super) fn validate_spec(spec: &LaunchSpec) -> Result<(), DriverError> {
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

// ---------------------------------------------------------------------------------
// Errors and threads

pub(super) fn io_uncertain(action: &str, path: &Path, error: io::Error) -> DriverError {
    DriverError::Uncertain {
        message: format!("{action} {} failed: {error}", path.display()),
    }
}

/// Runs filesystem and `/proc` work off the async workers (fsync can take
/// milliseconds; a `/proc` scan more).
pub(super) async fn blocking<T, F>(work: F) -> Result<T, DriverError>
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
