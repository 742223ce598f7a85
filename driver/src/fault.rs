//! The fault-injecting driver: wraps a real driver and makes its calls slow,
//! refused, uncertain or hanging, by a plan. For tests and the chaos harness.
//!
//! Faults follow the trait's error contract, so they exercise exactly the
//! paths the executor must get right:
//!
//! - `reject`: the call fails with `Rejected` and does nothing.
//! - `uncertain_before`: the call fails with `Uncertain` and does nothing
//!   (a request lost on the way).
//! - `uncertain_after`: the call DOES its effect, then fails with
//!   `Uncertain` (an answer lost on the way back) — the case that must never
//!   be recorded as "no effect".
//! - `hang`: the call never returns (the caller's timeout must fire).
//!
//! Each fault applies to the first N calls of its kind (`*_first`), or with
//! a probability from a seeded RNG (`*_rate`), so a run can be reproduced.
//! Every call and its injected fault is recorded for checkers.
//!
//! Select it with `palisade gateway run --driver fault --fault-plan JSON`
//! (it wraps the process driver), e.g.
//! `{"stop": {"uncertain_after_first": 1}, "inspect": {"latency_ms": 200}}`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionStatus, Fence, LaunchSpec,
};

/// Faults for one kind of call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultRule {
    /// Added to every call, before anything else.
    pub latency_ms: u64,
    /// The first N calls are refused, with no effect.
    pub reject_first: u32,
    /// The first N calls (after rejections) fail uncertainly, with no effect.
    pub uncertain_before_first: u32,
    /// The first N calls (after those) take effect, then fail uncertainly.
    pub uncertain_after_first: u32,
    /// The first N calls (after those) never return.
    pub hang_first: u32,
    /// Probability of `reject` on any later call.
    pub reject_rate: f64,
    /// Probability of `uncertain_before` on any later call.
    pub uncertain_before_rate: f64,
    /// Probability of `uncertain_after` on any later call.
    pub uncertain_after_rate: f64,
    /// Probability of `hang` on any later call.
    pub hang_rate: f64,
}

/// Faults per kind of call, and the seed of the probabilistic ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultPlan {
    /// Seed of the RNG behind the `*_rate` faults.
    pub seed: u64,
    /// Faults of `launch`.
    pub launch: FaultRule,
    /// Faults of `inspect`.
    pub inspect: FaultRule,
    /// Faults of `stop`.
    pub stop: FaultRule,
    /// Faults of `remove`.
    pub remove: FaultRule,
}

impl FaultPlan {
    /// Parses a plan from JSON, naming what is wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let plan: FaultPlan =
            serde_json::from_str(text).map_err(|error| format!("invalid fault plan: {error}"))?;
        for (name, rule) in [
            ("launch", &plan.launch),
            ("inspect", &plan.inspect),
            ("stop", &plan.stop),
            ("remove", &plan.remove),
        ] {
            let rates = [
                rule.reject_rate,
                rule.uncertain_before_rate,
                rule.uncertain_after_rate,
                rule.hang_rate,
            ];
            if rates.iter().any(|rate| !(0.0..=1.0).contains(rate))
                || rates.iter().sum::<f64>() > 1.0
            {
                return Err(format!(
                    "invalid fault plan: the rates of {name} must be in [0, 1] and sum to at most 1"
                ));
            }
        }
        Ok(plan)
    }
}

/// The fault injected into one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// None: the call went through.
    None,
    /// Refused, no effect.
    Reject,
    /// Uncertain, no effect.
    UncertainBefore,
    /// Effect, then uncertain.
    UncertainAfter,
    /// Never returned.
    Hang,
}

/// One call the driver saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// `launch`, `inspect`, `stop` or `remove`.
    pub call: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Generation (0 for `remove`).
    pub generation: u64,
    /// The fence the call carried (`None` for `inspect`).
    pub fence: Option<Fence>,
    /// The fault injected.
    pub fault: Fault,
}

/// Most call records kept (older ones are dropped).
pub const CALL_RECORDS_MAX: usize = 100_000;

struct Counters {
    launch: u32,
    inspect: u32,
    stop: u32,
    remove: u32,
}

struct Inner {
    plan: FaultPlan,
    counters: Counters,
    rng: rand::rngs::StdRng,
    records: std::collections::VecDeque<CallRecord>,
}

