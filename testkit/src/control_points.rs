//! The replicas' fault points ([`palisade_raft::hooks::FaultPoints`])
//! driven from another process over a control channel: a directory both
//! sides share. The chaos harness's process mode arms them in real
//! `palisade gateway run` processes as its in-process mode arms
//! `palisade_chaos::points::Triggers`: one trigger at a time, the first
//! replica to reach a point of the armed kind takes it, tells the harness
//! and, except at the forwarding point, waits there until the harness has
//! acted (moved leadership, frozen or killed the process).
//!
//! The gateway installs [`ControlPoints`] only in a build with the
//! `test-hooks` feature of `palisade-cli`, and only when
//! [`POINTS_DIR_ENV`] names a directory (see `cli/src/serve.rs`).
//!
//! # The channel (files in the directory)
//!
//! | file | written by | meaning |
//! |---|---|---|
//! | `ready-N` | replica N, at start | its points are installed |
//! | `reached-N` | replica N, a line per point reached | the kind's name |
//! | `armed` | harness (temporary file, renamed) | the trigger: `KIND ACTION HOLD_MS WAIT_MS [OP,OP...]` |
//! | `fired-N` | replica N, after it took the trigger | what it reached: `KIND\tSANDBOX\tOPERATION\tGENERATION\tTERM\tLEADER` |
//! | `acted-N` | harness | the task held at the point of N may go on |
//!
//! A replica takes the trigger by renaming `armed` away: of several
//! replicas reaching a point at once, exactly one succeeds. A held task
//! waits at most the trigger's `WAIT_MS`, so a harness that dies never
//! holds a replica for good.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;
use palisade_raft::NodeId;
use palisade_raft::hooks::{FaultPoint, FaultPoints};

/// The environment variable naming the control directory.
pub const POINTS_DIR_ENV: &str = "PALISADE_TEST_POINTS_DIR";
/// How often a held task, or the harness, looks for its file.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

const ARMED_FILE: &str = "armed";
const READY_PREFIX: &str = "ready-";
const REACHED_PREFIX: &str = "reached-";
const FIRED_PREFIX: &str = "fired-";
const ACTED_PREFIX: &str = "acted-";

/// What the harness asks of the replica that takes a trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// The point's kind ([`FaultPoint::name`]).
    pub kind: String,
    /// The harness's name for what it will do (for the record).
    pub action: String,
    /// How long the task is held after the harness acted.
    pub hold: Duration,
    /// How long the task waits for the harness at most.
    pub wait_max: Duration,
    /// The operations an executor point fires for (empty: any).
    pub operations: Vec<String>,
}

impl Trigger {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.kind,
            self.action,
            self.hold.as_millis(),
            self.wait_max.as_millis(),
            self.operations.join(",")
        )
    }

    fn decode(text: &str) -> Option<Trigger> {
        let mut words = text.split_whitespace();
        Some(Trigger {
            kind: words.next()?.to_string(),
            action: words.next()?.to_string(),
            hold: Duration::from_millis(words.next()?.parse().ok()?),
            wait_max: Duration::from_millis(words.next()?.parse().ok()?),
            operations: words
                .next()
                .map(|list| list.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
        })
    }
}

/// A point a replica reached with the trigger armed for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The replica.
    pub node: NodeId,
    /// The point's kind.
    pub kind: String,
    /// The sandbox of an executor point (empty otherwise).
    pub sandbox_id: String,
    /// The operation of an executor point (`Create`, ...), or the
    /// forwarded command's name.
    pub operation: String,
    /// The operation's generation (executor points).
    pub generation: u64,
    /// The executor's term (executor points).
    pub term: u64,
    /// The leader a follower forwards to (forwarding point; 0 otherwise).
    pub leader: NodeId,
}

impl Fired {
    fn of(node: NodeId, point: &FaultPoint) -> Fired {
        let mut fired = Fired {
            node,
            kind: point.name().to_string(),
            sandbox_id: String::new(),
            operation: String::new(),
            generation: 0,
            term: 0,
            leader: 0,
        };
        match point {
            FaultPoint::BeginCommitted {
                sandbox_id,
                operation,
                generation,
                term,
            }
            | FaultPoint::BeforeEffect {
                sandbox_id,
                operation,
                generation,
                term,
            }
            | FaultPoint::EffectDone {
                sandbox_id,
                operation,
                generation,
                term,
            } => {
                fired.sandbox_id = sandbox_id.clone();
                fired.operation = operation.clone();
                fired.generation = *generation;
                fired.term = *term;
            }
            FaultPoint::Forwarding { leader, command } => {
                fired.leader = *leader;
                fired.operation = (*command).to_string();
            }
            FaultPoint::SnapshotInstall { .. } | FaultPoint::SnapshotBuild { .. } => {}
        }
        fired
    }

