//! `palisade-upgrade`: a rolling upgrade under load, from a previous
//! release's `palisade` binary to this build's (issue 20, item 6). Run it
//! through `scripts/upgrade-test`, which builds the previous release from
//! git first:
//!
//! ```text
//! scripts/upgrade-test            # builds both, runs this, prints the summary
//! palisade-upgrade --old-palisade OLD --palisade NEW [--min-requests 5000]
//! ```
//!
//! 1. Starts 3 replicas of OLD (`--driver noop`, loopback, plaintext) and
//!    `--workers` clients, each a loop of create (READY), stop, delete
//!    through the CLI's failover client (request ids: a retry after an
//!    unknown outcome replays the first answer).
//! 2. Replaces the replicas one by one: SIGTERM (graceful: it hands
//!    leadership off and drains), waits for a clean exit, starts NEW on
//!    the same data directory, waits until every replica names one leader
//!    and applied what it had committed, then lets the mixed cluster serve
//!    a third of `--min-requests` before the next replacement.
//! 3. Waits until every replica reports the feature level NEW supports
//!    (the leader raises it once every voter supports it), and keeps the
//!    load on until at least `--min-requests` requests were answered since
//!    the first replacement began.
//! 4. Downgrade: stops one replica and starts OLD on its upgraded data
//!    directory; OLD must exit with an error that says why: the log
//!    database's format version or the feature level (releases before
//!    feature levels accept only format 1; later ones check the level), or,
//!    from the release that kept the log in segment files and checked no
//!    upper bound of the format, a log entry "written by another palisade
//!    release" (it cannot decode the binary entries). Then NEW takes the
//!    directory back.
//!
//! Prints a summary (requests, failed, feature level before and after, the
//! downgrade's message); exits 1 if a request failed, the level did not
//! rise or the downgrade was not refused.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use palisade_bench::{LEADER_TIMEOUT, in_run_dir, palisade_binary, run_main};
use palisade_cli::client::{Client, ClientError};
use palisade_proto::v1;
use palisade_testkit::probe::cluster_info;
use palisade_testkit::{ClusterSpec, LocalCluster};
use tokio::time::Instant;

/// A rolling upgrade from a previous release under load; see the module
/// documentation (and `scripts/upgrade-test`, which builds the releases).
#[derive(Debug, Parser)]
#[command(name = "palisade-upgrade")]
struct Args {
    /// The previous release's `palisade` binary (the cluster starts on it,
    /// and the downgrade check starts it again on an upgraded directory).
    #[arg(long)]
    old_palisade: PathBuf,
    /// This build's `palisade` binary (default: next to this one).
    #[arg(long)]
    palisade: Option<PathBuf>,
    /// Concurrent clients (each: create, stop, delete, repeat).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
    /// Requests that must be answered between the start of the first
    /// replacement and the end of the run (the load goes on until then).
    #[arg(long, default_value_t = 5_000)]
    min_requests: u64,
    /// Keep the run directory (replica data and logs) afterwards.
    #[arg(long)]
    keep: bool,
}

/// The label a create carries: its request id, so that a retried create
/// that finds its name taken recognises its own sandbox.
const REQUEST_LABEL: &str = "palisade.upgrade/request";
/// How long a client keeps failing over before a request counts as failed.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(90);
/// How long a replica may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the whole load may run after the upgrade to reach
/// `--min-requests`, and the level may take to rise.
const FINISH_TIMEOUT: Duration = Duration::from_secs(600);

fn main() {
    let args = Args::parse();
    run_main(async move {
        let new = palisade_binary(args.palisade.as_deref())?;
        if !args.old_palisade.is_file() {
            bail!("{} not found", args.old_palisade.display());
        }
        in_run_dir("palisade-upgrade", args.keep, |root| {
            upgrade(args, new, root)
        })
        .await
    });
}

/// What the clients counted.
#[derive(Default)]
struct Counts {
    answered: AtomicU64,
    failed: AtomicU64,
}

