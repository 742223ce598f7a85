//! The on-disk records of one execution (spec, shim claim, command, exit,
//! rejection), how they are written (once, atomically: temporary file, fsync,
//! rename or link, fsync of the directory) and how they are read back into an
//! `Observation`.

#![allow(unused_imports)]
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    LaunchSpec,
};

use super::*;
use super::{driver::*, procfs::*, shim::*};

// ---------------------------------------------------------------------------------
// Records

/// The shim's claim on an execution, and the execution's handle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShimRecord {
    pub(crate) generation: u64,
    pub(crate) pid: u32,
    pub(crate) start_time: u64,
    pub(crate) boot_id: String,
    /// The identity of the driver directory the shim claimed the execution in. A
    /// record without it is not one this driver can vouch for (it fails to parse,
    /// and the execution reads as uncertain).
    pub(crate) driver_id: String,
}

impl ShimRecord {
    pub(crate) fn handle(&self) -> ExecutionHandle {
        ExecutionHandle {
            generation: self.generation,
            identity: ExecutionIdentity::Process {
                pid: self.pid,
                start_time: self.start_time,
                boot_id: self.boot_id.clone(),
                driver_id: self.driver_id.clone(),
            },
        }
    }

    pub(crate) fn identity(&self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.pid,
            start_time: self.start_time,
            boot_id: self.boot_id.clone(),
        }
    }
}

/// A process as the kernel names it for as long as it exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessIdentity {
    pub(crate) pid: u32,
    pub(crate) start_time: u64,
    pub(crate) boot_id: String,
}

/// How the command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExitRecord {
    pub(crate) code: i32,
    pub(crate) signal: Option<i32>,
}

/// The command could not be started: a definite failure with no process left behind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RejectedRecord {
    pub(crate) code: i32,
    pub(crate) message: String,
}

/// Whether a recorded process still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Presence {
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
pub(crate) struct Observation {
    pub(crate) exists: bool,
    pub(crate) shim: Option<ShimRecord>,
    pub(crate) shim_presence: Presence,
    pub(crate) command: Option<ProcessIdentity>,
    pub(crate) command_presence: Presence,
    pub(crate) exit: Option<ExitRecord>,
    pub(crate) rejected: Option<RejectedRecord>,
}

