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
//! - **Durable before acting, for one fsync.** A fence record and a tombstone are
//!   empty files whose *names* hold the record (`fence.<term>.<operation>.<generation>.<cluster hex>`,
//!   `tombstone.<removed at ms>.<fence fields>`). Creating a name is atomic, and one
//!   fsync of the sandbox directory makes it durable; a record with content (the
//!   first fencing release wrote `fence.json`, `tombstone.json`) needs an fsync of
//!   its temporary file, then the rename, then the directory's: twice the flushes,
//!   on the path of every effect. The deciding step fsyncs the sandbox directory
//!   once, after every name it created, before anything acts on them: `launch`
//!   shares the fsync that makes its claimed generation durable, `remove` the one
//!   of its tombstone, `stop` pays one. A newer fence deletes the records it
//!   supersedes only after it is durable, so a crash leaves the new record, the old
//!   one, or both (the highest counts), never none. A new sandbox directory's entry in
//!   the driver directory is fsynced with its first fence, both at once (one
//!   wait, [`sync_together`]), before anything acts on it. A crash
//!   after recording a fence and before the effect leaves a fence that was seen and
//!   an effect not done: harmless, the fence only ever refuses lower ones. Records
//!   of the first release are still read (and superseded by the next fence).
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
use super::records::{create_record, parent_of, read_record, read_sandbox_dir, sync_together};
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

/// Creates the sandbox directory if it does not exist. Not fsynced here: its entry
/// in the driver directory is made durable together with the sandbox's first fence
/// (see [`AdmittedFence::sync`]), before anything acts on what it records.
pub(crate) fn ensure_sandbox_dir(sandbox_dir: &Path) -> io::Result<()> {
    match fs::create_dir(sandbox_dir) {
        Ok(()) => Ok(()),
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

/// A sandbox directory's fencing records and generations, from one listing.
#[derive(Debug, Default)]
pub(crate) struct SandboxRecords {
    pub(crate) fencing: FencingRecords,
    /// The generation directories, ascending.
    pub(crate) generations: Vec<u64>,
}

/// What a sandbox directory records about fencing, read in one listing of it.
#[derive(Debug, Default)]
pub(crate) struct FencingRecords {
    /// The highest fence recorded (by order), if any.
    pub(crate) highest: Option<Fence>,
    /// Every fence record found (the highest included): what a newer fence
    /// supersedes.
    pub(crate) fence_paths: Vec<PathBuf>,
    /// The tombstone, if the sandbox has one.
    pub(crate) tombstone: Option<TombstoneRecord>,
}

/// Reads the sandbox's fence and tombstone records: record names (see
/// [`fence_name`]) and, from directories written by the first fencing release,
/// `fence.json` and `tombstone.json`. Nothing recorded if the directory is missing.
pub(crate) fn read_fencing(sandbox_dir: &Path) -> io::Result<FencingRecords> {
    Ok(read_sandbox_records(sandbox_dir)?.fencing)
}

/// Everything a sandbox directory holds that `list` needs: its fencing records
/// and its generations (as [`super::driver::generations_of`], sorted), read in
/// **one** listing of the directory. The orphan reconciler lists every sandbox
/// directory each round, tombstoned ones included (they are kept for
/// [`ProcessDriverTimeouts::tombstone_retention`](super::ProcessDriverTimeouts)),
/// so a round costs one listing per sandbox, not one for the tombstone and
/// another for the generations.
pub(crate) fn read_sandbox_records(sandbox_dir: &Path) -> io::Result<SandboxRecords> {
    let mut records = FencingRecords::default();
    let mut generations = Vec::new();
    let entries = match read_sandbox_dir(sandbox_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(SandboxRecords {
                fencing: records,
                generations,
            });
        }
        Err(error) => return Err(error),
    };
    let sandbox_id = sandbox_dir
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    for (walked, entry) in entries.enumerate() {
        if walked >= EXECUTIONS_LISTED_MAX {
            return Err(io::Error::other(format!(
                "more than {EXECUTIONS_LISTED_MAX} entries under {}",
                sandbox_dir.display()
            )));
        }
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue; // never one of ours
        };
        if let Ok(generation) = name.parse::<u64>() {
            generations.push(generation);
            continue;
        }
        let (fence, tombstone) = if name == LEGACY_FENCE_FILE {
            (read_record::<Fence>(&entry.path())?, None)
        } else if name == LEGACY_TOMBSTONE_FILE {
            (None, read_record::<TombstoneRecord>(&entry.path())?)
        } else if name.starts_with(FENCE_PREFIX) {
            (Some(parse_fence_name(name, sandbox_id)?), None)
        } else if name.starts_with(TOMBSTONE_PREFIX) {
            (None, Some(parse_tombstone_name(name, sandbox_id)?))
        } else {
            continue;
        };
        if let Some(fence) = fence {
            records.fence_paths.push(entry.path());
            if records
                .highest
                .as_ref()
                .is_none_or(|highest| fence.order() > highest.order())
            {
                records.highest = Some(fence);
            }
        }
        if let Some(tombstone) = tombstone
            && records
                .tombstone
                .as_ref()
                .is_none_or(|kept| tombstone.removed_at_unix_ms > kept.removed_at_unix_ms)
        {
            // Only one is ever written; should an old-format one be left beside it,
            // the later keeps the sandbox longest.
            records.tombstone = Some(tombstone);
        }
    }
    generations.sort_unstable();
    Ok(SandboxRecords {
        fencing: records,
        generations,
    })
}

