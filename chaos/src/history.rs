//! What a campaign records: every client operation as invoked and as
//! answered (invoke / ok / fail / unknown, Jepsen's vocabulary), every
//! replay of a request id, and every fault the nemesis injected, all on the
//! campaign's [`Clock`].
//!
//! One [`Operation`] is one logical request: its first invocation, every
//! attempt (a retry with the same request id after an error, possibly at
//! another replica), and its final answer. An operation whose every attempt
//! ended without a definite answer is *unknown*: it may or may not have
//! taken effect, and the checkers treat it as both.

use std::sync::Mutex;

use serde::Serialize;

use crate::clock::{Clock, seconds};

/// Most operations one history records; a campaign asks for fewer.
pub const OPERATIONS_RECORDED_MAX: usize = 200_000;
/// Most fault events one history records.
pub const FAULT_EVENTS_RECORDED_MAX: usize = 100_000;
/// Most attempts recorded per operation (the workload makes fewer).
pub const ATTEMPTS_RECORDED_MAX: usize = 16;

/// A client of the workload (the final reads use [`FINAL_READER`]).
pub type ClientId = usize;

/// The client id of the reads made after the faults healed.
pub const FINAL_READER: ClientId = usize::MAX;

/// The client id of the requests the nemesis itself makes (the delete of a
/// ping-pong handoff, see [`crate::nemesis`]).
pub const NEMESIS_CLIENT: ClientId = usize::MAX - 1;

/// A sandbox phase as the API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Phase {
    /// PROVISIONING.
    Provisioning,
    /// READY.
    Ready,
    /// STOPPING.
    Stopping,
    /// STOPPED.
    Stopped,
    /// STARTING.
    Starting,
    /// DELETING.
    Deleting,
    /// ERROR.
    Error,
    /// COMPLETED.
    Completed,
    /// UNKNOWN, or a value this harness does not know.
    Unknown,
}

impl Phase {
    /// From the API's enum value.
    pub fn from_proto(value: i32) -> Phase {
        use palisade_proto::v1::SandboxPhase as P;
        match P::try_from(value) {
            Ok(P::Provisioning) => Phase::Provisioning,
            Ok(P::Ready) => Phase::Ready,
            Ok(P::Stopping) => Phase::Stopping,
            Ok(P::Stopped) => Phase::Stopped,
            Ok(P::Starting) => Phase::Starting,
            Ok(P::Deleting) => Phase::Deleting,
            Ok(P::Error) => Phase::Error,
            Ok(P::Completed) => Phase::Completed,
            _ => Phase::Unknown,
        }
    }

    /// True while an operation is in flight (or the phase is unknown): the
    /// phase says nothing about where the sandbox will come to rest.
    pub fn is_transitional(self) -> bool {
        matches!(
            self,
            Phase::Provisioning
                | Phase::Stopping
                | Phase::Starting
                | Phase::Deleting
                | Phase::Unknown
        )
    }
}

/// What a client asked. Every call names the sandbox name it is about (the
/// linearizability check partitions the history by name); stop, start and
/// delete also carry the precondition the client sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Call {
    /// CreateSandbox(name).
    Create {
        /// Sandbox name.
        name: String,
    },
    /// GetSandbox(name), linearizable.
    Get {
        /// Sandbox name.
        name: String,
    },
    /// StopSandbox(id) with the execution token of (id, generation).
    Stop {
        /// The name the client knew the sandbox under.
        name: String,
        /// Sandbox id of the token.
        id: String,
        /// Generation of the token.
        generation: u64,
    },
    /// StartSandbox(id) with the execution token of (id, generation).
    Start {
        /// The name the client knew the sandbox under.
        name: String,
        /// Sandbox id of the token.
        id: String,
        /// Generation of the token.
        generation: u64,
    },
    /// DeleteSandbox(name) with expected_sandbox_id.
    Delete {
        /// Sandbox name.
        name: String,
        /// The id the name must still resolve to.
        expected_id: String,
    },
}

impl Call {
    /// The sandbox name the call is about.
    pub fn name(&self) -> &str {
        match self {
            Call::Create { name }
            | Call::Get { name }
            | Call::Stop { name, .. }
            | Call::Start { name, .. }
            | Call::Delete { name, .. } => name,
        }
    }

