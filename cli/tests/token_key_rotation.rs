//! `palisade cluster rotate-token-key` against a real three-replica TLS
//! cluster (separate mTLS peer ports, as `palisade up` runs it), asked
//! through a follower (which relays it to the leader over the peer port):
//!
//! - a token minted before the rotation still verifies within the grace
//!   (a conditional stop with it succeeds);
//! - a token minted after it uses the new key (it differs from the old
//!   token of the same execution, and it verifies);
//! - once the replicated clock passes the deadline, an old token is refused
//!   with UNVERIFIABLE_EXECUTION_TOKEN by every replica, and nothing
//!   happens to its sandbox; a new token of the same sandbox still works;
//! - `--grace-seconds 0` refuses the replaced key's tokens at once;
//! - the command prints key ids and the deadline, never key material.
//!
//! The replicas tick every 200 ms so that a short grace ends within the
//! test (the replicated clock moves only with ticks).

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use palisade_testkit::{ClusterSpec, LocalCluster};
use serde_json::Value;

use support::palisade;

const GRACE_SECONDS: u64 = 8;

struct Cli {
    config: std::path::PathBuf,
}

impl Cli {
    fn run(&self, endpoint: &str, args: &[&str]) -> Output {
        Command::new(palisade())
            .arg("--config")
            .arg(&self.config)
            .args(["--endpoint", endpoint])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run the palisade CLI")
    }

