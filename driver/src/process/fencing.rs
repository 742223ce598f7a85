//! Where the process driver keeps what fences its effects: the highest fence seen
//! per sandbox, the sandbox's tombstone, the per-sandbox lock that makes "check the
//! fence, record it, take the deciding step" one step, and the identity of the
//! driver directory.
//!
//! # Decisions
//!
//! - **One lock per sandbox, in the shared directory.** Every gateway of a host
//!   (each a different process) acts on the same files, so the lock must be one the
//!   kernel arbitrates between processes: an exclusive `flock(2)` on
//!   `<sandbox>/sandbox.lock`. `flock` locks belong to an open file description, so
//!   two drivers in one process exclude each other as well. The lock is dropped when
//!   the file is closed, so a gateway that dies holding it releases it at once.
//!   Taking it polls (`LOCK_NB`) up to a deadline instead of blocking, so a paused
//!   holder (SIGSTOP, a debugger) makes other calls `Uncertain`, never stuck.
//! - **Only the deciding step runs under the lock**: for `launch`, claiming the
//!   generation directory and checking the tombstone; for `stop`, creating
//!   `stop-requested`; for `remove`, writing the tombstone (and, later, deleting
//!   the stopped executions' files). Waiting for processes never does: it can take a
//!   grace period, and it only carries out what the step decided.
//! - **The lock file can vanish.** Tombstone collection deletes the whole sandbox
//!   directory, lock file included, while holding the lock. A caller that opened the
//!   old file then holds a lock nobody else sees, so after locking it checks that
//!   the path still names the file it locked, and starts over if not.
//! - **Durable before acting.** The fence record and the tombstone are written with
//!   `write_record`/`create_record` (temporary file, fsync, rename or link,
//!   fsync of the directory); a new sandbox directory is made durable in the driver
//!   directory before anything is recorded in it. A crash after recording a fence
//!   and before the effect leaves a fence that was seen and an effect not done:
//!   harmless, the fence only ever refuses lower ones.
//! - **The identity is created once, by whoever comes first.** Every replica of a
//!   host opens the same directory; each writes a candidate id to a temporary file
//!   and links it to `.driver-id`; `link(2)` fails when the name exists, so exactly
//!   one candidate wins and everyone reads the winner.

#![allow(unused_imports)]
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{DriverError, Fence};

use super::driver::io_uncertain;
use super::records::{create_record, parent_of, read_record, sync_dir, write_record};
use super::*;

/// The sandbox's tombstone: it was removed, by which fence, and when (wall clock,
/// milliseconds since the Unix epoch, for garbage collection only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TombstoneRecord {
    /// The fence of the `remove` that wrote it (the first one; retries keep it).
    pub fence: Fence,
    /// When it was written, in milliseconds since the Unix epoch.
    pub removed_at_unix_ms: u64,
}

/// The identity record of a driver directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DriverIdentityRecord {
    pub(crate) driver_id: String,
}

/// An exclusive lock on one sandbox; released when dropped (the file is closed).
#[derive(Debug)]
pub(crate) struct SandboxLock {
    _file: File,
}

pub(crate) fn lock_path(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join(SANDBOX_LOCK_FILE)
}

pub(crate) fn fence_path(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join(FENCE_FILE)
}

pub(crate) fn tombstone_path(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join(TOMBSTONE_FILE)
}

