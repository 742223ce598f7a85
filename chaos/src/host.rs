//! [`SharedHost`]: an in-memory compute driver that models one host shared
//! by every replica (as the process driver's shared directory is), and
//! records every *real* effect, so checkers can count them.
//!
//! It keeps the executions of each (sandbox id, generation) and behaves as
//! the [`ComputeDriver`] contract says a real driver does:
//!
//! - `launch` of an execution it does not have starts it (an effect); of
//!   one it has (running or ended) returns it unchanged (no effect);
//! - `stop` of a running execution stops it (an effect); of anything else
//!   succeeds without effect;
//! - `remove` forgets every execution of the sandbox (an effect when there
//!   was one). Like the process driver, which deletes the execution
//!   directories, it keeps no tombstone: a late `launch` from a deposed
//!   leader *would* start the execution again. That is exactly what the
//!   term fence must prevent, and what the effect checks would catch.
//!
//! Executions never end on their own, so the executor never observes an
//! exit the workload did not cause.
//!
//! # Faults
//!
//! The host injects driver faults itself, by a
//! [`FaultPlan`] (the gateway's fault-driver plan: latency, refusals,
//! uncertain outcomes before or after the effect, hangs, seeded rates),
//! rather than under the gateway's
//! [`FaultDriver`](palisade_driver::fault::FaultDriver), for one
//! reason: the driver contract says a repeated `launch` returns the
//! execution the first one started, and a wrapper that knows nothing of
//! the host would *refuse* a repeated launch whose first attempt had
//! started the execution (its answer lost) — a driver bug, which the
//! checkers would then rightly report as an orphan execution. Here a
//! launch is refused only when nothing runs yet.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use palisade_driver::fault::{FaultPlan, FaultRule};
use palisade_driver::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    LaunchSpec,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::clock::Clock;

/// Most effects recorded; a campaign makes far fewer.
pub const EFFECTS_RECORDED_MAX: usize = 1_000_000;

/// The exit code a stopped execution reports (128 + SIGTERM).
pub const STOPPED_EXIT_CODE: i32 = 143;

/// What an effect did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum EffectKind {
    /// Started an execution.
    Launch,
    /// Stopped a running execution.
    Stop,
    /// Removed a sandbox's executions.
    Remove,
}

/// One real effect on the host.
#[derive(Debug, Clone, Serialize)]
pub struct Effect {
    /// When (campaign clock).
    pub at_us: u64,
    /// What.
    pub kind: EffectKind,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Generation launched or stopped; for a removal, the highest removed.
    pub generation: u64,
}

/// An execution the host keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HostExecution {
    /// It runs.
    Running,
    /// It was stopped.
    Stopped,
}

/// A fault injected into one driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Reject,
    UncertainBefore,
    UncertainAfter,
    Hang,
}

#[derive(Debug)]
struct HostState {
    executions: BTreeMap<(String, u64), HostExecution>,
    effects: Vec<Effect>,
    effects_dropped: usize,
    plan: FaultPlan,
    rng: StdRng,
    faults: BTreeMap<String, u64>,
}

/// The shared in-memory host. See the module docs.
#[derive(Debug)]
pub struct SharedHost {
    clock: Clock,
    /// `std` mutex: held only to read or change the map, never across an
    /// await.
    state: Mutex<HostState>,
}

