//! WatchSandboxes: a listing (unless resuming), then the change feed,
//! filtered per request, through a bounded queue per watcher. The number
//! of watchers, the send budget the feed is paced by and the encoding of
//! the feed are shared ([`super::watch_feed`]).

use std::pin::Pin;

use palisade_lifecycle::validate;
use palisade_proto::encoded::EncodedSandboxEvent;
use palisade_proto::v1;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

use super::PalisadeService;
use super::request::workspace_or_default;
use crate::convert::sandbox_to_proto;
use crate::errors;

/// Depth of a watch stream's queue; a watcher that falls this far behind
/// holds its stream task until it reads again.
const WATCH_QUEUE_DEPTH: usize = 256;

/// Changes a watch stream's task takes from the feed at a time (see
/// [`super::watch_feed::WatchFeed::after`]): with the queue, what one slow
/// watcher holds is bounded by these two, not by how far behind it is.
const WATCH_BATCH_EVENTS: usize = 64;

/// The stream a WatchSandboxes call answers with. Its events are sent
/// encoded ([`EncodedSandboxEvent`]); those of the change feed are encoded
/// once and shared by every watcher.
pub(super) type EventStream =
    Pin<Box<dyn Stream<Item = Result<EncodedSandboxEvent, Status>> + Send + 'static>>;

fn watch_matches(
    request: &v1::WatchSandboxesRequest,
    workspace: &str,
    sandbox_id: &str,
    sandbox_workspace: &str,
) -> bool {
    if !request.sandbox_id.is_empty() {
        return sandbox_id == request.sandbox_id;
    }
    request.all_workspaces || sandbox_workspace == workspace
}

pub(super) async fn sandboxes(
    service: &PalisadeService,
    request: Request<v1::WatchSandboxesRequest>,
) -> Result<Response<EventStream>, Status> {
    // First, before any work: a watch beyond the limit is refused.
    let slot = service.watch_feed.enter().inspect_err(|_| {
        service.replica.metrics.request_shed("watchers_max");
    })?;
    let request = request.into_inner();
    let workspace = workspace_or_default(&request.workspace).to_string();
    if request.sandbox_id.is_empty() && !request.all_workspaces {
        validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
    }
    // A watch resumed on another replica must not go back in time.
    service.replica.linearize().await?;
    // After the read index, every version the cluster has handed out is
    // applied here: a later one was never handed out (another cluster's,
    // a typo). Accepting it would leave the watch silent until the log
    // happened to reach it.
    let applied = service.replica.state.applied_index();
    if request.resource_version > applied {
        return Err(errors::status(
            Code::OutOfRange,
            errors::RESOURCE_VERSION_TOO_NEW,
            format!(
                "resource version {} is ahead of this cluster's log (at {applied}); watch from a resource version this cluster returned, or from 0 to list first",
                request.resource_version
            ),
            [("applied_index", applied.to_string())],
        ));
    }
    let state = service.replica.state.clone();
    let feed = service.watch_feed.clone();
    let (sender, receiver) = tokio::sync::mpsc::channel(WATCH_QUEUE_DEPTH);
    tokio::spawn(async move {
        // Held for as long as the stream lives.
        let _slot = slot;
        let mut applied = state.subscribe();
        let mut from = request.resource_version;
        if from == 0 {
            let (index, initial) = state.read(|applied| {
                let index = applied.last_applied.map_or(0, |id| id.index);
                let cluster = applied.state.cluster.as_ref();
                let events: Vec<EncodedSandboxEvent> = applied
                    .state
                    .sandboxes
                    .values()
                    .filter(|sandbox| {
                        watch_matches(&request, &workspace, &sandbox.id, &sandbox.workspace)
                    })
                    // The listing is the state at `index`: a watcher that
                    // resumes from an event of it must get the changes
                    // after `index`, not again those before it (a sandbox
                    // deleted after another's last change, say). The
                    // sandbox's own version stays in its metadata.
                    .map(|sandbox| {
                        EncodedSandboxEvent::new(&v1::SandboxEvent {
                            r#type: v1::SandboxEventType::Added as i32,
                            sandbox: Some(sandbox_to_proto(sandbox, cluster)),
                            resource_version: index,
                        })
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
            let Some(events) = feed.after(&state, from, WATCH_BATCH_EVENTS) else {
                let _ = sender
                    .send(Err(errors::status(
                        Code::OutOfRange,
                        errors::RESOURCE_VERSION_TOO_OLD,
                        format!("changes after resource version {from} are no longer retained; list again and watch from the list's resource version"),
                        [],
                    )))
                    .await;
                return;
            };
            let more = events.len() == WATCH_BATCH_EVENTS;
            if let Some(last) = events.last() {
                from = last.resource_version;
            }
            let matching: Vec<_> = events
                .iter()
                .filter(|encoded| {
                    watch_matches(
                        &request,
                        &workspace,
                        &encoded.sandbox_id,
                        &encoded.workspace,
                    )
                })
                .collect();
            tokio::select! {
                // `biased`: deterministic for `--sim`; a gone client first.
                biased;
                () = sender.closed() => return,
                () = feed.before_sending(matching.len()) => {}
            }
            for encoded in matching {
                if sender.send(Ok(encoded.wire.clone())).await.is_err() {
                    return;
                }
            }
            if more {
                // A full batch: there may be more already applied.
                continue;
            }
            tokio::select! {
                // `biased`: deterministic for `--sim`; a gone client first.
                biased;
                () = sender.closed() => return,
                changed = applied.changed() => {
                    if changed.is_err() {
                        let _ = sender.send(Err(errors::unavailable(errors::SHUTTING_DOWN, "the replica is shutting down; resume the watch on another replica"))).await;
                        return;
                    }
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
    Ok(Response::new(Box::pin(stream)))
}
