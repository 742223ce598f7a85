//! The public `palisade.v1` gRPC services: input validation at the edge,
//! then a proposal (writes) or a read of the applied state (reads).
//!
//! A write handler proposes a `Begin*` command, then waits on the applied
//! state until the operation it began (identified by sandbox id and
//! generation) is over: the executor on the leader drives it there.

use std::collections::BTreeMap;
use std::pin::Pin;

use palisade_lifecycle::{
    self as core, ClusterIdentity, Command, ExecutionRef, Outcome, ReceiptResult, RequestMeta,
    SandboxTarget, State, validate,
};
use palisade_proto::v1::{self, palisade_server::Palisade};
use palisade_raft::SandboxChange;
use sha2::{Digest, Sha256};
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

use crate::convert::{phase_from_proto, sandbox_to_proto, spec_from_proto, workspace_to_proto};
use crate::errors;
use crate::replica::Replica;
use crate::token;

/// Default SSH session lifetime.
const SESSION_TTL_SECONDS_DEFAULT: u32 = 3600;
/// Depth of a watch stream's queue; a watcher that falls this far behind
/// holds its stream task until it reads again.
const WATCH_QUEUE_DEPTH: usize = 256;

/// Implements `palisade.v1.Palisade` and `palisade.v1.ClusterAdmin`.
#[derive(Clone)]
pub struct PalisadeService {
    replica: Replica,
}

impl PalisadeService {
    /// A service answering through `replica`.
    pub fn new(replica: Replica) -> Self {
        Self { replica }
    }

    /// The replica this service answers through.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    fn cluster(&self) -> Option<ClusterIdentity> {
        self.replica
            .state
            .read(|applied| applied.state.cluster.clone())
    }

    async fn read_consistency(&self, consistency: i32) -> Result<(), Status> {
        match v1::Consistency::try_from(consistency) {
            Ok(v1::Consistency::Stale) => Ok(()),
            Ok(v1::Consistency::Unspecified | v1::Consistency::Linearizable) => {
                self.replica.linearize().await
            }
            Err(_) => Err(errors::invalid_input(validate::InvalidInput {
                field: "consistency",
                problem: format!("unknown value {consistency}"),
            })),
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

fn workspace_or_default(workspace: &str) -> &str {
    if workspace.is_empty() {
        core::DEFAULT_WORKSPACE
    } else {
        workspace
    }
}

/// Validates a sandbox reference: an id, or a name (with a workspace).
fn target_from_ref(sandbox: Option<v1::SandboxRef>) -> Result<SandboxTarget, Status> {
    let sandbox = sandbox.unwrap_or_default();
    match (sandbox.id.is_empty(), sandbox.name.is_empty()) {
        (false, true) => {
            if sandbox.id.len() > 64 {
                return Err(errors::invalid_input(validate::InvalidInput {
                    field: "sandbox.id",
                    problem: "longer than 64 characters".into(),
                }));
            }
            Ok(SandboxTarget::Id(sandbox.id))
        }
        (true, false) => {
            let workspace = workspace_or_default(&sandbox.workspace).to_string();
            validate::name("sandbox.workspace", &workspace).map_err(errors::invalid_input)?;
            validate::name("sandbox.name", &sandbox.name).map_err(errors::invalid_input)?;
            Ok(SandboxTarget::Name {
                workspace,
                name: sandbox.name,
            })
        }
        (false, false) => Err(errors::invalid_input(validate::InvalidInput {
            field: "sandbox",
            problem: "give either a name or an id, not both".into(),
        })),
        (true, true) => Err(errors::invalid_input(validate::InvalidInput {
            field: "sandbox",
            problem: "give a name or an id".into(),
        })),
    }
}

fn find<'a>(state: &'a State, target: &SandboxTarget) -> Option<&'a core::Sandbox> {
    match target {
        SandboxTarget::Id(id) => state.sandboxes.get(id),
        SandboxTarget::Name { workspace, name } => state.sandbox_by_name(workspace, name),
    }
}

fn describe(target: &SandboxTarget) -> String {
    match target {
        SandboxTarget::Id(id) => format!("with id {id}"),
        SandboxTarget::Name { workspace, name } => {
            format!("named {name:?} in workspace {workspace:?}")
        }
    }
}

/// Request header asking a write to be answered only once the PostgreSQL
/// projection reached it.
pub const WAIT_FOR_PROJECTION_HEADER: &str = "palisade-wait-for-projection";