impl SharedHost {
    /// An empty host on the campaign's clock.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            state: Mutex::new(HostState {
                executions: BTreeMap::new(),
                effects: Vec::new(),
                effects_dropped: 0,
                plan: FaultPlan::default(),
                rng: StdRng::seed_from_u64(0),
                faults: BTreeMap::new(),
            }),
        }
    }

    /// Replaces the fault plan (its `seed` reseeds the fault RNG).
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut state = self.lock();
        state.rng = StdRng::seed_from_u64(plan.seed);
        state.plan = plan;
    }

    /// Faults injected so far, by call and fault (`launch:reject`, ...).
    pub fn faults(&self) -> BTreeMap<String, u64> {
        self.lock().faults.clone()
    }

    /// Draws the fault of one call (the `*_first` counters of the plan
    /// are not used by the chaos harness; rates only).
    fn pick(&self, call: &'static str) -> (Duration, Fault) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let rule: FaultRule = match call {
            "launch" => state.plan.launch.clone(),
            "inspect" => state.plan.inspect.clone(),
            "stop" => state.plan.stop.clone(),
            _ => state.plan.remove.clone(),
        };
        let roll: f64 = state.rng.random();
        let mut edge = 0.0;
        let mut fault = Fault::None;
        for (rate, candidate) in [
            (rule.reject_rate, Fault::Reject),
            (rule.uncertain_before_rate, Fault::UncertainBefore),
            (rule.uncertain_after_rate, Fault::UncertainAfter),
            (rule.hang_rate, Fault::Hang),
        ] {
            edge += rate;
            if roll < edge {
                fault = candidate;
                break;
            }
        }
        if fault != Fault::None {
            *state
                .faults
                .entry(format!("{call}:{fault:?}").to_lowercase())
                .or_default() += 1;
        }
        (Duration::from_millis(rule.latency_ms), fault)
    }

    /// Runs `effect` under the fault drawn for `call`. `refusable` says
    /// whether a refusal is allowed now (a launch of an execution that
    /// already exists must return it, not be refused).
    async fn faulty<T>(
        &self,
        call: &'static str,
        refusable: impl FnOnce(&Self) -> bool,
        effect: impl FnOnce(&Self) -> T,
    ) -> Result<T, DriverError> {
        let (latency, fault) = self.pick(call);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let lost = |when: &str| DriverError::Uncertain {
            message: format!("injected fault: {call} {when}"),
        };
        match fault {
            Fault::None => Ok(effect(self)),
            Fault::Reject if refusable(self) => Err(DriverError::Rejected {
                message: format!("injected fault: {call} refused"),
            }),
            Fault::Reject => Ok(effect(self)),
            Fault::UncertainBefore => Err(lost("lost before taking effect")),
            Fault::UncertainAfter => {
                effect(self);
                Err(lost("took effect, answer lost"))
            }
            Fault::Hang => std::future::pending().await,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HostState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(&self, state: &mut HostState, kind: EffectKind, sandbox_id: &str, generation: u64) {
        if state.effects.len() >= EFFECTS_RECORDED_MAX {
            state.effects_dropped += 1;
            return;
        }
        state.effects.push(Effect {
            at_us: self.clock.now_us(),
            kind,
            sandbox_id: sandbox_id.to_string(),
            generation,
        });
    }

    /// Every effect so far, in order, and how many were not recorded.
    pub fn effects(&self) -> (Vec<Effect>, usize) {
        let state = self.lock();
        (state.effects.clone(), state.effects_dropped)
    }

    /// Every execution the host keeps now.
    pub fn executions(&self) -> BTreeMap<(String, u64), HostExecution> {
        self.lock().executions.clone()
    }

    fn handle(sandbox_id: &str, generation: u64) -> ExecutionHandle {
        ExecutionHandle {
            generation,
            identity: ExecutionIdentity::Opaque {
                id: format!("host-{sandbox_id}-{generation}"),
            },
        }
    }
}

impl SharedHost {
    fn do_launch(&self, spec: &LaunchSpec) -> ExecutionHandle {
        let mut state = self.lock();
        let key = (spec.sandbox_id.clone(), spec.generation);
        if let std::collections::btree_map::Entry::Vacant(vacant) = state.executions.entry(key) {
            vacant.insert(HostExecution::Running);
            self.record(
                &mut state,
                EffectKind::Launch,
                &spec.sandbox_id,
                spec.generation,
            );
        }
        Self::handle(&spec.sandbox_id, spec.generation)
    }

    fn do_inspect(&self, sandbox_id: &str, generation: u64) -> ExecutionStatus {
        match self
            .lock()
            .executions
            .get(&(sandbox_id.to_string(), generation))
        {
            Some(HostExecution::Running) => ExecutionStatus::Running {
                handle: Self::handle(sandbox_id, generation),
            },
            Some(HostExecution::Stopped) => ExecutionStatus::Exited {
                code: STOPPED_EXIT_CODE,
            },
            None => ExecutionStatus::Absent,
        }
    }

    fn do_stop(&self, sandbox_id: &str, generation: u64) {
        let mut state = self.lock();
        if let Some(execution) = state
            .executions
            .get_mut(&(sandbox_id.to_string(), generation))
            && *execution == HostExecution::Running
        {
            *execution = HostExecution::Stopped;
            self.record(&mut state, EffectKind::Stop, sandbox_id, generation);
        }
    }

    fn do_remove(&self, sandbox_id: &str) {
        let mut state = self.lock();
        let keys: Vec<(String, u64)> = state
            .executions
            .range((sandbox_id.to_string(), 0)..=(sandbox_id.to_string(), u64::MAX))
            .map(|(key, _)| key.clone())
            .collect();
        if let Some(highest) = keys.iter().map(|(_, generation)| *generation).max() {
            for key in &keys {
                state.executions.remove(key);
            }
            self.record(&mut state, EffectKind::Remove, sandbox_id, highest);
        }
    }
}

/// Every call does its work when its future runs (after its injected
/// latency), never when the future is created.
impl ComputeDriver for SharedHost {
    fn name(&self) -> &'static str {
        "chaos-host"
    }

    fn launch<'a>(&'a self, spec: &'a LaunchSpec) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.faulty(
            "launch",
            |host| {
                !host
                    .lock()
                    .executions
                    .contains_key(&(spec.sandbox_id.clone(), spec.generation))
            },
            |host| host.do_launch(spec),
        ))
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        Box::pin(self.faulty(
            "inspect",
            |_| true,
            move |host| host.do_inspect(sandbox_id, generation),
        ))
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        _grace: Duration,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty(
            "stop",
            |_| true,
            move |host| host.do_stop(sandbox_id, generation),
        ))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty("remove", |_| true, move |host| host.do_remove(sandbox_id)))
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(async move {
            let listed = self
                .lock()
                .executions
                .iter()
                .map(|((sandbox_id, generation), execution)| {
                    let status = match execution {
                        HostExecution::Running => ExecutionStatus::Running {
                            handle: Self::handle(sandbox_id, *generation),
                        },
                        HostExecution::Stopped => ExecutionStatus::Exited {
                            code: STOPPED_EXIT_CODE,
                        },
                    };
                    (sandbox_id.clone(), *generation, status)
                })
                .collect();
            Ok(listed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(generation: u64) -> LaunchSpec {
        LaunchSpec {
            sandbox_id: "s".into(),
            generation,
            command: Vec::new(),
            env: Default::default(),
        }
    }

    #[tokio::test]
    async fn repeated_calls_are_one_effect_and_a_late_launch_after_remove_is_another() {
        let host = SharedHost::new(Clock::new());
        host.launch(&spec(1)).await.unwrap();
        host.launch(&spec(1)).await.unwrap();
        host.stop("s", 1, Duration::ZERO).await.unwrap();
        host.stop("s", 1, Duration::ZERO).await.unwrap();
        assert_eq!(
            host.inspect("s", 1).await.unwrap(),
            ExecutionStatus::Exited {
                code: STOPPED_EXIT_CODE
            }
        );
        host.remove("s").await.unwrap();
        host.remove("s").await.unwrap();
        host.launch(&spec(1)).await.unwrap();
        let kinds: Vec<EffectKind> = host.effects().0.iter().map(|effect| effect.kind).collect();
        assert_eq!(
            kinds,
            [
                EffectKind::Launch,
                EffectKind::Stop,
                EffectKind::Remove,
                EffectKind::Launch
            ]
        );
    }
}