/// The highest fence admitted for the sandbox, if any.
pub(crate) fn read_fence(sandbox_dir: &Path) -> io::Result<Option<Fence>> {
    Ok(read_fencing(sandbox_dir)?.highest)
}

/// The sandbox's tombstone, if it has one.
pub(crate) fn read_tombstone(sandbox_dir: &Path) -> io::Result<Option<TombstoneRecord>> {
    Ok(read_fencing(sandbox_dir)?.tombstone)
}

/// Whether `name`, an entry of a sandbox directory, is a fencing record (or the
/// lock): what stays of a removed sandbox.
pub(crate) fn is_fencing_entry(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|name| {
        name == SANDBOX_LOCK_FILE
            || name == LEGACY_FENCE_FILE
            || name == LEGACY_TOMBSTONE_FILE
            || name.starts_with(FENCE_PREFIX)
            || name.starts_with(TOMBSTONE_PREFIX)
    })
}

/// The name of the record of `fence`:
/// `fence.<term>.<operation index>.<generation>.<cluster id, hex>`.
///
/// The record is an empty file whose name is its content, because creating a
/// name is atomic and made durable by one fsync of the directory, which the
/// deciding step of every effect does anyway (for the generation it claims, the
/// tombstone it writes, or the fence alone): a record with content would need
/// its own fsync first, so that a crash could not leave the name without it.
/// Hex keeps any cluster id a valid, separator-free name.
pub(crate) fn fence_name(fence: &Fence) -> String {
    format!(
        "{FENCE_PREFIX}{}.{}.{}.{}",
        fence.term,
        fence.operation_index,
        fence.generation,
        hex(&fence.cluster_id)
    )
}

/// The name of the tombstone written by `fence` at `removed_at_unix_ms`:
/// `tombstone.<removed at, ms>.<term>.<operation index>.<generation>.<cluster id, hex>`.
pub(crate) fn tombstone_name(fence: &Fence, removed_at_unix_ms: u64) -> String {
    format!(
        "{TOMBSTONE_PREFIX}{removed_at_unix_ms}.{}.{}.{}.{}",
        fence.term,
        fence.operation_index,
        fence.generation,
        hex(&fence.cluster_id)
    )
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn malformed(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{name:?} looks like a fencing record but does not parse"),
    )
}

/// Parses `<term>.<operation index>.<generation>.<cluster id, hex>`.
fn parse_fence_fields(fields: &[&str], sandbox_id: &str) -> Option<Fence> {
    let [term, operation_index, generation, cluster_id] = fields else {
        return None;
    };
    Some(Fence {
        cluster_id: unhex(cluster_id)?,
        term: term.parse().ok()?,
        sandbox_id: sandbox_id.to_owned(),
        generation: generation.parse().ok()?,
        operation_index: operation_index.parse().ok()?,
    })
}