fn wants_projection(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get(WAIT_FOR_PROJECTION_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("true"))
}

/// A Stop or Start call: the same shape, another `Begin*` command.
struct ExecutionCall {
    /// The RPC's name, part of the payload digest.
    rpc: &'static str,
    sandbox: Option<v1::SandboxRef>,
    expected_execution: String,
    request_id: String,
    no_wait: bool,
    wait_for_projection: bool,
}

/// What a finished operation left.
enum Settled {
    Sandbox(Box<core::Sandbox>),
    Gone { sandbox_id: String },
}

/// The request's id (the caller's, or a fresh one) and its payload digest.
fn request_meta(request_id: &str, payload: &impl serde::Serialize) -> Result<RequestMeta, Status> {
    let id = if request_id.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        validate::request_id(request_id).map_err(errors::invalid_input)?;
        request_id.to_string()
    };
    let canonical = serde_json::to_vec(payload).map_err(|error| {
        errors::unavailable(
            errors::INTERNAL,
            format!("cannot digest the request: {error}"),
        )
    })?;
    Ok(RequestMeta {
        id,
        payload_digest: hex::encode(Sha256::digest(&canonical)),
        time_ms: now_ms(),
    })
}

/// Resolves the target of Stop/Start/Delete: the reference, or the
/// sandbox the execution token names; and the verified token's execution.
fn target_and_execution(
    sandbox: Option<v1::SandboxRef>,
    expected_execution: &str,
    cluster: Option<&ClusterIdentity>,
) -> Result<(SandboxTarget, Option<ExecutionRef>), Status> {
    let execution = if expected_execution.is_empty() {
        None
    } else {
        Some(token::verify(cluster, expected_execution)?)
    };
    let reference = sandbox.unwrap_or_default();
    let target = match &execution {
        Some(execution) if reference.name.is_empty() && reference.id.is_empty() => {
            SandboxTarget::Id(execution.sandbox_id.clone())
        }
        _ => target_from_ref(Some(reference))?,
    };
    Ok((target, execution))
}

impl PalisadeService {
    /// Proposes a `Begin*` command carrying `request`, then (unless
    /// `no_wait`) waits until the request's receipt settles and answers
    /// with it: the original result, for a retry as for the first call.
    async fn run_operation(
        &self,
        command: Command,
        request: &RequestMeta,
        no_wait: bool,
    ) -> Result<Settled, Status> {
        let proposed = self.replica.propose(command).await?;
        let outcome = proposed.response.map_err(errors::rejection)?;
        let request_id = request.id.clone();
        let settled = |applied: &palisade_raft::state_machine::AppliedState| {
            let receipt = applied.state.receipts.get(&request_id)?;
            match &receipt.result {
                ReceiptResult::Pending { sandbox_id, .. } if no_wait => {
                    Some(match applied.state.sandboxes.get(sandbox_id) {
                        Some(sandbox) => Ok(Settled::Sandbox(Box::new(sandbox.clone()))),
                        None => Ok(Settled::Gone {
                            sandbox_id: sandbox_id.clone(),
                        }),
                    })
                }
                ReceiptResult::Pending { .. } => None,
                ReceiptResult::Sandbox(sandbox) => Some(Ok(Settled::Sandbox(sandbox.clone()))),
                ReceiptResult::Deleted { sandbox_id } => Some(Ok(Settled::Gone {
                    sandbox_id: sandbox_id.clone(),
                })),
                ReceiptResult::Rejected(rejection) => {
                    Some(Err(errors::rejection(rejection.clone())))
                }
            }
        };
        if matches!(outcome, Outcome::Replayed { .. })
            && self
                .replica
                .state
                .read(|applied| !applied.state.receipts.contains_key(&request.id))
        {
            return Err(errors::unavailable(
                errors::INTERNAL,
                "the request's receipt vanished; retry with a new request id",
            ));
        }
        self.replica
            .wait_until(proposed.proposed_as_leader_in, settled)
            .await?
    }