pub(crate) fn observe(dir: &Path) -> io::Result<Observation> {
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
    // Written without an fsync (it names a process of its boot, see the shim): a
    // crash of the machine may leave it partial. Of an earlier boot, whose
    // processes are all gone, a partial one says no more than an absent one.
    let command: Option<ProcessIdentity> = match read_record(&dir.join(COMMAND_FILE)) {
        Err(error)
            if error.kind() == io::ErrorKind::InvalidData && of_an_earlier_boot(shim.as_ref())? =>
        {
            None
        }
        read => read?,
    };
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

pub(crate) async fn observe_blocking(dir: PathBuf) -> Result<Observation, DriverError> {
    blocking(move || observe(&dir).map_err(|error| io_uncertain("reading", &dir, error))).await
}

/// Whether `shim` claimed its execution in an earlier boot than this one.
fn of_an_earlier_boot(shim: Option<&ShimRecord>) -> io::Result<bool> {
    Ok(match shim {
        Some(shim) => shim.boot_id != boot_id()?,
        None => false,
    })
}

impl Observation {
    pub(crate) fn status(&self) -> io::Result<ExecutionStatus> {
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

    /// The identity named by the shim's claim, when it is not `driver_id`: the
    /// execution was recorded by another driver directory, and nothing this driver
    /// sees in `/proc` says anything about it.
    pub(crate) fn recorded_by_other(&self, driver_id: &str) -> Option<&str> {
        self.shim
            .as_ref()
            .filter(|shim| shim.driver_id != driver_id)
            .map(|shim| shim.driver_id.as_str())
    }

    /// Whether processes of the execution survive a shim that died without recording
    /// the exit (killed by an operator or the OOM killer).
    pub(crate) fn has_orphans(&self) -> io::Result<bool> {
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
    pub(crate) fn strays(&self) -> io::Result<Vec<i32>> {
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
    pub(crate) fn is_gone(&self) -> bool {
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
    pub(crate) fn signal(&self, signal: libc::c_int) -> io::Result<()> {
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
// Files

/// Reads a JSON record; `None` if it does not exist.
pub(crate) fn read_record<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
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

pub(crate) fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(OsString::new, OsStr::to_os_string);
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", uuid::Uuid::new_v4()));
    path.with_file_name(temporary)
}

/// fsync calls made by this process through [`write_file_synced`], [`sync_dir`]
/// and [`sync_together`] (each one a flush of the disk's cache on the path of an
/// effect).
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// Rounds of fsyncs: a lone fsync is one round, [`sync_together`] one round however
/// many files it syncs. What an effect waits for is its rounds, one after the other.
static FSYNC_ROUNDS: AtomicU64 = AtomicU64::new(0);

/// Threads [`sync_together`] started for fsyncs (only without a runtime).
static FSYNC_THREADS_STARTED: AtomicU64 = AtomicU64::new(0);

/// How many threads the process driver code of this process has started (and
/// ended) for fsyncs so far: none under a tokio runtime. For the test that
/// keeps thread starts off the launch path; not for operators.
#[doc(hidden)]
pub fn fsync_threads_started() -> u64 {
    FSYNC_THREADS_STARTED.load(Ordering::Relaxed)
}

/// How many fsyncs the process driver code of this process has made so far. For
/// the tests that keep its fsync budget per effect; not for operators.
#[doc(hidden)]
pub fn fsyncs_issued() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// How many rounds of fsyncs (see [`sync_together`]) the process driver code of
/// this process has waited for so far. For the fsync budget tests; not for
/// operators.
#[doc(hidden)]
pub fn fsync_rounds_issued() -> u64 {
    FSYNC_ROUNDS.load(Ordering::Relaxed)
}

/// Listings of sandbox directories (see [`read_sandbox_dir`]).
static SANDBOX_DIR_LISTINGS: AtomicU64 = AtomicU64::new(0);

/// How many times the process driver code of this process has listed a sandbox
/// directory so far. For the tests that keep the work of `list` and of tombstone
/// collection per sandbox bounded; not for operators.
#[doc(hidden)]
pub fn sandbox_dir_listings() -> u64 {
    SANDBOX_DIR_LISTINGS.load(Ordering::Relaxed)
}

/// `fs::read_dir` of a sandbox directory, counted (see [`sandbox_dir_listings`]).
pub(crate) fn read_sandbox_dir(sandbox_dir: &Path) -> io::Result<fs::ReadDir> {
    SANDBOX_DIR_LISTINGS.fetch_add(1, Ordering::Relaxed);
    fs::read_dir(sandbox_dir)
}

fn sync(file: &File) -> io::Result<()> {
    FSYNC_ROUNDS.fetch_add(1, Ordering::Relaxed);
    sync_one(file)
}

fn sync_one(file: &File) -> io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_all()
}

/// fsyncs every one of `files` at once, each on a thread of its own, and returns
/// when all are durable (the first error if any failed).
///
/// Why: every fsync here is a journal commit or at least a flush of the disk's
/// cache (2-8 ms on the virtual disks this runs on). When a step needs several
/// files durable before the same next step and in no order among themselves
/// (a new sandbox directory's entry, a spec and its directory), waiting for them
/// one after the other pays each flush in turn; fsyncs issued together join the
/// same journal commit and their cache flushes are merged, so the step waits
/// about one. Nothing acts on any of them before all are done, so the guarantee
/// is the same as fsyncing them in turn.
///
/// The calling thread syncs the first file; the others go to the tokio
/// runtime's blocking pool when the caller runs under one (the gateway's launch
/// path always does), whose threads outlive the call: starting a thread for
/// each of them and ending it again cost every launch two thread lifecycles
/// (`clone3`, a stack mapped and unmapped, a dozen more system calls each, and
/// for the unmapping an interrupt to every other core running the gateway), ~30
/// us of CPU each on this machine, on the path of every create. Without a
/// runtime (a test, a tool) each other file gets a thread of its own, as
/// before. A pool task syncs a duplicate of its file's descriptor, so it owns
/// what it syncs whenever it runs.
pub(crate) fn sync_together(files: &[&File]) -> io::Result<()> {
    let Some((first, others)) = files.split_first() else {
        return Ok(());
    };
    FSYNC_ROUNDS.fetch_add(1, Ordering::Relaxed);
    if others.is_empty() {
        return sync_one(first);
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => sync_others_on_pool(&runtime, first, others),
        Err(_) => sync_others_on_new_threads(first, others),
    }
}

/// [`sync_together`] under a runtime: `others` on its blocking pool.
///
/// The caller never waits for a task that has not started: once its own fsync
/// is done, it takes each task no pool thread has begun (a claim both sides
/// race for) and syncs that file itself. So a pool whose threads are all busy
/// (all waiting in here, say) delays these fsyncs, never deadlocks them.
fn sync_others_on_pool(
    runtime: &tokio::runtime::Handle,
    first: &File,
    others: &[&File],
) -> io::Result<()> {
    let pending: Vec<_> = others
        .iter()
        .map(|file| {
            let task = file.try_clone().ok().map(|copy| {
                let claimed = Arc::new(AtomicBool::new(false));
                let (reply, answer) = std::sync::mpsc::sync_channel(1);
                let claim = Arc::clone(&claimed);
                drop(runtime.spawn_blocking(move || {
                    if claim.swap(true, Ordering::AcqRel) {
                        return; // the caller took it
                    }
                    // The caller waits for this answer (it never stops
                    // waiting before it).
                    let _ = reply.send(sync_one(&copy));
                }));
                (claimed, answer)
            });
            (task, *file)
        })
        .collect();
    let mut result = sync_one(first);
    for (task, file) in pending {
        let synced = match task {
            Some((claimed, answer)) if claimed.swap(true, Ordering::AcqRel) => answer
                .recv()
                // Started and gone without answering (it panicked).
                .unwrap_or_else(|_| sync_one(file)),
            // Not begun (or never to run, the runtime shutting down), or no
            // duplicate descriptor: here.
            _ => sync_one(file),
        };
        if result.is_ok() {
            result = synced;
        }
    }
    result
}

/// [`sync_together`] without a runtime: a thread of its own for each of
/// `others`.
fn sync_others_on_new_threads(first: &File, others: &[&File]) -> io::Result<()> {
    std::thread::scope(|scope| {
        let threads: Vec<_> = others
            .iter()
            .map(|file| {
                FSYNC_THREADS_STARTED.fetch_add(1, Ordering::Relaxed);
                std::thread::Builder::new()
                    .name("palisade-fsync".to_owned())
                    .spawn_scoped(scope, move || sync_one(file))
            })
            .collect();
        // This thread syncs the first one meanwhile (also if a spawn failed).
        let mut result = sync_one(first);
        for (thread, file) in threads.into_iter().zip(others) {
            let synced = match thread {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("an fsync thread panicked"))),
                // No thread (resource limits): sync it here instead.
                Err(_) => sync_one(file),
            };
            if result.is_ok() {
                result = synced;
            }
        }
        result
    })
}

pub(crate) fn write_file_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = write_file(path, bytes)?;
    sync(&file)
}

/// Creates and writes a file (it must not exist) without fsyncing it: for files the
/// caller fsyncs together with others ([`sync_together`]).
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> io::Result<File> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    Ok(file)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    sync(&File::open(dir)?)
}

/// Asks the filesystem to spread `dir`'s subdirectories over its block groups
/// (ext2/3/4's top-directory flag, `chattr +T`), for a directory that holds one
/// subdirectory per sandbox. A hint: filesystems without the flag refuse it,
/// and nothing depends on it, so a refusal is logged (debug) and ignored.
///
/// Why: ext4 places a new file in its parent's block group and, on a file
/// system without a journal, allocates its inode by scanning that group's free
/// inodes past every one freed in the last 30 s or so (`recently_deleted`). Each
/// launch creates and each remove deletes about ten files, all of them, without
/// the flag, in the driver directory's group: with 16 clients cycling
/// sandboxes, those scans took ~20 % of a 2-core machine's CPU (`perf record
/// -a -g`, `find_inode_bit`, `recently_deleted`). With it, each sandbox's
/// directory, and so its files, lands in a group of its own (Orlov's
/// allocator), and the scans all but vanish (~3 %).
pub(crate) fn spread_subdirectories(dir: &Path) {
    let flagged = File::open(dir).and_then(|directory| {
        let flags = rustix::fs::ioctl_getflags(&directory)?;
        if !flags.contains(rustix::fs::IFlags::TOPDIR) {
            rustix::fs::ioctl_setflags(&directory, flags | rustix::fs::IFlags::TOPDIR)?;
        }
        Ok(())
    });
    if let Err(error) = flagged {
        tracing::debug!(
            directory = %dir.display(),
            %error,
            "the filesystem does not take the top-directory hint; subdirectories stay where it puts them"
        );
    }
}

/// How far a record write goes toward durability before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// The content and the name: fsync of the file, then of its directory.
    Durable,
    /// The content only: the name becomes durable with the next fsync of the
    /// directory. A crash may lose the name, never leave it naming a partial
    /// record. For records whose directory the caller fsyncs later anyway, or whose
    /// loss in a crash is resolved by observation (say which at the call).
    ContentOnly,
    /// Neither: the record is visible to every process at once (the rename is
    /// atomic) and reaches the disk by writeback only. A crash of the machine may
    /// lose it or leave it partial, so this is for a record of what a reboot ends
    /// anyway (a process of this boot), which its reader takes, when partial and
    /// from an earlier boot, for an absent one (see `command.json` in [`observe`]).
    ThisBootOnly,
}

