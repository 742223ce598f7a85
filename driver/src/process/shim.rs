//! The shim side: code that runs inside `palisade shim ...`, never inside a
//! gateway. No async runtime; started before `main` parses its arguments, and
//! single-threaded until the command's first process is started (its two output
//! pumps are the only threads, started after it).
//!
//! # The command is recorded before it runs
//!
//! The shim starts the command's first process itself (not through
//! `std::process::Command`, whose `spawn` returns only after `execve`), and the
//! child waits, before `execve`, for one byte on a pipe: the barrier. The shim
//! makes its claim durable, writes `command.json` (seen at once by every process
//! of this boot; not fsynced, see the module's "What is fsynced" in
//! [`super`]), and only then writes the byte. If either fails, the shim closes
//! the barrier unwritten; if the shim dies first, the kernel closes it. Either way
//! the child reads end of file and exits without running anything, so no command
//! ever runs that the driver directory does not know about, and none runs twice
//! for one generation across a crash of the machine. A second pipe (close-on-exec)
//! tells the shim whether `execve` succeeded.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::LaunchSpec;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::fencing::{read_identity, read_tombstone};
use super::logs::{LOG_FILE_BYTES_MAX, RotatingLog, pump};
use super::*;
use super::{procfs::*, raw_syscall, records::*};

// ---------------------------------------------------------------------------------
// The shim side: runs inside `palisade shim ...`, never inside a gateway.

/// Arguments of the hidden `palisade shim` subcommand (the words after `shim`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShimArgs {
    /// `launch DIR`: fork the shim of DIR into a new session and exit once it
    /// has reported, so the shim is reparented to init instead of staying a
    /// gateway's child.
    Launch {
        /// The execution directory.
        execution_dir: PathBuf,
    },
    /// `run DIR`: be the shim of the execution in DIR in this process (what
    /// `launch` forks into; started directly, it stays its parent's child).
    Run {
        /// The execution directory.
        execution_dir: PathBuf,
    },
    /// `idle`: sleep until signalled. The idle command of executions started by
    /// earlier releases, whose shims exec it; a shim of this release idles in a
    /// child of its own that never execs instead (see `PreparedExec::idle`).
    Idle,
    /// `launch-server`: serve a gateway's launches, forking a launcher for
    /// each (see `launch_server`); standard input is the gateway's socket.
    LaunchServer,
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
            [Some("launch-server")] => Ok(ShimArgs::LaunchServer),
            _ => Err(format!(
                "usage: palisade {SHIM_SUBCOMMAND} (launch DIR | run DIR | idle | launch-server); \
                 got {words:?}"
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
            ShimArgs::LaunchServer => argv.push("launch-server".into()),
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
        ShimArgs::Run { execution_dir } => {
            supervise(execution_dir, take_reported_pipe().map(Reported::closing))
        }
        ShimArgs::Idle => idle(),
        ShimArgs::LaunchServer => super::launch_server::serve_launches(),
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("palisade shim {args:?}: {error}");
            1
        }
    }
}

/// `palisade shim launch DIR`: forks the shim of `dir` into a new session and
/// returns once it has reported (at most [`LAUNCHER_REPORT_WAIT_MAX`]), so
/// that the shim is adopted by init when this launcher exits.
pub(crate) fn launch_shim(dir: &Path) -> io::Result<()> {
    let log = open_shim_log(dir)?;
    // The shim's "reported" pipe: the shim holds the write end until it has
    // said what it did (command recorded and started, rejected, refused, or
    // claim lost) and then closes it, or dies, which closes it too. This
    // launcher waits for that end of file before it exits, so the driver,
    // which waits for the launcher, observes the report at once instead of
    // polling for it.
    let (reported_read, reported_write) = pipe()?;
    // The shim is this launcher's forked child, not a new program: exec'ing
    // the `palisade` binary again (dynamic loading, relocations, CPU feature
    // probes) cost as much CPU as everything else a launch does. Not waited
    // for: the shim is adopted by init once this launcher exits.
    // SAFETY: the launcher is single-threaded (it runs before any runtime or
    // thread starts), so the child is a whole copy of it and may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        drop(reported_read);
        std::process::exit(run_forked_shim(
            dir,
            &log,
            Reported::closing(reported_write),
        ));
    }
    drop((reported_write, log));
    wait_for_end_of_file(&reported_read, LAUNCHER_REPORT_WAIT_MAX);
    Ok(())
}

/// The execution's `shim.log`, opened for the shim's standard error (made if
/// it is not there; appended to by every shim of the execution).
pub(crate) fn open_shim_log(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(SHIM_LOG_FILE))
}

