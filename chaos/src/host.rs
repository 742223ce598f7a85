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
//! - `remove` writes the sandbox's tombstone, then forgets every execution of
//!   the sandbox (an effect when there was one).
//!
//! # Fences and tombstones
//!
//! Like the process driver (the crate docs of `palisade_driver`, "Fencing
//! reaches the effect"), the host keeps per sandbox the highest [`Fence`]
//! admitted and refuses a lower one, or one of another cluster, with
//! [`DriverError::Fenced`] and no effect; it keeps the tombstone of every
//! removed sandbox and refuses every later `launch` of it. A fence must name
//! the call's sandbox (and, for `launch` and `stop`, its generation), or the
//! call is `Rejected`. The check, the record and the effect happen under one
//! mutex, so they are atomic, as the contract asks. Tombstones are never
//! collected here (a campaign is far shorter than any retention).
//!
//! Every [`Effect`] records the fence it was performed under, and every
//! refused call is kept as a [`Refusal`], so a checker can verify that no
//! effect was performed under a fence lower than one the host had already
//! seen, and that nothing was launched after its sandbox's removal.
//!
//! TEST-ONLY planted bug: with the cargo feature `planted-bugs`,
//! [`DRIVER_FENCE_OFF`] makes the host skip its fence and tombstone checks
//! (it still records fences), so tests can show the checkers catch a driver
//! that acts on a deposed leader's call.
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
#[cfg(feature = "planted-bugs")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use palisade_driver::fault::{FaultPlan, FaultRule};
use palisade_driver::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    Fence, LaunchSpec,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::clock::Clock;

/// Most effects recorded; a campaign makes far fewer.
pub const EFFECTS_RECORDED_MAX: usize = 1_000_000;
/// Most refused calls recorded; a campaign makes far fewer.
pub const REFUSALS_RECORDED_MAX: usize = 1_000_000;

/// The identity of the chaos host (one host, shared by every replica).
pub const HOST_IDENTITY: &str = "chaos-host";

/// TEST-ONLY planted bug: when set, the host skips its fence and tombstone
/// checks, acting on every call whatever its fence, like a driver that does
/// not check the fence at the effect. Compiled in only with the cargo
/// feature `planted-bugs`; off until a test turns it on.
#[cfg(feature = "planted-bugs")]
pub static DRIVER_FENCE_OFF: AtomicBool = AtomicBool::new(false);

/// True when the planted "driver fence check disabled" bug is on. Always
/// false without the feature.
#[inline]
pub fn driver_fence_off() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        DRIVER_FENCE_OFF.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

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
    /// The fence of the call that performed it.
    pub fence: Fence,
}