impl Durability {
    /// Writes a record's temporary file, fsynced unless `ThisBootOnly`: the
    /// content step every kind of write starts with.
    fn write_temporary(self, temporary: &Path, bytes: &[u8]) -> io::Result<()> {
        match self {
            Durability::ThisBootOnly => write_file(temporary, bytes).map(drop),
            Durability::Durable | Durability::ContentOnly => write_file_synced(temporary, bytes),
        }
    }

    /// Makes the record's name durable, if this kind of write does (`Durable`).
    fn sync_name(self, path: &Path) -> io::Result<()> {
        match self {
            Durability::Durable => sync_dir(parent_of(path)),
            Durability::ContentOnly | Durability::ThisBootOnly => Ok(()),
        }
    }
}

pub(crate) fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or_else(|| Path::new("."))
}

/// Writes a record atomically, replacing any previous one, durably.
pub(crate) fn write_record<T: Serialize>(path: &Path, record: &T) -> io::Result<()> {
    write_record_with(path, record, Durability::Durable)
}

/// Writes a record atomically, replacing any previous one.
pub(crate) fn write_record_with<T: Serialize>(
    path: &Path,
    record: &T,
    durability: Durability,
) -> io::Result<()> {
    let temporary = temporary_path(path);
    let written = durability
        .write_temporary(&temporary, &serde_json::to_vec(record)?)
        .and_then(|()| fs::rename(&temporary, path));
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written?;
    durability.sync_name(path)
}

