//! Every check a campaign makes, and the [`Anomaly`] each can report.
//!
//! | check | evidence | anomaly |
//! |---|---|---|
//! | per-name histories linearizable | history | `not-linearizable` |
//! | no acknowledged create lost | history, final state | `acknowledged-write-lost` |
//! | no delete of an id other than the expected one | answers; removal effects | `wrong-delete` |
//! | no stop of a generation other than the token's | answers; stop effects | `wrong-stop` |
//! | at most one effect per (sandbox, generation, operation), every effect asked for by a request, at most one per request id | driver effects | `duplicate-effect`, `unrequested-effect` |
//! | a replayed request id returns the original result | replays | `replay-mismatch` |
//! | delete acknowledged only after the driver removed everything | effects vs. answers | `delete-before-cleanup` |
//! | no execution seen running after its sandbox's delete was acknowledged, every execution seen asked for by a request (process mode: sampled from the process table, or from the engine's containers by their labels) | observed executions vs. answers | `execution-after-delete`, `unrequested-effect` |
//! | after healing: no operation left in flight, driver and state agree | final state, host | `operation-stuck`, `orphan-execution` |
//! | every replica's state equal at equal applied index | replica views | `replicas-diverged`, `replicas-not-converged` |
//! | a replica whose log append failed stops (fail-stop) | `storage` nemesis events | `storage-fault-ignored` |
//! | no replica ends on its own (an error at start, a fail-stop) unless the `storage` nemesis made it | the harness's record of replicas that ended | `replica-stopped` |
//! | after membership changes: one configuration, every member running and agreeing on it | the members' Raft metrics | `membership-invalid` |
//! | the PostgreSQL projection equal to the state (with `--postgres`); with the `postgres` nemesis: *projection equals state after PostgreSQL faults* | projection rows; the `postgres` nemesis's stops and restarts | `projection-diverged` |
//! | no answer the workload cannot cause (REQUEST_ID_REUSED, INVALID_*) | answers | `unexpected-answer` |
//! | a forged peer message carrying a leader-internal command is refused | the `forge` nemesis's answers | `forged-command-accepted` |
//!
//! Effects are attributed to requests through what the request named: a
//! launch of generation 1 to a create whose answer was that sandbox (or
//! unknown), a launch of generation g > 1 to a start with the token of
//! generation g - 1, a stop of (s, g) to a stop with the token of (s, g), a
//! removal of s to a delete expecting s. The attributed request must have
//! been invoked before the effect and must not have been refused.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::clock::seconds;
use crate::history::{Call, FaultEvent, Operation, Phase, Replay, Reply, short};
use crate::host::{Effect, EffectKind, HostExecution};
use crate::linearizability::{self, Verdict};

/// The name of the final projection check of a campaign with the
/// `postgres` nemesis (the report prints it; a difference is the anomaly
/// `projection-diverged`).
pub const POSTGRES_FAULTS_CHECK: &str = "projection equals state after PostgreSQL faults";

/// Most lines of history an anomaly quotes.
pub const EXCERPT_LINES_MAX: usize = 40;

/// Something the checkers found wrong.
#[derive(Debug, Clone, Serialize)]
pub struct Anomaly {
    /// Which check (`not-linearizable`, `wrong-delete`, ...).
    pub kind: &'static str,
    /// What is wrong.
    pub message: String,
    /// The history that shows it.
    pub excerpt: Vec<String>,
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "ANOMALY [{}] {}", self.kind, self.message)?;
        for line in &self.excerpt {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// A sandbox as the leader's state holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FinalSandbox {
    /// Its name.
    pub name: String,
    /// Current generation.
    pub generation: u64,
    /// Phase.
    pub phase: Phase,
    /// True while an operation is in flight.
    pub operation_in_flight: bool,
}

/// One replica's state at the end.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaState {
    /// Node id.
    pub node_id: u64,
    /// Applied index.
    pub applied_index: u64,
    /// Digest of the applied state.
    pub digest: String,
}

/// Everything the checks look at.
#[derive(Debug)]
pub struct Evidence {
    /// The operations.
    pub operations: Vec<Operation>,
    /// The replays.
    pub replays: Vec<Replay>,
    /// The faults, for excerpts.
    pub faults: Vec<FaultEvent>,
    /// Driver effects, when the driver records them (in-process mode).
    pub effects: Option<Vec<Effect>>,
    /// The driver's executions at the end, when known.
    pub executions: Option<BTreeMap<(String, u64), HostExecution>>,
    /// The leader's sandboxes at the end (by id), when known.
    pub final_sandboxes: Option<BTreeMap<String, FinalSandbox>>,
    /// Every replica's state at the end; `None` when they did not reach an
    /// equal applied index in time (the message says what they reported).
    pub replicas: Result<Vec<ReplicaState>, String>,
    /// The projection check, when a projection ran (`Err`: what differs).
    pub projection: Option<Result<(), String>>,
    /// The membership check, when the `membership` nemesis ran (`Err`:
    /// what is wrong; see [`crate::membership::check`]).
    pub membership: Option<Result<(), String>>,
    /// Executions seen running on the host while the campaign ran, when
    /// they were sampled (process mode: see [`crate::observe`]).
    pub observed: Option<Vec<ObservedExecution>>,
}

