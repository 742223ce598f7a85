//! [`Triggers`]: the harness side of the replicas' fault points
//! ([`palisade_raft::hooks::FaultPoints`]).
//!
//! The nemesis *arms* one trigger at a time: a kind of point and an action.
//! The first replica task that reaches such a point disarms it, tells the
//! nemesis (a [`Fired`] message) and, for the points inside the executor
//! and the snapshots (install, build), *waits there* until the nemesis has acted —
//! moved leadership away, or crashed the replica (then the wait never ends:
//! the task is dropped with the replica) — and then holds a little longer,
//! so that the old leader's effect or completion is attempted after the
//! handoff: exactly the case the term fence exists for. At the forwarding
//! point the follower does not wait: the nemesis acts while the forwarded
//! write is in flight.
//!
//! Every point reached is counted, armed or not, so a report shows that
//! the points were exercised.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use palisade_raft::NodeId;
use palisade_raft::hooks::{FaultPoint, FaultPoints};
use tokio::sync::{mpsc, oneshot};

/// How long a task waits at a point for the nemesis to act, at most.
pub const ACTION_WAIT_MAX: Duration = Duration::from_secs(5);

/// Depth of the queue of fired triggers (one is armed at a time).
pub const FIRED_QUEUE_DEPTH: usize = 8;

/// The kinds of fault points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PointKind {
    /// After a `Begin*` entry committed, before the driver effect.
    BeginCommitted,
    /// After the driver effect, before `Complete*` is proposed.
    EffectDone,
    /// After the executor confirmed its leadership, before the driver call.
    BeforeEffect,
    /// While a follower forwards a write to the leader.
    Forwarding,
    /// While a follower installs a snapshot.
    SnapshotInstall,
    /// Between a snapshot build's copy of the state and its save.
    SnapshotBuild,
}

impl PointKind {
    /// Every kind.
    pub const ALL: [PointKind; 6] = [
        PointKind::BeginCommitted,
        PointKind::BeforeEffect,
        PointKind::EffectDone,
        PointKind::Forwarding,
        PointKind::SnapshotInstall,
        PointKind::SnapshotBuild,
    ];

    /// The kind of a point.
    pub fn of(point: &FaultPoint) -> PointKind {
        match point {
            FaultPoint::BeginCommitted { .. } => PointKind::BeginCommitted,
            FaultPoint::BeforeEffect { .. } => PointKind::BeforeEffect,
            FaultPoint::EffectDone { .. } => PointKind::EffectDone,
            FaultPoint::Forwarding { .. } => PointKind::Forwarding,
            FaultPoint::SnapshotInstall { .. } => PointKind::SnapshotInstall,
            FaultPoint::SnapshotBuild { .. } => PointKind::SnapshotBuild,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PointKind::BeginCommitted => "begin-committed",
            PointKind::BeforeEffect => "before-effect",
            PointKind::EffectDone => "effect-done",
            PointKind::Forwarding => "forwarding",
            PointKind::SnapshotInstall => "snapshot-install",
            PointKind::SnapshotBuild => "snapshot-build",
        }
    }
}

/// What the nemesis does when a trigger fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointAction {
    /// Move leadership away, then let the task go on after `hold`.
    Transfer {
        /// How long the task is held after the transfer.
        hold: Duration,
    },
    /// Crash the replica (for the forwarding point: the leader).
    Crash,
    /// Move leadership away, wait (at most `wait_max`) until the
    /// operation's sandbox is gone, move leadership *back* to the replica,
    /// then let the task go on: it now runs in a replica that leads again,
    /// in a newer term — only the term fence stops its old-term effect.
    PingPong {
        /// Longest wait for the sandbox to go.
        wait_max: Duration,
    },
    /// Freeze the replica (its thread blocked, as SIGSTOP would) with the
    /// task held, wait for another leader, delete the operation's sandbox
    /// through it, then let the task go on and thaw the replica: the held
    /// effect reaches the driver after the delete was acknowledged, past
    /// every check its own replica made — only the driver's fence and
    /// tombstone stop it.
    Stall {
        /// Longest wait for a new leader and for the sandbox to go.
        wait_max: Duration,
    },
    /// Hold a snapshot build between its copy and its save while the
    /// replica is cut off, the leader snapshots and purges its log past
    /// the copy, and the replica installs the leader's snapshot; then let
    /// the build finish (its save must keep the newer snapshot) and crash
    /// and restart the replica from its files.
    HoldBuild {
        /// Longest hold.
        wait_max: Duration,
    },
}