pub(crate) fn parse_fence_name(name: &str, sandbox_id: &str) -> io::Result<Fence> {
    let fields: Vec<&str> = name
        .strip_prefix(FENCE_PREFIX)
        .unwrap_or_default()
        .split('.')
        .collect();
    parse_fence_fields(&fields, sandbox_id).ok_or_else(|| malformed(name))
}

pub(crate) fn parse_tombstone_name(name: &str, sandbox_id: &str) -> io::Result<TombstoneRecord> {
    let fields: Vec<&str> = name
        .strip_prefix(TOMBSTONE_PREFIX)
        .unwrap_or_default()
        .split('.')
        .collect();
    let parsed = fields.split_first().and_then(|(removed_at, fence)| {
        Some(TombstoneRecord {
            fence: parse_fence_fields(fence, sandbox_id)?,
            removed_at_unix_ms: removed_at.parse().ok()?,
        })
    });
    parsed.ok_or_else(|| malformed(name))
}

/// Creates an empty file unless the name exists. Not fsynced: the caller makes the
/// directory durable (see [`fence_name`]).
fn create_name(path: &Path) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// A fence admitted and recorded, not yet durable: the caller fsyncs the sandbox
/// directory (together with its own deciding step's names) before the effect goes
/// on, then calls [`AdmittedFence::made_durable`].
#[must_use = "the fence is durable only once the sandbox directory is fsynced"]
#[derive(Debug)]
pub(crate) struct AdmittedFence {
    superseded: Vec<PathBuf>,
    /// No fence was recorded before this one: the sandbox directory may be new,
    /// and its entry in the driver directory not durable yet.
    first: bool,
}

impl AdmittedFence {
    /// The directory whose fsync makes the sandbox directory's own entry durable
    /// (the driver directory), when this is the sandbox's first fence; `None`
    /// otherwise (the step that recorded the earlier fence made it durable).
    ///
    /// Tied to the first fence rather than to "this call created the directory":
    /// a call that finds the directory made by another one, not fsynced yet,
    /// finds no fence in it either, so it syncs the entry itself.
    pub(crate) fn parent_to_sync<'a>(&self, sandbox_dir: &'a Path) -> Option<&'a Path> {
        self.first.then(|| parent_of(sandbox_dir))
    }

    /// Makes the fence durable: fsyncs the sandbox directory, which holds its
    /// name (and whatever else the step created in it), together with the driver
    /// directory for the sandbox's first fence ([`sync_together`]: one wait).
    pub(crate) fn sync(&self, sandbox_dir: &Path) -> io::Result<()> {
        let sandbox = File::open(sandbox_dir)?;
        match self.parent_to_sync(sandbox_dir) {
            Some(parent) => sync_together(&[&sandbox, &File::open(parent)?]),
            None => sync_together(&[&sandbox]),
        }
    }

    /// Deletes the records the new fence superseded. Only after the new one is
    /// durable: a crash must never leave no fence at all. Not fsynced: a lower
    /// record that survives a crash is ignored beside the higher one and deleted
    /// by the next admitted fence.
    pub(crate) fn made_durable(self) {
        for path in self.superseded {
            // Any failure leaves a lower record, which never decides anything.
            let _ = fs::remove_file(path);
        }
    }
}

/// Checks `fence` against the highest fence seen for the sandbox and records it.
/// Call with the sandbox's lock held; take the deciding step of the effect, fsync
/// the sandbox directory and call [`AdmittedFence::made_durable`] before dropping
/// it.
pub(crate) fn admit_fence(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    fence: &Fence,
) -> Result<AdmittedFence, DriverError> {
    let records = read_fencing(sandbox_dir)
        .map_err(|error| io_uncertain("reading the fence of", sandbox_dir, error))?;
    admit_fence_over(sandbox_dir, records, fence)
}

