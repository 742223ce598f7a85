//! One `palisade gateway run` child process, and what can be done to it:
//! start (again, from the same directory and flags), SIGKILL, SIGSTOP and
//! SIGCONT, SIGTERM and wait, and read its log file.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::TestkitError;
use crate::processes::{signal, wait_stopped};

/// How long [`ReplicaProcess::pause`] waits for the kernel to report the
/// process stopped.
const PAUSE_CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of the end of the log [`ReplicaProcess::exit_reason`] reads:
/// the error is the last thing a replica writes.
const EXIT_REASON_TAIL_BYTES: u64 = 64 * 1024;

/// A replica's TLS files (`palisade cluster init-pki` writes them).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The cluster CA certificate.
    pub ca: PathBuf,
    /// The node's certificate.
    pub cert: PathBuf,
    /// The node's key.
    pub key: PathBuf,
}

/// One replica: its flags, its directory and, while it runs, its process.
/// Dropping it SIGKILLs the process (after a SIGCONT, so a paused one dies
/// too).
#[derive(Debug)]
pub struct ReplicaProcess {
    /// The replica's node id.
    pub node_id: u64,
    /// `--listen`: where the replica serves (host:port).
    pub listen: String,
    /// `--peer-listen`: its own peer port (required with TLS); `None`: a
    /// single-port `--insecure` replica.
    pub peer_listen: Option<String>,
    /// `--advertise`: the address peers reach it at, when not its peer
    /// port (the chaos harness puts a proxy there).
    pub advertise: Option<String>,
    /// `--ca`, `--cert`, `--key`; `None`: the replica runs `--insecure`.
    pub tls: Option<TlsFiles>,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--driver-dir`, shared by every replica of a host.
    pub driver_dir: PathBuf,
    /// `--initial-cluster`; empty for a replica that joins as a learner.
    pub initial_cluster: String,
    /// More `gateway run` flags (`--driver noop`, timings, ...).
    pub extra_args: Vec<String>,
    /// Environment variables set for the process (besides `PALISADE_LOG`).
    pub env: Vec<(String, String)>,
    /// Environment variables removed from what the process inherits.
    pub env_remove: Vec<String>,
    /// `PALISADE_LOG` of the replica.
    pub log_filter: String,
    /// Where its stdout and stderr go (appended across restarts).
    pub log_path: PathBuf,
    /// The `palisade` binary.
    pub palisade: PathBuf,
    /// Start the process in a process group of its own, so a Ctrl-C in the
    /// caller's terminal reaches only the caller, which then stops it in
    /// order (`palisade up`). Off for tests: a test process killed by
    /// Ctrl-C takes its replicas along.
    pub own_process_group: bool,
    child: Option<Child>,
    /// The log's length when the process was last started: where its own
    /// output begins.
    log_len_at_start: u64,
}

impl ReplicaProcess {
    /// A replica of `palisade` with its data under `data_dir` (log file
    /// `data_dir/gateway.log`), not started yet.
    pub fn new(
        palisade: &Path,
        node_id: u64,
        listen: &str,
        data_dir: PathBuf,
        driver_dir: PathBuf,
        initial_cluster: &str,
    ) -> Self {
        ReplicaProcess {
            node_id,
            listen: listen.to_string(),
            peer_listen: None,
            advertise: None,
            tls: None,
            log_path: data_dir.join("gateway.log"),
            data_dir,
            driver_dir,
            initial_cluster: initial_cluster.to_string(),
            extra_args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            log_filter: "info,openraft=warn".to_string(),
            palisade: palisade.to_path_buf(),
            own_process_group: false,
            child: None,
            log_len_at_start: 0,
        }
    }

    /// The full `gateway run` argument list this replica starts with.
    pub fn arguments(&self) -> Vec<String> {
        let mut arguments = vec![
            "gateway".to_string(),
            "run".to_string(),
            "--node-id".to_string(),
            self.node_id.to_string(),
            "--listen".to_string(),
            self.listen.clone(),
            "--data-dir".to_string(),
            self.data_dir.display().to_string(),
            "--driver-dir".to_string(),
            self.driver_dir.display().to_string(),
        ];
        if let Some(peer_listen) = &self.peer_listen {
            arguments.extend(["--peer-listen".to_string(), peer_listen.clone()]);
        }
        match &self.tls {
            Some(tls) => {
                for (flag, path) in [
                    ("--ca", &tls.ca),
                    ("--cert", &tls.cert),
                    ("--key", &tls.key),
                ] {
                    arguments.extend([flag.to_string(), path.display().to_string()]);
                }
            }
            // Test clusters: plaintext, and sandbox commands as the test's
            // own user in their execution directory (what tests inspect).
            None => arguments.extend(["--insecure", "--sandbox-user", "same"].map(String::from)),
        }
        if let Some(advertise) = &self.advertise {
            arguments.extend(["--advertise".to_string(), advertise.clone()]);
        }
        if !self.initial_cluster.is_empty() {
            arguments.extend([
                "--initial-cluster".to_string(),
                self.initial_cluster.clone(),
            ]);
        }
        arguments.extend(self.extra_args.iter().cloned());
        arguments
    }

    /// Starts the process (again, after a kill: same directory, same flags).
    /// Does nothing if it already runs.
    pub fn start(&mut self) -> Result<(), TestkitError> {
        if self.child.is_some() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.data_dir).map_err(|source| TestkitError::Io {
            action: "create",
            path: self.data_dir.clone(),
            source,
        })?;
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)
                .map_err(|source| TestkitError::Io {
                    action: "open",
                    path: self.log_path.clone(),
                    source,
                })
        };
        let (stdout, stderr) = (open_log()?, open_log()?);
        self.log_len_at_start = self.log_len();
        let mut command = Command::new(&self.palisade);
        for key in &self.env_remove {
            command.env_remove(key);
        }
        if self.own_process_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let child = command
            .args(self.arguments())
            .env("PALISADE_LOG", &self.log_filter)
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| TestkitError::Spawn {
                node_id: self.node_id,
                program: self.palisade.clone(),
                source,
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the process was started and not yet seen to exit.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, if it runs.
    pub fn try_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process id.
    ///
    /// # Panics
    /// If the replica does not run: asking for the pid of a stopped replica
    /// is a bug in the calling test.
    pub fn pid(&self) -> u32 {
        self.try_pid()
            .unwrap_or_else(|| panic!("replica {} does not run", self.node_id))
    }

    /// SIGKILL: no shutdown, no flush beyond what was already durable. Waits
    /// for the process to be reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGCONT);
            signal(child.id(), libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the exit (a graceful stop: leadership
    /// handed off, requests drained).
    ///
    /// # Panics
    /// If the replica does not run (a bug in the calling test).
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("replica {} does not run", self.node_id));
        signal(child.id(), libc::SIGCONT);
        signal(child.id(), libc::SIGTERM);
        child
            .wait()
            .unwrap_or_else(|error| panic!("waiting for replica {}: {error}", self.node_id))
    }

    /// Sends SIGTERM (without waiting); see [`ReplicaProcess::wait_exit`].
    pub fn request_stop(&self) {
        if let Some(pid) = self.try_pid() {
            signal(pid, libc::SIGCONT);
            signal(pid, libc::SIGTERM);
        }
    }

    /// Waits up to `timeout` for the process to exit; SIGKILLs it after
    /// that. Returns the exit status, or `None` if it had to be killed (or
    /// did not run).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.child.is_some() {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGSTOP, and waits until the kernel reports the process stopped.
    pub fn pause(&self) {
        if let Some(pid) = self.try_pid() {
            signal(pid, libc::SIGSTOP);
            wait_stopped(pid, PAUSE_CONFIRM_TIMEOUT);
        }
    }

    /// SIGCONT.
    pub fn resume(&self) {
        if let Some(pid) = self.try_pid() {
            signal(pid, libc::SIGCONT);
        }
    }

    /// Has the process exited? If so it is reaped and its status returned.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// The whole log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The log from byte `offset` on (see [`ReplicaProcess::log_len`]).
    pub fn log_since(&self, offset: u64) -> String {
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        String::from_utf8_lossy(log.get(start..).unwrap_or_default()).into_owned()
    }

    /// The message of the last `error: ...` line (how `palisade` reports
    /// the error it exits with) that the process logged since it was last
    /// started: why it exited, when it exited by itself. Reads at most the
    /// log's last 64 KiB (`EXIT_REASON_TAIL_BYTES`).
    pub fn exit_reason(&self) -> Option<String> {
        let mut file = std::fs::File::open(&self.log_path).ok()?;
        let length = file.metadata().ok()?.len();
        let from = self
            .log_len_at_start
            .max(length.saturating_sub(EXIT_REASON_TAIL_BYTES));
        file.seek(SeekFrom::Start(from)).ok()?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).ok()?;
        String::from_utf8_lossy(&tail)
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .map(str::to_string)
    }

    /// How many bytes the replica has logged so far.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path).map_or(0, |meta| meta.len())
    }

    /// `host:port` of the public listener.
    pub fn address(&self) -> &str {
        &self.listen
    }

    /// `host:port` peers reach it at: `--advertise`, else its peer port,
    /// else (single-port `--insecure`) `--listen`. What `cluster
    /// add-learner` takes.
    pub fn peer_address(&self) -> &str {
        self.advertise
            .as_deref()
            .or(self.peer_listen.as_deref())
            .unwrap_or(&self.listen)
    }

    /// `http://LISTEN`, or `https://LISTEN` with TLS.
    pub fn uri(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.listen)
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
