//! The effect executor: runs on the leader only, turns committed lifecycle
//! operations into driver calls, and proposes their completion.
//!
//! # Fencing
//!
//! - It is started and stopped by openraft's leader-change callbacks, and a
//!   new leader resumes every operation it finds pending in the state it
//!   inherited (the state, not memory, is the to-do list).
//! - Before each driver call, and before proposing each completion, it
//!   confirms that this node still leads in the term it started in — not
//!   only from its own metrics, which a paused or partitioned leader keeps
//!   believing, but with a quorum: a leader lease still valid (no network
//!   round trip), else a heartbeat round that a quorum acknowledges. A
//!   leader resumed after a pause (SIGSTOP, a long GC or VM stall) finds its
//!   lease expired, asks, learns of the newer term and steps down, so it
//!   starts no effect it had not started and proposes no completion. Every
//!   completion is also proposed with `write(..).with_leader(term)`, and
//!   openraft refuses proposals from a leader whose lease expired, so a
//!   completion from an old term is rejected before it is appended.
//! - Driver calls are idempotent and keyed by (sandbox id, generation), so a
//!   repeated or late call cannot touch another execution.
//! - At most one effect runs per sandbox at a time: a delete that supersedes
//!   a launch waits for the launch to finish before removing executions.
//! - A driver error that may have had an effect leaves the operation
//!   pending; it is retried (idempotently) after a backoff, never recorded
//!   as a failure.

use openraft::async_runtime::WatchReceiver as _;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openraft::LinearizerOption;
use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use palisade_lifecycle::{Command, LaunchResult, OperationKind, SandboxPhase};
use palisade_raft::hooks::{FaultPoint, FaultPoints};
use palisade_raft::{NodeId, Raft, StateHandle};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span, warn};

use palisade_driver::{ComputeDriver, DriverError, ExecutionStatus, LaunchSpec};

/// How long a new leader's executor waits for openraft's metrics to show
/// its leadership (they are published just after the leader-change
/// callback runs).
const METRICS_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// Tuning of the executor.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Grace period between SIGTERM and SIGKILL when stopping.
    pub stop_grace: Duration,
    /// How often running executions are inspected for exits.
    pub observe_interval: Duration,
    /// Pause before retrying an effect whose outcome was uncertain.
    pub retry_backoff: Duration,
    /// Most driver calls in flight at once.
    pub effects_in_flight_max: usize,
    /// How often the leader brings its clock into the state (expiring
    /// receipts and SSH sessions).
    pub tick_interval: Duration,
    /// How long settled request receipts are kept (at least 24 h promised).
    pub receipt_retention: Duration,
    /// A driver call that has not answered by then counts as uncertain.
    pub driver_call_timeout: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            stop_grace: Duration::from_secs(10),
            observe_interval: Duration::from_millis(500),
            retry_backoff: Duration::from_millis(500),
            effects_in_flight_max: 64,
            tick_interval: Duration::from_secs(10),
            receipt_retention: Duration::from_secs(24 * 3600),
            driver_call_timeout: Duration::from_secs(60),
        }
    }
}

/// Starts and stops the leader-only executor task.
pub struct Executor {
    node_id: NodeId,
    raft: Raft,
    state: StateHandle,
    driver: Arc<dyn ComputeDriver>,
    config: ExecutorConfig,
    /// The running executor's stop signal; `Mutex` because the leader-change
    /// callbacks are plain `Fn` closures.
    running: Mutex<Option<watch::Sender<bool>>>,
    /// Test and chaos hook ([`palisade_raft::hooks`]), awaited after a
    /// `Begin*` entry committed (before the effect) and after the effect
    /// (before `Complete*` is proposed). Unset in production.
    fault_points: OnceLock<Arc<dyn FaultPoints>>,
}

