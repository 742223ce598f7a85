//! Compute drivers: the only code that creates, signals and deletes sandbox compute.
//!
//! The effect executor (leader only) turns committed lifecycle operations into driver
//! calls. Leadership moves, calls time out and gateways crash, so every call here is
//! built to be repeated safely:
//!
//! - Calls are keyed by (sandbox id, generation), never by a sandbox name, so a stale
//!   "stop generation 3" cannot reach generation 4 (DESIGN.md section 4, fencing).
//! - Every call is idempotent: a second `launch` of a generation returns the execution
//!   the first one started; `stop` and `remove` of something already gone succeed.
//! - Errors say whether the call certainly had no effect ([`DriverError::Rejected`],
//!   which the executor may record as a failure) or whether the outcome is unknown
//!   ([`DriverError::Uncertain`], which it resolves by observing the driver with
//!   `inspect`/`list`, never by assuming failure).
//! - `list` returns everything the driver manages, so executions that the replicated
//!   state does not know (orphans of a deposed leader) can be found and removed.
//!
//! # Fencing reaches the effect
//!
//! The executor confirms its leadership and then calls the driver: check-then-act. A
//! leader paused between the two acts after it was deposed. So every call that
//! changes something (`launch`, `stop`, `remove`) carries a [`Fence`] — (cluster id,
//! term, sandbox id, generation, operation index) — and every driver keeps, per
//! sandbox, the highest fence it has seen, durably and atomically with the effect,
//! and refuses a lower one with [`DriverError::Fenced`] (Kleppmann's fencing tokens,
//! Chubby's sequencers: the resource checks the token, not only the lock holder).
//! Fences are ordered by (term, operation index); an equal fence is admitted (a
//! repeated call of the same operation). A fence of another cluster is refused.
//!
//! `remove` leaves a durable *tombstone*: written (and made durable) before any
//! execution is stopped, kept after the sandbox's executions are gone, and garbage-
//! collected only after a long, configurable time. A `launch` checks the tombstone
//! *after* it claimed its generation (and the process driver's shim checks it again
//! after it claimed the execution, before the command starts): claim-then-check on
//! one side, mark-then-list on the other, so one of them always sees the other, and
//! a launch that lost the race refuses (`Fenced`) and leaves nothing running.
//!
//! Every driver implements the same rule: where it keeps the highest fence and the
//! tombstone, and why the check is atomic with the effect, is documented in the
//! driver's own module. The rule, for implementers (the Docker driver included):
//!
//! 1. **A fence names its call.** `fence.sandbox_id` is the call's sandbox, and for
//!    `launch` and `stop` `fence.generation` is the call's generation; a fence that
//!    names something else is a caller bug, refused with [`DriverError::Rejected`].
//! 2. **Check, record and act as one step.** Per sandbox, the driver keeps the
//!    highest fence admitted so far where its effects live (the process driver: a
//!    file beside the executions, under a lock every replica of the host takes). A
//!    call reads it, refuses a fence that is not [`Fence::admits_after`] it
//!    ([`DriverError::Fenced`], nothing done), records a higher one durably, and
//!    takes the step that decides its effect, all without letting another call of
//!    the same sandbox in between: `launch` claims the generation and checks the
//!    tombstone, `stop` marks the execution stopping, `remove` writes the tombstone.
//!    What follows that step (waiting for a process, signalling it after a grace)
//!    only carries out what was decided, and no later fence can undo it: nothing
//!    clears a stop or a tombstone, and a generation is never launched twice.
//! 3. **Fenced means no effect.** A driver answers `Fenced` only when the call itself
//!    changed nothing; when it cannot tell, it answers `Uncertain`, and a repeated
//!    call (all calls are idempotent) answers `Fenced` once nothing is left to tell.
//! 4. **Tombstones.** `remove` writes the tombstone durably before it stops anything,
//!    keeps it (and the highest fence) after the executions are gone, and refuses
//!    every later `launch` of the sandbox, whatever its fence. A tombstone is
//!    collected only after a long retention, documented by the driver (the process
//!    driver: 7 days by default); a launch older than that is no longer refused.
//!    `list` does not report what a tombstone left behind, only executions that run.
//! 5. **Know where you are.** A driver has an [`identity`](ComputeDriver::identity)
//!    and records it with every execution it starts. An execution recorded under
//!    another identity is out of sight: `inspect`, `stop` and `remove` answer
//!    `Uncertain` for it, never `Absent` or success, and `list` leaves it out.
//! 6. **A lost launch is uncertain.** When whatever starts the execution dies
//!    abnormally (killed by a signal, a timeout) and what it left does not tell, the
//!    launch is `Uncertain`, resolved by observation, never `Rejected`: the
//!    execution may have started.
//!
//! # Layout
//!
//! - this module: the [`ComputeDriver`] trait and the types it speaks.
//! - [`process`]: the embedded default driver, one shim process per execution
//!   (containerd-shim pattern), Linux only.
//! - [`docker`]: one container per execution on a Docker Engine (`bollard`), its
//!   fences beside the gateways like the process driver's; Linux only.
//! - [`noop`]: runs nothing; keeps only fences and tombstones, in memory; for
//!   benchmarks and tests of the control plane (`palisade gateway run --driver noop`).
//! - [`fault`]: wraps another driver and injects faults by a seeded plan.
//!
//! The trait returns boxed futures ([`futures::future::BoxFuture`]) rather than using
//! `async fn`, so it stays object safe (`Arc<dyn ComputeDriver>`) without the
//! `async-trait` macro; implementations write `Box::pin(self.inherent_async_fn(..))`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

