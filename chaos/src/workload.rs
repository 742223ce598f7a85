//! The workload: concurrent clients speaking the public gRPC API
//! (`palisade.v1`, tonic clients from `palisade-proto`) to every replica,
//! recording an invoke / ok / fail / unknown history.
//!
//! Each client loops over a small pool of sandbox names, so that clients
//! race on the same sandboxes, and picks (from its own seeded RNG):
//!
//! - **create** a name (and, after its own successful delete, often
//!   re-create the same name at once: the same-name race of DESIGN.md 1.1);
//! - **get** a name, linearizable;
//! - **stop** / **start** with an execution token, by sandbox id — the
//!   token of the latest observation of the name, or often an older one
//!   (a stale token must be refused, never applied to a newer execution);
//! - **delete** a name with an expected sandbox id — again often a stale
//!   one (a same-name replacement must never be deleted);
//! - **replay** one of its earlier requests, same request id and payload:
//!   the answer must be the original one.
//!
//! Observations are shared between clients (a "knowledge" map of the
//! latest and a few older observations per name), which is what makes
//! preconditions stale in interesting ways.
//!
//! Every request carries a request id. After an answer that is not
//! definite (UNAVAILABLE, a transport error, no answer within the attempt
//! timeout) the client retries **the same request** (same id, same payload)
//! at a randomly chosen replica, up to [`WorkloadConfig::attempts_max`]
//! attempts; if none is definite, the operation's outcome is unknown.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint};
use tonic_types::StatusExt;

use crate::history::{Attempt, Call, ClientId, History, Observed, Operation, Phase, Replay, Reply};

/// Older observations kept per name (for stale preconditions).
pub const PAST_OBSERVATIONS_MAX: usize = 4;
/// Earlier requests a client keeps for replays.
pub const REPLAYABLE_REQUESTS_MAX: usize = 64;
/// Longest pause between two attempts of one request.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(400);

/// Workload settings.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// Operations in total (replays not included).
    pub operations: usize,
    /// Size of the pool of sandbox names.
    pub names: usize,
    /// Attempts per request (the first and the retries).
    pub attempts_max: usize,
    /// Deadline of one attempt.
    pub attempt_timeout: Duration,
    /// Probability that an operation is preceded by a replay.
    pub replay_probability: f64,
    /// Probability that a stop, start or delete uses an older observation.
    pub stale_probability: f64,
    /// Prefix of request ids (unique per campaign).
    pub request_prefix: String,
    /// Pace of the operation stream, operations per second over all
    /// clients (0: as fast as the cluster answers). Operation k is not
    /// issued before k / rate seconds into the workload, so that a campaign
    /// lasts long enough for the nemesis's faults in time; a client held up
    /// by a fault catches up afterwards.
    pub rate: f64,
    /// While this is false once the `operations` are issued, a paced
    /// workload (`rate` > 0) goes on at the same pace, for at most
    /// [`KEEP_GOING_MAX`] past its planned end: the nemesis sets
    /// it once every requested kind of fault had its turn, so that a short
    /// campaign under many nemeses is not vacuous (a fault kind that never
    /// fired proves nothing). `None`, or an unpaced workload: stop at
    /// `operations`.
    pub keep_going_until: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// How long past its planned end a paced workload goes on while it waits
/// for the nemesis's first round ([`WorkloadConfig::keep_going_until`]).
/// The cluster lane's first round holds one fault of each kind, each
/// bounded, and the snapshot race alone may take ~20 s (its hold, install
/// wait and restart).
pub const KEEP_GOING_MAX: Duration = Duration::from_secs(60);

/// The default pace of the operation stream, operations per second
/// (`palisade chaos run --rate`): 300 operations take about 7.5 s, long
/// enough for a dozen faults or more.
pub const DEFAULT_RATE: f64 = 40.0;

