//! The public `palisade.v1` gRPC services: input validation at the edge,
//! then a proposal (writes) or a read of the applied state (reads).
//!
//! A write handler proposes a `Begin*` command, then waits on the applied
//! state until the operation it began (identified by sandbox id and
//! generation) is over: the executor on the leader drives it there.
//!
//! # Layout
//!
//! - `request`: plumbing several resources share: request ids and payload
//!   digests (receipts), running an operation to its receipt, read
//!   consistency, the wait-for-projection header, page tokens.
//! - `sandboxes`: Create, Get, List, Stop, Start and Delete sandbox;
//!   resolving sandbox references and execution tokens.
//! - `watch`: WatchSandboxes; `watch_feed`: the watcher limit and the
//!   change feed every watcher shares.
//! - `owned`: the records a sandbox owns: SSH sessions, its policy.
//! - `workspaces`: Create, Get, List and Delete workspace.
//! - `data_plane`: SandboxLogs and ExecSandbox, served through this
//!   replica's own compute driver (see there which replica serves).
//!
//! The `Palisade` impl below checks the caller's role ([`crate::auth`]:
//! admin, editor or viewer of the workspace involved) and delegates, so
//! the whole service surface and who may call it read in one place.

mod data_plane;
mod owned;
mod request;
mod sandboxes;
mod watch;
pub mod watch_feed;
mod workspaces;

use palisade_lifecycle::ClusterIdentity;
use palisade_proto::encoded::palisade_server::Palisade;
use palisade_proto::v1;
use tonic::{Request, Response, Status};

use crate::auth::Caller;
use crate::errors;
use crate::replica::Replica;

/// What a request does to the sandbox it names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    View,
    Edit,
}

pub use request::WAIT_FOR_PROJECTION_HEADER;

/// Implements `palisade.v1.Palisade` (`palisade.v1.ClusterAdmin` is
/// [`crate::admin::AdminService`]).
#[derive(Clone)]
pub struct PalisadeService {
    replica: Replica,
    data_plane: data_plane::DataPlane,
    watch_feed: watch_feed::WatchFeed,
}

impl PalisadeService {
    /// A service answering through `replica`; logs and exec go through
    /// `driver` (the replica's compute driver).
    pub fn new(
        replica: Replica,
        driver: std::sync::Arc<dyn palisade_driver::ComputeDriver>,
    ) -> Self {
        Self {
            data_plane: data_plane::DataPlane::new(driver),
            watch_feed: watch_feed::WatchFeed::new(
                watch_feed::WATCHERS_MAX_DEFAULT,
                watch_feed::WATCH_EVENTS_PER_SECOND_MAX_DEFAULT,
                replica.metrics.clone(),
            ),
            replica,
        }
    }

    /// Serves at most `watchers_max` WatchSandboxes streams at once
    /// (`--watchers-max`; one beyond it is refused with
    /// RESOURCE_EXHAUSTED), and sends them together at most
    /// `events_per_second_max` changes a second
    /// (`--watch-events-per-second-max`).
    pub fn with_watch_limits(mut self, watchers_max: usize, events_per_second_max: u64) -> Self {
        self.watch_feed = watch_feed::WatchFeed::new(
            watchers_max,
            events_per_second_max,
            self.replica.metrics.clone(),
        );
        self
    }

    /// The replica this service answers through.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Whether `caller` may act on the sandbox `reference` names. By id, the
    /// sandbox's own workspace decides, and a sandbox of a workspace the
    /// caller may not see answers NOT_FOUND, as if it did not exist (a
    /// sandbox never changes workspace, so a local hit is authoritative; a
    /// miss is confirmed after a read index). By name, the named workspace
    /// decides (PERMISSION_DENIED: the caller named it). A missing
    /// reference is left to the handler's validation.
    async fn authorize_sandbox(
        &self,
        caller: &Caller,
        reference: Option<&v1::SandboxRef>,
        access: Access,
    ) -> Result<(), Status> {
        let Some(reference) = reference else {
            return Ok(());
        };
        if reference.id.is_empty() {
            let workspace = request::workspace_or_default(&reference.workspace);
            return match access {
                Access::View => caller.require_view(workspace),
                Access::Edit => caller.require_edit(workspace),
            };
        }
        let workspace_of = || {
            self.replica.state.read(|applied| {
                applied
                    .state
                    .sandboxes
                    .get(&reference.id)
                    .map(|sandbox| sandbox.workspace.clone())
            })
        };
        let mut workspace = workspace_of();
        if workspace.is_none() && !caller.is_admin() {
            self.replica.linearize().await?;
            workspace = workspace_of();
        }
        let Some(workspace) = workspace else {
            return Ok(()); // the handler answers NOT_FOUND
        };
        if !caller.may_view(&workspace) {
            return Err(errors::sandbox_not_found(format!(
                "with id {}",
                reference.id
            )));
        }
        match access {
            Access::View => Ok(()),
            Access::Edit => caller.require_edit(&workspace),
        }
    }

    fn cluster(&self) -> Option<ClusterIdentity> {
        self.replica
            .state
            .read(|applied| applied.state.cluster.clone())
    }

    /// The cluster's identity (token keys) and the replicated clock, read
    /// together.
    fn cluster_and_clock(&self) -> (Option<ClusterIdentity>, i64) {
        self.replica
            .state
            .read(|applied| (applied.state.cluster.clone(), applied.state.clock_ms))
    }
}