    fn json(&self, endpoint: &str, args: &[&str]) -> Value {
        let mut full = vec!["-o", "json"];
        full.extend_from_slice(args);
        let output = self.run(endpoint, &full);
        assert!(
            output.status.success(),
            "palisade {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        serde_json::from_slice(&output.stdout).expect("JSON output")
    }

    /// `sandbox stop NAME --expected-execution TOKEN`: Ok(phase) or
    /// Err(stderr).
    fn stop_with(&self, endpoint: &str, name: &str, token: &str) -> Result<String, String> {
        let output = self.run(
            endpoint,
            &[
                "-o",
                "json",
                "sandbox",
                "stop",
                name,
                "--expected-execution",
                token,
            ],
        );
        if output.status.success() {
            let sandbox: Value = serde_json::from_slice(&output.stdout).expect("JSON output");
            Ok(sandbox["phase"].as_str().unwrap_or_default().to_string())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn token_of(&self, endpoint: &str, name: &str) -> String {
        let sandbox = self.json(endpoint, &["sandbox", "get", name]);
        let token = sandbox["execution_token"].as_str().unwrap_or_default();
        assert!(token.starts_with("pet1."), "{sandbox}");
        token.to_string()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// Whether `text` holds a run of 64 hex digits (a key).
fn has_key_material(text: &str) -> bool {
    let mut run = 0;
    for character in text.chars() {
        run = if character.is_ascii_hexdigit() {
            run + 1
        } else {
            0
        };
        if run >= 64 {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn old_tokens_verify_until_the_deadline_and_new_ones_use_the_new_key() {
    let cluster = tokio::task::block_in_place(|| {
        LocalCluster::start(ClusterSpec::new(palisade(), 3).with_tls().gateway_args([
            "--driver",
            "noop",
            "--tick-interval-ms",
            "200",
        ]))
        .expect("start a TLS cluster")
    });
    let (leader, _) = cluster
        .wait_for_leader(&cluster.node_ids(), Duration::from_secs(30))
        .await
        .expect("a leader");
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let cli = Cli {
        config: cluster
            .client_config()
            .expect("a TLS cluster has a client config"),
    };
    let all = cluster.cli_endpoints(&cluster.node_ids());
    let at_follower = cluster.cli_endpoints(&[follower]);

    tokio::task::block_in_place(|| {
        for name in ["before", "after", "late", "revoked"] {
            cli.json(&all, &["sandbox", "create", name, "--", "sleep", "1000"]);
        }
        let before = cli.token_of(&all, "before");
        let late_old = cli.token_of(&all, "late");

        // Rotate through a follower: it relays the call to the leader.
        let rotated = cli.json(
            &at_follower,
            &[
                "cluster",
                "rotate-token-key",
                "--grace-seconds",
                &GRACE_SECONDS.to_string(),
            ],
        );
        let asked_at = now_ms();
        assert_eq!(rotated["key_id"], 2, "{rotated}");
        assert_eq!(rotated["retired_key_id"], 1, "{rotated}");
        let deadline_ms = rotated["retired_valid_until_ms"]
            .as_i64()
            .expect("a deadline");
        let rotated_at_ms = rotated["rotated_at_ms"].as_i64().expect("a rotation time");
        assert_eq!(deadline_ms - rotated_at_ms, GRACE_SECONDS as i64 * 1000);
        assert!(
            rotated["retired_valid_until"]
                .as_str()
                .is_some_and(|utc| utc.ends_with('Z')),
            "{rotated}"
        );
        assert_eq!(rotated["retired_keys"][0]["key_id"], 1, "{rotated}");
        assert!(!has_key_material(&rotated.to_string()), "{rotated}");
        let table = cli.run(&all, &["cluster", "rotate-token-key", "--help"]);
        assert!(table.status.success());

        // Within the grace: the old token still verifies.
        assert_eq!(
            cli.stop_with(&all, "before", &before).as_deref(),
            Ok("STOPPED"),
            "a token minted before the rotation is refused within its grace"
        );
        assert!(
            now_ms() < deadline_ms,
            "the grace ended before the test could use it (machine too slow)"
        );

        // A token minted after the rotation uses the new key.
        let late_new = cli.token_of(&all, "late");
        assert_ne!(
            late_new, late_old,
            "the same execution's token did not change: not minted with a new key"
        );
        let after = cli.token_of(&all, "after");
        assert_eq!(
            cli.stop_with(&all, "after", &after).as_deref(),
            Ok("STOPPED")
        );

        // After the deadline (on the replicated clock, which the 200 ms
        // ticks bring close to the wall clock): the old token is refused.
        // `before` is stopped already, so probing with its token changes
        // nothing either way.
        let give_up = Instant::now() + Duration::from_millis(GRACE_SECONDS * 1000 + 15_000);
        loop {
            match cli.stop_with(&all, "before", &before) {
                Ok(phase) => {
                    assert_eq!(phase, "STOPPED");
                    assert!(
                        Instant::now() < give_up,
                        "the old key still verifies long after its deadline"
                    );
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(refusal) => {
                    assert!(
                        refusal.contains("UNVERIFIABLE_EXECUTION_TOKEN"),
                        "{refusal}"
                    );
                    assert!(
                        now_ms() >= deadline_ms,
                        "the old key was refused before its deadline ({} ms early; asked at {asked_at})",
                        deadline_ms - now_ms()
                    );
                    break;
                }
            }
        }
        // Every replica refuses it, and the sandbox is untouched.
        for node in cluster.node_ids() {
            let refusal = cli
                .stop_with(&cluster.cli_endpoints(&[node]), "late", &late_old)
                .expect_err("an old token verified after the deadline");
            assert!(
                refusal.contains("UNVERIFIABLE_EXECUTION_TOKEN"),
                "node {node}: {refusal}"
            );
        }
        let late = cli.json(&all, &["sandbox", "get", "late"]);
        assert_eq!(late["phase"], "READY", "{late}");
        // The sandbox's current token (new key) still works.
        assert_eq!(
            cli.stop_with(&all, "late", &late_new).as_deref(),
            Ok("STOPPED")
        );

        // No grace: the replaced key is refused at once.
        let revoked_old = cli.token_of(&all, "revoked");
        let output = cli.run(
            &all,
            &["cluster", "rotate-token-key", "--grace-seconds", "0"],
        );
        assert!(output.status.success(), "{output:?}");
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(
            printed.contains("key 3") && printed.contains("tokens of key 2 are refused"),
            "{printed}"
        );
        assert!(!has_key_material(&printed), "{printed}");
        let refusal = cli
            .stop_with(&all, "revoked", &revoked_old)
            .expect_err("a token of a key rotated out with no grace verified");
        assert!(
            refusal.contains("UNVERIFIABLE_EXECUTION_TOKEN"),
            "{refusal}"
        );
    });
}