/// A forked child (of a launcher, or of the launch server) becoming the shim:
/// its stderr goes to `shim.log` first (its parent's is the gateway's, which
/// must not be held for the sandbox's life), then a new session detaches it
/// from the gateway's session, process group and terminal, so signals aimed at
/// those never reach it.
pub(crate) fn run_forked_shim(dir: &Path, log: &File, reported: Reported) -> i32 {
    const COMM: &[u8] = b"palisade-shim\0";
    // SAFETY: dup2 and setsid on descriptors this process owns; prctl reads a
    // static NUL-terminated name.
    let detached = unsafe {
        libc::prctl(libc::PR_SET_NAME, COMM.as_ptr() as libc::c_ulong, 0, 0, 0);
        libc::dup2(log.as_raw_fd(), 2) >= 0 && libc::setsid() >= 0
    };
    let result = if detached {
        supervise(dir, Some(reported))
    } else {
        Err(io::Error::last_os_error())
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("palisade shim run {}: {error}", dir.display());
            1
        }
    }
}

/// How a shim tells whoever launched it that it has reported (its command
/// recorded and started, or why not): it lets go of this handle, on every
/// return of [`supervise`] or once the command runs.
pub(crate) struct Reported {
    pipe: OwnedFd,
    /// Written just before the pipe closes (a launch through the launch
    /// server reads it); `None`: the end of file alone says it (a launcher
    /// of `palisade shim launch` waits for it).
    status: Option<u8>,
}

impl Reported {
    /// Reports by closing `pipe`.
    pub(crate) fn closing(pipe: OwnedFd) -> Self {
        Reported { pipe, status: None }
    }

    /// Reports by writing `status` to `pipe`, then closing it.
    pub(crate) fn with_status(pipe: OwnedFd, status: u8) -> Self {
        Reported {
            pipe,
            status: Some(status),
        }
    }
}

impl Drop for Reported {
    fn drop(&mut self) {
        if let Some(status) = self.status {
            // A reader that gave up (EPIPE; SIGPIPE is ignored) is no error:
            // the driver observes the execution's records either way.
            let _ = super::launch_server::write_byte(self.pipe.as_raw_fd(), status);
        }
    }
}

