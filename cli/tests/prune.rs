//! End-to-end: `palisade sandbox prune` through the real binary against a
//! three-replica cluster (noop driver for the bulk), and server-side label
//! selectors on `list` and `prune`.
//!
//! The prune test lists the sandboxes in ERROR/STOPPED across three
//! workspaces (always 30% of them) with the listing's page size forced to
//! 50. In the suite it runs with 400 sandboxes (120 listed, 3 pages per
//! workspace); the acceptance size, 2,000 sandboxes of which 600 listed
//! (about 4 minutes in a debug build on a loaded 2-core machine, most of
//! it creating the sandboxes):
//!
//! ```sh
//! PALISADE_PRUNE_TEST_SANDBOXES=2000 cargo test -p palisade-cli --test prune -- --nocapture prune_deletes
//! ```
//! Between the listing and the deletes (held there by the
//! TEST-ONLY `PALISADE_PRUNE_HOLD_FILE`), 20 of the listed sandboxes are
//! replaced by same-name sandboxes: exactly the others are pruned, the
//! replacements survive and are reported skipped.
//!
//! The benchmark (`--concurrency 1` vs `32`) is not a suite test:
//!
//! ```sh
//! cargo test --release -p palisade-cli --test prune -- --ignored --nocapture prune_benchmark
//! ```

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use palisade_proto::v1;
use serde_json::Value;
use support::cluster::*;
use support::*;
use tokio::io::AsyncBufReadExt;

const WORKSPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
/// Creates in flight at once while setting up.
const SETUP_CONCURRENCY: usize = 32;

fn total_sandboxes() -> usize {
    std::env::var("PALISADE_PRUNE_TEST_SANDBOXES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(400)
}

/// What a setup sandbox should end up as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Ready,
    Error,
    Stopped,
}

async fn create(
    client: &mut palisade_cli::client::Client,
    workspace: &str,
    name: &str,
    fate: Fate,
    labels: &[(&str, &str)],
) -> v1::Sandbox {
    let mut env = std::collections::HashMap::new();
    if fate == Fate::Error {
        env.insert(
            palisade_driver::noop::NOOP_REJECT_LAUNCH_VARIABLE.to_string(),
            "1".to_string(),
        );
    }
    let request = v1::CreateSandboxRequest {
        workspace: workspace.to_string(),
        name: name.to_string(),
        spec: Some(v1::SandboxSpec {
            env,
            ..Default::default()
        }),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    let sandbox = client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.create_sandbox(request).await }
        })
        .await
        .unwrap_or_else(|error| panic!("create {workspace}/{name}: {error}"));
    if fate != Fate::Stopped {
        return sandbox;
    }
    let request = v1::StopSandboxRequest {
        sandbox: Some(v1::SandboxRef {
            workspace: workspace.to_string(),
            name: name.to_string(),
            id: String::new(),
        }),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.stop_sandbox(request).await }
        })
        .await
        .unwrap_or_else(|error| panic!("stop {workspace}/{name}: {error}"))
}

fn phase_name(sandbox: &v1::Sandbox) -> String {
    let phase = sandbox.status.as_ref().map_or(0, |status| status.phase);
    v1::SandboxPhase::try_from(phase)
        .map(|phase| {
            phase
                .as_str_name()
                .trim_start_matches("SANDBOX_PHASE_")
                .to_string()
        })
        .unwrap_or_default()
}

/// Creates `total` sandboxes over the three workspaces, 30% of them
/// inactive (half ERROR, half STOPPED). Returns (workspace, name) -> (id,
/// fate).
async fn populate(
    endpoints: Vec<String>,
    prefix: &str,
    total: usize,
) -> BTreeMap<(String, String), (String, Fate)> {
    let client = failover_client(endpoints);
    let plan: Vec<(String, String, Fate)> = (0..total)
        .map(|index| {
            let workspace = WORKSPACES[index % WORKSPACES.len()].to_string();
            let fate = match index % 10 {
                0..=6 => Fate::Ready,
                7 => Fate::Error,
                8 => Fate::Stopped,
                _ => {
                    if index % 20 == 9 {
                        Fate::Error
                    } else {
                        Fate::Stopped
                    }
                }
            };
            (workspace, format!("{prefix}-{index:05}"), fate)
        })
        .collect();
    let created = futures::stream::iter(plan.into_iter().map(|(workspace, name, fate)| {
        let mut client = client.clone();
        async move {
            let sandbox = create(&mut client, &workspace, &name, fate, &[]).await;
            let expected = match fate {
                Fate::Ready => "READY",
                Fate::Error => "ERROR",
                Fate::Stopped => "STOPPED",
            };
            assert_eq!(phase_name(&sandbox), expected, "{workspace}/{name}");
            let id = sandbox.metadata.unwrap_or_default().id;
            ((workspace, name), (id, fate))
        }
    }))
    .buffer_unordered(SETUP_CONCURRENCY)
    .collect::<BTreeMap<_, _>>()
    .await;
    assert_eq!(created.len(), total);
    created
}

