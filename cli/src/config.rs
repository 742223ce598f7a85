//! Where the CLI finds how to reach the cluster securely: a small JSON file
//! (`{"ca": "ca.pem", "cert": "admin.pem", "key": "admin-key.pem"}`, paths
//! relative to the file) written by `palisade up` and `palisade cluster
//! init-pki`.
//!
//! Looked up in this order: `--config FILE` / `PALISADE_CONFIG` (must
//! exist), then `./.palisade/config.json` (what `palisade up` writes, so
//! the README's walkthrough needs no flag). With none, or with
//! `--insecure`, the client speaks plaintext.
//!
//! `palisade up` also records the endpoints it serves on (`"endpoints":
//! "127.0.0.1:7741,..."`), so `up --base-port N` needs no `--endpoint`
//! either; `--endpoint` / `PALISADE_ENDPOINT` win over it.

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
    /// The replicas' public endpoints, comma-separated (what `up` serves).
    endpoints: Option<String>,
}

/// The config file the CLI uses, if any: `explicit` (must exist), else
/// `./.palisade/config.json` when it exists; none with `--insecure`.
fn find(explicit: Option<&Path>, insecure: bool) -> Option<PathBuf> {
    if insecure {
        return None;
    }
    match explicit {
        Some(path) => Some(path.to_path_buf()),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG);
            default.exists().then_some(default)
        }
    }
}

fn parse(path: &Path) -> anyhow::Result<ConfigFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the client config {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a Palisade client config", path.display()))
}

/// The endpoints recorded in the config file the CLI uses, if any.
pub fn discover_endpoints(
    explicit: Option<&Path>,
    insecure: bool,
) -> anyhow::Result<Option<String>> {
    match find(explicit, insecure) {
        Some(path) => Ok(parse(&path)?.endpoints),
        None => Ok(None),
    }
}

/// Records `endpoints` in the config file at `path` (what `up` serves),
/// keeping its other fields; written privately, through a rename.
pub fn record_endpoints(path: &Path, endpoints: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the client config {}", path.display()))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a Palisade client config", path.display()))?;
    let object = config
        .as_object_mut()
        .with_context(|| format!("{} is not a JSON object", path.display()))?;
    object.insert("endpoints".to_string(), endpoints.into());
    crate::pki::write_private(path, &serde_json::to_string_pretty(&config)?)
}

/// The TLS settings the CLI uses (`None`: plaintext).
pub fn discover(explicit: Option<&Path>, insecure: bool) -> anyhow::Result<Option<ClientTls>> {
    match find(explicit, insecure) {
        Some(path) => load(&path).map(Some),
        None => Ok(None),
    }
}

/// Reads one config file.
pub fn load(path: &Path) -> anyhow::Result<ClientTls> {
    let config = parse(path)?;
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