/// An execution seen running on the host: a sandbox's shim or command in
/// the process table, or its container by its labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObservedExecution {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its generation; 0 for a command process whose shim was gone.
    pub generation: u64,
    /// Start of the first sample that saw it (campaign clock).
    pub first_seen_us: u64,
    /// Start of the last sample that saw it: it ran at that moment.
    pub last_seen_us: u64,
}

impl Default for Evidence {
    fn default() -> Self {
        Self {
            operations: Vec::new(),
            replays: Vec::new(),
            faults: Vec::new(),
            effects: None,
            executions: None,
            final_sandboxes: None,
            replicas: Ok(Vec::new()),
            projection: None,
            membership: None,
            observed: None,
        }
    }
}

/// Figures about the checking itself.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckStats {
    /// Names whose histories were checked.
    pub names_checked: usize,
    /// Names whose search ran out of budget.
    pub names_inconclusive: Vec<String>,
    /// Replays compared.
    pub replays_compared: usize,
    /// Effects by kind.
    pub effects: BTreeMap<String, usize>,
    /// Whether a PostgreSQL projection was compared with the state.
    pub projection_checked: bool,
}

/// The fault event the campaign records for a replica that ended without
/// being crashed and not after a storage fault (see
/// [`crate::cluster::Cluster::unexpected_stops`]).
pub const REPLICA_STOPPED_EVENT: &str = "replica-stopped-on-its-own";

/// Runs every check.
pub fn check(evidence: &Evidence) -> (Vec<Anomaly>, CheckStats) {
    let mut anomalies = Vec::new();
    let mut stats = CheckStats::default();
    linearizable(evidence, &mut anomalies, &mut stats);
    answers(evidence, &mut anomalies);
    replays(evidence, &mut anomalies, &mut stats);
    if let Some(effects) = &evidence.effects {
        for effect in effects {
            *stats
                .effects
                .entry(format!("{:?}", effect.kind).to_lowercase())
                .or_default() += 1;
        }
        effect_checks(evidence, effects, &mut anomalies);
    }
    if let Some(observed) = &evidence.observed {
        stats
            .effects
            .insert("observed-executions".into(), observed.len());
        observed_checks(evidence, observed, &mut anomalies);
    }
    final_state(evidence, &mut anomalies);
    replicas(evidence, &mut anomalies);
    recorded_faults_are_anomalies(
        evidence,
        "storage-not-fail-stopped",
        "storage-fault-ignored",
        "a replica whose log append failed must stop serving",
        &mut anomalies,
    );
    recorded_faults_are_anomalies(
        evidence,
        REPLICA_STOPPED_EVENT,
        "replica-stopped",
        "a replica stops only when crashed or after a storage fault",
        &mut anomalies,
    );
    if let Some(Err(message)) = &evidence.membership {
        anomalies.push(Anomaly {
            kind: "membership-invalid",
            message: message.clone(),
            excerpt: Vec::new(),
        });
    }
    forged(evidence, &mut anomalies);
    if let Some(Err(message)) = &evidence.projection {
        anomalies.push(projection_diverged(evidence, message));
    }
    stats.projection_checked = evidence.projection.is_some();
    (anomalies, stats)
}

/// The projection differs from the state, or could not be read in time.
/// After PostgreSQL faults (the `postgres` nemesis) the anomaly says so
/// and quotes the last stops and restarts.
fn projection_diverged(evidence: &Evidence, message: &str) -> Anomaly {
    let postgres_events: Vec<&FaultEvent> = evidence
        .faults
        .iter()
        .filter(|event| event.kind.starts_with("postgres"))
        .collect();
    if !postgres_events.iter().any(|event| event.injected) {
        return Anomaly {
            kind: "projection-diverged",
            message: message.to_string(),
            excerpt: Vec::new(),
        };
    }
    let skip = postgres_events.len().saturating_sub(EXCERPT_LINES_MAX);
    Anomaly {
        kind: "projection-diverged",
        message: format!("{}: {message}", POSTGRES_FAULTS_CHECK),
        excerpt: postgres_events
            .into_iter()
            .skip(skip)
            .map(|event| {
                format!(
                    "{:>9} {:<24} {}",
                    seconds(event.at_us),
                    event.kind,
                    event.detail
                )
            })
            .collect(),
    }
}

