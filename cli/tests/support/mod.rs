//! Helpers for end-to-end tests that drive the real `palisade` binary:
//! free ports, replica processes, CLI calls and process-table checks; and,
//! for the cluster tests, a [`Cluster`] of replica processes that cleans up
//! after itself, gRPC probes of each replica's view, and a [`Workload`] of
//! concurrent clients that records every acknowledged operation.
// Each test binary uses a different part of this module.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use palisade_testkit::ReplicaProcess;
use serde_json::Value;

pub use palisade_testkit::logs::KeepLogsOnFailure;
pub use palisade_testkit::processes::{alive, pids_running, process_state, signal};

pub mod cluster;
pub mod docker;

/// The binary under test.
pub fn palisade() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_palisade"))
}

/// `count` consecutive free loopback ports.
pub fn free_ports(count: u16) -> u16 {
    palisade_testkit::ports::free_ports(count).expect("free loopback ports")
}

/// A `palisade up --base-port` for 3 replicas whose public (+0), peer (+100)
/// and metrics (+200) ports are all free now: any of them taken would keep
/// a replica from starting.
pub fn free_up_base_port() -> u16 {
    palisade_testkit::ports::free_port_blocks(3, &[0, 100, 200]).expect("free loopback ports")
}

/// Tests stop sandboxes quickly unless they say otherwise.
pub fn with_default_stop_grace(extra_args: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = extra_args.iter().map(|arg| arg.to_string()).collect();
    if !args.iter().any(|arg| arg == "--stop-grace-seconds") {
        args.extend(["--stop-grace-seconds".to_string(), "2".to_string()]);
    }
    args
}

/// One `palisade gateway run` replica with its data in `root/node-ID` and
/// the driver directory `root/executions`, not started yet.
pub fn replica(node_id: u64, address: &str, root: &Path, initial_cluster: &str) -> ReplicaProcess {
    let mut replica = ReplicaProcess::new(
        &palisade(),
        node_id,
        address,
        root.join(format!("node-{node_id}")),
        root.join("executions"),
        initial_cluster,
    );
    replica.extra_args = with_default_stop_grace(&[]);
    replica
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

/// Polls `check` until it holds.
pub fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
