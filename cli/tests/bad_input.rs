//! Bad input through the real CLI and a real replica process: the answer
//! is the field's reason at once, not a failover that ends in "no replica
//! reachable" (the 47 KB of trailers a 20,000-character name used to come
//! back with), and not a reset stream (a request over the size limit).

mod support;

use std::time::{Duration, Instant};

use support::cli;
use support::cluster::*;

/// Well under the client's 15 s failover deadline: no retries happened.
const ANSWER_WITHIN: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_reason_at_once() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);

    let long_name = "n".repeat(20_000);
    let started = Instant::now();
    let output = cli(&endpoints, &["workspace", "create", &long_name]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(INVALID_NAME)"), "{stderr}");
    assert!(stderr.len() < 1_024, "{} bytes: {stderr}", stderr.len());
    assert!(started.elapsed() < ANSWER_WITHIN, "{:?}", started.elapsed());

    // A policy document far over the request size limit (5 MiB).
    let dir = tempfile::tempdir().unwrap();
    let document = dir.path().join("policy.json");
    std::fs::write(&document, "p".repeat(5 * 1024 * 1024)).unwrap();
    let started = Instant::now();
    let output = cli(
        &endpoints,
        &[
            "policy",
            "set",
            "any-sandbox",
            "--file",
            document.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(REQUEST_TOO_LARGE)"), "{stderr}");
    assert!(started.elapsed() < ANSWER_WITHIN, "{:?}", started.elapsed());

    // The replica logged no error for either.
    let log = cluster.replica(1).log();
    assert!(!log.contains("ERROR"), "{log}");
}
