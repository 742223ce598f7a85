//! The launch server: one small, long-lived, single-threaded child of each
//! gateway (`palisade shim launch-server`) that forks a launcher for every
//! launch, so that starting a sandbox's shim costs a `fork` of a process
//! that is already loaded instead of an `exec` of the `palisade` binary.
//!
//! # Why a server (the zygote pattern)
//!
//! The gateway cannot fork a launcher itself: it is multi-threaded (tokio),
//! and a fork of it may only call async-signal-safe functions before it
//! execs. So each launch used to exec `palisade shim launch DIR`, and a
//! profile of 16 clients creating process-driver sandboxes (`perf record
//! -a -g`) put ~39 % of the machine's CPU in those launchers: the dynamic
//! loader relocating the 47 MB binary (copy-on-write faults on every page
//! of its relocated data), glibc probing the CPU, and tearing it all down
//! again. The server pays that once: it is exec'd once per gateway, then
//! forks one launcher per launch. The launcher (the server's child) does
//! exactly what `palisade shim launch DIR` does ([`super::shim`]): it forks
//! the shim into a new session and exits once the shim has reported, so the
//! shim is adopted by init and is never a child of the gateway, of the
//! server, or of anything a gateway's death or signal reaches.
//!
//! # The protocol
//!
//! One `SOCK_SEQPACKET` socket pair: the gateway holds one end, the server
//! has the other as its standard input. A launch is one message: the
//! execution directory's path, with two descriptors passed along
//! (`SCM_RIGHTS`), the write ends of two pipes the gateway made for this
//! launch:
//!
//! - *report*: the launcher's standard error (why it failed, if it did);
//! - *status*: one byte written just before the launcher exits,
//!   [`LAUNCHED`] or [`FAILED`].
//!
//! The gateway reads both to their end. A launcher that ends without its
//! status byte (killed, or its server died with the message still queued:
//! the kernel then closes the passed descriptors) may have started the
//! shim, so the launch is uncertain and only observation decides — as a
//! killed `palisade shim launch` always was. Nothing else is ever uncertain:
//! a message that could not be sent started nothing.
//!
//! # Lifecycle
//!
//! Started by the first launch, after it has written one [`READY`] byte
//! to its standard output (a server that exits or fails before that
//! started nothing, and the launch is rejected with its standard error).
//! Its later diagnostics go to the gateway's log. It exits when the
//! gateway's end of the socket closes (the gateway exited, crashed or
//! dropped its driver) and is killed with the driver; a launch that finds
//! it gone starts another. Launchers are reaped by the kernel (`SIGCHLD`
//! ignored in the server, restored in each launcher before it forks its
//! shim, which waits for its own command).

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

use super::shim::{ShimArgs, launch_shim_closing, pipe};

/// What the server writes to its standard output once it serves launches.
pub(crate) const READY: u8 = b'R';
/// A launcher's status byte: its shim started and reported.
pub(crate) const LAUNCHED: u8 = 0;
/// A launcher's status byte: it failed (its report says why); no shim of it
/// started.
pub(crate) const FAILED: u8 = 1;
/// Longest execution directory path a launch message carries (`PATH_MAX`).
pub(crate) const PATH_BYTES_MAX: usize = 4096;
/// How much of a launcher's (or a failed server's) standard error is kept.
const REPORT_BYTES_MAX: u64 = 64 * 1024;

// ---------------------------------------------------------------------------------
// The server side: runs inside `palisade shim launch-server`, never in a gateway.

/// Serves launches until the gateway closes its end of the socket (standard
/// input). Call only while this process has one thread.
pub(crate) fn serve_launches() -> io::Result<()> {
    const COMM: &[u8] = b"palisade-launch\0";
    // SAFETY: nothing in this process owns a descriptor above 2 yet: what is
    // there was left open (not close-on-exec) by whatever started the
    // gateway, and no launcher or shim should hold it for the sandbox's
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
    // Nothing else goes to the gateway's readiness pipe, and no launcher or
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
            // Dropping what came closes it: that launch reads as a launcher
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
            run_launcher(&dir, report, status);
        }
        if pid < 0 {
            let error = io::Error::last_os_error();
            let message = format!("cannot fork a launcher for {}: {error}\n", dir.display());
            let _ = write_all(report.as_raw_fd(), message.as_bytes());
            let _ = write_byte(status.as_raw_fd(), FAILED);
        }
        // The launcher holds its own copies; the server keeps none.
    }
}

/// The server's child: the launcher of `dir`, reporting through the two
/// pipes the gateway passed. Never returns.
fn run_launcher(dir: &Path, report: OwnedFd, status: OwnedFd) -> ! {
    // SAFETY: dup2 and signal on descriptors and a signal this process owns.
    let redirected = unsafe {
        // The shim waits for its command: children must not be reaped for it.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::dup2(report.as_raw_fd(), 2) >= 0
    };
    drop(report);
    // The server's end of the socket must not outlive the server in a
    // launcher or a shim: the gateway's sends fail (EPIPE), telling it the
    // server is gone, only once no process holds that end.
    let code = match redirected.then(|| redirect_to_null(0)) {
        Some(Ok(())) => match launch_shim_closing(dir, &[status.as_raw_fd()]) {
            Ok(()) => {
                die_here_if_asked(dir);
                LAUNCHED
            }
            Err(error) => {
                eprintln!("palisade shim launch {}: {error}", dir.display());
                FAILED
            }
        },
        Some(Err(error)) => {
            eprintln!("palisade shim launch {}: {error}", dir.display());
            FAILED
        }
        None => FAILED,
    };
    let _ = write_byte(status.as_raw_fd(), code);
    std::process::exit(i32::from(code))
}

/// Test hook (debug builds only): a launcher whose spec's environment has
/// [`TEST_KILL_LAUNCHER_VARIABLE`] kills itself after its shim reported and
/// before its status byte, as a launcher killed at the worst moment.
fn die_here_if_asked(dir: &Path) {
    if !cfg!(debug_assertions) {
        return;
    }
    let asked = std::fs::read(dir.join(super::SPEC_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<crate::LaunchSpec>(&bytes).ok())
        .is_some_and(|spec| spec.env.contains_key(TEST_KILL_LAUNCHER_VARIABLE));
    if asked {
        // SAFETY: raise has no preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
    }
}

/// The environment variable of [`die_here_if_asked`] (debug builds only).
pub const TEST_KILL_LAUNCHER_VARIABLE: &str = "PALISADE_SHIM_TEST_KILL_LAUNCHER";

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

fn write_byte(fd: RawFd, byte: u8) -> io::Result<()> {
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
    /// The launcher's shim started and reported.
    Launched,
    /// The launcher failed before it started a shim; what it wrote.
    Failed(String),
    /// The launcher ended without its status (killed, or the server died
    /// with the launch): the shim may have started.
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

    /// Launches the shim of `dir` and waits for its launcher to end. Not
    /// bounded in time: the caller bounds it (a launch cut short is
    /// uncertain, as [`LaunchOutcome::Died`]).
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
        // Only the launcher holds the write ends now: their ends are its end.
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