    fn encode(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            self.kind, self.sandbox_id, self.operation, self.generation, self.term, self.leader
        )
    }

    fn decode(node: NodeId, text: &str) -> Option<Fired> {
        let fields: Vec<&str> = text.trim_end_matches('\n').split('\t').collect();
        let [kind, sandbox_id, operation, generation, term, leader] = fields.as_slice() else {
            return None;
        };
        Some(Fired {
            node,
            kind: kind.to_string(),
            sandbox_id: sandbox_id.to_string(),
            operation: operation.to_string(),
            generation: generation.parse().ok()?,
            term: term.parse().ok()?,
            leader: leader.parse().ok()?,
        })
    }
}

/// Writes `contents` to `dir/name` through a temporary file: a reader sees
/// all of it or nothing.
fn write_whole(dir: &Path, name: &str, contents: &str) -> std::io::Result<()> {
    let temporary = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&temporary, contents)?;
    std::fs::rename(&temporary, dir.join(name))
}

/// The replica side: see the module doc.
#[derive(Debug, Clone)]
pub struct ControlPoints {
    dir: PathBuf,
}

impl ControlPoints {
    /// The points of replica `node` over `dir` (created if missing);
    /// announces itself with `ready-NODE`.
    pub fn new(dir: PathBuf, node: NodeId) -> std::io::Result<ControlPoints> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{READY_PREFIX}{node}")), b"")?;
        Ok(ControlPoints { dir })
    }

    fn count_reached(&self, node: NodeId, kind: &str) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{REACHED_PREFIX}{node}")))
            .and_then(|mut file| file.write_all(format!("{kind}\n").as_bytes()));
        if let Err(error) = appended {
            tracing::warn!(%error, "TEST POINTS: cannot count a point reached");
        }
    }

    /// Takes the armed trigger if it is for `point`.
    fn take(&self, node: NodeId, point: &FaultPoint) -> Option<Trigger> {
        let armed = self.dir.join(ARMED_FILE);
        let trigger = Trigger::decode(&std::fs::read_to_string(&armed).ok()?)?;
        if trigger.kind != point.name() {
            return None;
        }
        let operation = match point {
            FaultPoint::BeginCommitted { operation, .. }
            | FaultPoint::BeforeEffect { operation, .. }
            | FaultPoint::EffectDone { operation, .. } => Some(operation.as_str()),
            _ => None,
        };
        if !trigger.operations.is_empty()
            && !operation.is_some_and(|operation| trigger.operations.iter().any(|o| o == operation))
        {
            return None;
        }
        // Exactly one replica renames it away.
        let taken = self.dir.join(format!(".taken-{node}"));
        std::fs::rename(&armed, &taken).ok()?;
        let _ = std::fs::remove_file(&taken);
        Some(trigger)
    }
}

impl FaultPoints for ControlPoints {
    fn at(&self, node: NodeId, point: FaultPoint) -> BoxFuture<'static, ()> {
        self.count_reached(node, point.name());
        let Some(trigger) = self.take(node, &point) else {
            return Box::pin(async {});
        };
        let fired = Fired::of(node, &point);
        let acted = self.dir.join(format!("{ACTED_PREFIX}{node}"));
        // A release left from a task that stopped waiting is not this one's.
        let _ = std::fs::remove_file(&acted);
        if let Err(error) =
            write_whole(&self.dir, &format!("{FIRED_PREFIX}{node}"), &fired.encode())
        {
            tracing::warn!(%error, "TEST POINTS: cannot tell the harness a point fired");
            return Box::pin(async {});
        }
        tracing::warn!(?point, action = %trigger.action, "TEST POINTS: held at a fault point");
        if matches!(point, FaultPoint::Forwarding { .. }) {
            // The harness acts while the forwarded write is in flight.
            return Box::pin(async {});
        }
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + trigger.wait_max;
            while std::fs::remove_file(&acted).is_err() {
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!("TEST POINTS: the harness did not act in time; going on");
                    return;
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
            tokio::time::sleep(trigger.hold).await;
        })
    }
}

/// The harness side: see the module doc.
#[derive(Debug, Clone)]
pub struct PointsControl {
    dir: PathBuf,
}

impl PointsControl {
    /// The control of the points over `dir` (created if missing).
    pub fn new(dir: PathBuf) -> std::io::Result<PointsControl> {
        std::fs::create_dir_all(&dir)?;
        Ok(PointsControl { dir })
    }

    /// The directory (what [`POINTS_DIR_ENV`] must name).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether replica `node` installed its points (a `test-hooks` build
    /// started with [`POINTS_DIR_ENV`]).
    pub fn ready(&self, node: NodeId) -> bool {
        self.dir.join(format!("{READY_PREFIX}{node}")).exists()
    }

