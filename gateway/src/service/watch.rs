//! WatchSandboxes: a listing (unless resuming), then the change feed,
//! filtered per request, through a bounded queue per watcher.

use std::pin::Pin;

use palisade_lifecycle::{self as core, validate};
use palisade_proto::v1;
use palisade_raft::SandboxChange;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

use super::PalisadeService;
use super::request::workspace_or_default;
use crate::convert::sandbox_to_proto;
use crate::errors;

/// Depth of a watch stream's queue; a watcher that falls this far behind
/// holds its stream task until it reads again.
const WATCH_QUEUE_DEPTH: usize = 256;

/// The stream a WatchSandboxes call answers with.
pub(super) type EventStream =
    Pin<Box<dyn Stream<Item = Result<v1::SandboxEvent, Status>> + Send + 'static>>;

fn watch_matches(
    request: &v1::WatchSandboxesRequest,
    workspace: &str,
    sandbox: &core::Sandbox,
) -> bool {
    if !request.sandbox_id.is_empty() {
        return sandbox.id == request.sandbox_id;
    }
    request.all_workspaces || sandbox.workspace == workspace
}

pub(super) async fn sandboxes(
    service: &PalisadeService,
    request: Request<v1::WatchSandboxesRequest>,
) -> Result<Response<EventStream>, Status> {
    let request = request.into_inner();
    let workspace = workspace_or_default(&request.workspace).to_string();
    if request.sandbox_id.is_empty() && !request.all_workspaces {
        validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
    }
    // A watch resumed on another replica must not go back in time.
    service.replica.linearize().await?;
    let state = service.replica.state.clone();
    let (sender, receiver) = tokio::sync::mpsc::channel(WATCH_QUEUE_DEPTH);
    tokio::spawn(async move {
        let mut applied = state.subscribe();
        let mut from = request.resource_version;
        if from == 0 {
            let (index, initial) = state.read(|applied| {
                let index = applied.last_applied.map_or(0, |id| id.index);
                let cluster = applied.state.cluster.as_ref();
                let events: Vec<v1::SandboxEvent> = applied
                    .state
                    .sandboxes
                    .values()
                    .filter(|sandbox| watch_matches(&request, &workspace, sandbox))
                    // The listing is the state at `index`: a watcher that
                    // resumes from an event of it must get the changes
                    // after `index`, not again those before it (a sandbox
                    // deleted after another's last change, say). The
                    // sandbox's own version stays in its metadata.
                    .map(|sandbox| v1::SandboxEvent {
                        r#type: v1::SandboxEventType::Added as i32,
                        sandbox: Some(sandbox_to_proto(sandbox, cluster)),
                        resource_version: index,
                    })
                    .collect();
                (index, events)
            });
            for event in initial {
                if sender.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            from = index;
        }
        loop {
            let Some(events) = state.events_after(from) else {
                let _ = sender
                    .send(Err(errors::status(
                        Code::OutOfRange,
                        "RESOURCE_VERSION_TOO_OLD",
                        format!("changes after resource version {from} are no longer retained; list again and watch from the list's resource version"),
                        [],
                    )))
                    .await;
                return;
            };
            let cluster = state.read(|applied| applied.state.cluster.clone());
            for event in events {
                from = event.index;
                if !watch_matches(&request, &workspace, &event.sandbox) {
                    continue;
                }
                let kind = match event.change {
                    SandboxChange::Added => v1::SandboxEventType::Added,
                    SandboxChange::Modified => v1::SandboxEventType::Modified,
                    SandboxChange::Deleted => v1::SandboxEventType::Deleted,
                };
                let message = v1::SandboxEvent {
                    r#type: kind as i32,
                    sandbox: Some(sandbox_to_proto(&event.sandbox, cluster.as_ref())),
                    resource_version: event.index,
                };
                if sender.send(Ok(message)).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                changed = applied.changed() => {
                    if changed.is_err() {
                        let _ = sender.send(Err(errors::unavailable(errors::SHUTTING_DOWN, "the replica is shutting down; resume the watch on another replica"))).await;
                        return;
                    }
                }
                () = sender.closed() => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
    Ok(Response::new(Box::pin(stream)))
}
