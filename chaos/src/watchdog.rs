//! The simulation's watchdog: a simulated campaign ([`crate::campaign::simulate`])
//! must end or fail, never hang.
//!
//! Two ways a simulation can stop moving, each caught here:
//!
//! - **Simulated time stops.** Tokio's paused clock advances only when
//!   every task waits; a task that spins (wakes itself, yields in a loop,
//!   re-arms a zero-length timer) keeps the thread busy at one instant
//!   forever. A heartbeat task counts simulated ticks; a plain OS thread
//!   watches the count, and when it has not moved for
//!   [`Limits::wall_stall`] of wall time, wakes the campaign's guard,
//!   which fails the campaign. Should the runtime not even come back to
//!   the guard (a task that never returns from `poll`), the thread ends
//!   the process after a grace period with the same message: a hang is
//!   the one outcome not allowed.
//! - **The history stops.** Simulated time goes on (timers fire) but no
//!   operation, replay or fault has been recorded for
//!   [`Limits::history_stall`] of simulated time: a retry loop that never
//!   gives up. The heartbeat fails the campaign.
//!
//! Either way the error ([`ChaosError::Stalled`]) names the seed, so the
//! hang becomes a one-line reproduction.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::ChaosError;

/// How long the simulation may stand still before the campaign fails.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall time without simulated time moving.
    pub wall_stall: Duration,
    /// Simulated time without anything recorded in the history.
    pub history_stall: Duration,
    /// Wall time the guard has, once woken, before the process is ended.
    pub grace: Duration,
}

impl Limits {
    /// The campaign's limits: generous (a debug build on a loaded machine
    /// advances about one simulated second per wall second; a campaign
    /// records something every few simulated milliseconds, and its longest
    /// wait, a partition or an operation's wait limit, is seconds).
    pub const CAMPAIGN: Limits = Limits {
        wall_stall: Duration::from_secs(60),
        history_stall: Duration::from_secs(120),
        grace: Duration::from_secs(30),
    };
}

/// Simulated time between heartbeats.
const TICK: Duration = Duration::from_millis(10);

/// One simulated campaign's watchdog.
#[derive(Debug)]
pub struct Watchdog {
    seed: u64,
    limits: Limits,
    /// Simulated ticks so far (the heartbeat's).
    ticks: AtomicU64,
    /// Set once the guarded campaign is over (the monitor thread exits).
    finished: AtomicBool,
    /// Why the campaign stalled, once it did.
    stalled: Mutex<Option<String>>,
    tripped: Notify,
}