    /// Arms `trigger`, replacing any other; forgets a fired point nobody
    /// acted on.
    pub fn arm(&self, trigger: &Trigger) -> std::io::Result<()> {
        self.clear_fired();
        write_whole(&self.dir, ARMED_FILE, &trigger.encode())
    }

    /// Disarms; true if the trigger was still armed (nothing took it).
    pub fn disarm(&self) -> bool {
        let armed = std::fs::remove_file(self.dir.join(ARMED_FILE)).is_ok();
        self.clear_fired();
        armed
    }

    fn clear_fired(&self) {
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(node) = name.strip_prefix(FIRED_PREFIX) {
                let _ = std::fs::remove_file(entry.path());
                // A task held there goes on at once.
                if let Ok(node) = node.parse::<NodeId>() {
                    let _ = self.acted(node);
                }
            }
        }
    }

    /// The point that fired, if one did (taken: a second call does not
    /// see it again).
    pub fn fired(&self) -> Option<Fired> {
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(node) = name
                .strip_prefix(FIRED_PREFIX)
                .and_then(|node| node.parse::<NodeId>().ok())
            else {
                continue;
            };
            let text = std::fs::read_to_string(entry.path()).ok();
            let _ = std::fs::remove_file(entry.path());
            if let Some(fired) = text.and_then(|text| Fired::decode(node, &text)) {
                return Some(fired);
            }
        }
        None
    }

    /// Waits (at most `timeout`) for a point to fire.
    pub async fn wait_fired(&self, timeout: Duration) -> Option<Fired> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(fired) = self.fired() {
                return Some(fired);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Lets the task held at replica `node`'s point go on.
    pub fn acted(&self, node: NodeId) -> std::io::Result<()> {
        std::fs::write(self.dir.join(format!("{ACTED_PREFIX}{node}")), b"")
    }

    /// How often each kind of point was reached, over every replica (a
    /// killed replica's count included: it is on disk).
    pub fn reached(&self) -> BTreeMap<String, u64> {
        let mut reached = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if !entry
                .file_name()
                .to_string_lossy()
                .starts_with(REACHED_PREFIX)
            {
                continue;
            }
            for line in std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
            {
                *reached.entry(line.to_string()).or_default() += 1;
            }
        }
        reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(operation: &str) -> FaultPoint {
        FaultPoint::BeforeEffect {
            sandbox_id: "sb-1".into(),
            operation: operation.into(),
            generation: 2,
            term: 7,
        }
    }

    #[tokio::test]
    async fn one_replica_takes_the_trigger_and_waits_for_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        let control = PointsControl::new(dir.path().to_path_buf()).unwrap();
        let one = ControlPoints::new(dir.path().to_path_buf(), 1).unwrap();
        let two = ControlPoints::new(dir.path().to_path_buf(), 2).unwrap();
        assert!(control.ready(1) && control.ready(2) && !control.ready(3));

        // Not armed: nothing fires, the reach is counted.
        one.at(1, point("Create")).await;
        assert!(control.fired().is_none());

        control
            .arm(&Trigger {
                kind: "before-effect".into(),
                action: "stall".into(),
                hold: Duration::ZERO,
                wait_max: Duration::from_secs(30),
                operations: vec!["Start".into()],
            })
            .unwrap();
        // Another operation: filtered out.
        one.at(1, point("Create")).await;
        assert!(control.fired().is_none());

        let held = tokio::spawn(two.at(2, point("Start")));
        let fired = control
            .wait_fired(Duration::from_secs(5))
            .await
            .expect("fired");
        assert_eq!(
            fired,
            Fired {
                node: 2,
                kind: "before-effect".into(),
                sandbox_id: "sb-1".into(),
                operation: "Start".into(),
                generation: 2,
                term: 7,
                leader: 0,
            }
        );
        // Taken: the next replica passes.
        one.at(1, point("Start")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!held.is_finished(), "held until the harness acted");
        control.acted(2).unwrap();
        tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("released")
            .unwrap();
        assert_eq!(control.reached().get("before-effect"), Some(&4));
        assert!(!control.disarm(), "the trigger was taken");
    }

    #[tokio::test]
    async fn a_held_task_goes_on_without_the_harness_after_its_wait() {
        let dir = tempfile::tempdir().unwrap();
        let control = PointsControl::new(dir.path().to_path_buf()).unwrap();
        let one = ControlPoints::new(dir.path().to_path_buf(), 1).unwrap();
        control
            .arm(&Trigger {
                kind: "before-effect".into(),
                action: "transfer".into(),
                hold: Duration::ZERO,
                wait_max: Duration::from_millis(100),
                operations: Vec::new(),
            })
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), one.at(1, point("Create")))
            .await
            .expect("not held for good");
    }
}