    /// Short name of the call.
    pub fn kind(&self) -> &'static str {
        match self {
            Call::Create { .. } => "create",
            Call::Get { .. } => "get",
            Call::Stop { .. } => "stop",
            Call::Start { .. } => "start",
            Call::Delete { .. } => "delete",
        }
    }

    /// True for the calls that may change the state.
    pub fn is_write(&self) -> bool {
        !matches!(self, Call::Get { .. })
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Create { name } => write!(f, "create {name}"),
            Call::Get { name } => write!(f, "get {name}"),
            Call::Stop {
                name,
                id,
                generation,
            } => write!(f, "stop {name} token=({}, g{generation})", short(id)),
            Call::Start {
                name,
                id,
                generation,
            } => write!(f, "start {name} token=({}, g{generation})", short(id)),
            Call::Delete { name, expected_id } => {
                write!(f, "delete {name} expected_id={}", short(expected_id))
            }
        }
    }
}

/// The first 8 characters of an id, for excerpts.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// A sandbox as an answer showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observed {
    /// Sandbox id.
    pub id: String,
    /// Current execution generation.
    pub generation: u64,
    /// Phase.
    pub phase: Phase,
    /// Resource version (log index of the last change).
    pub resource_version: u64,
    /// Execution token of (id, generation).
    #[serde(skip)]
    pub token: String,
}

/// The final answer of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Reply {
    /// OK, with a sandbox (create, get, stop, start).
    Sandbox(Observed),
    /// OK to a delete.
    Deleted {
        /// The id the answer says was deleted.
        id: String,
        /// Whether the answer says it is gone.
        deleted: bool,
    },
    /// A definite failure, with its gRPC code and ErrorInfo reason: the
    /// request took no effect.
    Rejected {
        /// gRPC code name.
        code: String,
        /// ErrorInfo reason ("" when the status carried none).
        reason: String,
    },
    /// No definite answer: the request may or may not have taken effect.
    Unknown {
        /// The last error seen.
        error: String,
    },
}

impl Reply {
    /// `ok`, `fail` or `unknown`.
    pub fn class(&self) -> &'static str {
        match self {
            Reply::Sandbox(_) | Reply::Deleted { .. } => "ok",
            Reply::Rejected { .. } => "fail",
            Reply::Unknown { .. } => "unknown",
        }
    }

    /// The reason of a rejection, if this is one.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Reply::Rejected { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Sandbox(observed) => write!(
                f,
                "ok id={} g{} {:?} rv={}",
                short(&observed.id),
                observed.generation,
                observed.phase,
                observed.resource_version
            ),
            Reply::Deleted { id, deleted } => {
                write!(f, "ok deleted={deleted} id={}", short(id))
            }
            Reply::Rejected { code, reason } => write!(f, "fail {code} {reason}"),
            Reply::Unknown { error } => {
                let error: String = error.chars().take(80).collect();
                write!(f, "unknown ({error})")
            }
        }
    }
}

/// One attempt of an operation at one replica.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// The replica asked.
    pub replica: u64,
    /// When it was asked.
    pub at_us: u64,
    /// What came back, in short.
    pub result: String,
}

/// One logical client request, from its first invocation to its final
/// answer.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    /// Position in the history.
    pub index: usize,
    /// The client.
    pub client: ClientId,
    /// The request id every attempt carried (empty for reads).
    pub request_id: String,
    /// What was asked.
    pub call: Call,
    /// When it was first invoked.
    pub invoked_us: u64,
    /// When the final answer came; `None` for an unknown outcome.
    pub returned_us: Option<u64>,
    /// The final answer.
    pub reply: Reply,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