#[cfg(target_os = "linux")]
pub mod docker;
pub mod fault;
pub mod noop;
#[cfg(target_os = "linux")]
pub mod process;

/// What to run for one execution of a sandbox.
///
/// Written into the replicated log by the leader, so every replica (and every retry
/// of a launch) asks the driver for exactly the same thing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The sandbox's immutable id (a UUID chosen by the leader).
    pub sandbox_id: String,
    /// The execution's generation; grows on every launch of the sandbox.
    pub generation: u64,
    /// Program and arguments. Empty means the driver's default long-running idle
    /// command (a sandbox that waits to be used, e.g. over SSH).
    pub command: Vec<String>,
    /// The complete environment of the command.
    pub env: BTreeMap<String, String>,
    /// Container image (drivers that run containers; empty: the driver's default
    /// image). A driver that runs no images refuses a spec that names one.
    #[serde(default)]
    pub image: String,
    /// CPU limit in thousandths of a CPU (0: no limit).
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory limit in bytes (0: no limit).
    #[serde(default)]
    pub memory_bytes: u64,
    /// Working directory of the command inside the sandbox (empty: the driver's
    /// default).
    #[serde(default)]
    pub workdir: String,
}

impl LaunchSpec {
    /// Whether the spec asks for anything only a container driver provides (an
    /// image, CPU or memory limits, a working directory inside an image).
    pub fn wants_container(&self) -> bool {
        !self.image.is_empty()
            || self.cpu_millis != 0
            || self.memory_bytes != 0
            || !self.workdir.is_empty()
    }
}

/// Durable, driver-specific identity of one execution.
///
/// Stored with the execution in the replicated state and shown to operators; it lets
/// a driver tell the execution apart from anything that later reuses its pid, name or
/// slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecutionHandle {
    /// The generation this handle belongs to.
    pub generation: u64,
    /// Who runs the execution, in the driver's terms.
    pub identity: ExecutionIdentity,
}