/// Waits until every writer of `pipe` closed it, at most `limit`. Nothing is
/// ever written to it; a timeout or an error just ends the wait (the driver
/// then observes, and polls, as it would anyway).
fn wait_for_end_of_file(pipe: &OwnedFd, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut buffer = [0u8; 16];
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return;
        }
        let mut poll = libc::pollfd {
            fd: pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(remaining.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if ready == 0 {
            return;
        }
        // SAFETY: reads into a buffer we own, of its length.
        let read =
            unsafe { libc::read(pipe.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if read == 0 || (read < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            return;
        }
    }
}

/// For `palisade shim run DIR`: the write end of the launcher's "reported" pipe,
/// handed over in [`SHIM_REPORTED_FD_VARIABLE`] (by a launcher of an earlier
/// release); made close-on-exec at once, so the command never inherits it.
/// `None` for a shim started otherwise (or given a bad number).
fn take_reported_pipe() -> Option<OwnedFd> {
    let fd: RawFd = std::env::var(SHIM_REPORTED_FD_VARIABLE)
        .ok()?
        .parse()
        .ok()?;
    if fd <= 2 {
        return None;
    }
    // SAFETY: fcntl on a descriptor number; it fails harmlessly if not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return None;
    }
    // SAFETY: the launcher opened this descriptor for us and nothing else in this
    // process owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn idle() -> io::Result<()> {
    loop {
        // SAFETY: pause has no preconditions; the default dispositions of SIGTERM and
        // SIGKILL end this process, which is the point.
        unsafe {
            libc::pause();
        }
    }
}

/// Process group the shim forwards SIGTERM, SIGINT and SIGHUP to (0: none yet).
pub(crate) static FORWARD_TO_GROUP: AtomicI32 = AtomicI32::new(0);

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
pub(crate) fn install_signal_forwarding() -> io::Result<()> {
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

/// The shim proper: claim the execution, check it may run, start the command behind
/// a barrier, record it, release it, wait, sweep, record the exit.
pub(crate) fn supervise(dir: &Path, reported: Option<Reported>) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer argument only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    install_signal_forwarding()?;
    // `reported` is closed (dropped) once this shim has said what it did: on
    // every return below, or right after the command started.
    let mut reported = reported;
    let spec: LaunchSpec = read_record(&dir.join(SPEC_FILE))?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no spec.json"))?;
    let sandbox_dir = parent_of(dir);
    let driver_id = read_identity(parent_of(sandbox_dir))?;
    let me = identity_of(std::process::id() as i32)?;
    let claim = ShimRecord {
        generation: spec.generation,
        pid: me.pid,
        start_time: me.start_time,
        boot_id: me.boot_id,
        driver_id,
    };
    // Its name is made durable by the next fsync of this directory, which every
    // path that acts on the claim takes (before the command runs, or with
    // exit.json or rejected.json otherwise): a claim lost in a crash before that
    // was never acted on, and a repeated launch starts another shim.
    if !create_record_with(&dir.join(SHIM_FILE), &claim, Durability::ContentOnly)? {
        return Ok(()); // another shim owns this execution
    }
    // Claim, then check: `stop` marks the execution and then reads the claim, and
    // `remove` writes the tombstone and then lists the executions, so either they
    // see this shim (and stop what it starts) or it sees them (and starts nothing).
    let refusal = if dir.join(STOP_REQUESTED_FILE).try_exists()? {
        Some("a stop was requested")
    } else if read_tombstone(sandbox_dir)?.is_some() {
        Some("the sandbox was removed (it has a tombstone)")
    } else {
        None
    };
    if let Some(reason) = refusal {
        // Recorded as a SIGTERM death without running anything.
        eprintln!("palisade shim: not starting the command: {reason}");
        return write_record(
            &dir.join(EXIT_FILE),
            &ExitRecord {
                code: EXIT_CODE_SIGNAL_BASE + libc::SIGTERM,
                signal: Some(libc::SIGTERM),
            },
        );
    }

    // The sandbox's persistent working directory (made by the launch; made
    // here too for an execution claimed before it existed). With a sandbox
    // user (`run_as`) the command runs as that user, in a working directory
    // outside the driver and data directories.
    let run_as: Option<super::RunAs> = read_record(&dir.join(super::RUN_AS_FILE))?;
    let work_dir = match &run_as {
        Some(run_as) => {
            run_as.prepare_work_dir()?;
            run_as.work_dir.clone()
        }
        None => {
            let work_dir = super::exec::workdir_of(parent_of(sandbox_dir), &spec.sandbox_id);
            fs::create_dir_all(&work_dir)?;
            work_dir
        }
    };
    let credentials = run_as.as_ref().map(|run_as| (run_as.uid, run_as.gid));
    let prepared = if spec.command.is_empty() {
        // No command: the sandbox idles in a child of this shim that never
        // exec's (see `idle_after_barrier`); exec'ing a program to sleep in
        // cost as much CPU as the rest of a launch.
        PreparedExec::idle(&work_dir, credentials)?
    } else {
        let argv: Vec<OsString> = spec.command.iter().map(OsString::from).collect();
        let search_path = spec.env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
        // Resolved before anything is started, so a command that cannot start is a
        // definite rejection with no process left behind.
        let program = match resolve_program(&argv[0], search_path, &work_dir) {
            Ok(program) => program,
            Err(rejected) => return write_record(&dir.join(REJECTED_FILE), &rejected),
        };
        let mut environment: BTreeMap<&str, &str> = BTreeMap::from([("PATH", DEFAULT_PATH)]);
        environment.extend(
            spec.env
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        PreparedExec::new(&program, &argv, &environment, &work_dir, credentials)?
    };
    let mut child = spawn_behind_barrier(prepared)?;
    let leader = child.pid;
    FORWARD_TO_GROUP.store(leader, Ordering::SeqCst);

    if cfg!(debug_assertions) && spec.env.contains_key(TEST_DIE_BEFORE_RECORD_VARIABLE) {
        // TEST-ONLY (debug builds): die like a killed shim, between starting the
        // command and recording it. The command must never run.
        eprintln!(
            "palisade shim: {TEST_DIE_BEFORE_RECORD_VARIABLE} is set: dying before the record"
        );
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }

    // The claim is made durable before the command may run: at most one command
    // per generation, across a crash of the machine too (a launch repeated after
    // the reboot finds the claim and starts nothing). Then the command is recorded
    // before it runs: if this fails, or this shim dies before the release, the
    // child reads end of file and exits without running it. The record is not
    // fsynced (see the module's "What is fsynced"): it names a process of this
    // boot, which a crash of the machine ends, and every process sees it at once.
    // The leader is our unreaped child, so its stat stays readable even if it died.
    let recorded = sync_dir(dir)
        .and_then(|()| identity_of(leader))
        .and_then(|command| {
            write_record_with(&dir.join(COMMAND_FILE), &command, Durability::ThisBootOnly)
        });
    if let Err(error) = recorded {
        drop(child.barrier.take()); // end of file: the child exits without running
        // Forward nothing to a group whose pid is about to be free for reuse.
        FORWARD_TO_GROUP.store(0, Ordering::SeqCst);
        reap(leader);
        return write_record(
            &dir.join(REJECTED_FILE),
            &RejectedRecord {
                code: EXIT_CODE_NOT_EXECUTABLE,
                message: format!("cannot record the command before starting it: {error}"),
            },
        );
    }
    let outputs = start_output_pumps(&mut child, dir);
    if let Some(failure) = child.release() {
        // It was recorded but never ran: exec (or preparing for it) failed.
        FORWARD_TO_GROUP.store(0, Ordering::SeqCst);
        reap(leader);
        await_output_pumps(outputs);
        let code = if failure.errno == libc::ENOENT {
            EXIT_CODE_NOT_FOUND
        } else {
            EXIT_CODE_NOT_EXECUTABLE
        };
        let message = format!(
            "cannot start {:?}: {} failed: {}",
            spec.command
                .first()
                .map_or("the idle command", String::as_str),
            failure.stage,
            io::Error::from_raw_os_error(failure.errno)
        );
        return write_record(&dir.join(REJECTED_FILE), &RejectedRecord { code, message });
    }

    // The command runs and is recorded: the launch may go on.
    if cfg!(debug_assertions) && spec.env.contains_key(TEST_LOSE_LAUNCH_STATUS_VARIABLE) {
        // TEST-ONLY (debug builds): the launch never learns that this shim
        // started its command, as if its launcher had been killed.
        eprintln!("palisade shim: {TEST_LOSE_LAUNCH_STATUS_VARIABLE} is set: no launch status");
        if let Some(reported) = reported.as_mut() {
            reported.status = None;
        }
    }
    drop(reported);
    let exit = wait_for_leader(leader)?;
    FORWARD_TO_GROUP.store(0, Ordering::SeqCst);
    // The leader is a zombie we have not reaped, so its pid, and with it the process
    // group id, cannot have been reused: this kills only what is left of our group.
    send_signal(-leader, libc::SIGKILL)?;
    sweep_descendants();
    // Every process that could write the pipes is gone; let the logs drain.
    await_output_pumps(outputs);
    // Content only (see the module's "What is fsynced"): the record is whole or
    // absent after a crash, and an absent one reads, in a later boot, as an
    // execution that is gone without an exit status, which the leader resolves
    // by observation. Every fsync here delays every stop.
    write_record_with(&dir.join(EXIT_FILE), &exit, Durability::ContentOnly)
}

/// TEST-ONLY hook, honoured in debug builds only and read only by the shim, from the
/// spec's environment: when the variable is set (to anything), the shim kills itself
/// with SIGKILL after starting the command behind its barrier and before recording
/// it, so tests can show that such a command never runs.
pub const TEST_DIE_BEFORE_RECORD_VARIABLE: &str = "PALISADE_SHIM_TEST_DIE_BEFORE_RECORD";

/// TEST-ONLY hook, honoured in debug builds only and read only by the shim, from the
/// spec's environment: when the variable is set (to anything), a shim started by
/// the launch server closes the launch's status pipe without its status byte
/// after starting the command, so tests can show that a launch that never hears
/// back stays uncertain until observed (as a launcher killed at that moment left
/// it, before shims were forked by the server itself).
pub const TEST_LOSE_LAUNCH_STATUS_VARIABLE: &str = "PALISADE_SHIM_TEST_LOSE_LAUNCH_STATUS";

/// Finds the program as `execvp` would, with `search_path` (the command's `PATH`)
/// and relative paths taken from the command's working directory.
pub(crate) fn resolve_program(
    program: &OsStr,
    search_path: &str,
    work_dir: &Path,
) -> Result<PathBuf, RejectedRecord> {
    let shown = String::from_utf8_lossy(program.as_bytes()).into_owned();
    let not_found = |why: String| RejectedRecord {
        code: EXIT_CODE_NOT_FOUND,
        message: format!("cannot start {shown:?}: {why}"),
    };
    let not_executable = |candidate: &Path| RejectedRecord {
        code: EXIT_CODE_NOT_EXECUTABLE,
        message: format!(
            "cannot start {shown:?}: {} is not an executable file",
            candidate.display()
        ),
    };
    if program.as_bytes().contains(&b'/') {
        let candidate = work_dir.join(program);
        return match fs::metadata(&candidate) {
            Ok(_) if is_executable_file(&candidate) => Ok(candidate),
            Ok(_) => Err(not_executable(&candidate)),
            Err(error) => Err(not_found(error.to_string())),
        };
    }
    let mut denied = None;
    for directory in search_path.split(':') {
        // An empty PATH entry means the working directory (POSIX).
        let candidate = work_dir.join(directory).join(program);
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
        if denied.is_none() && candidate.exists() {
            denied = Some(candidate);
        }
    }
    match denied {
        Some(candidate) => Err(not_executable(&candidate)),
        None => Err(not_found(format!("not found in PATH {search_path:?}"))),
    }
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(metadata) = fs::metadata(path) else {
        return false;
    };
    let Ok(path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a NUL-terminated path we own.
    metadata.is_file() && unsafe { libc::access(path.as_ptr(), libc::X_OK) } == 0
}

/// Everything `execve` needs, allocated before the `clone` (the child may only make
/// raw system calls, and allocating is not one).
pub(crate) struct PreparedExec {
    /// `None`: no program; the child idles until signalled instead of exec'ing.
    program: Option<CString>,
    _argv: Vec<CString>,
    argv_pointers: Vec<*const libc::c_char>,
    _environment: Vec<CString>,
    environment_pointers: Vec<*const libc::c_char>,
    work_dir: CString,
    /// (uid, gid) the command switches to before exec; `None`: the shim's.
    credentials: Option<(u32, u32)>,
}

impl PreparedExec {
    pub(crate) fn new(
        program: &Path,
        argv: &[OsString],
        environment: &BTreeMap<&str, &str>,
        work_dir: &Path,
        credentials: Option<(u32, u32)>,
    ) -> io::Result<PreparedExec> {
        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command")
            })
        };
        let argv: Vec<CString> = argv
            .iter()
            .map(|argument| c_string(argument.as_bytes()))
            .collect::<io::Result<_>>()?;
        let environment: Vec<CString> = environment
            .iter()
            .map(|(name, value)| c_string(format!("{name}={value}").as_bytes()))
            .collect::<io::Result<_>>()?;
        // The pointers point into the CStrings' heap buffers, which do not move when
        // the vectors holding the CStrings move.
        let pointers = |strings: &[CString]| {
            strings
                .iter()
                .map(|string| string.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Ok(PreparedExec {
            program: Some(c_string(program.as_os_str().as_bytes())?),
            argv_pointers: pointers(&argv),
            _argv: argv,
            environment_pointers: pointers(&environment),
            _environment: environment,
            work_dir: c_string(work_dir.as_os_str().as_bytes())?,
            credentials,
        })
    }

    /// The idle command of a spec without one: the child enters `work_dir`,
    /// takes `credentials` and passes the barrier like any command, then
    /// closes every descriptor beyond its standard three and sleeps until a
    /// signal ends it, without exec'ing anything.
    pub(crate) fn idle(
        work_dir: &Path,
        credentials: Option<(u32, u32)>,
    ) -> io::Result<PreparedExec> {
        let no_strings = || vec![std::ptr::null()];
        Ok(PreparedExec {
            program: None,
            _argv: Vec::new(),
            argv_pointers: no_strings(),
            _environment: Vec::new(),
            environment_pointers: no_strings(),
            work_dir: CString::new(work_dir.as_os_str().as_bytes()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a NUL byte in the working directory",
                )
            })?,
            credentials,
        })
    }
}

