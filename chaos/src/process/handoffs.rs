//! The process mode's handoffs at the fault points inside a request, in
//! real `palisade gateway run` processes: armed and answered over the
//! control directory of `palisade_testkit::control_points` (the replicas
//! must be a `test-hooks` build), acted on with the real thing — a
//! leadership transfer through the ClusterAdmin API, SIGKILL, or
//! SIGSTOP/SIGCONT.
//!
//! The schedule mirrors the in-process one ([`crate::nemesis`]): every
//! other handoff is a *stall* (the leader frozen by SIGSTOP between its
//! leadership check and its driver call while another leader takes over
//! and the sandbox is deleted through it: only the driver's fence and
//! tombstone stop the held launch when the process is thawed) or a
//! *ping-pong* (leadership away and back around a committed operation:
//! only the term fence stops the old term's effect); the others transfer
//! leadership or kill the process at a random point. The snapshot points
//! stay with the in-process mode (it builds and installs snapshots on
//! demand; these processes rarely reach one in a campaign).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use palisade_raft::NodeId;
use palisade_testkit::control_points::{Fired, PointsControl, Trigger};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::Endpoint;

use super::{ADMIN_CALL_TIMEOUT, Processes, admin, leader, leader_excluding};
use crate::history::History;
use crate::nemesis::{TRIGGER_WAIT_MAX, delete_as_nemesis};
use crate::points::ACTION_WAIT_MAX;
use crate::workload::Endpoints;

/// How long a transfer may take to show a new leader.
const TRANSFER_WAIT_MAX: Duration = Duration::from_secs(3);

/// What the harness does when a point fires.
#[derive(Debug, Clone, Copy)]
enum Action {
    Transfer { hold: Duration },
    Crash,
    PingPong { wait_max: Duration },
    Stall { wait_max: Duration },
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Transfer { .. } => "transfer",
            Action::Crash => "crash",
            Action::PingPong { .. } => "ping-pong",
            Action::Stall { .. } => "stall",
        }
    }
}

/// The handoffs at fault points of one campaign.
pub(super) struct PointHandoffs {
    control: PointsControl,
    history: Arc<History>,
    request_prefix: String,
    handoffs: u64,
    deletes: u64,
}

/// Counts of what the handoffs did, by variant.
pub(super) type Counts = BTreeMap<String, u64>;

impl PointHandoffs {
    pub(super) fn new(
        control: PointsControl,
        history: Arc<History>,
        request_prefix: String,
    ) -> PointHandoffs {
        PointHandoffs {
            control,
            history,
            request_prefix,
            handoffs: 0,
            deletes: 0,
        }
    }

    fn next(&mut self, rng: &mut StdRng) -> (&'static str, Action, Vec<String>) {
        self.handoffs += 1;
        let ms = |rng: &mut StdRng, low: u64, high: u64| {
            Duration::from_millis(rng.random_range(low..=high))
        };
        if self.handoffs % 2 == 1 {
            let wait_max = ms(rng, 2_000, 3_000);
            let launches = vec!["Create".to_string(), "Start".to_string()];
            return if self.handoffs % 4 == 1 {
                ("before-effect", Action::Stall { wait_max }, launches)
            } else {
                ("begin-committed", Action::PingPong { wait_max }, launches)
            };
        }
        let kind = *[
            "begin-committed",
            "effect-done",
            "effect-done",
            "forwarding",
        ]
        .choose(rng)
        .unwrap_or(&"effect-done");
        let action = if rng.random_bool(0.5) {
            Action::Transfer {
                hold: ms(rng, 20, 800),
            }
        } else {
            Action::Crash
        };
        (kind, action, Vec::new())
    }