#[tonic::async_trait]
impl Palisade for PalisadeService {
    async fn create_sandbox(
        &self,
        request: Request<v1::CreateSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let caller = Caller::of(&request)?;
        caller.require_edit(request::workspace_or_default(
            request.get_ref().workspace.as_str(),
        ))?;
        crate::auth::as_caller(caller, sandboxes::create(self, request)).await
    }

    async fn get_sandbox(
        &self,
        request: Request<v1::GetSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::View)
            .await?;
        crate::auth::as_caller(caller, sandboxes::get(self, request)).await
    }

    async fn list_sandboxes(
        &self,
        request: Request<v1::ListSandboxesRequest>,
    ) -> Result<Response<v1::ListSandboxesResponse>, Status> {
        let caller = Caller::of(&request)?;
        let (all_workspaces, workspace) = (
            request.get_ref().all_workspaces,
            request.get_ref().workspace.as_str(),
        );
        if all_workspaces {
            caller.require_admin("all_workspaces")?;
        } else {
            caller.require_view(request::workspace_or_default(workspace))?;
        }
        crate::auth::as_caller(caller, sandboxes::list(self, request)).await
    }

    async fn stop_sandbox(
        &self,
        request: Request<v1::StopSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, sandboxes::stop(self, request)).await
    }

    async fn start_sandbox(
        &self,
        request: Request<v1::StartSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, sandboxes::start(self, request)).await
    }

    async fn delete_sandbox(
        &self,
        request: Request<v1::DeleteSandboxRequest>,
    ) -> Result<Response<v1::DeleteSandboxResponse>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, sandboxes::delete(self, request)).await
    }

    type WatchSandboxesStream = watch::EventStream;

    type SandboxLogsStream = data_plane::LogChunkStream;

    async fn sandbox_logs(
        &self,
        request: Request<v1::SandboxLogsRequest>,
    ) -> Result<Response<Self::SandboxLogsStream>, Status> {
        data_plane::logs(self, request).await
    }

    type ExecSandboxStream = data_plane::ExecOutputStream;

    async fn exec_sandbox(
        &self,
        request: Request<v1::ExecSandboxRequest>,
    ) -> Result<Response<Self::ExecSandboxStream>, Status> {
        data_plane::exec(self, request).await
    }

    async fn watch_sandboxes(
        &self,
        request: Request<v1::WatchSandboxesRequest>,
    ) -> Result<Response<Self::WatchSandboxesStream>, Status> {
        let caller = Caller::of(&request)?;
        let asked = request.get_ref();
        if !asked.sandbox_id.is_empty() {
            let by_id = v1::SandboxRef {
                id: asked.sandbox_id.clone(),
                ..Default::default()
            };
            self.authorize_sandbox(&caller, Some(&by_id), Access::View)
                .await?;
        } else if asked.all_workspaces {
            caller.require_admin("all_workspaces")?;
        } else {
            caller.require_view(request::workspace_or_default(&asked.workspace))?;
        }
        crate::auth::as_caller(caller, watch::sandboxes(self, request)).await
    }

    async fn create_ssh_session(
        &self,
        request: Request<v1::CreateSshSessionRequest>,
    ) -> Result<Response<v1::SshSession>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, owned::create_ssh_session(self, request)).await
    }

    async fn revoke_ssh_session(
        &self,
        request: Request<v1::RevokeSshSessionRequest>,
    ) -> Result<Response<v1::RevokeSshSessionResponse>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, owned::revoke_ssh_session(self, request)).await
    }

    async fn list_ssh_sessions(
        &self,
        request: Request<v1::ListSshSessionsRequest>,
    ) -> Result<Response<v1::ListSshSessionsResponse>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::View)
            .await?;
        crate::auth::as_caller(caller, owned::list_ssh_sessions(self, request)).await
    }

    async fn set_sandbox_policy(
        &self,
        request: Request<v1::SetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::Edit)
            .await?;
        crate::auth::as_caller(caller, owned::set_sandbox_policy(self, request)).await
    }

    async fn get_sandbox_policy(
        &self,
        request: Request<v1::GetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        let caller = Caller::of(&request)?;
        self.authorize_sandbox(&caller, request.get_ref().sandbox.as_ref(), Access::View)
            .await?;
        crate::auth::as_caller(caller, owned::get_sandbox_policy(self, request)).await
    }

    async fn create_workspace(
        &self,
        request: Request<v1::CreateWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        let caller = Caller::of(&request)?;
        caller.require_admin("create_workspace")?;
        crate::auth::as_caller(caller, workspaces::create(self, request)).await
    }

    async fn get_workspace(
        &self,
        request: Request<v1::GetWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        let caller = Caller::of(&request)?;
        caller.require_view(request::workspace_or_default(
            request.get_ref().name.as_str(),
        ))?;
        crate::auth::as_caller(caller, workspaces::get(self, request)).await
    }

    async fn list_workspaces(
        &self,
        request: Request<v1::ListWorkspacesRequest>,
    ) -> Result<Response<v1::ListWorkspacesResponse>, Status> {
        let caller = Caller::of(&request)?;
        // Everyone may list; each sees only the workspaces it has a role in.
        let mut listed =
            crate::auth::as_caller(caller.clone(), workspaces::list(self, request)).await?;
        listed
            .get_mut()
            .workspaces
            .retain(|workspace| caller.may_view(&workspace.name));
        Ok(listed)
    }

    async fn delete_workspace(
        &self,
        request: Request<v1::DeleteWorkspaceRequest>,
    ) -> Result<Response<v1::DeleteWorkspaceResponse>, Status> {
        let caller = Caller::of(&request)?;
        caller.require_admin("delete_workspace")?;
        crate::auth::as_caller(caller, workspaces::delete(self, request)).await
    }
}