/// The command's first process, started and waiting at the barrier.
pub(crate) struct BarrierChild {
    pub(crate) pid: i32,
    /// Writing one byte lets the child exec; closing it unwritten (or dying) makes
    /// the child exit without running anything.
    pub(crate) barrier: Option<OwnedFd>,
    /// End of file once the child exec'd or died; a [`ExecFailure`] if it could not.
    status: OwnedFd,
    /// The read ends of the command's output (`None` for an idle command).
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
}

/// Why the child could not run the command, as it reported over the status pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExecFailure {
    pub(crate) stage: &'static str,
    pub(crate) errno: i32,
}

/// What the child reports before exiting when it cannot run the command.
const CHILD_STAGE_REDIRECT: i32 = 1;
const CHILD_STAGE_CHDIR: i32 = 2;
const CHILD_STAGE_EXEC: i32 = 3;
const CHILD_STAGE_CREDENTIALS: i32 = 4;
/// Exit code of a child whose barrier was closed without the release byte.
pub(crate) const EXIT_CODE_BARRIER_CLOSED: i32 = 125;

impl BarrierChild {
    /// Lets the child exec and learns whether it could. `None`: it exec'd (or died
    /// on the way, which the exit status will tell).
    pub(crate) fn release(&mut self) -> Option<ExecFailure> {
        if let Some(barrier) = self.barrier.take() {
            let byte = [1_u8];
            // SAFETY: writes one byte from a live buffer to a descriptor we own.
            // EPIPE (the child is already gone) is fine: its status says why.
            unsafe {
                libc::write(barrier.as_raw_fd(), byte.as_ptr().cast(), 1);
            }
        }
        let mut report = [0_u8; 8];
        let mut filled = 0;
        while filled < report.len() {
            // SAFETY: reads into the unfilled tail of a live buffer.
            let read = unsafe {
                libc::read(
                    self.status.as_raw_fd(),
                    report[filled..].as_mut_ptr().cast(),
                    report.len() - filled,
                )
            };
            if read > 0 {
                filled += read as usize;
            } else if read == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        if filled < report.len() {
            return None; // closed by exec (or by death): no failure reported
        }
        let stage = i32::from_ne_bytes([report[0], report[1], report[2], report[3]]);
        let errno = i32::from_ne_bytes([report[4], report[5], report[6], report[7]]);
        Some(ExecFailure {
            stage: match stage {
                CHILD_STAGE_REDIRECT => "redirecting its input and output",
                CHILD_STAGE_CHDIR => "entering its working directory",
                CHILD_STAGE_CREDENTIALS => "switching to the sandbox user",
                _ => "exec",
            },
            errno,
        })
    }
}

pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array; O_CLOEXEC so that no
    // other process started later inherits them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Bytes of stack the command's first process runs on until it execs (it
/// calls nothing deep: raw system calls from one function).
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Starts the command's first process, in a process group of its own, with its
/// output going to pipes this shim reads, and holds it before `execve` until
/// [`BarrierChild::release`].
///
/// # Key decision: the child shares the shim's memory until it execs
///
/// A `fork` copies the shim's page tables and marks every page it wrote
/// copy-on-write, for a process that only waits at the barrier and execs
/// (or idles): in a 16-client create benchmark of the process driver that
/// copy, its page-table pages and the copy-on-write faults after it were
/// about a sixth of the machine's CPU (`perf record -a -g`). So the child is a `clone` with `CLONE_VM`,
/// as glibc's `posix_spawn` makes its child, except that the shim goes on
/// (no `CLONE_VFORK`: it must record the child before releasing it). The
/// child runs on a stack of its own, reads only what `prepared` holds, and
/// makes only raw system calls ([`raw_syscall`] says why not libc's); both
/// the stack and `prepared` are leaked, so nothing the child may still
/// touch is ever freed or reused (one command per shim, whose memory ends
/// with it). Every signal is blocked across the `clone`, so none of the
/// shim's handlers ever runs in the child: it restores the default
/// dispositions first and only then unblocks. With a sandbox user, the child
/// switches to it while still in the shim's memory; the kernel then marks
/// that memory not dumpable (as for any change of credentials), so no
/// process of the sandbox user can trace the child or write its memory
/// (`ptrace`, `/proc/PID/mem`) before it execs.
///
/// Unlike a `fork`, safe from a process with many threads (the tests call it
/// so): the child runs none of the shim's code but its own, and inherits
/// only the calling thread's mask.
pub(crate) fn spawn_behind_barrier(prepared: PreparedExec) -> io::Result<BarrierChild> {
    let (barrier_read, barrier_write) = pipe()?;
    let (status_read, status_write) = pipe()?;
    // An idle command writes nothing: its output goes to /dev/null, so it needs
    // no pipes, no pump threads and no log files.
    let outputs = match prepared.program {
        Some(_) => Some((pipe()?, pipe()?)),
        None => None,
    };
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let (stdout_read, stdout_write, stderr_read, stderr_write) = match outputs {
        Some(((stdout_read, stdout_write), (stderr_read, stderr_write))) => (
            Some(stdout_read),
            Some(stdout_write),
            Some(stderr_read),
            Some(stderr_write),
        ),
        None => (None, None, None, None),
    };
    let read_end = |end: &Option<OwnedFd>| end.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let write_end =
        |end: &Option<OwnedFd>| end.as_ref().map_or(null.as_raw_fd(), AsRawFd::as_raw_fd);
    let child: &'static ChildArgs = Box::leak(Box::new(ChildArgs {
        prepared,
        fds: ChildDescriptors {
            barrier_read: barrier_read.as_raw_fd(),
            barrier_write: barrier_write.as_raw_fd(),
            status_read: status_read.as_raw_fd(),
            status_write: status_write.as_raw_fd(),
            stdout_read: read_end(&stdout_read),
            stdout_write: write_end(&stdout_write),
            stderr_read: read_end(&stderr_read),
            stderr_write: write_end(&stderr_write),
            null: null.as_raw_fd(),
        },
        open_max: open_files_max(),
    }));
    let stack_top = leaked_child_stack()?;
    // SAFETY: zeroed sigsets are valid values; sigfillset and pthread_sigmask
    // write into these locals and change only this thread's mask.
    let old_mask = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old_mask);
        old_mask
    };
    // SAFETY: the child runs `child_after_clone` on a leaked stack of its own,
    // reading only the leaked `child` (see the key decision above).
    let pid = unsafe {
        libc::clone(
            child_entry,
            stack_top,
            libc::CLONE_VM | libc::SIGCHLD,
            std::ptr::from_ref(child).cast_mut().cast(),
        )
    };
    let cloned = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: restores this thread's mask from a local.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
    }
    cloned?;
    // Also set here, so the group exists before the command is recorded, whichever
    // of the two runs first. It can only fail if the child already died.
    // SAFETY: setpgid has no memory-safety preconditions.
    unsafe {
        libc::setpgid(pid, pid);
    }
    // The child's ends: closed here, so our reads see end of file when it is gone.
    drop((barrier_read, status_write, stdout_write, stderr_write, null));
    Ok(BarrierChild {
        pid,
        barrier: Some(barrier_write),
        status: status_read,
        stdout: stdout_read,
        stderr: stderr_read,
    })
}