impl Executor {
    /// An executor for this replica; call [`Executor::lead`] when it becomes
    /// leader and [`Executor::step_down`] when it stops.
    pub fn new(
        node_id: NodeId,
        raft: Raft,
        state: StateHandle,
        driver: Arc<dyn ComputeDriver>,
        config: ExecutorConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            raft,
            state,
            driver,
            config,
            running: Mutex::new(None),
            fault_points: OnceLock::new(),
        })
    }

    /// Installs the fault points (tests and the chaos harness); call before
    /// [`Executor::lead`]. A second call is ignored.
    pub fn set_fault_points(&self, fault_points: Arc<dyn FaultPoints>) {
        let _ = self.fault_points.set(fault_points);
    }

    async fn fault_point(&self, point: FaultPoint) {
        if let Some(fault_points) = self.fault_points.get() {
            fault_points.at(self.node_id, point).await;
        }
    }

    /// Starts executing for leadership in `term`.
    pub fn lead(self: &Arc<Self>, term: u64) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let previous = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replace(stop_tx);
        if let Some(previous) = previous {
            previous.send_replace(true);
        }
        info!(node = self.node_id, term, "leading: effect executor starts");
        let this = self.clone();
        tokio::spawn(
            async move { this.run(term, stop_rx).await }.instrument(info_span!(
                "executor",
                node = self.node_id,
                term
            )),
        );
    }

    /// Stops executing (leadership lost or shutting down).
    pub fn step_down(&self) {
        if let Some(stop) = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            info!(
                node = self.node_id,
                "no longer leading: effect executor stops"
            );
            stop.send_replace(true);
        }
    }

    fn still_leads(&self, term: u64) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics.current_leader == Some(self.node_id) && metrics.current_term == term
    }

    /// Confirms with a quorum that this node still leads in `term`: a
    /// leader lease that is still valid answers at once; an expired one
    /// (after a pause, a partition) makes openraft send a heartbeat round
    /// and wait (at most one lease) for a quorum to acknowledge it. A newer
    /// term seen meanwhile makes this node step down and this return false.
    async fn confirm_leadership(&self, term: u64) -> bool {
        // Planted bug (b), test-only: leadership is confirmed, but not that
        // it is still the term the work began in (see `crate::planted`).
        let fenced = !crate::planted::skip_term_fence();
        if fenced && !self.still_leads(term) {
            return false;
        }
        let use_lease_else_ask_quorum = LinearizerOption::new(None, true);
        match self
            .raft
            .get_read_linearizer(use_lease_else_ask_quorum)
            .await
        {
            Ok(linearizer) => {
                !fenced || linearizer.read_log_id().committed_leader_id().term == term
            }
            Err(_) => false,
        }
    }

    async fn run(self: Arc<Self>, term: u64, mut stop: watch::Receiver<bool>) {
        // openraft calls the leader-change callback before it publishes the
        // metrics that show the new term; until they do, `still_leads`
        // would say no and the loop below would end at once, leaving every
        // pending operation of this term undone. Wait for them (bounded).
        let node_id = self.node_id;
        let _ = self
            .raft
            .wait(Some(METRICS_CATCH_UP_TIMEOUT))
            .metrics(
                |metrics| {
                    metrics.current_term > term
                        || (metrics.current_term == term && metrics.current_leader == Some(node_id))
                },
                "metrics show this node's leadership",
            )
            .await;
        // Sandboxes with an effect running; one effect per sandbox at a time.
        let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
        let permits = Arc::new(Semaphore::new(self.config.effects_in_flight_max));
        let mut applied = self.state.subscribe();
        let mut tasks = JoinSet::new();
        // After an uncertain driver error, not again before this instant.
        let mut backoff_until: HashMap<String, tokio::time::Instant> = HashMap::new();
        let mut observe = tokio::time::interval(self.config.observe_interval);
        observe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut observe_due = false;
        let mut tick = tokio::time::interval(self.config.tick_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.ensure_cluster_identity(term).await;
        loop {
            if *stop.borrow() || !self.still_leads(term) {
                break;
            }
            let now = tokio::time::Instant::now();
            backoff_until.retain(|_, until| *until > now);
            let work: Vec<Work> = self.state.read(|applied| {
                applied
                    .state
                    .sandboxes
                    .values()
                    .filter_map(|sandbox| Work::for_sandbox(sandbox, observe_due))
                    .collect()
            });
            observe_due = false;
            for work in work {
                if backoff_until.contains_key(&work.sandbox_id) {
                    continue;
                }
                if !in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(work.sandbox_id.clone())
                {
                    continue;
                }
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let this = self.clone();
                let in_flight = in_flight.clone();
                let span = info_span!("effect", sandbox_id = %work.sandbox_id, generation = work.generation, kind = ?work.kind);
                tasks.spawn(
                    async move {
                        let sandbox_id = work.sandbox_id.clone();
                        let retry = this.perform(term, work).await;
                        in_flight
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&sandbox_id);
                        drop(permit);
                        (sandbox_id, retry)
                    }
                    .instrument(span),
                );
            }
            tokio::select! {
                _ = stop.changed() => {}
                changed = applied.changed() => { if changed.is_err() { break; } }
                _ = observe.tick() => observe_due = true,
                _ = tick.tick() => self.propose_tick(term).await,
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok((sandbox_id, Retry::After)) = joined {
                        backoff_until.insert(sandbox_id, tokio::time::Instant::now() + self.config.retry_backoff);
                    }
                }
            }
        }
        // Effects already running finish on their own; their completions are
        // fenced by the term, so a late one is never appended.
        tasks.detach_all();
        debug!("executor loop ended");
    }

    /// The first leader chooses the cluster's identity (the execution-token
    /// secret) and writes it into the state; later leaders find it there.
    async fn ensure_cluster_identity(&self, term: u64) {
        if self.state.read(|applied| applied.state.cluster.is_some()) {
            return;
        }
        let secret: [u8; 32] = rand::random();
        let command = Command::InitializeCluster {
            cluster_id: uuid::Uuid::new_v4().to_string(),
            token_secret_hex: hex::encode(secret),
        };
        // Apply keeps the first identity only, so a duplicate is harmless.
        let _ = self.complete(term, command).await;
    }

    /// Brings this leader's clock into the state.
    async fn propose_tick(&self, term: u64) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        let command = Command::Tick {
            now_ms,
            receipt_retention_ms: self.config.receipt_retention.as_millis() as i64,
        };
        let _ = self.complete(term, command).await;
    }

    /// Bounds a driver call: no answer in time is an uncertain outcome.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        let timeout = self.config.driver_call_timeout;
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(DriverError::Uncertain {
                    message: format!("no answer within {timeout:?}"),
                })
            })
    }

    /// Performs one effect and proposes its completion.
    async fn perform(&self, term: u64, work: Work) -> Retry {
        if let Some(kind) = work.kind {
            self.fault_point(FaultPoint::BeginCommitted {
                sandbox_id: work.sandbox_id.clone(),
                operation: format!("{kind:?}"),
                generation: work.generation,
                term,
            })
            .await;
        }
        if work.kind.is_none() {
            // An inspection changes nothing; its completion is fenced.
            if !self.still_leads(term) {
                return Retry::No;
            }
        } else if !self.confirm_leadership(term).await {
            info!(
                term,
                "leadership in this term not confirmed by a quorum: effect not performed"
            );
            return Retry::No;
        } else {
            debug!(term, "performing effect");
        }
        let driver = &self.driver;
        let (sandbox_id, generation) = (work.sandbox_id.clone(), work.generation);
        match work.kind {
            Some(OperationKind::Create | OperationKind::Start) => {
                let spec = LaunchSpec {
                    sandbox_id: sandbox_id.clone(),
                    generation,
                    command: work.command,
                    env: work.env,
                };
                let result = match self.bounded(driver.launch(&spec)).await {
                    Ok(handle) => LaunchResult::Running {
                        handle: handle.to_string(),
                        driver: driver.name().to_string(),
                    },
                    Err(error) if error.is_definite_no_effect() => LaunchResult::Failed {
                        message: error.to_string(),
                    },
                    Err(error) => {
                        warn!(%error, "launch outcome uncertain; will retry");
                        return Retry::After;
                    }
                };
                self.complete(
                    term,
                    Command::CompleteLaunch {
                        sandbox_id,
                        generation,
                        result,
                    },
                )
                .await
            }
            Some(OperationKind::Stop) => {
                let stopped = self
                    .bounded(driver.stop(&sandbox_id, generation, self.config.stop_grace))
                    .await;
                let observed = self.bounded(driver.inspect(&sandbox_id, generation)).await;
                // A confirmed stop is final (the driver returns only once the
                // execution is gone). An unconfirmed one (its answer may have
                // been lost) is resolved by observing the driver: only an
                // execution seen gone is recorded as stopped, never assumed.
                let exit_code = match (stopped, observed) {
                    (_, Ok(ExecutionStatus::Exited { code })) => Some(code),
                    (Ok(()), _) | (Err(_), Ok(ExecutionStatus::Absent)) => None,
                    (Err(error), _) => {
                        warn!(%error, "stop not confirmed and the execution not seen gone; will observe again");
                        return Retry::After;
                    }
                };
                self.complete(
                    term,
                    Command::CompleteStop {
                        sandbox_id,
                        generation,
                        exit_code,
                    },
                )
                .await
            }
            Some(OperationKind::Delete) => {
                if let Err(error) = self.bounded(driver.remove(&sandbox_id)).await {
                    warn!(%error, "removal not confirmed; will retry");
                    return Retry::After;
                }
                self.complete(term, Command::CompleteDelete { sandbox_id })
                    .await
            }
            None => match self.bounded(driver.inspect(&sandbox_id, generation)).await {
                Ok(ExecutionStatus::Exited { code }) => {
                    self.complete(
                        term,
                        Command::ObserveExit {
                            sandbox_id,
                            generation,
                            exit_code: code,
                        },
                    )
                    .await
                }
                Ok(ExecutionStatus::Running { .. }) => Retry::No,
                Ok(ExecutionStatus::Absent) => {
                    warn!("a READY execution is gone without an exit status: recording it as lost");
                    self.complete(
                        term,
                        Command::ObserveLost {
                            sandbox_id,
                            generation,
                        },
                    )
                    .await
                }
                Err(error) => {
                    warn!(%error, "inspection failed");
                    Retry::After
                }
            },
        }
    }

    /// Proposes a completion, fenced by `term`.
    async fn complete(&self, term: u64, command: Command) -> Retry {
        let name = command.name();
        let effect_done = match &command {
            Command::CompleteLaunch {
                sandbox_id,
                generation,
                ..
            }
            | Command::CompleteStop {
                sandbox_id,
                generation,
                ..
            } => Some((sandbox_id.clone(), *generation)),
            Command::CompleteDelete { sandbox_id } => Some((sandbox_id.clone(), 0)),
            _ => None,
        };
        if let Some((sandbox_id, generation)) = effect_done {
            self.fault_point(FaultPoint::EffectDone {
                sandbox_id,
                operation: name.to_string(),
                generation,
                term,
            })
            .await;
        }
        if !self.confirm_leadership(term).await {
            info!(
                term,
                command = name,
                "leadership in this term not confirmed by a quorum: completion not proposed"
            );
            return Retry::No;
        }
        debug!(term, command = name, "proposing completion");
        let (responder, response) = ProgressResponder::complete_only();
        let write = self.raft.write(command);
        // Planted bug (b), test-only: no term fence (see `crate::planted`).
        let write = if crate::planted::skip_term_fence() {
            write
        } else {
            write.with_leader(term)
        };
        if let Err(fatal) = write.responder(responder).await {
            warn!(%fatal, "raft stopped; completion not proposed");
            return Retry::No;
        }
        match response.await {
            Ok(Ok(_)) => {
                debug!(command = name, "completion applied");
                Retry::No
            }
            // Leadership moved before append: the next leader redoes the effect
            // (idempotently) and proposes the completion in its own term.
            Ok(Err(ClientWriteError::ForwardToLeader(_))) => Retry::No,
            Ok(Err(error)) => {
                warn!(%error, command = name, "completion outcome unknown; will retry");
                Retry::After
            }
            Err(_) => Retry::After,
        }
    }
}

/// Whether an effect must be tried again later.
enum Retry {
    /// Done, or no longer ours to do.
    No,
    /// Outcome uncertain: try again after the backoff.
    After,
}

/// One unit of work for one sandbox: its pending operation, or (with
/// `kind == None`) an inspection of its running execution.
struct Work {
    sandbox_id: String,
    generation: u64,
    kind: Option<OperationKind>,
    command: Vec<String>,
    env: std::collections::BTreeMap<String, String>,
}

impl Work {
    fn for_sandbox(sandbox: &palisade_lifecycle::Sandbox, observe_due: bool) -> Option<Work> {
        let kind = match &sandbox.operation {
            Some(op) => Some(op.kind),
            None if observe_due && sandbox.phase == SandboxPhase::Ready => None,
            None => return None,
        };
        Some(Work {
            sandbox_id: sandbox.id.clone(),
            generation: sandbox.execution.generation,
            kind,
            command: sandbox.spec.command.clone(),
            env: sandbox.spec.env.clone(),
        })
    }
}
