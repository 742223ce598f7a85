//! What `/proc` says about processes: identity (pid + start time + boot id),
//! liveness, process groups and sessions, and signalling.

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
use super::{driver::*, records::*, shim::*};

// ---------------------------------------------------------------------------------
// /proc

/// The fields of `/proc/<pid>/stat` this driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) state: u8,
    pub(crate) parent: i32,
    pub(crate) process_group: i32,
    pub(crate) session: i32,
    pub(crate) start_time: u64,
}

impl ProcStat {
    pub(crate) fn is_zombie(&self) -> bool {
        // 'X' (dead) is only ever seen transiently, on the way out.
        matches!(self.state, b'Z' | b'X')
    }
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from the last ')'.
pub(crate) fn parse_proc_stat(text: &str) -> Option<ProcStat> {
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
pub(crate) fn read_proc_stat(pid: i32) -> io::Result<Option<ProcStat>> {
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

pub(crate) fn boot_id() -> io::Result<&'static str> {
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
pub(crate) fn presence(identity: &ProcessIdentity) -> io::Result<Presence> {
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

/// Waits, at most `limit`, until the process `identity` names has exited: on its
/// pidfd (`pidfd_open(2)`, readable once the process terminates), so the wait ends
/// as the process does instead of at the next poll. Returns early, without
/// error, when it cannot wait that way (no pidfd support, no such process any
/// more, the pid now names another process): the caller observes again either
/// way, so the worst case is the poll it replaces.
pub(crate) async fn wait_exited(identity: &ProcessIdentity, limit: Duration) {
    let Some(pidfd) = open_pidfd(identity) else {
        // Gone already (nothing to wait for), or no pidfds: poll as before.
        if presence(identity).is_ok_and(|presence| presence == Presence::Live) {
            tokio::time::sleep(limit).await;
        }
        return;
    };
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which alone owns it
    // until it is dropped: the descriptor stays open and the same meanwhile.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    };
    let Ok(pidfd) = registered else {
        tokio::time::sleep(limit).await;
        return;
    };
    let _ = tokio::time::timeout(limit, pidfd.readable()).await;
}

/// A pidfd for the process `identity` names, checked after opening to still be
/// that process (a pid can be reused; the pidfd pins the process it was opened
/// for, so a start time that matches after opening means it is ours).
fn open_pidfd(identity: &ProcessIdentity) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let pid = i32::try_from(identity.pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // (always close-on-exec) or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            // Kernels before 5.3 (ENOSYS) or a seccomp filter (EPERM): the stop
            // path falls back to polling, as before pidfds. Said once.
            static UNAVAILABLE: std::sync::Once = std::sync::Once::new();
            UNAVAILABLE.call_once(|| {
                tracing::info!(
                    %error,
                    "pidfd_open is unavailable: stops poll for the shim's end instead of waiting on its pidfd"
                );
            });
        }
        return None;
    }
    let fd = i32::try_from(fd).ok()?;
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    (presence(identity).ok()? == Presence::Live).then_some(pidfd)
}

pub(crate) fn identity_of(pid: i32) -> io::Result<ProcessIdentity> {
    let stat = read_proc_stat(pid)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}")))?;
    Ok(ProcessIdentity {
        pid: u32::try_from(pid).map_err(io::Error::other)?,
        start_time: stat.start_time,
        boot_id: boot_id()?.to_owned(),
    })
}

/// Every process visible in `/proc` with its stat.
pub(crate) fn processes() -> io::Result<Vec<(i32, ProcStat)>> {
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

/// The children of this process (zombies included), from the kernel's list of
/// each of its threads (`/proc/self/task/<tid>/children`): the cost is in the
/// number of children, where a scan of `/proc` is in the number of processes on
/// the host (a shim ending among a thousand others read a thousand stat files).
/// `None` when the kernel keeps no such lists (built without
/// `CONFIG_PROC_CHILDREN`): then only a scan can tell.
///
/// The kernel documents the lists as possibly missing a child that is being
/// created or reparented while they are read, so a caller must not take an
/// empty answer as proof that no child is left (`waitpid` is that proof).
pub(crate) fn own_children() -> io::Result<Option<Vec<i32>>> {
    let mut children = Vec::new();
    for thread in fs::read_dir("/proc/self/task")? {
        let list = thread?.path().join("children");
        let text = match fs::read_to_string(&list) {
            Ok(text) => text,
            // The thread ended while we listed them: it has no children now.
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => continue,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if list.parent().is_some_and(Path::exists) {
                    return Ok(None); // the thread is there, its list is not
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        for word in text.split_ascii_whitespace() {
            children.push(word.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("cannot parse {}: {text:?}", list.display()),
                )
            })?);
        }
    }
    Ok(Some(children))
}

/// kill(2); a target that no longer exists is not an error.
pub(crate) fn send_signal(target: i32, signal: libc::c_int) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A shim's sweep finds its children in the kernel's per-thread lists: a
    /// child spawned here is listed (until reaped), and a process that is not our
    /// child (our parent) is not.
    #[test]
    fn own_children_lists_this_process_children_only() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let listed = own_children()
            .expect("readable")
            .expect("this kernel keeps the lists");
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(listed.contains(&pid), "child {pid} not in {listed:?}");
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        assert!(
            !listed.contains(&parent),
            "our parent {parent} listed as a child"
        );
        let after = own_children().expect("readable").expect("lists");
        assert!(
            !after.contains(&pid),
            "reaped child {pid} still listed: {after:?}"
        );
    }

    /// The stop path waits for the shim's end on its pidfd: the wait ends when the
    /// process exits, not at its limit (which it would reach if it only slept).
    #[tokio::test]
    async fn wait_exited_ends_when_the_process_does() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let identity = identity_of(pid).expect("identity");
        // Reap it as soon as it exits, as init does for a shim.
        let reaper = std::thread::spawn(move || child.wait());
        let started = Instant::now();
        wait_exited(&identity, Duration::from_secs(30)).await;
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(10),
            "waited {waited:?} for a 0.2 s process: the wait ran to its limit"
        );
        assert!(
            waited >= Duration::from_millis(100),
            "returned after {waited:?}, before the process exited"
        );
        reaper.join().expect("reaper").expect("wait");
        // Already gone: no wait at all.
        let started = Instant::now();
        wait_exited(&identity, Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
