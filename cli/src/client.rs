//! The Rust client the CLI uses: several endpoints, failover between them.
//!
//! A call goes to the first endpoint that answers. On UNAVAILABLE (the
//! connection failed or broke, no leader, leadership changed, outcome not
//! known yet, replica shutting down) it retries, moving to the next
//! endpoint, until its failover deadline. That is safe because every
//! lifecycle write carries a request id that the caller keeps across these
//! retries: the cluster applies it once and replays the original result.
//! (SSH-session creation and policy writes carry no request id; a retry of
//! one whose outcome was unknown may apply it twice — policies guard with
//! `expected_version`.) Any other answer is returned as is.

use std::time::Duration;

use palisade_proto::v1;
use palisade_proto::v1::cluster_admin_client::ClusterAdminClient;
use palisade_proto::v1::palisade_client::PalisadeClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use palisade_gateway::errors::reason_of;

pub use crate::leader_routing::{LeaderChannel, LeaderPreference};

/// How long to try to connect to one endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Interval of HTTP/2 pings while a call is in flight. A replica that is
/// frozen (SIGSTOP, a stalled VM) or cut off keeps its TCP connection open
/// but stops answering pings: its calls fail after the interval plus
/// [`KEEPALIVE_TIMEOUT`] and are retried at another replica, instead of
/// waiting out the whole call timeout.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// How long a ping may go unanswered before the connection is given up.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the client keeps failing over before it gives up.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(15);
/// Pause between rounds over all endpoints.
const FAILOVER_BACKOFF: Duration = Duration::from_millis(200);

pub use palisade_gateway::admin::endpoint_uri;

// Pruning is part of the client library: other tools call it rather than
// writing the list-and-delete loop again.
pub use crate::prune::{
    PruneItem, PruneOptions, PruneOutcome, PruneReport, delete_listed, list_prunable, prune,
};

/// Splits a comma-separated endpoint list.
pub fn parse_endpoints(list: &str) -> anyhow::Result<Vec<String>> {
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|endpoint| !endpoint.is_empty())
        .map(endpoint_uri)
        .collect();
    if endpoints.is_empty() {
        anyhow::bail!("no endpoint given: pass --endpoint HOST:PORT[,HOST:PORT...]");
    }
    for endpoint in &endpoints {
        Endpoint::from_shared(endpoint.clone())
            .map_err(|error| anyhow::anyhow!("invalid endpoint {endpoint:?}: {error}"))?;
    }
    Ok(endpoints)
}

/// A client over several replicas.
#[derive(Clone)]
pub struct Client {
    endpoints: Vec<String>,
    /// Which endpoint is tried first: the leader's once known (see
    /// [`crate::leader_routing`]).
    leader: LeaderPreference,
    channels: Vec<Option<Channel>>,
    /// Per-call deadline sent to the server (`grpc-timeout`).
    pub call_timeout: Duration,
    /// How long to keep failing over before giving up (zero: one round).
    pub failover_deadline: Duration,
    /// TLS towards the replicas (`None`: plaintext, `--insecure`).
    tls: Option<ClientTls>,
    /// Sent as `Authorization: Bearer ...` on every call.
    token: BearerToken,
}

/// The channel the service clients of [`Client`] run on: a connection,
/// plus the bearer token (if any) on every request.
pub type ApiChannel = InterceptedService<Channel, BearerToken>;

