//! The nemesis: injects one fault at a time into the in-process cluster,
//! on a schedule drawn from the campaign's seed, and heals everything when
//! told to stop.
//!
//! | kind | what it does |
//! |---|---|
//! | `handoff` | arms a fault point (after `Begin*` committed, after the driver effect, while a follower forwards, while a follower installs a snapshot, between a snapshot build's copy and its save) and, when a replica reaches it, moves leadership away or crashes the replica right there (for the forwarding point: the leader the write is in flight to). For the snapshot point it first makes a follower need a snapshot: crashes it, lets writes go on, has the leader snapshot and purge its log, restarts it. Every other handoff is a *ping-pong* at the begin-committed point of a launch: leadership moves away while the old leader's task is held, the new leader finishes the operation, the nemesis deletes the sandbox through the API (recorded in the history as client `nemesis`), leadership moves *back*, and the held task goes on — in a replica that leads again, in a newer term, so only the term fence stands between it and a launch of a deleted sandbox. |
//! | `kill` | crashes a replica (the leader more often than not), restarts it from disk after a while |
//! | `pause` | freezes a replica (see [`crate::cluster`]), resumes it after a while |
//! | `partition` | isolates a replica, splits the cluster, or adds message loss, delay, duplication and lost answers on every link; heals after a while |
//! | `driver` | makes the shared driver slow, refusing, uncertain (before or after the effect) or hanging, for a while |
//!
//! | `clock` | skews one replica's wall clock (the clock its requests and ticks are stamped with) far behind or ahead — more than the receipt retention — or by a few seconds, jumping at once, and sets it right after a while |
//! | `membership` | the next step of a cycle through the admin API: start the spare replica slot empty and add it as a learner, promote it to voter, remove a voter that does not lead (then crash it and delete its files), re-add it later (see [`crate::membership`]) |
//! | `storage` | the next append to one replica's Raft log fails (fsync error, disk full: the replica must fail-stop) or is torn (half the batch written, then a crash); the replica is restarted from its files (see [`crate::storage`]) |
//! | `forge` | sends the leader a forged peer message: a leader-internal command (the completion of an operation in flight, an observation that a running execution was lost, a tick) as a `ForwardWrite` claiming to come from a member; the leader must refuse it (PERMISSION_DENIED), and an accepted one is recorded as `forge-accepted` |
//! | `postgres` | (with `--postgres`) stops the projection's PostgreSQL server — `pg_ctl stop -m fast` or `-m immediate` (a crash), at random — holds it down for a few hundred ms to 1.5 s, and starts it again at the same data directory and port; the projection must equal the state at the end (see [`crate::projection`]) |
//!
//! # Density: faults in time, on lanes
//!
//! Faults are scheduled in time for the whole campaign — a fault, a heal,
//! a short quiet, the next fault — on independent *lanes*, each with its
//! own RNG drawn from the seed: the **cluster lane** (`handoff`, `kill`,
//! `pause`, `partition`, `membership`, `storage`) injects one fault at a time, in shuffled rounds
//! of its kinds, which keeps a quorum available most of the time so the
//! workload makes progress; the `driver`, `clock`, `forge` and
//! `postgres` lanes run beside it, since none of them takes a replica
//! away. Faults still
//! overlap with the consequences of the previous one (elections, catch-up,
//! retried effects). The workload is paced ([`crate::workload`]) so that a
//! campaign lasts long enough to see several faults of every kind.
//!
//! A fault counts as injected only when it took place: an armed fault
//! point that no replica reached in time, or a fault that has nothing to
//! act on (a partition of a single replica), is recorded as *missed*, not
//! injected. A requested kind that never fired makes the campaign
//! *vacuous* ([`crate::campaign::Report::vacuous`]).

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver as _;
use palisade_driver::fault::{FaultPlan, FaultRule};
use palisade_raft::NodeId;
use palisade_raft::hooks::FaultPoint;
use palisade_testkit::TestPostgres;
use palisade_testkit::test_postgres::Shutdown;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};

use crate::cluster::Cluster;
use crate::history::{Call, History, NEMESIS_CLIENT, Operation, Reply};
use crate::host::SharedHost;
use crate::links::{LinkTable, Noise};
use crate::points::{Fired, OperationFilter, PointAction, PointKind, Triggers};
use crate::workload::{Endpoints, Request, WorkloadConfig, execute};
use palisade_proto::v1;

/// How long an armed fault point may wait for a replica to reach it.
pub const TRIGGER_WAIT_MAX: Duration = Duration::from_secs(4);
/// How long the nemesis waits for a leader after healing.
pub const HEAL_LEADER_WAIT_MAX: Duration = Duration::from_secs(30);

/// The kinds of faults (`--nemesis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NemesisKind {
    /// Leadership handoffs and crashes at fault points inside a request.
    Handoff,
    /// Replica crash and restart from disk.
    Kill,
    /// Replica pause (SIGSTOP-like) and resume.
    Pause,
    /// Network partitions and message loss.
    Partition,
    /// Slow, failing, uncertain and hanging driver calls.
    Driver,
    /// A replica's wall clock skewed or jumped.
    Clock,
    /// Forged peer messages: leader-internal commands forwarded to the
    /// leader.
    Forge,
    /// Membership changes under load: add a learner, promote it, remove a
    /// voter, re-add it ([`crate::membership`]).
    Membership,
    /// Faults in one replica's log store: fsync error, disk full, a torn
    /// write before a crash ([`crate::storage`]).
    Storage,
    /// The projection's PostgreSQL server stopped (fast or immediate) and
    /// restarted; only with `--postgres` ([`crate::projection`]).
    Postgres,
}

