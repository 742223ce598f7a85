//! The PostgreSQL read projection on this replica (`palisade-projection`),
//! only when `--postgres-url` is given; without it nothing here runs and
//! nothing needs PostgreSQL.
//!
//! Every replica runs a projector reading its own Raft log. It projects
//! while this replica leads (a watch fed by openraft's leader-change
//! callbacks) and stands by otherwise, watching the checkpoint; the
//! checkpoint guard keeps a deposed leader's late batch harmless. The
//! projector is not on the write path: PostgreSQL down or slow only makes
//! the projection lag.

use std::sync::Arc;
use std::time::Duration;

use palisade_projection::{
    Projection, ProjectionConfig, ProjectionError, RaftReplica, SandboxPage, SandboxQuery,
};
use palisade_raft::{NodeId, Raft, StateHandle, TypeConfig};
use palisade_storage::LogReader;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::Code;
use tracing::info;

use crate::errors;

/// Reason: the request asked for the projection but this replica runs
/// without `--postgres-url`.
pub const PROJECTION_NOT_CONFIGURED: &str = "PROJECTION_NOT_CONFIGURED";
/// Reason: the projection did not reach the request's index in time
/// (PostgreSQL slow or down); retry, or read from the replicated state.
pub const PROJECTION_LAGGING: &str = "PROJECTION_LAGGING";
/// Reason: PostgreSQL could not answer the query.
pub const PROJECTION_UNAVAILABLE: &str = "PROJECTION_UNAVAILABLE";
/// How long a projection-served read waits for the projection to reach
/// its index (read-your-writes) before answering PROJECTION_LAGGING.
pub const PROJECTION_READ_WAIT_MAX: Duration = Duration::from_secs(5);

/// Default of `--projection-events-kept-entries`.
pub use palisade_projection::projector::EVENTS_KEPT_ENTRIES_DEFAULT;

/// A running projector and the handle to query the projection.
pub struct RunningProjection {
    /// Status (`palisade cluster status`), read-your-writes waits, lists.
    pub projection: Projection,
    /// Keeps the leader-change callbacks registered.
    _leader_watch: openraft::WatchChangeHandle<TypeConfig>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Starts this replica's projector. `log` must come from the replica's
/// `LogStore` (`log_store.reader()`, taken before the store goes to Raft).
/// Connects lazily: a PostgreSQL that is down does not stop the replica.
/// The projector's shadow state keeps its receipts in tables in
/// `receipts_dir` (see `ProjectionConfig::receipts_dir`).
pub fn start(
    node_id: NodeId,
    database_url: &str,
    events_kept_entries: u64,
    receipts_dir: &std::path::Path,
    raft: &Raft,
    state: StateHandle,
    log: LogReader<TypeConfig>,
) -> Result<RunningProjection, crate::node::NodeError> {
    let (leads, leading) = watch::channel(false);
    let leads = Arc::new(leads);
    let (on_lead, on_step_down) = (leads.clone(), leads);
    let leader_watch = raft.on_leader_change(
        move |_| {
            on_lead.send_replace(true);
            async {}
        },
        move |_| {
            on_step_down.send_replace(false);
            async {}
        },
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let (projection, task) = palisade_projection::spawn(
        ProjectionConfig {
            events_kept_entries,
            receipts_dir: Some(receipts_dir.to_path_buf()),
            ..ProjectionConfig::new(database_url, node_id)
        },
        RaftReplica::new(state, log),
        leading,
        async {
            let _ = stopped.await;
        },
    )
    .map_err(|error| crate::node::NodeError::Projection(error.to_string()))?;
    info!(
        node = node_id,
        "PostgreSQL projection enabled; this replica projects while it leads"
    );
    Ok(RunningProjection {
        projection,
        _leader_watch: leader_watch,
        stop,
        task,
    })
}

impl RunningProjection {
    /// Stops the projector (an open batch rolls back; the next projector
    /// resumes from the checkpoint).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// FAILED_PRECONDITION for `--source projection` on a replica without one.
pub fn not_configured() -> tonic::Status {
    errors::status(
        Code::FailedPrecondition,
        PROJECTION_NOT_CONFIGURED,
        "this replica runs without a projection; start it with --postgres-url, or list from the replicated state",
        [],
    )
}

/// The status for a projection error.
pub fn status_of(error: ProjectionError) -> tonic::Status {
    match error {
        ProjectionError::WorkspaceNotFound(name) => errors::workspace_not_found(&name),
        error @ ProjectionError::Lagging { .. } => {
            errors::unavailable(PROJECTION_LAGGING, error.to_string())
        }
        error => errors::unavailable(PROJECTION_UNAVAILABLE, error.to_string()),
    }
}

/// `ListSandboxes` served from the projection, once it reflects log entry
/// `read_index` (read-your-writes: pass the read index of a linearizable
/// read — it covers every write acknowledged before the request — or 0
/// for `consistency=stale`). Same order, filters and page semantics as the
/// state-served list; `page.next` is the (workspace, name) to encode as
/// `next_page_token`.
pub async fn list_sandboxes(
    projection: &Projection,
    query: &SandboxQuery,
    read_index: u64,
) -> Result<SandboxPage, tonic::Status> {
    projection
        .wait_for_index(read_index, PROJECTION_READ_WAIT_MAX)
        .await
        .map_err(status_of)?;
    projection.list_sandboxes(query).await.map_err(status_of)
}
