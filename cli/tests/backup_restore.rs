//! Backup and restore through the real binary (noop driver): `palisade
//! cluster snapshot save` on a 3-replica cluster with workspaces and
//! sandboxes, then `palisade cluster restore` of every replica of a fresh
//! 3-replica cluster from that one file (each with its own node id and the
//! new cluster's `--initial-cluster`). The copy is consistent (its digest
//! is the source's state digest at its index), the restored replicas agree
//! on one state, the sandboxes read back exactly as they were, the log
//! goes on after the backup's index, the new cluster has a new id and the
//! source's execution tokens still verify (the key is kept by default).
//! A damaged, truncated or foreign file, and a used data directory, are
//! refused with a message that says so.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::cluster::*;
use support::{cli, cli_json};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Every sandbox of every workspace, by id, as `sandbox list -A -o json`
/// prints them.
fn all_sandboxes(endpoints: &str) -> Vec<Value> {
    let listed = cli_json(endpoints, &["sandbox", "list", "-A"]);
    let mut sandboxes = listed.as_array().expect("a JSON array").clone();
    sandboxes.sort_by_key(|sandbox| sandbox["id"].as_str().unwrap_or_default().to_string());
    sandboxes
}

fn workspace_names(endpoints: &str) -> Vec<String> {
    let listed = cli_json(endpoints, &["workspace", "list"]);
    let mut names: Vec<String> = match &listed {
        Value::Array(workspaces) => workspaces
            .iter()
            .map(|workspace| workspace["name"].as_str().unwrap_or_default().to_string())
            .collect(),
        one => vec![one["name"].as_str().unwrap_or_default().to_string()],
    };
    names.sort();
    names
}

