//! The process driver: runs each execution as a local process tree supervised by a
//! small `palisade shim` process, so executions outlive the gateway that launched them.
//!
//! # Why a shim (the containerd-shim pattern)
//!
//! Leadership moves between gateway replicas, and any gateway may be killed at any
//! time. If a sandbox's command were a child of the gateway that led when it started,
//! only that gateway could wait for it, and killing the gateway would orphan it with
//! its exit status lost. Instead every execution gets a shim:
//!
//! - the gateway starts a short-lived *launcher* (`palisade shim launch DIR`), which
//!   starts the shim (`palisade shim run DIR`) in a new session and exits at once, so
//!   the shim is adopted by init: it is never a child of any gateway, and no gateway
//!   signal, exit or crash reaches it;
//! - the shim starts the command in a process group of its own, waits for it, and
//!   writes its exit status into the execution directory;
//! - the shim is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so descendants that
//!   daemonize out of the process group are reparented to it; when the command exits
//!   the shim kills whatever is left of the tree (as a container runtime does when a
//!   container's init exits), then records the exit and exits itself.
//!
//! All replicas on a host share one driver directory, so whichever gateway leads can
//! inspect, stop and reap any execution from the files alone, and a SIGKILL of every
//! gateway leaves sandboxes running for the next leader to re-adopt. The shim is the
//! execution handle: pid + start time + boot id, compared on every liveness check, so
//! a recycled pid is never mistaken for the shim, and zombies count as dead.
//!
//! # On-disk layout
//!
//! ```text
//! <driver_dir>/<sandbox_id>/<generation>/
//!   spec.json          the LaunchSpec; present before the directory becomes visible
//!   shim.json          the shim's claim {generation, pid, start_time, boot_id}
//!   command.json       the command's process group leader {pid, start_time, boot_id}
//!   rejected.json      the command could not be started {code, message}
//!   exit.json          the command ended and its tree is gone {code, signal}
//!   stop-requested     a stop was asked for; a shim that has not started the command yet
//!                      must not start it
//!   stdout.log, stderr.log   the command's output (appended, not rotated)
//!   shim.log           the shim's own diagnostics
//!   work/              the command's working directory
//! ```
//!
//! Records are written once, atomically (temporary file, fsync, rename or link, fsync
//! of the directory), so a reader sees all of a record or none of it.
//!
//! # How races are settled
//!
//! - *Two launches of one generation* (two gateways, or a retry): the directory is
//!   built under a temporary name and renamed into place; a rename onto an existing
//!   (never empty) directory fails, so exactly one spec wins. Any number of shims may
//!   then be started for it, but only one can create `shim.json` (a hard link fails if
//!   the name exists); the others exit without doing anything. A gateway that crashed
//!   between creating the directory and starting a shim is thus repaired by the next
//!   `launch`, which simply starts another shim.
//! - *Stop racing a launch*: `stop` creates `stop-requested` and then reads
//!   `shim.json`; the shim creates `shim.json` and then reads `stop-requested`. Either
//!   the stop sees the shim (and waits for it to report, then signals the command), or
//!   the shim sees the stop (and never starts the command).
//! - *Signalling*: the command's process group id is the command leader's pid. The
//!   leader is the shim's child, and the shim observes its exit without reaping it
//!   (`waitid(WNOWAIT)`) until it has killed the rest of the group, so while a process
//!   with the recorded pid and start time exists (even as a zombie), the group id is
//!   certainly ours.
//!
//! # Limits
//!
//! Linux only (`/proc`, `prctl`, `waitid`). One host: executions are found through the
//! local directory, so a cluster spread over hosts needs a driver with shared authority
//! (Docker, Kubernetes). Processes that escape both the process group and the shim's
//! subtree (e.g. by asking another daemon to start them) are not tracked. When
//! gateways run under systemd, the unit needs `KillMode=process` (or a separate scope
//! for shims), or stopping the gateway kills its cgroup, shims included. When a
//! gateway is PID 1 of a container, run it under an init that reaps (`docker --init`,
//! tini), or exited shims remain as zombies (harmless to this driver, which treats
//! zombies as dead, but they occupy the process table).

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

