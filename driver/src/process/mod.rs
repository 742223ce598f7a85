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
//! - the gateway's launch server (`palisade shim launch-server`, one long-lived
//!   single-threaded child of the gateway, so a launch costs a `fork`, not an
//!   `exec` of this binary: see the `launch_server` module) forks the shim (a copy
//!   of itself, so `ps` shows it with the same command line; its `comm` is
//!   `palisade-shim`) into a new session of its own, so no gateway signal, exit
//!   or crash reaches it; the server ignores `SIGCHLD` (the kernel reaps the
//!   shims it forked), and when it ends with its gateway the shims are adopted by
//!   init and run on (`palisade shim launch DIR`, by hand, forks the shim from a
//!   launcher that exits once the shim has reported, so init adopts it at once);
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
//! <driver_dir>/
//!   .driver-id           the directory's identity {driver_id}: a random id, written once
//!   <sandbox_id>/
//!     sandbox.lock       flock'ed (exclusive) around every fenced step of the sandbox
//!     fence.<term>.<operation>.<generation>.<cluster id, hex>
//!                        the highest fence admitted for the sandbox: an empty file,
//!                        its name is the record (lower ones are deleted once it is
//!                        durable; a crash may leave them, the highest counts)
//!     tombstone.<removed at, unix ms>.<term>.<operation>.<generation>.<cluster id, hex>
//!                        the sandbox was removed, by that fence, then (empty file)
//!     <generation>/
//!       spec.json        the LaunchSpec; present before the directory becomes visible
//!       shim.json        the shim's claim {generation, pid, start_time, boot_id, driver_id}
//!       command.json     the command's process group leader {pid, start_time, boot_id},
//!                        written before the command runs
//!       rejected.json    the command could not be started {code, message}
//!       exit.json        the command ended and its tree is gone {code, signal}
//!       stop-requested   a stop was asked for; a shim that has not started the command
//!                        yet must not start it
//!       stdout.log, stderr.log   the command's output, each rotated at
//!                        LOG_FILE_BYTES_MAX into stdout.log.1, stderr.log.1
//!       shim.log         the shim's own diagnostics
//!     execs/<pid>.json   commands exec'd in the sandbox's context {pid, start_time,
//!                        boot_id} (see `exec`), killed by stop and remove
//!   .workdirs/<sandbox_id>/   the sandbox's persistent working directory: every
//!                        execution's command (and every exec) runs in it; made by
//!                        the first launch, kept across stop/start, deleted by
//!                        remove once every execution and exec is gone
//! ```
//!
//! The driver directory and `.workdirs` (made when the driver starts) carry
//! ext4's top-directory flag (`chattr +T`), so each sandbox's directory, and
//! the files made in it, go to a block group of their own rather than all to
//! the parent's (`records::spread_subdirectories` says why that matters);
//! other file systems refuse the flag, and nothing depends on it.
//!
//! Records are written once, atomically (temporary file, fsync, rename or link, fsync
//! of the directory; fence and tombstone records by creating their name), so a
//! reader sees all of a record or none of it. Names that are not a sandbox id
//! (`.driver-id`, `.staging-*`) or not a generation (`fence.…`, ...) are never
//! mistaken for executions.
//!
//! # What is fsynced, and what is not
//!
//! Each fsync is a flush of the disk's cache on the path of an effect, so each one
//! is there for a reason, and the rest are left out on purpose:
//!
//! - `launch` (deciding step): the new sandbox directory in the driver directory
//!   (for the sandbox's first fence), `spec.json` and the staging directory, all
//!   three issued at once and waited for as one (`records::sync_together`: they
//!   join one journal commit), then the sandbox directory after the rename (which
//!   also makes the fence record durable): two waits, not four. The shim: `shim.json`'s
//!   content (its name becomes durable with the next fsync of the execution
//!   directory, which every path that acts on the claim takes: the one before the
//!   command runs, `exit.json`'s or `rejected.json`'s when it does not; a claim
//!   lost in a crash before that was never acted on), then the execution
//!   directory, before the barrier opens: two waits. `command.json` is not
//!   fsynced: it names a process of this boot, which a crash of the machine ends,
//!   and every process sees it at once (an atomic rename); a partial one a crash
//!   left behind is of an earlier boot (its claim says which) and reads as absent,
//!   as a lost one does. It used to be fsynced, then renamed, then its directory
//!   fsynced (which made the claim durable too): a third wait on every launch and
//!   about a fifth of the shim's CPU (`perf record -a -g`: fsyncs, with the virtual
//!   disk's queue kicks, were three fifths of it), for nothing a reboot keeps.
//! - `stop`: the sandbox directory, for the fence, before `stop-requested`.
//!   `stop-requested` is not fsynced (only shims of this boot must see it).
//!   `exit.json` is fsynced but not its directory entry: a crash may lose the
//!   name (never give a partial record), and then the execution of a boot that
//!   is over reads as `Absent` (resolved by observation as lost), not `Exited`.
//! - `remove`: the sandbox directory, once, for the fence and the tombstone,
//!   before anything is stopped. A `stop` or `remove` that records a sandbox's
//!   first fence fsyncs the driver directory (the sandbox directory's entry) at
//!   the same time. Deleting the executions' files afterwards is not
//!   fsynced: what a crash brings back is ignored beside the tombstone.
//!
//! # Fencing (see the crate's "Fencing reaches the effect")
//!
//! The highest fence and the tombstone of a sandbox live beside its executions, in
//! the directory every replica of the host shares, and every fenced step takes the
//! sandbox's `flock` ([`fencing`] says why each choice):
//!
//! - `launch`: lock; check and record the fence; claim the generation directory
//!   (rename; one fsync makes both durable); check the tombstone; unlock. A launch that finds a tombstone deletes
//!   the directory it just claimed and answers `Fenced`; no shim was started for it.
//! - `stop`: lock; check and record the fence (fsync); create `stop-requested`;
//!   unlock; then
//!   wait and signal. Nothing removes `stop-requested`, so the stop is decided once
//!   the marker exists, and no later fence can make the execution run again.
//! - `remove`: lock; check and record the fence; write the tombstone; fsync (both
//!   durable); unlock; stop every execution; lock; delete the generation directories; unlock
//!   (again from "stop every execution" if a shim started before the tombstone claimed
//!   its execution meanwhile). The sandbox directory with its fence and tombstone
//!   records stays.
//!
//! Tombstones are collected by [`ProcessDriver::collect_tombstones`] once they are
//! older than [`ProcessDriverTimeouts::tombstone_retention`] (7 days by default, far
//! longer than any leader stays paused or any retry is repeated); after that a launch
//! of the sandbox would no longer be refused, so keep it longer than the longest
//! time an operation may remain pending. Collection removes the whole sandbox
//! directory, fence included. The reconciler's rounds (every 10 s) collect through
//! [`ProcessDriver::collect_tombstones_due`], which scans at most hourly (an eighth
//! of a shorter retention): a scan lists every sandbox directory, tombstoned ones
//! included.
//!
//! # What a reconciler round reads
//!
//! `list` reads each sandbox directory **once** (its tombstone and its generations
//! come from the same listing) and observes each generation found; a tombstoned
//! sandbox costs that one listing. A round therefore costs one listing per sandbox
//! directory plus the records and `/proc` entries of the generations still on disk,
//! not three listings per sandbox directory (tombstone, generations, collection).
//! `driver/tests/process_listing_budget.rs` keeps that budget.
//!
//! The driver directory's identity (`.driver-id`) is created by the first replica
//! that opens it and recorded in every `shim.json` and handle. A claim that names
//! another identity (a directory restored from another host, an identity file
//! recreated) is out of this driver's sight: `inspect`, `stop` and `remove` answer
//! `Uncertain` for it, never `Absent`, and `list` leaves it out.
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
//! - *Remove racing a launch*: under the lock, a launch claims its generation and then
//!   checks the tombstone, and `remove` writes the tombstone and (after the lock) lists
//!   the generations: a generation claimed first is listed and stopped; a launch that
//!   comes second sees the tombstone. The shim, which starts later and outside the
//!   lock, claims `shim.json` and then checks both `stop-requested` and the tombstone,
//!   while `remove` marks every listed generation `stop-requested` and then reads its
//!   claim: again one side always sees the other.
//! - *A shim that dies while starting the command*: the command waits at a barrier
//!   until the claim is durable and `command.json` written ([`shim`]); a shim that
//!   dies before releasing it
//!   leaves a child that reads end of file and exits without running anything.
//! - *A launch that never hears back* (the shim died, or the server with the launch
//!   queued, before the status byte; or no answer in time): the shim may or may not
//!   have been started, so the execution directory decides: a shim's claim is
//!   observed as any report, and without one the launch is `Uncertain`, never
//!   `Rejected`.
//! - *Signalling*: the command's process group id is the command leader's pid. The
//!   leader is the shim's child, and the shim observes its exit without reaping it
//!   (`waitid(WNOWAIT)`) until it has killed the rest of the group, so while a process
//!   with the recorded pid and start time exists (even as a zombie), the group id is
//!   certainly ours.
//!
//! # Limits
//!
//! Linux only (`/proc`, `prctl`, `waitid`). The driver directory must be on a local
//! filesystem: the sandbox locks are `flock`s, and the identity stands for one host.
//! One host: executions are found through the local directory, so a cluster spread
//! over hosts needs a driver with shared authority (Docker, Kubernetes). Processes that escape both the process group and the shim's
//! subtree (e.g. by asking another daemon to start them) are not tracked. When
//! gateways run under systemd, the unit needs `KillMode=process` (or a separate scope
//! for shims), or stopping the gateway kills its cgroup, shims included. When a
//! gateway is PID 1 of a container, run it under an init that reaps (`docker --init`,
//! tini), or exited shims remain as zombies (harmless to this driver, which treats
//! zombies as dead, but they occupy the process table).
//!
//! # Layout
//!
//! - [`driver`]: the gateway side: [`ProcessDriver`], which creates execution
//!   directories, starts shims through the launch server, observes, signals and
//!   removes executions.
//! - [`records`]: the on-disk records of an execution and how they are written
//!   (atomically, once) and read back into an observation.
//! - [`fencing`]: the per-sandbox lock, fence record and tombstone, and the driver
//!   directory's identity.
//! - [`logs`]: the command's output logs, rotated at a size cap, and reading
//!   them back by cursor (`ComputeDriver::read_log`).
//! - `exec`: the persistent working directory and `ComputeDriver::exec`.
//! - `procfs`: what `/proc` says about a process (identity, liveness, groups).
//! - [`shim`]: the code that runs inside `palisade shim ...`, never inside a
//!   gateway: a different process with different rules (no runtime, single-threaded
//!   until it starts the command, runs before `main` parses arguments).
//! - `raw_syscall`: system calls without libc, for the command's first process
//!   while it shares the shim's memory.