/// Creates the sandbox directory if it does not exist, durably: its entry in the
/// driver directory is fsynced before anything is recorded inside it.
pub(crate) fn ensure_sandbox_dir(sandbox_dir: &Path) -> io::Result<()> {
    match fs::create_dir(sandbox_dir) {
        Ok(()) => sync_dir(parent_of(sandbox_dir)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// Takes the sandbox's lock, creating the sandbox directory if needed. Fails with
/// `TimedOut` if another holder keeps it past `timeout`.
pub(crate) fn lock_sandbox(
    sandbox_dir: &Path,
    timeout: Duration,
    poll_interval: Duration,
) -> io::Result<SandboxLock> {
    let deadline = Instant::now() + timeout;
    let path = lock_path(sandbox_dir);
    loop {
        ensure_sandbox_dir(sandbox_dir)?;
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(file) => file,
            // Collected between creating the directory and opening the file.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if Instant::now() >= deadline {
                    return Err(error);
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        loop {
            // SAFETY: flock takes a file descriptor we own and an integer operation.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
                _ => return Err(error),
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} is held by another call for more than {timeout:?} (a paused or \
                         stuck gateway?)",
                        path.display()
                    ),
                ));
            }
            std::thread::sleep(poll_interval);
        }
        // The lock counts only if the path still names the file we locked.
        let locked = file.metadata()?;
        match fs::metadata(&path) {
            Ok(current) if current.dev() == locked.dev() && current.ino() == locked.ino() => {
                return Ok(SandboxLock { _file: file });
            }
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} kept being replaced for {timeout:?}", path.display()),
            ));
        }
    }
}

/// The highest fence admitted for the sandbox, if any.
pub(crate) fn read_fence(sandbox_dir: &Path) -> io::Result<Option<Fence>> {
    read_record(&fence_path(sandbox_dir))
}

/// The sandbox's tombstone, if it has one.
pub(crate) fn read_tombstone(sandbox_dir: &Path) -> io::Result<Option<TombstoneRecord>> {
    read_record(&tombstone_path(sandbox_dir))
}

/// Checks `fence` against the highest fence seen for the sandbox and records it if
/// it is higher. Call with the sandbox's lock held, and take the deciding step of
/// the effect before dropping it.
pub(crate) fn admit_fence(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    fence: &Fence,
) -> Result<(), DriverError> {
    let uncertain = |error| io_uncertain("reading the fence of", sandbox_dir, error);
    let seen = read_fence(sandbox_dir).map_err(uncertain)?;
    if let Some(seen) = &seen {
        if !fence.admits_after(seen) {
            let why = if fence.cluster_id != seen.cluster_id {
                format!("it belongs to cluster {:?}", fence.cluster_id)
            } else {
                "it is lower".to_owned()
            };
            return Err(DriverError::Fenced {
                message: format!(
                    "{fence} refused: the driver already saw {seen} of cluster {:?}, and {why}; \
                     a newer leader owns this sandbox",
                    seen.cluster_id
                ),
            });
        }
        if fence.order() == seen.order() {
            return Ok(()); // the same operation again: nothing new to record
        }
    }
    write_record(&fence_path(sandbox_dir), fence)
        .map_err(|error| io_uncertain("recording the fence of", sandbox_dir, error))
}

/// Writes the sandbox's tombstone unless it has one. Call with the lock held.
pub(crate) fn write_tombstone(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    fence: &Fence,
) -> Result<(), DriverError> {
    let record = TombstoneRecord {
        fence: fence.clone(),
        removed_at_unix_ms: unix_ms(SystemTime::now()),
    };
    create_record(&tombstone_path(sandbox_dir), &record)
        .map(|_created| ())
        .map_err(|error| io_uncertain("writing the tombstone of", sandbox_dir, error))
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// The identity of the driver directory, created (race-free) if it has none.
pub(crate) fn load_or_create_identity(driver_dir: &Path) -> io::Result<String> {
    fs::create_dir_all(driver_dir)?;
    let path = driver_dir.join(DRIVER_ID_FILE);
    if read_record::<DriverIdentityRecord>(&path)?.is_none() {
        let candidate = DriverIdentityRecord {
            driver_id: uuid::Uuid::new_v4().to_string(),
        };
        // link(2) inside create_record: the first replica's candidate wins.
        create_record(&path, &candidate)?;
    }
    read_identity(driver_dir)
}

/// The identity of the driver directory; an error if it has none.
pub(crate) fn read_identity(driver_dir: &Path) -> io::Result<String> {
    let path = driver_dir.join(DRIVER_ID_FILE);
    let record: DriverIdentityRecord = read_record(&path)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is missing", path.display()),
        )
    })?;
    if record.driver_id.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds an empty id", path.display()),
        ));
    }
    Ok(record.driver_id)
}
