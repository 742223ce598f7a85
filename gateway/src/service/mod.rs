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
//! - `watch`: WatchSandboxes.
//! - `owned`: the records a sandbox owns: SSH sessions, its policy.
//! - `workspaces`: Create, Get, List and Delete workspace.
//! - `data_plane`: SandboxLogs and ExecSandbox, served through this
//!   replica's own compute driver (see there which replica serves).
//!
//! The `Palisade` impl below only delegates, so the whole service surface
//! reads in one place.

mod data_plane;
mod owned;
mod request;
mod sandboxes;
mod watch;
mod workspaces;

use palisade_lifecycle::ClusterIdentity;
use palisade_proto::v1::{self, palisade_server::Palisade};
use tonic::{Request, Response, Status};

use crate::replica::Replica;

pub use request::WAIT_FOR_PROJECTION_HEADER;

/// Implements `palisade.v1.Palisade` (`palisade.v1.ClusterAdmin` is
/// [`crate::admin::AdminService`]).
#[derive(Clone)]
pub struct PalisadeService {
    replica: Replica,
    data_plane: data_plane::DataPlane,
}

impl PalisadeService {
    /// A service answering through `replica`; logs and exec go through
    /// `driver` (the replica's compute driver).
    pub fn new(
        replica: Replica,
        driver: std::sync::Arc<dyn palisade_driver::ComputeDriver>,
    ) -> Self {
        Self {
            replica,
            data_plane: data_plane::DataPlane::new(driver),
        }
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
}

#[tonic::async_trait]
impl Palisade for PalisadeService {
    async fn create_sandbox(
        &self,
        request: Request<v1::CreateSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        sandboxes::create(self, request).await
    }

    async fn get_sandbox(
        &self,
        request: Request<v1::GetSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        sandboxes::get(self, request).await
    }

    async fn list_sandboxes(
        &self,
        request: Request<v1::ListSandboxesRequest>,
    ) -> Result<Response<v1::ListSandboxesResponse>, Status> {
        sandboxes::list(self, request).await
    }

    async fn stop_sandbox(
        &self,
        request: Request<v1::StopSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        sandboxes::stop(self, request).await
    }

    async fn start_sandbox(
        &self,
        request: Request<v1::StartSandboxRequest>,
    ) -> Result<Response<v1::Sandbox>, Status> {
        sandboxes::start(self, request).await
    }

    async fn delete_sandbox(
        &self,
        request: Request<v1::DeleteSandboxRequest>,
    ) -> Result<Response<v1::DeleteSandboxResponse>, Status> {
        sandboxes::delete(self, request).await
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
        watch::sandboxes(self, request).await
    }

    async fn create_ssh_session(
        &self,
        request: Request<v1::CreateSshSessionRequest>,
    ) -> Result<Response<v1::SshSession>, Status> {
        owned::create_ssh_session(self, request).await
    }

    async fn revoke_ssh_session(
        &self,
        request: Request<v1::RevokeSshSessionRequest>,
    ) -> Result<Response<v1::RevokeSshSessionResponse>, Status> {
        owned::revoke_ssh_session(self, request).await
    }

    async fn list_ssh_sessions(
        &self,
        request: Request<v1::ListSshSessionsRequest>,
    ) -> Result<Response<v1::ListSshSessionsResponse>, Status> {
        owned::list_ssh_sessions(self, request).await
    }

    async fn set_sandbox_policy(
        &self,
        request: Request<v1::SetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        owned::set_sandbox_policy(self, request).await
    }

    async fn get_sandbox_policy(
        &self,
        request: Request<v1::GetSandboxPolicyRequest>,
    ) -> Result<Response<v1::SandboxPolicy>, Status> {
        owned::get_sandbox_policy(self, request).await
    }

    async fn create_workspace(
        &self,
        request: Request<v1::CreateWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        workspaces::create(self, request).await
    }

    async fn get_workspace(
        &self,
        request: Request<v1::GetWorkspaceRequest>,
    ) -> Result<Response<v1::Workspace>, Status> {
        workspaces::get(self, request).await
    }

    async fn list_workspaces(
        &self,
        request: Request<v1::ListWorkspacesRequest>,
    ) -> Result<Response<v1::ListWorkspacesResponse>, Status> {
        workspaces::list(self, request).await
    }

    async fn delete_workspace(
        &self,
        request: Request<v1::DeleteWorkspaceRequest>,
    ) -> Result<Response<v1::DeleteWorkspaceResponse>, Status> {
        workspaces::delete(self, request).await
    }
}