use super::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    LaunchSpec,
};

/// Longest accepted sandbox id. Ids are UUIDs (36 bytes); the bound keeps paths short.
pub const SANDBOX_ID_LENGTH_MAX: usize = 128;
/// Most command arguments (program included) in one spec.
pub const COMMAND_ARGUMENTS_MAX: usize = 4096;
/// Most environment variables in one spec.
pub const ENVIRONMENT_VARIABLES_MAX: usize = 4096;
/// Largest accepted spec, serialized. Also bounds how much of any record is read.
pub const SPEC_BYTES_MAX: usize = 1024 * 1024;
/// Most executions `list` and `remove` walk; beyond this the directory is not one
/// this driver keeps healthy, and the call fails rather than running unbounded.
pub const EXECUTIONS_LISTED_MAX: usize = 100_000;

/// `PATH` of commands whose spec does not set one (the command gets no other
/// variable from the gateway's environment).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long the shim keeps killing and reaping leftovers after the command exits
/// before it records the exit anyway (a process stuck in uninterruptible sleep
/// cannot be killed; it must not keep the exit unrecorded forever).
const SHIM_SWEEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between the shim's kill-and-reap rounds.
const SHIM_SWEEP_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Exit code recorded for a command that was not found (shell convention).
const EXIT_CODE_NOT_FOUND: i32 = 127;
/// Exit code recorded for a command that exists but could not be started.
const EXIT_CODE_NOT_EXECUTABLE: i32 = 126;
/// Exit codes of signal deaths are this plus the signal number (shell convention).
const EXIT_CODE_SIGNAL_BASE: i32 = 128;

/// The subcommand of the `palisade` binary that runs shim code.
pub const SHIM_SUBCOMMAND: &str = "shim";

const SPEC_FILE: &str = "spec.json";
const SHIM_FILE: &str = "shim.json";
const COMMAND_FILE: &str = "command.json";
const REJECTED_FILE: &str = "rejected.json";
const EXIT_FILE: &str = "exit.json";
const STOP_REQUESTED_FILE: &str = "stop-requested";
const STDOUT_FILE: &str = "stdout.log";
const STDERR_FILE: &str = "stderr.log";
const SHIM_LOG_FILE: &str = "shim.log";
const WORK_DIRECTORY: &str = "work";
/// Prefix of execution directories under construction; never a valid sandbox id
/// (ids may not start with a dot), so `list` cannot mistake them for executions.
const STAGING_PREFIX: &str = ".staging-";
/// How much of `shim.log` an error message quotes.
const SHIM_LOG_QUOTED_BYTES_MAX: u64 = 2048;

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
// Records

/// The shim's claim on an execution, and the execution's handle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ShimRecord {
    generation: u64,
    pid: u32,
    start_time: u64,
    boot_id: String,
}

impl ShimRecord {
    fn handle(&self) -> ExecutionHandle {
        ExecutionHandle {
            generation: self.generation,
            identity: ExecutionIdentity::Process {
                pid: self.pid,
                start_time: self.start_time,
                boot_id: self.boot_id.clone(),
            },
        }
    }

    fn identity(&self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.pid,
            start_time: self.start_time,
            boot_id: self.boot_id.clone(),
        }
    }
}

/// A process as the kernel names it for as long as it exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ProcessIdentity {
    pid: u32,
    start_time: u64,
    boot_id: String,
}

/// How the command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExitRecord {
    code: i32,
    signal: Option<i32>,
}

/// The command could not be started: a definite failure with no process left behind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RejectedRecord {
    code: i32,
    message: String,
}

/// Whether a recorded process still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Presence {
    /// Running (or stopped, sleeping): the recorded process itself.
    Live,
    /// Exited but not yet reaped: still holds its pid (and process group id), so it is
    /// safe to signal its group, but it does no work.
    Zombie,
    /// No process with this pid, start time and boot exists.
    Gone,
}