/// Maps the child's stack, with a guard page below it, and answers its top.
/// Never unmapped: see [`spawn_behind_barrier`].
fn leaked_child_stack() -> io::Result<*mut libc::c_void> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let bytes = CHILD_STACK_BYTES + page;
    // SAFETY: a new private anonymous mapping, owned by nothing else.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the lowest page of the mapping just made.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The stack grows down from the end of the mapping (page-aligned, so
    // aligned for any ABI).
    // SAFETY: one past the end of the mapping, not dereferenced here.
    Ok(unsafe { base.cast::<u8>().add(bytes) }.cast())
}

/// What the command's first process reads, leaked before the `clone`.
struct ChildArgs {
    prepared: PreparedExec,
    fds: ChildDescriptors,
    /// Descriptors to close one by one where `close_range` is missing.
    open_max: i32,
}

#[derive(Clone, Copy)]
struct ChildDescriptors {
    // The output pipes' read ends are -1 and their write ends /dev/null for an
    // idle command (closing -1 in the child is a harmless EBADF).
    barrier_read: RawFd,
    barrier_write: RawFd,
    status_read: RawFd,
    status_write: RawFd,
    stdout_read: RawFd,
    stdout_write: RawFd,
    stderr_read: RawFd,
    stderr_write: RawFd,
    null: RawFd,
}

