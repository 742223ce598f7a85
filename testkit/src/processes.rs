//! The process table, as tests and cleanup see it: signals, liveness, and
//! the shims and commands of the process driver's executions (found by
//! their command line and working directory under one driver directory).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// Sends `signal` to `pid`. Errors (the process is gone) are ignored: every
/// caller follows up by observing the process.
pub fn signal(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory effects; callers pass pids of processes
    // they started (or found under their own driver directory).
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The one-letter state of a process (`R`, `S`, `T`, `Z`, ...).
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// CPU time (user + system) process `pid` used so far, in seconds; `None`
/// when it is gone or its `/proc/PID/stat` does not read as expected.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields after its ')'.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// Is `pid` alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z' && state != 'X')
}

/// Waits (bounded) until the kernel reports `pid` stopped; false on timeout.
pub fn wait_stopped(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_state(pid) != Some('T') {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Pids whose command line contains every word of `needle`, in order.
pub fn pids_running(needle: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for (pid, words) in command_lines() {
        if words.len() >= needle.len()
            && words
                .windows(needle.len())
                .any(|window| window.iter().zip(needle).all(|(a, b)| a == b))
            && alive(pid)
        {
            found.push(pid);
        }
    }
    found
}

/// Every process's pid and argv, as far as /proc lets us read them.
fn command_lines() -> Vec<(u32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let words = cmdline
            .split(|byte| *byte == 0)
            .filter(|word| !word.is_empty())
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        found.push((pid, words));
    }
    found
}

/// The execution (sandbox id, generation) a path under the driver
/// directory belongs to: `DRIVER_DIR/ID/GENERATION/...`.
fn execution_of(driver_dir: &Path, path: &Path) -> Option<(String, u64)> {
    let mut parts = path.strip_prefix(driver_dir).ok()?.components();
    let id = parts.next()?.as_os_str().to_string_lossy().into_owned();
    let generation = parts.next()?.as_os_str().to_string_lossy().parse().ok()?;
    Some((id, generation))
}

/// Live processes (not zombies) by what they are to the process driver.
#[derive(Debug, Default)]
pub struct ExecutionProcesses {
    /// Shims (forked by their launcher, itself forked by a gateway's launch
    /// server or started as `palisade shim launch DIR`), by execution.
    pub shims: BTreeMap<(String, u64), Vec<u32>>,
    /// Processes of sandbox commands (working directory
    /// `DRIVER_DIR/.workdirs/ID`, or `DIR/work` of older executions), by
    /// execution, with their `argv[0]`.
    pub commands: BTreeMap<(String, u64), Vec<(u32, String)>>,
}

impl ExecutionProcesses {
    /// Every pid found, shims and commands.
    pub fn pids(&self) -> Vec<u32> {
        self.shims
            .values()
            .flatten()
            .copied()
            .chain(self.commands.values().flatten().map(|(pid, _)| *pid))
            .collect()
    }
}

/// The parent pid of `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The sandbox whose persistent working directory `path` is in:
/// `DRIVER_DIR/.workdirs/ID/...`.
fn workdir_sandbox_of(driver_dir: &Path, path: &Path) -> Option<String> {
    let mut parts = path
        .strip_prefix(driver_dir.join(".workdirs"))
        .ok()?
        .components();
    Some(parts.next()?.as_os_str().to_string_lossy().into_owned())
}

/// How many parents are followed from a command up to its shim.
const ANCESTORS_FOLLOWED_MAX: usize = 64;

/// Scans /proc for the shims and commands of executions under `driver_dir`.
/// Commands run in their sandbox's working directory
/// (`DRIVER_DIR/.workdirs/ID`); their generation is their shim's (the
/// nearest shim among their ancestors: the shim is a subreaper), or 0 for
/// one whose shim is gone (or a command `exec` started).
pub fn execution_processes(driver_dir: &Path) -> ExecutionProcesses {
    let mut found = ExecutionProcesses::default();
    let mut shim_pids: BTreeMap<u32, (String, u64)> = BTreeMap::new();
    let lines = command_lines();
    // A command forked by its shim has the shim's command line until it
    // exec's (an idle command never does); it is told apart by its working
    // directory, the sandbox's, which it enters before its barrier.
    let in_a_workdir = |pid: u32| {
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|cwd| workdir_sandbox_of(driver_dir, &cwd).is_some())
    };
    // A shim's standard error is its execution's `shim.log`; a shim of
    // this release is a fork of its gateway's launch server, whose command
    // line names no execution (one launched by `palisade shim launch DIR`
    // by hand, or by an earlier release, does).
    let shim_log_of = |pid: u32| {
        let stderr = std::fs::read_link(format!("/proc/{pid}/fd/2")).ok()?;
        if stderr.file_name()? != "shim.log" {
            return None;
        }
        execution_of(driver_dir, &stderr)
    };
    for (pid, words) in &lines {
        if !alive(*pid) || !words.iter().any(|word| word == "shim") || in_a_workdir(*pid) {
            continue;
        }
        let named = words
            .iter()
            .find_map(|word| execution_of(driver_dir, Path::new(word)));
        if let Some(execution) = named.or_else(|| shim_log_of(*pid)) {
            shim_pids.insert(*pid, execution);
        }
    }
    let shim_of = |pid: u32| {
        let mut at = pid;
        for _ in 0..ANCESTORS_FOLLOWED_MAX {
            at = parent_of(at)?;
            if let Some(execution) = shim_pids.get(&at) {
                return Some(execution.clone());
            }
            if at <= 1 {
                return None;
            }
        }
        None
    };
    for (pid, words) in lines {
        if !alive(pid) {
            continue;
        }
        if let Some(execution) = shim_pids.get(&pid) {
            found.shims.entry(execution.clone()).or_default().push(pid);
            continue;
        }
        let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) else {
            continue;
        };
        let execution = execution_of(driver_dir, &cwd).or_else(|| {
            let sandbox = workdir_sandbox_of(driver_dir, &cwd)?;
            Some(match shim_of(pid) {
                Some(execution) if execution.0 == sandbox => execution,
                _ => (sandbox, 0),
            })
        });
        if let Some(execution) = execution {
            let program = words.first().cloned().unwrap_or_default();
            found
                .commands
                .entry(execution)
                .or_default()
                .push((pid, program));
        }
    }
    found
}