/// Everything the directory and `/proc` say about one execution, read in the order
/// the shim writes (claim, then liveness, then terminal records): the shim writes
/// `exit.json` or `rejected.json` before it exits, so a shim seen gone has already
/// written whatever it was going to write.
#[derive(Clone, Debug)]
struct Observation {
    exists: bool,
    shim: Option<ShimRecord>,
    shim_presence: Presence,
    command: Option<ProcessIdentity>,
    command_presence: Presence,
    exit: Option<ExitRecord>,
    rejected: Option<RejectedRecord>,
}

fn observe(dir: &Path) -> io::Result<Observation> {
    if !dir.try_exists()? {
        return Ok(Observation {
            exists: false,
            shim: None,
            shim_presence: Presence::Gone,
            command: None,
            command_presence: Presence::Gone,
            exit: None,
            rejected: None,
        });
    }
    let shim: Option<ShimRecord> = read_record(&dir.join(SHIM_FILE))?;
    let shim_presence = match &shim {
        Some(shim) => presence(&shim.identity())?,
        None => Presence::Gone,
    };
    let command: Option<ProcessIdentity> = read_record(&dir.join(COMMAND_FILE))?;
    let command_presence = match &command {
        Some(command) => presence(command)?,
        None => Presence::Gone,
    };
    let exit = read_record(&dir.join(EXIT_FILE))?;
    let rejected = read_record(&dir.join(REJECTED_FILE))?;
    Ok(Observation {
        exists: true,
        shim,
        shim_presence,
        command,
        command_presence,
        exit,
        rejected,
    })
}

async fn observe_blocking(dir: PathBuf) -> Result<Observation, DriverError> {
    blocking(move || observe(&dir).map_err(|error| io_uncertain("reading", &dir, error))).await
}

impl Observation {
    fn status(&self) -> io::Result<ExecutionStatus> {
        if let Some(rejected) = &self.rejected {
            return Ok(ExecutionStatus::Exited {
                code: rejected.code,
            });
        }
        // The shim writes exit.json only after the command's whole tree is gone.
        if let Some(exit) = &self.exit {
            return Ok(ExecutionStatus::Exited { code: exit.code });
        }
        let Some(shim) = &self.shim else {
            // Never claimed by a shim (a launch was interrupted): nothing runs.
            return Ok(ExecutionStatus::Absent);
        };
        if self.shim_presence == Presence::Live || self.has_orphans()? {
            return Ok(ExecutionStatus::Running {
                handle: shim.handle(),
            });
        }
        Ok(ExecutionStatus::Absent)
    }

    /// Whether processes of the execution survive a shim that died without recording
    /// the exit (killed by an operator or the OOM killer).
    fn has_orphans(&self) -> io::Result<bool> {
        if self.shim_presence == Presence::Live || self.exit.is_some() {
            return Ok(false);
        }
        if self.command_presence == Presence::Live {
            return Ok(true);
        }
        Ok(!self.strays()?.is_empty())
    }

    /// Live members of the command's process group after its leader is gone and the
    /// shim died without sweeping them. The group id alone could since name a
    /// stranger's group, so a member must also be in the shim's session and have
    /// started after the shim, in the same boot.
    fn strays(&self) -> io::Result<Vec<i32>> {
        let (Some(shim), Some(command)) = (&self.shim, &self.command) else {
            return Ok(Vec::new());
        };
        if shim.boot_id != boot_id()? {
            return Ok(Vec::new());
        }
        let (Ok(group), Ok(session)) = (i32::try_from(command.pid), i32::try_from(shim.pid)) else {
            return Ok(Vec::new());
        };
        Ok(processes()?
            .into_iter()
            .filter(|(_, stat)| {
                stat.process_group == group
                    && stat.session == session
                    && stat.start_time >= shim.start_time
                    && !stat.is_zombie()
            })
            .map(|(pid, _)| pid)
            .collect())
    }