async fn upgrade(args: Args, new: PathBuf, root: PathBuf) -> anyhow::Result<()> {
    let mut spec = ClusterSpec::new(&args.old_palisade, 3)
        .gateway_args(["--driver", "noop", "--stop-grace-seconds", "2"])
        .log_filter("info,openraft=warn");
    spec.root = Some(root.clone());
    let mut cluster = LocalCluster::start(spec).context("cannot start the old release")?;
    let ids = cluster.node_ids();
    cluster.wait_for_leader(&ids, LEADER_TIMEOUT).await?;
    cluster.wait_caught_up(&ids, LEADER_TIMEOUT).await?;
    let level_before = levels(&cluster).await;
    println!(
        "{} replicas of {} up; feature level reported: {}",
        ids.len(),
        args.old_palisade.display(),
        describe_levels(&level_before)
    );

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let endpoints = cluster.all_uris();
    let workers: Vec<_> = (0..args.workers as usize)
        .map(|worker| {
            let mut rotated = endpoints.clone();
            rotated.rotate_left(worker % endpoints.len());
            let mut client = Client::new(rotated);
            client.failover_deadline = FAILOVER_DEADLINE;
            tokio::spawn(work(
                worker,
                client,
                counts.clone(),
                stop.clone(),
                failures.clone(),
            ))
        })
        .collect();
    // Warm up on the old release.
    wait_for(&counts, 200, FINISH_TIMEOUT).await?;
    let started = Instant::now();
    let answered_before = counts.answered.load(Ordering::SeqCst);

    // The load is spread over the mixed-release stages: after each
    // replacement, a third of `--min-requests` before the next one.
    let per_step = args.min_requests.div_ceil(ids.len() as u64);
    for (step, node_id) in ids.clone().into_iter().enumerate() {
        let replica = cluster.replica_mut(node_id);
        replica.request_stop();
        let status = replica
            .wait_exit(STOP_TIMEOUT)
            .with_context(|| format!("node {node_id} did not exit after SIGTERM"))?;
        if !status.success() {
            bail!(
                "node {node_id} exited with {status} after SIGTERM: {}",
                tail(&replica.log())
            );
        }
        replica.palisade = new.clone();
        replica.start()?;
        cluster.wait_for_leader(&ids, LEADER_TIMEOUT).await?;
        cluster.wait_caught_up(&ids, LEADER_TIMEOUT).await?;
        println!(
            "[{:>5.1}s] node {node_id} replaced by {} and caught up; requests answered {}, failed {}",
            started.elapsed().as_secs_f64(),
            new.display(),
            counts.answered.load(Ordering::SeqCst) - answered_before,
            counts.failed.load(Ordering::SeqCst)
        );
        wait_for(
            &counts,
            answered_before + per_step * (step as u64 + 1),
            FINISH_TIMEOUT,
        )
        .await?;
    }

    // Every voter runs the new build: the leader raises the level.
    let deadline = Instant::now() + FINISH_TIMEOUT;
    let level_after = loop {
        let seen = levels(&cluster).await;
        let target = seen.iter().map(|(_, _, supported)| *supported).max();
        if seen.len() == ids.len()
            && seen
                .iter()
                .all(|(_, level, supported)| Some(level) == target.as_ref() && level == supported)
        {
            break seen;
        }
        if Instant::now() > deadline {
            bail!("the feature level did not rise: {}", describe_levels(&seen));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "[{:>5.1}s] feature level raised: {}",
        started.elapsed().as_secs_f64(),
        describe_levels(&level_after)
    );
    wait_for(&counts, answered_before + args.min_requests, FINISH_TIMEOUT).await?;
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.context("a client task panicked")?;
    }
    let answered = counts.answered.load(Ordering::SeqCst) - answered_before;
    let failed = counts.failed.load(Ordering::SeqCst);
    let seconds = started.elapsed().as_secs_f64();

    // Downgrade: the old release on an upgraded data directory.
    let victim = *ids.last().expect("three replicas");
    let replica = cluster.replica_mut(victim);
    replica.request_stop();
    replica
        .wait_exit(STOP_TIMEOUT)
        .with_context(|| format!("node {victim} did not exit after SIGTERM"))?;
    replica.palisade = args.old_palisade.clone();
    let offset = replica.log_len();
    replica.start()?;
    let downgrade = replica.wait_exit(STOP_TIMEOUT);
    let downgrade_log = replica.log_since(offset);
    let refusal = downgrade_log
        .lines()
        .find(|line| {
            [
                "format version",
                "feature level",
                "written by another palisade release",
            ]
            .iter()
            .any(|reason| line.contains(reason))
        })
        .map(str::trim)
        .map(str::to_string);
    let refused = matches!(downgrade, Some(status) if !status.success()) && refusal.is_some();
    if downgrade.is_none() {
        replica.kill();
    }
    // The new build takes the directory back.
    replica.palisade = new.clone();
    replica.start()?;
    cluster.wait_for_leader(&ids, LEADER_TIMEOUT).await?;
    cluster.wait_caught_up(&ids, LEADER_TIMEOUT).await?;
    cluster.terminate_all(STOP_TIMEOUT);

    println!();
    println!(
        "rolling upgrade {} -> {}",
        args.old_palisade.display(),
        new.display()
    );
    println!(
        "  requests answered during the upgrade: {answered} in {seconds:.1}s ({} clients: create, stop, delete)",
        args.workers
    );
    println!("  requests failed:                      {failed}");
    println!(
        "  feature level before:                 {}",
        describe_levels(&level_before)
    );
    println!(
        "  feature level after:                  {}",
        describe_levels(&level_after)
    );
    println!(
        "  downgrade (old release on node {victim}'s upgraded data dir): {}",
        match (&downgrade, &refusal) {
            (Some(status), Some(line)) if !status.success() =>
                format!("refused ({status}): {line}"),
            (Some(status), _) =>
                format!("NOT refused clearly ({status}): {}", tail(&downgrade_log)),
            (None, _) => "NOT refused: the old release kept running".to_string(),
        }
    );
    for failure in failures.lock().unwrap().iter().take(20) {
        println!("  failure: {failure}");
    }
    if failed > 0 {
        bail!("{failed} requests failed during the upgrade");
    }
    if answered < args.min_requests {
        bail!(
            "only {answered} requests answered (want {})",
            args.min_requests
        );
    }
    if !refused {
        bail!("the downgrade was not refused with a clear message");
    }
    Ok(())
}