/// How many rounds [`kill_executions`] makes before it gives up.
const KILL_ROUNDS_MAX: usize = 50;

/// SIGKILLs every shim and command of the executions under `driver_dir`
/// (and nothing else), until none is left or `KILL_ROUNDS_MAX` rounds.
pub fn kill_executions(driver_dir: &Path) {
    for _ in 0..KILL_ROUNDS_MAX {
        let pids = execution_processes(driver_dir).pids();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            signal(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The generations the process driver keeps a directory for, by sandbox
/// (sandboxes with none left, i.e. removed ones, are not listed).
pub fn execution_dirs(driver_dir: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut dirs = BTreeMap::new();
    for sandbox in std::fs::read_dir(driver_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        if !sandbox.path().is_dir() {
            continue;
        }
        let mut generations: Vec<u64> = std::fs::read_dir(sandbox.path())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_string_lossy().parse().ok())
            .collect();
        generations.sort_unstable();
        if generations.is_empty() {
            // A removed sandbox keeps only its lock, fence and tombstone.
            continue;
        }
        dirs.insert(
            sandbox.file_name().to_string_lossy().into_owned(),
            generations,
        );
    }
    dirs
}

/// Whether exactly the executions in `expected_running` run, each under
/// one shim with one `program` process (e.g. one `sleep`), and no other
/// execution under `driver_dir` has a live process. `Err` says what differs.
pub fn exactly_running(
    driver_dir: &Path,
    expected_running: &BTreeSet<(String, u64)>,
    program: &str,
) -> Result<(), String> {
    let processes = execution_processes(driver_dir);
    let with_processes: BTreeSet<(String, u64)> = processes
        .commands
        .keys()
        .chain(processes.shims.keys())
        .cloned()
        .collect();
    if &with_processes != expected_running {
        return Err(format!(
            "executions with live processes {with_processes:?}, expected {expected_running:?}: {processes:?}"
        ));
    }
    for execution in expected_running {
        let programs = processes.commands.get(execution).map_or(0, |commands| {
            commands
                .iter()
                .filter(|(_, argv0)| argv0.rsplit('/').next() == Some(program))
                .count()
        });
        let shims = processes.shims.get(execution).map_or(0, Vec::len);
        if programs != 1 || shims != 1 {
            return Err(format!(
                "{execution:?} runs {programs} `{program}` and {shims} shims, expected one each: {processes:?}"
            ));
        }
    }
    Ok(())
}
