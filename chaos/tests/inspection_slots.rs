//! The executor's inspections of running executions never hold back the
//! creates, stops and deletes that become due meanwhile.
//!
//! Every observe round inspects a batch of READY sandboxes. Those
//! inspections used to take the effects' driver-call slots
//! (`effects_in_flight_max`), as many as were free: a leader with many
//! running sandboxes started a burst of inspections every round, and a
//! create that arrived during one waited for a slot until an inspection
//! answered. Inspections now queue for slots of their own
//! (`inspections_in_flight_max`). Here inspections are made slow (3 s
//! each, the host's injected latency) and there are only four effect
//! slots: before, every create waited for a round of inspections (0-3 s);
//! now it waits for none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;
use palisade_driver::fault::{FaultPlan, FaultRule};
use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;

mod support;

/// Effect slots of the executor in this test.
const EFFECT_SLOTS: usize = 4;
/// How long each inspection takes.
const INSPECTION_LATENCY_MS: u64 = 3_000;
/// READY sandboxes to be inspected: more than the effect slots.
const RUNNING: usize = 12;
/// The executor's default `inspections_in_flight_max`.
const INSPECTIONS_IN_FLIGHT: usize = 4;
/// Creates timed while the inspections run.
const TIMED_CREATES: usize = 8;
/// Longest a timed create (or a prompt delete) may take. One that waited
/// for a slot or a claim an inspection held took up to the inspection's
/// 3 s; one that did not takes milliseconds (seconds on a loaded machine,
/// still far below).
const CREATE_MAX: Duration = Duration::from_millis(1_500);

/// A one-replica cluster whose executor has [`EFFECT_SLOTS`] effect slots,
/// with [`RUNNING`] READY sandboxes (`running-N`), and from then on every
/// inspection taking [`INSPECTION_LATENCY_MS`] and then losing its answer:
/// harmless (the executor inspects again later), and the host counts it,
/// which shows that inspections ran meanwhile.
async fn cluster_with_slow_inspections() -> (
    Cluster,
    Arc<SharedHost>,
    PalisadeClient<tonic::transport::Channel>,
) {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let mut config = ClusterConfig::chaos(1);
    config.executor.effects_in_flight_max = EFFECT_SLOTS;
    // Longer than an inspection, so that none is cut short by its bound.
    config.executor.driver_call_timeout = Duration::from_secs(30);
    let (triggers, _fired) = Triggers::new();
    let cluster = Cluster::start(
        config,
        host.clone(),
        Arc::new(LinkTable::new(11)),
        Arc::new(triggers),
    )
    .expect("cluster starts");
    let (_, mut client) = cluster
        .connect_to_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected and answers");
    for n in 0..RUNNING {
        create(&mut client, &format!("running-{n}")).await;
    }
    host.set_plan(FaultPlan {
        inspect: FaultRule {
            latency_ms: INSPECTION_LATENCY_MS,
            uncertain_after_rate: 1.0,
            ..FaultRule::default()
        },
        ..FaultPlan::default()
    });
    // Let observe rounds start on the running sandboxes.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    (cluster, host, client)
}

fn slow_inspections(host: &SharedHost) -> u64 {
    host.faults()
        .get("inspect:uncertainafter")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_inspections_take_no_slot_a_create_needs() {
    let (cluster, host, mut client) = cluster_with_slow_inspections().await;
    let mut slowest = Duration::ZERO;
    for n in 0..TIMED_CREATES {
        let started = Instant::now();
        create(&mut client, &format!("timed-{n}")).await;
        let took = started.elapsed();
        eprintln!("create timed-{n}: {took:?}");
        slowest = slowest.max(took);
        // Spread over the rounds, not all in the gap after one.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let inspections = slow_inspections(&host);
    cluster.shutdown().await;
    assert!(
        inspections >= EFFECT_SLOTS as u64,
        "only {inspections} slow inspections answered while the creates were timed"
    );
    assert!(
        slowest < CREATE_MAX,
        "a create took {slowest:?} (at most {CREATE_MAX:?}) while inspections of \
         {INSPECTION_LATENCY_MS} ms ran: it waited for a driver-call slot an inspection held"
    );
}

/// A round's inspections queue for their slots without claiming their
/// sandboxes: only the ones being inspected (at most
/// `inspections_in_flight_max`, 4 by default) hold their own effects back.
/// Every running sandbox is deleted at once (a delete, unlike a stop, does
/// not inspect); all but those few are deleted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_sandboxes_being_inspected_wait_for_their_inspection() {
    let (cluster, host, client) = cluster_with_slow_inspections().await;
    let deletes = (0..RUNNING).map(|n| {
        let mut client = client.clone();
        async move {
            let started = Instant::now();
            client
                .delete_sandbox(v1::DeleteSandboxRequest {
                    sandbox: Some(v1::SandboxRef {
                        workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
                        name: format!("running-{n}"),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|status| panic!("delete running-{n}: {status:?}"));
            started.elapsed()
        }
    });
    let took: Vec<Duration> = futures::future::join_all(deletes).await;
    let inspections = slow_inspections(&host);
    cluster.shutdown().await;
    eprintln!("deletes took {took:?}");
    assert!(inspections >= 1, "no slow inspection ran");
    let prompt = took.iter().filter(|took| **took < CREATE_MAX).count();
    assert!(
        prompt >= RUNNING - INSPECTIONS_IN_FLIGHT,
        "{prompt} of {RUNNING} deletes answered within {CREATE_MAX:?} (at least {}): sandboxes \
         queued for an inspection held their deletes back: {took:?}",
        RUNNING - INSPECTIONS_IN_FLIGHT
    );
}

/// Creates `name` and checks the create answered a READY sandbox.
async fn create(client: &mut PalisadeClient<tonic::transport::Channel>, name: &str) {
    let sandbox = support::create(client, name).await;
    assert_eq!(
        sandbox.status.as_ref().map(|status| status.phase),
        Some(v1::SandboxPhase::Ready as i32),
        "create {name} answers a READY sandbox: {sandbox:?}"
    );
}
