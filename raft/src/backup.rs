//! Backups of the replicated state (`palisade cluster snapshot save`) and
//! seeding a new cluster from one (`palisade cluster restore`).
//!
//! # What a backup holds
//!
//! The lifecycle [`State`] at one applied index, encoded exactly as
//! snapshots carry it (the JSON of [`State`], the bytes
//! [`StateHandle::with_encoded`](crate::StateHandle::with_encoded) encodes
//! and `GetClusterInfo.state_digest` hashes), and nothing that depends on
//! the membership: no node ids, addresses, vote or log. A backup of a
//! 3-replica cluster seeds a 5-replica one as well as a 3-replica one.
//!
//! # File format
//!
//! All integers little-endian:
//!
//! | bytes  | content                                                      |
//! |--------|--------------------------------------------------------------|
//! | 8      | magic `PALIBAK1`                                             |
//! | 4      | format version, [`BACKUP_FORMAT_VERSION`]                    |
//! | 8      | length H of the header                                       |
//! | 8      | length S of the state                                        |
//! | H      | header: JSON of [`BackupHeader`]                             |
//! | S      | the state (as snapshots carry it)                            |
//! | 32     | SHA-256 of every byte above                                  |
//!
//! Reading checks, in order: the magic (not a backup), the version (a
//! version this build cannot read is named, never guessed at), the
//! lengths against the file's size (a truncated file is told apart from a
//! damaged one), the SHA-256 (any flipped bit), then that the state hashes
//! to the header's `state_digest` and decodes.
//!
//! # Seeding a new cluster
//!
//! [`seed_snapshot`] writes the state as the replica's current snapshot,
//! at log index = the backup's applied index (term 0), with the new
//! cluster's members as its membership. openraft starts from it as from
//! any snapshot whose log was purged: the replica is initialized (it does
//! not found a cluster again), elects a leader among the new members, and
//! the log goes on from the next index, so resource versions keep growing.
//! [`restored_state`] prepares the state first: the source's cluster
//! identity is dropped (the new cluster's first leader chooses a new
//! cluster id and records its own driver identity, as any first leader
//! does) and its execution-token key is carried over unless rotated
//! ([`CarriedTokenKey`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

use palisade_lifecycle::{CarriedTokenKey, State};
use palisade_storage::{SnapshotBytes, SnapshotFiles, SnapshotSpool};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::StateHandle;
use crate::types::{LogId, Node, NodeId, SnapshotMeta, StoredMembership};

/// The first bytes of every backup file.
pub const BACKUP_MAGIC: [u8; 8] = *b"PALIBAK1";
/// The backup format this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u32 = 1;
/// Magic, version and the two lengths.
const FIXED_BYTES: usize = 8 + 4 + 8 + 8;
/// The SHA-256 at the end.
const CHECKSUM_BYTES: usize = 32;
/// Longest header accepted (it is a few hundred bytes).
const HEADER_BYTES_MAX: u64 = 64 * 1024;

/// What a backup says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The applied index the state is at (consistent: taken under the
    /// state machine's lock, after a read index confirmed with a quorum).
    pub applied_index: u64,
    /// The term of the entry at `applied_index`.
    pub applied_term: u64,
    /// The source cluster's id (empty if it had none yet).
    pub cluster_id: String,
    /// SHA-256 (hex) of the state bytes: the source replica's
    /// `GetClusterInfo.state_digest` at `applied_index`.
    pub state_digest: String,
    /// How the state is encoded: `json` (as snapshots carry it).
    pub state_encoding: String,
    /// The replica that served it.
    pub node_id: u64,
    /// The saving client's wall clock (Unix milliseconds); informational.
    pub created_at_ms: i64,
    /// The version of the `palisade` that wrote it; informational.
    pub palisade_version: String,
}

/// The only state encoding so far.
pub const STATE_ENCODING_JSON: &str = "json";

/// A backup file that was read and verified.
#[derive(Debug, Clone)]
pub struct Backup {
    /// What it says about itself.
    pub header: BackupHeader,
    /// The state's bytes, as snapshots carry them.
    pub state_bytes: Vec<u8>,
    /// The decoded state.
    pub state: State,
}