/// The `forge` nemesis sends the leader leader-internal commands as
/// forwarded writes; the peer service must refuse every one. Each it
/// accepted (recorded as a `forge-accepted` fault event) is an anomaly:
/// a member's message completed, or observed, what the leader's own
/// executor never did.
fn forged(evidence: &Evidence, anomalies: &mut Vec<Anomaly>) {
    recorded_faults_are_anomalies(
        evidence,
        "forge-accepted",
        "forged-command-accepted",
        "a leader-internal command must never be accepted from the wire",
        anomalies,
    );
}

/// Every fault event of `event_kind` the nemesis recorded (something it
/// saw the system do that must never happen) is an anomaly of
/// `anomaly_kind`; `why` says the rule it broke.
fn recorded_faults_are_anomalies(
    evidence: &Evidence,
    event_kind: &str,
    anomaly_kind: &'static str,
    why: &str,
    anomalies: &mut Vec<Anomaly>,
) {
    for event in evidence
        .faults
        .iter()
        .filter(|event| event.kind == event_kind)
    {
        anomalies.push(Anomaly {
            kind: anomaly_kind,
            message: format!("{} ({why})", event.detail),
            excerpt: vec![format!("{:>9} {}", seconds(event.at_us), event.detail)],
        });
    }
}

fn by_name(operations: &[Operation]) -> BTreeMap<&str, Vec<&Operation>> {
    let mut names: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in operations {
        names
            .entry(operation.call.name())
            .or_default()
            .push(operation);
    }
    names
}

/// The operations of one name around `at`, and the faults in that window.
fn excerpt(
    evidence: &Evidence,
    operations: &[&Operation],
    around: &Operation,
    note: Option<String>,
) -> Vec<String> {
    let until = around.returned_us.unwrap_or(u64::MAX);
    let mut chosen: Vec<&Operation> = operations
        .iter()
        .copied()
        .filter(|op| op.invoked_us <= until)
        .collect();
    chosen.sort_by_key(|op| (op.invoked_us, op.index));
    let skip = chosen.len().saturating_sub(EXCERPT_LINES_MAX - 8);
    let chosen = &chosen[skip..];
    let from = chosen.first().map_or(0, |op| op.invoked_us);
    let mut lines: Vec<(u64, String)> = chosen
        .iter()
        .map(|op| {
            let marker = if op.index == around.index { ">>" } else { "  " };
            (op.invoked_us, format!("{marker} {}", op.line()))
        })
        .collect();
    for fault in &evidence.faults {
        if fault.at_us >= from && fault.at_us <= until.min(from.saturating_add(600_000_000)) {
            lines.push((
                fault.at_us,
                format!(
                    "   ~~ {:>8} nemesis {}: {}",
                    seconds(fault.at_us),
                    fault.kind,
                    fault.detail
                ),
            ));
        }
    }
    lines.sort_by_key(|(at, _)| *at);
    let mut out: Vec<String> = lines.into_iter().map(|(_, line)| line).collect();
    if out.len() > EXCERPT_LINES_MAX {
        out.drain(..out.len() - EXCERPT_LINES_MAX);
    }
    if let Some(note) = note {
        out.push(note);
    }
    out
}

fn linearizable(evidence: &Evidence, anomalies: &mut Vec<Anomaly>, stats: &mut CheckStats) {
    for (name, operations) in by_name(&evidence.operations) {
        stats.names_checked += 1;
        match linearizability::check(&operations) {
            Verdict::Linearizable => {}
            Verdict::Inconclusive => stats.names_inconclusive.push(name.to_string()),
            Verdict::NotLinearizable { stuck, linearized } => {
                let Some(around) = evidence.operations.get(stuck) else {
                    continue;
                };
                let prefix: Vec<String> = linearized
                    .iter()
                    .rev()
                    .take(12)
                    .rev()
                    .map(|index| format!("#{index}"))
                    .collect();
                let note = format!(
                    "   longest explained order ends with: {} (then #{stuck} cannot be explained)",
                    prefix.join(" ")
                );
                anomalies.push(Anomaly {
                    kind: "not-linearizable",
                    message: format!(
                        "the history of sandbox name {name:?} has no sequential explanation; operation #{stuck} ({}) cannot be placed",
                        around.call
                    ),
                    excerpt: excerpt(evidence, &operations, around, Some(note)),
                });
            }
        }
    }
}

