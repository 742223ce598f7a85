//! The launch server: one small, long-lived, single-threaded child of each
//! gateway (`palisade shim launch-server`) that forks every sandbox's shim,
//! so that starting a shim costs a `fork` of a process that is already
//! loaded instead of an `exec` of the `palisade` binary.
//!
//! # Why a server (the zygote pattern)
//!
//! The gateway cannot fork a shim itself: it is multi-threaded (tokio), and
//! a fork of it may only call async-signal-safe functions before it execs.
//! So each launch used to exec `palisade shim launch DIR`, and a profile of
//! 16 clients creating process-driver sandboxes (`perf record -a -g`) put
//! ~39 % of the machine's CPU in those launchers: the dynamic loader
//! relocating the 47 MB binary (copy-on-write faults on every page of its
//! relocated data), glibc probing the CPU, and tearing it all down again.
//! The server pays that once: it is exec'd once per gateway, then forks the
//! shim of each launch. The child becomes the shim as `palisade shim launch
//! DIR`'s does ([`super::shim`]): a new session of its own, its standard
//! error in the execution's `shim.log`, nothing of the gateway's held.
//!
//! # Why the shim is the server's child, not its grandchild
//!
//! `palisade shim launch DIR` forks the shim from a launcher that exits, so
//! the shim is adopted by init (the classic double fork). The server used
//! to do the same, forking a launcher per launch that forked the shim: a
//! profile of 16 clients creating sandboxes put ~10 % of the machine in
//! those launchers (a fork, its page faults and its exit, per launch), and
//! the shim gained nothing by them. What the double fork buys a daemon, the
//! shim has without it: its own session (no terminal, no signal aimed at
//! the gateway's process group reaches it), no zombie left behind (the
//! server ignores `SIGCHLD`, so the kernel reaps its children; the shim
//! restores the default to wait for its own command), and when the server
//! ends (with its gateway) the shim is adopted by init and runs on. So the
//! server forks the shim directly (`palisade-shim` under `palisade-launch`
//! in `ps`, until the gateway goes).
//!
//! # The protocol
//!
//! One `SOCK_SEQPACKET` socket pair: the gateway holds one end, the server
//! has the other as its standard input. A launch is one message: the
//! execution directory's path, with two descriptors passed along
//! (`SCM_RIGHTS`), the write ends of two pipes the gateway made for this
//! launch:
//!
//! - *report*: why the server's child failed before it became the shim (it
//!   could not open `shim.log`, say); closed once it is the shim;
//! - *status*: one byte, [`LAUNCHED`] once the shim has reported (its
//!   command recorded and started, or why not), or [`FAILED`] with the
//!   report.
//!
//! The gateway reads both to their end. A status pipe that ends without its
//! byte (the shim died, or the server died with the message still queued:
//! the kernel then closes the passed descriptors) leaves only the execution
//! directory to tell what started, and the driver observes it. A message
//! that could not be sent started nothing.
//!
//! # Lifecycle
//!
//! Started by the first launch, after it has written one [`READY`] byte
//! to its standard output (a server that exits or fails before that
//! started nothing, and the launch is rejected with its standard error).
//! Its later diagnostics go to the gateway's log. It exits when the
//! gateway's end of the socket closes (the gateway exited, crashed or
//! dropped its driver) and is killed with the driver; a launch that finds
//! it gone starts another. Its shims are reaped by the kernel (`SIGCHLD`
//! ignored in the server, restored in each shim, which waits for its own
//! command).

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, Interest};

use super::shim::{Reported, ShimArgs, open_shim_log, pipe, run_forked_shim};

/// What the server writes to its standard output once it serves launches.
pub(crate) const READY: u8 = b'R';
/// A launch's status byte: its shim started and reported.
pub(crate) const LAUNCHED: u8 = 0;
/// A launch's status byte: the server's child failed before it became the
/// shim (its report says why); no shim of it started.
pub(crate) const FAILED: u8 = 1;
/// Longest execution directory path a launch message carries (`PATH_MAX`).
pub(crate) const PATH_BYTES_MAX: usize = 4096;
/// How much of a launch's report (or a failed server's standard error) is kept.
const REPORT_BYTES_MAX: u64 = 64 * 1024;