impl WorkloadConfig {
    /// Defaults for `operations` operations.
    pub fn new(operations: usize, clients: usize, names: usize, seed: u64) -> Self {
        Self {
            clients,
            operations,
            names,
            attempts_max: 6,
            attempt_timeout: Duration::from_secs(8),
            replay_probability: 0.08,
            stale_probability: 0.25,
            request_prefix: format!("chaos-{seed}"),
            rate: DEFAULT_RATE,
            keep_going_until: None,
        }
    }

    /// The pool of names.
    pub fn name_pool(&self) -> Vec<String> {
        (0..self.names).map(|n| format!("sb-{n}")).collect()
    }
}

/// One request, kept whole so that a retry or a replay sends exactly it.
// A few hundred requests per campaign, each built once: boxing the large
// create variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Request {
    /// CreateSandbox.
    Create(v1::CreateSandboxRequest),
    /// GetSandbox.
    Get(v1::GetSandboxRequest),
    /// StopSandbox.
    Stop(v1::StopSandboxRequest),
    /// StartSandbox.
    Start(v1::StartSandboxRequest),
    /// DeleteSandbox.
    Delete(v1::DeleteSandboxRequest),
}

/// What one attempt got.
enum Answer {
    Sandbox(Box<v1::Sandbox>),
    Deleted(v1::DeleteSandboxResponse),
}

impl Request {
    async fn send(
        &self,
        client: &mut PalisadeClient<Channel>,
        timeout: Duration,
    ) -> Result<Answer, tonic::Status> {
        fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
            let mut request = tonic::Request::new(message);
            request.set_timeout(timeout);
            request
        }
        let call = async {
            match self {
                Request::Create(message) => client
                    .create_sandbox(with_timeout(message.clone(), timeout))
                    .await
                    .map(|response| Answer::Sandbox(Box::new(response.into_inner()))),
                Request::Get(message) => client
                    .get_sandbox(with_timeout(message.clone(), timeout))
                    .await
                    .map(|response| Answer::Sandbox(Box::new(response.into_inner()))),
                Request::Stop(message) => client
                    .stop_sandbox(with_timeout(message.clone(), timeout))
                    .await
                    .map(|response| Answer::Sandbox(Box::new(response.into_inner()))),
                Request::Start(message) => client
                    .start_sandbox(with_timeout(message.clone(), timeout))
                    .await
                    .map(|response| Answer::Sandbox(Box::new(response.into_inner()))),
                Request::Delete(message) => client
                    .delete_sandbox(with_timeout(message.clone(), timeout))
                    .await
                    .map(|response| Answer::Deleted(response.into_inner())),
            }
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_elapsed) => Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {timeout:?}"
            ))),
        }
    }
}

/// The ErrorInfo reason of a status, if it carries one.
pub fn reason_of(status: &tonic::Status) -> Option<String> {
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
}

/// Whether a status is a definite answer (the request was decided, or
/// refused before anything was proposed) or not (retry with the same id):
/// UNAVAILABLE (no leader, leadership changed, outcome pending, shutting
/// down), a deadline, and transport failures (no ErrorInfo) are not.
///
/// RESOURCE_EXHAUSTED without ErrorInfo is the transport's too: tonic's
/// code for an HTTP/2 ENHANCE_YOUR_CALM, which a replica's HTTP/2 server
/// sends (and closes the connection) when it finds more streams reset by
/// clients than it accepts at once — after a stall, when the clients
/// timed out the requests it held. A request on that connection may have
/// been proposed (chaos seed 5: a create answered so while its replica
/// thawed). The replica's own refusals carry a reason.
pub fn is_definite(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded => false,
        // Transport failures carry no ErrorInfo.
        Code::Cancelled
        | Code::Unknown
        | Code::Internal
        | Code::Aborted
        | Code::ResourceExhausted
            if reason_of(status).is_none() =>
        {
            false
        }
        _ => true,
    }
}