/// A driver that injects faults into another. See the module docs.
#[derive(Clone)]
pub struct FaultDriver {
    inner: Arc<dyn ComputeDriver>,
    /// `std::sync::Mutex`: held only to pick a fault or record a call,
    /// never across an await.
    state: Arc<Mutex<Inner>>,
}

impl FaultDriver {
    /// Wraps `inner` with `plan`.
    pub fn new(inner: Arc<dyn ComputeDriver>, plan: FaultPlan) -> Self {
        let rng = rand::rngs::StdRng::seed_from_u64(plan.seed);
        Self {
            inner,
            state: Arc::new(Mutex::new(Inner {
                plan,
                counters: Counters {
                    launch: 0,
                    inspect: 0,
                    stop: 0,
                    remove: 0,
                },
                rng,
                records: Default::default(),
            })),
        }
    }

    /// Replaces the plan (counters restart from zero).
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut inner = self.state.lock().unwrap_or_else(|p| p.into_inner());
        inner.rng = rand::rngs::StdRng::seed_from_u64(plan.seed);
        inner.plan = plan;
        inner.counters = Counters {
            launch: 0,
            inspect: 0,
            stop: 0,
            remove: 0,
        };
    }

    /// Every call seen so far (the most recent [`CALL_RECORDS_MAX`]).
    pub fn records(&self) -> Vec<CallRecord> {
        let inner = self.state.lock().unwrap_or_else(|p| p.into_inner());
        inner.records.iter().cloned().collect()
    }

    fn pick(
        &self,
        call: &str,
        sandbox_id: &str,
        generation: u64,
        fence: Option<&Fence>,
    ) -> (Duration, Fault) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let inner = &mut *guard;
        let (rule, counter) = match call {
            "launch" => (&inner.plan.launch, &mut inner.counters.launch),
            "inspect" => (&inner.plan.inspect, &mut inner.counters.inspect),
            "stop" => (&inner.plan.stop, &mut inner.counters.stop),
            _ => (&inner.plan.remove, &mut inner.counters.remove),
        };
        let rule = rule.clone();
        let seen = *counter;
        *counter = counter.saturating_add(1);
        let mut threshold = 0;
        let mut first = |count: u32, fault: Fault| {
            threshold += count;
            (seen < threshold).then_some(fault)
        };
        let fault = first(rule.reject_first, Fault::Reject)
            .or_else(|| first(rule.uncertain_before_first, Fault::UncertainBefore))
            .or_else(|| first(rule.uncertain_after_first, Fault::UncertainAfter))
            .or_else(|| first(rule.hang_first, Fault::Hang))
            .unwrap_or_else(|| {
                let roll: f64 = inner.rng.random();
                let mut edge = 0.0;
                for (rate, fault) in [
                    (rule.reject_rate, Fault::Reject),
                    (rule.uncertain_before_rate, Fault::UncertainBefore),
                    (rule.uncertain_after_rate, Fault::UncertainAfter),
                    (rule.hang_rate, Fault::Hang),
                ] {
                    edge += rate;
                    if roll < edge {
                        return fault;
                    }
                }
                Fault::None
            });
        if inner.records.len() == CALL_RECORDS_MAX {
            inner.records.pop_front();
        }
        inner.records.push_back(CallRecord {
            call: call.to_string(),
            sandbox_id: sandbox_id.to_string(),
            generation,
            fence: fence.cloned(),
            fault,
        });
        (Duration::from_millis(rule.latency_ms), fault)
    }

    async fn faulty<T: Send>(
        &self,
        call: &str,
        sandbox_id: &str,
        generation: u64,
        fence: Option<&Fence>,
        effect: impl Future<Output = Result<T, DriverError>> + Send,
    ) -> Result<T, DriverError> {
        let (latency, fault) = self.pick(call, sandbox_id, generation, fence);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let injected = |when: &str| DriverError::Uncertain {
            message: format!("injected fault: {call} {when}"),
        };
        match fault {
            Fault::None => effect.await,
            Fault::Reject => Err(DriverError::Rejected {
                message: format!("injected fault: {call} refused"),
            }),
            Fault::UncertainBefore => Err(injected("lost before taking effect")),
            Fault::UncertainAfter => {
                effect.await?;
                Err(injected("took effect, answer lost"))
            }
            Fault::Hang => std::future::pending().await,
        }
    }
}