/// `cluster snapshot save FILE`, retried until no entry was applied on
/// any replica while it ran, so the file's digest can be compared with
/// every replica's digest at the file's index. Returns the save's JSON.
async fn save_at_a_quiet_moment(cluster: &Cluster, endpoints: &str, file: &Path) -> Value {
    let ids = cluster.node_ids();
    for _attempt in 0..10 {
        cluster.wait_caught_up(&ids).await;
        let saved = cli_json(
            endpoints,
            &["cluster", "snapshot", "save", file.to_str().unwrap()],
        );
        let index = saved["applied_index"].as_u64().expect("applied_index");
        let mut quiet = true;
        for id in &ids {
            let info = cluster_info(&cluster.replica(*id).uri())
                .await
                .expect("a replica answers");
            if info.applied_index != index {
                quiet = false;
                break;
            }
            assert_eq!(
                info.state_digest, saved["state_digest"],
                "node {id} reports another digest at the backup's index {index}"
            );
        }
        if quiet {
            return saved;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("the cluster never stayed still while a snapshot was saved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_restores_into_a_fresh_three_replica_cluster() {
    let source = Cluster::start(3, &["--driver", "noop"]);
    let source_ids = source.node_ids();
    source.wait_for_leader(&source_ids).await;
    let endpoints = source.cli_endpoints(&source_ids);

    // Some state: two workspaces, sandboxes in both, one stopped and
    // started again (generation 2), one stopped.
    cli_json(&endpoints, &["workspace", "create", "team-a"]);
    for name in ["alpha", "beta", "gamma"] {
        cli_json(&endpoints, &["sandbox", "create", name]);
    }
    cli_json(
        &endpoints,
        &["--workspace", "team-a", "sandbox", "create", "delta"],
    );
    cli_json(&endpoints, &["sandbox", "stop", "beta"]);
    cli_json(&endpoints, &["sandbox", "start", "beta"]);
    cli_json(&endpoints, &["sandbox", "stop", "gamma"]);
    let token = cli_json(&endpoints, &["sandbox", "get", "alpha"])["execution_token"]
        .as_str()
        .expect("a token")
        .to_string();

    let backups = tempfile::tempdir().unwrap();
    let file = backups.path().join("cluster.backup");
    let saved = save_at_a_quiet_moment(&source, &endpoints, &file).await;
    let index = saved["applied_index"].as_u64().unwrap();
    let source_cluster_id = saved["cluster_id"].as_str().unwrap().to_string();
    assert!(!source_cluster_id.is_empty(), "{saved}");
    let source_sandboxes = all_sandboxes(&endpoints);
    assert_eq!(source_sandboxes.len(), 4);
    let source_workspaces = workspace_names(&endpoints);
    drop(source);

    // The file is the owner's only: it holds the execution-token key.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    }

    // Every replica of a fresh cluster, restored from the one file.
    let mut restored = Cluster::prepare(3, &["--driver", "noop"]);
    let initial_cluster = restored.initial_cluster().to_string();
    let mut restored_digests = Vec::new();
    for id in restored.node_ids() {
        let data_dir = restored.replica(id).data_dir.clone();
        let report = cli_json(
            "127.0.0.1:1",
            &[
                "cluster",
                "restore",
                file.to_str().unwrap(),
                "--data-dir",
                data_dir.to_str().unwrap(),
                "--node-id",
                &id.to_string(),
                "--initial-cluster",
                &initial_cluster,
            ],
        );
        assert_eq!(report["applied_index"], index, "{report}");
        assert_eq!(report["source_state_digest"], saved["state_digest"]);
        assert_eq!(report["token_key"], "kept");
        restored_digests.push(report["restored_state_digest"].clone());
    }
    assert!(
        restored_digests.windows(2).all(|pair| pair[0] == pair[1]),
        "every replica starts from the same state: {restored_digests:?}"
    );
    restored.start_all().unwrap();
    let ids = restored.node_ids();
    restored.wait_for_leader(&ids).await;
    let endpoints = restored.cli_endpoints(&ids);

    // A new cluster id (chosen by the new first leader), the log going on
    // after the backup's index, and one state on every replica.
    let deadline = Instant::now() + TIMEOUT;
    let infos = loop {
        restored.wait_caught_up(&ids).await;
        let mut infos = Vec::new();
        for id in &ids {
            infos.push(
                cluster_info(&restored.replica(*id).uri())
                    .await
                    .expect("a restored replica answers"),
            );
        }
        let settled = infos.iter().all(|info| {
            !info.cluster_id.is_empty() && info.applied_index == infos[0].applied_index
        });
        if settled {
            break infos;
        }
        assert!(Instant::now() < deadline, "{infos:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for info in &infos {
        assert_ne!(info.cluster_id, source_cluster_id, "a new cluster id");
        assert_eq!(info.cluster_id, infos[0].cluster_id);
        assert!(info.applied_index > index, "{info:?}");
        assert_eq!(info.state_digest, infos[0].state_digest, "{infos:?}");
        let voters: Vec<u64> = info.members.iter().map(|member| member.node_id).collect();
        assert_eq!(voters, ids, "the new cluster's members");
    }

    // The sandboxes read back exactly as they were (tokens included: the
    // key and its domain were kept), and so do the workspaces.
    assert_eq!(all_sandboxes(&endpoints), source_sandboxes);
    assert_eq!(workspace_names(&endpoints), source_workspaces);

    // The source's token is a valid precondition in the restored cluster,
    // and new writes get resource versions after the backup's index.
    cli_json(
        &endpoints,
        &["sandbox", "stop", "alpha", "--expected-execution", &token],
    );
    let created = cli_json(&endpoints, &["sandbox", "create", "epsilon"]);
    assert!(
        created["resource_version"].as_u64().unwrap() > index,
        "{created}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_backup_or_a_used_data_dir_is_refused() {
    let source = Cluster::start(1, &["--driver", "noop"]);
    source.wait_for_leader(&[1]).await;
    let endpoints = source.cli_endpoints(&[1]);
    cli_json(&endpoints, &["sandbox", "create", "alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("good.backup");
    cli_json(
        &endpoints,
        &["cluster", "snapshot", "save", file.to_str().unwrap()],
    );
    drop(source);
    let good = std::fs::read(&file).unwrap();

    let restore = |file: &Path, data_dir: &Path, node_id: &str| {
        cli(
            "127.0.0.1:1",
            &[
                "cluster",
                "restore",
                file.to_str().unwrap(),
                "--data-dir",
                data_dir.to_str().unwrap(),
                "--node-id",
                node_id,
                "--initial-cluster",
                "1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103",
            ],
        )
    };
    let refused = |name: &str, bytes: &[u8], expected: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let data_dir = dir.path().join(format!("data-{name}"));
        let output = restore(&path, &data_dir, "1");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(
            !data_dir.exists(),
            "{name}: nothing may be written for a refused backup"
        );
    };

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    refused("flipped", &flipped, "damaged: its SHA-256");
    refused("truncated", &good[..good.len() - 100], "truncated");
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    refused(
        "newer",
        &newer,
        "backup format version 2 is not supported: this palisade reads version 1",
    );
    refused("foreign", b"{\"workspaces\": {}}", "not a Palisade backup");

    // A data directory that holds anything is never overwritten.
    let used = dir.path().join("used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("raft-log"), b"a live replica's log").unwrap();
    let output = restore(&file, &used, "1");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(
        std::fs::read(used.join("raft-log")).unwrap(),
        b"a live replica's log"
    );

    // A node id outside the new cluster is refused; the good file into a
    // new directory is restored.
    let output = restore(&file, &dir.path().join("node-9"), "9");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("node 9 is not in --initial-cluster"));
    let output = restore(&file, &dir.path().join("node-1"), "1");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
