//! `palisade_raft::waiters`: a request handler waiting on one sandbox is woken
//! by changes to that sandbox (and by changes not tied to any), not by others.

use std::sync::Arc;
use std::time::Duration;

use palisade_raft::waiters::SandboxWaiters;

#[tokio::test]
async fn only_the_touched_sandboxes_waiters_wake() {
    let waiters = Arc::new(SandboxWaiters::default());
    let a = waiters.register("a");
    let b = waiters.register("b");
    {
        let a_woken = a.sandbox.notified();
        let b_woken = b.sandbox.notified();
        tokio::pin!(a_woken, b_woken);
        a_woken.as_mut().enable();
        b_woken.as_mut().enable();
        waiters.wake(["a", "c"]);
        tokio::time::timeout(Duration::from_secs(5), a_woken)
            .await
            .expect("the waiter of a is woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), b_woken.as_mut())
                .await
                .is_err(),
            "the waiter of b is not"
        );
        waiters.wake_everyone();
        let everyone = b.everyone.notified();
        tokio::pin!(everyone);
        everyone.as_mut().enable();
        waiters.wake_everyone();
        tokio::time::timeout(Duration::from_secs(5), everyone)
            .await
            .expect("wake_everyone wakes b");
    }
    assert_eq!(waiters.registered(), 2);
    drop(a);
    let again = waiters.register("b");
    assert_eq!(waiters.registered(), 1);
    drop(b);
    assert_eq!(waiters.registered(), 1, "b still has a waiter");
    drop(again);
    assert_eq!(waiters.registered(), 0);
}

/// The same through a real replica (openraft, the redb log, the lifecycle
/// state machine): a batch that begins an operation on sandbox B wakes B's
/// waiter and neither A's nor everyone's; a change not tied to a sandbox
/// (a workspace created) wakes everyone. Before per-sandbox waiters every
/// applied batch woke every waiting handler, which fails the "not A" check;
/// a state machine that never attributed its batches would fail "B woken".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_wakes_the_waiters_of_the_sandbox_its_batch_touched() -> anyhow::Result<()> {
    use std::collections::BTreeMap;

    use anyhow::ensure;
    use openraft::{BasicNode, Config};
    use palisade_lifecycle::{Command, RequestMeta, SandboxSpec};
    use palisade_raft::{LifecycleStateMachine, PeerClients, Raft, TypeConfig};
    use palisade_storage::LogStore;

    const WAIT: Duration = Duration::from_secs(15);
    const SANDBOX_A: &str = "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c0a";
    const SANDBOX_B: &str = "5b0c3d1e-8f7a-4e2b-9c61-0d4f3a2b1c0b";
    let begin_create = |id: &str, name: &str| Command::BeginCreate {
        id: id.into(),
        workspace: "team-a".into(),
        name: name.into(),
        spec: SandboxSpec {
            command: vec!["sleep".into(), "1000".into()],
            ..SandboxSpec::default()
        },
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        time_ms: 1_764_000_000_000,
        host_identity: "ssh-ed25519 AAAAwaiters".into(),
        request: RequestMeta {
            id: format!("create-{name}"),
            payload_digest: format!("sha256-of-{name}"),
            time_ms: 1_764_000_000_000,
        },
    };
    let create_workspace = |name: &str| Command::CreateWorkspace {
        id: format!("7e57e57e-0000-4000-8000-{:012}", name.len()),
        name: name.into(),
        time_ms: 1_764_000_000_000,
    };

    let dir = tempfile::TempDir::new()?;
    let (log_dir, snapshot_dir) = (dir.path().join("log"), dir.path().join("snapshots"));
    let (log_store, state_machine) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        Ok((
            LogStore::<TypeConfig>::open(&log_dir)?,
            LifecycleStateMachine::open(&snapshot_dir)?,
        ))
    })
    .await??;
    let state = state_machine.handle();
    let config = Config {
        cluster_name: "sandbox-waiters-test".to_owned(),
        ..Config::default()
    };
    let raft = Raft::new(
        1,
        Arc::new(config.validate()?),
        PeerClients::new(1).network_factory(),
        log_store,
        state_machine,
    )
    .await?;
    raft.initialize(BTreeMap::from([(1, BasicNode::new("127.0.0.1:1"))]))
        .await?;
    raft.wait(Some(WAIT))
        .metrics(
            |metrics| metrics.state.is_leader() && metrics.last_quorum_acked.is_some(),
            "leader",
        )
        .await?;
    for command in [
        Command::InitializeCluster {
            cluster_id: "0f2c7d2e-8d64-4f0e-9a53-3c1f7d2a9b10".into(),
            token_secret_hex: "ab".repeat(32),
            driver_identity: "process:host-a".into(),
        },
        create_workspace("team-a"),
    ] {
        let response = raft.client_write(command.into()).await?;
        ensure!(response.data.is_ok(), "{:?}", response.data);
    }

    let a = state.wait_on_sandbox(SANDBOX_A);
    let b = state.wait_on_sandbox(SANDBOX_B);
    // A's create wakes A's waiter. Awaited, so that wake-up (sent after the
    // batch, after the proposer already has its answer) is not taken below
    // for one caused by B's batch.
    let a_created = a.sandbox.notified();
    tokio::pin!(a_created);
    a_created.as_mut().enable();
    let response = raft
        .client_write(begin_create(SANDBOX_A, "a").into())
        .await?;
    ensure!(response.data.is_ok(), "{:?}", response.data);
    tokio::time::timeout(WAIT, a_created)
        .await
        .map_err(|_| anyhow::anyhow!("A's waiter was not woken by A's create"))?;

    let a_touched = a.sandbox.notified();
    let a_everyone = a.everyone.notified();
    let b_touched = b.sandbox.notified();
    tokio::pin!(a_touched, a_everyone, b_touched);
    a_touched.as_mut().enable();
    a_everyone.as_mut().enable();
    b_touched.as_mut().enable();

    let response = raft
        .client_write(begin_create(SANDBOX_B, "b").into())
        .await?;
    ensure!(response.data.is_ok(), "{:?}", response.data);
    tokio::time::timeout(WAIT, b_touched)
        .await
        .map_err(|_| anyhow::anyhow!("B's waiter was not woken by B's create"))?;
    // B's batch is applied and its wake-ups sent (B's arrived): A's would have
    // arrived by now too.
    ensure!(
        tokio::time::timeout(Duration::from_millis(200), a_touched.as_mut())
            .await
            .is_err(),
        "A's waiter was woken by a batch that touched only B"
    );
    ensure!(
        tokio::time::timeout(Duration::from_millis(200), a_everyone.as_mut())
            .await
            .is_err(),
        "every waiter was woken by a batch that touched only B"
    );

    let response = raft
        .client_write(create_workspace("team-bb").into())
        .await?;
    ensure!(response.data.is_ok(), "{:?}", response.data);
    tokio::time::timeout(WAIT, a_everyone)
        .await
        .map_err(|_| anyhow::anyhow!("a workspace change did not wake everyone"))?;
    raft.shutdown().await?;
    Ok(())
}
