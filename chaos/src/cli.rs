//! The flags of `palisade chaos run` and the loop over seeds behind it. The
//! `palisade` binary (crate `palisade-cli`) parses [`RunArgs`] and calls
//! [`run_campaigns`]; this crate has no binary of its own.
//!
//! ```text
//! palisade chaos run --seed 7 --ops 1000 --nemesis handoff,kill,pause,partition,driver
//! palisade chaos run --seeds 100 --ops 1000              # seeds 1..=100 (or from --seed)
//! palisade chaos run --mode process --ops 200            # real `palisade gateway run` processes
//! palisade chaos run --sim --seed 7 --ops 1000           # deterministic simulation
//! ```
//!
//! Exit codes: 0 no anomaly, and every requested nemesis fired; 1 an
//! anomaly was found (each is printed with the history excerpt that shows
//! it, and the seed); 2 the harness could not run (bad flags, a replica
//! that would not start); 3 no anomaly, but a requested nemesis never
//! fired ("vacuous": the report names it).
//!
//! Over several seeds, the last line gives the faults per campaign
//! (minimum and median), so that a campaign's evidence is weighed by what
//! it injected.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::campaign::{CampaignConfig, DockerTarget, Mode, Report, run_campaign};
use crate::nemesis::NemesisKind;

/// Where the replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Replicas inside this process (every nemesis; driver effects counted).
    InProcess,
    /// `palisade gateway run` processes with SIGKILL, SIGSTOP/SIGCONT and
    /// TCP-proxy partitions.
    Process,
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Seed of the schedule; a random one (printed) when omitted.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run this many campaigns, seeds SEED, SEED+1, ... (SEED defaults to 1).
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Operations per campaign.
    #[arg(long = "ops", default_value_t = 400)]
    pub operations: usize,
    /// Faults to inject, comma-separated: handoff, kill, pause, partition,
    /// driver, clock, forge, membership (add a learner, promote it, remove
    /// a voter, re-add it, on a spare replica slot), storage (the next
    /// append to one replica's Raft log fails — fsync error, disk full —
    /// or is torn before a crash), postgres (needs --postgres: the
    /// projection's PostgreSQL server stopped, fast or immediate, and
    /// restarted at the same data directory and port, again and again); or
    /// `all` (postgres included only with --postgres; in `--mode process`:
    /// the first five), or `none`. A requested nemesis that never fires
    /// makes the campaign fail (exit 3, "vacuous").
    #[arg(long, default_value = "all")]
    pub nemesis: String,
    /// Pace of the operation stream, operations per second over all
    /// clients (0: as fast as the cluster answers). Faults are scheduled in
    /// time, so the pace sets how many a campaign sees.
    #[arg(long, default_value_t = crate::workload::DEFAULT_RATE)]
    pub rate: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 5)]
    pub clients: usize,
    /// Sandbox names the clients share (fewer: more contention).
    #[arg(long, default_value_t = 6)]
    pub names: usize,
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub replicas: u64,
    /// Where the replicas run.
    #[arg(long, value_enum, default_value_t = ModeArg::InProcess)]
    pub mode: ModeArg,
    /// Compute driver of the replicas in `--mode process`: `process` (shims)
    /// or `docker` (containers on --docker-host; `--nemesis driver` then
    /// injects its faults into the Docker driver).
    #[arg(long, value_enum, default_value_t = ChaosDriver::Process)]
    pub driver: ChaosDriver,
    /// With `--driver docker`: the engine (default: DOCKER_HOST, else the
    /// local socket).
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// With `--driver docker`: the image sandboxes run (it must be on the
    /// engine; nothing is pulled).
    #[arg(long, default_value = "busybox:latest")]
    pub docker_default_image: String,
    /// The `palisade` binary for `--mode process` (default: the running
    /// `palisade` itself).
    #[arg(long)]
    pub palisade: Option<PathBuf>,
    /// Print each report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also print the fault timeline of each campaign.
    #[arg(long)]
    pub timeline: bool,
    /// Run the PostgreSQL projection on every replica (a throwaway server,
    /// started with initdb/pg_ctl) and check it equals the state at the end
    /// (in-process mode only: `--sim` and `--mode process` refuse it);
    /// enables the postgres nemesis (in `all` too).
    #[arg(long)]
    pub postgres: bool,
    /// TEST-ONLY: turn on a planted bug (needs a build with the
    /// `planted-bugs` feature): skip-expected-id, stale-term, early-delete-ack,
    /// driver-fence-off, proposer-clock-receipts, accept-forwarded-internal,
    /// save-older-snapshot.
    #[arg(long)]
    pub plant: Vec<String>,
    /// Also write, per campaign, the history, the fault timeline and an
    /// HTML page (timeline of operations by client and fault bands, latency
    /// over time) into DIR/seed-S/.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Deterministic simulation: the replicas (real openraft, real redb
    /// files), the clients and the nemesis on one thread with simulated
    /// time, seeded randomness and an in-memory network; the same seed
    /// records the same history, byte for byte (`--report-dir` writes it).
    /// In-process only, without --postgres; nemeses: handoff (transfers
    /// only), partition, driver, clock, forge (`all` means these).
    #[arg(long)]
    pub sim: bool,
}

