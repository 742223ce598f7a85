//! The `storage` nemesis: faults in one replica's Raft log store, through
//! the fault-injecting wrapper every in-process replica's log runs behind
//! when this nemesis is requested ([`palisade_raft::faulty_log`]).
//!
//! | variant | what the next append on the victim does | then |
//! |---|---|---|
//! | `storage:fsync-error` | fails with an I/O error | the replica must fail-stop (its Raft stops on the storage error, the replica stops serving and exits); it is restarted from its files |
//! | `storage:disk-full` | fails with "no space left on device" | the same |
//! | `storage:torn-write` | writes and syncs only the first half of the batch and never completes | the replica is crashed right there (the write cut short by the crash) and restarted from its files: the torn batch was never acknowledged, so its tail may be lost, and the restart must take the log as it is |
//!
//! Nothing acknowledged may be lost (the usual checks) and the cluster goes
//! on meanwhile. A replica that is still running a while after an append
//! failed did not fail-stop: recorded as `storage-not-fail-stopped`, which
//! the checker reports (`storage-fault-ignored`).

use std::io::ErrorKind;
use std::sync::Mutex;
use std::time::Duration;

use palisade_raft::NodeId;
use palisade_raft::hooks::{AppendFault, StorageFaults};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::nemesis::{Nemesis, TRIGGER_WAIT_MAX};

/// How long a replica may take to fail-stop after its append failed.
pub const FAIL_STOP_WAIT_MAX: Duration = Duration::from_secs(5);

/// A storage fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    /// The append fails: an fsync error.
    FsyncError,
    /// The append fails: the disk is full.
    DiskFull,
    /// Half the batch is written, then the replica crashes.
    TornWrite,
}

impl DiskFault {
    /// Its name in reports (`storage:<name>`).
    pub fn name(self) -> &'static str {
        match self {
            DiskFault::FsyncError => "fsync-error",
            DiskFault::DiskFull => "disk-full",
            DiskFault::TornWrite => "torn-write",
        }
    }
}

#[derive(Debug, Default)]
struct Armed {
    armed: Option<(NodeId, DiskFault)>,
    fired: Option<(NodeId, DiskFault, usize)>,
}

/// The harness side of [`StorageFaults`]: one fault armed at a time, for
/// one replica; the first append there takes it.
#[derive(Debug, Default)]
pub struct DiskFaults {
    state: Mutex<Armed>,
}

impl DiskFaults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Arms `fault` for the next append on `node`.
    pub fn arm(&self, node: NodeId, fault: DiskFault) {
        let mut state = self.lock();
        state.armed = Some((node, fault));
        state.fired = None;
    }

    /// Disarms.
    pub fn disarm(&self) {
        self.lock().armed = None;
    }

    /// The fault that fired since it was armed: node, fault, entries in the
    /// batch it hit.
    pub fn take_fired(&self) -> Option<(NodeId, DiskFault, usize)> {
        self.lock().fired.take()
    }
}

impl StorageFaults for DiskFaults {
    fn append(&self, node: NodeId, entries: usize) -> AppendFault {
        let mut state = self.lock();
        match state.armed {
            Some((armed, fault)) if armed == node => {
                state.armed = None;
                state.fired = Some((node, fault, entries));
                match fault {
                    DiskFault::FsyncError => AppendFault::Fail(ErrorKind::Other),
                    DiskFault::DiskFull => AppendFault::Fail(ErrorKind::StorageFull),
                    DiskFault::TornWrite => AppendFault::Torn { keep: entries / 2 },
                }
            }
            _ => AppendFault::Proceed,
        }
    }
}

impl Nemesis {
    /// One storage fault on one replica (see the module docs).
    pub(crate) async fn storage(&mut self, stop: &mut watch::Receiver<bool>) {
        let Some(disk) = self.cluster.disk_faults() else {
            self.miss(
                "storage".into(),
                "the replicas run without the fault-injecting log store".into(),
            );
            return;
        };
        let victim = self.victim();
        let fault = match self.rng.random_range(0..3u8) {
            0 => DiskFault::FsyncError,
            1 => DiskFault::DiskFull,
            _ => DiskFault::TornWrite,
        };
        let label = format!("storage:{}", fault.name());
        disk.arm(victim, fault);
        // An append reaches every replica soon while the workload writes.
        let deadline = Instant::now() + TRIGGER_WAIT_MAX;
        let fired = loop {
            if let Some(fired) = disk.take_fired() {
                break Some(fired);
            }
            if Instant::now() >= deadline || *stop.borrow() {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let fired = match fired {
            Some(fired) => Some(fired),
            None => {
                disk.disarm();
                // It may have fired just now.
                disk.take_fired()
            }
        };
        let Some((node, fault, entries)) = fired else {
            self.miss(label, format!("no append reached node {victim} in time"));
            return;
        };
        self.after_storage_fault(node, fault, entries, label).await;
    }

    async fn after_storage_fault(
        &mut self,
        node: NodeId,
        fault: DiskFault,
        entries: usize,
        label: String,
    ) {
        match fault {
            DiskFault::TornWrite => {
                self.cluster.crash(node).await;
                let fault = self.count(
                    label,
                    format!(
                        "node {node}: append of {entries} entries cut to {} and the replica crashed",
                        entries / 2
                    ),
                );
                let down = self.ms(150, 800);
                tokio::time::sleep(down).await;
                self.restart(node);
                self.history.fault_ended(fault);
            }
            DiskFault::FsyncError | DiskFault::DiskFull => {
                let fault = self.count(
                    label,
                    format!("node {node}: an append of {entries} entries failed"),
                );
                let deadline = Instant::now() + FAIL_STOP_WAIT_MAX;
                while !self.cluster.has_stopped(node) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if self.cluster.has_stopped(node) {
                    let why = self.cluster.expect_stop(node).join("; ");
                    self.history.fault(
                        "fail-stopped",
                        format!("node {node} stopped on its own: {why}"),
                    );
                } else {
                    self.history.fault(
                        "storage-not-fail-stopped",
                        format!(
                            "node {node} still runs {FAIL_STOP_WAIT_MAX:?} after its append failed"
                        ),
                    );
                }
                self.cluster.crash(node).await;
                let down = self.ms(150, 800);
                tokio::time::sleep(down).await;
                self.restart(node);
                self.history.fault_ended(fault);
            }
        }
    }
}