/// Checks single answers against their own requests.
fn answers(evidence: &Evidence, anomalies: &mut Vec<Anomaly>) {
    let names = by_name(&evidence.operations);
    for operation in &evidence.operations {
        let mut found = |kind: &'static str, message: String| {
            let siblings = names
                .get(operation.call.name())
                .cloned()
                .unwrap_or_default();
            anomalies.push(Anomaly {
                kind,
                message,
                excerpt: excerpt(evidence, &siblings, operation, None),
            });
        };
        match (&operation.call, &operation.reply) {
            (Call::Delete { expected_id, .. }, Reply::Deleted { id, .. }) if id != expected_id => {
                found(
                    "wrong-delete",
                    format!(
                        "#{}: delete expecting {} deleted {}",
                        operation.index,
                        short(expected_id),
                        short(id)
                    ),
                );
            }
            (Call::Stop { id, generation, .. }, Reply::Sandbox(observed))
                if observed.id != *id || observed.generation != *generation =>
            {
                found(
                    "wrong-stop",
                    format!(
                        "#{}: stop with the token of ({}, g{generation}) answered ({}, g{})",
                        operation.index,
                        short(id),
                        short(&observed.id),
                        observed.generation
                    ),
                );
            }
            (_, Reply::Rejected { reason, code })
                if reason == "REQUEST_ID_REUSED"
                    || reason.starts_with("INVALID_") && reason != "INVALID_PHASE" =>
            {
                found(
                    "unexpected-answer",
                    format!(
                        "#{}: {code} {reason}: the workload never sends such a request",
                        operation.index
                    ),
                );
            }
            _ => {}
        }
    }
}

/// The parts of an answer a replay must reproduce (not the token, which
/// is minted per observation).
fn comparable(reply: &Reply) -> String {
    match reply {
        Reply::Sandbox(observed) => format!(
            "sandbox {} g{} {:?} rv={}",
            observed.id, observed.generation, observed.phase, observed.resource_version
        ),
        other => other.to_string(),
    }
}

fn replays(evidence: &Evidence, anomalies: &mut Vec<Anomaly>, stats: &mut CheckStats) {
    for replay in &evidence.replays {
        let Some(original) = evidence.operations.get(replay.original) else {
            continue;
        };
        stats.replays_compared += 1;
        if comparable(&original.reply) != comparable(&replay.reply) {
            anomalies.push(Anomaly {
                kind: "replay-mismatch",
                message: format!(
                    "request {} replayed at {} answered {} but first answered {}",
                    original.request_id,
                    seconds(replay.at_us),
                    replay.reply,
                    original.reply
                ),
                excerpt: vec![original.line()],
            });
        }
    }
}

/// Whether an operation may have taken effect (not refused).
fn may_have_acted(operation: &Operation) -> bool {
    !matches!(operation.reply, Reply::Rejected { .. })
}

/// The first acknowledgement of each sandbox's delete.
fn acknowledged_deletes(operations: &[Operation]) -> BTreeMap<&str, &Operation> {
    operations
        .iter()
        .filter_map(|op| match (&op.reply, op.returned_us) {
            (Reply::Deleted { id, deleted: true }, Some(_)) => Some((id.as_str(), op)),
            _ => None,
        })
        .fold(BTreeMap::new(), |mut first, (id, op)| {
            let earliest = first.entry(id).or_insert(op);
            if op.returned_us < earliest.returned_us {
                *earliest = op;
            }
            first
        })
}

/// Whether `op` asks for a launch of generation `generation` of
/// `sandbox_id`: a create (whose answer was that sandbox, or unknown) for
/// generation 1, a start with the token of the generation before.
fn asks_for_launch(op: &Operation, sandbox_id: &str, generation: u64) -> bool {
    match &op.call {
        Call::Create { .. } if generation == 1 => match &op.reply {
            Reply::Sandbox(observed) => observed.id == sandbox_id,
            _ => true,
        },
        Call::Start {
            id,
            generation: token_generation,
            ..
        } => id == sandbox_id && token_generation + 1 == generation,
        _ => false,
    }
}

