//! Per-sandbox wake-ups for request handlers waiting on the applied state.
//!
//! A handler that waits for its request's receipt to settle used to wake on
//! every applied batch (the applied-index `watch`) and re-read the state:
//! with W handlers waiting, every batch cost W wake-ups and W state reads,
//! whatever it changed. Here a handler registers the sandbox its request
//! acts on, and apply wakes, after each batch, only the handlers of the
//! sandboxes the batch touched (an operation begun, joined, found done, or
//! completed on it). Anything apply cannot attribute to sandboxes (workspace
//! commands, ticks, configuration, rejections, a snapshot install) wakes
//! everyone, as before: rare, and never a missed wake-up.
//!
//! A waiter must arm its [`Notified`](tokio::sync::futures::Notified)
//! (`enable`) before it reads the state, so that a change applied between
//! its read and its wait still wakes it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// The registry: one `Notify` per sandbox someone waits on, counted, plus
/// the one every waiter also listens to for changes not tied to a sandbox.
#[derive(Debug, Default)]
pub struct SandboxWaiters {
    by_sandbox: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
    everyone: Arc<Notify>,
}

/// A handler's registration on one sandbox; deregisters when dropped.
#[derive(Debug)]
pub struct SandboxWaiter {
    waiters: Arc<SandboxWaiters>,
    sandbox_id: String,
    /// Notified when a batch touched this sandbox.
    pub sandbox: Arc<Notify>,
    /// Notified when a batch changed something not tied to a sandbox.
    pub everyone: Arc<Notify>,
}

impl SandboxWaiters {
    /// Registers a waiter on `sandbox_id`.
    pub fn register(self: &Arc<Self>, sandbox_id: &str) -> SandboxWaiter {
        let mut map = self
            .by_sandbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (notify, count) = map
            .entry(sandbox_id.to_owned())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        *count += 1;
        SandboxWaiter {
            waiters: self.clone(),
            sandbox_id: sandbox_id.to_owned(),
            sandbox: notify.clone(),
            everyone: self.everyone.clone(),
        }
    }

    /// Wakes the waiters of these sandboxes (after their changes are applied).
    pub fn wake<'a>(&self, sandbox_ids: impl IntoIterator<Item = &'a str>) {
        let map = self
            .by_sandbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.is_empty() {
            return;
        }
        for sandbox_id in sandbox_ids {
            if let Some((notify, _)) = map.get(sandbox_id) {
                notify.notify_waiters();
            }
        }
    }

    /// Wakes every waiter.
    pub fn wake_everyone(&self) {
        self.everyone.notify_waiters();
    }

    /// Sandboxes with at least one waiter (tests, metrics).
    pub fn registered(&self) -> usize {
        self.by_sandbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for SandboxWaiter {
    fn drop(&mut self) {
        let mut map = self
            .waiters
            .by_sandbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Entry::Occupied(mut entry) = map.entry(std::mem::take(&mut self.sandbox_id)) {
            entry.get_mut().1 -= 1;
            if entry.get().1 == 0 {
                entry.remove();
            }
        }
    }
}