/// One call the host refused because of its fence or a tombstone (no effect).
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    /// When (campaign clock).
    pub at_us: u64,
    /// `launch`, `stop` or `remove`.
    pub call: &'static str,
    /// The fence the call carried.
    pub fence: Fence,
    /// Why it was refused.
    pub reason: String,
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
    /// Highest fence admitted per sandbox.
    fences: BTreeMap<String, Fence>,
    /// Removed sandboxes, with the fence of the removal that wrote the tombstone.
    tombstones: BTreeMap<String, Fence>,
    effects: Vec<Effect>,
    effects_dropped: usize,
    refusals: Vec<Refusal>,
    refusals_dropped: usize,
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
                fences: BTreeMap::new(),
                tombstones: BTreeMap::new(),
                effects: Vec::new(),
                effects_dropped: 0,
                refusals: Vec::new(),
                refusals_dropped: 0,
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
        effect: impl FnOnce(&Self) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        let (latency, fault) = self.pick(call);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let lost = |when: &str| DriverError::Uncertain {
            message: format!("injected fault: {call} {when}"),
        };
        match fault {
            Fault::None => effect(self),
            Fault::Reject if refusable(self) => Err(DriverError::Rejected {
                message: format!("injected fault: {call} refused"),
            }),
            Fault::Reject => effect(self),
            Fault::UncertainBefore => Err(lost("lost before taking effect")),
            Fault::UncertainAfter => {
                // Whatever the call did (even a refusal), its answer is lost.
                let _ = effect(self);
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

    fn record(
        &self,
        state: &mut HostState,
        kind: EffectKind,
        sandbox_id: &str,
        generation: u64,
        fence: &Fence,
    ) {
        if state.effects.len() >= EFFECTS_RECORDED_MAX {
            state.effects_dropped += 1;
            return;
        }
        state.effects.push(Effect {
            at_us: self.clock.now_us(),
            kind,
            sandbox_id: sandbox_id.to_string(),
            generation,
            fence: fence.clone(),
        });
    }

    fn refuse(
        &self,
        state: &mut HostState,
        call: &'static str,
        fence: &Fence,
        reason: String,
    ) -> DriverError {
        if state.refusals.len() >= REFUSALS_RECORDED_MAX {
            state.refusals_dropped += 1;
        } else {
            state.refusals.push(Refusal {
                at_us: self.clock.now_us(),
                call,
                fence: fence.clone(),
                reason: reason.clone(),
            });
        }
        DriverError::Fenced {
            message: format!("{call} refused: {reason}"),
        }
    }

    /// The fence check of every call that changes something, made under the
    /// state lock the effect is made under: the fence must name the call's
    /// target (else `Rejected`), and not be lower than the highest seen (else
    /// `Fenced`); an admitted fence becomes the highest seen.
    fn admit(
        &self,
        state: &mut HostState,
        call: &'static str,
        sandbox_id: &str,
        generation: Option<u64>,
        fence: &Fence,
    ) -> Result<(), DriverError> {
        if fence.sandbox_id != sandbox_id || generation.is_some_and(|g| g != fence.generation) {
            return Err(DriverError::Rejected {
                message: format!("{call}: {fence} does not name the call's target"),
            });
        }
        if let Some(seen) = state.fences.get(sandbox_id)
            && !fence.admits_after(seen)
        {
            if !driver_fence_off() {
                let reason = format!("{fence} is lower than {seen}, already seen");
                return Err(self.refuse(state, call, fence, reason));
            }
            return Ok(()); // planted bug: acts anyway, and keeps the higher fence
        }
        state.fences.insert(sandbox_id.to_string(), fence.clone());
        Ok(())
    }

    /// Every effect so far, in order, and how many were not recorded.
    pub fn effects(&self) -> (Vec<Effect>, usize) {
        let state = self.lock();
        (state.effects.clone(), state.effects_dropped)
    }

    /// Every call refused by a fence or a tombstone so far, in order, and how
    /// many were not recorded.
    pub fn refusals(&self) -> (Vec<Refusal>, usize) {
        let state = self.lock();
        (state.refusals.clone(), state.refusals_dropped)
    }

    /// The highest fence admitted per sandbox.
    pub fn fences(&self) -> BTreeMap<String, Fence> {
        self.lock().fences.clone()
    }

    /// The tombstones: removed sandboxes and the fence of their removal.
    pub fn tombstones(&self) -> BTreeMap<String, Fence> {
        self.lock().tombstones.clone()
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
    fn do_launch(&self, spec: &LaunchSpec, fence: &Fence) -> Result<ExecutionHandle, DriverError> {
        let mut state = self.lock();
        self.admit(
            &mut state,
            "launch",
            &spec.sandbox_id,
            Some(spec.generation),
            fence,
        )?;
        if let Some(removal) = state.tombstones.get(&spec.sandbox_id)
            && !driver_fence_off()
        {
            let reason = format!("sandbox was removed under {removal}");
            return Err(self.refuse(&mut state, "launch", fence, reason));
        }
        let key = (spec.sandbox_id.clone(), spec.generation);
        if let std::collections::btree_map::Entry::Vacant(vacant) = state.executions.entry(key) {
            vacant.insert(HostExecution::Running);
            self.record(
                &mut state,
                EffectKind::Launch,
                &spec.sandbox_id,
                spec.generation,
                fence,
            );
        }
        Ok(Self::handle(&spec.sandbox_id, spec.generation))
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

    fn do_stop(&self, sandbox_id: &str, generation: u64, fence: &Fence) -> Result<(), DriverError> {
        let mut state = self.lock();
        self.admit(&mut state, "stop", sandbox_id, Some(generation), fence)?;
        if let Some(execution) = state
            .executions
            .get_mut(&(sandbox_id.to_string(), generation))
            && *execution == HostExecution::Running
        {
            *execution = HostExecution::Stopped;
            self.record(&mut state, EffectKind::Stop, sandbox_id, generation, fence);
        }
        Ok(())
    }

    fn do_remove(&self, sandbox_id: &str, fence: &Fence) -> Result<(), DriverError> {
        let mut state = self.lock();
        self.admit(&mut state, "remove", sandbox_id, None, fence)?;
        // The tombstone first (the first removal's is kept), then the executions.
        state
            .tombstones
            .entry(sandbox_id.to_string())
            .or_insert_with(|| fence.clone());
        let keys: Vec<(String, u64)> = state
            .executions
            .range((sandbox_id.to_string(), 0)..=(sandbox_id.to_string(), u64::MAX))
            .map(|(key, _)| key.clone())
            .collect();
        if let Some(highest) = keys.iter().map(|(_, generation)| *generation).max() {
            for key in &keys {
                state.executions.remove(key);
            }
            self.record(&mut state, EffectKind::Remove, sandbox_id, highest, fence);
        }
        Ok(())
    }
}

/// Every call does its work when its future runs (after its injected
/// latency), never when the future is created.
impl ComputeDriver for SharedHost {
    fn name(&self) -> &'static str {
        "chaos-host"
    }

    fn identity(&self) -> &str {
        HOST_IDENTITY
    }

    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.faulty(
            "launch",
            |host| {
                !host
                    .lock()
                    .executions
                    .contains_key(&(spec.sandbox_id.clone(), spec.generation))
            },
            |host| host.do_launch(spec, fence),
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
            move |host| Ok(host.do_inspect(sandbox_id, generation)),
        ))
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        _grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty(
            "stop",
            |_| true,
            move |host| host.do_stop(sandbox_id, generation, fence),
        ))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty(
            "remove",
            |_| true,
            move |host| host.do_remove(sandbox_id, fence),
        ))
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

    /// The planted switch is process-global: tests that depend on it take turns.
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    fn spec(generation: u64) -> LaunchSpec {
        LaunchSpec {
            sandbox_id: "s".into(),
            generation,
            command: Vec::new(),
            env: Default::default(),
            ..Default::default()
        }
    }

    fn fence(term: u64, generation: u64, operation_index: u64) -> Fence {
        Fence {
            cluster_id: "c".into(),
            term,
            sandbox_id: "s".into(),
            generation,
            operation_index,
        }
    }

    #[tokio::test]
    async fn repeated_calls_are_one_effect_and_a_late_launch_after_remove_is_refused() {
        let _turn = TURN.lock().await;
        let host = SharedHost::new(Clock::new());
        host.launch(&spec(1), &fence(1, 1, 1)).await.unwrap();
        host.launch(&spec(1), &fence(1, 1, 1)).await.unwrap();
        host.stop("s", 1, Duration::ZERO, &fence(1, 1, 2))
            .await
            .unwrap();
        host.stop("s", 1, Duration::ZERO, &fence(1, 1, 2))
            .await
            .unwrap();
        assert_eq!(
            host.inspect("s", 1).await.unwrap(),
            ExecutionStatus::Exited {
                code: STOPPED_EXIT_CODE
            }
        );
        host.remove("s", &fence(1, 1, 3)).await.unwrap();
        host.remove("s", &fence(1, 1, 3)).await.unwrap();
        // Whatever its fence, a launch after the removal is refused.
        let refused = host.launch(&spec(1), &fence(2, 1, 9)).await.unwrap_err();
        assert!(refused.is_fenced(), "{refused}");
        let (effects, _) = host.effects();
        let kinds: Vec<EffectKind> = effects.iter().map(|effect| effect.kind).collect();
        assert_eq!(
            kinds,
            [EffectKind::Launch, EffectKind::Stop, EffectKind::Remove]
        );
        let operations: Vec<u64> = effects
            .iter()
            .map(|effect| effect.fence.operation_index)
            .collect();
        assert_eq!(operations, [1, 2, 3], "each effect records its fence");
        assert_eq!(host.tombstones().get("s"), Some(&fence(1, 1, 3)));
        assert_eq!(host.refusals().0.len(), 1);
    }

    #[tokio::test]
    async fn lower_fences_and_other_clusters_are_refused_with_no_effect() {
        let _turn = TURN.lock().await;
        let host = SharedHost::new(Clock::new());
        host.stop("s", 1, Duration::ZERO, &fence(3, 1, 30))
            .await
            .unwrap();
        // Equal: the same operation again.
        host.stop("s", 1, Duration::ZERO, &fence(3, 1, 30))
            .await
            .unwrap();
        let other_cluster = Fence {
            cluster_id: "other".into(),
            ..fence(9, 1, 90)
        };
        for late in [fence(2, 1, 99), fence(3, 1, 29), other_cluster] {
            let error = host.launch(&spec(1), &late).await.unwrap_err();
            assert!(error.is_fenced(), "{late}: {error}");
        }
        assert!(host.executions().is_empty());
        assert!(host.effects().0.is_empty());
        assert_eq!(host.refusals().0.len(), 3);
        assert_eq!(host.fences().get("s"), Some(&fence(3, 1, 30)));
        // A fence that names another target is a caller bug.
        let error = host.launch(&spec(2), &fence(4, 1, 40)).await.unwrap_err();
        assert!(error.is_definite_no_effect(), "{error}");
    }

    #[cfg(feature = "planted-bugs")]
    #[tokio::test]
    async fn the_planted_bug_acts_on_deposed_calls_and_the_effect_log_shows_it() {
        let _turn = TURN.lock().await;
        struct Off;
        impl Drop for Off {
            fn drop(&mut self) {
                DRIVER_FENCE_OFF.store(false, Ordering::SeqCst);
            }
        }
        let host = SharedHost::new(Clock::new());
        host.launch(&spec(1), &fence(2, 1, 20)).await.unwrap();
        host.remove("s", &fence(2, 1, 21)).await.unwrap();
        DRIVER_FENCE_OFF.store(true, Ordering::SeqCst);
        let _off = Off;
        // A deposed leader's launch (term 1) after the removal takes effect.
        host.launch(&spec(1), &fence(1, 1, 10)).await.unwrap();
        let (effects, _) = host.effects();
        let last = effects.last().expect("effects");
        assert_eq!(last.kind, EffectKind::Launch);
        assert!(last.fence.order() < effects[1].fence.order());
        assert_eq!(host.fences().get("s"), Some(&fence(2, 1, 21)));
    }
}