impl Watchdog {
    /// A watchdog for the campaign of `seed`.
    pub fn new(seed: u64, limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            seed,
            limits,
            ticks: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            stalled: Mutex::new(None),
            tripped: Notify::new(),
        })
    }

    fn trip(&self, why: String) {
        let message = format!(
            "the simulation of seed {} stopped moving: {why}; reproduce with `palisade chaos run --sim --seed {}` (and the same --ops and --nemesis)",
            self.seed, self.seed
        );
        self.stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(message);
        // `notify_one` stores a permit: the guard sees it even if it is
        // not waiting right now.
        self.tripped.notify_one();
    }

    fn reason(&self) -> String {
        self.stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_default()
    }

    /// The heartbeat, to spawn on the simulation's runtime once the
    /// history exists: counts simulated ticks, and fails the campaign once
    /// `recorded` (the history's event count) has not grown for
    /// [`Limits::history_stall`]. Runs until aborted.
    pub async fn heartbeat(self: Arc<Self>, recorded: impl Fn() -> usize) {
        let mut last = recorded();
        let mut since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(TICK).await;
            self.ticks.fetch_add(1, Ordering::Relaxed);
            let now_recorded = recorded();
            if now_recorded != last {
                last = now_recorded;
                since = tokio::time::Instant::now();
            } else if since.elapsed() >= self.limits.history_stall {
                self.trip(format!(
                    "nothing was recorded in the history for {:?} of simulated time ({last} events so far)",
                    self.limits.history_stall
                ));
                return;
            }
        }
    }

    /// Runs `campaign` (on the simulation's runtime) unless the watchdog
    /// trips first; then fails with [`ChaosError::Stalled`].
    pub async fn guard<T>(
        self: &Arc<Self>,
        campaign: impl Future<Output = Result<T, ChaosError>>,
    ) -> Result<T, ChaosError> {
        let monitor = self.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sim-watchdog-{}", self.seed))
            .spawn(move || monitor.watch_wall_clock())?;
        let result = tokio::select! {
            // `biased`: deterministic, and a tripped watchdog wins.
            biased;
            () = self.tripped.notified() => Err(ChaosError::Stalled(self.reason())),
            result = campaign => result,
        };
        self.finished.store(true, Ordering::Relaxed);
        thread.thread().unpark();
        let _ = thread.join();
        result
    }

    /// The monitor thread: trips when the ticks stand still for
    /// [`Limits::wall_stall`]; ends the process if the guard does not
    /// come back within [`Limits::grace`] after that.
    fn watch_wall_clock(&self) {
        let poll =
            (self.limits.wall_stall / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut last = self.ticks.load(Ordering::Relaxed);
        let mut since = std::time::Instant::now();
        let mut tripped_at = None;
        while !self.finished.load(Ordering::Relaxed) {
            std::thread::park_timeout(poll);
            if let Some(at) = tripped_at {
                if std::time::Instant::now().duration_since(at) >= self.limits.grace
                    && !self.finished.load(Ordering::Relaxed)
                {
                    eprintln!(
                        "palisade chaos: {} (the simulation did not stop within {:?}; ending the process)",
                        self.reason(),
                        self.limits.grace
                    );
                    std::process::exit(1);
                }
                continue;
            }
            let ticks = self.ticks.load(Ordering::Relaxed);
            if ticks != last {
                last = ticks;
                since = std::time::Instant::now();
            } else if since.elapsed() >= self.limits.wall_stall {
                self.trip(format!(
                    "simulated time stood still for {:?} of wall time (a task spins without waiting)",
                    self.limits.wall_stall
                ));
                tripped_at = Some(std::time::Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Limits = Limits {
        wall_stall: Duration::from_millis(500),
        history_stall: Duration::from_secs(5),
        grace: Duration::from_secs(60),
    };

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_task_that_spins_fails_the_campaign_naming_the_seed() {
        let watchdog = Watchdog::new(41, SHORT);
        let result: Result<(), ChaosError> = paused_runtime().block_on(async {
            tokio::spawn(watchdog.clone().heartbeat(|| 0));
            // Let the heartbeat tick once or twice, then spin: simulated
            // time stops (yield_now never lets the paused clock advance).
            tokio::time::sleep(Duration::from_millis(30)).await;
            tokio::spawn(async {
                loop {
                    tokio::task::yield_now().await;
                }
            });
            watchdog
                .guard(std::future::pending::<Result<(), ChaosError>>())
                .await
        });
        let error = result
            .expect_err("the watchdog fails the campaign")
            .to_string();
        assert!(error.contains("seed 41"), "{error}");
        assert!(error.contains("simulated time stood still"), "{error}");
    }

    #[test]
    fn a_history_that_stops_growing_fails_the_campaign() {
        let watchdog = Watchdog::new(42, SHORT);
        let started = std::time::Instant::now();
        let result: Result<(), ChaosError> = paused_runtime().block_on(async {
            tokio::spawn(watchdog.clone().heartbeat(|| 7));
            // Time moves (a timer loop), the history does not.
            watchdog
                .guard(async {
                    loop {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                })
                .await
        });
        let error = result
            .expect_err("the watchdog fails the campaign")
            .to_string();
        assert!(error.contains("seed 42"), "{error}");
        assert!(error.contains("nothing was recorded"), "{error}");
        // Simulated: 5 s of simulated time take far less wall time.
        assert!(started.elapsed() < SHORT.wall_stall * 4);
    }

    #[test]
    fn a_campaign_that_ends_is_not_touched() {
        let watchdog = Watchdog::new(43, SHORT);
        let result = paused_runtime().block_on(async {
            let heartbeat = tokio::spawn(watchdog.clone().heartbeat(|| 0));
            let result = watchdog
                .guard(async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(5)
                })
                .await;
            heartbeat.abort();
            result
        });
        assert_eq!(result.expect("ends"), 5);
    }
}
