//! Issue 13: the cost of snapshots per applied entry does not grow with the
//! state. A snapshot copies and encodes the whole state, so a replica
//! builds one only after `--snapshot-interval-entries` entries *or one
//! entry per 256 bytes of state*, whichever is more
//! (`palisade_gateway::snapshot_cadence`); before, every 5,000 entries
//! whatever the state's size, which took a soak with 24 hours of receipts
//! piling up from 920 to under 300 requests/s in four minutes. The size
//! is the one measured at the last build, not the estimate each applied
//! command grows (issue 18): spaced by that, snapshots of a state growing
//! by more than 256 bytes an entry never came.
//!
//! One `palisade gateway run` (noop driver) with `--snapshot-interval-entries
//! 20`: once a snapshot of a state over 256 KiB (four sandboxes with 64 KiB
//! specs) was built, as many small entries as the snapshot's KiB times two
//! pass without another (a fixed cadence of 20, or one entry per KiB of
//! state as before, would have built one or more), and once one entry per
//! 256 bytes of it (and a tenth more) passed, one is built.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use support::KeepLogsOnFailure;
use support::cluster::*;
use tonic::transport::Channel;

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Index of the replica's snapshot on disk (0: none yet). Peeked, not
/// opened: `SnapshotFiles::open` takes the directory over and deletes a
/// temporary file, the running replica's save in progress, or fails when
/// the save renames it first (the likely cause of a clean-clone CI failure
/// of this test 0.5 s in, with nothing in the replica's log).
fn snapshot_index(data_dir: &std::path::Path) -> u64 {
    palisade_storage::SnapshotFiles::<palisade_raft::SnapshotMeta>::peek(
        data_dir.join(palisade_gateway::node::SNAPSHOT_DIR),
    )
    .expect("read the snapshot")
    .and_then(|(meta, _)| meta.last_log_id)
    .map_or(0, |id| id.index)
}

async fn applied_index(uri: &str) -> u64 {
    let channel = Channel::from_shared(uri.to_string())
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    ClusterAdminClient::new(channel)
        .get_cluster_info(v1::GetClusterInfoRequest {})
        .await
        .expect("cluster info")
        .into_inner()
        .applied_index
}

/// One small entry: a stop of the stopped sandbox "big-0" (AlreadyDone).
async fn small_entry(api: &mut PalisadeClient<Channel>, request_id: String) {
    api.stop_sandbox(v1::StopSandboxRequest {
        sandbox: Some(v1::SandboxRef {
            workspace: "default".into(),
            name: "big-0".into(),
            id: String::new(),
        }),
        request_id,
        ..Default::default()
    })
    .await
    .expect("a stop of a stopped sandbox succeeds");
}

/// `count` small entries, 16 at a time (one at a time, the ~2,500 of the
/// test took a debug build half a minute).
async fn small_entries(api: &PalisadeClient<Channel>, prefix: &str, count: u64) {
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..count {
        if calls.len() >= 16 {
            calls
                .join_next()
                .await
                .expect("a call")
                .expect("a small entry");
        }
        let mut api = api.clone();
        let request_id = format!("{prefix}-{n}");
        calls.spawn(async move { small_entry(&mut api, request_id).await });
    }
    while let Some(call) = calls.join_next().await {
        call.expect("a small entry");
    }
}

/// Bytes of the replica's snapshot file (what its last build measured,
/// plus a header and a checksum).
fn snapshot_file_bytes(data_dir: &std::path::Path) -> u64 {
    std::fs::metadata(
        data_dir
            .join(palisade_gateway::node::SNAPSHOT_DIR)
            .join("snapshot"),
    )
    .expect("the snapshot file")
    .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_state_is_snapshotted_in_proportion_to_its_size() {
    let cluster = Cluster::start(
        1,
        &[
            "--driver",
            "noop",
            "--snapshot-interval-entries",
            "20",
            "--log-kept-after-snapshot-entries",
            "10",
        ],
    );
    let _logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "a_large_state_is_snapshotted_in_proportion_to_its_size",
    };
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let data_dir = cluster.replica(1).data_dir.clone();
    let mut api = direct_client(&uri, CALL_TIMEOUT).await;

    // ~256 KiB of state: four sandboxes with 64 KiB of environment each.
    for n in 0..4 {
        let env: HashMap<String, String> = (0..8)
            .map(|var| (format!("VAR_{var}"), "x".repeat(8 * 1024)))
            .collect();
        api.create_sandbox(v1::CreateSandboxRequest {
            name: format!("big-{n}"),
            spec: Some(v1::SandboxSpec {
                env,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create a large sandbox");
    }
    small_entry(&mut api, "first-stop".into()).await;

    // A build measures the large state (the cadence spaces builds by the
    // size the last one measured, which may have seen part of it).
    let created = applied_index(&uri).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut round = 0;
    while snapshot_index(&data_dir) < created {
        assert!(
            Instant::now() < deadline,
            "no snapshot of the large state after {round} rounds of 50 entries"
        );
        small_entries(&api, &format!("first-{round}"), 50).await;
        round += 1;
    }
    let measured = snapshot_file_bytes(&data_dir);
    let due = measured / 256;
    eprintln!("snapshot of {measured} bytes: the next one {due} entries later");
    assert!(measured >= 256 * 1024, "{measured}");

    // Half of that: far more than the configured 20, and than one entry
    // per KiB of state (before: ~1.4 per KiB with the growth each entry
    // added to the estimate), fewer than one per 256 bytes.
    let before = snapshot_index(&data_dir);
    let applied_before = applied_index(&uri).await;
    small_entries(&api, "small", due / 2).await;
    let applied = applied_index(&uri).await;
    let after = snapshot_index(&data_dir);
    eprintln!(
        "applied {applied_before} -> {applied}, snapshot at {before} -> {after} (interval 20)"
    );
    assert!(
        applied >= applied_before + due / 2,
        "{applied_before} -> {applied}"
    );
    assert_eq!(
        after,
        before,
        "a snapshot of {measured} bytes was built within {} entries of the last one \
         ({before} -> {after}): the cadence does not follow the state's size",
        due / 2
    );

    // Past one entry per 256 bytes of the size measured at the last build,
    // one is built, however much the entries since grew the estimate.
    small_entries(&api, "more", due - due / 2 + due / 10 + 50).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = snapshot_index(&data_dir);
        if now > before {
            eprintln!("snapshot built at {now}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot was built {} entries after one of {measured} bytes (still at {now})",
            due + due / 10 + 50
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