    /// One handoff: arm, wait for a replica to reach the point, act.
    pub(super) async fn run(
        &mut self,
        processes: &Processes,
        rng: &mut StdRng,
        counts: &mut Counts,
        missed: &mut Counts,
        stop: &mut watch::Receiver<bool>,
    ) {
        let (kind, action, operations) = self.next(rng);
        let wait_max = match action {
            Action::PingPong { wait_max } => wait_max + 2 * ACTION_WAIT_MAX,
            Action::Stall { wait_max } => 2 * wait_max + ACTION_WAIT_MAX,
            Action::Transfer { .. } | Action::Crash => ACTION_WAIT_MAX,
        };
        let hold = match action {
            Action::Transfer { hold } => hold,
            _ => Duration::ZERO,
        };
        let trigger = Trigger {
            kind: kind.to_string(),
            action: action.name().to_string(),
            hold,
            wait_max,
            operations,
        };
        let label = format!("handoff:{kind}:{}", action.name());
        if let Err(error) = self.control.arm(&trigger) {
            *missed.entry(label).or_default() += 1;
            self.history
                .fault("handoff-missed", format!("cannot arm {kind}: {error}"));
            return;
        }
        let fired = tokio::select! {
            fired = self.control.wait_fired(TRIGGER_WAIT_MAX) => fired,
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        let Some(fired) = fired else {
            self.control.disarm();
            *missed.entry(format!("handoff:{kind}")).or_default() += 1;
            self.history.fault(
                "handoff-missed",
                format!("{kind}: no replica reached the point in time"),
            );
            return;
        };
        let node = fired.node;
        let at = describe(&fired);
        match action {
            Action::Transfer { .. } => {
                let from = if fired.kind == "forwarding" {
                    fired.leader
                } else {
                    node
                };
                let to = other_than(processes, from, rng);
                let moved = match to {
                    Some(to) => transfer(processes, from, to).await,
                    None => false,
                };
                let _ = self.control.acted(node);
                let detail = format!("{at}: transfer from {from} to {to:?} (moved: {moved})");
                self.record(label, detail, moved, counts, missed);
            }
            Action::Crash => {
                let victim = if fired.kind == "forwarding" {
                    // While the forwarded write is in flight.
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..=30))).await;
                    fired.leader
                } else {
                    node
                };
                processes.kill(victim);
                let fault = self
                    .history
                    .injected(label.clone(), format!("{at}: SIGKILL node {victim}"));
                *counts.entry(label).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(rng.random_range(150..=800))).await;
                if let Err(error) = processes.spawn(victim) {
                    self.history.fault("restart-failed", error.to_string());
                }
                self.history.fault_ended(fault);
            }
            Action::PingPong { wait_max } => {
                let away = other_than(processes, node, rng);
                let moved = match away {
                    Some(to) => transfer(processes, node, to).await,
                    None => false,
                };
                let gone = moved
                    && self
                        .delete_when_settled(processes, &fired.sandbox_id, wait_max, None, rng)
                        .await;
                let back = match leader(processes).await {
                    Some(leader) if moved && leader != node => {
                        transfer(processes, leader, node).await
                    }
                    _ => false,
                };
                let _ = self.control.acted(node);
                let detail = format!(
                    "{at}: leadership away to {away:?} (moved: {moved}), sandbox gone: {gone}, back to {node}: {back}"
                );
                self.record(label, detail, moved, counts, missed);
            }
            Action::Stall { wait_max } => {
                processes.pause(node, true);
                let fault = self.history.injected(
                    label.clone(),
                    format!("{at}: SIGSTOP after its leadership check"),
                );
                *counts.entry(label).or_default() += 1;
                let deadline = Instant::now() + wait_max;
                let mut others_lead = false;
                while Instant::now() < deadline {
                    if leader_excluding(processes, Some(node)).await.is_some() {
                        others_lead = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let gone = others_lead
                    && self
                        .delete_when_settled(
                            processes,
                            &fired.sandbox_id,
                            wait_max,
                            Some(node),
                            rng,
                        )
                        .await;
                // Released before the thaw: the held launch goes first.
                let _ = self.control.acted(node);
                processes.pause(node, false);
                self.history.fault(
                    "thaw",
                    format!(
                        "node {node}: another leader meanwhile: {others_lead}, sandbox gone: {gone}; the held effect goes on"
                    ),
                );
                self.history.fault_ended(fault);
            }
        }
    }

    fn record(
        &self,
        label: String,
        detail: String,
        happened: bool,
        counts: &mut Counts,
        missed: &mut Counts,
    ) {
        if happened {
            self.history.injected(label.clone(), detail);
            *counts.entry(label).or_default() += 1;
        } else {
            self.history.fault("handoff-missed", detail);
            *missed.entry(label).or_default() += 1;
        }
    }

    /// Waits (at most `wait_max`) until the sandbox's operation is
    /// finished by whichever replica leads, then deletes it through the
    /// public API (not through `frozen`), recorded in the history as
    /// client `nemesis` so every check accounts for it. True once the
    /// delete was acknowledged.
    async fn delete_when_settled(
        &mut self,
        processes: &Processes,
        sandbox_id: &str,
        wait_max: Duration,
        frozen: Option<NodeId>,
        rng: &mut StdRng,
    ) -> bool {
        let uris: Vec<(NodeId, String)> = processes
            .endpoints()
            .into_iter()
            .filter(|(node, _)| Some(*node) != frozen)
            .collect();
        let deadline = Instant::now() + wait_max;
        let name = 'settled: loop {
            for (_, uri) in &uris {
                let Ok(endpoint) = Endpoint::from_shared(uri.clone()) else {
                    continue;
                };
                let mut client = PalisadeClient::new(
                    endpoint
                        .connect_timeout(Duration::from_secs(1))
                        .timeout(ADMIN_CALL_TIMEOUT)
                        .connect_lazy(),
                );
                let request = v1::GetSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
                        name: String::new(),
                        id: sandbox_id.to_string(),
                    }),
                    consistency: v1::Consistency::Linearizable as i32,
                };
                match client.get_sandbox(request).await {
                    Ok(sandbox) => {
                        let sandbox = sandbox.into_inner();
                        let settled = sandbox
                            .status
                            .as_ref()
                            .is_some_and(|status| status.operation.is_none());
                        if settled {
                            break 'settled sandbox.metadata.unwrap_or_default().name;
                        }
                        break;
                    }
                    Err(status) if status.code() == tonic::Code::NotFound => return false,
                    Err(_) => continue,
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let Ok(endpoints) = Endpoints::new(&uris) else {
            return false;
        };
        self.deletes += 1;
        let request_id = format!("{}-nemesis-{}", self.request_prefix, self.deletes);
        delete_as_nemesis(&self.history, &endpoints, rng, request_id, name, sandbox_id).await
    }
}