impl NemesisKind {
    /// Every kind (`postgres` needs `--postgres`: see [`NemesisKind::all`]).
    pub const ALL: [NemesisKind; 10] = [
        NemesisKind::Handoff,
        NemesisKind::Kill,
        NemesisKind::Pause,
        NemesisKind::Partition,
        NemesisKind::Driver,
        NemesisKind::Clock,
        NemesisKind::Forge,
        NemesisKind::Membership,
        NemesisKind::Storage,
        NemesisKind::Postgres,
    ];

    /// What `--nemesis all` means in process: every kind, `postgres` only
    /// when the campaign runs PostgreSQL (`--postgres`).
    pub fn all(postgres: bool) -> Vec<NemesisKind> {
        NemesisKind::ALL
            .into_iter()
            .filter(|kind| postgres || !kind.needs_postgres())
            .collect()
    }

    /// True for the kinds that need the campaign's PostgreSQL server
    /// (`--postgres`).
    pub fn needs_postgres(self) -> bool {
        self == NemesisKind::Postgres
    }

    /// The kinds the simulation (`--sim`) can inject: a replica there
    /// cannot be crashed or paused (`Cluster::is_simulated`), so no
    /// `kill`, no `pause`, no `membership` or `storage` (both restart
    /// replicas), and `handoff` only transfers leadership.
    pub const SIMULATION: [NemesisKind; 5] = [
        NemesisKind::Handoff,
        NemesisKind::Partition,
        NemesisKind::Driver,
        NemesisKind::Clock,
        NemesisKind::Forge,
    ];

    /// The kinds the process mode can inject (`clock`, `forge`,
    /// `membership` and `storage` reach into a replica or its slots:
    /// in-process only).
    pub const PROCESS_MODE: [NemesisKind; 5] = [
        NemesisKind::Handoff,
        NemesisKind::Kill,
        NemesisKind::Pause,
        NemesisKind::Partition,
        NemesisKind::Driver,
    ];

    /// True for the kinds of the cluster lane (one fault at a time).
    pub fn is_cluster_lane(self) -> bool {
        matches!(
            self,
            NemesisKind::Handoff
                | NemesisKind::Kill
                | NemesisKind::Pause
                | NemesisKind::Partition
                | NemesisKind::Membership
                | NemesisKind::Storage
        )
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            NemesisKind::Handoff => "handoff",
            NemesisKind::Kill => "kill",
            NemesisKind::Pause => "pause",
            NemesisKind::Partition => "partition",
            NemesisKind::Driver => "driver",
            NemesisKind::Clock => "clock",
            NemesisKind::Forge => "forge",
            NemesisKind::Membership => "membership",
            NemesisKind::Storage => "storage",
            NemesisKind::Postgres => "postgres",
        }
    }

    /// Parses a comma-separated list (`all` for every kind — callers drop
    /// the ones the campaign cannot run, see [`NemesisKind::all`] — `none`
    /// or an empty string for none).
    pub fn parse_list(text: &str) -> Result<Vec<NemesisKind>, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(NemesisKind::ALL.to_vec());
        }
        if text.is_empty() || text == "none" {
            return Ok(Vec::new());
        }
        let mut kinds: Vec<NemesisKind> = text
            .split(',')
            .map(|part| part.trim().parse())
            .collect::<Result<_, _>>()?;
        kinds.sort();
        kinds.dedup();
        Ok(kinds)
    }
}

impl FromStr for NemesisKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        NemesisKind::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown nemesis {text:?}; choose from handoff, kill, pause, partition, driver, clock, forge, membership, storage, postgres (with --postgres) (or all)"
                )
            })
    }
}

/// What the nemesis needs.
pub struct Nemesis {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// The peer network.
    pub links: Arc<LinkTable>,
    /// The fault points.
    pub triggers: Arc<Triggers>,
    /// Triggers that fired.
    pub fired: mpsc::Receiver<Fired>,
    /// The shared host (driver), whose fault plan the nemesis sets.
    pub host: Arc<SharedHost>,
    /// Where fault events are recorded.
    pub history: Arc<History>,
    /// The kinds to inject.
    pub kinds: Vec<NemesisKind>,
    /// The schedule's RNG.
    pub rng: StdRng,
    /// Deletes the nemesis made (for request ids).
    pub deletes: u64,
    /// Faults injected, by kind.
    pub counts: BTreeMap<String, u64>,
    /// Faults attempted that did not take place (an armed point no replica
    /// reached, a transfer that did not move), by kind.
    pub missed: BTreeMap<String, u64>,
    /// Handoffs so far.
    pub handoffs: u64,
    /// The replicas' public endpoints, for the nemesis's own requests.
    pub endpoints: Endpoints,
    /// Prefix of the nemesis's request ids.
    pub request_prefix: String,
    /// Set once every kind of the cluster lane had its turn (its first
    /// round done); the workload goes on past its operations until then
    /// ([`WorkloadConfig::keep_going_until`](crate::workload::WorkloadConfig::keep_going_until)).
    pub first_round_done: Arc<std::sync::atomic::AtomicBool>,
    /// The projection's PostgreSQL server (`--postgres`), which the
    /// `postgres` nemesis stops and restarts.
    pub postgres: Option<Arc<TestPostgres>>,
}

