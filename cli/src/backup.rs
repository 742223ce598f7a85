//! `palisade cluster snapshot save FILE` and `palisade cluster restore
//! FILE ...`: backups of the replicated state and new clusters seeded from
//! them. The file format is [`palisade_raft::backup`]'s; what a restore
//! keeps and changes is [`palisade_gateway::restore`]'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use palisade_proto::v1;
use palisade_raft::backup::{BackupHeader, BackupWriter, TokenKey};
use serde_json::json;

use crate::client::Client;
use crate::commands::{Output, print_json};

/// `palisade cluster restore FILE ...`
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file (`palisade cluster snapshot save`).
    pub file: PathBuf,
    /// The new replica's data directory: must not exist or be empty.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The new replica's node id (its certificate must name it).
    #[arg(long)]
    pub node_id: u64,
    /// Every member of the NEW cluster and its peer address,
    /// `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT` (what each replica will be
    /// started with); restore every one of them from the same file.
    #[arg(long, value_parser = crate::serve::parse_initial_cluster)]
    pub initial_cluster: BTreeMap<u64, String>,
    /// Give the new cluster a fresh execution-token key: every execution
    /// token issued by the source is then refused
    /// (UNVERIFIABLE_EXECUTION_TOKEN). Default: keep the key, so clients'
    /// tokens of the restored sandboxes still verify. Rotate for a copy
    /// that runs beside its source, or when the backup file (which holds
    /// the key) may have leaked. Give the same choice to every replica.
    #[arg(long)]
    pub rotate_token_key: bool,
}

/// `cluster snapshot save FILE`: a consistent copy of the state, from the
/// first replica that answers, written atomically (mode 0600: it holds the
/// execution-token key). The state goes from the stream into the file a
/// message at a time, checked against the length and digest the replica
/// announced; a stream that breaks or does not match leaves nothing.
pub async fn save(client: &mut Client, output: Output, file: &Path) -> anyhow::Result<()> {
    let (header, mut stream) = client
        .admin(|mut admin| async move {
            let mut stream = admin
                .save_snapshot(v1::SaveSnapshotRequest {})
                .await?
                .into_inner();
            match stream.message().await? {
                Some(v1::SnapshotChunk {
                    header: Some(header),
                    ..
                }) => Ok(tonic::Response::new((header, stream))),
                _ => Err(tonic::Status::internal(
                    "the replica's snapshot stream did not start with its header",
                )),
            }
        })
        .await?;
    let backup_header = BackupHeader {
        applied_index: header.applied_index,
        applied_term: header.applied_term,
        cluster_id: header.cluster_id.clone(),
        state_digest: header.state_digest.clone(),
        state_encoding: header.state_encoding.clone(),
        node_id: header.node_id,
        created_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64),
        palisade_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let temporary = TemporaryFile::beside(file)?;
    let written: anyhow::Result<u64> = async {
        let out = std::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, temporary.file()?);
        let mut writer = BackupWriter::new(out, &backup_header, header.state_bytes)
            .with_context(|| format!("cannot write {}", file.display()))?;
        while let Some(chunk) = stream.message().await.with_context(|| {
            format!(
                "the snapshot stream from node {} broke after {} of {} bytes",
                header.node_id,
                writer.state_bytes(),
                header.state_bytes
            )
        })? {
            writer
                .write_state(&chunk.data)
                .with_context(|| format!("node {}'s snapshot stream", header.node_id))?;
        }
        let (out, file_bytes) = writer
            .finish()
            .with_context(|| format!("node {}'s snapshot stream", header.node_id))?;
        out.into_inner()
            .map_err(|error| error.into_error())
            .and_then(|file| file.sync_all())
            .with_context(|| format!("cannot write {}", file.display()))?;
        Ok(file_bytes)
    }
    .await;
    let file_bytes = match written {
        Ok(file_bytes) => file_bytes,
        Err(error) => return Err(error.context("nothing was written; try again")),
    };
    temporary.commit()?;
    match output {
        Output::Json => print_json(&json!({
            "file": file.display().to_string(),
            "file_bytes": file_bytes,
            "applied_index": header.applied_index,
            "applied_term": header.applied_term,
            "cluster_id": header.cluster_id,
            "state_digest": header.state_digest,
            "state_bytes": header.state_bytes,
            "node_id": header.node_id,
        })),
        Output::Table => println!(
            "saved the state of cluster {} at index {} (term {}, from node {}) to {}: {} bytes, state digest {}",
            header.cluster_id,
            header.applied_index,
            header.applied_term,
            header.node_id,
            file.display(),
            file_bytes,
            header.state_digest
        ),
    }
    Ok(())
}

