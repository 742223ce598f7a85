//! `gateway run --worker-threads`: a replica runs its async runtime with
//! that many worker threads (it logs the runtime's own count at start) and
//! serves with them; a value outside 1-1024 is refused before anything
//! starts, naming the flag.

mod support;

use std::process::Command;

use support::cluster::*;
use support::{cli_json, palisade};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_runs_the_runtime_threads_it_is_given() {
    let cluster = Cluster::start(3, &["--driver", "noop", "--worker-threads", "1"]);
    let ids = cluster.node_ids();
    cluster.wait_for_leader(&ids).await;
    let endpoints = cluster.cli_endpoints(&ids);
    let created = cli_json(&endpoints, &["sandbox", "create", "one-thread"]);
    assert_eq!(created["phase"], "READY", "{created}");
    for id in ids {
        let log = cluster.replica(id).log();
        let line = log
            .lines()
            .find(|line| line.contains("async runtime worker threads"))
            .unwrap_or_else(|| panic!("replica {id} logged no runtime line: {log}"));
        assert!(line.contains("threads=1"), "replica {id}: {line}");
    }
}

#[test]
fn worker_threads_out_of_range_are_refused() {
    for value in ["0", "1025", "two"] {
        let output = Command::new(palisade())
            .args([
                "gateway",
                "run",
                "--node-id",
                "1",
                "--insecure",
                "--worker-threads",
                value,
            ])
            .output()
            .expect("run palisade");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '--worker-threads")),
            "{value}: {stderr}"
        );
    }
}