/// The first step of `remove`, under the lock, from **one** listing of the
/// sandbox directory: [`admit_fence`], then [`write_tombstone`]. Returns the
/// admitted fence (fsync the directory, then [`AdmittedFence::made_durable`]) and
/// the generations the listing found, ascending.
pub(crate) fn admit_removal(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    fence: &Fence,
) -> Result<(AdmittedFence, Vec<u64>), DriverError> {
    let records = read_sandbox_records(sandbox_dir)
        .map_err(|error| io_uncertain("reading the fence of", sandbox_dir, error))?;
    let tombstoned = records.fencing.tombstone.is_some();
    let admitted = admit_fence_over(sandbox_dir, records.fencing, fence)?;
    if !tombstoned {
        create_tombstone(sandbox_dir, fence)?;
    }
    Ok((admitted, records.generations))
}

/// [`admit_fence`] against records already read under the lock.
fn admit_fence_over(
    sandbox_dir: &Path,
    records: FencingRecords,
    fence: &Fence,
) -> Result<AdmittedFence, DriverError> {
    if let Some(seen) = &records.highest
        && !fence.admits_after(seen)
    {
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
    // Recorded also when equal (a repeated call): the call that recorded it first
    // may have died before making it durable, and this one is about to act on it.
    let path = sandbox_dir.join(fence_name(fence));
    create_name(&path)
        .map_err(|error| io_uncertain("recording the fence of", sandbox_dir, error))?;
    let first = records.highest.is_none();
    let superseded = records
        .fence_paths
        .into_iter()
        .filter(|recorded| *recorded != path)
        .collect();
    Ok(AdmittedFence { superseded, first })
}

/// Records the sandbox's tombstone (by `fence`, now) unless it has one. Call with
/// the lock held, after [`admit_fence`]; the caller fsyncs the sandbox directory
/// before it stops anything.
pub(crate) fn write_tombstone(
    _lock: &SandboxLock,
    sandbox_dir: &Path,
    fence: &Fence,
) -> Result<(), DriverError> {
    let uncertain = |error| io_uncertain("writing the tombstone of", sandbox_dir, error);
    if read_tombstone(sandbox_dir).map_err(uncertain)?.is_some() {
        return Ok(()); // the first remove's tombstone is kept
    }
    create_tombstone(sandbox_dir, fence)
}

fn create_tombstone(sandbox_dir: &Path, fence: &Fence) -> Result<(), DriverError> {
    let name = tombstone_name(fence, unix_ms(SystemTime::now()));
    create_name(&sandbox_dir.join(name))
        .map_err(|error| io_uncertain("writing the tombstone of", sandbox_dir, error))
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// The identity of the driver directory, created (race-free) if it has none.
/// The directory is created if need be, and holds one subdirectory per
/// sandbox: see [`spread_subdirectories`](super::records::spread_subdirectories).
pub(crate) fn load_or_create_identity(driver_dir: &Path) -> io::Result<String> {
    fs::create_dir_all(driver_dir)?;
    super::records::spread_subdirectories(driver_dir);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_round_trip_any_cluster_id() {
        for cluster_id in ["0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10", "a.b/c", "ünï", ""] {
            let fence = Fence {
                cluster_id: cluster_id.to_owned(),
                term: u64::MAX,
                sandbox_id: "sandbox-1".to_owned(),
                generation: 7,
                operation_index: 12,
            };
            let name = fence_name(&fence);
            assert!(name.len() <= 255 && !name.contains('/'), "{name}");
            assert_eq!(parse_fence_name(&name, "sandbox-1").expect("parses"), fence);
            let tombstone = tombstone_name(&fence, 1_700_000_000_000);
            assert_eq!(
                parse_tombstone_name(&tombstone, "sandbox-1").expect("parses"),
                TombstoneRecord {
                    fence,
                    removed_at_unix_ms: 1_700_000_000_000
                }
            );
        }
        let longest = Fence {
            cluster_id: "x".repeat(CLUSTER_ID_BYTES_MAX),
            term: u64::MAX,
            sandbox_id: "s".to_owned(),
            generation: u64::MAX,
            operation_index: u64::MAX,
        };
        assert!(tombstone_name(&longest, u64::MAX).len() <= 255);
        for malformed in [
            "fence.1.2",
            "fence.1.2.3.4.5",
            "fence.x.2.3.",
            "fence.1.2.3.zz",
        ] {
            assert!(parse_fence_name(malformed, "s").is_err(), "{malformed}");
        }
        assert!(parse_tombstone_name("tombstone.1.2.3", "s").is_err());
    }
}