    /// With the `palisade-wait-for-projection: true` request header: waits
    /// until the PostgreSQL projection reached everything this replica
    /// applied (which includes the write just settled), so SQL consumers
    /// read it (read-your-writes).
    async fn projection_caught_up(&self, wait_for_projection: bool) -> Result<(), Status> {
        if !wait_for_projection {
            return Ok(());
        }
        let projection = self
            .replica
            .projection
            .as_ref()
            .ok_or_else(crate::projection::not_configured)?;
        projection
            .wait_for_index(
                self.replica.state.applied_index(),
                crate::projection::PROJECTION_READ_WAIT_MAX,
            )
            .await
            .map_err(crate::projection::status_of)?;
        Ok(())
    }

    /// Runs a Stop or Start: resolves the target and the token, proposes
    /// the command `begin` builds, waits for the request's receipt.
    async fn execution_call(
        &self,
        call: ExecutionCall,
        begin: impl FnOnce(SandboxTarget, Option<ExecutionRef>, RequestMeta) -> Command,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let (target, expected_execution) = target_and_execution(
            call.sandbox,
            &call.expected_execution,
            self.cluster().as_ref(),
        )?;
        let meta = request_meta(&call.request_id, &(call.rpc, &target, &expected_execution))?;
        let command = begin(target, expected_execution, meta.clone());
        let settled = self.run_operation(command, &meta, call.no_wait).await?;
        self.projection_caught_up(call.wait_for_projection).await?;
        let what = if call.rpc == "StopSandbox" {
            "stopping"
        } else {
            "starting"
        };
        self.sandbox_answer(settled, what).map(Response::new)
    }

    fn sandbox_answer(&self, settled: Settled, what: &str) -> Result<v1::Sandbox, Status> {
        match settled {
            Settled::Sandbox(sandbox) => Ok(sandbox_to_proto(&sandbox, self.cluster().as_ref())),
            Settled::Gone { sandbox_id } => Err(errors::sandbox_not_found(format!(
                "with id {sandbox_id}: it was deleted while {what}"
            ))),
        }
    }

    /// The sandbox a reference names, for owned-record reads.
    fn sandbox_id_of(&self, sandbox: Option<v1::SandboxRef>) -> Result<String, Status> {
        let target = target_from_ref(sandbox)?;
        self.replica
            .state
            .read(|applied| find(&applied.state, &target).map(|sandbox| sandbox.id.clone()))
            .ok_or_else(|| errors::sandbox_not_found(describe(&target)))
    }
}

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

#[tonic::async_trait]
impl Palisade for PalisadeService {
    async fn create_sandbox(
        &self,
        request: Request<v1::CreateSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let wait_for_projection = wants_projection(request.metadata());
        let request = request.into_inner();
        let workspace = workspace_or_default(&request.workspace).to_string();
        validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
        validate::name("name", &request.name).map_err(errors::invalid_input)?;
        let spec = spec_from_proto(request.spec).ok_or_else(|| {
            errors::invalid_input(validate::InvalidInput {
                field: "spec.restart_policy",
                problem: "unknown restart policy".into(),
            })
        })?;
        validate::spec(&spec).map_err(errors::invalid_input)?;
        let labels: BTreeMap<_, _> = request.labels.into_iter().collect();
        validate::labels("labels", &labels).map_err(errors::invalid_input)?;
        let annotations: BTreeMap<_, _> = request.annotations.into_iter().collect();
        validate::annotations(&annotations).map_err(errors::invalid_input)?;
        let meta = request_meta(
            &request.request_id,
            &(
                "CreateSandbox",
                &workspace,
                &request.name,
                &spec,
                &labels,
                &annotations,
            ),
        )?;
        let command = Command::BeginCreate {
            id: uuid::Uuid::new_v4().to_string(),
            workspace,
            name: request.name.clone(),
            spec,
            labels,
            annotations,
            time_ms: meta.time_ms,
            host_identity: format!("ssh-host-{}", uuid::Uuid::new_v4().simple()),
            request: meta.clone(),
        };
        let settled = self.run_operation(command, &meta, request.no_wait).await?;
        self.projection_caught_up(wait_for_projection).await?;
        self.sandbox_answer(settled, "being created")
            .map(Response::new)
    }