/// Why a file is not a usable backup.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The file does not start with the backup magic.
    #[error("not a Palisade backup (it does not start with {magic:?}); give a file written by `palisade cluster snapshot save`", magic = String::from_utf8_lossy(&BACKUP_MAGIC))]
    NotABackup,
    /// The file ends before the lengths it declares.
    #[error(
        "the backup is truncated: it is {actual} bytes, but its header declares {expected}; copy the file again from where it was saved"
    )]
    Truncated {
        /// Bytes the header declares (or the fixed header's size).
        expected: u64,
        /// Bytes the file has.
        actual: u64,
    },
    /// The file has more bytes than it declares.
    #[error("the backup is damaged: it is {actual} bytes, but its header declares {expected}")]
    TrailingBytes {
        /// Bytes the header declares.
        expected: u64,
        /// Bytes the file has.
        actual: u64,
    },
    /// A format version this build cannot read.
    #[error(
        "backup format version {found} is not supported: this palisade reads version {supported} (a backup written by a newer release needs that release to restore it; or the file is damaged)"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The SHA-256 does not match the content.
    #[error(
        "the backup is damaged: its SHA-256 is {computed}, but the file records {recorded}; restore from another copy"
    )]
    Checksum {
        /// What the file records.
        recorded: String,
        /// What its content hashes to.
        computed: String,
    },
    /// The content is intact but does not make sense.
    #[error("the backup is not usable: {0}")]
    Invalid(String),
}

/// SHA-256 (hex) of state bytes: what `GetClusterInfo.state_digest` reports.
pub fn state_digest(state_bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(state_bytes))
}

/// Encodes a backup file. `header.state_digest` must be the digest of
/// `state_bytes` (checked: a programmer error otherwise).
pub fn encode(header: &BackupHeader, state_bytes: &[u8]) -> Vec<u8> {
    let capacity = FIXED_BYTES + 1024 + state_bytes.len() + CHECKSUM_BYTES;
    let mut writer = BackupWriter::new(
        Vec::with_capacity(capacity),
        header,
        state_bytes.len() as u64,
    )
    .expect("writing to memory cannot fail");
    writer
        .write_state(state_bytes)
        .expect("the state is as long as declared");
    match writer.finish() {
        Ok((file, _)) => file,
        Err(BackupWriteError::Digest { .. }) => {
            panic!("a backup header names the digest of its own state")
        }
        Err(error) => panic!("writing a backup to memory: {error}"),
    }
}