/// The drivers a process-mode campaign can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChaosDriver {
    /// The process driver (shims).
    Process,
    /// The Docker driver.
    Docker,
}

/// TEST-ONLY: the planted bugs a `palisade gateway run` process turns on at
/// start, comma-separated (`--plant` in `--mode process` sets it for the
/// replicas). A build without the `planted-bugs` feature refuses to start
/// with it set, rather than run without the bug.
pub const PLANTED_BUGS_ENV: &str = "PALISADE_TEST_PLANTED_BUGS";

/// Planted bugs of the in-process host model: nothing a real replica
/// process can turn on.
pub const HOST_MODEL_PLANTS: [&str; 1] = ["driver-fence-off"];

/// Turns on the planted bugs named (a build with the feature only).
pub fn plant(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    #[cfg(feature = "planted-bugs")]
    {
        use std::sync::atomic::Ordering;
        for name in names {
            match name.as_str() {
                "skip-expected-id" => palisade_lifecycle::planted::SKIP_EXPECTED_ID_CHECK
                    .store(true, Ordering::SeqCst),
                "stale-term" => {
                    palisade_gateway::planted::SKIP_TERM_FENCE.store(true, Ordering::SeqCst)
                }
                "early-delete-ack" => palisade_gateway::planted::ACK_DELETE_BEFORE_CLEANUP
                    .store(true, Ordering::SeqCst),
                "driver-fence-off" => crate::host::DRIVER_FENCE_OFF.store(true, Ordering::SeqCst),
                "proposer-clock-receipts" => {
                    palisade_lifecycle::planted::RECEIPTS_FROM_PROPOSER_CLOCK
                        .store(true, Ordering::SeqCst)
                }
                "accept-forwarded-internal" => {
                    palisade_lifecycle::planted::ACCEPT_FORWARDED_INTERNAL
                        .store(true, Ordering::SeqCst)
                }
                "save-older-snapshot" => {
                    palisade_storage::planted::SAVE_OLDER_SNAPSHOT.store(true, Ordering::SeqCst)
                }
                other => {
                    return Err(format!(
                        "unknown planted bug {other:?}; choose skip-expected-id, stale-term, early-delete-ack, driver-fence-off, proposer-clock-receipts, accept-forwarded-internal or save-older-snapshot"
                    ));
                }
            }
        }
        Ok(())
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        Err("--plant needs a build with the planted-bugs feature: cargo build -p palisade-cli --features planted-bugs".into())
    }
}

/// The `palisade` binary of the process mode when `--palisade` is not
/// given: the running executable, when it is `palisade` itself (`palisade
/// chaos run` runs this code inside the `palisade` binary).
pub fn palisade_is_me() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    (me.file_name()? == "palisade").then_some(me)
}

/// The nemeses `--nemesis` asks for: `all` means the kinds this campaign
/// can run (`--mode process` and `--sim` run fewer; `postgres` only with
/// `--postgres`); in process, a kind named that needs `--postgres` without
/// it is refused, with the fix (`--sim` and `--mode process` refuse it
/// themselves: they run no PostgreSQL).
pub fn requested_nemeses(args: &RunArgs) -> Result<Vec<NemesisKind>, String> {
    let mut nemeses = NemesisKind::parse_list(&args.nemesis)?;
    if args.nemesis.trim() == "all" {
        if args.mode == ModeArg::Process {
            nemeses.retain(|kind| NemesisKind::PROCESS_MODE.contains(kind));
        }
        if args.sim {
            nemeses.retain(|kind| NemesisKind::SIMULATION.contains(kind));
        }
        if !args.postgres {
            nemeses.retain(|kind| !kind.needs_postgres());
        }
    }
    let in_process = args.mode == ModeArg::InProcess && !args.sim;
    if in_process
        && !args.postgres
        && let Some(kind) = nemeses.iter().find(|kind| kind.needs_postgres())
    {
        return Err(crate::campaign::needs_postgres_message(*kind));
    }
    Ok(nemeses)
}