    /// True when no process of the execution runs and the shim has finished.
    fn is_gone(&self) -> bool {
        if !self.exists || self.shim.is_none() {
            return true;
        }
        if self.shim_presence == Presence::Live || self.command_presence == Presence::Live {
            return false;
        }
        // The shim sweeps the tree before writing exit.json; without it, look for
        // survivors ourselves. An unreadable /proc counts as "not known to be gone".
        self.exit.is_some()
            || self.rejected.is_some()
            || self.strays().is_ok_and(|strays| strays.is_empty())
    }

    /// Sends `signal` to the command's process group, if it is certainly ours.
    fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        let leader_group = match (&self.command, self.command_presence) {
            (Some(command), Presence::Live | Presence::Zombie) => i32::try_from(command.pid).ok(),
            _ => None,
        };
        if let Some(group) = leader_group {
            // The leader (even as a zombie the shim has not reaped) holds the group id,
            // so the group cannot belong to anyone else.
            return send_signal(-group, signal);
        }
        if self.shim_presence == Presence::Live {
            // The leader exited and the live shim is killing what is left of the tree.
            return Ok(());
        }
        for pid in self.strays()? {
            send_signal(pid, signal)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Driver-side file operations (blocking; run through `blocking`)

/// Creates the execution directory with its spec, unless it exists. A second launch
/// with a different spec for the same generation is refused: generations are never
/// reused, so that is a caller bug, not something to paper over.
fn create_execution_dir(driver_dir: &Path, spec: &LaunchSpec) -> Result<(), DriverError> {
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

fn build_staging_dir(staging: &Path, spec: &LaunchSpec) -> io::Result<()> {
    fs::create_dir(staging)?;
    fs::create_dir(staging.join(WORK_DIRECTORY))?;
    write_file_synced(&staging.join(SPEC_FILE), &serde_json::to_vec(spec)?)?;
    sync_dir(staging)
}

/// Marks the execution as stopping. Returns false if it does not exist.
fn request_stop(dir: &Path) -> io::Result<bool> {
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
fn generations_of(sandbox_dir: &Path) -> io::Result<Vec<u64>> {
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

fn list_blocking(driver_dir: &Path) -> io::Result<Vec<(String, u64, ExecutionStatus)>> {
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

fn too_many_executions(dir: &Path) -> io::Error {
    io::Error::other(format!(
        "more than {EXECUTIONS_LISTED_MAX} executions under {}",
        dir.display()
    ))
}

fn quote_shim_log(dir: &Path) -> String {
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

fn validate_sandbox_id(sandbox_id: &str) -> Result<(), DriverError> {
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

fn validate_spec(spec: &LaunchSpec) -> Result<(), DriverError> {
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
// Files

/// Reads a JSON record; `None` if it does not exist.
fn read_record<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut bytes = Vec::new();
    file.take(SPEC_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > SPEC_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {SPEC_BYTES_MAX} bytes", path.display()),
        ));
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a valid record: {error}", path.display()),
        )
    })
}

fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(OsString::new, OsStr::to_os_string);
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", uuid::Uuid::new_v4()));
    path.with_file_name(temporary)
}

fn write_file_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or_else(|| Path::new("."))
}

/// Writes a record atomically, replacing any previous one.
fn write_record<T: Serialize>(path: &Path, record: &T) -> io::Result<()> {
    let temporary = temporary_path(path);
    let written = write_file_synced(&temporary, &serde_json::to_vec(record)?)
        .and_then(|()| fs::rename(&temporary, path));
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written?;
    sync_dir(parent_of(path))
}

/// Writes a record atomically unless one exists. Returns whether this call created it.
fn create_record<T: Serialize>(path: &Path, record: &T) -> io::Result<bool> {
    let temporary = temporary_path(path);
    write_file_synced(&temporary, &serde_json::to_vec(record)?)?;
    // link(2), unlike rename(2), fails if the name exists: exactly one creator wins.
    let linked = fs::hard_link(&temporary, path);
    let _ = fs::remove_file(&temporary);
    match linked {
        Ok(()) => sync_dir(parent_of(path)).map(|()| true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error),
    }
}

// ---------------------------------------------------------------------------------
// /proc

/// The fields of `/proc/<pid>/stat` this driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProcStat {
    state: u8,
    parent: i32,
    process_group: i32,
    session: i32,
    start_time: u64,
}

impl ProcStat {
    fn is_zombie(&self) -> bool {
        // 'X' (dead) is only ever seen transiently, on the way out.
        matches!(self.state, b'Z' | b'X')
    }
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from the last ')'.
fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let after_name = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    Some(ProcStat {
        state: *fields.first()?.as_bytes().first()?,
        parent: fields.get(1)?.parse().ok()?,
        process_group: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// `None` when no process has this pid.
fn read_proc_stat(pid: i32) -> io::Result<Option<ProcStat>> {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => parse_proc_stat(&text).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cannot parse /proc/{pid}/stat"),
            )
        }),
        // ESRCH: the process exited while we read.
        Err(error)
            if error.kind() == io::ErrorKind::NotFound
                || error.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

fn boot_id() -> io::Result<&'static str> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(boot_id) = BOOT_ID.get() {
        return Ok(boot_id);
    }
    let boot_id = fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned();
    Ok(BOOT_ID.get_or_init(|| boot_id))
}