    async fn get_sandbox(
        &self,
        request: Request<v1::GetSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        self.read_consistency(request.consistency).await?;
        self.replica
            .state
            .read(|applied| {
                find(&applied.state, &target)
                    .map(|sandbox| sandbox_to_proto(sandbox, applied.state.cluster.as_ref()))
            })
            .map(Response::new)
            .ok_or_else(|| errors::sandbox_not_found(describe(&target)))
    }
    async fn list_sandboxes(
        &self,
        request: Request<v1::ListSandboxesRequest>,
    ) -> Result<Response<v1::ListSandboxesResponse>, Status> {
        let request = request.into_inner();
        let page_size = validate::page_size(request.page_size).map_err(errors::invalid_input)?;
        let workspace = workspace_or_default(&request.workspace).to_string();
        if !request.all_workspaces {
            validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
        }
        let label_selector: BTreeMap<_, _> = request.label_selector.into_iter().collect();
        validate::labels("label_selector", &label_selector).map_err(errors::invalid_input)?;
        let mut phases = Vec::new();
        for phase in &request.phases {
            let phase = v1::SandboxPhase::try_from(*phase)
                .ok()
                .and_then(phase_from_proto)
                .ok_or_else(|| {
                    errors::invalid_input(validate::InvalidInput {
                        field: "phases",
                        problem: format!("unknown phase {phase}"),
                    })
                })?;
            phases.push(phase);
        }
        let after = decode_page_token(&request.page_token)?;
        self.read_consistency(request.consistency).await?;
        if request.source == v1::ListSource::Projection as i32 {
            let projection = self
                .replica
                .projection
                .as_ref()
                .ok_or_else(crate::projection::not_configured)?;
            // After a linearizable read the applied index covers every
            // acknowledged write: waiting for it gives read-your-writes.
            let read_index = if request.consistency == v1::Consistency::Stale as i32 {
                0
            } else {
                self.replica.state.applied_index()
            };
            let query = palisade_projection::SandboxQuery {
                workspace: (!request.all_workspaces).then(|| workspace.clone()),
                phases,
                label_selector,
                page_size,
                after,
            };
            let page = crate::projection::list_sandboxes(projection, &query, read_index).await?;
            let cluster = self.cluster();
            return Ok(Response::new(v1::ListSandboxesResponse {
                sandboxes: page
                    .sandboxes
                    .iter()
                    .map(|sandbox| sandbox_to_proto(sandbox, cluster.as_ref()))
                    .collect(),
                next_page_token: page
                    .next
                    .map(|(workspace, name)| encode_page_token(&workspace, &name))
                    .unwrap_or_default(),
            }));
        }
        let page = self.replica.state.read(|applied| {
            let state = &applied.state;
            if !request.all_workspaces && !state.workspaces.contains_key(&workspace) {
                return Err(errors::workspace_not_found(&workspace));
            }
            let mut sandboxes = Vec::new();
            let mut next_page_token = String::new();
            let keys = state.names.iter().flat_map(|(ws, names)| {
                names
                    .iter()
                    .map(move |(name, id)| ((ws.as_str(), name.as_str()), id))
            });
            for (key, id) in keys {
                if !request.all_workspaces && key.0 != workspace {
                    continue;
                }
                if let Some((after_ws, after_name)) = &after
                    && key <= (after_ws.as_str(), after_name.as_str())
                {
                    continue;
                }
                let sandbox = &state.sandboxes[id];
                if !phases.is_empty() && !phases.contains(&sandbox.phase) {
                    continue;
                }
                if !label_selector
                    .iter()
                    .all(|(k, v)| sandbox.labels.get(k) == Some(v))
                {
                    continue;
                }
                if sandboxes.len() == page_size {
                    let last: &v1::Sandbox = sandboxes.last().expect("page_size is at least 1");
                    let meta = last
                        .metadata
                        .as_ref()
                        .expect("converted sandboxes have metadata");
                    next_page_token = encode_page_token(&meta.workspace, &meta.name);
                    break;
                }
                sandboxes.push(sandbox_to_proto(sandbox, state.cluster.as_ref()));
            }
            Ok(v1::ListSandboxesResponse {
                sandboxes,
                next_page_token,
            })
        })?;
        Ok(Response::new(page))
    }
    async fn stop_sandbox(
        &self,
        request: Request<v1::StopSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let wait_for_projection = wants_projection(request.metadata());
        let request = request.into_inner();
        let call = ExecutionCall {
            rpc: "StopSandbox",
            sandbox: request.sandbox,
            expected_execution: request.expected_execution,
            request_id: request.request_id,
            no_wait: request.no_wait,
            wait_for_projection,
        };
        self.execution_call(call, |target, expected_execution, request| {
            Command::BeginStop {
                target,
                expected_execution,
                request,
            }
        })
        .await
    }

