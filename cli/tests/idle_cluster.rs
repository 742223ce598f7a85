//! An idle cluster stays idle (issue 13): three `palisade gateway run`
//! processes (noop driver) holding many READY sandboxes, left alone, keep
//! a flat RSS (within 5 % of its value at the start of the idle period)
//! and use under 10 % of a core each (from `/proc/PID/stat` and
//! `/proc/PID/status`).
//!
//! The suite runs 1,000 sandboxes for 20 s. The issue's full figure,
//! 10,000 sandboxes for 60 s, is an ignored test:
//!
//! ```sh
//! cargo test --release -p palisade-cli --test idle_cluster -- --ignored --nocapture
//! ```

mod support;

use std::time::Duration;

use palisade_proto::v1;
use support::cluster::*;
use tokio::time::Instant;

/// CPU time (user + system) the process used so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    palisade_testkit::processes::cpu_seconds(pid).expect("read /proc/PID/stat")
}

/// Resident set size, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

async fn create_ready_sandboxes(uri: &str, count: usize) {
    let writers = 32;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let mut client = direct_client(uri, Duration::from_secs(60)).await;
        tasks.push(tokio::spawn(async move {
            for serial in (writer..count).step_by(writers) {
                let created = client
                    .create_sandbox(v1::CreateSandboxRequest {
                        name: format!("idle-{serial}"),
                        spec: Some(v1::SandboxSpec {
                            command: vec!["sleep".into(), "infinity".into()],
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await
                    .unwrap_or_else(|status| panic!("create idle-{serial}: {status}"))
                    .into_inner();
                assert_eq!(phase_of(&created), v1::SandboxPhase::Ready, "idle-{serial}");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a writer");
    }
}

async fn idle_cluster_stays_idle(sandboxes: usize, idle: Duration) {
    let cluster = Cluster::start(3, &["--driver", "noop"]);
    let (leader, _) = cluster.wait_for_leader(&[1, 2, 3]).await;
    let started = Instant::now();
    create_ready_sandboxes(&cluster.replica(leader).uri(), sandboxes).await;
    eprintln!(
        "{sandboxes} READY sandboxes created in {:?}",
        started.elapsed()
    );
    cluster.wait_caught_up(&[1, 2, 3]).await;
    // Let the last writes' after-effects (acknowledgements, a snapshot) settle.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let pids: Vec<(u64, u32)> = [1, 2, 3]
        .into_iter()
        .map(|id| (id, cluster.replica(id).pid()))
        .collect();
    let before: Vec<(u64, f64)> = pids
        .iter()
        .map(|(_, pid)| (rss_kib(*pid), cpu_seconds(*pid)))
        .collect();
    let measured = Instant::now();
    // Sample RSS along the way: it must stay flat throughout, not only at the end.
    let mut rss_max: Vec<u64> = before.iter().map(|(rss, _)| *rss).collect();
    while measured.elapsed() < idle {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (slot, (_, pid)) in pids.iter().enumerate() {
            rss_max[slot] = rss_max[slot].max(rss_kib(*pid));
        }
    }
    let wall = measured.elapsed().as_secs_f64();
    let mut failures = Vec::new();
    for (slot, (id, pid)) in pids.iter().enumerate() {
        let (rss_start, cpu_start) = before[slot];
        let rss_end = rss_kib(*pid);
        let cpu_share = (cpu_seconds(*pid) - cpu_start) / wall;
        eprintln!(
            "node {id}: RSS {rss_start} KiB -> {rss_end} KiB (max {} KiB), CPU {:.1} % of a core",
            rss_max[slot],
            cpu_share * 100.0
        );
        let rss_limit = rss_start + rss_start / 20;
        if rss_max[slot] > rss_limit {
            failures.push(format!(
                "node {id}: RSS grew from {rss_start} KiB to {} KiB (limit {rss_limit})",
                rss_max[slot]
            ));
        }
        if cpu_share >= 0.10 {
            failures.push(format!(
                "node {id}: {:.1} % of a core while idle",
                cpu_share * 100.0
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_with_1000_ready_sandboxes_stays_idle() {
    idle_cluster_stays_idle(1_000, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long (several minutes): the issue's full figure; run it on purpose"]
async fn an_idle_cluster_with_10000_ready_sandboxes_stays_idle_for_a_minute() {
    idle_cluster_stays_idle(10_000, Duration::from_secs(60)).await;
}