/// Why a backup being written a piece at a time was not finished.
#[derive(Debug, thiserror::Error)]
pub enum BackupWriteError {
    /// More state bytes than the header declared.
    #[error("the state ran past the {declared} bytes announced for it")]
    TooLong {
        /// Bytes announced.
        declared: u64,
    },
    /// Fewer state bytes than the header declared.
    #[error("the state ended after {written} of the {declared} bytes announced for it")]
    TooShort {
        /// Bytes written.
        written: u64,
        /// Bytes announced.
        declared: u64,
    },
    /// The state does not hash to the header's digest.
    #[error("the state hashes to {computed}, but {declared} was announced for it")]
    Digest {
        /// What the header names.
        declared: String,
        /// What the state written hashes to.
        computed: String,
    },
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Writes a backup file into `out` as its state arrives, a piece at a
/// time (`palisade cluster snapshot save` streams it from the replica
/// into the file): the state is never whole in memory. The length and
/// digest the header announces are checked as the state goes by;
/// [`BackupWriter::finish`] refuses a state that does not match them and
/// only then writes the file's checksum, so an unfinished file never
/// verifies.
#[derive(Debug)]
pub struct BackupWriter<W: io::Write> {
    out: W,
    /// Hashes every byte written, for the checksum at the end.
    file_hash: Sha256,
    /// Hashes the state alone, against the header's `state_digest`.
    state_hash: Sha256,
    declared_state_bytes: u64,
    state_bytes: u64,
    declared_digest: String,
    file_bytes: u64,
}

impl<W: io::Write> BackupWriter<W> {
    /// Writes the fixed part and `header` (announcing `state_bytes` of
    /// state, hashing to `header.state_digest`).
    pub fn new(out: W, header: &BackupHeader, state_bytes: u64) -> io::Result<Self> {
        let header_json = serde_json::to_vec(header).expect("a backup header always serializes");
        let mut writer = BackupWriter {
            out,
            file_hash: Sha256::new(),
            state_hash: Sha256::new(),
            declared_state_bytes: state_bytes,
            state_bytes: 0,
            declared_digest: header.state_digest.clone(),
            file_bytes: 0,
        };
        writer.put(&BACKUP_MAGIC)?;
        writer.put(&BACKUP_FORMAT_VERSION.to_le_bytes())?;
        writer.put(&(header_json.len() as u64).to_le_bytes())?;
        writer.put(&state_bytes.to_le_bytes())?;
        writer.put(&header_json)?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.file_hash.update(bytes);
        self.file_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Appends the next piece of the state.
    pub fn write_state(&mut self, piece: &[u8]) -> Result<(), BackupWriteError> {
        if self.state_bytes + piece.len() as u64 > self.declared_state_bytes {
            return Err(BackupWriteError::TooLong {
                declared: self.declared_state_bytes,
            });
        }
        self.put(piece)?;
        self.state_hash.update(piece);
        self.state_bytes += piece.len() as u64;
        Ok(())
    }

    /// State bytes written so far.
    pub fn state_bytes(&self) -> u64 {
        self.state_bytes
    }

    /// Checks the state against the header, writes the checksum and
    /// answers `out` (flushed, not synced) and the file's size.
    pub fn finish(mut self) -> Result<(W, u64), BackupWriteError> {
        if self.state_bytes != self.declared_state_bytes {
            return Err(BackupWriteError::TooShort {
                written: self.state_bytes,
                declared: self.declared_state_bytes,
            });
        }
        let computed = hex::encode(self.state_hash.finalize_reset());
        if computed != self.declared_digest {
            return Err(BackupWriteError::Digest {
                declared: self.declared_digest,
                computed,
            });
        }
        let checksum = self.file_hash.finalize_reset();
        self.out.write_all(&checksum)?;
        self.out.flush()?;
        Ok((self.out, self.file_bytes + CHECKSUM_BYTES as u64))
    }
}

/// A replica's state encoded for a backup into an unnamed temporary file
/// (see [`spool_state`]).
#[derive(Debug)]
pub struct SpooledState {
    /// The state's bytes, as snapshots carry them.
    pub bytes: SnapshotBytes,
    /// Their SHA-256 (hex), what [`state_digest`] answers.
    pub digest: String,
    /// The log id the state was applied up to.
    pub last_applied: Option<LogId>,
    /// The cluster's id in that state (empty if it has none yet).
    pub cluster_id: String,
}

/// Encodes the applied state into an unnamed temporary file in `dir` (the
/// replica's snapshot directory: a state of receipts is hundreds of
/// megabytes) or the system's temporary directory, hashing it on the way:
/// what `SaveSnapshot` serves a piece at a time. The heap holds the
/// encoder's buffer, not the state's bytes.
pub fn spool_state(state: &StateHandle, dir: Option<&Path>) -> io::Result<SpooledState> {
    let mut spool = SnapshotSpool::new_in(dir)?;
    let mut hash = Sha256::new();
    let (last_applied, cluster_id) = state.encode_into_with(
        HashedSpool {
            spool: &mut spool,
            hash: &mut hash,
        },
        |applied| {
            let cluster_id = applied.state.cluster.as_ref();
            (
                applied.last_applied,
                cluster_id.map_or_else(String::new, |cluster| cluster.cluster_id.clone()),
            )
        },
    )?;
    Ok(SpooledState {
        bytes: spool.finish()?,
        digest: hex::encode(hash.finalize()),
        last_applied,
        cluster_id,
    })
}

/// The writer [`spool_state`] encodes into.
struct HashedSpool<'a> {
    spool: &'a mut SnapshotSpool,
    hash: &'a mut Sha256,
}

impl io::Write for HashedSpool<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.spool.write(bytes)?;
        self.hash.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads and verifies a backup file's bytes (see the module doc).
pub fn decode(file: &[u8]) -> Result<Backup, BackupError> {
    let actual = file.len() as u64;
    let magic_len = BACKUP_MAGIC.len().min(file.len());
    if file[..magic_len] != BACKUP_MAGIC[..magic_len] {
        return Err(BackupError::NotABackup);
    }
    if file.len() < FIXED_BYTES {
        return Err(BackupError::Truncated {
            expected: FIXED_BYTES as u64,
            actual,
        });
    }
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().expect("8 bytes"));
    let version = u32_at(8);
    if version != BACKUP_FORMAT_VERSION {
        return Err(BackupError::UnsupportedVersion {
            found: version,
            supported: BACKUP_FORMAT_VERSION,
        });
    }
    let (header_len, state_len) = (u64_at(12), u64_at(20));
    let expected = (FIXED_BYTES as u64)
        .checked_add(header_len)
        .and_then(|total| total.checked_add(state_len))
        .and_then(|total| total.checked_add(CHECKSUM_BYTES as u64))
        .ok_or_else(|| BackupError::Invalid("its declared lengths overflow".into()))?;
    if actual < expected {
        return Err(BackupError::Truncated { expected, actual });
    }
    if actual > expected {
        return Err(BackupError::TrailingBytes { expected, actual });
    }
    let body_len = file.len() - CHECKSUM_BYTES;
    let computed = Sha256::digest(&file[..body_len]);
    if computed[..] != file[body_len..] {
        return Err(BackupError::Checksum {
            recorded: hex::encode(&file[body_len..]),
            computed: hex::encode(computed),
        });
    }
    if header_len > HEADER_BYTES_MAX {
        return Err(BackupError::Invalid(format!(
            "its header is {header_len} bytes (at most {HEADER_BYTES_MAX})"
        )));
    }
    let header_end = FIXED_BYTES + header_len as usize;
    let header: BackupHeader = serde_json::from_slice(&file[FIXED_BYTES..header_end])
        .map_err(|error| BackupError::Invalid(format!("its header does not decode: {error}")))?;
    if header.state_encoding != STATE_ENCODING_JSON {
        return Err(BackupError::Invalid(format!(
            "state encoding {:?} is not supported (this palisade reads {STATE_ENCODING_JSON:?})",
            header.state_encoding
        )));
    }
    let state_bytes = file[header_end..body_len].to_vec();
    let digest = state_digest(&state_bytes);
    if digest != header.state_digest {
        return Err(BackupError::Invalid(format!(
            "its state hashes to {digest}, but its header records {}",
            header.state_digest
        )));
    }
    let state: State = serde_json::from_slice(&state_bytes)
        .map_err(|error| BackupError::Invalid(format!("its state does not decode: {error}")))?;
    Ok(Backup {
        header,
        state_bytes,
        state,
    })
}