    async fn start_sandbox(
        &self,
        request: Request<v1::StartSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let wait_for_projection = wants_projection(request.metadata());
        let request = request.into_inner();
        let call = ExecutionCall {
            rpc: "StartSandbox",
            sandbox: request.sandbox,
            expected_execution: request.expected_execution,
            request_id: request.request_id,
            no_wait: request.no_wait,
            wait_for_projection,
        };
        self.execution_call(call, |target, expected_execution, request| {
            Command::BeginStart {
                target,
                expected_execution,
                request,
            }
        })
        .await
    }

    async fn delete_sandbox(
        &self,
        request: Request<v1::DeleteSandboxRequest>,
    ) -> Result<Response<v1::DeleteSandboxResponse>, Status> {
        let wait_for_projection = wants_projection(request.metadata());
        let request = request.into_inner();
        let (target, expected_execution) = target_and_execution(
            request.sandbox,
            &request.expected_execution,
            self.cluster().as_ref(),
        )?;
        let expected_sandbox_id = if request.expected_sandbox_id.is_empty() {
            None
        } else {
            if request.expected_sandbox_id.len() > 64 {
                return Err(errors::invalid_input(validate::InvalidInput {
                    field: "expected_sandbox_id",
                    problem: "longer than 64 characters".into(),
                }));
            }
            Some(request.expected_sandbox_id.clone())
        };
        let meta = request_meta(
            &request.request_id,
            &(
                "DeleteSandbox",
                &target,
                &expected_sandbox_id,
                &expected_execution,
            ),
        )?;
        let command = Command::BeginDelete {
            target,
            expected_sandbox_id,
            expected_execution,
            request: meta.clone(),
        };
        // Deleted means gone from the state: the driver confirmed absence of
        // every execution, then one entry removed the sandbox, its name and
        // its owned records.
        // Planted bug (c), test-only: answer "deleted" once the delete is
        // committed, before any cleanup (see `crate::planted`).
        let acknowledge_early = crate::planted::ack_delete_before_cleanup();
        let settled = self
            .run_operation(command, &meta, request.no_wait || acknowledge_early)
            .await?;
        self.projection_caught_up(wait_for_projection).await?;
        match settled {
            Settled::Gone { sandbox_id } => Ok(Response::new(v1::DeleteSandboxResponse {
                id: sandbox_id,
                deleted: true,
            })),
            Settled::Sandbox(sandbox) => Ok(Response::new(v1::DeleteSandboxResponse {
                id: sandbox.id.clone(),
                deleted: acknowledge_early,
            })),
        }
    }

    type WatchSandboxesStream =
        Pin<Box<dyn Stream<Item = Result<v1::SandboxEvent, Status>> + Send + 'static>>;

    async fn watch_sandboxes(
        &self,
        request: Request<v1::WatchSandboxesRequest>,
    ) -> Result<Response<Self::WatchSandboxesStream>, Status> {
        let request = request.into_inner();
        let workspace = workspace_or_default(&request.workspace).to_string();
        if request.sandbox_id.is_empty() && !request.all_workspaces {
            validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
        }
        // A watch resumed on another replica must not go back in time.
        self.replica.linearize().await?;
        let state = self.replica.state.clone();
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

    async fn create_ssh_session(
        &self,
        request: Request<v1::CreateSshSessionRequest>,
    ) -> Result<Response<v1::SshSession>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        let ttl_seconds = match request.ttl_seconds {
            0 => SESSION_TTL_SECONDS_DEFAULT,
            ttl if u64::from(ttl) > core::limits::SESSION_TTL_SECONDS_MAX => {
                return Err(errors::invalid_input(validate::InvalidInput {
                    field: "ttl_seconds",
                    problem: format!(
                        "{ttl} is longer than the maximum {}",
                        core::limits::SESSION_TTL_SECONDS_MAX
                    ),
                }));
            }
            ttl => ttl,
        };
        let token_bytes: [u8; 32] = rand::random();
        let session_token = format!("pss1.{}", hex::encode(token_bytes));
        let time_ms = now_ms();
        let expires_at_ms = time_ms + i64::from(ttl_seconds) * 1000;
        let session_id = uuid::Uuid::new_v4().to_string();
        let proposed = self
            .replica
            .propose(Command::CreateSshSession {
                target,
                session_id: session_id.clone(),
                token_sha256: hex::encode(Sha256::digest(session_token.as_bytes())),
                expires_at_ms,
                time_ms,
            })
            .await?;
        let Outcome::SshSessionCreated { sandbox_id, .. } =
            proposed.response.map_err(errors::rejection)?
        else {
            return Err(errors::unavailable(
                errors::INTERNAL,
                "unexpected apply outcome",
            ));
        };
        Ok(Response::new(v1::SshSession {
            id: session_id,
            sandbox_id,
            token: session_token,
            created_at_ms: time_ms,
            expires_at_ms,
        }))
    }