/// The driver-specific part of an [`ExecutionHandle`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "driver", rename_all = "snake_case")]
pub enum ExecutionIdentity {
    /// The process driver's shim: a pid alone can be recycled, so the handle also
    /// carries the shim's start time (clock ticks after boot, field 22 of
    /// `/proc/<pid>/stat`) and the kernel boot id (start times restart at every boot).
    Process {
        /// Process id of the shim.
        pid: u32,
        /// Start time of the shim in clock ticks after boot.
        start_time: u64,
        /// `/proc/sys/kernel/random/boot_id` of the boot the shim ran in.
        boot_id: String,
        /// The [identity](ComputeDriver::identity) of the driver directory the
        /// execution was recorded in.
        driver_id: String,
    },
    /// Drivers whose authority names executions with one string (a container id, a
    /// pod uid, a test driver's counter).
    Opaque {
        /// The driver's id for the execution.
        id: String,
    },
}

impl fmt::Display for ExecutionHandle {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.identity {
            ExecutionIdentity::Process {
                pid, start_time, ..
            } => write!(formatter, "pid={pid} start={start_time}"),
            ExecutionIdentity::Opaque { id } => write!(formatter, "id={id}"),
        }
    }
}

/// What a driver observes about one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutionStatus {
    /// The execution is running.
    Running {
        /// Its handle.
        handle: ExecutionHandle,
    },
    /// The execution ended and its exit status was recorded. A signal death reads as
    /// 128 + signal number (shell convention); a command that could not be started
    /// reads as 127 (not found) or 126 (not executable).
    Exited {
        /// Exit code.
        code: i32,
    },
    /// No such execution runs: it was never launched, it was removed, or it vanished
    /// without recording an exit status (its supervisor was killed, the host rebooted).
    Absent,
}

/// A fencing token carried by every driver call that changes something: who asks
/// (the cluster, and its leader's term) and for which operation (the sandbox, the
/// execution generation, and the log index of the entry that began the operation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The cluster's id (from the replicated state); a fence of another cluster
    /// sharing the driver's authority is always refused.
    pub cluster_id: String,
    /// The proposer's Raft term: the leader that performs the effect.
    pub term: u64,
    /// The sandbox the effect is for.
    pub sandbox_id: String,
    /// The execution generation the effect targets.
    pub generation: u64,
    /// Log index of the entry that began the operation (or, for the orphan
    /// reconciler, the index of the entry that last changed the sandbox).
    pub operation_index: u64,
}

impl Fence {
    /// The order of fences: by term, then by operation index.
    pub fn order(&self) -> (u64, u64) {
        (self.term, self.operation_index)
    }

    /// Whether a call carrying this fence may act on a sandbox whose highest fence
    /// seen so far is `seen`: the same cluster, and not lower.
    pub fn admits_after(&self, seen: &Fence) -> bool {
        self.cluster_id == seen.cluster_id && self.order() >= seen.order()
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "fence(term {}, operation {}, sandbox {} generation {})",
            self.term, self.operation_index, self.sandbox_id, self.generation
        )
    }
}

/// Why a driver call failed, split by what the caller may conclude.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The driver refused before doing anything (invalid spec, command not found,
    /// shim program missing): the call certainly had no effect, and repeating it will
    /// fail the same way.
    #[error("rejected by the compute driver: {message}")]
    Rejected {
        /// What was wrong, for the operator.
        message: String,
    },
    /// The call may or may not have taken effect (a timeout, an IO error after the
    /// driver started acting). Resolve it by observing the execution with `inspect` or
    /// `list`, or by repeating the call (all calls are idempotent).
    #[error("compute driver outcome unknown: {message}; inspect the execution or retry")]
    Uncertain {
        /// What happened, for the operator.
        message: String,
    },
    /// The call carried a fence lower than one the driver already saw for the
    /// sandbox (a deposed leader acting late), or the sandbox carries a tombstone
    /// (it was removed): the call had no effect. The caller is not the one to decide
    /// anything about the operation: the current leader does.
    #[error("fenced by the compute driver: {message}")]
    Fenced {
        /// Which fence was refused and why.
        message: String,
    },
    /// The driver does not offer this call (e.g. `exec` on the noop driver,
    /// which runs nothing): no effect, and repeating it fails the same way.
    #[error("not supported by the compute driver: {message}")]
    Unsupported {
        /// What is not supported, and where to go instead.
        message: String,
    },
}

