//! The Docker Engine of the tests (started by `scripts/ensure-docker`, named by
//! PALISADE_TEST_DOCKER_HOST and PALISADE_TEST_DOCKER_IMAGE), looked at with
//! the `docker` CLI (the driver itself never uses it), and a unix-socket proxy
//! in front of it that a test can make refuse or hang, as a down or stuck
//! engine does.

use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Engine address variable set by `scripts/ensure-docker`.
pub const HOST_VARIABLE: &str = "PALISADE_TEST_DOCKER_HOST";
/// Test image variable set by `scripts/ensure-docker`.
pub const IMAGE_VARIABLE: &str = "PALISADE_TEST_DOCKER_IMAGE";
/// Set (by ./scripts/test) when the Docker tests must run: without an engine
/// they fail instead of saying they did not run.
pub const REQUIRE_VARIABLE: &str = "PALISADE_REQUIRE_DOCKER";

/// The test engine.
#[derive(Clone, Debug)]
pub struct TestEngine {
    /// `unix:///...` address of the engine.
    pub host: String,
    /// The busybox image imported by `scripts/ensure-docker`.
    pub image: String,
}

impl TestEngine {
    /// The engine the environment names; `None` (with a note on stderr) when
    /// there is none and none is required; a panic saying why when required.
    pub fn from_env() -> Option<TestEngine> {
        let host = std::env::var(HOST_VARIABLE)
            .ok()
            .filter(|host| !host.is_empty());
        let image = std::env::var(IMAGE_VARIABLE)
            .ok()
            .filter(|image| !image.is_empty());
        match (host, image) {
            (Some(host), Some(image)) => Some(TestEngine { host, image }),
            _ => {
                let why = format!(
                    "no Docker Engine for the Docker driver's tests: {HOST_VARIABLE} and \
                     {IMAGE_VARIABLE} are not set (./scripts/test sets them with \
                     `eval \"$(scripts/ensure-docker start)\"`)"
                );
                if std::env::var_os(REQUIRE_VARIABLE).is_some_and(|value| value != "0") {
                    panic!("{why}; {REQUIRE_VARIABLE} is set, so this is a failure");
                }
                eprintln!("NOT RUN: {why}");
                None
            }
        }
    }

    /// The engine's socket path.
    pub fn socket_path(&self) -> PathBuf {
        PathBuf::from(self.host.trim_start_matches("unix://"))
    }

    /// `docker -H HOST ARGS...`; its stdout, panicking on failure.
    pub fn docker(&self, args: &[&str]) -> String {
        let output = Command::new("docker")
            .arg("-H")
            .arg(&self.host)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run the docker CLI");
        assert!(
            output.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Ids of every container (any state) carrying `label` (`KEY=VALUE`).
    pub fn containers(&self, label: &str) -> Vec<String> {
        self.docker(&[
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Ids of the running containers carrying `label`.
    pub fn running(&self, label: &str) -> Vec<String> {
        self.docker(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Force-removes every container carrying `label` (test cleanup; errors
    /// ignored).
    pub fn remove_labelled(&self, label: &str) {
        let Ok(output) = Command::new("docker")
            .args([
                "-H",
                &self.host,
                "ps",
                "-aq",
                "--filter",
                &format!("label={label}"),
            ])
            .stdin(Stdio::null())
            .output()
        else {
            return;
        };
        let ids: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["-H", &self.host, "rm", "-f"])
                .args(&ids)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

const PASS: u8 = 0;
const REFUSE: u8 = 1;
const HANG: u8 = 2;

/// A unix-socket proxy to the engine: passes, refuses (closes every
/// connection at once, as a dead engine's socket does) or hangs (accepts and
/// never answers, as a stuck engine does). Changing the mode also cuts the
/// connections open at that moment (the client's pooled ones).
pub struct UnixProxy {
    dir: tempfile::TempDir,
    mode: Arc<AtomicU8>,
    open: Arc<Mutex<Vec<UnixStream>>>,
}

impl UnixProxy {
    /// Starts a proxy to `upstream` on a socket of its own.
    pub fn start(upstream: &Path) -> UnixProxy {
        let dir = tempfile::tempdir().expect("a proxy directory");
        let listener = UnixListener::bind(dir.path().join("proxy.sock")).expect("bind the proxy");
        let mode = Arc::new(AtomicU8::new(PASS));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (thread_mode, thread_open, upstream) =
            (mode.clone(), open.clone(), upstream.to_path_buf());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                match thread_mode.load(Ordering::SeqCst) {
                    REFUSE => drop(client),
                    HANG => {
                        if let Ok(clone) = client.try_clone() {
                            thread_open.lock().expect("lock").push(clone);
                        }
                        // Held open, never answered.
                        std::mem::forget(client);
                    }
                    _ => {
                        let _ = forward(client, &upstream, &thread_open);
                    }
                }
            }
        });
        UnixProxy { dir, mode, open }
    }

    /// The proxy's address for a Docker client.
    pub fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("proxy.sock").display())
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
        for stream in self.open.lock().expect("lock").drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Pass traffic to the engine.
    pub fn pass(&self) {
        self.set(PASS);
    }

    /// Close every connection at once.
    pub fn refuse(&self) {
        self.set(REFUSE);
    }

    /// Accept connections and never answer.
    pub fn hang(&self) {
        self.set(HANG);
    }
}

fn forward(
    client: UnixStream,
    upstream: &Path,
    open: &Arc<Mutex<Vec<UnixStream>>>,
) -> io::Result<()> {
    let server = UnixStream::connect(upstream)?;
    {
        let mut open = open.lock().expect("lock");
        open.push(client.try_clone()?);
        open.push(server.try_clone()?);
    }
    let (mut client_read, mut server_write) = (client.try_clone()?, server.try_clone()?);
    std::thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut server_write);
        let _ = server_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut server_read, mut client_write) = (server, client);
    std::thread::spawn(move || {
        let _ = io::copy(&mut server_read, &mut client_write);
        let _ = client_write.shutdown(std::net::Shutdown::Write);
    });
    Ok(())
}
