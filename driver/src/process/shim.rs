//! The shim side: code that runs inside `palisade shim ...`, never inside a
//! gateway. Single-threaded, no async runtime; started before `main` parses
//! its arguments.

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
use super::{driver::*, procfs::*, records::*};

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

pub(super) fn launch_shim(dir: &Path) -> io::Result<()> {
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

pub(super) fn idle() -> io::Result<()> {
    loop {
        // SAFETY: pause has no preconditions; the default dispositions of SIGTERM and
        // SIGKILL end this process, which is the point.
        unsafe {
            libc::pause();
        }
    }
}

/// Process group the shim forwards SIGTERM, SIGINT and SIGHUP to (0: none yet).
pub(super) static FORWARD_TO_GROUP: AtomicI32 = AtomicI32::new(0);

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
pub(super) fn install_signal_forwarding() -> io::Result<()> {
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
pub(super) fn supervise(dir: &Path) -> io::Result<()> {
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
pub(super) fn wait_for_leader(leader: i32) -> io::Result<ExitRecord> {
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

pub(super) fn reap(pid: i32) {
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
pub(super) fn sweep_descendants() {
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