/// Whether the recorded process still exists: same pid, same start time, same boot.
fn presence(identity: &ProcessIdentity) -> io::Result<Presence> {
    if identity.boot_id != boot_id()? {
        return Ok(Presence::Gone);
    }
    let Ok(pid) = i32::try_from(identity.pid) else {
        return Ok(Presence::Gone);
    };
    Ok(match read_proc_stat(pid)? {
        Some(stat) if stat.start_time == identity.start_time => {
            if stat.is_zombie() {
                Presence::Zombie
            } else {
                Presence::Live
            }
        }
        // No such pid, or the pid now names another process.
        _ => Presence::Gone,
    })
}

fn identity_of(pid: i32) -> io::Result<ProcessIdentity> {
    let stat = read_proc_stat(pid)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}")))?;
    Ok(ProcessIdentity {
        pid: u32::try_from(pid).map_err(io::Error::other)?,
        start_time: stat.start_time,
        boot_id: boot_id()?.to_owned(),
    })
}

/// Every process visible in `/proc` with its stat.
fn processes() -> io::Result<Vec<(i32, ProcStat)>> {
    let mut processes = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        if let Some(stat) = read_proc_stat(pid)? {
            processes.push((pid, stat));
        }
    }
    Ok(processes)
}

/// kill(2); a target that no longer exists is not an error.
fn send_signal(target: i32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(target, signal) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(error)
    }
}

// ---------------------------------------------------------------------------------
// Errors and threads

fn io_uncertain(action: &str, path: &Path, error: io::Error) -> DriverError {
    DriverError::Uncertain {
        message: format!("{action} {} failed: {error}", path.display()),
    }
}

/// Runs filesystem and `/proc` work off the async workers (fsync can take
/// milliseconds; a `/proc` scan more).
async fn blocking<T, F>(work: F) -> Result<T, DriverError>
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

// ---------------------------------------------------------------------------------
// The shim side: runs inside `palisade shim ...`, never inside a gateway.

/// Arguments of the hidden `palisade shim` subcommand (the words after `shim`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShimArgs {
    /// `launch DIR`: start `run DIR` in a new session and exit at once, so the shim
    /// is reparented to init instead of staying a gateway's child.
    Launch {
        /// The execution directory.
        execution_dir: PathBuf,
    },
    /// `run DIR`: be the shim of the execution in DIR.
    Run {
        /// The execution directory.
        execution_dir: PathBuf,
    },
    /// `idle`: the default command of a spec without one: sleep until signalled.
    Idle,
}