impl ComputeDriver for FaultDriver {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn runs_containers(&self) -> bool {
        self.inner.runs_containers()
    }

    fn identity(&self) -> &str {
        self.inner.identity()
    }

    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.faulty(
            "launch",
            &spec.sandbox_id,
            spec.generation,
            Some(fence),
            self.inner.launch(spec, fence),
        ))
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        Box::pin(self.faulty(
            "inspect",
            sandbox_id,
            generation,
            None,
            self.inner.inspect(sandbox_id, generation),
        ))
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty(
            "stop",
            sandbox_id,
            generation,
            Some(fence),
            self.inner.stop(sandbox_id, generation, grace, fence),
        ))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()> {
        Box::pin(self.faulty(
            "remove",
            sandbox_id,
            0,
            Some(fence),
            self.inner.remove(sandbox_id, fence),
        ))
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        self.inner.list()
    }

    fn collect_tombstones(&self) -> DriverFuture<'_, usize> {
        self.inner.collect_tombstones()
    }

    // Reads and execs change nothing the control plane decides: no faults.
    fn read_log<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        stream: crate::LogStream,
        start: &'a crate::LogStart,
        bytes_max: usize,
    ) -> DriverFuture<'a, crate::LogRead> {
        self.inner
            .read_log(sandbox_id, generation, stream, start, bytes_max)
    }

    fn exec<'a>(&'a self, spec: &'a crate::ExecSpec) -> DriverFuture<'a, crate::ExecStream> {
        self.inner.exec(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noop::NoopDriver;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            sandbox_id: "s".into(),
            generation: 1,
            command: vec![],
            env: Default::default(),
            ..Default::default()
        }
    }

    fn fence(term: u64, generation: u64) -> Fence {
        Fence {
            cluster_id: "c".into(),
            term,
            sandbox_id: "s".into(),
            generation,
            operation_index: 10,
        }
    }

    #[tokio::test]
    async fn first_n_faults_then_clean_calls() {
        let plan =
            FaultPlan::from_json(r#"{"launch": {"reject_first": 1, "uncertain_after_first": 1}}"#)
                .unwrap();
        let driver = FaultDriver::new(Arc::new(NoopDriver::new()), plan);
        let first = driver.launch(&spec(), &fence(1, 1)).await.unwrap_err();
        assert!(first.is_definite_no_effect());
        let second = driver.launch(&spec(), &fence(1, 1)).await.unwrap_err();
        assert!(!second.is_definite_no_effect());
        assert!(driver.launch(&spec(), &fence(1, 1)).await.is_ok());
        let faults: Vec<Fault> = driver.records().iter().map(|r| r.fault).collect();
        assert_eq!(faults, [Fault::Reject, Fault::UncertainAfter, Fault::None]);
        assert!(
            driver
                .records()
                .iter()
                .all(|record| record.fence == Some(fence(1, 1)))
        );
    }

    #[tokio::test]
    async fn the_inner_drivers_fence_shows_through() {
        let driver = FaultDriver::new(Arc::new(NoopDriver::new()), FaultPlan::default());
        driver
            .stop("s", 1, Duration::ZERO, &fence(3, 1))
            .await
            .unwrap();
        let refused = driver.launch(&spec(), &fence(2, 1)).await.unwrap_err();
        assert!(refused.is_fenced(), "{refused}");
        assert_eq!(driver.identity(), NoopDriver::new().identity());
    }

    #[tokio::test]
    async fn hangs_never_return() {
        let plan = FaultPlan::from_json(r#"{"stop": {"hang_first": 1}}"#).unwrap();
        let driver = FaultDriver::new(Arc::new(NoopDriver::new()), plan);
        let fence = fence(1, 1);
        let call = driver.stop("s", 1, Duration::ZERO, &fence);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), call)
                .await
                .is_err()
        );
    }

    #[test]
    fn bad_plans_are_refused_with_a_reason() {
        assert!(FaultPlan::from_json(r#"{"stop": {"hang_rate": 2.0}}"#).is_err());
        assert!(FaultPlan::from_json(r#"{"stopp": {}}"#).is_err());
        assert!(FaultPlan::from_json("{}").is_ok());
    }
}
