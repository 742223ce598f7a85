//! `palisade up` is secure with zero set-up: it makes the PKI and the admin
//! credential under `./.palisade` (0700, files 0600), the CLI run from the
//! same directory finds them with no flag, and — when `up` runs as root —
//! a sandbox's command runs as an unprivileged user that cannot read the
//! replicas' data (the Raft log holds the execution-token secret).

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{eventually, free_up_base_port, palisade};

/// `palisade up` in `dir`, stopped (SIGTERM, then SIGKILL) and its
/// sandboxes killed on drop.
struct Up {
    child: Child,
    dir: PathBuf,
    /// `up`'s stdout and stderr, shown when the test fails.
    output: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "palisade up printed:\n{}",
                std::fs::read_to_string(&self.output).unwrap_or_default()
            );
        }
        support::signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        palisade_testkit::processes::kill_executions(&self.dir.join(".palisade/executions"));
    }
}

fn cli_in(dir: &Path, endpoints: &str, args: &[&str]) -> Output {
    Command::new(palisade())
        .current_dir(dir)
        .env_remove("PALISADE_CONFIG")
        .args(["--endpoint", endpoints, "-o", "json"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the CLI")
}

/// `GET path` over plain HTTP/1.0: the whole answer (status line,
/// headers, body), or `None` if nothing answers.
fn http_get(address: &str, path: &str) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

fn find(dir: &Path, file_name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find(&path, file_name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|name| name == file_name) {
            return Some(path);
        }
    }
    None
}

#[test]
fn up_makes_a_private_pki_and_the_cli_finds_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let base = free_up_base_port();
    let endpoints = (0..3)
        .map(|offset| format!("127.0.0.1:{}", base + offset))
        .collect::<Vec<_>>()
        .join(",");
    let output = dir.path().join("up.out");
    let stdout = std::fs::File::create(&output).expect("up's output file");
    let stderr = stdout.try_clone().expect("up's output file");
    let child = Command::new(palisade())
        .current_dir(dir.path())
        .args(["up", "--base-port", &base.to_string()])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("start palisade up");
    let up = Up {
        child,
        dir: dir.path().to_path_buf(),
        output,
    };
    let data = up.dir.join(".palisade");

    // The README's CLI calls, with no flag: TLS and the admin credential
    // come from ./.palisade/config.json.
    eventually(
        "the cluster answers over TLS",
        Duration::from_secs(60),
        || {
            cli_in(&up.dir, &endpoints, &["cluster", "status"])
                .status
                .success()
        },
    );
    // Each replica serves its status page and /metrics (plain HTTP, on
    // loopback) at BASE_PORT + 200 + N - 1 by default.
    for offset in 0..3 {
        let address = format!("127.0.0.1:{}", base + 200 + offset);
        let mut page = String::new();
        eventually(
            "the replica serves its status page",
            Duration::from_secs(30),
            || {
                page = http_get(&address, "/").unwrap_or_default();
                // Every member answers the page's question over the
                // cluster's mutual TLS (its peer port): none is shown
                // unreachable once all are up.
                page.contains("id=\"members\"")
                    && page.matches("class=\"member").count() == 3
                    && !page.contains("data-role=\"unreachable\"")
            },
        );
        assert!(
            page.lines()
                .next()
                .is_some_and(|status| status.contains(" 200 ")),
            "{page}"
        );
        let metrics = http_get(&address, "/metrics").unwrap_or_default();
        assert!(metrics.contains("palisade_raft_term "), "{metrics}");
    }

    let whoami = cli_in(&up.dir, &endpoints, &["auth", "whoami"]);
    assert!(whoami.status.success(), "{whoami:?}");
    let me: serde_json::Value = serde_json::from_slice(&whoami.stdout).expect("JSON");
    assert_eq!(me["role"], "admin", "{me}");
    assert_eq!(me["principal"], "cert:admin", "{me}");

    // Plaintext is refused by the TLS listener.
    let plaintext = cli_in(&up.dir, &endpoints, &["--insecure", "sandbox", "list"]);
    assert!(!plaintext.status.success(), "a plaintext client was served");

    // Private files: the directory 0700, keys and the log 0600.
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&data), 0o700);
    for key in [
        "ca-key.pem",
        "admin-key.pem",
        "node-1-key.pem",
        "config.json",
    ] {
        assert_eq!(mode(&data.join(key)), 0o600, "{key}");
    }
    let log = find(&data.join("node-1"), "log.redb").expect("node 1's Raft log");
    assert_eq!(
        mode(&log) & 0o077,
        0,
        "{} is readable by others",
        log.display()
    );
    assert_eq!(mode(&data.join("node-1")), 0o700);

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: the sandbox-user half of this test needs root; skipped");
        return;
    }
    let script = format!(
        "echo uid=$(id -u); cat {} > /dev/null 2>&1; echo cat_exit=$?; exec sleep 4102",
        log.display()
    );
    let created = cli_in(
        &up.dir,
        &endpoints,
        &["sandbox", "create", "probe", "--", "sh", "-c", &script],
    );
    assert!(created.status.success(), "{created:?}");
    let sandbox: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    let id = sandbox["id"].as_str().expect("an id").to_string();
    let stdout = data
        .join("executions")
        .join(&id)
        .join("1")
        .join("stdout.log");
    let mut printed = String::new();
    eventually("the probe reports", Duration::from_secs(20), || {
        printed = std::fs::read_to_string(&stdout).unwrap_or_default();
        printed.contains("cat_exit=")
    });
    let uid: u32 = printed
        .lines()
        .find_map(|line| line.strip_prefix("uid="))
        .and_then(|uid| uid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in {printed:?}"));
    assert_ne!(uid, 0, "the sandbox runs as root");
    let cat_exit: i32 = printed
        .lines()
        .find_map(|line| line.strip_prefix("cat_exit="))
        .and_then(|code| code.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cat exit status in {printed:?}"));
    assert_ne!(cat_exit, 0, "the sandbox read the Raft log: {printed}");

    let deleted = cli_in(&up.dir, &endpoints, &["sandbox", "delete", "probe"]);
    assert!(deleted.status.success(), "{deleted:?}");
}
