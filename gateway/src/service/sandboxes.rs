//! Sandbox handlers (Create, Get, List, Stop, Start, Delete) and resolving
//! what a request targets: a sandbox reference, or an execution token.

use std::collections::BTreeMap;

use palisade_lifecycle::selector::Selector;
use palisade_lifecycle::{
    self as core, ClusterIdentity, Command, ExecutionRef, RequestMeta, SandboxTarget, State,
    limits, validate,
};
use palisade_proto::v1;
use tonic::{Request, Response, Status};

use super::PalisadeService;
use super::request::{
    Settled, decode_page_token, encode_page_token, request_meta, wants_projection,
    workspace_or_default,
};
use crate::convert::{phase_from_proto, sandbox_to_proto, spec_from_proto};
use crate::errors;
use crate::token;
use palisade_lifecycle::limits::LIST_PAGE_BYTES_MAX;

/// Validates a sandbox reference: an id, or a name (with a workspace).
pub(super) fn target_from_ref(sandbox: Option<v1::SandboxRef>) -> Result<SandboxTarget, Status> {
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

pub(super) fn find<'a>(state: &'a State, target: &SandboxTarget) -> Option<&'a core::Sandbox> {
    match target {
        SandboxTarget::Id(id) => state.sandboxes.get(id).map(|sandbox| &**sandbox),
        SandboxTarget::Name { workspace, name } => state.sandbox_by_name(workspace, name),
    }
}