impl ShimArgs {
    /// Parses the words after `shim`.
    pub fn from_argv(words: &[OsString]) -> Result<ShimArgs, String> {
        let text: Vec<Option<&str>> = words.iter().map(|word| word.to_str()).collect();
        match text.as_slice() {
            [Some("launch"), _] => Ok(ShimArgs::Launch {
                execution_dir: PathBuf::from(&words[1]),
            }),
            [Some("run"), _] => Ok(ShimArgs::Run {
                execution_dir: PathBuf::from(&words[1]),
            }),
            [Some("idle")] => Ok(ShimArgs::Idle),
            _ => Err(format!(
                "usage: palisade {SHIM_SUBCOMMAND} (launch DIR | run DIR | idle); got {words:?}"
            )),
        }
    }

    /// The full argument list (after the program), starting with `shim`.
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut argv = vec![OsString::from(SHIM_SUBCOMMAND)];
        match self {
            ShimArgs::Launch { execution_dir } => {
                argv.push("launch".into());
                argv.push(execution_dir.clone().into_os_string());
            }
            ShimArgs::Run { execution_dir } => {
                argv.push("run".into());
                argv.push(execution_dir.clone().into_os_string());
            }
            ShimArgs::Idle => argv.push("idle".into()),
        }
        argv
    }
}

/// If this process was started as `palisade shim ...`, runs the shim and returns its
/// exit code; otherwise returns `None` at once. Call it first thing in `main`, before
/// any runtime or thread starts: the shim is a small single-threaded process.
pub fn run_shim_if_requested() -> Option<i32> {
    let mut arguments = std::env::args_os().skip(1);
    if arguments.next().as_deref() != Some(OsStr::new(SHIM_SUBCOMMAND)) {
        return None;
    }
    let words: Vec<OsString> = arguments.collect();
    Some(match ShimArgs::from_argv(&words) {
        Ok(args) => run_shim(args),
        Err(usage) => {
            eprintln!("{usage}");
            2
        }
    })
}

/// Runs one shim role and returns the process exit code. Errors go to stderr, which
/// for `run` is the execution's `shim.log`.
pub fn run_shim(args: ShimArgs) -> i32 {
    let result = match &args {
        ShimArgs::Launch { execution_dir } => launch_shim(execution_dir),
        ShimArgs::Run { execution_dir } => supervise(execution_dir),
        ShimArgs::Idle => idle(),
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("palisade shim {args:?}: {error}");
            1
        }
    }
}

fn launch_shim(dir: &Path) -> io::Result<()> {
    let program = std::env::current_exe()?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(SHIM_LOG_FILE))?;
    let mut shim = Command::new(program);
    shim.args(
        ShimArgs::Run {
            execution_dir: dir.to_path_buf(),
        }
        .to_argv(),
    )
    .current_dir("/")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log);
    // SAFETY: the closure runs between fork and exec and only calls setsid, which is
    // async-signal-safe. A new session detaches the shim from the gateway's session,
    // process group and terminal, so signals aimed at those never reach it.
    unsafe {
        shim.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Not waited for: this launcher exits now, and the shim is adopted by init.
    shim.spawn()?;
    Ok(())
}

fn idle() -> io::Result<()> {
    loop {
        // SAFETY: pause has no preconditions; the default dispositions of SIGTERM and
        // SIGKILL end this process, which is the point.
        unsafe {
            libc::pause();
        }
    }
}

/// Process group the shim forwards SIGTERM, SIGINT and SIGHUP to (0: none yet).
static FORWARD_TO_GROUP: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(signal: libc::c_int) {
    // SAFETY: only async-signal-safe calls (kill) and errno save/restore.
    unsafe {
        let errno = *libc::__errno_location();
        let group = FORWARD_TO_GROUP.load(Ordering::SeqCst);
        if group > 0 {
            libc::kill(-group, signal);
        }
        *libc::__errno_location() = errno;
    }
}