extern "C" fn child_entry(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `spawn_behind_barrier` passes its leaked `ChildArgs`, which
    // outlives this process.
    let child = unsafe { &*argument.cast::<ChildArgs>() };
    child_after_clone(child)
}

/// Signals whose dispositions the shim may have changed (its forwarding
/// handlers, the Rust runtime's ignored SIGPIPE and its stack-overflow
/// handlers): back to the defaults an exec'd program expects, before
/// anything is unblocked.
const SIGNALS_RESET: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGPIPE,
    libc::SIGSEGV,
    libc::SIGBUS,
];

/// The child between `clone` and `execve`, in the shim's memory: raw system
/// calls only, on its own stack (see [`spawn_behind_barrier`]). Never
/// returns.
fn child_after_clone(child: &ChildArgs) -> ! {
    let fds = child.fds;
    let fail = |stage: i32, errno: i32| -> ! {
        let mut report = [0_u8; 8];
        report[..4].copy_from_slice(&stage.to_ne_bytes());
        report[4..].copy_from_slice(&errno.to_ne_bytes());
        let _ = raw_syscall::write(fds.status_write, &report);
        raw_syscall::exit(if errno == libc::ENOENT {
            EXIT_CODE_NOT_FOUND
        } else {
            EXIT_CODE_NOT_EXECUTABLE
        });
    };
    // Default dispositions and an empty mask, as exec'd programs expect: the
    // shim's forwarding handlers must not run here (a stop that reaches the group
    // before exec must end this child), and an ignored SIGPIPE would survive exec.
    for signal in SIGNALS_RESET {
        let _ = raw_syscall::default_disposition(signal);
    }
    let _ = raw_syscall::unblock_all_signals();
    let _ = raw_syscall::setpgid_self();
    // Our copy of the barrier's write end must go, or we would never see its
    // end of file when the shim dies.
    for fd in [
        fds.barrier_write,
        fds.status_read,
        fds.stdout_read,
        fds.stderr_read,
    ] {
        let _ = raw_syscall::close(fd);
    }
    for (from, to) in [(fds.null, 0), (fds.stdout_write, 1), (fds.stderr_write, 2)] {
        if let Err(errno) = raw_syscall::duplicate_onto(from, to) {
            fail(CHILD_STAGE_REDIRECT, errno);
        }
    }
    let prepared = &child.prepared;
    // SAFETY: a NUL-terminated string of the leaked `prepared`.
    if let Err(errno) = unsafe { raw_syscall::chdir(prepared.work_dir.as_ptr()) } {
        fail(CHILD_STAGE_CHDIR, errno);
    }
    // Drop privileges for good: supplementary groups, then the group (while still
    // allowed to), then the user. The gateway's 077 umask is for its own files,
    // not the sandbox's.
    if let Some((uid, gid)) = prepared.credentials
        && let Err(errno) = raw_syscall::become_user(uid, gid)
    {
        fail(CHILD_STAGE_CREDENTIALS, errno);
    }
    raw_syscall::umask(0o022);
    loop {
        match raw_syscall::read_byte(fds.barrier_read) {
            Ok(true) => break,
            Err(libc::EINTR) => continue,
            // End of file (or a broken pipe): the shim closed the barrier without
            // releasing it, or died.
            Ok(false) | Err(_) => raw_syscall::exit(EXIT_CODE_BARRIER_CLOSED),
        }
    }
    let _ = raw_syscall::close(fds.barrier_read);
    let Some(program) = &prepared.program else {
        idle_after_barrier(child.open_max)
    };
    // SAFETY: the program, argv and environment of the leaked `prepared`, each
    // NUL-terminated, the arrays null-terminated.
    let errno = unsafe {
        raw_syscall::execve(
            program.as_ptr(),
            prepared.argv_pointers.as_ptr(),
            prepared.environment_pointers.as_ptr(),
        )
    };
    fail(CHILD_STAGE_EXEC, errno)
}