/// Writes a record atomically and durably unless one exists. Returns whether this
/// call created it.
pub(crate) fn create_record<T: Serialize>(path: &Path, record: &T) -> io::Result<bool> {
    create_record_with(path, record, Durability::Durable)
}

/// Writes a record atomically unless one exists. Returns whether this call created it.
pub(crate) fn create_record_with<T: Serialize>(
    path: &Path,
    record: &T,
    durability: Durability,
) -> io::Result<bool> {
    let temporary = temporary_path(path);
    durability.write_temporary(&temporary, &serde_json::to_vec(record)?)?;
    // link(2), unlike rename(2), fails if the name exists: exactly one creator wins.
    let linked = fs::hard_link(&temporary, path);
    let _ = fs::remove_file(&temporary);
    match linked {
        Ok(()) => durability.sync_name(path).map(|()| true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files to sync in a temporary directory that lives as long as they do.
    fn files(count: usize) -> (tempfile::TempDir, Vec<File>) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let files = (0..count)
            .map(|index| write_file(&dir.path().join(format!("file-{index}")), b"x").expect("file"))
            .collect();
        (dir, files)
    }

    /// Under a runtime whose blocking pool has one thread, taken by the
    /// caller itself: the pool can start none of the other fsyncs, so the
    /// caller must take them, not wait for them forever.
    #[test]
    fn fsyncs_issued_together_complete_when_the_blocking_pool_is_full() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .build()
            .expect("runtime");
        let (_dir, files) = files(3);
        let (done, finished) = std::sync::mpsc::channel();
        let handle = runtime.handle().clone();
        std::thread::spawn(move || {
            let synced = handle.block_on(handle.spawn_blocking(move || {
                let before = fsyncs_issued();
                let result = sync_together(&files.iter().collect::<Vec<_>>());
                (result, fsyncs_issued() - before)
            }));
            let _ = done.send(synced);
        });
        let (result, fsyncs) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("sync_together waited for fsyncs no thread could start")
            .expect("the blocking task");
        result.expect("synced");
        assert!(fsyncs >= 3, "{fsyncs} fsyncs counted for 3 files");
    }

    /// `command.json` is written without an fsync (it names a process of its
    /// boot), so a crash of the machine may leave it partial; the reboot's
    /// observation must take it for an absent record, or the execution would read
    /// as uncertain forever. A partial record of this boot is no crash's doing and
    /// stays an error.
    #[test]
    fn a_partial_command_record_of_an_earlier_boot_reads_as_absent() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let execution = dir.path();
        let claim = |boot_id: &str| ShimRecord {
            generation: 1,
            pid: 1,
            start_time: 1,
            boot_id: boot_id.to_owned(),
            driver_id: "driver".to_owned(),
        };
        write_record(&execution.join(SHIM_FILE), &claim("an-earlier-boot")).expect("claim");
        for partial in [&b""[..], b"\0\0\0\0", b"{\"pid\": 12"] {
            fs::write(execution.join(COMMAND_FILE), partial).expect("partial record");
            let observation = observe(execution).expect("observed despite the partial record");
            assert_eq!(observation.command, None);
            assert_eq!(
                observation.status().expect("status"),
                ExecutionStatus::Absent
            );
        }

        let this_boot = boot_id().expect("boot id");
        write_record(&execution.join(SHIM_FILE), &claim(this_boot)).expect("claim");
        let error = observe(execution).expect_err("a partial record of this boot");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
