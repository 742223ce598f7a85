//! The openraft async runtime of Palisade: tokio, as openraft's own
//! `TokioRuntime`, except for two things the deterministic simulation
//! (`palisade chaos run --sim`) needs to control on its thread:
//!
//! - **randomness**: openraft draws election timeouts and tick offsets from
//!   [`AsyncRuntime::thread_rng`]. Here that is the thread's own random
//!   generator unless [`seed_thread`] seeded this thread, in which case it
//!   is a seeded generator: the same seed draws the same timeouts.
//! - **blocking work**: the log store runs its redb transactions through
//!   [`AsyncRuntime::spawn_blocking`]. On a simulated thread
//!   ([`is_simulated`]) the work runs inline: another thread finishing at a
//!   wall-clock moment is nondeterminism, and while it ran, paused tokio
//!   time would jump ahead and fire election timers. [`blocking`] is the
//!   same choice for Palisade's own blocking work (snapshots, files).
//!
//! Outside a simulation, blocking work runs on the current tokio runtime's
//! blocking pool, not on a new OS thread per call (openraft's default,
//! which `openraft-rt-tokio` keeps). Two reasons: a thread per log append
//! is a `clone`/`exit` pair on the write path, and a thread of its own
//! belongs to no runtime — when a runtime is dropped (an in-process
//! replica crashed by the chaos harness) it goes on holding what its
//! closure captured, the log database among it, so the restarted replica
//! found the log "already open in another process". The pool is drained
//! when its runtime drops: work not started yet is dropped, work under
//! way finishes first (as an in-flight syscall does at SIGKILL).
//!
//! Production threads are never seeded and never marked simulated.
#![allow(deprecated)] // openraft 0.10 re-exports `TokioRuntime` as deprecated; it is the one we wrap.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::time::Duration;

use openraft::AsyncRuntime;
use openraft::OptionalSend;
use openraft::impls::TokioRuntime;

thread_local! {
    /// The seeded generator's state (`None`: not seeded).
    static SEEDED: Cell<Option<u64>> = const { Cell::new(None) };
    /// True on a thread that runs a simulation.
    static SIMULATED: Cell<bool> = const { Cell::new(false) };
}

/// Seeds this thread's generator ([`AsyncRuntime::thread_rng`]) and marks
/// the thread simulated (see the module docs). For the simulation only.
pub fn seed_thread(seed: u64) {
    SEEDED.with(|state| state.set(Some(seed)));
    SIMULATED.with(|simulated| simulated.set(true));
}

/// Undoes [`seed_thread`]: this thread is an ordinary one again.
pub fn unseed_thread() {
    SEEDED.with(|state| state.set(None));
    SIMULATED.with(|simulated| simulated.set(false));
}

/// True on a thread [`seed_thread`] marked simulated.
pub fn is_simulated() -> bool {
    SIMULATED.with(Cell::get)
}

/// Runs blocking work off the async thread (tokio's blocking pool), or
/// inline on a simulated thread (see the module docs).
pub async fn blocking<F, T>(work: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    <PalisadeRuntime as AsyncRuntime>::spawn_blocking(work).await
}

/// SplitMix64: small, fast, and good enough for election jitter.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The generator [`AsyncRuntime::thread_rng`] hands out: the thread's
/// seeded stream when [`seed_thread`] seeded it, else the OS-seeded
/// thread generator.
#[derive(Debug, Clone, Copy, Default)]
pub struct PalisadeRng;

impl PalisadeRng {
    fn next(self) -> u64 {
        let seeded = SEEDED.with(|state| {
            state.get().map(|mut current| {
                let value = splitmix64(&mut current);
                state.set(Some(current));
                value
            })
        });
        seeded.unwrap_or_else(|| {
            use rand_core_010::Rng as _;
            rand010::rng().next_u64()
        })
    }
}

impl rand_core_010::TryRng for PalisadeRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.next() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

/// Palisade's openraft runtime (see the module docs).
#[derive(Debug)]
pub struct PalisadeRuntime(TokioRuntime);

impl AsyncRuntime for PalisadeRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = PalisadeRng;
    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        PalisadeRng
    }

    fn new(threads: usize) -> Self {
        PalisadeRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }

    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        use futures::future::Either;
        if is_simulated() {
            return Either::Left(async move { Ok(f()) });
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn_blocking(f);
                Either::Right(Either::Left(async move {
                    task.await
                        .map_err(|error| io::Error::other(format!("blocking task failed: {error}")))
                }))
            }
            // Outside any runtime there is no pool to use: openraft's
            // default (a thread of its own).
            Err(_) => Either::Right(Either::Right(TokioRuntime::spawn_blocking(f))),
        }
    }
}

/// Random bytes for identifiers and secrets the replica makes (sandbox and
/// request ids, tokens): from the OS-seeded thread generator (a CSPRNG),
/// or from the seeded stream on a thread [`seed_thread`] seeded, so that a
/// simulated run makes the same ids. Never seeded outside the simulation.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    match SEEDED.with(Cell::get) {
        Some(_) => {
            let _ = rand_core_010::TryRng::try_fill_bytes(&mut PalisadeRng, &mut bytes);
        }
        None => {
            use rand_core_010::Rng as _;
            rand010::rng().fill_bytes(&mut bytes);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use openraft::AsyncRuntime;

    use super::PalisadeRuntime;

    /// Blocking work belongs to the runtime that started it: once the
    /// runtime is dropped, nothing its work captured is still held. With a
    /// thread per call (openraft's default) the work outlived the runtime
    /// and kept a crashed replica's log database open.
    #[test]
    fn blocking_work_ends_with_its_runtime() {
        let held = Arc::new(());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let captured = held.clone();
        runtime.block_on(async move {
            // Not awaited: the runtime goes while the work is under way.
            drop(PalisadeRuntime::spawn_blocking(move || {
                started_tx.send(()).expect("the test waits");
                std::thread::sleep(Duration::from_millis(300));
                drop(captured);
            }));
        });
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work started");
        drop(runtime);
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "blocking work still holds what it captured after its runtime was dropped"
        );
    }

    /// Outside any runtime the work still runs (on a thread of its own).
    #[test]
    fn blocking_work_outside_a_runtime_still_runs() {
        let answer = futures::executor::block_on(PalisadeRuntime::spawn_blocking(|| 42));
        assert_eq!(answer.expect("the work ran"), 42);
    }
}