/// Runs one campaign per seed and prints the reports; returns the process
/// exit code (0 clean, 1 an anomaly, 2 the harness could not run).
pub async fn run_campaigns(args: RunArgs) -> i32 {
    if let Err(message) = plant(&args.plant) {
        eprintln!("error: {message}");
        return 2;
    }
    if args.driver == ChaosDriver::Docker && args.mode != ModeArg::Process {
        eprintln!(
            "error: --driver docker needs --mode process (the in-process mode models one host in memory)"
        );
        return 2;
    }
    if args.sim && args.mode != ModeArg::InProcess {
        eprintln!("error: --sim runs the replicas in this process; drop --mode process");
        return 2;
    }
    if args.sim && args.postgres {
        eprintln!("error: --sim runs without PostgreSQL; drop --postgres");
        return 2;
    }
    if args.mode == ModeArg::Process && args.postgres {
        // Only in-process replicas run the projection the check compares;
        // running on without it would report a check that never happened.
        eprintln!(
            "error: --mode process runs without PostgreSQL (the projection check is in-process only); drop --postgres"
        );
        return 2;
    }
    if args.mode == ModeArg::Process
        && let Some(plant) = args
            .plant
            .iter()
            .find(|plant| HOST_MODEL_PLANTS.contains(&plant.as_str()))
    {
        eprintln!(
            "error: --plant {plant} plants the bug in the in-process host model; --mode process runs the real driver: drop it or run in process"
        );
        return 2;
    }
    let mode = match args.mode {
        ModeArg::InProcess if args.sim => Mode::Simulated,
        ModeArg::InProcess => Mode::InProcess,
        ModeArg::Process => match args.palisade.clone().or_else(palisade_is_me) {
            Some(palisade) => Mode::Processes {
                palisade,
                docker: (args.driver == ChaosDriver::Docker).then(|| DockerTarget {
                    host: args.docker_host.clone(),
                    default_image: args.docker_default_image.clone(),
                }),
                planted: args.plant.clone(),
            },
            None => {
                eprintln!(
                    "error: --mode process needs the palisade binary: run it as `palisade chaos run` or pass --palisade PATH"
                );
                return 2;
            }
        },
    };
    let first = args.seed.unwrap_or_else(|| {
        if args.seeds > 1 {
            1
        } else {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |elapsed| elapsed.as_nanos() as u64 % 1_000_000_000)
        }
    });
    let nemeses = match requested_nemeses(&args) {
        Ok(nemeses) => nemeses,
        Err(message) => {
            eprintln!("error: --nemesis: {message}");
            return 2;
        }
    };
    if !args.rate.is_finite() || args.rate < 0.0 {
        eprintln!("error: --rate must be a number of operations per second, 0 or more");
        return 2;
    }
    let mut failing = Vec::new();
    let mut vacuous = Vec::new();
    let mut faults_per_campaign = Vec::new();
    // The fewest faults of each requested kind in one campaign.
    let mut fewest_of_kind: std::collections::BTreeMap<String, u64> = Default::default();
    let mut totals = (0usize, 0usize, 0usize, 0usize);
    for seed in first..first.saturating_add(args.seeds.max(1)) {
        eprintln!(
            "palisade chaos: seed {seed} ({} operations; re-run with --seed {seed})",
            args.operations
        );
        let config = CampaignConfig {
            seed,
            operations: args.operations,
            clients: args.clients,
            names: args.names,
            replicas: args.replicas,
            nemeses: nemeses.clone(),
            mode: mode.clone(),
            postgres: args.postgres,
            rate: args.rate,
        };
        let report: Report = match run_campaign(&config).await {
            Ok(report) => report,
            // A simulation that stopped moving is a finding of that seed
            // (its message says how to reproduce it): the other seeds
            // still run, and the seed counts as failing.
            Err(error @ crate::ChaosError::Stalled(_)) => {
                eprintln!("error: seed {seed}: {error}");
                failing.push(seed);
                continue;
            }
            Err(error) => {
                eprintln!("error: seed {seed}: {error}");
                return 2;
            }
        };
        totals.0 += report.operations.ok;
        totals.1 += report.operations.fail;
        totals.2 += report.operations.unknown;
        totals.3 += report.anomalies.len();
        faults_per_campaign.push(report.faults_total());
        for kind in &report.nemeses {
            let count = report.faults_by_kind.get(kind).copied().unwrap_or(0);
            let fewest = fewest_of_kind.entry(kind.clone()).or_insert(count);
            *fewest = (*fewest).min(count);
        }
        if let Some(dir) = &args.report_dir {
            let dir = dir.join(format!("seed-{seed}"));
            if let Err(error) = crate::report_dir::write(&report, &dir) {
                eprintln!(
                    "error: cannot write the report to {}: {error}",
                    dir.display()
                );
                return 2;
            }
            eprintln!("palisade chaos: report written to {}", dir.display());
        }
        if args.json {
            match serde_json::to_string(&report) {
                Ok(json) => println!("{json}"),
                Err(error) => eprintln!("error: cannot encode the report: {error}"),
            }
        } else {
            print!("{report}");
            if args.timeline {
                println!("  fault timeline:");
                for line in report.timeline_lines() {
                    println!("    {line}");
                }
            }
        }
        if !report.is_clean() {
            failing.push(seed);
        }
        if report.is_vacuous() {
            eprintln!(
                "palisade chaos: seed {seed} is vacuous: requested nemesis never fired: {}",
                report.vacuous.join(", ")
            );
            vacuous.push(seed);
        }
    }
    faults_per_campaign.sort_unstable();
    if args.seeds > 1 {
        println!(
            "palisade chaos: {} campaigns (seeds {first}..={}), {} operations each: {} ok, {} fail, {} unknown; faults per campaign: min {}, median {}, max {}; {} anomalies{}{}",
            args.seeds,
            first + args.seeds - 1,
            args.operations,
            totals.0,
            totals.1,
            totals.2,
            faults_per_campaign.first().copied().unwrap_or(0),
            faults_per_campaign
                .get(faults_per_campaign.len() / 2)
                .copied()
                .unwrap_or(0),
            faults_per_campaign.last().copied().unwrap_or(0),
            totals.3,
            if failing.is_empty() {
                String::new()
            } else {
                format!(" (failing seeds: {failing:?})")
            },
            if vacuous.is_empty() {
                String::new()
            } else {
                format!(" (vacuous seeds: {vacuous:?})")
            }
        );
    }
    if args.seeds > 1 {
        println!(
            "palisade chaos: fewest faults of each kind in one campaign: {}",
            fewest_of_kind
                .iter()
                .map(|(kind, count)| format!("{kind} {count}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !failing.is_empty() {
        1
    } else if !vacuous.is_empty() {
        3
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        run: RunArgs,
    }

    fn nemeses(arguments: &[&str]) -> Result<Vec<NemesisKind>, String> {
        let command =
            Command::try_parse_from(std::iter::once("run").chain(arguments.iter().copied()))
                .expect("the flags parse");
        requested_nemeses(&command.run)
    }

    #[test]
    fn all_includes_the_postgres_nemesis_only_with_postgres() {
        assert_eq!(nemeses(&["--nemesis", "all"]), Ok(NemesisKind::all(false)));
        assert!(!NemesisKind::all(false).contains(&NemesisKind::Postgres));
        let with_postgres = nemeses(&["--postgres"]).expect("all with --postgres");
        assert_eq!(with_postgres, NemesisKind::ALL.to_vec());
        assert!(with_postgres.contains(&NemesisKind::Postgres));
    }

    #[test]
    fn the_postgres_nemesis_without_postgres_is_refused_with_the_fix() {
        let refused = nemeses(&["--nemesis", "kill,postgres"]).expect_err("refused");
        assert!(refused.contains("postgres"), "{refused}");
        assert!(refused.contains("add --postgres"), "{refused}");
        assert_eq!(
            nemeses(&["--nemesis", "postgres", "--postgres"]),
            Ok(vec![NemesisKind::Postgres])
        );
    }

    #[test]
    fn all_in_process_mode_or_simulation_has_no_postgres_nemesis() {
        let process = nemeses(&["--postgres", "--mode", "process"]).expect("process mode");
        assert_eq!(process, NemesisKind::PROCESS_MODE.to_vec());
        let simulated = nemeses(&["--sim"]).expect("simulation");
        assert_eq!(simulated, NemesisKind::SIMULATION.to_vec());
    }
}