/// The checks on executions seen running (process mode): none after its
/// sandbox's delete was acknowledged, and each asked for by a request
/// (a shim of a generation nobody created or started is a launch no
/// request caused: a deposed leader's, or a duplicate's).
fn observed_checks(
    evidence: &Evidence,
    observed: &[ObservedExecution],
    anomalies: &mut Vec<Anomaly>,
) {
    let operations = &evidence.operations;
    let line = |execution: &ObservedExecution| {
        format!(
            "{:>8}..{:>8} seen running: sandbox {} g{}",
            seconds(execution.first_seen_us),
            seconds(execution.last_seen_us),
            short(&execution.sandbox_id),
            execution.generation
        )
    };
    let acknowledged_deletes = acknowledged_deletes(operations);
    for execution in observed {
        if let Some(delete) = acknowledged_deletes.get(execution.sandbox_id.as_str())
            && let Some(acknowledged) = delete.returned_us
            && acknowledged < execution.last_seen_us
        {
            anomalies.push(Anomaly {
                kind: "execution-after-delete",
                message: format!(
                    "sandbox {} g{} was seen running at {}, after its delete was acknowledged (#{} at {})",
                    short(&execution.sandbox_id),
                    execution.generation,
                    seconds(execution.last_seen_us),
                    delete.index,
                    seconds(acknowledged)
                ),
                excerpt: vec![line(execution)],
            });
        }
        if execution.generation == 0 {
            continue;
        }
        let asked = operations.iter().any(|op| {
            op.invoked_us <= execution.first_seen_us
                && may_have_acted(op)
                && asks_for_launch(op, &execution.sandbox_id, execution.generation)
        });
        if !asked {
            anomalies.push(Anomaly {
                kind: "unrequested-effect",
                message: format!(
                    "sandbox {} g{} was seen running, but no request that may have taken effect asked for its launch",
                    short(&execution.sandbox_id),
                    execution.generation
                ),
                excerpt: vec![line(execution)],
            });
        }
    }
}