impl PointAction {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PointAction::Transfer { .. } => "transfer",
            PointAction::Crash => "crash",
            PointAction::PingPong { .. } => "ping-pong",
            PointAction::Stall { .. } => "stall",
            PointAction::HoldBuild { .. } => "hold",
        }
    }
}

/// A trigger that fired: the nemesis acts on it and then answers `done`.
#[derive(Debug)]
pub struct Fired {
    /// The replica that reached the point.
    pub node: NodeId,
    /// The point.
    pub point: FaultPoint,
    /// The action armed.
    pub action: PointAction,
    /// Answered (or dropped) once the nemesis has acted.
    pub done: oneshot::Sender<()>,
}

/// Which operations an armed executor point fires for (`None`: any).
pub type OperationFilter = Option<&'static [&'static str]>;

#[derive(Debug, Default)]
struct Armed {
    trigger: Option<(PointKind, PointAction, OperationFilter)>,
    reached: BTreeMap<&'static str, u64>,
}

/// The harness's fault points. See the module docs.
#[derive(Debug)]
pub struct Triggers {
    /// `std` mutex: held to read or take the trigger, never across an await.
    armed: Mutex<Armed>,
    fired: mpsc::Sender<Fired>,
}

impl Triggers {
    /// Triggers, and the receiver of those that fire.
    pub fn new() -> (Self, mpsc::Receiver<Fired>) {
        let (fired, receiver) = mpsc::channel(FIRED_QUEUE_DEPTH);
        (
            Self {
                armed: Mutex::new(Armed::default()),
                fired,
            },
            receiver,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Arms one trigger, replacing any other. `operations` limits the
    /// executor points to those operations (`Create`, `Start`, ...).
    pub fn arm(&self, kind: PointKind, action: PointAction, operations: OperationFilter) {
        self.lock().trigger = Some((kind, action, operations));
    }

    /// Disarms; true if a trigger was still armed (it did not fire).
    pub fn disarm(&self) -> bool {
        self.lock().trigger.take().is_some()
    }

    /// How often each point was reached.
    pub fn reached(&self) -> BTreeMap<&'static str, u64> {
        self.lock().reached.clone()
    }
}

impl FaultPoints for Triggers {
    fn at(&self, node: NodeId, point: FaultPoint) -> BoxFuture<'static, ()> {
        let kind = PointKind::of(&point);
        let action = {
            let mut armed = self.lock();
            *armed.reached.entry(kind.name()).or_default() += 1;
            let operation = match &point {
                FaultPoint::BeginCommitted { operation, .. }
                | FaultPoint::BeforeEffect { operation, .. }
                | FaultPoint::EffectDone { operation, .. } => Some(operation.as_str()),
                _ => None,
            };
            match armed.trigger {
                Some((armed_kind, action, filter))
                    if armed_kind == kind
                        && filter.is_none_or(|allowed| {
                            operation.is_some_and(|operation| allowed.contains(&operation))
                        }) =>
                {
                    armed.trigger = None;
                    action
                }
                _ => return futures::future::ready(()).boxed(),
            }
        };
        let (done, acted) = oneshot::channel();
        let fired = Fired {
            node,
            point,
            action,
            done,
        };
        if self.fired.try_send(fired).is_err() {
            return futures::future::ready(()).boxed();
        }
        if kind == PointKind::Forwarding {
            return futures::future::ready(()).boxed();
        }
        let wait = match action {
            // Two transfers and the wait for the sandbox to go.
            PointAction::PingPong { wait_max } => wait_max + 2 * ACTION_WAIT_MAX,
            PointAction::HoldBuild { wait_max } => wait_max,
            _ => ACTION_WAIT_MAX,
        };
        async move {
            let _ = tokio::time::timeout(wait, acted).await;
            if let PointAction::Transfer { hold } = action {
                tokio::time::sleep(hold).await;
            }
        }
        .boxed()
    }
}