/// Bytes buffered before the backup file is written to.
const WRITE_BUFFER_BYTES: usize = 1024 * 1024;

/// A file written under a temporary name in its final directory (mode
/// 0600), renamed over the final name by [`TemporaryFile::commit`] once it
/// is synced; removed if dropped before.
struct TemporaryFile {
    path: PathBuf,
    temporary: PathBuf,
    directory: PathBuf,
    file: Option<std::fs::File>,
}

impl TemporaryFile {
    fn beside(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .with_context(|| format!("{} names no file", path.display()))?;
        let temporary = directory.join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(TemporaryFile {
            path: path.to_path_buf(),
            temporary,
            directory,
            file: Some(file),
        })
    }

    /// The open file (a second handle to it).
    fn file(&self) -> std::io::Result<std::fs::File> {
        self.file
            .as_ref()
            .expect("the file is open until commit")
            .try_clone()
    }

    /// Renames the (synced) file over the final name and syncs the
    /// directory.
    fn commit(mut self) -> anyhow::Result<()> {
        self.file = None;
        std::fs::rename(&self.temporary, &self.path)
            .and_then(|()| std::fs::File::open(&self.directory)?.sync_all())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.temporary = PathBuf::new();
        Ok(())
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        if !self.temporary.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// `cluster restore FILE --data-dir DIR --node-id N --initial-cluster ...`.
pub fn restore(args: &RestoreArgs, output: Output) -> anyhow::Result<()> {
    let token_key = if args.rotate_token_key {
        TokenKey::Rotate
    } else {
        TokenKey::Keep
    };
    let restored = palisade_gateway::restore::restore(
        &args.file,
        &args.data_dir,
        args.node_id,
        &args.initial_cluster,
        token_key,
    )?;
    let members = args
        .initial_cluster
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let kept = token_key == TokenKey::Keep;
    match output {
        Output::Json => print_json(&json!({
            "data_dir": args.data_dir.display().to_string(),
            "node_id": args.node_id,
            "initial_cluster": members,
            "source_cluster_id": restored.header.cluster_id,
            "applied_index": restored.header.applied_index,
            "source_state_digest": restored.header.state_digest,
            "restored_state_digest": restored.restored_digest,
            "token_key": if kept { "kept" } else { "rotated" },
        })),
        Output::Table => {
            println!(
                "restored the state of cluster {} at index {} into {} as node {} of a new cluster ({members})",
                restored.header.cluster_id,
                restored.header.applied_index,
                args.data_dir.display(),
                args.node_id,
            );
            println!(
                "execution-token key: {}; the new cluster id is chosen by its first leader",
                if kept {
                    "kept (tokens issued by the source still verify)"
                } else {
                    "rotated (tokens issued by the source are refused)"
                }
            );
            println!(
                "restored state digest {} (source {})",
                restored.restored_digest, restored.header.state_digest
            );
            println!(
                "next: restore every other member from the same file, then start each with \
                 `palisade gateway run --node-id {} --data-dir {} --initial-cluster {members} ...`",
                args.node_id,
                args.data_dir.display()
            );
        }
    }
    Ok(())
}
