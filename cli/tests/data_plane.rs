//! End-to-end: a sandbox's data plane through the real binary and the real
//! process driver: `exec` in the persistent working directory (a sentinel
//! file survives stop/start; INVALID_PHASE while STOPPED; the directory
//! and every exec'd process are gone once delete answers), and `logs`
//! (plain, `--tail`, and `-f` across a leader change without losing or
//! repeating a line).

mod support;

use std::time::{Duration, Instant};

use support::cluster::*;
use support::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sentinel_survives_stop_start_and_delete_removes_the_workdir() {
    let cluster = Cluster::start(1, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "exec_sentinel_survives_stop_start_and_delete_removes_the_workdir",
    };
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);
    let created = cli_json_async(
        &endpoints,
        &["sandbox", "create", "box", "--env", "GREETING=hello"],
    )
    .await;
    assert_eq!(created["phase"], "READY", "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let workdir = cluster.driver_dir.join(".workdirs").join(&id);

    // exec: in the working directory, with the sandbox's environment.
    let wrote = cli_async(
        &endpoints,
        &[
            "sandbox",
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo sentinel-4711 > sentinel.txt && pwd && echo $GREETING && echo to-stderr >&2",
        ],
    )
    .await;
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
    let stdout = text(&wrote.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        std::fs::canonicalize(lines[0]).unwrap(),
        std::fs::canonicalize(&workdir).unwrap(),
        "exec runs in the sandbox's working directory"
    );
    assert_eq!(lines[1], "hello", "exec sees the sandbox's environment");
    assert_eq!(text(&wrote.stderr), "to-stderr\n");
    assert!(workdir.join("sentinel.txt").is_file());

    // The command's exit code is the CLI's.
    let failed = cli_async(
        &endpoints,
        &["sandbox", "exec", "box", "--", "sh", "-c", "exit 7"],
    )
    .await;
    assert_eq!(failed.status.code(), Some(7));
    let missing = cli_async(
        &endpoints,
        &["sandbox", "exec", "box", "--", "no-such-program"],
    )
    .await;
    assert_eq!(
        missing.status.code(),
        Some(127),
        "{}",
        text(&missing.stderr)
    );

    // Stopped: exec is refused, the file stays.
    cli_json_async(&endpoints, &["sandbox", "stop", "box"]).await;
    let refused = cli_async(
        &endpoints,
        &["sandbox", "exec", "box", "--", "cat", "sentinel.txt"],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("INVALID_PHASE"),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        workdir.join("sentinel.txt").is_file(),
        "stop keeps the working directory"
    );

    // Started again (a new generation): the file is there.
    let started = cli_json_async(&endpoints, &["sandbox", "start", "box"]).await;
    assert_eq!(started["generation"], 2);
    let read = cli_async(
        &endpoints,
        &["sandbox", "exec", "box", "--", "cat", "sentinel.txt"],
    )
    .await;
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert_eq!(text(&read.stdout), "sentinel-4711\n");

    // A long exec is running when the sandbox is deleted: once delete
    // answers, it is gone and so is the working directory.
    let mut long_exec = tokio::process::Command::new(palisade())
        .args([
            "--endpoint",
            &endpoints,
            "sandbox",
            "exec",
            "box",
            "--",
            "sleep",
            "4712",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids_running(&["sleep", "4712"]).is_empty() {
        assert!(Instant::now() < deadline, "the exec'd sleep never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deleted = cli_json_async(&endpoints, &["sandbox", "delete", "box"]).await;
    assert_eq!(deleted["deleted"], true);
    assert!(
        !workdir.exists(),
        "delete removed the working directory before answering"
    );
    assert!(
        pids_running(&["sleep", "4712"]).is_empty(),
        "delete killed the exec'd command before answering"
    );
    let ended = tokio::time::timeout(Duration::from_secs(30), long_exec.wait())
        .await
        .expect("the exec ends with its command")
        .unwrap();
    assert!(!ended.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_prints_and_tails_each_stream() {
    let cluster = Cluster::start(1, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "logs_prints_and_tails_each_stream",
    };
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);
    cli_json_async(
        &endpoints,
        &[
            "sandbox",
            "create",
            "talker",
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4; do echo out-$i; echo err-$i >&2; done; exec sleep 4713",
        ],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = cli_async(&endpoints, &["sandbox", "logs", "talker"]).await;
        assert!(logs.status.success(), "{}", text(&logs.stderr));
        if text(&logs.stdout) == "out-1\nout-2\nout-3\nout-4\n" {
            assert_eq!(text(&logs.stderr), "err-1\nerr-2\nerr-3\nerr-4\n");
            break;
        }
        assert!(Instant::now() < deadline, "logs: {}", text(&logs.stdout));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tail = cli_async(&endpoints, &["sandbox", "logs", "talker", "--tail", "2"]).await;
    assert_eq!(text(&tail.stdout), "out-3\nout-4\n");
    assert_eq!(text(&tail.stderr), "err-3\nerr-4\n");
    // Generation 1 named explicitly; generation 2 was never launched.
    let first = cli_async(
        &endpoints,
        &["sandbox", "logs", "talker", "--generation", "1"],
    )
    .await;
    assert_eq!(text(&first.stdout), "out-1\nout-2\nout-3\nout-4\n");
    let never = cli_async(
        &endpoints,
        &["sandbox", "logs", "talker", "--generation", "2"],
    )
    .await;
    assert_eq!(never.status.code(), Some(1));
    assert!(
        text(&never.stderr).contains("INVALID_GENERATION"),
        "{}",
        text(&never.stderr)
    );
}

/// `logs -f` is served by the replica it reached; that replica is the
/// leader, and it is killed mid-stream: the CLI resumes at another replica
/// from its cursors while a new leader is elected, and prints every line
/// exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_follow_survives_a_leader_change_without_losing_or_repeating() {
    const LINES: usize = 150;
    let mut cluster = Cluster::start(3, &[]);
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "logs_follow_survives_a_leader_change_without_losing_or_repeating",
    };
    let (leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    let all = cluster.cli_endpoints(&[1, 2, 3]);
    let script =
        format!("i=0; while [ $i -lt {LINES} ]; do i=$((i+1)); echo line-$i; sleep 0.04; done");
    cli_json_async(
        &all,
        &["sandbox", "create", "ticker", "--", "sh", "-c", &script],
    )
    .await;
    // The leader first: the stream is served by the replica that is killed.
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let endpoints = cluster.cli_endpoints(&[leader, others[0], others[1]]);
    let follow = tokio::process::Command::new(palisade())
        .args(["--endpoint", &endpoints, "sandbox", "logs", "ticker", "-f"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.replica_mut(leader).kill();
    let (new_leader, _) = cluster.wait_for_leader(&others).await;
    assert_ne!(new_leader, leader);
    let output = tokio::time::timeout(Duration::from_secs(120), follow.wait_with_output())
        .await
        .expect("logs -f ends when the execution ends")
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let expected: String = (1..=LINES).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(text(&output.stdout), expected, "every line once, in order");
}
