//! `palisade cluster init-pki` (and `palisade up`): the cluster's
//! certificates, generated with `rcgen`.
//!
//! # What it writes (directory 0700, every file 0600)
//!
//! - `ca.pem`, `ca-key.pem`: the cluster CA. Keep `ca-key.pem` offline in a
//!   real deployment once the certificates are issued.
//! - `node-N.pem`, `node-N-key.pem` for each node id: the replica's
//!   certificate for both of its ports. It names `node-N.peer.palisade`
//!   (how peers know who it is, [`palisade_raft::tls`]), `localhost`,
//!   `127.0.0.1`, `::1` and every `--host`.
//! - `admin.pem`, `admin-key.pem`: a client certificate with the admin role
//!   (subject alternative names `admin.role.palisade` for the role and
//!   `admin.user.palisade` for the user), the credential of
//!   the operator who created the cluster.
//! - `config.json`: the CLI's configuration pointing at `ca.pem` and the
//!   admin credential (paths relative to the file), found through
//!   `PALISADE_CONFIG` or `./.palisade/config.json`.
//!
//! # Decisions
//!
//! - Files that exist are kept: running it again (another `palisade up`, or
//!   `--nodes 4` to issue a joiner's certificate) only adds what is
//!   missing, signed by the CA already there.
//! - ECDSA P-256 keys (rcgen's default): small, fast handshakes.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The CA certificate's common name.
const CA_COMMON_NAME: &str = "Palisade cluster CA";

/// What to generate.
#[derive(Debug, Clone, clap::Args)]
pub struct InitPkiArgs {
    /// Directory for the CA, node certificates, admin credential and
    /// config.json (created 0700; files 0600).
    #[arg(long, default_value = ".palisade")]
    pub dir: PathBuf,
    /// Issue certificates for node ids 1..=NODES (existing ones are kept).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub nodes: u64,
    /// More host names or IP addresses the replicas are reached at by
    /// clients (repeatable; localhost, 127.0.0.1 and ::1 are always in).
    #[arg(long = "host")]
    pub hosts: Vec<String>,
}

/// The files of a node's certificate.
pub fn node_files(dir: &Path, node_id: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("node-{node_id}.pem")),
        dir.join(format!("node-{node_id}-key.pem")),
    )
}

/// Runs `init-pki`: creates what is missing under `args.dir`.
pub fn init(args: &InitPkiArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    private_dir(dir)?;
    let ca_path = dir.join("ca.pem");
    let ca_key_path = dir.join("ca-key.pem");
    // The CA's parameters are fixed, so an existing CA is reloaded from its
    // key alone: certificates it issues name the same subject and key.
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = if ca_path.exists() {
        let key = KeyPair::from_pem(&read(&ca_key_path)?)
            .with_context(|| format!("{} is not a private key", ca_key_path.display()))?;
        Issuer::new(params, key)
    } else {
        let key = KeyPair::generate().context("cannot generate the CA key")?;
        let certificate = params.self_signed(&key)?;
        write_private(&ca_key_path, &key.serialize_pem())?;
        write_private(&ca_path, &certificate.pem())?;
        Issuer::new(params, key)
    };

    for node_id in 1..=args.nodes {
        let (cert_path, key_path) = node_files(dir, node_id);
        if cert_path.exists() && key_path.exists() {
            continue;
        }
        let mut names = vec![
            palisade_raft::tls::peer_server_name(node_id),
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        names.extend(args.hosts.iter().cloned());
        let mut params = CertificateParams::new(names)
            .with_context(|| format!("invalid --host among {:?}", args.hosts))?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("palisade node {node_id}"));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &issuer)?;
        write_private(&key_path, &key.serialize_pem())?;
        write_private(&cert_path, &certificate.pem())?;
    }

    let admin_path = dir.join("admin.pem");
    let admin_key_path = dir.join("admin-key.pem");
    if !(admin_path.exists() && admin_key_path.exists()) {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "admin");
        params.subject_alt_names = vec![
            SanType::DnsName(
                format!("admin{}", palisade_gateway::auth::USER_NAME_SUFFIX).try_into()?,
            ),
            SanType::DnsName(palisade_gateway::auth::ADMIN_CERTIFICATE_NAME.try_into()?),
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &issuer)?;
        write_private(&admin_key_path, &key.serialize_pem())?;
        write_private(&admin_path, &certificate.pem())?;
    }

    let config_path = dir.join("config.json");
    if !config_path.exists() {
        let config = serde_json::json!({
            "ca": "ca.pem",
            "cert": "admin.pem",
            "key": "admin-key.pem",
        });
        write_private(&config_path, &serde_json::to_string_pretty(&config)?)?;
    }
    Ok(())
}

/// Creates `dir` (and parents) and makes it 0700.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private (0700)", dir.display()))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Writes `text` to a new file readable by its owner only (0600), through
/// a temporary file and a rename so a crash leaves no half file.
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("cannot create {}", temporary.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot rename {} into place", temporary.display()))?;
    if std::fs::metadata(path)?.permissions().mode() & 0o077 != 0 {
        bail!("{} is readable by others", path.display());
    }
    Ok(())
}
