//! `palisade up` supervises its replicas (issue 20, item 1; issue 14,
//! item 2's "up restarts it"): the leader SIGKILLed, `up` prints the exit,
//! restarts it after its backoff, prints the new leader with its term and
//! the time without a leader, the cluster keeps serving, and Ctrl-C
//! (SIGINT to `up`) stops every replica, the restarted one included.
//! The real binary, as a user runs it.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::cluster::cluster_info;
use support::{alive, free_up_base_port, palisade, signal};

const PHASE_TIMEOUT: Duration = Duration::from_secs(90);

/// A running `palisade up`; on drop (a failed test) it is stopped with
/// SIGINT, then SIGKILL, and every replica pid it printed is killed.
struct Up {
    child: Child,
    output: PathBuf,
}

impl Up {
    fn start(data_dir: &Path, base_port: u16, output: PathBuf) -> Up {
        let stdout = std::fs::File::create(&output).unwrap();
        let stderr = stdout.try_clone().unwrap();
        let child = Command::new(palisade())
            .args(["up", "--replicas", "3", "--base-port"])
            .arg(base_port.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start palisade up");
        Up { child, output }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits until the output has a line for which `find` returns a value.
    fn wait_line<T>(&self, what: &str, find: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            if let Some(found) = self.output().lines().find_map(&find) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "palisade up never printed {what}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for `up` to exit; fails with `what` and the output if it does
    /// not.
    fn wait_exit(&mut self, what: &str) -> ExitStatus {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for `up` to say the cluster is up.
    fn wait_up(&self) {
        self.wait_line("Palisade is up", |line| {
            line.starts_with("Palisade is up").then_some(())
        });
    }

    /// The pid `up` printed for replica `node` when it started it.
    fn started_pid(&self, node: u64) -> u32 {
        self.wait_line(&format!("replica {node}'s pid"), |line| {
            let rest = line.strip_prefix(&format!("replica {node}: "))?;
            let (_, pid) = rest.split_once("(pid ")?;
            pid.split(',').next()?.parse::<u32>().ok()
        })
    }

    /// Every replica pid `up` printed (started and restarted).
    fn replica_pids(&self) -> Vec<u32> {
        self.output()
            .lines()
            .filter_map(|line| {
                let (_, rest) = line.split_once("(pid ")?;
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(self.child.id(), libc::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for pid in self.replica_pids() {
            if alive(pid) {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_restarts_a_killed_leader_and_prints_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_up_base_port();
    let mut up = Up::start(&dir.path().join("cluster"), base, dir.path().join("up.out"));
    up.wait_up();
    // `up` names each replica's status page (BASE_PORT + 200 + N - 1).
    for node in 1..=3u16 {
        let url = format!("http://127.0.0.1:{}/", base + 200 + node - 1);
        let expected = format!("replica {node} status page: {url}");
        up.wait_line("the status page URL", |line| {
            line.starts_with(&expected).then_some(())
        });
    }
    // `up` runs TLS: the probes and the CLI use the admin credential it made.
    let pki = dir.path().join("cluster");
    let read = |name: &str| std::fs::read_to_string(pki.join(name)).unwrap();
    let uri = |node: u64| format!("https://127.0.0.1:{}", base + node as u16 - 1);
    for node in 1..=3 {
        palisade_testkit::probe::register_tls(
            &uri(node),
            &read("ca.pem"),
            Some((&read("admin.pem"), &read("admin-key.pem"))),
        );
    }
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let first_leader = loop {
        if let Some(info) = cluster_info(&uri(1)).await
            && let Some(leader) = info.leader_id
            && cluster_info(&uri(leader))
                .await
                .is_some_and(|info| info.leader_id == Some(leader))
        {
            break leader;
        }
        assert!(Instant::now() < deadline, "no leader:\n{}", up.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pid = up.started_pid(first_leader);

    signal(pid, libc::SIGKILL);
    up.wait_line("the exit", |line| {
        line.contains(&format!("replica {first_leader} exited (signal: 9"))
            .then_some(())
    });
    // Usually the others elect a new leader before the restart (2 s); on a
    // loaded machine the restarted leader may resume its term first.
    let new_leader_line = up.wait_line("the next leader", |line| {
        (line.contains(&format!(", was node {first_leader} (term"))
            || line.contains(&format!("leader: node {first_leader} (term"))
                && line.contains(") again;"))
        .then(|| line.to_string())
    });
    println!("{new_leader_line}");
    assert!(new_leader_line.contains("s without a leader"));
    let restarted = up.wait_line("the restart", |line| {
        let rest = line
            .split_once(&format!("replica {first_leader} restarted (pid "))?
            .1;
        rest.trim_end_matches(')').parse::<u32>().ok()
    });
    assert_ne!(restarted, pid);

    // The cluster serves, and the restarted replica rejoins.
    let created = Command::new(palisade())
        // No --endpoint: `up` recorded its endpoints in the config.
        .args(["workspace", "create", "after-failover"])
        .env("PALISADE_CONFIG", pki.join("config.json"))
        .stdin(Stdio::null())
        .output()
        .expect("run palisade CLI");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        if let Some(info) = cluster_info(&uri(first_leader)).await
            && info.leader_id.is_some()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted replica did not rejoin:\n{}",
            up.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Ctrl-C stops everything.
    signal(up.child.id(), libc::SIGINT);
    let status = up.wait_exit("up did not stop");
    let output = up.output();
    println!("{output}");
    assert!(status.success(), "up exited with {status}:\n{output}");
    assert!(
        output.contains("stopped (sandboxes keep running"),
        "{output}"
    );
    for pid in up.replica_pids() {
        assert!(!alive(pid), "replica pid {pid} outlived up:\n{output}");
    }
}

/// A replica that cannot start (its peer port is taken) ends `up` with the
/// replica's own reason, printed once, instead of a wait for a leader that
/// cannot come.
#[test]
fn up_ends_with_the_reason_a_replica_could_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_up_base_port();
    let peer_port = base + 100;
    let _taken = std::net::TcpListener::bind(("127.0.0.1", peer_port)).unwrap();
    let mut up = Up::start(&dir.path().join("cluster"), base, dir.path().join("up.out"));
    let status = up.wait_exit("up did not give up");
    let output = up.output();
    assert_eq!(status.code(), Some(1), "{output}");
    let reason = format!("cannot listen on 127.0.0.1:{peer_port}: Address already in use");
    let errors: Vec<&str> = output
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{output}");
    assert!(
        errors[0]
            .starts_with("error: replica 1 exited (exit status: 1) before the cluster was up: ")
            && errors[0].contains(&reason)
            && errors[0].matches("Address already in use").count() == 1,
        "{output}"
    );
    for pid in up.replica_pids() {
        assert!(!alive(pid), "replica pid {pid} outlived up:\n{output}");
    }
}

/// A replica restarted while its port is taken exits again, and `up`
/// prints why under the exit; it starts once the port is free.
#[test]
fn up_prints_why_a_restarted_replica_exited() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_up_base_port();
    let up = Up::start(&dir.path().join("cluster"), base, dir.path().join("up.out"));
    up.wait_up();
    let pid = up.started_pid(2);
    signal(pid, libc::SIGKILL);
    up.wait_line("the exit", |line| {
        line.contains("replica 2 exited (signal: 9").then_some(())
    });
    // Taken before the restart (2 s after the exit): the restarted replica
    // cannot listen on its public port.
    let taken = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let reason = up.wait_line("the reason", |line| {
        line.split_once("] replica 2: cannot listen on ")
            .map(|(_, rest)| rest.to_string())
    });
    assert!(
        reason.starts_with(&format!("127.0.0.1:{}: Address already in use", base + 1)),
        "{reason}"
    );
    // A kill by signal has no reason of its own: nothing is printed under it.
    let output = up.output();
    let lines: Vec<&str> = output.lines().collect();
    let killed = lines
        .iter()
        .position(|line| line.contains("replica 2 exited (signal: 9"))
        .unwrap();
    assert!(!lines[killed + 1].contains("] replica 2: "), "{output}");
    // Freed, the port is the replica's again at the next restart.
    let restarts = output.matches("replica 2 restarted (pid ").count();
    drop(taken);
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while up.output().matches("replica 2 restarted (pid ").count() == restarts {
        assert!(Instant::now() < deadline, "no restart:\n{}", up.output());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let output = up.output();
    let after = output.rsplit("replica 2 restarted (pid ").next().unwrap();
    assert!(!after.contains("replica 2 exited"), "{output}");
}

/// A replica paused by SIGSTOP still accepts connections (its kernel
/// does) and never answers the TLS handshake. The CLI, whose first
/// endpoint it is, moves on to the others: the write succeeds and `cluster
/// status` answers, each within a bound, instead of waiting on the
/// handshake for as long as the pause lasts.
#[test]
fn the_cli_moves_past_a_paused_replica() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_up_base_port();
    let up = Up::start(&dir.path().join("cluster"), base, dir.path().join("up.out"));
    up.wait_up();
    let pid = up.started_pid(1);
    signal(pid, libc::SIGSTOP);
    let config = dir.path().join("cluster").join("config.json");
    let run = |args: &[&str]| {
        let started = Instant::now();
        let mut child = Command::new(palisade())
            .args(args)
            .env("PALISADE_CONFIG", &config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run palisade CLI");
        // Far below the pause (unbounded) and the CLI's own call timeout
        // (150 s): a connect to the paused replica gives up after 2 s.
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(45) {
                let _ = child.kill();
                signal(pid, libc::SIGCONT);
                panic!("palisade {args:?} still waits after 45 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().unwrap()
    };
    let created = run(&["workspace", "create", "while-paused"]);
    let status = run(&["cluster", "status"]);
    signal(pid, libc::SIGCONT);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let status_out = String::from_utf8_lossy(&status.stdout);
    // The paused replica is reported, the others answer, one leads.
    let replica = |port: u16| {
        status_out
            .lines()
            .find(|line| line.starts_with(&format!("https://127.0.0.1:{port} ")))
            .unwrap_or_default()
    };
    assert!(replica(base).contains("UNREACHABLE"), "{status_out}");
    assert!(
        [base + 1, base + 2]
            .iter()
            .any(|port| replica(*port).contains(" Leader ")),
        "{status_out}\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
}