/// Adds `authorization: Bearer TOKEN` to every request (nothing without a
/// token).
#[derive(Clone, Default)]
pub struct BearerToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl BearerToken {
    /// A token to present; fails on characters a header cannot carry.
    pub fn new(token: &str) -> anyhow::Result<Self> {
        let value = format!("Bearer {}", token.trim())
            .parse()
            .map_err(|_| anyhow::anyhow!("the API token holds characters a header cannot carry"))?;
        Ok(Self(Some(value)))
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// How the client talks TLS: the cluster CA it trusts and, optionally, the
/// client certificate it presents (the credential `palisade up` and
/// `cluster init-pki` write).
#[derive(Clone)]
pub struct ClientTls {
    /// PEM of the CA that issued the replicas' certificates.
    pub ca_pem: String,
    /// PEM certificate and key presented to the replicas.
    pub identity: Option<(String, String)>,
}

impl ClientTls {
    /// The tonic TLS settings: trust the cluster CA, present the identity.
    pub fn config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("{}", describe_status(.0))]
    Status(tonic::Status),
    /// No endpoint could be reached.
    #[error(
        "no Palisade replica reachable at {endpoints}: {last_error}; is it running (palisade up)?"
    )]
    Unreachable {
        /// The endpoints tried.
        endpoints: String,
        /// The last connection error.
        last_error: String,
    },
}

impl ClientError {
    /// The ErrorInfo reason, when the server gave one.
    pub fn reason(&self) -> Option<String> {
        match self {
            ClientError::Status(status) => reason_of(status),
            ClientError::Unreachable { .. } => None,
        }
    }

    /// The gRPC code, when the server answered.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            ClientError::Status(status) => Some(status.code()),
            ClientError::Unreachable { .. } => None,
        }
    }
}

fn describe_status(status: &tonic::Status) -> String {
    match reason_of(status) {
        Some(reason) => format!("{} ({reason})", status.message()),
        None => format!("{} ({:?})", status.message(), status.code()),
    }
}

impl Client {
    /// A client for these endpoints (URIs, see [`parse_endpoints`]).
    pub fn new(endpoints: Vec<String>) -> Self {
        let channels = vec![None; endpoints.len()];
        Self {
            leader: LeaderPreference::new(endpoints.len().max(1), 0),
            endpoints,
            channels,
            call_timeout: Duration::from_secs(150),
            failover_deadline: FAILOVER_DEADLINE,
            tls: None,
            token: BearerToken::default(),
        }
    }

    /// The same client presenting `token` on every call.
    pub fn with_token(mut self, token: BearerToken) -> Self {
        self.token = token;
        self
    }

