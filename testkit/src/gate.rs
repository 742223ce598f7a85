//! A one-shot gate at the executor's before-effect fault point, driven
//! through files, so a test can hold a real `palisade gateway run`
//! process's launch exactly between its leadership check and its driver
//! call (the check-then-act window only the driver's fence closes).
//!
//! The gateway installs it only in a build with the `test-hooks` feature of
//! `palisade-cli` and only when `PALISADE_TEST_GATE_DIR` names a directory
//! (see `cli/src/serve.rs`). The first replica to reach the point for a
//! sandbox's launch claims `DIR/held-SANDBOX` (containing its node id) and
//! waits until `DIR/release-SANDBOX` exists; every later launch of that
//! sandbox, on any replica, passes at once.
//!
//! The same directory also injects a panic in apply, for the fail-stop
//! tests: while `DIR/panic-in-apply-NODE` exists, node NODE removes it and
//! panics in the middle of applying its next command (see
//! [`inject_apply_panic`]); the other replicas apply it normally.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;
use palisade_raft::NodeId;
use palisade_raft::hooks::{FaultPoint, FaultPoints};

/// The environment variable naming the gate directory.
pub const GATE_DIR_ENV: &str = "PALISADE_TEST_GATE_DIR";
/// The file that makes node N panic in apply: this prefix, then N.
const APPLY_PANIC_PREFIX: &str = "panic-in-apply-";
/// How often a held launch looks for its release file.
const RELEASE_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The gate: see the module doc.
#[derive(Debug, Clone)]
pub struct FileGate {
    dir: PathBuf,
}

impl FileGate {
    /// A gate over `dir` (created if missing).
    pub fn new(dir: PathBuf) -> std::io::Result<FileGate> {
        std::fs::create_dir_all(&dir)?;
        Ok(FileGate { dir })
    }
}

impl FaultPoints for FileGate {
    fn applying(&self, node: NodeId, index: u64) {
        let trigger = self.dir.join(format!("{APPLY_PANIC_PREFIX}{node}"));
        // One-shot: removed first, so the restarted replica applies the
        // same entry normally.
        if std::fs::remove_file(&trigger).is_ok() {
            panic!("TEST GATE: injected panic while node {node} applies log index {index}");
        }
    }

    fn at(&self, node: NodeId, point: FaultPoint) -> BoxFuture<'static, ()> {
        let FaultPoint::BeforeEffect {
            sandbox_id,
            operation,
            ..
        } = point
        else {
            return Box::pin(async {});
        };
        if operation != "Create" && operation != "Start" {
            return Box::pin(async {});
        }
        let held = self.dir.join(format!("held-{sandbox_id}"));
        let release = self.dir.join(format!("release-{sandbox_id}"));
        Box::pin(async move {
            let claimed = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&held)
                .and_then(|mut file| {
                    std::io::Write::write_all(&mut file, node.to_string().as_bytes())
                });
            if claimed.is_err() {
                return;
            }
            tracing::warn!(%sandbox_id, node, "TEST GATE: launch held before the driver call");
            while !release.exists() {
                tokio::time::sleep(RELEASE_POLL_INTERVAL).await;
            }
            tracing::warn!(%sandbox_id, node, "TEST GATE: launch released");
        })
    }
}

/// Waits (bounded) until some replica holds a launch; returns the sandbox
/// id and the node that holds it.
pub fn wait_held(dir: &Path, timeout: Duration) -> Option<(String, NodeId)> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(sandbox_id) = name.strip_prefix("held-")
                && let Ok(node) = std::fs::read_to_string(entry.path())
                && let Ok(node) = node.trim().parse()
            {
                return Some((sandbox_id.to_string(), node));
            }
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(RELEASE_POLL_INTERVAL);
    }
}

/// Lets the held launch of `sandbox_id` go on.
pub fn release(dir: &Path, sandbox_id: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(format!("release-{sandbox_id}")), b"")
}

/// Makes node `node` panic in the middle of applying its next command
/// (once); see the module doc.
pub fn inject_apply_panic(dir: &Path, node: NodeId) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(format!("{APPLY_PANIC_PREFIX}{node}")), b"")
}