fn describe(fired: &Fired) -> String {
    if fired.kind == "forwarding" {
        format!(
            "{} ({} to leader {}) at node {}",
            fired.kind, fired.operation, fired.leader, fired.node
        )
    } else {
        format!(
            "{} ({} of {} g{}, term {}) at node {}",
            fired.kind,
            fired.operation,
            crate::history::short(&fired.sandbox_id),
            fired.generation,
            fired.term,
            fired.node
        )
    }
}

fn other_than(processes: &Processes, node: NodeId, rng: &mut StdRng) -> Option<NodeId> {
    let others: Vec<NodeId> = processes
        .node_ids()
        .into_iter()
        .filter(|other| *other != node)
        .collect();
    others.choose(rng).copied()
}

/// Asks `from` to hand leadership to `to`; true once `to` leads.
async fn transfer(processes: &Processes, from: NodeId, to: NodeId) -> bool {
    let uri = processes
        .endpoints()
        .into_iter()
        .find(|(node, _)| *node == from)
        .map(|(_, uri)| uri);
    let Some(mut client) = uri.as_deref().and_then(admin) else {
        return false;
    };
    let call = client.transfer_leader(v1::TransferLeaderRequest { node_id: to });
    let _ = tokio::time::timeout(ADMIN_CALL_TIMEOUT * 2, call).await;
    let deadline = Instant::now() + TRANSFER_WAIT_MAX;
    loop {
        if leader(processes).await == Some(to) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