impl Operation {
    /// One line for excerpts.
    pub fn line(&self) -> String {
        let client = match self.client {
            FINAL_READER => "final".to_string(),
            NEMESIS_CLIENT => "nemesis".to_string(),
            client => format!("c{client}"),
        };
        let returned = self
            .returned_us
            .map_or_else(|| "      ?".to_string(), seconds);
        let replicas: Vec<String> = self
            .attempts
            .iter()
            .map(|attempt| format!("n{}", attempt.replica))
            .collect();
        format!(
            "#{:<5} {:>8} .. {:>8} {:<6} {:<48} -> {}  [{}] {}",
            self.index,
            seconds(self.invoked_us),
            returned,
            client,
            self.call.to_string(),
            self.reply,
            replicas.join(","),
            self.request_id
        )
    }
}

/// A replay: an operation's request sent again, same id and payload.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    /// The operation replayed.
    pub original: usize,
    /// When the replay was sent.
    pub at_us: u64,
    /// What the replay answered.
    pub reply: Reply,
}

/// A fault the nemesis injected or healed.
#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    /// When.
    pub at_us: u64,
    /// Kind, for counting ("kill", "pause", "handoff:begin-committed:crash").
    pub kind: String,
    /// What exactly.
    pub detail: String,
    /// True for a fault the nemesis injected (counted in the report); false
    /// for heals, restarts, missed faults and other notes.
    #[serde(default)]
    pub injected: bool,
    /// When the fault ended (healed), for a fault that lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_us: Option<u64>,
}

/// The history of one campaign. Shared by the clients and the nemesis; a
/// `std` mutex, held only to push or copy, never across an await.
#[derive(Debug)]
pub struct History {
    clock: Clock,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    operations: Vec<Operation>,
    replays: Vec<Replay>,
    faults: Vec<FaultEvent>,
    dropped: usize,
}

impl History {
    /// An empty history on `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The campaign's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a finished operation and returns its index (`None` once the
    /// history is full; the campaign reports how many were dropped).
    pub fn record(&self, mut operation: Operation) -> Option<usize> {
        let mut inner = self.lock();
        if inner.operations.len() >= OPERATIONS_RECORDED_MAX {
            inner.dropped += 1;
            return None;
        }
        operation.index = inner.operations.len();
        operation.attempts.truncate(ATTEMPTS_RECORDED_MAX);
        inner.operations.push(operation);
        Some(inner.operations.len() - 1)
    }

    /// Records a replay.
    pub fn record_replay(&self, replay: Replay) {
        let mut inner = self.lock();
        if inner.replays.len() < OPERATIONS_RECORDED_MAX {
            inner.replays.push(replay);
        }
    }

    /// Records an event now (a heal, a restart, a note).
    pub fn fault(&self, kind: impl Into<String>, detail: impl Into<String>) {
        self.push(kind.into(), detail.into(), false);
    }

    /// Records an injected fault now; returns its position, for
    /// [`History::fault_ended`] (`None` once the history is full).
    pub fn injected(&self, kind: impl Into<String>, detail: impl Into<String>) -> Option<usize> {
        self.push(kind.into(), detail.into(), true)
    }

    /// Records that the injected fault at `position` ended now.
    pub fn fault_ended(&self, position: Option<usize>) {
        let at_us = self.clock.now_us();
        if let Some(position) = position
            && let Some(event) = self.lock().faults.get_mut(position)
        {
            event.ended_us.get_or_insert(at_us);
        }
    }

    fn push(&self, kind: String, detail: String, injected: bool) -> Option<usize> {
        let at_us = self.clock.now_us();
        let mut inner = self.lock();
        if inner.faults.len() >= FAULT_EVENTS_RECORDED_MAX {
            return None;
        }
        inner.faults.push(FaultEvent {
            at_us,
            kind,
            detail,
            injected,
            ended_us: None,
        });
        Some(inner.faults.len() - 1)
    }

    /// How many operations, replays and fault events were recorded so far
    /// (the simulation's watchdog watches it grow).
    pub fn events(&self) -> usize {
        let inner = self.lock();
        inner.operations.len() + inner.dropped + inner.replays.len() + inner.faults.len()
    }

    /// Copies of everything recorded so far.
    pub fn snapshot(&self) -> (Vec<Operation>, Vec<Replay>, Vec<FaultEvent>, usize) {
        let inner = self.lock();
        (
            inner.operations.clone(),
            inner.replays.clone(),
            inner.faults.clone(),
            inner.dropped,
        )
    }
}