use std::time::Duration;

pub mod driver;
mod exec;
pub mod fencing;
mod launch_server;
pub mod logs;
mod procfs;
mod raw_syscall;
pub mod records;
pub mod run_as;
pub mod shim;

pub use driver::{ProcessDriver, ProcessDriverTimeouts};
pub use fencing::TombstoneRecord;
pub use logs::LOG_FILE_BYTES_MAX;
pub use run_as::{RunAs, SandboxUser};
pub use shim::{
    ShimArgs, TEST_DIE_BEFORE_RECORD_VARIABLE, TEST_LOSE_LAUNCH_STATUS_VARIABLE, run_shim,
    run_shim_if_requested,
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
pub(crate) const SHIM_SWEEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between the shim's kill-and-reap rounds.
pub(crate) const SHIM_SWEEP_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long the shim waits, after sweeping the command's processes, for the rest of
/// their output to reach the logs before it records the exit anyway.
pub(crate) const SHIM_OUTPUT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// The environment variable through which a launcher of an earlier release,
/// which exec'd `palisade shim run DIR`, handed the shim the write end of its
/// "reported" pipe; a launcher of this release forks the shim and hands it
/// over directly (see `shim::launch_shim`).
pub(crate) const SHIM_REPORTED_FD_VARIABLE: &str = "PALISADE_SHIM_REPORTED_FD";
/// Longest `palisade shim launch DIR` (a launcher started by hand) waits for its
/// shim to report before it exits anyway. A launch through the launch server
/// waits for the shim's status byte instead, bounded by the driver's shim start
/// timeout.
pub(crate) const LAUNCHER_REPORT_WAIT_MAX: Duration = Duration::from_secs(2);
/// How long a driver call waits for a sandbox's lock held by another call.
pub(crate) const SANDBOX_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between attempts to take a sandbox's lock.
pub(crate) const SANDBOX_LOCK_POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Default time a tombstone is kept: a week, far longer than a leader stays paused or
/// a retry is repeated.
pub const TOMBSTONE_RETENTION_DEFAULT: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Longest time between two tombstone collections by the reconciler
/// ([`ProcessDriver::collect_tombstones_due`]); with a shorter retention, an eighth
/// of it.
pub const TOMBSTONE_COLLECTION_INTERVAL_MAX: Duration = Duration::from_secs(60 * 60);
/// Most rounds of "stop every execution, delete the files" one `remove` makes before
/// it answers `Uncertain` (a round is repeated only when a shim claimed an execution
/// while the previous one ran).
pub(crate) const REMOVE_ROUNDS_MAX: usize = 5;
/// Longest cluster id a fence may carry: fence and tombstone records are file
/// names holding it hex-encoded, and a name has at most 255 bytes. Cluster ids are
/// UUIDs (36 bytes).
pub const CLUSTER_ID_BYTES_MAX: usize = 64;
/// Most sandbox directories one tombstone collection walks.
pub const SANDBOXES_COLLECTED_MAX: usize = 100_000;

/// Exit code recorded for a command that was not found (shell convention).
pub(crate) const EXIT_CODE_NOT_FOUND: i32 = 127;
/// Exit code recorded for a command that exists but could not be started.
pub(crate) const EXIT_CODE_NOT_EXECUTABLE: i32 = 126;
/// Exit codes of signal deaths are this plus the signal number (shell convention).
pub(crate) const EXIT_CODE_SIGNAL_BASE: i32 = 128;

/// The subcommand of the `palisade` binary that runs shim code.
pub const SHIM_SUBCOMMAND: &str = "shim";

pub(crate) const SPEC_FILE: &str = "spec.json";
pub(crate) const SHIM_FILE: &str = "shim.json";
pub(crate) const COMMAND_FILE: &str = "command.json";
pub(crate) const REJECTED_FILE: &str = "rejected.json";
pub(crate) const EXIT_FILE: &str = "exit.json";
pub(crate) const STOP_REQUESTED_FILE: &str = "stop-requested";
pub(crate) const STDOUT_FILE: &str = "stdout.log";
pub(crate) const STDERR_FILE: &str = "stderr.log";
pub(crate) const SHIM_LOG_FILE: &str = "shim.log";
/// Under the driver directory: one persistent working directory per sandbox
/// (`exec`). Starts with a dot, so it is never a sandbox id.
pub(crate) const WORKDIRS_DIRECTORY: &str = ".workdirs";
/// Present when the command runs as another user ([`SandboxUser`]).
pub(crate) const RUN_AS_FILE: &str = "run-as.json";
pub(crate) const SANDBOX_LOCK_FILE: &str = "sandbox.lock";
/// Prefix of fence records (empty files named by the fence; see `fencing`).
pub(crate) const FENCE_PREFIX: &str = "fence.";
/// Prefix of tombstone records (empty files named by the tombstone).
pub(crate) const TOMBSTONE_PREFIX: &str = "tombstone.";
/// The fence record of the first fencing release (JSON), still honoured.
pub(crate) const LEGACY_FENCE_FILE: &str = "fence.json";
/// The tombstone record of the first fencing release (JSON), still honoured.
pub(crate) const LEGACY_TOMBSTONE_FILE: &str = "tombstone.json";
/// Starts with a dot, so it is never a sandbox id.
pub(crate) const DRIVER_ID_FILE: &str = ".driver-id";
/// Prefix of execution directories under construction; never a valid sandbox id
/// (ids may not start with a dot), so `list` cannot mistake them for executions.
pub(crate) const STAGING_PREFIX: &str = ".staging-";
/// How much of `shim.log` an error message quotes.
pub(crate) const SHIM_LOG_QUOTED_BYTES_MAX: u64 = 2048;

#[cfg(test)]
mod tests {
    use super::*;
    use super::{driver::*, procfs::*, records::*, shim::*};
    use crate::LaunchSpec;
    use std::ffi::OsString;
    use std::fs;

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
            ..Default::default()
        };
        assert!(validate_spec(&spec(vec![])).is_ok());
        assert!(validate_spec(&spec(vec![String::new()])).is_err());
        assert!(validate_spec(&spec(vec!["a\0b".to_owned()])).is_err());
        assert!(validate_spec(&spec(vec!["x".to_owned(); COMMAND_ARGUMENTS_MAX + 1])).is_err());
        let mut with_env = spec(vec!["true".to_owned()]);
        with_env.env.insert("A=B".to_owned(), "c".to_owned());
        assert!(validate_spec(&with_env).is_err());
    }

    /// Waits for a child of this process and returns its wait status.
    fn wait_status(pid: i32) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child, writing into a local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    fn sh(script: &str, work_dir: &std::path::Path) -> PreparedExec {
        let argv = ["/bin/sh", "-c", script].map(OsString::from);
        let environment = std::collections::BTreeMap::from([("PATH", DEFAULT_PATH)]);
        PreparedExec::new(
            std::path::Path::new("/bin/sh"),
            &argv,
            &environment,
            work_dir,
            None,
        )
        .expect("prepared")
    }

    #[test]
    fn a_command_held_at_the_barrier_never_runs_if_the_barrier_closes() {
        let work = tempfile::tempdir().expect("temporary directory");
        let mut child =
            spawn_behind_barrier(sh("touch ran", work.path())).expect("spawned behind barrier");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!work.path().join("ran").exists(), "ran before the release");
        // What a shim's death does: the barrier's write end closes unwritten.
        drop(child.barrier.take());
        let status = wait_status(child.pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), EXIT_CODE_BARRIER_CLOSED);
        assert!(!work.path().join("ran").exists());
    }

    #[test]
    fn the_idle_command_holds_no_descriptor_of_the_shim_and_ends_on_sigterm() {
        let work = tempfile::tempdir().expect("temporary directory");
        let prepared = PreparedExec::idle(work.path(), None).expect("prepared");
        let mut child = spawn_behind_barrier(prepared).expect("spawned behind barrier");
        assert!(
            child.stdout.is_none() && child.stderr.is_none(),
            "nothing to pump"
        );
        // `release` returns at the status pipe's end of file: a child that
        // kept the shim's descriptors would hold it forever.
        let (released, release) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let failure = child.release();
            let _ = released.send((failure, child));
        });
        let (failure, child) = release
            .recv_timeout(Duration::from_secs(10))
            .expect("release returns once the child closed the status pipe");
        assert_eq!(failure, None, "started, as an exec would have");
        let descriptors = |pid: i32| -> Vec<(String, String)> {
            let mut found: Vec<(String, String)> = fs::read_dir(format!("/proc/{pid}/fd"))
                .expect("fd listing")
                .map(|entry| {
                    let entry = entry.expect("fd entry");
                    let target = fs::read_link(entry.path()).expect("fd target");
                    (
                        entry.file_name().to_string_lossy().into_owned(),
                        target.to_string_lossy().into_owned(),
                    )
                })
                .collect();
            found.sort();
            found
        };
        let null = "/dev/null".to_owned();
        // Past the barrier it closes what it shares with the shim (the status
        // pipe among them: that end of file is what `release` waited for).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while descriptors(child.pid).len() > 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            descriptors(child.pid),
            vec![
                ("0".to_owned(), null.clone()),
                ("1".to_owned(), null.clone()),
                ("2".to_owned(), null)
            ]
        );
        let comm = fs::read_to_string(format!("/proc/{}/comm", child.pid)).expect("comm");
        assert_eq!(comm.trim(), "palisade-idle");
        assert_eq!(
            fs::read_link(format!("/proc/{}/cwd", child.pid)).expect("cwd"),
            work.path().canonicalize().expect("canonical")
        );
        let group = read_proc_stat(child.pid)
            .expect("stat")
            .expect("alive")
            .process_group;
        assert_eq!(group, child.pid, "in a group of its own, like a command");
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            read_proc_stat(child.pid).expect("stat").is_some(),
            "still idling"
        );
        // SAFETY: signals our own child.
        unsafe {
            libc::kill(child.pid, libc::SIGTERM);
        }
        let status = wait_status(child.pid);
        assert!(libc::WIFSIGNALED(status));
        assert_eq!(libc::WTERMSIG(status), libc::SIGTERM);
    }

    /// Whether two processes share one address space (`kcmp(KCMP_VM)`).
    fn same_memory(first: i32, second: i32) -> bool {
        const KCMP_VM: libc::c_long = 1;
        // SAFETY: kcmp compares two processes' kernel objects; it takes no
        // pointer.
        let compared = unsafe { libc::syscall(libc::SYS_kcmp, first, second, KCMP_VM, 0, 0) };
        assert!(compared >= 0, "kcmp: {}", std::io::Error::last_os_error());
        compared == 0
    }

    #[test]
    fn the_command_shares_the_shims_memory_until_it_execs_instead_of_copying_it() {
        let work = tempfile::tempdir().expect("temporary directory");
        let me = std::process::id() as i32;
        // The idle command never execs: it shares the shim's memory for good.
        let prepared = PreparedExec::idle(work.path(), None).expect("prepared");
        let mut idle = spawn_behind_barrier(prepared).expect("spawned behind barrier");
        assert!(same_memory(me, idle.pid), "a copy of the shim's memory");
        assert_eq!(idle.release(), None);
        assert!(same_memory(me, idle.pid));
        // SAFETY: signals our own child.
        unsafe {
            libc::kill(idle.pid, libc::SIGTERM);
        }
        assert_eq!(libc::WTERMSIG(wait_status(idle.pid)), libc::SIGTERM);

        // A program: shared until exec, its own memory after.
        let mut command =
            spawn_behind_barrier(sh("exec sleep 30", work.path())).expect("spawned behind barrier");
        assert!(same_memory(me, command.pid), "a copy of the shim's memory");
        assert_eq!(command.release(), None, "exec'd");
        assert!(
            !same_memory(me, command.pid),
            "exec gives it memory of its own"
        );
        // SAFETY: signals our own child.
        unsafe {
            libc::kill(command.pid, libc::SIGKILL);
        }
        assert_eq!(libc::WTERMSIG(wait_status(command.pid)), libc::SIGKILL);
    }

    #[test]
    fn a_released_command_runs_in_its_own_group_and_exec_failures_are_reported() {
        let work = tempfile::tempdir().expect("temporary directory");
        let mut child = spawn_behind_barrier(sh("touch ran; exit 3", work.path()))
            .expect("spawned behind barrier");
        let group = read_proc_stat(child.pid)
            .expect("stat")
            .expect("alive")
            .process_group;
        assert_eq!(group, child.pid, "the group exists before the release");
        assert_eq!(child.release(), None);
        let status = wait_status(child.pid);
        assert_eq!(libc::WEXITSTATUS(status), 3);
        assert!(work.path().join("ran").exists());

        let argv = [OsString::from("/nonexistent/program")];
        let prepared = PreparedExec::new(
            std::path::Path::new("/nonexistent/program"),
            &argv,
            &Default::default(),
            work.path(),
            None,
        )
        .expect("prepared");
        let mut child = spawn_behind_barrier(prepared).expect("spawned behind barrier");
        let failure = child.release().expect("exec fails");
        assert_eq!(failure.errno, libc::ENOENT);
        assert_eq!(failure.stage, "exec");
        assert_eq!(
            libc::WEXITSTATUS(wait_status(child.pid)),
            EXIT_CODE_NOT_FOUND
        );
    }

    #[test]
    fn programs_are_resolved_like_execvp_before_anything_is_forked() {
        let work = tempfile::tempdir().expect("temporary directory");
        let found = resolve_program("sh".as_ref(), DEFAULT_PATH, work.path()).expect("sh");
        assert!(found.is_absolute() && found.ends_with("sh"), "{found:?}");
        let missing = resolve_program("palisade-no-such".as_ref(), DEFAULT_PATH, work.path())
            .expect_err("missing");
        assert_eq!(missing.code, EXIT_CODE_NOT_FOUND);
        assert!(missing.message.contains("palisade-no-such"));
        std::fs::write(work.path().join("script"), "#!/bin/sh\n").expect("script");
        let not_executable =
            resolve_program("./script".as_ref(), DEFAULT_PATH, work.path()).expect_err("mode 644");
        assert_eq!(not_executable.code, EXIT_CODE_NOT_EXECUTABLE);
        // An empty PATH entry is the working directory.
        let also =
            resolve_program("script".as_ref(), ":/nonexistent", work.path()).expect_err("mode 644");
        assert_eq!(also.code, EXIT_CODE_NOT_EXECUTABLE);
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
