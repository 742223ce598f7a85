//! Helpers for end-to-end tests that drive the real `palisade` binary:
//! free ports, replica processes, CLI calls and process-table checks; and,
//! for the cluster tests, a [`Cluster`] of replica processes that cleans up
//! after itself, gRPC probes of each replica's view, and a [`Workload`] of
//! concurrent clients that records every acknowledged operation.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod cluster;

/// The binary under test.
pub fn palisade() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_palisade"))
}

/// `count` consecutive free loopback ports.
pub fn free_ports(count: u16) -> u16 {
    'search: for _ in 0..200 {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let base = probe.local_addr().unwrap().port();
        drop(probe);
        if base > u16::MAX - count {
            continue;
        }
        let mut held = Vec::new();
        for port in base..base + count {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => held.push(listener),
                Err(_) => continue 'search,
            }
        }
        return base;
    }
    panic!("no {count} consecutive free ports found");
}

/// One `palisade gateway run` process.
pub struct Replica {
    pub node_id: u64,
    pub address: String,
    pub data_dir: PathBuf,
    pub driver_dir: PathBuf,
    /// `--initial-cluster`; empty for a replica that joins as a learner.
    pub initial_cluster: String,
    /// More `gateway run` flags (`--driver noop`, timings, ...).
    pub extra_args: Vec<String>,
    /// `PALISADE_LOG` of the replica.
    pub log_filter: String,
    pub child: Option<Child>,
}

impl Replica {
    pub fn new(node_id: u64, address: &str, root: &Path, initial_cluster: &str) -> Self {
        Self {
            node_id,
            address: address.to_string(),
            data_dir: root.join(format!("node-{node_id}")),
            driver_dir: root.join("executions"),
            initial_cluster: initial_cluster.to_string(),
            extra_args: Vec::new(),
            log_filter: "info,openraft=warn".to_string(),
            child: None,
        }
    }

    pub fn start(&mut self) {
        assert!(
            self.child.is_none(),
            "replica {} already runs",
            self.node_id
        );
        std::fs::create_dir_all(&self.data_dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.join("gateway.log"))
            .unwrap();
        let mut command = Command::new(palisade());
        command
            .args(["gateway", "run", "--node-id", &self.node_id.to_string()])
            .args(["--listen", &self.address])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--driver-dir")
            .arg(&self.driver_dir);
        if !self.initial_cluster.is_empty() {
            command.args(["--initial-cluster", &self.initial_cluster]);
        }
        if !self
            .extra_args
            .iter()
            .any(|arg| arg == "--stop-grace-seconds")
        {
            command.args(["--stop-grace-seconds", "2"]);
        }
        let child = command
            .args(&self.extra_args)
            .env("PALISADE_LOG", &self.log_filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start palisade gateway run");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("replica runs").id()
    }

    /// SIGKILL: no shutdown, no flush beyond what was already durable.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGKILL);
            child.wait().unwrap();
        }
    }

    /// SIGTERM and wait for exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("replica runs");
        signal(child.id(), libc::SIGTERM);
        child.wait().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("gateway.log")).unwrap_or_default()
    }

    /// The replica's log from byte `offset` on (see [`Replica::log_len`]).
    pub fn log_since(&self, offset: u64) -> String {
        let log = std::fs::read(self.data_dir.join("gateway.log")).unwrap_or_default();
        String::from_utf8_lossy(log.get(offset as usize..).unwrap_or_default()).into_owned()
    }

    /// How many bytes the replica has logged so far.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(self.data_dir.join("gateway.log")).map_or(0, |meta| meta.len())
    }

    /// `http://ADDRESS`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.address)
    }

    /// SIGSTOP, and waits until the kernel reports the process stopped.
    pub fn pause(&self) {
        let pid = self.pid();
        signal(pid, libc::SIGSTOP);
        eventually("the replica is stopped", Duration::from_secs(10), || {
            process_state(pid) == Some('T')
        });
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Has the process exited (it is then reaped)?
    pub fn try_exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.child = None;
        Some(status)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused process dies of SIGKILL too; resume it anyway so
            // nothing is left stopped if the kill raced.
            signal(child.id(), libc::SIGCONT);
        }
        self.kill();
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

pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a pid this test started.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Runs the CLI against `endpoints`; returns the raw output.
pub fn cli(endpoints: &str, args: &[&str]) -> Output {
    Command::new(palisade())
        .args(["--endpoint", endpoints])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run palisade CLI")
}

/// Runs the CLI with `-o json`, asserts success, parses stdout.
pub fn cli_json(endpoints: &str, args: &[&str]) -> Value {
    // Global flags go first: everything after `--` belongs to the sandbox.
    let mut full = vec!["-o", "json"];
    full.extend_from_slice(args);
    let output = cli(endpoints, &full);
    assert!(
        output.status.success(),
        "palisade {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "palisade {args:?} printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Waits until some replica reports a leader.
pub fn wait_for_leader(endpoints: &str, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        let output = cli(endpoints, &["cluster", "status", "-o", "json"]);
        if output.status.success()
            && let Ok(value) = serde_json::from_slice::<Value>(&output.stdout)
            && let Some(leader) = value["replicas"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|replica| replica["leader_id"].as_u64())
        {
            return leader;
        }
        assert!(Instant::now() < deadline, "no leader within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Is `pid` alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            state != Some("Z") && state.is_some()
        }
        Err(_) => false,
    }
}

/// Pids whose command line contains every word of `needle`, in order.
pub fn pids_running(needle: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let words: Vec<String> = cmdline
            .split(|byte| *byte == 0)
            .filter(|word| !word.is_empty())
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
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

/// Polls `check` until it holds.
pub fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Keeps the replicas' logs of a failing test: when dropped during a panic,
/// copies every `gateway.log` under `root` (one directory per replica) to
/// `$TMPDIR/palisade-failed-TEST/`, which survives the test's temporary
/// directory. Declare it after the cluster, so it drops first.
pub struct KeepLogsOnFailure {
    pub root: PathBuf,
    pub test: &'static str,
}

impl Drop for KeepLogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let kept = std::env::temp_dir().join(format!("palisade-failed-{}", self.test));
        for entry in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let log = entry.path().join("gateway.log");
            if log.is_file() {
                let into = kept.join(entry.file_name());
                let _ = std::fs::create_dir_all(&into);
                let _ = std::fs::copy(&log, into.join("gateway.log"));
            }
        }
        eprintln!("replica logs kept in {}", kept.display());
    }
}
