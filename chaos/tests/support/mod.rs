//! Calls the in-process cluster tests share.

use palisade_proto::v1;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tonic::transport::Channel;

/// Creates `name` (default workspace, empty spec) and returns the sandbox
/// the create answered; panics with the status if it failed.
pub async fn create(client: &mut PalisadeClient<Channel>, name: &str) -> v1::Sandbox {
    client
        .create_sandbox(v1::CreateSandboxRequest {
            workspace: palisade_lifecycle::DEFAULT_WORKSPACE.into(),
            name: name.into(),
            spec: Some(v1::SandboxSpec::default()),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("create {name}: {status:?}"))
        .into_inner()
}
