//! Seeding one replica of a new cluster from a backup file
//! (`palisade cluster restore`), offline: no replica runs while it works.
//!
//! Every replica of the new cluster is restored from the same file with
//! its own node id and the same `--initial-cluster`, then started with
//! `palisade gateway run` as usual. Each gets the same state (so they agree
//! byte for byte), at the backup's applied index, as a snapshot whose
//! membership is the new cluster's members (see
//! [`palisade_raft::backup`]). The log goes on from the next index, so
//! resource versions keep growing across the restore.
//!
//! # Decisions
//!
//! - **A new cluster id**, chosen by the new cluster's first leader (as for
//!   any cluster): the restored cluster is another cluster, so a driver
//!   shared with a source that still runs (one Docker engine, one process
//!   driver directory) refuses each cluster's fences on the other's
//!   executions instead of letting two leaders act on one sandbox.
//! - **The execution-token key is kept by default** ([`TokenKey::Keep`]):
//!   a restore usually replaces a cluster that was lost, and the clients
//!   of that cluster hold execution tokens of the same sandboxes and
//!   generations, which then still verify. `--rotate-token-key`
//!   ([`TokenKey::Rotate`]) gives the new cluster a fresh key (every token
//!   issued before is refused): for a copy that runs beside its source,
//!   or a backup file that may have leaked (it holds the key).
//! - **The driver identity is not kept**: the first leader records its
//!   own, so a restore onto other hosts does not leave every leader
//!   refusing to act.
//! - **Only an empty or new data directory** is seeded: a directory with
//!   anything in it may be a live replica's, whose log and votes a restore
//!   must never overwrite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use palisade_raft::NodeId;
use palisade_raft::backup::{self, Backup, BackupError, TokenKey};

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The backup's header (source cluster, index, digest).
    pub header: backup::BackupHeader,
    /// SHA-256 (hex) of the state the new cluster starts from: the same on
    /// every replica restored from the same file with the same token-key
    /// choice.
    pub restored_digest: String,
    /// Whether the token key was kept.
    pub token_key: TokenKey,
}

/// Why a restore was refused.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The backup file could not be read.
    #[error("cannot read the backup {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a usable backup.
    #[error("{path}: {source}")]
    Backup {
        /// The file.
        path: PathBuf,
        /// Why.
        source: BackupError,
    },
    /// The data directory holds something.
    #[error(
        "data directory {path} is not empty (it holds {first:?}{more}); a restore seeds a new \
         replica and never overwrites one: give a new or empty directory"
    )]
    DataDirNotEmpty {
        /// The directory.
        path: PathBuf,
        /// One entry in it.
        first: String,
        /// ", ..." when there are more.
        more: &'static str,
    },
    /// The node id is not among the new cluster's members.
    #[error(
        "node {node_id} is not in --initial-cluster ({members}); list every member of the new cluster, this one included"
    )]
    NotAMember {
        /// The node id.
        node_id: NodeId,
        /// The members given.
        members: String,
    },
    /// The data directory could not be made or written.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Claiming the directory for the node id failed.
    #[error(transparent)]
    Claim(#[from] crate::node::NodeError),
}

/// Reads and verifies a backup file.
pub fn read_backup(path: &Path) -> Result<Backup, RestoreError> {
    let bytes = std::fs::read(path).map_err(|source| RestoreError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    backup::decode(&bytes).map_err(|source| RestoreError::Backup {
        path: path.to_path_buf(),
        source,
    })
}

/// Seeds `data_dir` as replica `node_id` of a new cluster of `members`
/// (node id -> peer address, as `--initial-cluster`) from the backup at
/// `file` (see the module doc).
pub fn restore(
    file: &Path,
    data_dir: &Path,
    node_id: NodeId,
    members: &BTreeMap<NodeId, String>,
    token_key: TokenKey,
) -> Result<Restored, RestoreError> {
    let backup = read_backup(file)?;
    if !members.contains_key(&node_id) {
        return Err(RestoreError::NotAMember {
            node_id,
            members: members
                .iter()
                .map(|(id, address)| format!("{id}={address}"))
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    ensure_empty(data_dir)?;
    let state = backup::restored_state(backup.state, token_key);
    let state_bytes = serde_json::to_vec(&state).map_err(|error| RestoreError::Backup {
        path: file.to_path_buf(),
        source: BackupError::Invalid(format!("the restored state does not encode: {error}")),
    })?;
    crate::node::claim_data_dir(data_dir, node_id)?;
    backup::seed_snapshot(
        &data_dir.join(crate::node::SNAPSHOT_DIR),
        backup.header.applied_index,
        &state_bytes,
        members,
    )
    .map_err(|source| RestoreError::Backup {
        path: file.to_path_buf(),
        source,
    })?;
    Ok(Restored {
        restored_digest: backup::state_digest(&state_bytes),
        header: backup.header,
        token_key,
    })
}

fn ensure_empty(data_dir: &Path) -> Result<(), RestoreError> {
    let failed = |source| RestoreError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    };
    let mut entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(failed(error)),
    };
    match entries.next() {
        None => Ok(()),
        Some(entry) => {
            let entry = entry.map_err(failed)?;
            Err(RestoreError::DataDirNotEmpty {
                path: data_dir.to_path_buf(),
                first: entry.file_name().to_string_lossy().into_owned(),
                more: if entries.next().is_some() {
                    ", ..."
                } else {
                    ""
                },
            })
        }
    }
}