/// Each replica's (node id, feature level, supported level); a release
/// before feature levels reports 0 for both.
async fn levels(cluster: &LocalCluster) -> Vec<(u64, u32, u32)> {
    let mut seen = Vec::new();
    for node_id in cluster.node_ids() {
        if let Some(info) = cluster_info(&cluster.replica(node_id).uri()).await {
            seen.push((node_id, info.feature_level, info.supported_feature_level));
        }
    }
    seen
}

fn describe_levels(levels: &[(u64, u32, u32)]) -> String {
    levels
        .iter()
        .map(|(node_id, level, supported)| {
            if *supported == 0 {
                format!("node {node_id}: none (a release before feature levels, i.e. level 1)")
            } else {
                format!("node {node_id}: {level} (supports {supported})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

async fn wait_for(counts: &Counts, answered: u64, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while counts.answered.load(Ordering::SeqCst) < answered {
        if Instant::now() > deadline {
            bail!(
                "only {} requests answered within {timeout:?}",
                counts.answered.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn describe(error: &ClientError) -> String {
    format!("{error} [{:?} {:?}]", error.code(), error.reason())
}

/// One client: create (READY), stop, delete, until `stop`.
async fn work(
    worker: usize,
    mut client: Client,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
) {
    let fail = |what: String| {
        counts.failed.fetch_add(1, Ordering::SeqCst);
        failures.lock().unwrap().push(what);
    };
    let mut serial = 0u64;
    while !stop.load(Ordering::SeqCst) {
        serial += 1;
        let name = format!("upgrade-{worker}-{serial}");
        let id = match create(&mut client, &name).await {
            Ok(id) => id,
            Err(error) => {
                fail(format!("create {name}: {error}"));
                continue;
            }
        };
        counts.answered.fetch_add(1, Ordering::SeqCst);
        let reference = Some(v1::SandboxRef {
            id: id.clone(),
            ..Default::default()
        });
        let request = v1::StopSandboxRequest {
            sandbox: reference.clone(),
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        match client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.stop_sandbox(request).await }
            })
            .await
        {
            Ok(_) => {
                counts.answered.fetch_add(1, Ordering::SeqCst);
            }
            Err(error) => fail(format!("stop {name}: {}", describe(&error))),
        }
        let request = v1::DeleteSandboxRequest {
            sandbox: reference,
            request_id: palisade_proto::new_request_id(),
            ..Default::default()
        };
        match client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.delete_sandbox(request).await }
            })
            .await
        {
            Ok(deleted) if deleted.deleted => {
                counts.answered.fetch_add(1, Ordering::SeqCst);
            }
            Ok(deleted) => fail(format!("delete {name}: answered {deleted:?}")),
            Err(error) => fail(format!("delete {name}: {}", describe(&error))),
        }
    }
}

/// Creates `name` and returns its id once READY. A retry that finds the
/// name taken accepts the sandbox only if it carries this request's label.
async fn create(client: &mut Client, name: &str) -> Result<String, String> {
    let request_id = palisade_proto::new_request_id();
    let request = v1::CreateSandboxRequest {
        name: name.to_string(),
        labels: [(REQUEST_LABEL.to_string(), request_id.clone())].into(),
        request_id: request_id.clone(),
        ..Default::default()
    };
    let sandbox = match client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.create_sandbox(request).await }
        })
        .await
    {
        Ok(sandbox) => sandbox,
        Err(error) if error.reason().as_deref() == Some("NAME_TAKEN") => {
            let get = v1::GetSandboxRequest {
                sandbox: Some(v1::SandboxRef {
                    name: name.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let existing = client
                .palisade(|mut api| {
                    let get = get.clone();
                    async move { api.get_sandbox(get).await }
                })
                .await
                .map_err(|error| describe(&error))?;
            let ours = existing
                .metadata
                .as_ref()
                .and_then(|meta| meta.labels.get(REQUEST_LABEL))
                == Some(&request_id);
            if !ours {
                return Err(describe(&error));
            }
            existing
        }
        Err(error) => return Err(describe(&error)),
    };
    let meta = sandbox.metadata.as_ref().ok_or("no metadata")?;
    Ok(meta.id.clone())
}