fn effect_checks(evidence: &Evidence, effects: &[Effect], anomalies: &mut Vec<Anomaly>) {
    let operations = &evidence.operations;
    let effect_line = |effect: &Effect| {
        format!(
            "{:>8} effect {:?} sandbox {} g{}",
            seconds(effect.at_us),
            effect.kind,
            short(&effect.sandbox_id),
            effect.generation
        )
    };
    // At most one effect per (sandbox, generation, kind); a removal per
    // sandbox at most once too (nothing is launched after it).
    let mut seen: BTreeMap<(EffectKind, &str, u64), Vec<&Effect>> = BTreeMap::new();
    let mut removed: BTreeMap<&str, &Effect> = BTreeMap::new();
    for effect in effects {
        let generation = if effect.kind == EffectKind::Remove {
            0
        } else {
            effect.generation
        };
        seen.entry((effect.kind, &effect.sandbox_id, generation))
            .or_default()
            .push(effect);
        if effect.kind == EffectKind::Launch
            && let Some(removal) = removed.get(effect.sandbox_id.as_str())
        {
            anomalies.push(Anomaly {
                kind: "duplicate-effect",
                message: format!(
                    "sandbox {} g{} was launched after its executions were removed (a deposed leader's effect?)",
                    short(&effect.sandbox_id),
                    effect.generation
                ),
                excerpt: vec![effect_line(removal), effect_line(effect)],
            });
        }
        if effect.kind == EffectKind::Remove {
            removed.insert(&effect.sandbox_id, effect);
        }
    }
    for ((kind, sandbox_id, generation), list) in &seen {
        if list.len() > 1 {
            anomalies.push(Anomaly {
                kind: "duplicate-effect",
                message: format!(
                    "{} {kind:?} effects on sandbox {} g{generation} (at most one is allowed)",
                    list.len(),
                    short(sandbox_id)
                ),
                excerpt: list.iter().map(|effect| effect_line(effect)).collect(),
            });
        }
    }

    // Fencing reaches the effect (DESIGN.md section 6): the driver performs
    // nothing under a fence lower than one it already performed an effect
    // under, for the same sandbox.
    let mut highest: BTreeMap<&str, &Effect> = BTreeMap::new();
    for effect in effects {
        match highest.get(effect.sandbox_id.as_str()) {
            Some(seen) if effect.fence.order() < seen.fence.order() => {
                anomalies.push(Anomaly {
                    kind: "effect-under-lower-fence",
                    message: format!(
                        "{:?} of sandbox {} g{} was performed under {}, lower than {} the driver had already acted under (a deposed leader's effect)",
                        effect.kind,
                        short(&effect.sandbox_id),
                        effect.generation,
                        effect.fence,
                        seen.fence
                    ),
                    excerpt: vec![effect_line(seen), effect_line(effect)],
                });
            }
            _ => {
                highest.insert(&effect.sandbox_id, effect);
            }
        }
    }

    // No execution runs after its sandbox's delete was acknowledged: an
    // operator told "deleted" must never have an agent's code start again.
    let acknowledged_deletes = acknowledged_deletes(operations);
    for effect in effects {
        if effect.kind != EffectKind::Launch {
            continue;
        }
        if let Some(delete) = acknowledged_deletes.get(effect.sandbox_id.as_str())
            && delete
                .returned_us
                .is_some_and(|returned| returned < effect.at_us)
        {
            anomalies.push(Anomaly {
                kind: "execution-after-delete",
                message: format!(
                    "sandbox {} g{} was launched at {} after its delete was acknowledged (#{} at {})",
                    short(&effect.sandbox_id),
                    effect.generation,
                    seconds(effect.at_us),
                    delete.index,
                    seconds(delete.returned_us.unwrap_or_default())
                ),
                excerpt: vec![effect_line(effect)],
            });
        }
    }

    // Attribute every effect to a request that asked for it.
    let mut per_request: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    for effect in effects {
        let candidates: Vec<&Operation> = operations
            .iter()
            .filter(|op| op.invoked_us <= effect.at_us && may_have_acted(op))
            .filter(|op| match (&op.call, effect.kind) {
                (Call::Create { .. } | Call::Start { .. }, EffectKind::Launch) => {
                    asks_for_launch(op, &effect.sandbox_id, effect.generation)
                }
                (Call::Stop { id, generation, .. }, EffectKind::Stop) => {
                    *id == effect.sandbox_id && *generation == effect.generation
                }
                (Call::Delete { expected_id, .. }, EffectKind::Remove) => {
                    *expected_id == effect.sandbox_id
                }
                _ => false,
            })
            .collect();
        if candidates.is_empty() {
            let kind = match effect.kind {
                EffectKind::Remove => "wrong-delete",
                EffectKind::Stop => "wrong-stop",
                EffectKind::Launch => "unrequested-effect",
            };
            anomalies.push(Anomaly {
                kind,
                message: format!(
                    "{:?} of sandbox {} g{} was asked for by no request that may have taken effect",
                    effect.kind,
                    short(&effect.sandbox_id),
                    effect.generation
                ),
                excerpt: vec![effect_line(effect)],
            });
        } else if candidates.len() == 1
            && effect.kind == EffectKind::Launch
            && effect.generation > 1
        {
            per_request
                .entry(candidates[0].request_id.as_str())
                .or_default()
                .push(effect);
        }
    }
    for (request_id, attributed) in per_request {
        if attributed.len() > 1 {
            anomalies.push(Anomaly {
                kind: "duplicate-effect",
                message: format!("request {request_id} caused {} launches", attributed.len()),
                excerpt: attributed
                    .iter()
                    .map(|effect| effect_line(effect))
                    .collect(),
            });
        }
    }

    // A delete is acknowledged only once the driver removed everything.
    for operation in operations {
        let (Call::Delete { .. }, Reply::Deleted { id, deleted: true }, Some(acknowledged)) =
            (&operation.call, &operation.reply, operation.returned_us)
        else {
            continue;
        };
        let launched = effects
            .iter()
            .any(|effect| effect.kind == EffectKind::Launch && effect.sandbox_id == *id);
        let removed_before = effects.iter().any(|effect| {
            effect.kind == EffectKind::Remove
                && effect.sandbox_id == *id
                && effect.at_us <= acknowledged
        });
        if launched && !removed_before {
            let names = by_name(operations);
            let siblings = names
                .get(operation.call.name())
                .cloned()
                .unwrap_or_default();
            let mut excerpt = excerpt(evidence, &siblings, operation, None);
            excerpt.extend(
                effects
                    .iter()
                    .filter(|effect| effect.sandbox_id == *id)
                    .map(|effect| format!("   {}", effect_line(effect))),
            );
            anomalies.push(Anomaly {
                kind: "delete-before-cleanup",
                message: format!(
                    "#{}: delete of {} acknowledged at {} before the driver removed its executions",
                    operation.index,
                    short(id),
                    seconds(acknowledged)
                ),
                excerpt,
            });
        }
    }
}