pub(super) fn describe(target: &SandboxTarget) -> String {
    match target {
        SandboxTarget::Id(id) => format!("with id {id}"),
        SandboxTarget::Name { workspace, name } => {
            format!("named {name:?} in workspace {workspace:?}")
        }
    }
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

/// Resolves the target of Stop/Start/Delete: the reference, or the
/// sandbox the execution token names; and the verified token's execution.
/// The expected execution as a request's payload digest sees it: which key
/// verified the token is not part of what the client asked (a retry of the
/// same request must match its receipt whichever key verified it).
fn digest_view(expected_execution: &Option<ExecutionRef>) -> Option<ExecutionRef> {
    expected_execution.clone().map(|execution| ExecutionRef {
        key_id: None,
        ..execution
    })
}

/// `cluster` and `clock_ms` are this replica's applied view: a retired
/// token key verifies until the replicated clock reaches its deadline.
fn target_and_execution(
    sandbox: Option<v1::SandboxRef>,
    expected_execution: &str,
    (cluster, clock_ms): (Option<&ClusterIdentity>, i64),
) -> Result<(SandboxTarget, Option<ExecutionRef>), Status> {
    let execution = if expected_execution.is_empty() {
        None
    } else {
        Some(token::verify(cluster, clock_ms, expected_execution)?)
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
    /// Runs a Stop or Start: resolves the target and the token, proposes
    /// the command `begin` builds, waits for the request's receipt.
    async fn execution_call(
        &self,
        call: ExecutionCall,
        begin: impl FnOnce(SandboxTarget, Option<ExecutionRef>, RequestMeta) -> Command,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let (cluster, clock_ms) = self.cluster_and_clock();
        let (target, expected_execution) = target_and_execution(
            call.sandbox,
            &call.expected_execution,
            (cluster.as_ref(), clock_ms),
        )?;
        let meta = request_meta(
            self.now_ms(),
            &call.request_id,
            &(call.rpc, &target, &digest_view(&expected_execution)),
        )?;
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
    pub(super) fn sandbox_id_of(&self, sandbox: Option<v1::SandboxRef>) -> Result<String, Status> {
        let target = target_from_ref(sandbox)?;
        self.replica
            .state
            .read(|applied| find(&applied.state, &target).map(|sandbox| sandbox.id.clone()))
            .ok_or_else(|| errors::sandbox_not_found(describe(&target)))
    }
}

pub(super) async fn create(
    service: &PalisadeService,
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
    container_fields_supported(service, &spec)?;
    let labels: BTreeMap<_, _> = request.labels.into_iter().collect();
    validate::labels("labels", &labels).map_err(errors::invalid_input)?;
    let annotations: BTreeMap<_, _> = request.annotations.into_iter().collect();
    validate::annotations(&annotations).map_err(errors::invalid_input)?;
    let meta = request_meta(
        service.now_ms(),
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
        id: crate::ids::new_uuid().to_string(),
        workspace,
        name: request.name.clone(),
        spec,
        labels,
        annotations,
        time_ms: meta.time_ms,
        host_identity: format!("ssh-host-{}", crate::ids::new_uuid().simple()),
        request: meta.clone(),
    };
    let settled = service
        .run_operation(command, &meta, request.no_wait)
        .await?;
    service.projection_caught_up(wait_for_projection).await?;
    service
        .sandbox_answer(settled, "being created")
        .map(Response::new)
}

/// Refuses what the cluster's driver cannot run (an image, limits, a working
/// directory on the process driver) instead of ignoring it.
fn container_fields_supported(
    service: &PalisadeService,
    spec: &palisade_lifecycle::SandboxSpec,
) -> Result<(), Status> {
    if service.replica.driver_runs_containers {
        return Ok(());
    }
    let driver = service.replica.driver_name;
    let asked = [
        ("spec.image", !spec.image.is_empty(), "an image"),
        ("spec.cpus", spec.cpu_millis != 0, "a CPU limit"),
        (
            "spec.memory_bytes",
            spec.memory_bytes != 0,
            "a memory limit",
        ),
        (
            "spec.workdir",
            !spec.workdir.is_empty(),
            "a working directory",
        ),
    ];
    match asked.iter().find(|(_, set, _)| *set) {
        None => Ok(()),
        Some((field, _, what)) => Err(errors::invalid_input(validate::InvalidInput {
            field,
            problem: format!(
                "this cluster's compute driver ({driver}) runs host processes and cannot take \
                 {what}; leave it out, or run the cluster with --driver docker"
            ),
        })),
    }
}

pub(super) async fn get(
    service: &PalisadeService,
    request: Request<v1::GetSandboxRequest>,
) -> Result<Response<v1::Sandbox>, Status> {
    let request = request.into_inner();
    let target = target_from_ref(request.sandbox)?;
    service.read_consistency(request.consistency).await?;
    service
        .replica
        .state
        .read(|applied| {
            find(&applied.state, &target)
                .map(|sandbox| sandbox_to_proto(sandbox, applied.state.cluster.as_ref()))
        })
        .map(Response::new)
        .ok_or_else(|| errors::sandbox_not_found(describe(&target)))
}

pub(super) async fn list(
    service: &PalisadeService,
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
    let expression = Selector::parse("label_expression", &request.label_expression)
        .map_err(errors::invalid_input)?;
    if request.older_than_seconds > limits::OLDER_THAN_SECONDS_MAX {
        return Err(errors::invalid_input(validate::InvalidInput {
            field: "older_than_seconds",
            problem: format!(
                "{} seconds; at most {} (ten years) are allowed",
                request.older_than_seconds,
                limits::OLDER_THAN_SECONDS_MAX
            ),
        }));
    }
    let older_than_ms = i64::try_from(request.older_than_seconds * 1000)
        .expect("bounded by OLDER_THAN_SECONDS_MAX");
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
    let source = v1::ListSource::try_from(request.source).map_err(|_| {
        errors::invalid_input(validate::InvalidInput {
            field: "source",
            problem: format!(
                "unknown value {}; use LIST_SOURCE_STATE or LIST_SOURCE_PROJECTION",
                request.source
            ),
        })
    })?;
    let read_index = service.read_consistency(request.consistency).await?;
    if source == v1::ListSource::Projection {
        if !expression.is_empty() || older_than_ms > 0 {
            // The projection's query filters by phase and label equality
            // only; filtering its pages here would break its pagination.
            return Err(errors::invalid_input(validate::InvalidInput {
                field: "source",
                problem: "label_expression and older_than_seconds are served from the \
                          replicated state only; use LIST_SOURCE_STATE (the default) or \
                          label_selector equality with the projection"
                    .into(),
            }));
        }
        let projection = service
            .replica
            .projection
            .as_ref()
            .ok_or_else(crate::projection::not_configured)?;
        // The read index covers every write acknowledged before this
        // request (0 for a stale read): waiting for the projection to reach
        // it gives read-your-writes, and no wait for writes that came later
        // (the applied index may already include a large delete's cleanup).
        let query = palisade_projection::SandboxQuery {
            workspace: (!request.all_workspaces).then(|| workspace.clone()),
            phases,
            label_selector,
            page_size,
            after,
        };
        let page = crate::projection::list_sandboxes(projection, &query, read_index).await?;
        let cluster = service.cluster();
        let mut sandboxes = Vec::new();
        let mut page_bytes = 0;
        for sandbox in &page.sandboxes {
            let item = sandbox_to_proto(sandbox, cluster.as_ref());
            let item_bytes = prost::Message::encoded_len(&item);
            if !sandboxes.is_empty() && page_bytes + item_bytes > LIST_PAGE_BYTES_MAX {
                // Cut by bytes: the next page starts after the last kept.
                let next_page_token = page_token_after(&sandboxes);
                return Ok(Response::new(v1::ListSandboxesResponse {
                    sandboxes,
                    next_page_token,
                }));
            }
            page_bytes += item_bytes;
            sandboxes.push(item);
        }
        return Ok(Response::new(v1::ListSandboxesResponse {
            sandboxes,
            next_page_token: page
                .next
                .map(|(workspace, name)| encode_page_token(&workspace, &name))
                .unwrap_or_default(),
        }));
    }
    let page = service.replica.state.read(|applied| {
        let state = &applied.state;
        if !request.all_workspaces && !state.workspaces.contains_key(&workspace) {
            return Err(errors::workspace_not_found(&workspace));
        }
        // "Older than" on the replicated clock, the clock that stamped
        // every `created_at_ms`: the same answer on every replica.
        let created_before_ms = state.clock_ms.saturating_sub(older_than_ms);
        let mut sandboxes = Vec::new();
        let mut page_bytes = 0;
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
                || !expression.matches(&sandbox.labels)
            {
                continue;
            }
            if older_than_ms > 0 && sandbox.created_at_ms > created_before_ms {
                continue;
            }
            let item = sandbox_to_proto(sandbox, state.cluster.as_ref());
            let item_bytes = prost::Message::encoded_len(&item);
            if sandboxes.len() == page_size
                || (!sandboxes.is_empty() && page_bytes + item_bytes > LIST_PAGE_BYTES_MAX)
            {
                next_page_token = page_token_after(&sandboxes);
                break;
            }
            page_bytes += item_bytes;
            sandboxes.push(item);
        }
        Ok(v1::ListSandboxesResponse {
            sandboxes,
            next_page_token,
        })
    })?;
    Ok(Response::new(page))
}

/// The page token that continues after the last sandbox of a page.
fn page_token_after(page: &[v1::Sandbox]) -> String {
    let last = page
        .last()
        .expect("a page that is cut holds at least one sandbox");
    let meta = last
        .metadata
        .as_ref()
        .expect("converted sandboxes have metadata");
    encode_page_token(&meta.workspace, &meta.name)
}

pub(super) async fn stop(
    service: &PalisadeService,
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
    service
        .execution_call(call, |target, expected_execution, request| {
            Command::BeginStop {
                target,
                expected_execution,
                request,
            }
        })
        .await
}

pub(super) async fn start(
    service: &PalisadeService,
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
    service
        .execution_call(call, |target, expected_execution, request| {
            Command::BeginStart {
                target,
                expected_execution,
                request,
            }
        })
        .await
}

pub(super) async fn delete(
    service: &PalisadeService,
    request: Request<v1::DeleteSandboxRequest>,
) -> Result<Response<v1::DeleteSandboxResponse>, Status> {
    let wait_for_projection = wants_projection(request.metadata());
    let request = request.into_inner();
    let (cluster, clock_ms) = service.cluster_and_clock();
    let (target, expected_execution) = target_and_execution(
        request.sandbox,
        &request.expected_execution,
        (cluster.as_ref(), clock_ms),
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
        service.now_ms(),
        &request.request_id,
        &(
            "DeleteSandbox",
            &target,
            &expected_sandbox_id,
            &digest_view(&expected_execution),
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
    let settled = service
        .run_operation(command, &meta, request.no_wait || acknowledge_early)
        .await?;
    service.projection_caught_up(wait_for_projection).await?;
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
