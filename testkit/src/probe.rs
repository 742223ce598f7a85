//! gRPC probes of one replica (no failover: the point is to ask that very
//! replica) and accessors of the API's messages that tests and tools share.

use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// TLS settings of the replicas this process started with TLS, by `https`
/// URI ([`register_tls`]). A `std` mutex: held only to look up or insert.
static TLS_BY_URI: std::sync::Mutex<Vec<(String, ClientTlsConfig)>> =
    std::sync::Mutex::new(Vec::new());

/// Makes the probes reach `uri` (`https://host:port`) over TLS, trusting
/// `ca_pem` and presenting `identity` (certificate and key PEM). Called by
/// [`crate::LocalCluster`] for the replicas of a TLS cluster.
pub fn register_tls(uri: &str, ca_pem: &str, identity: Option<(&str, &str)>) {
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    if let Some((cert, key)) = identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    let mut registered = TLS_BY_URI
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    registered.retain(|(known, _)| known != uri);
    registered.push((uri.to_string(), config));
}

fn tls_for(uri: &str) -> Option<ClientTlsConfig> {
    TLS_BY_URI
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(known, _)| known == uri)
        .map(|(_, config)| config.clone())
}

/// How long a probe waits to connect.
pub const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`cluster_info`] waits for its answer.
pub const PROBE_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// A channel to one replica with short connect and call deadlines; `None`
/// if it cannot be reached.
pub async fn channel(uri: &str, call_timeout: Duration) -> Option<Channel> {
    let mut endpoint = Endpoint::from_shared(uri.to_string()).ok()?;
    if let Some(tls) = tls_for(uri) {
        endpoint = endpoint.tls_config(tls).ok()?;
    }
    let endpoint = endpoint
        .connect_timeout(PROBE_CONNECT_TIMEOUT)
        .timeout(call_timeout);
    palisade_raft::simnet::channel(endpoint).await.ok()
}

/// A `palisade.v1.Palisade` client to exactly one replica.
pub async fn direct_client(uri: &str, call_timeout: Duration) -> Option<PalisadeClient<Channel>> {
    Some(PalisadeClient::new(channel(uri, call_timeout).await?))
}

/// One replica's own view of the cluster, or `None` if it does not answer
/// within [`PROBE_CALL_TIMEOUT`].
pub async fn cluster_info(uri: &str) -> Option<v1::ClusterInfo> {
    let channel = channel(uri, PROBE_CALL_TIMEOUT).await?;
    ClusterAdminClient::new(channel)
        .get_cluster_info(v1::GetClusterInfoRequest {})
        .await
        .ok()
        .map(tonic::Response::into_inner)
}

/// A reference to a sandbox by id.
pub fn by_id(id: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        id: id.to_string(),
        ..Default::default()
    })
}

/// A reference to a sandbox by name in `workspace`.
pub fn by_name_in(workspace: &str, name: &str) -> Option<v1::SandboxRef> {
    Some(v1::SandboxRef {
        workspace: workspace.to_string(),
        name: name.to_string(),
        id: String::new(),
    })
}

/// The sandbox's phase (`Unspecified` if the message has none).
pub fn phase_of(sandbox: &v1::Sandbox) -> v1::SandboxPhase {
    sandbox
        .status
        .as_ref()
        .and_then(|status| v1::SandboxPhase::try_from(status.phase).ok())
        .unwrap_or(v1::SandboxPhase::Unspecified)
}

/// The sandbox's id (empty if the message has no metadata).
pub fn id_of(sandbox: &v1::Sandbox) -> String {
    sandbox
        .metadata
        .as_ref()
        .map_or(String::new(), |meta| meta.id.clone())
}

/// The generation of the sandbox's current execution (0: none).
pub fn generation_of(sandbox: &v1::Sandbox) -> u64 {
    sandbox
        .status
        .as_ref()
        .and_then(|status| status.execution.as_ref())
        .map_or(0, |execution| execution.generation)
}

/// The operation in flight on the sandbox, if any.
pub fn operation_of(sandbox: &v1::Sandbox) -> Option<v1::Operation> {
    sandbox.status.as_ref().and_then(|status| status.operation)
}

/// The shim pid in the process driver's handle (`pid=N start=T`), if any.
pub fn shim_pid(sandbox: &v1::Sandbox) -> Option<u32> {
    sandbox
        .status
        .as_ref()
        .and_then(|status| status.execution.as_ref())?
        .handle
        .split_whitespace()
        .find_map(|part| part.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
}