impl Nemesis {
    pub(crate) fn ms(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(low..=high))
    }

    /// Records an injected fault; returns its position in the history
    /// (see [`History::fault_ended`]).
    pub(crate) fn count(&mut self, kind: String, detail: String) -> Option<usize> {
        *self.counts.entry(kind.clone()).or_default() += 1;
        self.history.injected(kind, detail)
    }

    /// Records a fault that did not take place (not counted as injected).
    pub(crate) fn miss(&mut self, kind: String, detail: String) {
        self.history.fault(format!("missed:{kind}"), detail);
        *self.missed.entry(kind).or_default() += 1;
    }

    /// A victim: the leader with probability 0.6, else any replica.
    pub(crate) fn victim(&mut self) -> NodeId {
        let nodes = self.cluster.node_ids();
        let leader = self.cluster.leader();
        match leader {
            Some(leader) if self.rng.random_bool(0.6) => leader,
            _ => *nodes.choose(&mut self.rng).unwrap_or(&1),
        }
    }

    pub(crate) fn other_than(&mut self, node: NodeId) -> Option<NodeId> {
        let others: Vec<NodeId> = self
            .cluster
            .node_ids()
            .into_iter()
            .filter(|other| *other != node)
            .collect();
        others.choose(&mut self.rng).copied()
    }

    /// Injects faults until `stop` turns true, then heals everything.
    /// Returns how many faults of each kind were injected, and missed.
    pub async fn run(mut self, stop: watch::Receiver<bool>) -> NemesisOutcome {
        // The side lanes first, each with its own RNG drawn from this one,
        // so that the schedule stays a function of the seed. The `postgres`
        // lane's is derived without advancing it: adding `--postgres` to a
        // seed leaves every other fault of its schedule as it was.
        let mut lanes = tokio::task::JoinSet::new();
        for kind in self.kinds.clone() {
            if kind.is_cluster_lane() {
                continue;
            }
            let rng = if kind.needs_postgres() {
                StdRng::seed_from_u64(self.rng.clone().random::<u64>() ^ POSTGRES_LANE_SALT)
            } else {
                StdRng::seed_from_u64(self.rng.random())
            };
            let lane = Lane {
                cluster: self.cluster.clone(),
                host: self.host.clone(),
                history: self.history.clone(),
                rng,
                counts: BTreeMap::new(),
                missed: BTreeMap::new(),
                postgres: self.postgres.clone(),
            };
            lanes.spawn(lane.run(kind, stop.clone()));
        }
        let cluster_kinds: Vec<NemesisKind> = self
            .kinds
            .iter()
            .copied()
            .filter(|kind| kind.is_cluster_lane())
            .collect();
        self.cluster_lane(cluster_kinds, stop).await;
        while let Some(joined) = lanes.join_next().await {
            if let Ok((counts, missed)) = joined {
                for (kind, count) in counts {
                    *self.counts.entry(kind).or_default() += count;
                }
                for (kind, count) in missed {
                    *self.missed.entry(kind).or_default() += count;
                }
            }
        }
        self.heal().await;
        NemesisOutcome {
            injected: self.counts,
            missed: self.missed,
        }
    }

    /// The cluster lane: one fault at a time until `stop`.
    async fn cluster_lane(&mut self, kinds: Vec<NemesisKind>, mut stop: watch::Receiver<bool>) {
        // Rounds: every kind of the lane once per round (handoff twice: it
        // has the most variants), in a shuffled order, so that even a short
        // campaign sees each kind of fault; the first round begins with a
        // handoff (and the first handoff is a stall before a launch's
        // effect), the fault this harness exists for.
        let mut round: Vec<NemesisKind> = Vec::new();
        let mut first_round = true;
        if kinds.is_empty() {
            self.first_round_done
                .store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        loop {
            let quiet = self.ms(QUIET_MS.0, QUIET_MS.1);
            tokio::select! {
                // `biased`: deterministic for `--sim`.
                biased;
                _ = stop.wait_for(|stopped| *stopped) => break,
                _ = tokio::time::sleep(quiet) => {}
            }
            if *stop.borrow() {
                break;
            }
            if round.is_empty() {
                round = kinds.clone();
                if kinds.contains(&NemesisKind::Handoff) {
                    round.push(NemesisKind::Handoff);
                }
                rand::seq::SliceRandom::shuffle(round.as_mut_slice(), &mut self.rng);
                if first_round
                    && let Some(at) = round.iter().position(|k| *k == NemesisKind::Handoff)
                {
                    // `pop` takes from the end.
                    let last = round.len() - 1;
                    round.swap(at, last);
                }
                first_round = false;
            }
            let Some(kind) = round.pop() else {
                break;
            };
            match kind {
                NemesisKind::Handoff => self.handoff(&mut stop).await,
                NemesisKind::Kill => self.kill().await,
                NemesisKind::Pause => self.pause().await,
                NemesisKind::Partition => self.partition().await,
                NemesisKind::Membership => self.membership().await,
                NemesisKind::Storage => self.storage(&mut stop).await,
                NemesisKind::Driver
                | NemesisKind::Clock
                | NemesisKind::Forge
                | NemesisKind::Postgres => {}
            }
            if round.is_empty() {
                self.first_round_done
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    async fn kill(&mut self) {
        let victim = self.victim();
        self.cluster.crash(victim).await;
        let fault = self.count("kill".into(), format!("crash node {victim}"));
        let down = self.ms(150, 800);
        tokio::time::sleep(down).await;
        self.restart(victim);
        self.history.fault_ended(fault);
    }

    pub(crate) fn restart(&mut self, node: NodeId) {
        match self.cluster.restart(node) {
            Ok(()) => self
                .history
                .fault("restart", format!("restart node {node}")),
            Err(error) => self
                .history
                .fault("restart-failed", format!("node {node}: {error}")),
        }
    }

    async fn pause(&mut self) {
        let victim = self.victim();
        self.cluster.pause(victim);
        let fault = self.count("pause".into(), format!("pause node {victim}"));
        let paused = self.ms(150, 900);
        tokio::time::sleep(paused).await;
        self.cluster.resume(victim);
        self.history.fault_ended(fault);
        self.history
            .fault("resume", format!("resume node {victim}"));
    }

    async fn partition(&mut self) {
        let nodes = self.cluster.node_ids();
        if nodes.len() < 2 {
            self.miss(
                "partition".into(),
                "a single replica has no link to cut".into(),
            );
            // Keep the lane's pace: nothing else happens in this slot.
            let idle = self.ms(300, 1_200);
            tokio::time::sleep(idle).await;
            return;
        }
        let shape = self.rng.random_range(0..3u8);
        let (fault, detail) = match shape {
            0 => {
                let victim = self.victim();
                self.links.isolate(victim, &nodes);
                let detail = format!("isolate node {victim}");
                (
                    self.count("partition:isolate".into(), detail.clone()),
                    detail,
                )
            }
            1 => {
                let mut shuffled = nodes.clone();
                rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut self.rng);
                let minority = shuffled.len().saturating_sub(1) / 2;
                let minority = minority.max(1);
                let sides = [
                    shuffled[..minority]
                        .iter()
                        .copied()
                        .collect::<BTreeSet<_>>(),
                    shuffled[minority..]
                        .iter()
                        .copied()
                        .collect::<BTreeSet<_>>(),
                ];
                self.links.partition(&sides);
                let detail = format!("split {:?} | {:?}", sides[0], sides[1]);
                (self.count("partition:split".into(), detail.clone()), detail)
            }
            _ => {
                let noise = Noise {
                    loss: self.rng.random_range(0.02..0.25),
                    duplicate: self.rng.random_range(0.0..0.15),
                    lost_answer: self.rng.random_range(0.0..0.1),
                    delay_max: self.ms(0, 80),
                };
                self.links.set_noise(noise);
                let detail = format!("noise {noise:?}");
                (self.count("partition:noise".into(), detail.clone()), detail)
            }
        };
        let held = self.ms(300, 1_200);
        tokio::time::sleep(held).await;
        self.links.heal();
        self.history
            .fault("heal-links", format!("heal after {detail}"));
        self.history.fault_ended(fault);
    }

    /// The next handoff: every other one targets a launch (old-term
    /// launches are the effects a missing fence lets through, and the most
    /// damaging): alternately a stall at the before-effect point, after the
    /// leader confirmed its leadership (only the driver's own fence and
    /// tombstone stop it), and a ping-pong at the begin-committed point
    /// (only the term fence stops it); the others pick a point and a
    /// transfer or a crash at random.
    fn next_handoff(&mut self) -> (PointKind, PointAction, OperationFilter) {
        self.handoffs += 1;
        if self.handoffs == 2 && !self.cluster.is_simulated() {
            // The snapshot race once early in every campaign: a short one
            // sees few handoffs, and only this one reaches a snapshot save.
            // (Not in the simulation: the race restarts a follower.)
            return (
                PointKind::SnapshotBuild,
                PointAction::HoldBuild {
                    wait_max: crate::snapshot_race::HOLD_MAX,
                },
                None,
            );
        }
        if self.handoffs % 2 == 1 {
            let wait_max = self.ms(2_000, 3_000);
            // The stall first: a short campaign may see only one.
            // The simulation cannot freeze one replica (see
            // `Cluster::is_simulated`): a ping-pong instead.
            let (kind, action) = if self.handoffs % 4 == 1 && !self.cluster.is_simulated() {
                (PointKind::BeforeEffect, PointAction::Stall { wait_max })
            } else {
                (
                    PointKind::BeginCommitted,
                    PointAction::PingPong { wait_max },
                )
            };
            return (kind, action, Some(&["Create", "Start"]));
        }
        // The simulation cannot crash one replica (see
        // `Cluster::is_simulated`): no snapshot install (it crashes a
        // follower to make it need one), no snapshot race (it restarts
        // one), transfers instead of crashes.
        let simulated = self.cluster.is_simulated();
        let points: &[PointKind] = if simulated {
            &[
                PointKind::BeginCommitted,
                PointKind::EffectDone,
                PointKind::EffectDone,
                PointKind::Forwarding,
            ]
        } else {
            &[
                PointKind::BeginCommitted,
                PointKind::EffectDone,
                PointKind::EffectDone,
                PointKind::Forwarding,
                PointKind::SnapshotInstall,
                PointKind::SnapshotBuild,
            ]
        };
        let kind = *points
            .choose(&mut self.rng)
            .unwrap_or(&PointKind::EffectDone);
        if kind == PointKind::SnapshotBuild {
            return (
                kind,
                PointAction::HoldBuild {
                    wait_max: crate::snapshot_race::HOLD_MAX,
                },
                None,
            );
        }
        let action = if self.rng.random_bool(0.5) || simulated {
            PointAction::Transfer {
                hold: self.ms(20, 800),
            }
        } else {
            PointAction::Crash
        };
        (kind, action, None)
    }

    async fn handoff(&mut self, stop: &mut watch::Receiver<bool>) {
        let (kind, action, operations) = self.next_handoff();
        if let PointAction::HoldBuild { wait_max } = action {
            self.snapshot_race(wait_max, stop).await;
            return;
        }
        let mut snapshot_follower = None;
        if kind == PointKind::SnapshotInstall {
            // Make a follower need a snapshot: away while the log moves on
            // and is purged behind a fresh snapshot.
            let Some(leader) = self.cluster.leader() else {
                return;
            };
            let Some(follower) = self.other_than(leader) else {
                return;
            };
            self.cluster.crash(follower).await;
            self.history.fault(
                "handoff-setup",
                format!("crash follower {follower} for a snapshot"),
            );
            let away = self.ms(600, 1_500);
            tokio::time::sleep(away).await;
            if let Some(leader) = self.cluster.leader() {
                self.cluster.snapshot_and_purge(leader).await;
            }
            snapshot_follower = Some(follower);
        }
        self.triggers.arm(kind, action, operations);
        if let Some(follower) = snapshot_follower {
            self.restart(follower);
        }
        // The workload may end meanwhile: then nothing reaches the point.
        let fired = tokio::select! {
            // `biased`: deterministic for `--sim`.
            biased;
            fired = tokio::time::timeout(TRIGGER_WAIT_MAX, self.fired.recv()) => fired.ok().flatten(),
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        let Some(fired) = fired else {
            self.disarm();
            self.miss(
                format!("handoff:{}", kind.name()),
                "no replica reached the point in time".into(),
            );
            return;
        };
        let Fired {
            node,
            point,
            action,
            done,
        } = fired;
        let label = format!("handoff:{}:{}", kind.name(), action.name());
        match action {
            PointAction::Transfer { .. } => {
                let from = match &point {
                    FaultPoint::Forwarding { leader, .. } => *leader,
                    FaultPoint::SnapshotInstall { .. } => self.cluster.leader().unwrap_or(node),
                    _ => node,
                };
                let to = match &point {
                    FaultPoint::SnapshotInstall { .. } => self.other_than_both(from, node),
                    _ => self.other_than(from),
                };
                let moved = match to {
                    Some(to) => self.cluster.transfer_leader(from, to).await,
                    None => false,
                };
                let detail = format!(
                    "{point:?} at node {node}: transfer from {from} to {to:?} (moved: {moved})"
                );
                if moved {
                    self.count(label, detail);
                } else {
                    self.miss(label, detail);
                }
                let _ = done.send(());
            }
            PointAction::PingPong { wait_max } => {
                let away = self.other_than(node);
                let moved = match away {
                    Some(to) => self.cluster.transfer_leader(node, to).await,
                    None => false,
                };
                let gone = match &point {
                    FaultPoint::BeginCommitted { sandbox_id, .. }
                    | FaultPoint::BeforeEffect { sandbox_id, .. }
                        if moved =>
                    {
                        self.delete_when_settled(sandbox_id, wait_max).await
                    }
                    _ => false,
                };
                let back = match self.cluster.leader() {
                    Some(leader) if moved && leader != node => {
                        self.cluster.transfer_leader(leader, node).await
                            && self.cluster.wait_established(node).await
                    }
                    _ => false,
                };
                let detail = format!(
                    "{point:?} at node {node}: leadership away to {away:?} (moved: {moved}), sandbox gone: {gone}, back to {node}: {back}"
                );
                if moved {
                    self.count(label, detail);
                } else {
                    self.miss(label, detail);
                }
                let _ = done.send(());
            }
            PointAction::Stall { wait_max } => {
                self.cluster.pause(node);
                let fault = self.count(
                    label,
                    format!("{point:?} at node {node}: frozen after its leadership check"),
                );
                let others_lead = self.cluster.wait_for_leader(wait_max).await.is_ok();
                let gone = match &point {
                    FaultPoint::BeforeEffect { sandbox_id, .. } if others_lead => {
                        self.delete_when_settled(sandbox_id, wait_max).await
                    }
                    _ => false,
                };
                // The held effect goes first when the replica thaws: its task
                // is already woken when the thread is released.
                let _ = done.send(());
                self.cluster.resume(node);
                self.history.fault(
                    "thaw",
                    format!(
                        "node {node}: another leader meanwhile: {others_lead}, sandbox gone: {gone}; the held effect goes on"
                    ),
                );
                self.history.fault_ended(fault);
            }
            PointAction::Crash => {
                let victim = match &point {
                    FaultPoint::Forwarding { leader, .. } => {
                        // While the forwarded write is in flight.
                        let delay = self.ms(0, 30);
                        tokio::time::sleep(delay).await;
                        *leader
                    }
                    _ => node,
                };
                self.cluster.crash(victim).await;
                drop(done);
                let fault = self.count(
                    label,
                    format!("{point:?} at node {node}: crash node {victim}"),
                );
                let down = self.ms(150, 800);
                tokio::time::sleep(down).await;
                self.restart(victim);
                self.history.fault_ended(fault);
            }
            // Armed only by `snapshot_race`, which waits for it itself.
            PointAction::HoldBuild { .. } => {
                drop(done);
                self.miss(
                    label,
                    format!("{point:?} at node {node}: not expected here"),
                );
            }
        }
    }

    /// Waits (at most `wait_max`) until the new leader finished the
    /// operation on `sandbox_id`, then deletes the sandbox through the
    /// public API, as a client would — recorded in the history as client
    /// `nemesis`, so every check accounts for it. True once it is gone.
    async fn delete_when_settled(&mut self, sandbox_id: &str, wait_max: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait_max;
        let name =
            loop {
                let settled =
                    self.cluster
                        .leader()
                        .and_then(|leader| self.cluster.node(leader))
                        .and_then(|node| {
                            node.replica.state.read(|applied| {
                                applied.state.sandboxes.get(sandbox_id).map(|sandbox| {
                                    (sandbox.name.clone(), sandbox.operation.is_none())
                                })
                            })
                        });
                match settled {
                    Some((name, true)) => break name,
                    // No leader yet, or it has not applied the operation yet, or
                    // it is still in flight.
                    _ if tokio::time::Instant::now() >= deadline => return false,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
        self.deletes += 1;
        let request_id = format!("{}-nemesis-{}", self.request_prefix, self.deletes);
        delete_as_nemesis(
            &self.history,
            &self.endpoints,
            &mut self.rng,
            request_id,
            name,
            sandbox_id,
        )
        .await
    }

    /// Disarms the fault points and lets go any task that reached one
    /// just before (a stale trigger must not be acted on later).
    pub(crate) fn disarm(&mut self) {
        self.triggers.disarm();
        while let Ok(fired) = self.fired.try_recv() {
            drop(fired.done);
        }
    }

    fn other_than_both(&mut self, first: NodeId, second: NodeId) -> Option<NodeId> {
        let others: Vec<NodeId> = self
            .cluster
            .node_ids()
            .into_iter()
            .filter(|other| *other != first && *other != second)
            .collect();
        others.choose(&mut self.rng).copied()
    }

    /// Ends every fault: resumes, restarts, heals links, clears driver
    /// faults, disarms the fault points (and lets any task waiting at one
    /// go), and waits for a leader.
    pub async fn heal(&mut self) {
        self.disarm();
        self.links.heal();
        self.host.set_plan(FaultPlan::default());
        if let Some(postgres) = &self.postgres {
            crate::projection::ensure_running(postgres, &self.history).await;
        }
        if self.kinds.contains(&NemesisKind::Membership) {
            // A change whose answer was lost may have landed meanwhile.
            let _ = self.cluster.wait_for_leader(HEAL_LEADER_WAIT_MAX).await;
            crate::membership::finish_joint_changes(&self.cluster).await;
            let _ = self.cluster.wait_for_leader(HEAL_LEADER_WAIT_MAX).await;
            self.sync_members(true).await;
        }
        for node in self.cluster.node_ids() {
            if self.cluster.is_paused(node) {
                self.cluster.resume(node);
            }
            if self.cluster.has_stopped(node) {
                // It ended on its own (the campaign reports it as
                // `replica-stopped`); a restart lets the other checks run.
                self.cluster.crash(node).await;
            }
            if !self.cluster.is_running(node) {
                self.restart(node);
            }
        }
        self.history.fault("heal", "all faults healed");
        let _ = self.cluster.wait_for_leader(HEAL_LEADER_WAIT_MAX).await;
    }
}

/// How long the cluster lane stays quiet between two faults, ms (low, high).
pub const QUIET_MS: (u64, u64) = (200, 700);

/// What the nemesis did: faults injected and missed, by kind
/// (`handoff:before-effect:stall`, `kill`, `clock:behind`, ...).
#[derive(Debug, Clone, Default)]
pub struct NemesisOutcome {
    /// Faults that took place.
    pub injected: BTreeMap<String, u64>,
    /// Faults attempted that did not take place.
    pub missed: BTreeMap<String, u64>,
}

/// A side lane (`driver`, `clock`, `forge`, `postgres`): faults that take
/// no replica away, injected beside the cluster lane's. See the module
/// docs.
struct Lane {
    cluster: Arc<Cluster>,
    host: Arc<SharedHost>,
    history: Arc<History>,
    rng: StdRng,
    counts: BTreeMap<String, u64>,
    missed: BTreeMap<String, u64>,
    postgres: Option<Arc<TestPostgres>>,
}

/// A skew far past the receipt retention (at least a day): hours, (low, high).
pub const FAR_SKEW_HOURS: (i64, i64) = (30, 96);

impl Lane {
    fn ms(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(low..=high))
    }

    /// Records an injected fault; returns its position in the history
    /// (see [`History::fault_ended`]).
    fn count(&mut self, kind: String, detail: String) -> Option<usize> {
        *self.counts.entry(kind.clone()).or_default() += 1;
        self.history.injected(kind, detail)
    }

    fn miss(&mut self, kind: String, detail: String) {
        self.history.fault(format!("missed:{kind}"), detail);
        *self.missed.entry(kind).or_default() += 1;
    }

    /// Faults of `kind` until `stop`; then its own heal.
    async fn run(
        mut self,
        kind: NemesisKind,
        mut stop: watch::Receiver<bool>,
    ) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        loop {
            // Driver faults slow every operation they touch (a hung call
            // waits for its timeout), and a slower workload lasts longer
            // under faults scheduled in time: the driver lane stays quiet
            // more than half of the time. A few forged messages make the
            // point; more would only swell the count. Between two
            // PostgreSQL outages the projector gets time to catch up (its
            // retry backoff grows while the server is down).
            let quiet = match kind {
                NemesisKind::Driver => self.ms(600, 1_800),
                NemesisKind::Forge => self.ms(1_500, 4_000),
                NemesisKind::Postgres => self.ms(POSTGRES_QUIET_MS.0, POSTGRES_QUIET_MS.1),
                _ => self.ms(300, 1_000),
            };
            tokio::select! {
                // `biased`: deterministic for `--sim`.
                biased;
                _ = stop.wait_for(|stopped| *stopped) => break,
                _ = tokio::time::sleep(quiet) => {}
            }
            if *stop.borrow() {
                break;
            }
            match kind {
                NemesisKind::Driver => self.driver().await,
                NemesisKind::Clock => self.clock().await,
                NemesisKind::Forge => self.forge().await,
                NemesisKind::Postgres => self.postgres().await,
                _ => break,
            }
        }
        (self.counts, self.missed)
    }

    async fn driver(&mut self) {
        let profile = self.rng.random_range(0..5u8);
        let latency_ms = self.rng.random_range(0..150);
        let rule = match profile {
            0 => FaultRule {
                latency_ms: self.rng.random_range(50..400),
                ..FaultRule::default()
            },
            1 => FaultRule {
                latency_ms,
                reject_rate: 0.25,
                ..FaultRule::default()
            },
            2 => FaultRule {
                latency_ms,
                uncertain_before_rate: 0.2,
                uncertain_after_rate: 0.25,
                ..FaultRule::default()
            },
            3 => FaultRule {
                latency_ms,
                hang_rate: 0.15,
                ..FaultRule::default()
            },
            _ => FaultRule {
                latency_ms,
                reject_rate: 0.1,
                uncertain_before_rate: 0.1,
                uncertain_after_rate: 0.1,
                hang_rate: 0.05,
                ..FaultRule::default()
            },
        };
        let plan = FaultPlan {
            seed: self.rng.random(),
            launch: rule.clone(),
            inspect: rule.clone(),
            stop: rule.clone(),
            remove: rule,
        };
        self.host.set_plan(plan);
        let names = ["latency", "reject", "uncertain", "hang", "mixed"];
        let name = names[usize::from(profile).min(names.len() - 1)];
        let fault = self.count(format!("driver:{name}"), format!("driver profile {name}"));
        let held = self.ms(200, 800);
        tokio::time::sleep(held).await;
        self.host.set_plan(FaultPlan::default());
        self.history.fault("driver-healed", "driver faults cleared");
        self.history.fault_ended(fault);
    }

    /// Skews one replica's clock: far behind or ahead (past the receipt
    /// retention), or a few seconds either way; then sets it right. Every
    /// change is a jump, as when NTP steps a clock.
    async fn clock(&mut self) {
        let nodes = self.cluster.node_ids();
        let Some(&node) = nodes.choose(&mut self.rng) else {
            return;
        };
        let Some(clock) = self.cluster.clock(node) else {
            return;
        };
        const HOUR_MS: i64 = 3_600_000;
        let (name, offset_ms) = match self.rng.random_range(0..4u8) {
            0 | 1 => (
                "behind",
                -self.rng.random_range(FAR_SKEW_HOURS.0..=FAR_SKEW_HOURS.1) * HOUR_MS,
            ),
            2 => (
                "ahead",
                self.rng.random_range(FAR_SKEW_HOURS.0..=FAR_SKEW_HOURS.1) * HOUR_MS,
            ),
            _ => ("jitter", self.rng.random_range(-5_000..=5_000)),
        };
        clock.set_offset_ms(offset_ms);
        let fault = self.count(
            format!("clock:{name}"),
            format!("node {node} clock {offset_ms:+} ms"),
        );
        let held = self.ms(300, 1_500);
        tokio::time::sleep(held).await;
        clock.set_offset_ms(0);
        self.history
            .fault("clock-reset", format!("node {node} clock set right"));
        self.history.fault_ended(fault);
    }

    /// Forges a peer message to the leader: a leader-internal command,
    /// forwarded as if a member's client had written it. The leader must
    /// refuse it; one it accepts is recorded as `forge-accepted`, which the
    /// checker reports.
    async fn forge(&mut self) {
        let Some(leader) = self.cluster.leader() else {
            self.miss("forge".into(), "no leader to forge to".into());
            return;
        };
        let Some(node) = self.cluster.node(leader) else {
            self.miss("forge".into(), "the leader is not serving".into());
            return;
        };
        let (Some(addr), Some(claimed)) = (self.cluster.addr(leader), self.other_member(leader))
        else {
            self.miss("forge".into(), "no member to impersonate".into());
            return;
        };
        let term = node.replica.raft.metrics().borrow_watched().current_term;
        let command = node
            .replica
            .state
            .read(|applied| forged_command(&applied.state, term, &mut self.rng));
        let name = command.name();
        let peers = palisade_raft::PeerClients::new(claimed);
        let sent = tokio::time::timeout(
            FORGE_TIMEOUT,
            peers.forward_write(leader, &addr, command, FORGE_TIMEOUT),
        )
        .await;
        let (kind, verdict) = match sent {
            Ok(Ok(written)) => (
                "forge-accepted",
                format!("ACCEPTED at index {}", written.log_id.index),
            ),
            Ok(Err(palisade_raft::ForwardError::Refused { code, .. })) => {
                ("forge", format!("refused ({code:?})"))
            }
            Ok(Err(error)) => ("forge", format!("not decided: {error}")),
            Err(_) => ("forge", "no answer in time".to_string()),
        };
        self.count(
            "forge".into(),
            format!("forged {name} to leader {leader} as node {claimed}: {verdict}"),
        );
        if kind == "forge-accepted" {
            self.history.fault(
                kind,
                format!("leader {leader} accepted a forwarded {name} from node {claimed}"),
            );
        }
    }

    /// Stops the projection's PostgreSQL server (fast or immediate, at
    /// random), holds it down, and starts it again at the same data
    /// directory and port (see [`crate::projection::stop`] and
    /// [`crate::projection::restart`]).
    async fn postgres(&mut self) {
        let Some(postgres) = self.postgres.clone() else {
            self.miss(
                "postgres".into(),
                "no PostgreSQL server in this campaign (run with --postgres)".into(),
            );
            return;
        };
        let shutdown = if self.rng.random_bool(0.5) {
            Shutdown::Fast
        } else {
            Shutdown::Immediate
        };
        let down = self.ms(POSTGRES_DOWN_MS.0, POSTGRES_DOWN_MS.1);
        let kind = format!("postgres:stop-{}", shutdown.mode());
        match crate::projection::stop(&postgres, shutdown).await {
            Ok(()) => {
                let fault = self.count(
                    kind,
                    format!(
                        "PostgreSQL stopped (pg_ctl stop -m {}), down for {} ms",
                        shutdown.mode(),
                        down.as_millis()
                    ),
                );
                tokio::time::sleep(down).await;
                crate::projection::restart(&postgres, &self.history).await;
                self.history.fault_ended(fault);
            }
            Err(reason) => self.miss(kind, reason),
        }
    }

    fn other_member(&mut self, leader: NodeId) -> Option<NodeId> {
        let others: Vec<NodeId> = self
            .cluster
            .node_ids()
            .into_iter()
            .filter(|node| *node != leader)
            .collect();
        others.choose(&mut self.rng).copied()
    }
}

/// Mixed into the `postgres` lane's seed (see [`Nemesis::run`]).
const POSTGRES_LANE_SALT: u64 = 0x7067_6374_6c00_0000;

/// How long the `postgres` lane stays quiet between two outages, ms (low, high).
pub const POSTGRES_QUIET_MS: (u64, u64) = (600, 2_000);
/// How long the `postgres` nemesis holds PostgreSQL down, ms (low, high).
pub const POSTGRES_DOWN_MS: (u64, u64) = (300, 1_500);

/// How long a forged message may take.
pub const FORGE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most damaging leader-internal command to forge against `state`:
/// the completion of an operation in flight (bound to it, as the leader's
/// executor would, but before any effect), else the loss of a running
/// execution, else a tick.
fn forged_command(
    state: &palisade_lifecycle::State,
    term: u64,
    rng: &mut StdRng,
) -> palisade_lifecycle::Command {
    use palisade_lifecycle::{Command, CompletionOf, LaunchResult, OperationKind};
    let in_flight: Vec<&palisade_lifecycle::Sandbox> = state
        .sandboxes
        .values()
        .filter(|sandbox| sandbox.operation.is_some())
        .map(|sandbox| &**sandbox)
        .collect();
    if let Some(sandbox) = in_flight.choose(rng) {
        let (operation, generation) = sandbox
            .operation
            .as_ref()
            .map_or((None, sandbox.execution.generation), |operation| {
                (Some(operation.kind), operation.generation)
            });
        let of = CompletionOf::pending(sandbox, term);
        let sandbox_id = sandbox.id.clone();
        return match operation {
            Some(OperationKind::Delete) => Command::CompleteDelete { sandbox_id, of },
            Some(OperationKind::Stop) => Command::CompleteStop {
                sandbox_id,
                of,
                generation,
                exit_code: Some(0),
            },
            _ => Command::CompleteLaunch {
                sandbox_id,
                of,
                generation,
                result: LaunchResult::Running {
                    handle: "forged".into(),
                    driver: "forged".into(),
                },
            },
        };
    }
    let running: Vec<&palisade_lifecycle::Sandbox> = state
        .sandboxes
        .values()
        .filter(|sandbox| sandbox.phase == palisade_lifecycle::SandboxPhase::Ready)
        .map(|sandbox| &**sandbox)
        .collect();
    if let Some(sandbox) = running.choose(rng) {
        return Command::ObserveLost {
            sandbox_id: sandbox.id.clone(),
            of: CompletionOf::observed(sandbox, term),
            generation: sandbox.execution.generation,
        };
    }
    Command::Tick {
        now_ms: state.clock_ms.saturating_add(TICK_FORGED_AHEAD_MS),
        receipt_retention_ms: 0,
    }
}

/// How far ahead of the replicated clock a forged tick claims to be.
pub const TICK_FORGED_AHEAD_MS: i64 = 3_600_000;

/// Deletes `name` expecting `sandbox_id` through the public API, as a
/// client would, recorded in the history as client `nemesis` (so every
/// check accounts for it); true once the delete was acknowledged.
pub(crate) async fn delete_as_nemesis(
    history: &History,
    endpoints: &Endpoints,
    rng: &mut StdRng,
    request_id: String,
    name: String,
    sandbox_id: &str,
) -> bool {
    let request = Request::Delete(v1::DeleteSandboxRequest {
        sandbox: Some(v1::SandboxRef {
            workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
            name: name.clone(),
            id: String::new(),
        }),
        request_id: request_id.clone(),
        expected_sandbox_id: sandbox_id.to_string(),
        ..Default::default()
    });
    let config = WorkloadConfig::new(1, 1, 1, 0);
    let invoked_us = history.clock().now_us();
    let (reply, returned_us, attempts) = execute(&request, endpoints, &config, history, rng).await;
    let gone = matches!(reply, Reply::Deleted { deleted: true, .. });
    history.record(Operation {
        index: 0,
        client: NEMESIS_CLIENT,
        request_id,
        call: Call::Delete {
            name,
            expected_id: sandbox_id.to_string(),
        },
        invoked_us,
        returned_us,
        reply,
        attempts,
    });
    gone
}

/// A nemesis RNG for `seed`, independent of the workload's.
pub fn nemesis_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321)
}