async fn all_sandboxes(client: &mut palisade_cli::client::Client) -> Vec<v1::Sandbox> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = v1::ListSandboxesRequest {
            all_workspaces: true,
            page_size: 1000,
            page_token: page_token.clone(),
            ..Default::default()
        };
        let page = client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.list_sandboxes(request).await }
            })
            .await
            .expect("list");
        all.extend(page.sandboxes);
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}

fn key_of(sandbox: &v1::Sandbox) -> (String, String) {
    let meta = sandbox.metadata.clone().unwrap_or_default();
    (meta.workspace, meta.name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prune_deletes_exactly_the_listed_sandboxes_across_workspaces_and_pages() {
    let cluster = Cluster::start(3, &["--driver", "noop"]);
    let _keep_logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "prune_deletes_exactly_the_listed_sandboxes_across_workspaces_and_pages",
    };
    cluster.wait_for_leader(&[1, 2, 3]).await;
    let endpoints = cluster.cli_endpoints(&[1, 2, 3]);
    for workspace in WORKSPACES {
        cli_json_async(&endpoints, &["workspace", "create", workspace]).await;
    }
    let total = total_sandboxes();
    let started = Instant::now();
    let created = populate(cluster.all_uris(), "s", total).await;
    let inactive: BTreeMap<_, _> = created
        .iter()
        .filter(|(_, (_, fate))| *fate != Fate::Ready)
        .collect();
    let inactive_count = inactive.len();
    assert_eq!(inactive_count, total * 3 / 10);
    println!(
        "created {total} sandboxes ({inactive_count} inactive) in {:?}",
        started.elapsed()
    );
    // 20 listed sandboxes, spread over the workspaces, get a replacement.
    let replaced: Vec<(String, String)> = inactive
        .keys()
        .step_by((inactive_count / 20).max(1))
        .take(20)
        .map(|key| (*key).clone())
        .collect();
    assert_eq!(replaced.len(), 20);

    // Prune every workspace, page size 50, held after the listing.
    let hold = cluster.root().join("prune-hold");
    let started = Instant::now();
    let mut prune = tokio::process::Command::new(palisade())
        .args([
            "--endpoint",
            &endpoints,
            "-o",
            "json",
            "sandbox",
            "prune",
            "--all-workspaces",
            "--concurrency",
            "32",
        ])
        .env("PALISADE_PRUNE_PAGE_SIZE", "50")
        .env("PALISADE_PRUNE_HOLD_FILE", &hold)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the prune");
    let mut stderr = tokio::io::BufReader::new(prune.stderr.take().unwrap()).lines();
    let listed_line = tokio::time::timeout(Duration::from_secs(120), stderr.next_line())
        .await
        .expect("the prune lists within two minutes")
        .expect("read the prune's stderr")
        .expect("the prune says what it listed");
    assert!(
        listed_line.starts_with(&format!("listed {inactive_count} sandbox(es)")),
        "{listed_line}"
    );
    // Now, between the listing and the deletes: replace 20 of them.
    let mut client = failover_client(cluster.all_uris());
    let mut replacement_ids = BTreeMap::new();
    for (workspace, name) in &replaced {
        let (id, _) = &created[&(workspace.clone(), name.clone())];
        let request = v1::DeleteSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                id: id.clone(),
                ..Default::default()
            }),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        };
        client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.delete_sandbox(request).await }
            })
            .await
            .expect("delete the original");
        // The replacement is itself STOPPED: it would match the listing's
        // filter, yet it was not listed.
        let replacement = create(&mut client, workspace, name, Fate::Stopped, &[]).await;
        replacement_ids.insert(
            (workspace.clone(), name.clone()),
            replacement.metadata.unwrap().id,
        );
    }
    std::fs::write(&hold, b"go").unwrap();
    let drain_stderr = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            rest.push(line);
        }
        rest
    });
    let output = tokio::time::timeout(Duration::from_secs(300), prune.wait_with_output())
        .await
        .expect("the prune ends")
        .expect("the prune runs");
    let rest = drain_stderr.await.unwrap();
    assert!(
        output.status.success(),
        "prune failed: {}\n{}",
        rest.join("\n"),
        String::from_utf8_lossy(&output.stdout)
    );
    println!("prune took {:?}", started.elapsed());
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    assert_eq!(report["listed"], inactive_count, "{report}");
    assert_eq!(report["pruned"], inactive_count - 20);
    assert_eq!(report["skipped"], 20);
    assert_eq!(report["failed"], 0);
    let mut skipped = BTreeSet::new();
    let mut pruned = BTreeSet::new();
    for item in report["items"].as_array().unwrap() {
        let key = (
            item["workspace"].as_str().unwrap().to_string(),
            item["name"].as_str().unwrap().to_string(),
        );
        let (listed_id, _) = &created[&key];
        assert_eq!(
            item["id"],
            listed_id.as_str(),
            "reported with its listed id"
        );
        match item["outcome"].as_str().unwrap() {
            "skipped" => {
                assert_eq!(item["reason"], "SANDBOX_IDENTITY_MISMATCH", "{item}");
                skipped.insert(key);
            }
            "pruned" => {
                pruned.insert(key);
            }
            other => panic!("unexpected outcome {other}: {item}"),
        }
    }
    assert_eq!(
        skipped,
        replaced.iter().cloned().collect::<BTreeSet<_>>(),
        "exactly the replaced ones are skipped"
    );
    assert_eq!(pruned.len(), inactive_count - 20);

    // What is left: every READY sandbox and the 20 replacements.
    let left = all_sandboxes(&mut client).await;
    let left: BTreeMap<(String, String), v1::Sandbox> =
        left.into_iter().map(|s| (key_of(&s), s)).collect();
    assert_eq!(left.len(), total - inactive_count + 20);
    for (key, id) in &replacement_ids {
        let survivor = left.get(key).expect("the replacement survives");
        assert_eq!(&survivor.metadata.as_ref().unwrap().id, id);
        assert_eq!(phase_name(survivor), "STOPPED");
    }
    for key in &pruned {
        assert!(!left.contains_key(key), "{key:?} was pruned");
    }
    for ((workspace, name), (id, fate)) in &created {
        if *fate == Fate::Ready {
            let kept = &left[&(workspace.clone(), name.clone())];
            assert_eq!(&kept.metadata.as_ref().unwrap().id, id);
        }
    }
}

