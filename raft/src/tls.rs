//! Mutual TLS between peers: who a peer is comes from its certificate.
//!
//! # Decisions
//!
//! - **One cluster CA.** Every replica holds a certificate issued by the
//!   cluster CA whose subject alternative names include
//!   `node-<ID>.peer.palisade` ([`peer_server_name`]). The peer port
//!   demands a client certificate chained to that CA (the TLS handshake
//!   fails without one), and the receiver reads the sender's node id from
//!   it ([`node_id_of_certificate`]); a message whose `from_node` differs
//!   is refused. The `from_node` field is kept only for the plaintext
//!   (`--insecure`) mode and for diagnostics.
//! - **The dialer checks the server too.** A replica connecting to node N
//!   verifies the server's certificate against the name
//!   `node-N.peer.palisade`, whatever address it dialed (an IP, a proxy):
//!   an address now served by another replica fails the handshake.
//! - rustls through tonic's `tls-ring` feature: no OpenSSL, no C++.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::types::NodeId;

/// The DNS suffix of the name a node's certificate carries for the peer
/// port: node 3 is `node-3.peer.palisade`.
pub const PEER_NAME_SUFFIX: &str = ".peer.palisade";

/// The name node `node_id`'s certificate carries (and a dialer verifies).
pub fn peer_server_name(node_id: NodeId) -> String {
    format!("node-{node_id}{PEER_NAME_SUFFIX}")
}

/// The node id a peer certificate (DER) names: exactly one subject
/// alternative DNS name `node-<ID>.peer.palisade`. Anything else (no such
/// name, two of them, an unparsable certificate) is an error saying why.
pub fn node_id_of_certificate(der: &[u8]) -> Result<NodeId, String> {
    let ids: Vec<NodeId> = dns_names_of_certificate(der)?
        .iter()
        .filter_map(|dns| {
            dns.strip_prefix("node-")?
                .strip_suffix(PEER_NAME_SUFFIX)?
                .parse()
                .ok()
        })
        .collect();
    match ids.as_slice() {
        [id] if *id > 0 => Ok(*id),
        [] => Err(format!(
            "the certificate names no node (no node-ID{PEER_NAME_SUFFIX} name): not a cluster member's certificate"
        )),
        _ => Err(format!("the certificate names several nodes: {ids:?}")),
    }
}

/// The subject alternative DNS names of a certificate (DER). The caller's
/// TLS layer has already verified the certificate chains to the cluster
/// CA; this only reads it.
pub fn dns_names_of_certificate(der: &[u8]) -> Result<Vec<String>, String> {
    let der = CertificateDer::from(der);
    let certificate = webpki::EndEntityCert::try_from(&der)
        .map_err(|error| format!("unparsable certificate: {error}"))?;
    Ok(certificate.valid_dns_names().map(str::to_owned).collect())
}

/// A replica's TLS material, PEM-encoded: the cluster CA, and its own
/// certificate and private key.
#[derive(Clone)]
pub struct TlsMaterial {
    /// The cluster CA certificate.
    pub ca_pem: String,
    /// This replica's certificate (names `node-<ID>.peer.palisade` and the
    /// hosts clients reach it at).
    pub cert_pem: String,
    /// This replica's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Reads the three PEM files.
    pub fn read(
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<Self, String> {
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))
        };
        Ok(Self {
            ca_pem: read(ca)?,
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        })
    }

    /// The node id this replica's own certificate names.
    pub fn node_id(&self) -> Result<NodeId, String> {
        let der = first_certificate_der(&self.cert_pem)?;
        node_id_of_certificate(&der)
    }

    /// Server side of the peer port: present our certificate, demand one
    /// chained to the cluster CA from every client.
    pub fn peer_server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
    }

    /// Server side of the public port: present our certificate; a client
    /// certificate chained to the cluster CA is optional (bearer tokens
    /// are the other way to authenticate).
    pub fn public_server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
            .client_auth_optional(true)
    }

    /// Client side of the peer port, dialing node `target`: verify it is
    /// that node, and present our certificate.
    pub fn peer_client(&self, target: NodeId) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .domain_name(peer_server_name(target))
    }
}

/// The DER of the first certificate in a PEM text.
pub fn first_certificate_der(pem: &str) -> Result<Vec<u8>, String> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map(|der| der.as_ref().to_vec())
        .map_err(|error| format!("not a PEM certificate: {error}"))
}

/// An endpoint for a peer address (`host:port` or a URI): `https` with
/// `tls`, else `http`.
pub fn peer_endpoint(
    addr: &str,
    target: NodeId,
    tls: Option<&TlsMaterial>,
) -> Result<Endpoint, tonic::transport::Error> {
    let bare = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    match tls {
        Some(tls) => {
            Endpoint::from_shared(format!("https://{bare}"))?.tls_config(tls.peer_client(target))
        }
        None => Endpoint::from_shared(if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        }),
    }
}