// ---------------------------------------------------------------------------------
// The server side: runs inside `palisade shim launch-server`, never in a gateway.

/// Serves launches until the gateway closes its end of the socket (standard
/// input). Call only while this process has one thread.
pub(crate) fn serve_launches() -> io::Result<()> {
    const COMM: &[u8] = b"palisade-launch\0";
    // SAFETY: nothing in this process owns a descriptor above 2 yet: what is
    // there was left open (not close-on-exec) by whatever started the
    // gateway, and no shim should hold it for the sandbox's
    // life. prctl reads a static NUL-terminated name; signal installs a
    // disposition, no handler.
    unsafe {
        super::shim::close_all_but_standard_descriptors();
        libc::prctl(libc::PR_SET_NAME, COMM.as_ptr() as libc::c_ulong, 0, 0, 0);
        if libc::signal(libc::SIGCHLD, libc::SIG_IGN) == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    write_byte(1, READY)?;
    // Nothing else goes to the gateway's readiness pipe, and no
    // shim keeps it.
    redirect_to_null(1)?;
    // SAFETY: descriptor 0 is the socket the gateway gave this process as its
    // standard input; it stays open for the whole loop.
    let socket = unsafe { BorrowedFd::borrow_raw(0) };
    loop {
        let mut path = [0u8; PATH_BYTES_MAX];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut path)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(received) => received,
            Err(rustix::io::Errno::INTR) => continue,
            Err(error) => return Err(error.into()),
        };
        let mut passed: Vec<OwnedFd> = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                passed.extend(fds);
            }
        }
        if received.bytes == 0 && passed.is_empty() {
            // The gateway's end is closed: nobody will ask again.
            return Ok(());
        }
        let truncated = received
            .flags
            .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC);
        let [report, status]: [OwnedFd; 2] = match passed.try_into() {
            Ok(pipes) if !truncated && received.bytes > 0 => pipes,
            // Dropping what came closes it: that launch reads as a shim
            // that died, which only observation resolves.
            _ => {
                eprintln!(
                    "palisade shim launch-server: ignored a malformed launch message \
                     ({} bytes)",
                    received.bytes
                );
                continue;
            }
        };
        let dir = PathBuf::from(OsStr::from_bytes(&path[..received.bytes]));
        // SAFETY: this process is single-threaded, so the child is a whole
        // copy of it and may run any code.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            run_launched_shim(&dir, report, status);
        }
        if pid < 0 {
            let error = io::Error::last_os_error();
            let message = format!("cannot fork the shim of {}: {error}\n", dir.display());
            let _ = write_all(report.as_raw_fd(), message.as_bytes());
            let _ = write_byte(status.as_raw_fd(), FAILED);
        }
        // The shim holds its own copies; the server keeps none.
    }
}

/// The server's child: the shim of `dir`, reporting through the two pipes
/// the gateway passed. Never returns.
fn run_launched_shim(dir: &Path, report: OwnedFd, status: OwnedFd) -> ! {
    let log = prepare_shim(dir);
    let code = match log {
        Ok(log) => {
            // Only what goes wrong before the shim exists goes to the report.
            drop(report);
            run_forked_shim(dir, &log, Reported::with_status(status, LAUNCHED))
        }
        Err(error) => {
            let message = format!("palisade shim launch {}: {error}\n", dir.display());
            let _ = write_all(report.as_raw_fd(), message.as_bytes());
            let _ = write_byte(status.as_raw_fd(), FAILED);
            i32::from(FAILED)
        }
    };
    std::process::exit(code)
}

/// What the server's child undoes of the server before it becomes a shim,
/// and the shim's log, opened (see [`super::shim::launch_shim_closing`]).
fn prepare_shim(dir: &Path) -> io::Result<std::fs::File> {
    // SAFETY: signal installs a disposition, no handler.
    // The shim waits for its command: its children must not be reaped for it.
    if unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    // The server's end of the socket must not outlive the server in a shim:
    // the gateway's sends fail (EPIPE), telling it the server is gone, only
    // once no process holds that end.
    redirect_to_null(0)?;
    open_shim_log(dir)
}

