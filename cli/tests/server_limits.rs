//! Server limits (issue 13): a replica sheds requests beyond
//! `--requests-in-flight-max` with RESOURCE_EXHAUSTED, reason OVERLOADED,
//! and a RetryInfo delay, before anything is proposed; health checks are
//! not shed. Watch streams beyond `--watchers-max` are refused the same way
//! (metadata `watchers_max`) and a closed watch frees its slot. A write
//! handler waits at most `--operation-wait-max-seconds` for its operation
//! (then OUTCOME_PENDING, the operation goes on), holding nothing after.

mod support;

use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_testkit::ClusterSpec;
use palisade_testkit::gate::{self, GATE_DIR_ENV};
use support::cluster::*;
use support::{palisade, with_default_stop_grace};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_limit_are_shed_with_a_retry_delay() {
    let cluster = Cluster::start(1, &["--driver", "noop", "--requests-in-flight-max", "1"]);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();

    // Many writes at once (each waits for an fsync), on one replica that
    // serves one request at a time.
    let mut calls = Vec::new();
    for caller in 0..48 {
        let mut client = direct_client(&uri, Duration::from_secs(30)).await;
        calls.push(tokio::spawn(async move {
            client
                .create_workspace(v1::CreateWorkspaceRequest {
                    name: format!("shed-{caller}"),
                })
                .await
        }));
    }
    let mut served = 0;
    let mut shed = Vec::new();
    for call in calls {
        match call.await.expect("a caller") {
            Ok(_) => served += 1,
            Err(status) => shed.push(status),
        }
    }
    assert!(served >= 1, "no request was served");
    assert!(
        !shed.is_empty(),
        "48 concurrent writes, none shed with a limit of 1"
    );
    for status in &shed {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        let info = status.get_details_error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, "OVERLOADED");
        assert_eq!(info.metadata["requests_in_flight_max"], "1");
        let retry = status.get_details_retry_info().expect("a RetryInfo");
        assert!(
            retry
                .retry_delay
                .is_some_and(|delay| delay > Duration::ZERO)
        );
    }
    // A shed write proposed nothing: its workspace does not exist.
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    let listed = client
        .list_workspaces(v1::ListWorkspacesRequest::default())
        .await
        .expect("list workspaces")
        .into_inner();
    let created = listed
        .workspaces
        .iter()
        .filter(|workspace| workspace.name.starts_with("shed-"))
        .count();
    assert_eq!(created, served, "shed requests must change nothing");
}