/// An operator who signals the shim (or a service manager stopping its unit) means
/// the execution: forward the signal to the command's group instead of dying and
/// leaving the command unsupervised. Handlers (unlike ignored signals) are reset by
/// exec, so the command starts with default dispositions.
fn install_signal_forwarding() -> io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value, and the
        // handler is an extern "C" fn doing only async-signal-safe work.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                forward_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The shim proper: claim the execution, start the command, wait, sweep, record.
fn supervise(dir: &Path) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer argument only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    install_signal_forwarding()?;
    let spec: LaunchSpec = read_record(&dir.join(SPEC_FILE))?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no spec.json"))?;
    let me = identity_of(std::process::id() as i32)?;
    let claim = ShimRecord {
        generation: spec.generation,
        pid: me.pid,
        start_time: me.start_time,
        boot_id: me.boot_id,
    };
    if !create_record(&dir.join(SHIM_FILE), &claim)? {
        return Ok(()); // another shim owns this execution
    }
    if dir.join(STOP_REQUESTED_FILE).try_exists()? {
        // Stopped before it started: record it as a SIGTERM death without running it.
        return write_record(
            &dir.join(EXIT_FILE),
            &ExitRecord {
                code: EXIT_CODE_SIGNAL_BASE + libc::SIGTERM,
                signal: Some(libc::SIGTERM),
            },
        );
    }

    let argv: Vec<OsString> = if spec.command.is_empty() {
        let mut argv = vec![std::env::current_exe()?.into_os_string()];
        argv.extend(ShimArgs::Idle.to_argv());
        argv
    } else {
        spec.command.iter().map(OsString::from).collect()
    };
    let open_log = |name: &str| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
    };
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .envs(&spec.env)
        .current_dir(dir.join(WORK_DIRECTORY))
        .stdin(Stdio::null())
        .stdout(open_log(STDOUT_FILE)?)
        .stderr(open_log(STDERR_FILE)?)
        // Its own process group, so the gateway can signal the whole command without
        // touching the shim.
        .process_group(0);
    let leader = match command.spawn() {
        Ok(child) => child.id() as i32,
        Err(error) => {
            let code = if error.kind() == io::ErrorKind::NotFound {
                EXIT_CODE_NOT_FOUND
            } else {
                EXIT_CODE_NOT_EXECUTABLE
            };
            let message = format!(
                "cannot start {:?}: {error}",
                String::from_utf8_lossy(argv[0].as_bytes())
            );
            return write_record(&dir.join(REJECTED_FILE), &RejectedRecord { code, message });
        }
    };
    FORWARD_TO_GROUP.store(leader, Ordering::SeqCst);
    // The leader is our unreaped child, so its stat stays readable even if it has
    // already exited.
    write_record(&dir.join(COMMAND_FILE), &identity_of(leader)?)?;

    let exit = wait_for_leader(leader)?;
    FORWARD_TO_GROUP.store(0, Ordering::SeqCst);
    // The leader is a zombie we have not reaped, so its pid, and with it the process
    // group id, cannot have been reused: this kills only what is left of our group.
    send_signal(-leader, libc::SIGKILL)?;
    sweep_descendants();
    write_record(&dir.join(EXIT_FILE), &exit)
}

/// Waits for the command's leader to exit without reaping it, reaping every other
/// child meanwhile (orphans adopted by this subreaper) so zombies do not pile up.
fn wait_for_leader(leader: i32) -> io::Result<ExitRecord> {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid siginfo_t for waitid to write.
        let waited =
            unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if waited != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(error);
        }
        // SAFETY: for a CLD_* child event waitid fills the sigchld fields.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == leader {
            return Ok(if info.si_code == libc::CLD_EXITED {
                ExitRecord {
                    code: status,
                    signal: None,
                }
            } else {
                ExitRecord {
                    code: EXIT_CODE_SIGNAL_BASE + status,
                    signal: Some(status),
                }
            });
        }
        reap(pid);
    }
}