/// A sandbox of the selector test: name, fate, labels.
type PlannedSandbox = (&'static str, Fate, &'static [(&'static str, &'static str)]);

/// Label selectors (equality, inequality, existence, and the rest of the
/// Kubernetes forms) filter `list` and `prune` server side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selectors_filter_list_and_prune() {
    let cluster = Cluster::start(1, &["--driver", "noop"]);
    let _keep_logs = KeepLogsOnFailure {
        root: cluster.root().to_path_buf(),
        test: "label_selectors_filter_list_and_prune",
    };
    cluster.wait_for_leader(&[1]).await;
    let endpoints = cluster.cli_endpoints(&[1]);
    let mut client = failover_client(cluster.all_uris());
    let plan: [PlannedSandbox; 6] = [
        ("dev-1", Fate::Stopped, &[("env", "dev"), ("owner", "ana")]),
        ("dev-2", Fate::Error, &[("env", "dev")]),
        ("prod-1", Fate::Stopped, &[("env", "prod"), ("owner", "bo")]),
        ("prod-2", Fate::Ready, &[("env", "prod")]),
        ("bare-1", Fate::Stopped, &[]),
        ("keep-1", Fate::Error, &[("env", "dev"), ("keep", "yes")]),
    ];
    for (name, fate, labels) in plan {
        create(&mut client, "default", name, fate, labels).await;
    }
    let names = |value: Value| -> Vec<String> {
        let mut names: Vec<String> = value
            .as_array()
            .unwrap()
            .iter()
            .map(|sandbox| sandbox["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    let list = |selector: &'static str| {
        let endpoints = endpoints.clone();
        async move { cli_json_async(&endpoints, &["sandbox", "list", "-l", selector]).await }
    };
    assert_eq!(names(list("env=dev").await), ["dev-1", "dev-2", "keep-1"]);
    assert_eq!(names(list("env==prod").await), ["prod-1", "prod-2"]);
    // Inequality also holds where the label is absent (Kubernetes).
    assert_eq!(
        names(list("env!=dev").await),
        ["bare-1", "prod-1", "prod-2"]
    );
    assert_eq!(names(list("owner").await), ["dev-1", "prod-1"]);
    assert_eq!(
        names(list("!owner").await),
        ["bare-1", "dev-2", "keep-1", "prod-2"]
    );
    assert_eq!(names(list("env=dev,!keep").await), ["dev-1", "dev-2"]);
    assert_eq!(
        names(list("env in (dev,prod),owner").await),
        ["dev-1", "prod-1"]
    );
    assert_eq!(
        names(list("env notin (dev)").await),
        ["bare-1", "prod-1", "prod-2"]
    );
    // Two -l flags: both hold.
    let both = cli_json_async(
        &endpoints,
        &["sandbox", "list", "-l", "env=dev", "-l", "owner"],
    )
    .await;
    assert_eq!(names(both), ["dev-1"]);
    // --older-than: everything here is younger than an hour.
    let old = cli_json_async(&endpoints, &["sandbox", "list", "--older-than", "1h"]).await;
    assert_eq!(names(old), Vec::<String>::new());
    // Malformed: a clear INVALID_ARGUMENT, exit 1.
    let bad = cli_async(&endpoints, &["sandbox", "list", "-l", "env in (dev"]).await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("INVALID_LABEL_EXPRESSION"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // Prune with selectors: inequality + existence, then equality.
    let dry = cli_json_async(
        &endpoints,
        &["sandbox", "prune", "--dry-run", "-l", "env!=prod,!keep"],
    )
    .await;
    assert_eq!(dry["pruned"], 3, "{dry}"); // dev-1, dev-2, bare-1
    assert_eq!(
        names(cli_json_async(&endpoints, &["sandbox", "list"]).await).len(),
        6
    );
    let older = cli_json_async(&endpoints, &["sandbox", "prune", "--older-than", "1h"]).await;
    assert_eq!(older["listed"], 0, "{older}");
    let pruned = cli_json_async(
        &endpoints,
        &["sandbox", "delete", "--prune", "-l", "env!=prod,!keep"],
    )
    .await;
    assert_eq!(pruned["pruned"], 3, "{pruned}");
    assert_eq!(
        names(cli_json_async(&endpoints, &["sandbox", "list"]).await),
        ["keep-1", "prod-1", "prod-2"]
    );
    let pruned = cli_json_async(&endpoints, &["sandbox", "prune", "-l", "owner"]).await;
    assert_eq!(pruned["pruned"], 1, "{pruned}"); // prod-1 (prod-2 is READY)
    let pruned = cli_json_async(&endpoints, &["sandbox", "prune", "-l", "keep=yes"]).await;
    assert_eq!(pruned["pruned"], 1, "{pruned}");
    assert_eq!(
        names(cli_json_async(&endpoints, &["sandbox", "list"]).await),
        ["prod-2"]
    );
    // Prune refuses phases in which something runs.
    let refused = cli_async(&endpoints, &["sandbox", "prune", "--phase", "READY"]).await;
    assert_eq!(refused.status.code(), Some(1));
}

/// `--concurrency 1` against `--concurrency 32`, each pruning the same
/// number of STOPPED sandboxes; prints both times and the ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --ignored --nocapture (see the module docs)"]
async fn prune_benchmark() {
    let cluster = Cluster::start(3, &["--driver", "noop"]);
    cluster.wait_for_leader(&[1, 2, 3]).await;
    let endpoints = cluster.cli_endpoints(&[1, 2, 3]);
    for workspace in WORKSPACES {
        cli_json_async(&endpoints, &["workspace", "create", workspace]).await;
    }
    let count: usize = std::env::var("PALISADE_PRUNE_BENCH_SANDBOXES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(600);
    let mut times = Vec::new();
    for (round, concurrency) in [(1, "1"), (2, "32")] {
        let client = failover_client(cluster.all_uris());
        futures::stream::iter((0..count).map(|index| {
            let mut client = client.clone();
            async move {
                let workspace = WORKSPACES[index % 3];
                create(
                    &mut client,
                    workspace,
                    &format!("b{round}-{index:05}"),
                    Fate::Stopped,
                    &[],
                )
                .await;
            }
        }))
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
        let started = Instant::now();
        let report = cli_json_async(
            &endpoints,
            &["sandbox", "prune", "-A", "--concurrency", concurrency],
        )
        .await;
        let took = started.elapsed();
        assert_eq!(report["pruned"], count, "{report}");
        println!("prune of {count} sandboxes at --concurrency {concurrency}: {took:?}");
        times.push(took);
    }
    println!(
        "speed-up of --concurrency 32 over 1: {:.1}x",
        times[0].as_secs_f64() / times[1].as_secs_f64()
    );
}