    /// The same client over TLS (endpoints become `https://`).
    pub fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.tls = tls;
        self.channels = vec![None; self.endpoints.len()];
        self
    }

    async fn channel(&mut self, at: usize) -> Result<Channel, tonic::transport::Error> {
        if let Some(channel) = &self.channels[at] {
            return Ok(channel.clone());
        }
        let mut endpoint = Endpoint::from_shared(self.endpoints[at].clone())
            .expect("endpoints are validated by parse_endpoints");
        if let Some(tls) = &self.tls {
            let bare = self.endpoints[at]
                .strip_prefix("http://")
                .unwrap_or(&self.endpoints[at]);
            let secure = if bare.contains("://") {
                bare.to_string()
            } else {
                format!("https://{bare}")
            };
            endpoint = Endpoint::from_shared(secure)
                .expect("endpoints are validated by parse_endpoints")
                .tls_config(tls.config())?;
        }
        // Through the one connect whose timeout covers the TLS handshake
        // too: a replica paused by SIGSTOP accepts the connection and never
        // answers, and the call must move on to another replica.
        let channel = palisade_raft::simnet::channel(
            endpoint
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(self.call_timeout)
                .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                .keep_alive_timeout(KEEPALIVE_TIMEOUT),
        )
        .await?;
        self.channels[at] = Some(channel.clone());
        Ok(channel)
    }

    /// Stops preferring the endpoint that answered last (it went away).
    pub fn forget_preferred(&mut self) {
        let preferred = self.leader.preferred();
        self.channels[preferred] = None;
        self.leader.failed(preferred);
    }

    /// The endpoint the next call goes to first (an index of the
    /// endpoints): the leader's once an answer named it.
    pub fn preferred_endpoint(&self) -> usize {
        self.leader.preferred()
    }

    /// Every sandbox `request` selects, page after page (the server's
    /// key-range cursor: stable under concurrent deletes). `page_token` of
    /// `request` is where it starts; usually empty.
    pub async fn list_all_sandboxes(
        &mut self,
        mut request: v1::ListSandboxesRequest,
    ) -> Result<Vec<v1::Sandbox>, ClientError> {
        let mut sandboxes = Vec::new();
        loop {
            let page = self
                .palisade(|mut api| {
                    let request = request.clone();
                    async move { api.list_sandboxes(request).await }
                })
                .await?;
            sandboxes.extend(page.sandboxes);
            if page.next_page_token.is_empty() {
                return Ok(sandboxes);
            }
            request.page_token = page.next_page_token;
        }
    }

    /// Calls `call` on the `palisade.v1.Palisade` service with failover.
    pub async fn palisade<T, F, Fut>(&mut self, call: F) -> Result<T, ClientError>
    where
        F: Fn(PalisadeClient<ApiChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let token = self.token.clone();
        self.with_failover(|channel| {
            call(
                PalisadeClient::with_interceptor(channel, token.clone())
                    .max_decoding_message_size(palisade_lifecycle::limits::RESPONSE_BYTES_MAX),
            )
        })
        .await
    }

    /// Calls `call` on the `palisade.v1.ClusterAdmin` service with failover.
    pub async fn admin<T, F, Fut>(&mut self, call: F) -> Result<T, ClientError>
    where
        F: Fn(ClusterAdminClient<ApiChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let token = self.token.clone();
        self.with_failover(|channel| {
            call(ClusterAdminClient::with_interceptor(channel, token.clone()))
        })
        .await
    }

    async fn with_failover<T, F, Fut>(&mut self, call: F) -> Result<T, ClientError>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = tokio::time::Instant::now() + self.failover_deadline;
        let mut last_error = String::from("no endpoint tried");
        loop {
            let first = self.leader.preferred();
            for offset in 0..self.endpoints.len() {
                let at = (first + offset) % self.endpoints.len();
                let channel = match self.channel(at).await {
                    Ok(channel) => channel,
                    Err(error) => {
                        self.leader.failed(at);
                        last_error = format!("{}: {error}", self.endpoints[at]);
                        continue;
                    }
                };
                match call(channel).await {
                    Ok(response) => {
                        self.leader.answered(at, response.metadata().as_ref());
                        return Ok(response.into_inner());
                    }
                    Err(status) if is_retryable(&status) => {
                        if reason_of(&status).is_none() {
                            // A transport failure: reconnect next time.
                            self.channels[at] = None;
                            self.leader.failed(at);
                        }
                        last_error =
                            format!("{}: {}", self.endpoints[at], describe_status(&status));
                    }
                    Err(status) => {
                        self.leader.answered(at, status.metadata().as_ref());
                        return Err(ClientError::Status(status));
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Unreachable {
                    endpoints: self.endpoints.join(","),
                    last_error,
                });
            }
            tokio::time::sleep(FAILOVER_BACKOFF).await;
        }
    }
}

/// True for an answer after which retrying (at any replica) is safe and
/// useful: UNAVAILABLE from a replica (no leader, leadership changed,
/// outcome not known yet, shutting down), and transport failures, which
/// carry no ErrorInfo: the connection could not be made, or it broke while
/// the request was in flight (a replica killed or restarted). tonic reports
/// a broken connection as UNAVAILABLE, UNKNOWN ("transport error"),
/// INTERNAL (an h2 protocol error) or CANCELLED ("operation was
/// canceled"). This call's own deadline (CANCELLED, "Timeout expired") is
/// not retried: its time is up.
fn is_retryable(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::Unavailable => true,
        // Without ErrorInfo these come from the transport, not from a
        // replica: RESOURCE_EXHAUSTED is tonic's code for an HTTP/2
        // ENHANCE_YOUR_CALM, sent (with the connection closed) by a replica
        // that found more streams reset by its clients than it accepts at
        // once, after a stall. Retried with the same request id.
        tonic::Code::Unknown
        | tonic::Code::Internal
        | tonic::Code::Cancelled
        | tonic::Code::ResourceExhausted => {
            reason_of(status).is_none() && status.message() != tonic::TimeoutExpired(()).to_string()
        }
        _ => false,
    }
}