/// Closes every descriptor but 0, 1 and 2 (`close_range`; one by one before
/// Linux 5.9). Async-signal-safe.
///
/// # Safety
///
/// Rust objects that own a closed descriptor must never use it again.
pub(crate) unsafe fn close_all_but_standard_descriptors() {
    raw_syscall::close_from_3(open_files_max());
}

/// How many descriptors a one-by-one close goes through where `close_range`
/// is missing: the process's limit, within sane bounds.
fn open_files_max() -> i32 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(1024, 1 << 20) as i32
}

/// The idle command, in the child past its barrier: what exec would have done
/// to the shim's descriptors (the status pipe among them, whose end of file
/// tells the shim the command started), then sleep until signalled. The
/// signal dispositions are already the defaults, so SIGTERM ends it. It
/// closes only its own copies: the `clone` gave it a table of descriptors of
/// its own.
fn idle_after_barrier(open_max: i32) -> ! {
    raw_syscall::close_from_3(open_max);
    raw_syscall::set_name(c"palisade-idle");
    loop {
        raw_syscall::wait_for_a_signal();
    }
}

/// Threads copying the command's stdout and stderr into their rotated logs.
pub(crate) struct OutputPumps {
    threads: Vec<std::thread::JoinHandle<()>>,
    /// One message per thread as it finishes, so the shim waits for the end of
    /// the output without polling (a poll would delay every exit, and so every
    /// stop, by up to its interval).
    finished: std::sync::mpsc::Receiver<()>,
}