fn observed(sandbox: &v1::Sandbox) -> Observed {
    let metadata = sandbox.metadata.clone().unwrap_or_default();
    let status = sandbox.status.clone().unwrap_or_default();
    Observed {
        id: metadata.id,
        generation: status.execution.map_or(0, |execution| execution.generation),
        phase: Phase::from_proto(status.phase),
        resource_version: metadata.resource_version,
        token: sandbox.execution_token.clone(),
    }
}

/// Observations of one name, shared by every client.
#[derive(Debug, Default, Clone)]
struct Knowledge {
    current: Option<Observed>,
    past: VecDeque<Observed>,
}

impl Knowledge {
    fn learn(&mut self, observation: Option<Observed>) {
        if let Some(previous) = self.current.take()
            && observation.as_ref() != Some(&previous)
        {
            if self.past.len() == PAST_OBSERVATIONS_MAX {
                self.past.pop_front();
            }
            self.past.push_back(previous);
        }
        self.current = observation;
    }
}

/// The replicas' public endpoints.
#[derive(Clone)]
pub struct Endpoints {
    clients: Vec<(u64, PalisadeClient<Channel>)>,
}

impl Endpoints {
    /// Lazily connected clients to `uris` (node id, `http://host:port`).
    pub fn new(uris: &[(u64, String)]) -> Result<Self, tonic::transport::Error> {
        let mut clients = Vec::new();
        for (node_id, uri) in uris {
            let channel = Endpoint::from_shared(uri.clone())?
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true);
            // Over the simulated network in `--sim` (installed on this
            // thread), else TCP.
            let channel = palisade_raft::simnet::channel_lazy(channel);
            clients.push((*node_id, PalisadeClient::new(channel)));
        }
        Ok(Self { clients })
    }

    fn pick(&self, rng: &mut StdRng) -> (u64, PalisadeClient<Channel>) {
        let at = rng.random_range(0..self.clients.len());
        self.clients[at].clone()
    }
}

/// Sends `request` with retries; returns the final reply, when the final
/// answer came (`None`: unknown), and the attempts.
pub async fn execute(
    request: &Request,
    endpoints: &Endpoints,
    config: &WorkloadConfig,
    history: &History,
    rng: &mut StdRng,
) -> (Reply, Option<u64>, Vec<Attempt>) {
    let mut attempts = Vec::new();
    let mut last_error = String::from("no attempt made");
    for attempt in 0..config.attempts_max.max(1) {
        if attempt > 0 {
            let backoff = Duration::from_millis(50 * attempt as u64).min(RETRY_BACKOFF_MAX);
            tokio::time::sleep(backoff).await;
        }
        let (replica, mut client) = endpoints.pick(rng);
        let at_us = history.clock().now_us();
        let result = request.send(&mut client, config.attempt_timeout).await;
        let now = history.clock().now_us();
        match result {
            Ok(Answer::Sandbox(sandbox)) => {
                let observed = observed(&sandbox);
                attempts.push(Attempt {
                    replica,
                    at_us,
                    result: "ok".into(),
                });
                return (Reply::Sandbox(observed), Some(now), attempts);
            }
            Ok(Answer::Deleted(response)) => {
                attempts.push(Attempt {
                    replica,
                    at_us,
                    result: "ok".into(),
                });
                return (
                    Reply::Deleted {
                        id: response.id,
                        deleted: response.deleted,
                    },
                    Some(now),
                    attempts,
                );
            }
            Err(status) => {
                let reason = reason_of(&status).unwrap_or_default();
                attempts.push(Attempt {
                    replica,
                    at_us,
                    result: format!("{:?} {reason}", status.code()),
                });
                if is_definite(&status) {
                    return (
                        Reply::Rejected {
                            code: format!("{:?}", status.code()),
                            reason,
                        },
                        Some(now),
                        attempts,
                    );
                }
                last_error = format!("{:?} {reason}: {}", status.code(), status.message());
            }
        }
    }
    (Reply::Unknown { error: last_error }, None, attempts)
}

