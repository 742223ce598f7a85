//! Where the CLI finds how to reach the cluster securely: a small JSON file
//! (`{"ca": "ca.pem", "cert": "admin.pem", "key": "admin-key.pem"}`, paths
//! relative to the file) written by `palisade up` and `palisade cluster
//! init-pki`.
//!
//! Looked up in this order: `--config FILE` / `PALISADE_CONFIG` (must
//! exist), then `./.palisade/config.json` (what `palisade up` writes, so
//! the README's walkthrough needs no flag). With none, or with
//! `--insecure`, the client speaks plaintext.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::client::ClientTls;

/// The file `palisade up` writes in its data directory.
pub const DEFAULT_CONFIG: &str = ".palisade/config.json";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// The cluster CA.
    ca: PathBuf,
    /// A client certificate to present (optional: a bearer token may be
    /// used instead).
    cert: Option<PathBuf>,
    /// Its key.
    key: Option<PathBuf>,
}

/// The TLS settings the CLI uses (`None`: plaintext).
pub fn discover(explicit: Option<&Path>, insecure: bool) -> anyhow::Result<Option<ClientTls>> {
    if insecure {
        return Ok(None);
    }
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG);
            if !default.exists() {
                return Ok(None);
            }
            default
        }
    };
    load(&path).map(Some)
}

/// Reads one config file.
pub fn load(path: &Path) -> anyhow::Result<ClientTls> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the client config {}", path.display()))?;
    let config: ConfigFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a Palisade client config", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let read = |file: &Path| {
        let full = base.join(file);
        std::fs::read_to_string(&full).with_context(|| {
            format!(
                "cannot read {} (named in {})",
                full.display(),
                path.display()
            )
        })
    };
    let identity = match (&config.cert, &config.key) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        (None, None) => None,
        _ => anyhow::bail!(
            "{}: give both \"cert\" and \"key\", or neither",
            path.display()
        ),
    };
    Ok(ClientTls {
        ca_pem: read(&config.ca)?,
        identity,
    })
}
