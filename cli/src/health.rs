//! `palisade health`: asks each endpoint's standard gRPC health service
//! (`grpc.health.v1.Health/Check`) whether it serves, and exits 0 only
//! when every one says SERVING. It is the container image's `HEALTHCHECK`
//! and the Kubernetes readiness probe.
//!
//! # Decisions
//!
//! - One answer per endpoint, no failover: a probe is about one replica
//!   (the container's own `127.0.0.1:7001`), not about the cluster.
//! - TLS as the other commands (`--config`, `./.palisade/config.json`,
//!   `--insecure`), plus `--ca FILE`: the health service needs no
//!   credential, only the cluster CA to trust the replica, so a probe can
//!   run with the CA alone (Kubernetes mounts only the PKI Secret's
//!   `ca.pem` where the probe looks).
//! - A replica that fails-stop reports NOT_SERVING before it exits; one
//!   that does not answer within `--timeout-seconds` is unhealthy too.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::client::ClientTls;
use crate::commands::Output;

/// `palisade health` flags (the endpoints are the global `--endpoint`).
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The service to ask about: empty for the whole replica (what the
    /// image's HEALTHCHECK asks), or e.g. `palisade.v1.Palisade`.
    #[arg(long, default_value = "")]
    pub service: String,
    /// Trust this CA (PEM) for the replicas' certificates instead of the
    /// client config's; no client certificate is needed for health.
    /// Ignored with `--insecure`, which asks over plaintext: the image sets
    /// PALISADE_HEALTH_CA, and a replica run with `--insecure` in it is
    /// probed with `palisade --insecure health`.
    #[arg(long, env = "PALISADE_HEALTH_CA")]
    pub ca: Option<PathBuf>,
    /// How long to wait for each endpoint's answer (connection included).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub timeout_seconds: u64,
}

/// One endpoint's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The endpoint URI asked.
    pub endpoint: String,
    /// SERVING, NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN or UNREACHABLE.
    pub status: String,
    /// Why, when it could not be asked.
    pub error: Option<String>,
}

impl Probe {
    fn serving(&self) -> bool {
        self.status == "SERVING"
    }
}

/// Runs `palisade health`: every endpoint must answer SERVING.
pub async fn run(
    endpoints: &[String],
    tls: Option<ClientTls>,
    insecure: bool,
    args: &HealthArgs,
    output: Output,
) -> anyhow::Result<()> {
    let tls = match &args.ca {
        Some(_) if insecure => None,
        Some(path) => Some(ClientTls {
            ca_pem: std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the CA {}", path.display()))?,
            identity: None,
        }),
        None => tls,
    };
    let timeout = Duration::from_secs(args.timeout_seconds);
    let mut probes = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        probes.push(probe(endpoint, tls.as_ref(), &args.service, timeout).await);
    }
    match output {
        Output::Json => {
            let rows: Vec<_> = probes
                .iter()
                .map(|probe| {
                    json!({
                        "endpoint": probe.endpoint,
                        "status": probe.status,
                        "error": probe.error,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Output::Table => {
            let width = probes
                .iter()
                .map(|probe| probe.endpoint.len())
                .max()
                .unwrap_or(0)
                .max("ENDPOINT".len());
            println!("{:width$}  STATUS", "ENDPOINT");
            for probe in &probes {
                match &probe.error {
                    Some(error) => {
                        println!("{:width$}  {} ({error})", probe.endpoint, probe.status)
                    }
                    None => println!("{:width$}  {}", probe.endpoint, probe.status),
                }
            }
        }
    }
    let unhealthy = probes.iter().filter(|probe| !probe.serving()).count();
    if unhealthy > 0 {
        anyhow::bail!(
            "{unhealthy} of {} endpoint(s) not serving{}",
            probes.len(),
            if args.service.is_empty() {
                String::new()
            } else {
                format!(" {}", args.service)
            }
        );
    }
    Ok(())
}

/// Asks one endpoint.
pub async fn probe(
    endpoint: &str,
    tls: Option<&ClientTls>,
    service: &str,
    timeout: Duration,
) -> Probe {
    let uri = match tls {
        Some(_) => {
            let bare = endpoint.strip_prefix("http://").unwrap_or(endpoint);
            if bare.contains("://") {
                bare.to_string()
            } else {
                format!("https://{bare}")
            }
        }
        None => endpoint.to_string(),
    };
    // Reported as dialled: https:// with TLS.
    let unreachable = |error: String| Probe {
        endpoint: uri.clone(),
        status: "UNREACHABLE".to_string(),
        error: Some(error),
    };
    let mut target = match Endpoint::from_shared(uri.clone()) {
        Ok(target) => target.connect_timeout(timeout).timeout(timeout),
        Err(error) => return unreachable(format!("invalid endpoint: {error}")),
    };
    if let Some(tls) = tls {
        target = match target.tls_config(tls.config()) {
            Ok(target) => target,
            Err(error) => return unreachable(format!("TLS: {error}")),
        };
    }
    let answer = tokio::time::timeout(timeout, async {
        let channel = palisade_raft::simnet::channel(target)
            .await
            .map_err(|error| {
                // The transport error's sources say why (refused, handshake).
                let mut text = error.to_string();
                let mut source = std::error::Error::source(&error);
                while let Some(inner) = source {
                    text = format!("{text}: {inner}");
                    source = inner.source();
                }
                Failure::Connect(text)
            })?;
        HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .map_err(Failure::Status)
    })
    .await;
    match answer {
        Err(_) => unreachable(format!("no answer within {} s", timeout.as_secs())),
        Ok(Err(Failure::Connect(error))) => unreachable(error),
        // The health service answers NOT_FOUND for a service it does not know.
        Ok(Err(Failure::Status(status))) if status.code() == tonic::Code::NotFound => Probe {
            endpoint: uri.clone(),
            status: "SERVICE_UNKNOWN".to_string(),
            error: Some(status.message().to_string()),
        },
        Ok(Err(Failure::Status(status))) => {
            unreachable(format!("{:?}: {}", status.code(), status.message()))
        }
        Ok(Ok(response)) => {
            let status = ServingStatus::try_from(response.into_inner().status)
                .unwrap_or(ServingStatus::Unknown);
            Probe {
                endpoint: uri.clone(),
                status: status.as_str_name().to_string(),
                error: None,
            }
        }
    }
}

/// Why a probe got no status.
enum Failure {
    /// No connection (refused, TLS handshake failed, ...).
    Connect(String),
    /// The call failed with this status.
    Status(tonic::Status),
}
