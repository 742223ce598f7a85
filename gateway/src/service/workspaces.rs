//! Workspace handlers: Create, Get, List, Delete.

use palisade_lifecycle::{Command, Outcome, validate};
use palisade_proto::v1;
use tonic::{Code, Request, Response, Status};

use super::PalisadeService;
use super::request::{decode_page_token, encode_page_token};
use crate::convert::workspace_to_proto;
use crate::errors;

pub(super) async fn create(
    service: &PalisadeService,
    request: Request<v1::CreateWorkspaceRequest>,
) -> Result<Response<v1::Workspace>, Status> {
    let request = request.into_inner();
    validate::name("name", &request.name).map_err(errors::invalid_input)?;
    let proposed = service
        .replica
        .propose(Command::CreateWorkspace {
            id: crate::ids::new_uuid().to_string(),
            name: request.name.clone(),
            time_ms: service.now_ms(),
        })
        .await?;
    proposed.response.map_err(errors::rejection)?;
    service
        .replica
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

pub(super) async fn get(
    service: &PalisadeService,
    request: Request<v1::GetWorkspaceRequest>,
) -> Result<Response<v1::Workspace>, Status> {
    let request = request.into_inner();
    validate::name("name", &request.name).map_err(errors::invalid_input)?;
    service.read_consistency(request.consistency).await?;
    service
        .replica
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

pub(super) async fn list(
    service: &PalisadeService,
    request: Request<v1::ListWorkspacesRequest>,
) -> Result<Response<v1::ListWorkspacesResponse>, Status> {
    let request = request.into_inner();
    let page_size = validate::page_size(request.page_size).map_err(errors::invalid_input)?;
    let after = decode_page_token(&request.page_token)?;
    service.read_consistency(request.consistency).await?;
    let page = service.replica.state.read(|applied| {
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

pub(super) async fn delete(
    service: &PalisadeService,
    request: Request<v1::DeleteWorkspaceRequest>,
) -> Result<Response<v1::DeleteWorkspaceResponse>, Status> {
    let request = request.into_inner();
    validate::name("name", &request.name).map_err(errors::invalid_input)?;
    let proposed = service
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