fn final_state(evidence: &Evidence, anomalies: &mut Vec<Anomaly>) {
    let Some(sandboxes) = &evidence.final_sandboxes else {
        return;
    };
    // No acknowledged create lost: gone only through a delete expecting it.
    for operation in &evidence.operations {
        let (Call::Create { name }, Reply::Sandbox(observed)) = (&operation.call, &operation.reply)
        else {
            continue;
        };
        if sandboxes.contains_key(&observed.id) {
            continue;
        }
        let deleted = evidence.operations.iter().any(|op| {
            matches!(&op.call, Call::Delete { expected_id, .. } if *expected_id == observed.id)
                && may_have_acted(op)
        });
        if !deleted {
            anomalies.push(Anomaly {
                kind: "acknowledged-write-lost",
                message: format!(
                    "#{}: sandbox {} ({name}) was created and acknowledged, no delete ever named it, and it is gone",
                    operation.index,
                    short(&observed.id)
                ),
                excerpt: vec![operation.line()],
            });
        }
    }
    for (id, sandbox) in sandboxes {
        if sandbox.operation_in_flight {
            anomalies.push(Anomaly {
                kind: "operation-stuck",
                message: format!(
                    "sandbox {} ({}) still has an operation in flight after every fault healed (phase {:?})",
                    short(id),
                    sandbox.name,
                    sandbox.phase
                ),
                excerpt: Vec::new(),
            });
        }
    }
    let Some(executions) = &evidence.executions else {
        return;
    };
    let running: BTreeSet<(&str, u64)> = executions
        .iter()
        .filter(|(_, execution)| **execution == HostExecution::Running)
        .map(|((id, generation), _)| (id.as_str(), *generation))
        .collect();
    for (id, generation) in &running {
        let expected = sandboxes.get(*id).is_some_and(|sandbox| {
            sandbox.phase == Phase::Ready && sandbox.generation == *generation
        });
        if !expected {
            let state = sandboxes.get(*id).map_or_else(
                || "not in the state (deleted or never created)".to_string(),
                |sandbox| format!("{:?} at g{}", sandbox.phase, sandbox.generation),
            );
            anomalies.push(Anomaly {
                kind: "orphan-execution",
                message: format!(
                    "the driver still runs sandbox {} g{generation}, which the state has {state}",
                    short(id)
                ),
                excerpt: Vec::new(),
            });
        }
    }
    for (id, sandbox) in sandboxes {
        if sandbox.phase == Phase::Ready
            && !sandbox.operation_in_flight
            && !running.contains(&(id.as_str(), sandbox.generation))
        {
            anomalies.push(Anomaly {
                kind: "orphan-execution",
                message: format!(
                    "sandbox {} ({}) is READY at g{} but the driver does not run it",
                    short(id),
                    sandbox.name,
                    sandbox.generation
                ),
                excerpt: Vec::new(),
            });
        }
    }
    for (id, _) in executions.keys() {
        if !sandboxes.contains_key(id) {
            anomalies.push(Anomaly {
                kind: "orphan-execution",
                message: format!(
                    "the driver still keeps executions of sandbox {}, which the state no longer has",
                    short(id)
                ),
                excerpt: Vec::new(),
            });
        }
    }
}