/// A finished write a client may replay.
#[derive(Debug, Clone)]
struct Replayable {
    index: usize,
    request: Request,
}

/// Reasons decided at apply (recorded in the receipt), hence replayed
/// identically.
const RECEIPTED_REASONS: &[&str] = &[
    "NAME_TAKEN",
    "SANDBOX_NOT_FOUND",
    "STALE_EXECUTION",
    "SANDBOX_IDENTITY_MISMATCH",
    "INVALID_PHASE",
];

/// Counts of what the workload did.
#[derive(Debug, Clone, Default)]
pub struct WorkloadStats {
    /// Replays sent and answered definitely.
    pub replays: usize,
}

struct Shared {
    config: WorkloadConfig,
    endpoints: Endpoints,
    history: Arc<History>,
    knowledge: Mutex<HashMap<String, Knowledge>>,
    next_operation: AtomicUsize,
    names: Vec<String>,
    replays: AtomicUsize,
    started: tokio::time::Instant,
}

impl Shared {
    fn knowledge(&self, name: &str) -> Knowledge {
        self.knowledge
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    fn learn(&self, name: &str, observation: Option<Observed>) {
        self.knowledge
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(name.to_string())
            .or_default()
            .learn(observation);
    }
}

/// Runs the workload to completion.
pub async fn run(
    config: WorkloadConfig,
    endpoints: Endpoints,
    history: Arc<History>,
    seed: u64,
) -> WorkloadStats {
    let shared = Arc::new(Shared {
        names: config.name_pool(),
        config,
        endpoints,
        history,
        knowledge: Mutex::new(HashMap::new()),
        next_operation: AtomicUsize::new(0),
        replays: AtomicUsize::new(0),
        started: tokio::time::Instant::now(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..shared.config.clients {
        let shared = shared.clone();
        let rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(client as u64));
        tasks.spawn(client_loop(shared, client, rng));
    }
    while tasks.join_next().await.is_some() {}
    WorkloadStats {
        replays: shared.replays.load(Ordering::Relaxed),
    }
}

/// The next thing a client does.
enum Plan {
    Create(String),
    Get(String),
    Stop(String, Observed),
    Start(String, Observed),
    Delete(String, Observed),
}

fn choose_plan(shared: &Shared, rng: &mut StdRng, recreate: Option<String>) -> Plan {
    if let Some(name) = recreate {
        return Plan::Create(name);
    }
    let name = shared
        .names
        .choose(rng)
        .cloned()
        .unwrap_or_else(|| "sb-0".into());
    let knowledge = shared.knowledge(&name);
    let stale = rng.random_bool(shared.config.stale_probability);
    let observation = if stale && !knowledge.past.is_empty() {
        knowledge
            .past
            .iter()
            .collect::<Vec<_>>()
            .choose(rng)
            .map(|o| (*o).clone())
    } else {
        knowledge
            .current
            .clone()
            .or_else(|| knowledge.past.back().cloned())
    };
    let roll = rng.random_range(0..100u32);
    // A token-bound call needs a token (none is minted before the cluster
    // identity exists); without one the call would carry no precondition.
    let tokened = observation
        .as_ref()
        .is_some_and(|observed| !observed.token.is_empty());
    match (roll, observation) {
        (0..=21, _) => Plan::Create(name),
        (22..=39, _) => Plan::Get(name),
        (40..=56, Some(observed)) if tokened => Plan::Stop(name, observed),
        (57..=73, Some(observed)) if tokened => Plan::Start(name, observed),
        (74..=99, Some(observed)) => Plan::Delete(name, observed),
        (_, _) => Plan::Get(name),
    }
}

async fn client_loop(shared: Arc<Shared>, client: ClientId, mut rng: StdRng) {
    let workspace = palisade_lifecycle::DEFAULT_WORKSPACE.to_string();
    let mut replayable: VecDeque<Replayable> = VecDeque::new();
    let mut recreate: Option<String> = None;
    let mut sequence = 0usize;
    loop {
        let claimed = shared.next_operation.fetch_add(1, Ordering::Relaxed);
        if claimed >= shared.config.operations {
            let waiting_for_the_nemesis = shared
                .config
                .keep_going_until
                .as_ref()
                .is_some_and(|done| !done.load(Ordering::SeqCst));
            // Paced: the extra operations' due times end KEEP_GOING_MAX
            // after the planned end.
            let cap = shared.config.operations
                + (KEEP_GOING_MAX.as_secs_f64() * shared.config.rate.max(0.0)) as usize;
            if !waiting_for_the_nemesis || shared.config.rate <= 0.0 || claimed >= cap {
                return;
            }
            if claimed == shared.config.operations {
                shared.history.fault(
                    "workload-goes-on",
                    format!(
                        "{claimed} operations issued; going on (at most {cap}) until every kind of fault had its turn"
                    ),
                );
            }
        }
        if shared.config.rate > 0.0 {
            let due = Duration::from_secs_f64(claimed as f64 / shared.config.rate);
            tokio::time::sleep_until(shared.started + due).await;
        }
        if !replayable.is_empty() && rng.random_bool(shared.config.replay_probability) {
            let at = rng.random_range(0..replayable.len());
            let original = replayable[at].clone();
            replay(&shared, &original, &mut rng).await;
        }
        sequence += 1;
        let request_id = format!("{}-c{client}-{sequence}", shared.config.request_prefix);
        let plan = choose_plan(&shared, &mut rng, recreate.take());
        let (call, request) = match plan {
            Plan::Create(name) => (
                Call::Create { name: name.clone() },
                Request::Create(v1::CreateSandboxRequest {
                    workspace: workspace.clone(),
                    name,
                    spec: Some(v1::SandboxSpec::default()),
                    request_id: request_id.clone(),
                    ..Default::default()
                }),
            ),
            Plan::Get(name) => (
                Call::Get { name: name.clone() },
                Request::Get(v1::GetSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        workspace: workspace.clone(),
                        name,
                        id: String::new(),
                    }),
                    consistency: v1::Consistency::Linearizable as i32,
                }),
            ),
            Plan::Stop(name, observed) => (
                Call::Stop {
                    name,
                    id: observed.id.clone(),
                    generation: observed.generation,
                },
                Request::Stop(v1::StopSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        id: observed.id.clone(),
                        ..Default::default()
                    }),
                    request_id: request_id.clone(),
                    expected_execution: observed.token.clone(),
                    ..Default::default()
                }),
            ),
            Plan::Start(name, observed) => (
                Call::Start {
                    name,
                    id: observed.id.clone(),
                    generation: observed.generation,
                },
                Request::Start(v1::StartSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        id: observed.id.clone(),
                        ..Default::default()
                    }),
                    request_id: request_id.clone(),
                    expected_execution: observed.token.clone(),
                    ..Default::default()
                }),
            ),
            Plan::Delete(name, observed) => (
                Call::Delete {
                    name: name.clone(),
                    expected_id: observed.id.clone(),
                },
                Request::Delete(v1::DeleteSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        workspace: workspace.clone(),
                        name,
                        id: String::new(),
                    }),
                    request_id: request_id.clone(),
                    expected_sandbox_id: observed.id.clone(),
                    ..Default::default()
                }),
            ),
        };
        let invoked_us = shared.history.clock().now_us();
        let (reply, returned_us, attempts) = execute(
            &request,
            &shared.endpoints,
            &shared.config,
            &shared.history,
            &mut rng,
        )
        .await;
        let name = call.name().to_string();
        match &reply {
            Reply::Sandbox(observed) => shared.learn(&name, Some(observed.clone())),
            Reply::Deleted { .. } => {
                shared.learn(&name, None);
                if rng.random_bool(0.5) {
                    recreate = Some(name.clone());
                }
            }
            Reply::Rejected { reason, .. }
                if reason == "SANDBOX_NOT_FOUND" && matches!(call, Call::Get { .. }) =>
            {
                shared.learn(&name, None);
            }
            _ => {}
        }
        let replay_worthy = call.is_write()
            && match &reply {
                Reply::Sandbox(_) | Reply::Deleted { .. } => true,
                Reply::Rejected { reason, .. } => RECEIPTED_REASONS.contains(&reason.as_str()),
                Reply::Unknown { .. } => false,
            };
        let recorded = shared.history.record(Operation {
            index: 0,
            client,
            request_id: if call.is_write() {
                request_id
            } else {
                String::new()
            },
            call,
            invoked_us,
            returned_us,
            reply,
            attempts,
        });
        if let (true, Some(index)) = (replay_worthy, recorded) {
            if replayable.len() == REPLAYABLE_REQUESTS_MAX {
                replayable.pop_front();
            }
            replayable.push_back(Replayable { index, request });
        }
    }
}

