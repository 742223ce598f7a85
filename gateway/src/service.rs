//! The public `palisade.v1` gRPC services: input validation at the edge,
//! then a proposal (writes) or a read of the applied state (reads).
//!
//! A write handler proposes a `Begin*` command, then waits on the applied
//! state until the operation it began (identified by sandbox id and
//! generation) is over: the executor on the leader drives it there.

use std::collections::BTreeMap;

use palisade_lifecycle::{
    self as core, Command, OperationKind, Outcome, SandboxTarget, State, validate,
};
use palisade_proto::v1::{self, palisade_server::Palisade};
use tonic::{Request, Response, Status};

use crate::convert::{phase_from_proto, sandbox_to_proto, spec_from_proto, workspace_to_proto};
use crate::errors;
use crate::replica::Replica;

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

/// The operation a `Begin*` outcome is about, if one is in flight.
fn begun_operation(outcome: &Outcome) -> Option<(String, OperationKind, u64)> {
    match outcome {
        Outcome::OperationBegun {
            sandbox_id,
            kind,
            generation,
        }
        | Outcome::OperationJoined {
            sandbox_id,
            kind,
            generation,
        } => Some((sandbox_id.clone(), *kind, *generation)),
        _ => None,
    }
}

fn outcome_sandbox_id(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::OperationBegun { sandbox_id, .. }
        | Outcome::OperationJoined { sandbox_id, .. }
        | Outcome::AlreadyDone { sandbox_id }
        | Outcome::Completed { sandbox_id }
        | Outcome::Ignored { sandbox_id } => Some(sandbox_id),
        _ => None,
    }
}

/// What a finished wait found.
enum Settled {
    Sandbox(Box<core::Sandbox>),
    Gone,
}

impl PalisadeService {
    /// Proposes a `Begin*` command and, unless `no_wait`, waits until the
    /// operation it began is over. Returns the sandbox as it then is (or
    /// `Gone` once a delete finished).
    async fn run_operation(&self, command: Command, no_wait: bool) -> Result<Settled, Status> {
        let proposed = self.replica.propose(command).await?;
        let outcome = proposed.response.map_err(errors::rejection)?;
        let sandbox_id = outcome_sandbox_id(&outcome)
            .ok_or_else(|| errors::unavailable(errors::INTERNAL, "unexpected apply outcome"))?
            .to_string();
        let operation = begun_operation(&outcome).filter(|_| !no_wait);
        let settled = self
            .replica
            .wait_until(proposed.proposed_as_leader_in, |applied| {
                let sandbox = applied.state.sandboxes.get(&sandbox_id);
                let Some(sandbox) = sandbox else {
                    return Some(Settled::Gone);
                };
                let in_flight = operation.as_ref().is_some_and(|(_, kind, generation)| {
                    sandbox
                        .operation
                        .as_ref()
                        .is_some_and(|op| op.kind == *kind && op.generation == *generation)
                });
                (!in_flight).then(|| Settled::Sandbox(Box::new(sandbox.clone())))
            })
            .await?;
        Ok(settled)
    }
}

#[tonic::async_trait]
impl Palisade for PalisadeService {
    async fn create_sandbox(
        &self,
        request: Request<v1::CreateSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let request = request.into_inner();
        let workspace = workspace_or_default(&request.workspace).to_string();
        validate::name("workspace", &workspace).map_err(errors::invalid_input)?;
        validate::name("name", &request.name).map_err(errors::invalid_input)?;
        let spec = spec_from_proto(request.spec);
        validate::spec(&spec).map_err(errors::invalid_input)?;
        let labels: BTreeMap<_, _> = request.labels.into_iter().collect();
        validate::labels("labels", &labels).map_err(errors::invalid_input)?;
        let annotations: BTreeMap<_, _> = request.annotations.into_iter().collect();
        validate::annotations(&annotations).map_err(errors::invalid_input)?;
        let command = Command::BeginCreate {
            id: uuid::Uuid::new_v4().to_string(),
            workspace,
            name: request.name.clone(),
            spec,
            labels,
            annotations,
            time_ms: now_ms(),
        };
        match self.run_operation(command, request.no_wait).await? {
            Settled::Sandbox(sandbox) => Ok(Response::new(sandbox_to_proto(&sandbox))),
            Settled::Gone => Err(errors::sandbox_not_found(format!(
                "named {:?}: it was deleted while being created",
                request.name
            ))),
        }
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
            .read(|applied| find(&applied.state, &target).map(sandbox_to_proto))
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
                sandboxes.push(sandbox_to_proto(sandbox));
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
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        let described = describe(&target);
        match self
            .run_operation(Command::BeginStop { target }, request.no_wait)
            .await?
        {
            Settled::Sandbox(sandbox) => Ok(Response::new(sandbox_to_proto(&sandbox))),
            Settled::Gone => Err(errors::sandbox_not_found(format!(
                "{described}: it was deleted while stopping"
            ))),
        }
    }

    async fn start_sandbox(
        &self,
        request: Request<v1::StartSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        let described = describe(&target);
        match self
            .run_operation(Command::BeginStart { target }, request.no_wait)
            .await?
        {
            Settled::Sandbox(sandbox) => Ok(Response::new(sandbox_to_proto(&sandbox))),
            Settled::Gone => Err(errors::sandbox_not_found(format!(
                "{described}: it was deleted while starting"
            ))),
        }
    }

    async fn delete_sandbox(
        &self,
        request: Request<v1::DeleteSandboxRequest>,
    ) -> Result<Response<v1::DeleteSandboxResponse>, Status> {
        let request = request.into_inner();
        let target = target_from_ref(request.sandbox)?;
        let proposed = self
            .replica
            .propose(Command::BeginDelete {
                target: target.clone(),
            })
            .await?;
        let outcome = proposed.response.map_err(errors::rejection)?;
        let sandbox_id = outcome_sandbox_id(&outcome)
            .ok_or_else(|| errors::unavailable(errors::INTERNAL, "unexpected apply outcome"))?
            .to_string();
        if request.no_wait {
            return Ok(Response::new(v1::DeleteSandboxResponse {
                id: sandbox_id,
                deleted: false,
            }));
        }
        // Deleted means gone from the state: the driver confirmed absence of
        // every execution, then one entry removed the sandbox and its name.
        self.replica
            .wait_until(proposed.proposed_as_leader_in, |applied| {
                (!applied.state.sandboxes.contains_key(&sandbox_id)).then_some(())
            })
            .await?;
        Ok(Response::new(v1::DeleteSandboxResponse {
            id: sandbox_id,
            deleted: true,
        }))
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
        proposed.response.map_err(errors::rejection)?;
        Ok(Response::new(v1::DeleteWorkspaceResponse {
            name: request.name,
        }))
    }
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