fn redirect_to_null(fd: RawFd) -> io::Result<()> {
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    // SAFETY: dup2 onto a descriptor number this process owns.
    if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn write_byte(fd: RawFd, byte: u8) -> io::Result<()> {
    write_all(fd, &[byte])
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writes from a buffer we own, of its length.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        bytes = &bytes[written as usize..];
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The gateway side.

/// How a launch through the server ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LaunchOutcome {
    /// The shim started and reported.
    Launched,
    /// The server's child failed before it became the shim; what it wrote.
    Failed(String),
    /// The status pipe closed without its byte: the shim died (before or
    /// after claiming the execution), or the server died with the launch
    /// queued. Only the execution's records tell what started.
    Died,
    /// Nothing was sent (the server could not be started or reached), so
    /// nothing started; why.
    NotSent(String),
}

/// A gateway's launch server, started on first use and again whenever it
/// is found gone. Shared by the driver's clones.
#[derive(Debug)]
pub(crate) struct LaunchServers {
    program: PathBuf,
    current: tokio::sync::Mutex<Option<Arc<LaunchServer>>>,
}

#[derive(Debug)]
struct LaunchServer {
    socket: AsyncFd<OwnedFd>,
    /// Killed when the last handle goes (`kill_on_drop`); its socket end
    /// closing would end it anyway.
    child: Mutex<tokio::process::Child>,
}

impl LaunchServers {
    /// Servers run `program shim launch-server`.
    pub(crate) fn new(program: PathBuf) -> Self {
        LaunchServers {
            program,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// Launches the shim of `dir` and waits for its status. Not bounded in
    /// time: the caller bounds it (a launch cut short is uncertain).
    pub(crate) async fn launch(&self, dir: &Path) -> LaunchOutcome {
        let path = dir.as_os_str().as_bytes();
        if path.is_empty() || path.len() > PATH_BYTES_MAX {
            return LaunchOutcome::NotSent(format!(
                "the execution directory path {} is empty or longer than {PATH_BYTES_MAX} bytes",
                dir.display()
            ));
        }
        let pipes = match (pipe(), pipe()) {
            (Ok(report), Ok(status)) => (report, status),
            (Err(error), _) | (_, Err(error)) => {
                return LaunchOutcome::NotSent(format!("cannot make the launch's pipes: {error}"));
            }
        };
        let ((report_read, report_write), (status_read, status_write)) = pipes;
        let passed = [report_write.as_fd(), status_write.as_fd()];
        let mut server = match self.running().await {
            Ok(server) => server,
            Err(message) => return LaunchOutcome::NotSent(message),
        };
        if let Err(error) = server.send(path, &passed).await {
            if !server.is_gone(&error) {
                return LaunchOutcome::NotSent(format!(
                    "cannot send the launch to the launch server: {error}"
                ));
            }
            // It died since the last launch: a fresh one gets this one.
            self.forget(&server).await;
            server = match self.running().await {
                Ok(server) => server,
                Err(message) => return LaunchOutcome::NotSent(message),
            };
            if let Err(error) = server.send(path, &passed).await {
                return LaunchOutcome::NotSent(format!(
                    "cannot send the launch to a new launch server: {error}"
                ));
            }
        }
        // Only the server's child holds the write ends now: the report's
        // closes once it is the shim, the status's once the shim reported.
        drop((report_write, status_write));
        // Both to their end, the status too: a launch finishes only once no
        // process (the shim above all) holds either pipe.
        let (report, status) = tokio::join!(
            read_bounded(report_read, REPORT_BYTES_MAX),
            read_bounded(status_read, 2)
        );
        match status.as_deref() {
            Ok([LAUNCHED]) => LaunchOutcome::Launched,
            Ok([FAILED]) => LaunchOutcome::Failed(
                String::from_utf8_lossy(&report.unwrap_or_default())
                    .trim()
                    .to_owned(),
            ),
            _ => LaunchOutcome::Died,
        }
    }

    /// The running server, started if there is none (or it exited).
    async fn running(&self) -> Result<Arc<LaunchServer>, String> {
        let mut current = self.current.lock().await;
        if let Some(server) = current.as_ref()
            && server.is_running()
        {
            return Ok(Arc::clone(server));
        }
        *current = None;
        let server = Arc::new(LaunchServer::start(&self.program).await?);
        *current = Some(Arc::clone(&server));
        Ok(server)
    }

    async fn forget(&self, server: &Arc<LaunchServer>) {
        let mut current = self.current.lock().await;
        if current
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, server))
        {
            *current = None;
        }
    }

    /// The running server's pid, if one runs (for tests).
    pub(crate) async fn server_pid(&self) -> Option<u32> {
        let current = self.current.lock().await;
        let server = current.as_ref()?;
        if !server.is_running() {
            return None;
        }
        server.lock_child().id()
    }
}

impl LaunchServer {
    /// Starts `program shim launch-server` and waits for it to say it is ready.
    async fn start(program: &Path) -> Result<Self, String> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|error| format!("cannot make the launch server's socket: {error}"))?;
        rustix::io::ioctl_fionbio(&ours, true)
            .map_err(|error| format!("cannot make the launch server's socket: {error}"))?;
        let (ready_read, ready_write) =
            pipe().map_err(|error| format!("cannot make the launch server's pipe: {error}"))?;
        // The command (and with it this process's copies of the server's socket
        // end and readiness pipe) is dropped once spawned, so a server that dies
        // closes them for good.
        let spawned = tokio::process::Command::new(program)
            .args(ShimArgs::LaunchServer.to_argv())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::from(ready_write))
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = spawned.map_err(|error| {
            format!(
                "cannot start the shim program {}: {error}",
                program.display()
            )
        })?;
        let mut stderr = child.stderr.take();
        let mut ready = [0u8; 1];
        let said = match tokio::net::unix::pipe::Receiver::from_owned_fd(ready_read) {
            Ok(mut pipe) => pipe.read(&mut ready).await.ok(),
            Err(_) => None,
        };
        if said != Some(1) || ready[0] != READY {
            let _ = child.start_kill();
            let status = child.wait().await;
            let mut text = Vec::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.take(REPORT_BYTES_MAX).read_to_end(&mut text).await;
            }
            return Err(format!(
                "the shim program {} did not start serving launches ({}): {}",
                program.display(),
                match status {
                    Ok(status) => status.to_string(),
                    Err(error) => format!("cannot wait for it: {error}"),
                },
                String::from_utf8_lossy(&text).trim()
            ));
        }
        if let Some(stderr) = stderr {
            let pid = child.id();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(launch_server_pid = ?pid, "{line}");
                }
            });
        }
        // SAFETY: `ours` is an OwnedFd moved into the AsyncFd: it stays open and
        // the same descriptor until the AsyncFd is dropped.
        let socket = unsafe { AsyncFd::register(ours) }
            .map_err(|error| format!("cannot watch the launch server's socket: {error}"))?;
        Ok(LaunchServer {
            socket,
            child: Mutex::new(child),
        })
    }

    fn lock_child(&self) -> std::sync::MutexGuard<'_, tokio::process::Child> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_running(&self) -> bool {
        matches!(self.lock_child().try_wait(), Ok(None))
    }

    /// Whether a failed send means the server is gone (so another may be
    /// started and sent the same launch: this one received nothing).
    fn is_gone(&self, error: &io::Error) -> bool {
        matches!(
            error.raw_os_error(),
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
        ) || !self.is_running()
    }

    /// Sends one launch message; it is queued whole or not at all.
    async fn send(&self, path: &[u8], passed: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.socket
            .async_io(Interest::WRITABLE, |socket| {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                if !control.push(SendAncillaryMessage::ScmRights(passed)) {
                    return Err(io::Error::other("the passed descriptors do not fit"));
                }
                let sent = rustix::net::sendmsg(
                    socket,
                    &[IoSlice::new(path)],
                    &mut control,
                    SendFlags::NOSIGNAL,
                )?;
                if sent != path.len() {
                    return Err(io::Error::other("the launch message was cut short"));
                }
                Ok(())
            })
            .await
    }
}

/// Reads `fd` (a pipe's read end) to its end, keeping at most `limit` bytes.
async fn read_bounded(fd: OwnedFd, limit: u64) -> io::Result<Vec<u8>> {
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?;
    let mut kept = Vec::new();
    pipe.take(limit).read_to_end(&mut kept).await?;
    Ok(kept)
}