    async fn revoke_ssh_session(
        &self,
        request: Request<v1::RevokeSshSessionRequest>,
    ) -> Result<Response<v1::RevokeSshSessionResponse>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        if request.session_id.is_empty() || request.session_id.len() > 64 {
            return Err(errors::invalid_input(validate::InvalidInput {
                field: "session_id",
                problem: "must be 1 to 64 characters".into(),
            }));
        }
        let proposed = self
            .replica
            .propose(Command::RevokeSshSession {
                target,
                session_id: request.session_id,
            })
            .await?;
        proposed.response.map_err(errors::rejection)?;
        Ok(Response::new(v1::RevokeSshSessionResponse {}))
    }

    async fn list_ssh_sessions(
        &self,
        request: Request<v1::ListSshSessionsRequest>,
    ) -> Result<Response<v1::ListSshSessionsResponse>, Status> {
        let request = request.into_inner();
        let page_size = validate::page_size(request.page_size).map_err(errors::invalid_input)?;
        let after = decode_page_token(&request.page_token)?;
        self.read_consistency(request.consistency).await?;
        let sandbox_id = self.sandbox_id_of(request.sandbox)?;
        let page = self.replica.state.read(|applied| {
            let mut sessions = Vec::new();
            let mut next_page_token = String::new();
            if let Some(open) = applied.state.ssh_sessions.get(&sandbox_id) {
                for (id, session) in open {
                    if let Some((after_id, _)) = &after
                        && id <= after_id
                    {
                        continue;
                    }
                    if sessions.len() == page_size {
                        next_page_token = encode_page_token(&sessions_last_id(&sessions), "");
                        break;
                    }
                    sessions.push(v1::SshSession {
                        id: session.id.clone(),
                        sandbox_id: session.sandbox_id.clone(),
                        token: String::new(),
                        created_at_ms: session.created_at_ms,
                        expires_at_ms: session.expires_at_ms,
                    });
                }
            }
            v1::ListSshSessionsResponse {
                sessions,
                next_page_token,
            }
        });
        Ok(Response::new(page))
    }

    async fn set_sandbox_policy(
        &self,
        request: Request<v1::SetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        validate::policy_document(&request.document).map_err(errors::invalid_input)?;
        let time_ms = now_ms();
        let proposed = self
            .replica
            .propose(Command::SetSandboxPolicy {
                target,
                document: request.document.clone(),
                expected_version: request.expected_version,
                time_ms,
            })
            .await?;
        let Outcome::PolicySet {
            sandbox_id,
            version,
        } = proposed.response.map_err(errors::rejection)?
        else {
            return Err(errors::unavailable(
                errors::INTERNAL,
                "unexpected apply outcome",
            ));
        };
        Ok(Response::new(v1::SandboxPolicy {
            sandbox_id,
            version,
            document: request.document,
            updated_at_ms: time_ms,
        }))
    }

    async fn get_sandbox_policy(
        &self,
        request: Request<v1::GetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        let request = request.into_inner();
        self.read_consistency(request.consistency).await?;
        let sandbox_id = self.sandbox_id_of(request.sandbox)?;
        let policy = self.replica.state.read(|applied| {
            applied.state.policies.get(&sandbox_id).map_or_else(
                || v1::SandboxPolicy {
                    sandbox_id: sandbox_id.clone(),
                    ..Default::default()
                },
                |policy| v1::SandboxPolicy {
                    sandbox_id: sandbox_id.clone(),
                    version: policy.version,
                    document: policy.document.clone(),
                    updated_at_ms: policy.updated_at_ms,
                },
            )
        });
        Ok(Response::new(policy))
    }

    async fn create_workspace(
        &self,
        request: Request<v1::CreateWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        let request = request.into_inner();
        validate::name("name", &request.name).map_err(errors::invalid_input)?;
        let proposed = self
            .replica
            .propose(Command::CreateWorkspace {
                id: uuid::Uuid::new_v4().to_string(),
                name: request.name.clone(),
                time_ms: now_ms(),
            })
            .await?;
        proposed.response.map_err(errors::rejection)?;
        self.replica
            .state
            .read(|applied| {
                applied
                    .state
                    .workspaces
                    .get(&request.name)
                    .map(|ws| workspace_to_proto(ws, applied.state.sandbox_count(&ws.name)))
            })
            .map(Response::new)
            .ok_or_else(|| errors::workspace_not_found(&request.name))
    }
    async fn get_workspace(
        &self,
        request: Request<v1::GetWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        let request = request.into_inner();
        validate::name("name", &request.name).map_err(errors::invalid_input)?;
        self.read_consistency(request.consistency).await?;
        self.replica
            .state
            .read(|applied| {
                applied
                    .state
                    .workspaces
                    .get(&request.name)
                    .map(|ws| workspace_to_proto(ws, applied.state.sandbox_count(&ws.name)))
            })
            .map(Response::new)
            .ok_or_else(|| errors::workspace_not_found(&request.name))
    }
    async fn list_workspaces(
        &self,
        request: Request<v1::ListWorkspacesRequest>,
    ) -> Result<Response<v1::ListWorkspacesResponse>, Status> {
        let request = request.into_inner();
        let page_size = validate::page_size(request.page_size).map_err(errors::invalid_input)?;
        let after = decode_page_token(&request.page_token)?;
        self.read_consistency(request.consistency).await?;
        let page = self.replica.state.read(|applied| {
            let state = &applied.state;
            let mut workspaces = Vec::new();
            let mut next_page_token = String::new();
            for (name, ws) in &state.workspaces {
                if let Some((after_name, _)) = &after
                    && name <= after_name
                {
                    continue;
                }
                if workspaces.len() == page_size {
                    let last: &v1::Workspace = workspaces.last().expect("page_size is at least 1");
                    next_page_token = encode_page_token(&last.name, "");
                    break;
                }
                workspaces.push(workspace_to_proto(ws, state.sandbox_count(name)));
            }
            v1::ListWorkspacesResponse {
                workspaces,
                next_page_token,
            }
        });
        Ok(Response::new(page))
    }
    async fn delete_workspace(
        &self,
        request: Request<v1::DeleteWorkspaceRequest>,
    ) -> Result<Response<v1::DeleteWorkspaceResponse>, Status> {
        let request = request.into_inner();
        validate::name("name", &request.name).map_err(errors::invalid_input)?;
        let proposed = self
            .replica
            .propose(Command::DeleteWorkspace {
                name: request.name.clone(),
            })
            .await?;
        match proposed.response.map_err(errors::rejection)? {
            Outcome::WorkspaceTerminating {
                name,
                remaining,
                remaining_count,
            } => Err(errors::status(
                Code::FailedPrecondition,
                "WORKSPACE_NOT_EMPTY",
                format!(
                    "workspace {name:?} is TERMINATING (no new sandboxes) but still holds {remaining_count} sandbox(es): {}{}; delete them, then retry",
                    remaining.join(", "),
                    if remaining_count > remaining.len() {
                        ", ..."
                    } else {
                        ""
                    }
                ),
                [
                    ("remaining_count", remaining_count.to_string()),
                    ("remaining", remaining.join(",")),
                ],
            )),
            _ => Ok(Response::new(v1::DeleteWorkspaceResponse {
                name: request.name,
            })),
        }
    }
}

fn sessions_last_id(sessions: &[v1::SshSession]) -> String {
    sessions
        .last()
        .map(|session| session.id.clone())
        .unwrap_or_default()
}

/// Page tokens are opaque to clients: hex of "workspace/name" of the last
/// item of the previous page.
fn encode_page_token(workspace: &str, name: &str) -> String {
    format!("{workspace}/{name}")
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn decode_page_token(token: &str) -> Result<Option<(String, String)>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || {
        errors::invalid_input(validate::InvalidInput {
            field: "page_token",
            problem: "not a token this server issued; pass next_page_token unchanged".into(),
        })
    };
    if !token.len().is_multiple_of(2) || token.len() > 512 {
        return Err(bad());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&token[at..at + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (workspace, name) = text.split_once('/').ok_or_else(bad)?;
    Ok(Some((workspace.to_string(), name.to_string())))
}