fn reap(pid: i32) {
    loop {
        // SAFETY: a null status pointer is allowed.
        let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if reaped >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Kills and reaps every remaining descendant. Orphans are reparented to this
/// subreaper as their parents die, so repeating "kill my children, reap them" walks
/// the whole tree, including processes that left the process group. Signalling our
/// own children is race-free: their pids stay ours until we reap them.
fn sweep_descendants() {
    let deadline = Instant::now() + SHIM_SWEEP_TIMEOUT;
    let me = std::process::id() as i32;
    loop {
        match processes() {
            Ok(processes) => {
                for (pid, stat) in processes {
                    if stat.parent == me && !stat.is_zombie() {
                        let _ = send_signal(pid, libc::SIGKILL);
                    }
                }
            }
            Err(error) => eprintln!("palisade shim: listing processes failed: {error}"),
        }
        loop {
            // SAFETY: a null status pointer is allowed.
            let reaped = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            if reaped > 0 {
                continue;
            }
            if reaped < 0 {
                let error = io::Error::last_os_error();
                if error.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return; // ECHILD: no descendants left
            }
            break; // children remain, not yet dead
        }
        if Instant::now() >= deadline {
            eprintln!(
                "palisade shim: descendants still alive {SHIM_SWEEP_TIMEOUT:?} after SIGKILL; \
                 recording the exit anyway"
            );
            return;
        }
        std::thread::sleep(SHIM_SWEEP_POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_counts_fields_after_the_last_parenthesis() {
        let text = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n";
        let stat = parse_proc_stat(text).expect("parses");
        assert_eq!(
            stat,
            ProcStat {
                state: b'S',
                parent: 1,
                process_group: 1234,
                session: 1234,
                start_time: 987654,
            }
        );
    }

    #[test]
    fn own_start_time_is_stable() {
        let pid = std::process::id() as i32;
        let first = identity_of(pid).expect("own stat");
        assert_eq!(presence(&first).expect("presence"), Presence::Live);
        let recycled = ProcessIdentity {
            start_time: first.start_time + 1,
            ..first.clone()
        };
        assert_eq!(presence(&recycled).expect("presence"), Presence::Gone);
        let other_boot = ProcessIdentity {
            boot_id: "not-this-boot".to_owned(),
            ..first
        };
        assert_eq!(presence(&other_boot).expect("presence"), Presence::Gone);
    }

    #[test]
    fn sandbox_ids_must_be_plain_directory_names() {
        for good in ["0b8e4c52-3b6b-4f5e-9a53-1f0c9c1d2e3f", "a", "a.b_c-d"] {
            assert!(validate_sandbox_id(good).is_ok(), "{good}");
        }
        let long = "a".repeat(SANDBOX_ID_LENGTH_MAX + 1);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../x",
            "a b",
            long.as_str(),
        ] {
            assert!(validate_sandbox_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs_over_the_limits_are_rejected() {
        let spec = |command: Vec<String>| LaunchSpec {
            sandbox_id: "s".to_owned(),
            generation: 1,
            command,
            env: Default::default(),
        };
        assert!(validate_spec(&spec(vec![])).is_ok());
        assert!(validate_spec(&spec(vec![String::new()])).is_err());
        assert!(validate_spec(&spec(vec!["a\0b".to_owned()])).is_err());
        assert!(validate_spec(&spec(vec!["x".to_owned(); COMMAND_ARGUMENTS_MAX + 1])).is_err());
        let mut with_env = spec(vec!["true".to_owned()]);
        with_env.env.insert("A=B".to_owned(), "c".to_owned());
        assert!(validate_spec(&with_env).is_err());
    }

    #[test]
    fn shim_argv_round_trips() {
        for args in [
            ShimArgs::Launch {
                execution_dir: "/d/s/1".into(),
            },
            ShimArgs::Run {
                execution_dir: "/d/s/1".into(),
            },
            ShimArgs::Idle,
        ] {
            let argv = args.to_argv();
            assert_eq!(argv[0], SHIM_SUBCOMMAND);
            assert_eq!(ShimArgs::from_argv(&argv[1..]), Ok(args));
        }
        assert!(ShimArgs::from_argv(&[OsString::from("bogus")]).is_err());
    }
}