fn replicas(evidence: &Evidence, anomalies: &mut Vec<Anomaly>) {
    match &evidence.replicas {
        Err(message) => anomalies.push(Anomaly {
            kind: "replicas-not-converged",
            message: message.clone(),
            excerpt: Vec::new(),
        }),
        Ok(states) => {
            let digests: BTreeSet<(&u64, &str)> = states
                .iter()
                .map(|state| (&state.applied_index, state.digest.as_str()))
                .collect();
            if digests.len() > 1 {
                anomalies.push(Anomaly {
                    kind: "replicas-diverged",
                    message: "replicas report different states at the same applied index".into(),
                    excerpt: states
                        .iter()
                        .map(|state| {
                            format!(
                                "node {} applied {} digest {}",
                                state.node_id, state.applied_index, state.digest
                            )
                        })
                        .collect(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Observed;

    fn fence(term: u64, operation_index: u64) -> palisade_driver::Fence {
        palisade_driver::Fence {
            cluster_id: "c".into(),
            term,
            sandbox_id: "x".into(),
            generation: 1,
            operation_index,
        }
    }

    fn op(index: usize, call: Call, reply: Reply, at: u64) -> Operation {
        Operation {
            index,
            client: 0,
            request_id: format!("r{index}"),
            call,
            invoked_us: at,
            returned_us: Some(at + 10),
            reply,
            attempts: Vec::new(),
        }
    }

    #[test]
    fn a_replica_that_stopped_on_its_own_is_an_anomaly_quoting_why() {
        let stopped = |kind: &str| FaultEvent {
            at_us: 26_000_000,
            kind: kind.to_string(),
            detail: "node 3 stopped on its own: the log cannot be opened".into(),
            injected: false,
            ended_us: None,
        };
        let evidence = Evidence {
            faults: vec![stopped(REPLICA_STOPPED_EVENT), stopped("fail-stopped")],
            ..Evidence::default()
        };
        let (anomalies, _) = check(&evidence);
        let kinds: Vec<&str> = anomalies.iter().map(|anomaly| anomaly.kind).collect();
        assert_eq!(kinds, ["replica-stopped"], "{anomalies:?}");
        assert!(anomalies[0].message.contains("the log cannot be opened"));
    }

    #[test]
    fn a_launch_under_a_lower_fence_after_an_acknowledged_delete_is_reported() {
        let effect = |at_us, kind, term, operation_index| Effect {
            at_us,
            kind,
            sandbox_id: "x".into(),
            generation: 1,
            fence: fence(term, operation_index),
        };
        let evidence = Evidence {
            operations: vec![
                op(
                    0,
                    Call::Create { name: "a".into() },
                    Reply::Unknown {
                        error: "timeout".into(),
                    },
                    0,
                ),
                op(
                    1,
                    Call::Delete {
                        name: "a".into(),
                        expected_id: "x".into(),
                    },
                    Reply::Deleted {
                        id: "x".into(),
                        deleted: true,
                    },
                    100,
                ),
            ],
            effects: Some(vec![
                // The new leader (term 3) launched, then removed X; the
                // deposed leader's held launch (term 2) lands after the
                // delete was acknowledged (at 110).
                effect(50, EffectKind::Launch, 3, 1),
                effect(105, EffectKind::Remove, 3, 4),
                effect(200, EffectKind::Launch, 2, 1),
            ]),
            replicas: Ok(Vec::new()),
            ..Evidence::default()
        };
        let (anomalies, _) = check(&evidence);
        let kinds: Vec<&str> = anomalies.iter().map(|anomaly| anomaly.kind).collect();
        assert!(kinds.contains(&"effect-under-lower-fence"), "{kinds:?}");
        assert!(kinds.contains(&"execution-after-delete"), "{kinds:?}");
    }

    #[test]
    fn executions_seen_on_the_host_after_a_delete_or_unasked_are_reported() {
        let seen = |sandbox_id: &str, generation, first_seen_us, last_seen_us| ObservedExecution {
            sandbox_id: sandbox_id.into(),
            generation,
            first_seen_us,
            last_seen_us,
        };
        let operations = vec![
            op(
                0,
                Call::Create { name: "a".into() },
                Reply::Unknown {
                    error: "timeout".into(),
                },
                0,
            ),
            op(
                1,
                Call::Delete {
                    name: "a".into(),
                    expected_id: "x".into(),
                },
                Reply::Deleted {
                    id: "x".into(),
                    deleted: true,
                },
                100,
            ),
        ];
        // Seen up to the delete's acknowledgement (at 110): fine.
        let clean = Evidence {
            operations: operations.clone(),
            observed: Some(vec![seen("x", 1, 20, 100)]),
            ..Evidence::default()
        };
        let (anomalies, stats) = check(&clean);
        assert!(anomalies.is_empty(), "{anomalies:?}");
        assert_eq!(stats.effects.get("observed-executions"), Some(&1));

        let evidence = Evidence {
            operations,
            observed: Some(vec![
                // Still running in a sample taken after the acknowledgement.
                seen("x", 1, 20, 150),
                // A command left behind by its shim, after the delete.
                seen("x", 0, 120, 130),
                // Generation 2 of x: no start asked for it.
                seen("x", 2, 60, 90),
            ]),
            ..Evidence::default()
        };
        let (anomalies, _) = check(&evidence);
        let kinds: Vec<&str> = anomalies.iter().map(|anomaly| anomaly.kind).collect();
        assert_eq!(
            kinds,
            [
                "execution-after-delete",
                "execution-after-delete",
                "unrequested-effect"
            ],
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_delete_of_another_id_is_reported() {
        let evidence = Evidence {
            operations: vec![op(
                0,
                Call::Delete {
                    name: "a".into(),
                    expected_id: "x".into(),
                },
                Reply::Deleted {
                    id: "y".into(),
                    deleted: true,
                },
                0,
            )],
            replicas: Ok(Vec::new()),
            ..Evidence::default()
        };
        let (anomalies, _) = check(&evidence);
        assert!(
            anomalies
                .iter()
                .any(|anomaly| anomaly.kind == "wrong-delete")
        );
    }

    #[test]
    fn a_second_launch_of_a_generation_is_reported() {
        let launch = |at_us| Effect {
            at_us,
            kind: EffectKind::Launch,
            sandbox_id: "x".into(),
            generation: 1,
            fence: fence(1, 1),
        };
        let evidence = Evidence {
            operations: vec![op(
                0,
                Call::Create { name: "a".into() },
                Reply::Sandbox(Observed {
                    id: "x".into(),
                    generation: 1,
                    phase: Phase::Ready,
                    resource_version: 3,
                    token: String::new(),
                }),
                0,
            )],
            effects: Some(vec![launch(5), launch(8)]),
            replicas: Ok(Vec::new()),
            ..Evidence::default()
        };
        let (anomalies, _) = check(&evidence);
        assert!(
            anomalies
                .iter()
                .any(|anomaly| anomaly.kind == "duplicate-effect")
        );
    }
}