/// What to do with the source's execution-token key on restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKey {
    /// Keep it: execution tokens issued by the source still verify.
    Keep,
    /// Drop it: the new cluster's first leader chooses a new one, and every
    /// token issued before is refused (UNVERIFIABLE_EXECUTION_TOKEN).
    Rotate,
}

/// The state a new cluster starts from: the backup's, without the
/// source's cluster identity (see the module doc), its token key carried
/// over unless rotated.
pub fn restored_state(mut state: State, token_key: TokenKey) -> State {
    let identity = state.cluster.take();
    // A backup of a restored cluster whose first leader never ran still
    // carries the key it was restored with.
    let carried = state.carried_token_key.take();
    state.carried_token_key = match token_key {
        TokenKey::Rotate => None,
        TokenKey::Keep => identity
            .map(|identity| CarriedTokenKey {
                token_domain: identity.token_domain().to_string(),
                token_secret_hex: identity.token_secret_hex,
            })
            .or(carried),
    };
    state
}

/// Writes `state_bytes` as the current snapshot in `snapshot_dir`, at log
/// index `applied_index` (term 0), with `members` (all voters) as the
/// membership: what a replica of a new cluster restored from a backup
/// starts from (see the module doc). The directory must hold no snapshot.
pub fn seed_snapshot(
    snapshot_dir: &Path,
    applied_index: u64,
    state_bytes: &[u8],
    members: &BTreeMap<NodeId, String>,
) -> Result<(), BackupError> {
    if members.is_empty() {
        return Err(BackupError::Invalid(
            "no members for the new cluster".into(),
        ));
    }
    let log_id = LogId::new(0.into(), applied_index);
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let nodes: BTreeMap<NodeId, Node> = members
        .iter()
        .map(|(id, address)| {
            (
                *id,
                Node {
                    addr: address.clone(),
                },
            )
        })
        .collect();
    let membership = openraft::Membership::new(vec![voters], nodes)
        .map_err(|error| BackupError::Invalid(format!("membership: {error}")))?;
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
    };
    let snapshots = SnapshotFiles::<SnapshotMeta>::open(snapshot_dir)
        .map_err(|error| BackupError::Invalid(error.to_string()))?;
    snapshots
        .save(&meta, state_bytes)
        .map_err(|error| BackupError::Invalid(error.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(state_bytes: &[u8]) -> BackupHeader {
        BackupHeader {
            applied_index: 42,
            applied_term: 3,
            cluster_id: "source".into(),
            state_digest: state_digest(state_bytes),
            state_encoding: STATE_ENCODING_JSON.into(),
            node_id: 1,
            created_at_ms: 0,
            palisade_version: "test".into(),
        }
    }

    fn sample() -> Vec<u8> {
        let state = serde_json::to_vec(&State::new()).unwrap();
        encode(&header(&state), &state)
    }

    #[test]
    fn round_trip() {
        let backup = decode(&sample()).unwrap();
        assert_eq!(backup.header.applied_index, 42);
        assert_eq!(backup.state, State::new());
    }

    #[test]
    fn a_backup_written_in_pieces_is_the_backup_written_whole() {
        let state = serde_json::to_vec(&State::new()).unwrap();
        let whole = encode(&header(&state), &state);
        let mut writer =
            BackupWriter::new(Vec::new(), &header(&state), state.len() as u64).unwrap();
        for piece in state.chunks(7) {
            writer.write_state(piece).unwrap();
        }
        let (pieces, file_bytes) = writer.finish().unwrap();
        assert_eq!(pieces, whole);
        assert_eq!(file_bytes, whole.len() as u64);
        assert_eq!(decode(&pieces).unwrap().state, State::new());
    }

    #[test]
    fn a_state_streamed_unlike_its_announcement_is_refused() {
        let state = serde_json::to_vec(&State::new()).unwrap();
        let declared = state.len() as u64;

        let mut short = BackupWriter::new(Vec::new(), &header(&state), declared).unwrap();
        short.write_state(&state[..state.len() - 1]).unwrap();
        assert!(matches!(
            short.finish().unwrap_err(),
            BackupWriteError::TooShort { written, declared: d } if written == declared - 1 && d == declared
        ));

        let mut long = BackupWriter::new(Vec::new(), &header(&state), declared - 1).unwrap();
        assert!(matches!(
            long.write_state(&state).unwrap_err(),
            BackupWriteError::TooLong { .. }
        ));

        let mut other = state.clone();
        other[0] ^= 1;
        let mut damaged = BackupWriter::new(Vec::new(), &header(&state), declared).unwrap();
        damaged.write_state(&other).unwrap();
        let error = damaged.finish().unwrap_err();
        assert!(matches!(error, BackupWriteError::Digest { .. }), "{error}");
    }

    #[test]
    fn every_flipped_bit_after_the_version_is_detected() {
        let file = sample();
        for byte in 12..file.len() {
            for bit in 0..8 {
                let mut damaged = file.clone();
                damaged[byte] ^= 1 << bit;
                let error = decode(&damaged).expect_err("damage must be detected");
                assert!(
                    matches!(
                        error,
                        BackupError::Checksum { .. }
                            | BackupError::Truncated { .. }
                            | BackupError::TrailingBytes { .. }
                            | BackupError::Invalid(_)
                    ),
                    "byte {byte} bit {bit}: {error}"
                );
            }
        }
    }

    #[test]
    fn truncation_wrong_version_and_foreign_files_are_named() {
        let file = sample();
        for cut in [0, 5, 20, file.len() / 2, file.len() - 1] {
            let error = decode(&file[..cut]).unwrap_err();
            assert!(
                matches!(error, BackupError::Truncated { .. }),
                "cut at {cut}: {error}"
            );
        }
        let mut newer = file.clone();
        newer[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            decode(&newer).unwrap_err(),
            BackupError::UnsupportedVersion {
                found: 2,
                supported: 1
            }
        ));
        assert!(matches!(
            decode(b"{\"not\": \"a backup\"}").unwrap_err(),
            BackupError::NotABackup
        ));
    }

    #[test]
    fn restoring_keeps_or_rotates_the_token_key_and_drops_the_identity() {
        let mut state = State::new();
        state.cluster = Some(palisade_lifecycle::ClusterIdentity {
            cluster_id: "source".into(),
            token_secret_hex: "ab".repeat(32),
            token_domain: String::new(),
            driver_identity: "host-a".into(),
            token_key_id: 1,
            retired_token_keys: Vec::new(),
        });
        let kept = restored_state(state.clone(), TokenKey::Keep);
        assert!(kept.cluster.is_none());
        assert_eq!(
            kept.carried_token_key,
            Some(CarriedTokenKey {
                token_secret_hex: "ab".repeat(32),
                token_domain: "source".into(),
            })
        );
        let rotated = restored_state(state, TokenKey::Rotate);
        assert!(rotated.cluster.is_none());
        assert!(rotated.carried_token_key.is_none());
    }

    #[tokio::test]
    async fn a_seeded_snapshot_opens_at_the_backup_index_with_the_new_members() {
        use openraft::storage::RaftStateMachine;
        let dir = tempfile::tempdir().unwrap();
        let state = serde_json::to_vec(&State::new()).unwrap();
        let members = BTreeMap::from([
            (1, "127.0.0.1:1".to_string()),
            (2, "127.0.0.1:2".to_string()),
        ]);
        seed_snapshot(dir.path(), 42, &state, &members).unwrap();
        let mut machine = crate::LifecycleStateMachine::open(dir.path()).unwrap();
        let (applied, membership) = machine.applied_state().await.unwrap();
        assert_eq!(applied.map(|id| id.index), Some(42));
        let voters: Vec<u64> = membership.membership().voter_ids().collect();
        assert_eq!(voters, vec![1, 2]);
    }
}