/// A list page is bounded by bytes as well as by count: three sandboxes
/// whose commands are 1.5 MiB each do not fit one 4 MiB response, so the
/// page ends early with a token, every page decodes, and the CLI's list
/// (which walks the pages) shows all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_sandboxes_is_cut_by_bytes_and_still_decodes() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);
    let argument = "a".repeat(12 * 1024);
    for name in ["big-1", "big-2", "big-3"] {
        let mut args = vec!["sandbox", "create", name, "--", "true"];
        // 128 arguments of 12 KiB: 1.5 MiB of command per sandbox.
        args.extend(std::iter::repeat_n(argument.as_str(), 128));
        let output = support::cli(&endpoints, &args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let mut client = direct_client(&cluster.replica(1).uri(), Duration::from_secs(30))
        .await
        .max_decoding_message_size(8 * 1024 * 1024);
    let first = client
        .list_sandboxes(v1::ListSandboxesRequest {
            workspace: "default".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .expect("the first page")
        .into_inner();
    assert_eq!(
        first.sandboxes.len(),
        2,
        "4 MiB holds two 1.5 MiB sandboxes"
    );
    assert!(
        !first.next_page_token.is_empty(),
        "the page was cut: a token"
    );
    let encoded = prost::Message::encoded_len(&first);
    assert!(encoded <= 4 * 1024 * 1024, "page of {encoded} bytes");
    let second = client
        .list_sandboxes(v1::ListSandboxesRequest {
            workspace: "default".into(),
            page_size: 100,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .expect("the second page")
        .into_inner();
    let names: Vec<String> = second
        .sandboxes
        .iter()
        .map(|sandbox| sandbox.metadata.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(names, ["big-3"]);
    assert!(second.next_page_token.is_empty());

    let listed = support::cli(&endpoints, &["-o", "json", "sandbox", "list"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    for name in ["big-1", "big-2", "big-3"] {
        assert!(listed.contains(name), "{name} missing from the list");
    }
}
/// `status` is RESOURCE_EXHAUSTED / OVERLOADED with `metadata_key` = `limit`
/// and a positive RetryInfo delay.
fn assert_overloaded(status: &tonic::Status, metadata_key: &str, limit: &str) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let info = status.get_details_error_info().expect("an ErrorInfo");
    assert_eq!(info.reason, "OVERLOADED", "{status:?}");
    assert_eq!(info.metadata[metadata_key], limit, "{status:?}");
    let retry = status.get_details_retry_info().expect("a RetryInfo");
    assert!(
        retry
            .retry_delay
            .is_some_and(|delay| delay > Duration::ZERO),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_beyond_the_watcher_limit_are_refused_and_a_closed_one_frees_its_slot() {
    const WATCHERS_MAX: usize = 3;
    let cluster = Cluster::start(1, &["--driver", "noop", "--watchers-max", "3"]);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    let watch = v1::WatchSandboxesRequest::default();

    let mut open = Vec::new();
    for _ in 0..WATCHERS_MAX {
        let stream = client
            .watch_sandboxes(watch.clone())
            .await
            .expect("a watch within the limit")
            .into_inner();
        open.push(stream);
    }
    for _ in 0..5 {
        let refused = client
            .watch_sandboxes(watch.clone())
            .await
            .expect_err("a watch beyond the limit must be refused");
        assert_overloaded(&refused, "watchers_max", "3");
    }
    // Reads and writes are still served while the watchers are at the limit.
    client
        .create_workspace(v1::CreateWorkspaceRequest {
            name: "watched".into(),
        })
        .await
        .expect("a write while the watchers are at their limit");
    client
        .list_workspaces(v1::ListWorkspacesRequest::default())
        .await
        .expect("a read while the watchers are at their limit");
    // The open watchers all get the same change (the shared feed).
    let created = client
        .create_sandbox(v1::CreateSandboxRequest {
            // The default workspace: the one the watches follow.
            name: "one".into(),
            spec: Some(v1::SandboxSpec {
                command: vec!["sleep".into(), "1".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create a sandbox")
        .into_inner();
    let id = created.metadata.expect("metadata").id;
    for stream in &mut open {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let event = stream
                    .message()
                    .await
                    .expect("a watch event")
                    .expect("the stream goes on");
                let sandbox = event.sandbox.expect("a sandbox");
                if sandbox.metadata.expect("metadata").id == id {
                    break;
                }
            }
        })
        .await
        .expect("every watcher sees the new sandbox");
    }
    // A closed watch frees its slot (once the replica saw it close).
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.watch_sandboxes(watch.clone()).await {
            Ok(stream) => {
                open.push(stream.into_inner());
                break;
            }
            Err(status) => {
                assert_overloaded(&status, "watchers_max", "3");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "a closed watch did not free its slot within 10 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_handler_waits_at_most_the_operation_wait_limit() {
    let gate_dir = tempfile::tempdir().expect("a gate directory");
    let mut spec = ClusterSpec::new(palisade(), 1).gateway_args(with_default_stop_grace(&[
        "--operation-wait-max-seconds",
        "1",
        "--requests-in-flight-max",
        "1",
    ]));
    spec.env.push((
        GATE_DIR_ENV.to_string(),
        gate_dir.path().display().to_string(),
    ));
    let cluster = Cluster::start_spec(spec);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let mut client = direct_client(&uri, Duration::from_secs(60)).await;
    let request = v1::CreateSandboxRequest {
        name: "held".into(),
        spec: Some(v1::SandboxSpec {
            command: vec!["sleep".into(), "5307".into()],
            ..Default::default()
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    // Its launch is held at the gate: the operation cannot end.
    let started = tokio::time::Instant::now();
    let answer = client
        .create_sandbox(request.clone())
        .await
        .expect_err("a create whose launch is held cannot succeed");
    let waited = started.elapsed();
    assert_eq!(answer.code(), Code::Unavailable, "{answer:?}");
    assert_eq!(
        answer
            .get_details_error_info()
            .expect("an ErrorInfo")
            .reason,
        "OUTCOME_PENDING"
    );
    assert!(
        waited < Duration::from_secs(20),
        "the handler waited {waited:?} with --operation-wait-max-seconds 1"
    );
    assert!(
        gate::wait_held(gate_dir.path(), Duration::from_secs(30)).is_some(),
        "the launch was never held"
    );
    // The handler holds nothing any more: with one request in flight
    // allowed, the next request is served, not shed.
    client
        .list_workspaces(v1::ListWorkspacesRequest::default())
        .await
        .expect("the waiting handler released its in-flight slot");
    // The operation went on: released, the retry gets the sandbox.
    let (held, _) = gate::wait_held(gate_dir.path(), Duration::from_secs(30)).expect("held");
    gate::release(gate_dir.path(), &held).expect("release the launch");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match client.create_sandbox(request.clone()).await {
            Ok(created) => {
                assert_eq!(created.into_inner().metadata.expect("metadata").id, held);
                break;
            }
            Err(status) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the retry never got the sandbox: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Creates sandbox `name` and answers its resource version.
async fn create_named(client: &mut PalisadeClient<Channel>, name: String) -> u64 {
    created_metadata(client, name).await.resource_version
}

/// Creates sandbox `name` (default spec) and answers its metadata.
async fn created_metadata(client: &mut PalisadeClient<Channel>, name: String) -> v1::ObjectMeta {
    client
        .create_sandbox(v1::CreateSandboxRequest {
            name,
            spec: Some(v1::SandboxSpec::default()),
            ..Default::default()
        })
        .await
        .expect("create a sandbox")
        .into_inner()
        .metadata
        .expect("metadata")
}

/// Reads `stream` until a change at `last` or later (within 60 s),
/// checking that versions only go up; answers the versions read.
async fn read_through(
    stream: &mut tonic::Streaming<v1::SandboxEvent>,
    after: u64,
    last: u64,
) -> Vec<u64> {
    let mut versions = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        let mut previous = after;
        loop {
            let event = stream
                .message()
                .await
                .expect("a watch event")
                .expect("the stream goes on");
            assert!(event.resource_version > previous, "changes in order");
            previous = event.resource_version;
            versions.push(previous);
            if previous >= last {
                return;
            }
        }
    })
    .await
    .expect("the watcher reads every change");
    versions
}

/// `palisade_watch_events_encoded_total` from the replica's `/metrics`.
async fn watch_events_encoded(address: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect to the metrics listener");
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.unwrap();
    body.lines()
        .find(|line| line.starts_with("palisade_watch_events_encoded_total "))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no palisade_watch_events_encoded_total in:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_encoded_once_for_all_watchers() {
    const WATCHERS: usize = 20;
    const SANDBOXES: usize = 4;
    let metrics = format!("127.0.0.1:{}", support::free_ports(1));
    let cluster = Cluster::start(1, &["--driver", "noop", "--metrics-listen", &metrics]);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        streams.push(
            client
                .watch_sandboxes(v1::WatchSandboxesRequest::default())
                .await
                .expect("a watch")
                .into_inner(),
        );
    }
    let before = watch_events_encoded(&metrics).await;
    let mut last_version = 0;
    for n in 0..SANDBOXES {
        last_version = create_named(&mut client, format!("watched-{n}")).await;
    }
    // Every watcher reads every change up to the last create's answer.
    let mut changes = std::collections::BTreeSet::new();
    for stream in &mut streams {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let event = stream
                    .message()
                    .await
                    .expect("a watch event")
                    .expect("the stream goes on");
                changes.insert(event.resource_version);
                if event.resource_version >= last_version {
                    break;
                }
            }
        })
        .await
        .expect("every watcher sees every change");
    }
    let encoded = watch_events_encoded(&metrics).await - before;
    println!(
        "{WATCHERS} watchers, {} changes: {encoded} conversions",
        changes.len()
    );
    assert!(changes.len() >= SANDBOXES, "{changes:?}");
    assert!(
        // A change applied after a watcher's last read may be converted
        // too: twice the changes is the tolerance (per watcher: 20 times).
        encoded < 2.0 * changes.len() as f64,
        "{} changes were converted {encoded} times for {WATCHERS} watchers: once each expected",
        changes.len()
    );
}

/// Held launches: the sandbox ids whose launch waits at the gate.
fn held(gate_dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(gate_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .strip_prefix("held-")
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_waiting_for_their_operations_leave_room_for_reads() {
    // Limit 4: writes may hold 3 slots, the 4th is kept for reads.
    let gate_dir = tempfile::tempdir().expect("a gate directory");
    let mut spec = ClusterSpec::new(palisade(), 1)
        .gateway_args(with_default_stop_grace(&["--requests-in-flight-max", "4"]));
    spec.env.push((
        GATE_DIR_ENV.to_string(),
        gate_dir.path().display().to_string(),
    ));
    let cluster = Cluster::start_spec(spec);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let create = |n: usize| v1::CreateSandboxRequest {
        name: format!("held-{n}"),
        spec: Some(v1::SandboxSpec {
            command: vec!["sleep".into(), "5308".into()],
            ..Default::default()
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    // Three creates whose launches are held: three writes in flight.
    let mut waiting = Vec::new();
    for n in 0..3 {
        let mut client = direct_client(&uri, Duration::from_secs(120)).await;
        let request = create(n);
        waiting.push(tokio::spawn(
            async move { client.create_sandbox(request).await },
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while held(gate_dir.path()).len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the three launches were not all held: {:?}",
            held(gate_dir.path())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    // A fourth write is shed...
    let shed = client
        .create_sandbox(create(3))
        .await
        .expect_err("a fourth write must be shed");
    assert_overloaded(&shed, "requests_in_flight_max", "4");
    // ...while reads are still served.
    for _ in 0..5 {
        client
            .get_workspace(v1::GetWorkspaceRequest {
                name: "default".into(),
                ..Default::default()
            })
            .await
            .expect("a read while writes hold their share");
    }
    // Released, the waiting creates end and free their slots.
    for sandbox in held(gate_dir.path()) {
        gate::release(gate_dir.path(), &sandbox).expect("release");
    }
    for call in waiting {
        call.await.expect("a caller").expect("the held create ends");
    }
    // (A write that launches nothing: any new launch is held at the gate.)
    client
        .create_workspace(v1::CreateWorkspaceRequest {
            name: "after".into(),
        })
        .await
        .expect("a write once the others ended");
}

/// Issue 13's load test: a watcher behind the shared feed had every
/// retained change (up to 16,384) encoded for it alone, at once, and held
/// them while it read slowly: ~3 MB per slow watcher. It now takes them a
/// batch at a time, so reading a few changes converts a few, not all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_far_behind_takes_its_changes_a_batch_at_a_time() {
    const CREATORS: usize = 16;
    const CREATES_EACH: usize = 200;
    let metrics = format!("127.0.0.1:{}", support::free_ports(1));
    let cluster = Cluster::start(1, &["--driver", "noop", "--metrics-listen", &metrics]);
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let mut client = direct_client(&uri, Duration::from_secs(30)).await;
    let first = create_named(&mut client, "behind-first".to_string()).await;
    // A fast watcher keeps the shared feed moving past `first`.
    let watch_from_first = v1::WatchSandboxesRequest {
        resource_version: first,
        ..Default::default()
    };
    let mut fast = client
        .watch_sandboxes(watch_from_first.clone())
        .await
        .expect("a watch")
        .into_inner();
    let mut creators = tokio::task::JoinSet::new();
    for creator in 0..CREATORS {
        let mut client = client.clone();
        creators.spawn(async move {
            let mut last = 0;
            for n in 0..CREATES_EACH {
                last = create_named(&mut client, format!("behind-{creator}-{n}")).await;
            }
            last
        });
    }
    let mut last = 0;
    while let Some(created) = creators.join_next().await {
        last = last.max(created.expect("a creator"));
    }
    let changes = read_through(&mut fast, first, last).await;
    assert!(
        changes.len() > 4_096 + 1_000,
        "{} changes: not enough to move the shared feed past the first",
        changes.len()
    );

    // A watcher resuming at `first` is behind the shared feed: its
    // changes are encoded for it alone. Reading ten of them must not
    // convert them all. Its connection has a small HTTP/2 window (64 KiB;
    // tonic's default of 2 MiB would let ~2,300 changes leave the replica
    // unread, hiding what the replica itself holds).
    let channel = tonic::transport::Endpoint::from_shared(uri.clone())
        .expect("the replica's URI")
        .initial_stream_window_size(64 * 1024)
        .initial_connection_window_size(64 * 1024)
        .connect()
        .await
        .expect("connect");
    let before = watch_events_encoded(&metrics).await;
    let mut behind = PalisadeClient::new(channel)
        .watch_sandboxes(watch_from_first)
        .await
        .expect("a watch")
        .into_inner();
    let mut read = read_through(&mut behind, first, changes[9]).await;
    // Let the stream's task fill its queue.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let converted = watch_events_encoded(&metrics).await - before;
    println!(
        "{} changes retained; ten read from far behind: {converted} conversions",
        changes.len()
    );
    assert!(
        converted < 1_000.0,
        "{converted} changes were converted for one watcher that read ten"
    );
    // And it still gets every change, in order, to the last.
    read.extend(read_through(&mut behind, changes[9], last).await);
    assert_eq!(read, changes, "the same changes as the fast watcher");
}

/// The watchers' send budget (`--watch-events-per-second-max`): changes
/// reach a watcher no faster than the budget allows (a burst of a second's
/// worth, then the rate), and none is lost on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_are_paced_by_the_send_budget_and_lose_nothing() {
    const EVENTS_PER_SECOND: u64 = 20;
    const SANDBOXES: usize = 60;
    let cluster = Cluster::start(
        1,
        &["--driver", "noop", "--watch-events-per-second-max", "20"],
    );
    cluster.wait_for_leader(&[1]).await;
    let uri = cluster.replica(1).uri();
    let mut client = direct_client(&uri, Duration::from_secs(60)).await;
    let mut stream = client
        .watch_sandboxes(v1::WatchSandboxesRequest::default())
        .await
        .expect("a watch")
        .into_inner();
    let started = tokio::time::Instant::now();

    // Created at once: each is at least two changes (added, then ready).
    let mut creates = Vec::new();
    for n in 0..SANDBOXES {
        let mut client = client.clone();
        creates.push(tokio::spawn(async move {
            created_metadata(&mut client, format!("paced-{n}")).await.id
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for create in creates {
        ids.insert(create.await.expect("a create"));
    }
    let created_after = started.elapsed();

    let mut events = 0u64;
    let mut ready = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while ready.len() < SANDBOXES {
            let event = stream
                .message()
                .await
                .expect("a watch event")
                .expect("the stream goes on");
            events += 1;
            let sandbox = event.sandbox.expect("a sandbox");
            let id = sandbox.metadata.expect("metadata").id;
            let phase = sandbox.status.map(|status| status.phase);
            if ids.contains(&id) && phase == Some(v1::SandboxPhase::Ready as i32) {
                ready.insert(id);
            }
        }
    })
    .await
    .expect("every created sandbox reaches the watcher, ready");
    let took = started.elapsed();
    assert!(events >= 2 * SANDBOXES as u64, "{events} events");
    // By `t`, at most a burst (20), one batch reserved ahead (64) and
    // 20 a second can have been sent.
    let floor = Duration::from_secs_f64((events - 20 - 64) as f64 / EVENTS_PER_SECOND as f64);
    assert!(
        took >= floor,
        "{events} changes reached the watcher in {took:?} (creates done in {created_after:?}): faster than 20 a second"
    );
}