impl DriverError {
    /// True when the call certainly had no effect and the operation may be recorded
    /// as failed; false when the outcome must be resolved by observation, or when
    /// the caller was fenced out (then it records nothing at all).
    pub fn is_definite_no_effect(&self) -> bool {
        matches!(self, DriverError::Rejected { .. })
    }

    /// True when the call was refused by a fence or a tombstone: no effect, and
    /// nothing to record.
    pub fn is_fenced(&self) -> bool {
        matches!(self, DriverError::Fenced { .. })
    }
}

/// One output stream of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LogStream {
    /// The command's standard output.
    Stdout,
    /// The command's standard error.
    Stderr,
}

/// Where [`ComputeDriver::read_log`] starts reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogStart {
    /// The oldest output the driver still keeps.
    Beginning,
    /// The last N lines the driver keeps (fewer if it keeps fewer).
    TailLines(u32),
    /// Right after what an earlier read returned: its [`LogRead::cursor`].
    /// Cursors are the driver's own opaque strings, valid on every replica
    /// that holds the same driver.
    Cursor(String),
}

/// What one [`ComputeDriver::read_log`] call read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogRead {
    /// The bytes, at most the call's `bytes_max`; empty when nothing new.
    pub data: Vec<u8>,
    /// Where the next read goes on (pass it back as [`LogStart::Cursor`]).
    pub cursor: String,
    /// Output was rotated away (the logs are capped) between the start
    /// and `data`: the reader missed some.
    pub skipped: bool,
}

/// A command to run in a sandbox's context ([`ComputeDriver::exec`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSpec {
    /// The sandbox.
    pub sandbox_id: String,
    /// The execution whose context (environment) the command runs in: it
    /// must be running.
    pub generation: u64,
    /// Program and arguments (not empty).
    pub command: Vec<String>,
    /// Variables added to the execution's environment.
    pub env: BTreeMap<String, String>,
    /// Killed after this long.
    pub timeout: Duration,
}

/// What a running [`ComputeDriver::exec`] reports, in order; the last
/// event is always `Exited`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    /// Bytes the command wrote to its standard output.
    Stdout(Vec<u8>),
    /// Bytes the command wrote to its standard error.
    Stderr(Vec<u8>),
    /// The command ended with this code (128 + N after signal N).
    Exited(i32),
}

/// The events of one running exec. Dropping it kills the command (the
/// caller went away): an exec never outlives its reader.
#[derive(Debug)]
pub struct ExecStream {
    /// The events, bounded: a slow reader slows the command's output.
    pub events: tokio::sync::mpsc::Receiver<ExecEvent>,
}

/// The future a [`ComputeDriver`] call returns.
pub type DriverFuture<'a, T> = BoxFuture<'a, Result<T, DriverError>>;

