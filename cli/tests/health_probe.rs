//! `palisade health` against a real TLS replica: SERVING with the cluster
//! CA alone (no client credential), per service; a failure (exit 1) for
//! an unknown service, a CA that did not issue the replica's certificate,
//! plaintext against a TLS port, and a port where nothing listens.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use palisade_testkit::ClusterSpec;
use support::cluster::Cluster;
use support::palisade;

fn health(endpoint: &str, args: &[&str]) -> Output {
    Command::new(palisade())
        .args(["--endpoint", endpoint, "health"])
        .args(args)
        .env_remove("PALISADE_CONFIG")
        .env_remove("PALISADE_HEALTH_CA")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run palisade health")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn health_reports_serving_with_the_ca_alone_and_fails_otherwise() {
    let cluster = Cluster::start_spec(ClusterSpec::new(palisade(), 1).with_tls());
    let address = cluster.replica(1).address().to_string();
    let ca = cluster.root().join("ca.pem");
    let ca = ca.to_str().unwrap();

    // Probed until it serves, as a readiness probe does.
    let start = std::time::Instant::now();
    let output = loop {
        let output = health(&address, &["--ca", ca]);
        if output.status.success() || start.elapsed() > std::time::Duration::from_secs(60) {
            break output;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("SERVING"), "{}", text(&output));

    let output = health(
        &address,
        &[
            "--ca",
            ca,
            "--service",
            "palisade.v1.Palisade",
            "-o",
            "json",
        ],
    );
    assert!(output.status.success(), "{}", text(&output));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(rows[0]["status"], "SERVING", "{rows}");

    let output = health(&address, &["--ca", ca, "--service", "no.such.Service"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("SERVICE_UNKNOWN"),
        "{}",
        text(&output)
    );

    // A CA that did not issue the replica's certificate: no handshake.
    let other = tempfile::tempdir().unwrap();
    let init = Command::new(palisade())
        .args(["cluster", "init-pki", "--nodes", "1", "--dir"])
        .arg(other.path())
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init));
    let other_ca = other.path().join("ca.pem");
    let output = health(&address, &["--ca", other_ca.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("UNREACHABLE"), "{}", text(&output));

    // Plaintext against the TLS port.
    let output = health(&address, &["--insecure"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));

    // Nothing listening; with two endpoints, one bad one fails the probe.
    let closed = format!("127.0.0.1:{}", support::free_ports(1));
    let output = health(&format!("{address},{closed}"), &["--ca", ca]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("1 of 2 endpoint(s) not serving"),
        "{}",
        text(&output)
    );
    assert!(Path::new(ca).exists());
}

/// The image sets PALISADE_HEALTH_CA; a replica run there with `--insecure`
/// is probed with `palisade --insecure health`, which must ask over
/// plaintext and not fail on the (absent) CA file.
#[test]
fn insecure_health_ignores_the_images_ca_variable() {
    let cluster = Cluster::start_spec(ClusterSpec::new(palisade(), 1));
    let address = cluster.replica(1).address().to_string();
    let probe = || {
        Command::new(palisade())
            .args(["--insecure", "--endpoint", &address, "health"])
            .env_remove("PALISADE_CONFIG")
            .env("PALISADE_HEALTH_CA", "/nonexistent/pki/ca.pem")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .output()
            .expect("run palisade health")
    };
    let start = std::time::Instant::now();
    let output = loop {
        let output = probe();
        if output.status.success() || start.elapsed() > std::time::Duration::from_secs(60) {
            break output;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("SERVING"), "{}", text(&output));
}