/// Starts one thread per output stream. After this the shim has threads, so it
/// must not fork again.
pub(crate) fn start_output_pumps(child: &mut BarrierChild, dir: &Path) -> OutputPumps {
    let mut threads = Vec::new();
    let (finishing, finished) = std::sync::mpsc::channel();
    for (pipe, name) in [
        (child.stdout.take(), STDOUT_FILE),
        (child.stderr.take(), STDERR_FILE),
    ] {
        let Some(pipe) = pipe else { continue };
        let path = dir.join(name);
        let finishing = finishing.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("pump-{name}"))
            .spawn(move || {
                // Sent when this closure returns or unwinds (the sender is dropped
                // either way, which the receiver also sees).
                let _finished = FinishedOnDrop(finishing);
                let reader = File::from(pipe);
                match RotatingLog::open(&path, LOG_FILE_BYTES_MAX) {
                    Ok(mut log) => {
                        if let Err(error) = pump(reader, &mut log) {
                            eprintln!(
                                "palisade shim: reading the command's {name} failed: {error}"
                            );
                        }
                    }
                    Err(error) => {
                        eprintln!(
                            "palisade shim: cannot open {}: {error}; discarding the output",
                            path.display()
                        );
                        // Keep draining, so the command never blocks on a full pipe.
                        let _ = io::copy(&mut io::BufReader::new(reader), &mut io::sink());
                    }
                }
            });
        match spawned {
            Ok(thread) => threads.push(thread),
            // Without a reader the command's output fails with EPIPE; the execution
            // itself goes on.
            Err(error) => eprintln!("palisade shim: cannot start the {name} pump: {error}"),
        }
    }
    OutputPumps { threads, finished }
}

/// Tells the shim a pump thread is done, however it ends.
struct FinishedOnDrop(std::sync::mpsc::Sender<()>);

impl Drop for FinishedOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Waits (bounded) for the pumps to reach end of file. A descendant that escaped the
/// sweep may hold a pipe open forever; the exit is recorded anyway.
pub(crate) fn await_output_pumps(pumps: OutputPumps) {
    let deadline = Instant::now() + SHIM_OUTPUT_DRAIN_TIMEOUT;
    for _ in 0..pumps.threads.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if pumps.finished.recv_timeout(left).is_err() {
            eprintln!(
                "palisade shim: the command's output still open {SHIM_OUTPUT_DRAIN_TIMEOUT:?} after \
                 its processes were swept; recording the exit anyway"
            );
            return;
        }
    }
    for thread in pumps.threads {
        let _ = thread.join();
    }
}

/// Waits for the command's leader to exit without reaping it, reaping every other
/// child meanwhile (orphans adopted by this subreaper) so zombies do not pile up.
pub(crate) fn wait_for_leader(leader: i32) -> io::Result<ExitRecord> {
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

pub(crate) fn reap(pid: i32) {
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
pub(crate) fn sweep_descendants() {
    let deadline = Instant::now() + SHIM_SWEEP_TIMEOUT;
    let me = std::process::id() as i32;
    loop {
        // Signalling a zombie child does nothing, and is as race-free as the rest.
        let children = match own_children() {
            Ok(Some(children)) => Ok(children),
            Ok(None) => processes().map(|processes| {
                processes
                    .into_iter()
                    .filter(|(_, stat)| stat.parent == me && !stat.is_zombie())
                    .map(|(pid, _)| pid)
                    .collect()
            }),
            Err(error) => Err(error),
        };
        match children {
            Ok(children) => {
                for pid in children {
                    let _ = send_signal(pid, libc::SIGKILL);
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