/// Creates, inspects, stops, lists and deletes executions, idempotently, keyed by
/// (sandbox id, generation).
pub trait ComputeDriver: Send + Sync + 'static {
    /// Short name for logs and configuration ("process", "docker", ...).
    fn name(&self) -> &'static str;

    /// Whether the driver runs what [`LaunchSpec::wants_container`] asks for (an
    /// image, CPU and memory limits, a working directory). The API refuses such a
    /// create up front (INVALID_ARGUMENT) when the cluster's driver does not, rather
    /// than ignoring it; the driver refuses it too (`Rejected`).
    fn runs_containers(&self) -> bool {
        false
    }

    /// The identity of the authority this driver acts on: the process driver's is a
    /// random id written once into its driver directory (shared by every replica of
    /// one host), so two hosts never share one. Executions are recorded with it; an
    /// execution recorded under another identity is out of this driver's sight
    /// (another host), and the executor treats it as uncertain, never as absent.
    fn identity(&self) -> &str;

    /// Starts the execution `spec` describes and returns its handle once it has
    /// started. Idempotent per (sandbox id, generation): a repeated call (from any
    /// gateway) returns the execution the first call started and never starts a second
    /// one; a generation that already ended is returned as it is, not relaunched.
    /// Refused with [`DriverError::Fenced`] when `fence` is lower than the highest
    /// fence seen for the sandbox, or when the sandbox has a tombstone (checked after
    /// the generation is claimed).
    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle>;

    /// Observes one execution.
    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus>;

    /// Stops one execution: SIGTERM (or the driver's equivalent), then a forced kill
    /// after `grace`. Returns only once the execution's processes are gone. Stopping an
    /// execution that already ended or never existed succeeds. Refused with
    /// [`DriverError::Fenced`] when `fence` is lower than the highest seen.
    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()>;

    /// Writes the sandbox's tombstone (durably), then stops every execution of the
    /// sandbox and deletes everything the driver keeps for it but the tombstone and
    /// the fence. Returns only once the absence of every execution is confirmed,
    /// and then (before returning) deletes the sandbox's persistent working
    /// directory (the process driver's `.workdirs/<id>`, a Docker volume): it
    /// survives stop and start, and goes with the sandbox.
    /// Removing an unknown sandbox succeeds (and leaves a tombstone). Refused with
    /// [`DriverError::Fenced`] when `fence` is lower than the highest seen.
    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()>;

    /// Everything the driver manages, as (sandbox id, generation, status), sorted by
    /// sandbox id then generation, so orphans can be found.
    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>>;

    /// Deletes tombstones (and fences) of removed sandboxes older than the
    /// driver's retention; returns how many went. The leader's reconciler
    /// calls it every round; a driver may scan less often than that (the
    /// process driver scans at most hourly) as long as it never collects a
    /// tombstone before its retention is over. A driver whose tombstones need
    /// no collection keeps this default.
    fn collect_tombstones(&self) -> DriverFuture<'_, usize> {
        Box::pin(async { Ok(0) })
    }

    /// Reads up to `bytes_max` bytes of one stream of an execution's output
    /// from `start`. Reading changes nothing, so any replica holding the
    /// driver may serve it, and a reader that resumes from a cursor at
    /// another replica neither loses nor repeats a byte (unless the
    /// driver's caps rotated it away: then [`LogRead::skipped`]). A driver
    /// that keeps no output answers [`DriverError::Unsupported`].
    fn read_log<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        stream: LogStream,
        start: &'a LogStart,
        bytes_max: usize,
    ) -> DriverFuture<'a, LogRead> {
        let _ = (sandbox_id, generation, stream, start, bytes_max);
        Box::pin(async move {
            Err(DriverError::Unsupported {
                message: format!("the {} driver keeps no output", self.name()),
            })
        })
    }

    /// Runs a command in the context of a running execution: the sandbox's
    /// persistent working directory (see [`ComputeDriver::remove`]), the
    /// execution's environment plus `spec.env`, and the execution's user
    /// (inside its container for container drivers). Answers once the
    /// command started; its output and exit code follow on the stream, and
    /// dropping the stream kills it. The command is not fenced: it changes
    /// nothing the control plane decides, and it is killed when the
    /// execution is stopped or the sandbox removed. A driver that cannot
    /// run commands answers [`DriverError::Unsupported`]; an execution that
    /// does not run is [`DriverError::Rejected`].
    fn exec<'a>(&'a self, spec: &'a ExecSpec) -> DriverFuture<'a, ExecStream> {
        let _ = spec;
        Box::pin(async move {
            Err(DriverError::Unsupported {
                message: format!("the {} driver cannot run commands", self.name()),
            })
        })
    }
}