async fn replay(shared: &Shared, original: &Replayable, rng: &mut StdRng) {
    let at_us = shared.history.clock().now_us();
    let (reply, _, _) = execute(
        &original.request,
        &shared.endpoints,
        &shared.config,
        &shared.history,
        rng,
    )
    .await;
    if matches!(reply, Reply::Unknown { .. }) {
        return;
    }
    shared.replays.fetch_add(1, Ordering::Relaxed);
    shared.history.record_replay(Replay {
        original: original.index,
        at_us,
        reply,
    });
}

/// Reads every name once, linearizably, after the faults healed; recorded
/// as operations of [`crate::history::FINAL_READER`].
pub async fn final_reads(
    config: &WorkloadConfig,
    endpoints: &Endpoints,
    history: &History,
    seed: u64,
) -> BTreeMap<String, Reply> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x66_696e_616c);
    let mut replies = BTreeMap::new();
    for name in config.name_pool() {
        let request = Request::Get(v1::GetSandboxRequest {
            sandbox: Some(v1::SandboxRef {
                workspace: palisade_lifecycle::DEFAULT_WORKSPACE.to_string(),
                name: name.clone(),
                id: String::new(),
            }),
            consistency: v1::Consistency::Linearizable as i32,
        });
        let invoked_us = history.clock().now_us();
        let (reply, returned_us, attempts) =
            execute(&request, endpoints, config, history, &mut rng).await;
        replies.insert(name.clone(), reply.clone());
        history.record(Operation {
            index: 0,
            client: crate::history::FINAL_READER,
            request_id: String::new(),
            call: Call::Get { name },
            invoked_us,
            returned_us,
            reply,
            attempts,
        });
    }
    replies
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_proto::ERROR_DOMAIN;
    use tonic::Code;
    use tonic_types::ErrorDetails;

    fn with_reason(code: Code, reason: &str) -> tonic::Status {
        tonic::Status::with_error_details(
            code,
            "message",
            ErrorDetails::with_error_info(reason, ERROR_DOMAIN, std::collections::HashMap::new()),
        )
    }

    #[test]
    fn only_decided_answers_are_definite() {
        assert!(!is_definite(&with_reason(
            Code::Unavailable,
            "OUTCOME_PENDING"
        )));
        assert!(!is_definite(&tonic::Status::deadline_exceeded("late")));
        assert!(!is_definite(&tonic::Status::unknown("transport error")));
        assert!(!is_definite(&tonic::Status::cancelled("connection reset")));
        assert!(is_definite(&with_reason(Code::Aborted, "STALE_EXECUTION")));
        assert!(is_definite(&with_reason(
            Code::NotFound,
            "SANDBOX_NOT_FOUND"
        )));
        assert_eq!(
            reason_of(&with_reason(Code::AlreadyExists, "NAME_TAKEN")).as_deref(),
            Some("NAME_TAKEN")
        );
    }
}
