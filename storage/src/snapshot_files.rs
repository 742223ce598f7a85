//! The state machine's current snapshot on disk: one file, replaced
//! atomically, checksummed.
//!
//! [`SnapshotFiles::save`] writes a temporary file, fsyncs it, renames it over
//! the current snapshot and fsyncs the directory. A crash at any point leaves
//! either the old snapshot or the new one, never a mix; a leftover temporary
//! file is deleted by [`SnapshotFiles::open`]. The raft crate uses this for
//! `install_snapshot` (which must be atomic across a crash), for
//! `get_current_snapshot`, and to restore the state machine on restart.
//!
//! # Never older than the one in place
//!
//! A snapshot build (a copy of the state taken a while ago, serialized in
//! the background) can finish after a newer snapshot was installed from the
//! leader, and the log may already be purged up to the installed one. Were
//! the build's file to replace the installed one, the replica would restart
//! from an old snapshot followed by a gap in its log, and could not start at
//! all. So [`SnapshotFiles::save`] compares positions ([`SnapshotPosition`]:
//! the last log index a snapshot covers) under the same lock that orders
//! the writes, and keeps the snapshot in place when the new one is not newer
//! ([`Saved::KeptInPlace`]).
//!
//! # File format
//!
//! All integers little-endian:
//!
//! | bytes      | content                                                   |
//! |------------|-----------------------------------------------------------|
//! | 4          | magic `PSNP`                                              |
//! | 4          | format version, `1`                                       |
//! | 8          | length of the metadata                                    |
//! | 8          | length of the data                                        |
//! | 4          | CRC-32 of the 24 bytes above, the metadata and the data   |
//! | metadata   | JSON of the caller's metadata type                        |
//! | data       | the snapshot bytes, opaque to this crate                  |
//!
//! The lengths are checked against the file's size before anything is
//! allocated, so a damaged header cannot make `load` allocate wildly.
//!
//! # Key decision: the data reaches the disk in steps while it is written
//!
//! A snapshot is hundreds of megabytes once the state holds many receipts.
//! Written into the page cache and fsynced once at the end, all of it was
//! flushed in one go, and every fsync of the Raft log queued behind that
//! flush on the same disk (ext4 orders a journal commit after the data it
//! covers): in the load test (`palisade-load`) the leader's `save_committed`
//! waited 180-430 ms after each build, its Raft core with it, and so did
//! every read's read index. So [`SnapshotFiles::save_streamed`] syncs the
//! data every [`SYNC_STEP_BYTES`] as it writes it: what a log fsync can find
//! in its way is one step, milliseconds of the disk's time, and the final
//! fsync has little left to do.
//!
//! # Blocking
//!
//! Both `save` and `load` do blocking file IO (and `save` fsyncs): call them
//! from a blocking task.

use std::fmt;
use std::fs;
use std::fs::File;
use std::io;
use std::io::Read;
use std::io::Write;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use serde::Serialize;

use crate::snapshot_bytes::SnapshotBytes;
use serde::de::DeserializeOwned;

/// Name of the current snapshot file inside the snapshot directory.
pub const SNAPSHOT_FILE_NAME: &str = "snapshot";

/// Name of the file a snapshot is written to before it replaces the current one.
/// Temporary snapshot files start with this (`snapshot.tmp` before
/// streamed saves; `snapshot.tmp.XXXXXX` since).
const TEMPORARY_FILE_PREFIX: &str = "snapshot.tmp";
/// Most bytes of metadata a snapshot file may declare (a log id and a
/// membership are a few kilobytes).
const META_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Pieces in which a snapshot's data is read to verify it.
const READ_PIECE_BYTES: usize = 1024 * 1024;
/// Buffer between the encoder and the file.
const WRITE_BUFFER_BYTES: usize = 1024 * 1024;
/// Bytes of a snapshot written between two syncs of its file while it is
/// written (see the module doc): a few milliseconds of this machine's disk
/// (~2 GB/s), a few hundred syncs for the largest snapshot.
pub const SYNC_STEP_BYTES: u64 = 8 * 1024 * 1024;

const MAGIC: [u8; 4] = *b"PSNP";
const FORMAT_VERSION: u32 = 1;
/// Magic, version and the two lengths: the part of the header the checksum covers.
const HEADER_FIELDS_BYTES: usize = 4 + 4 + 8 + 8;
const HEADER_BYTES: usize = HEADER_FIELDS_BYTES + 4;

/// Where a snapshot stands in the log: the index of the last entry it
/// covers (`None`: it covers none). A committed index names one entry on
/// every replica, so the index alone orders snapshots.
pub trait SnapshotPosition {
    /// Index of the last log entry the snapshot covers.
    fn last_log_index(&self) -> Option<u64>;
}

impl<CLID, NID, N> SnapshotPosition for openraft::storage::SnapshotMeta<CLID, NID, N>
where
    CLID: openraft::vote::RaftCommittedLeaderId,
    NID: openraft::NodeId,
    N: openraft::Node,
{
    fn last_log_index(&self) -> Option<u64> {
        self.last_log_id.as_ref().map(|log_id| log_id.index)
    }
}

/// What [`SnapshotFiles::save`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// The new snapshot replaced the one in place (or is the first).
    Replaced,
    /// The snapshot in place covers as much of the log as the new one or
    /// more, so it was kept and the new one was not written.
    KeptInPlace {
        /// Last log index the snapshot in place covers.
        in_place: Option<u64>,
    },
}

/// What this handle knows of the file in place.
#[derive(Debug, Clone, Copy)]
enum InPlace {
    /// Not read yet (the first `save` or `load` reads it).
    Unknown,
    /// The snapshot in place covers up to this index; `Known(None)` also
    /// when there is no snapshot file.
    Known(Option<u64>),
}

/// The current snapshot of one replica's state machine, stored in a
/// directory. `M` is the snapshot metadata type (openraft's `SnapshotMeta`
/// in Palisade), stored as JSON next to the opaque snapshot bytes.
///
/// Use one `SnapshotFiles` per directory (clones share it). Keep the
/// directory inside the replica's data directory, whose log database lock
/// already keeps a second process out.
pub struct SnapshotFiles<M> {
    dir: PathBuf,
    /// Orders `save` and `load`, and holds the position of the snapshot in
    /// place, so a save compares with exactly the file it would replace.
    /// Concurrent saves would also write the same temporary file. If a
    /// holder panicked, the position may be stale: a poisoned lock is taken
    /// over with the position reset to unknown (the next save reads the
    /// file again). A std mutex because `save` and `load` are blocking
    /// code, never held across an await.
    in_place: Arc<Mutex<InPlace>>,
    _meta: PhantomData<fn() -> M>,
}

impl<M> Clone for SnapshotFiles<M> {
    fn clone(&self) -> Self {
        SnapshotFiles {
            dir: self.dir.clone(),
            in_place: Arc::clone(&self.in_place),
            _meta: PhantomData,
        }
    }
}

impl<M> fmt::Debug for SnapshotFiles<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotFiles")
            .field("dir", &self.dir)
            .finish()
    }
}

impl<M: Serialize + DeserializeOwned + SnapshotPosition> SnapshotFiles<M> {
    /// Opens the snapshot directory `dir`, creating it if needed, and deletes
    /// the temporary file a crash in the middle of a save may have left.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, SnapshotError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(SnapshotError::io("create the directory", &dir))?;
        // Temporary files left by a crash: half-written, or never renamed.
        let mut removed = false;
        for entry in fs::read_dir(&dir).map_err(SnapshotError::io("list", &dir))? {
            let entry = entry.map_err(SnapshotError::io("list", &dir))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(TEMPORARY_FILE_PREFIX) {
                let temporary = entry.path();
                fs::remove_file(&temporary).map_err(SnapshotError::io("remove", &temporary))?;
                tracing::info!(
                    path = %temporary.display(),
                    "removed a snapshot left half-written by a crash"
                );
                removed = true;
            }
        }
        if removed {
            sync_directory(&dir)?;
        }
        Ok(SnapshotFiles {
            dir,
            in_place: Arc::new(Mutex::new(InPlace::Unknown)),
            _meta: PhantomData,
        })
    }

    fn lock_in_place(&self) -> std::sync::MutexGuard<'_, InPlace> {
        self.in_place.lock().unwrap_or_else(|poisoned| {
            let mut guard = poisoned.into_inner();
            *guard = InPlace::Unknown;
            guard
        })
    }

    /// The snapshot directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current snapshot file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE_NAME)
    }

    /// Replaces the current snapshot with (`meta`, `data`), atomically and
    /// durably, unless the snapshot in place covers as much of the log or
    /// more ([`Saved::KeptInPlace`]: nothing is written). When this returns
    /// `Ok(Saved::Replaced)`, a crash leaves the new snapshot; if it fails or
    /// crashes before, the old one is still there.
    ///
    /// A snapshot in place that fails verification is replaced: it could
    /// not be restarted from anyway.
    pub fn save(&self, meta: &M, data: &[u8]) -> Result<Saved, SnapshotError> {
        self.save_streamed(meta, |out| out.write_all(data))
            .map(|(saved, _)| saved)
    }

    /// [`SnapshotFiles::save`], with the data written by `write` as it is
    /// produced (a state encoded straight into the file, a received
    /// snapshot copied from its spool): the data is never all in memory.
    /// Answers what was saved and the data as written (readable even when
    /// the snapshot in place was kept, or later replaced).
    ///
    /// The file is written and synced under a temporary name of its own
    /// (a build and an install may write at once), then renamed into place
    /// under the lock that orders saves, if it is newer than the one there.
    pub fn save_streamed(
        &self,
        meta: &M,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(Saved, SnapshotBytes), SnapshotError> {
        let position = meta.last_log_index();
        let meta = serde_json::to_vec(meta).map_err(SnapshotError::Encode)?;
        let temporary = tempfile::Builder::new()
            .prefix(TEMPORARY_FILE_PREFIX)
            .tempfile_in(&self.dir)
            .map_err(SnapshotError::io(
                "create a temporary snapshot in",
                &self.dir,
            ))?;
        let temporary_path = temporary.path().to_path_buf();
        let failed = |operation| SnapshotError::io(operation, &temporary_path);

        // The header goes last: its lengths and checksum are known only
        // once the data is written.
        let mut file = temporary.as_file();
        file.write_all(&[0u8; HEADER_BYTES])
            .and_then(|()| file.write_all(&meta))
            .map_err(failed("write"))?;
        let (data_bytes, data_hasher) = {
            let mut data = Checksummed {
                out: io::BufWriter::with_capacity(
                    WRITE_BUFFER_BYTES,
                    SyncedInSteps::new(file, SYNC_STEP_BYTES),
                ),
                hasher: crc32fast::Hasher::new(),
                len: 0,
            };
            write(&mut data)
                .and_then(|()| data.out.flush())
                .map_err(failed("write"))?;
            (data.len, data.hasher)
        };
        let fields = header_fields(meta.len() as u64, data_bytes);
        let checksum = {
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&fields);
            hasher.update(&meta);
            hasher.combine(&data_hasher);
            hasher.finalize()
        };
        let mut header = [0u8; HEADER_BYTES];
        header[..HEADER_FIELDS_BYTES].copy_from_slice(&fields);
        header[HEADER_FIELDS_BYTES..].copy_from_slice(&checksum.to_le_bytes());
        file.write_all_at(&header, 0).map_err(failed("write"))?;
        file.sync_all().map_err(failed("fsync"))?;
        let data_start = (HEADER_BYTES + meta.len()) as u64;
        let written = temporary.as_file().try_clone().map_err(failed("reopen"))?;
        let written = SnapshotBytes::in_file(written, data_start, data_bytes);

        let mut in_place = self.lock_in_place();
        let current = match *in_place {
            InPlace::Known(current) => current,
            InPlace::Unknown => match self.read() {
                Ok(loaded) => loaded.and_then(|(meta, _)| meta.last_log_index()),
                Err(SnapshotError::Corrupt { .. }) | Err(SnapshotError::Undecodable { .. }) => None,
                Err(error) => return Err(error),
            },
        };
        *in_place = InPlace::Known(current);
        // The planted bug (TEST-ONLY, `crate::planted`) skips this check.
        if current.is_some() && current >= position && !crate::planted::save_older_snapshot() {
            tracing::info!(
                in_place = ?current,
                offered = ?position,
                "kept the snapshot in place: the offered one is not newer"
            );
            // Dropping the temporary file removes it.
            return Ok((Saved::KeptInPlace { in_place: current }, written));
        }
        let path = self.path();
        temporary
            .persist(&path)
            .map_err(|error| SnapshotError::io("rename into place", &path)(error.error))?;
        sync_directory(&self.dir)?;
        *in_place = InPlace::Known(position);
        tracing::debug!(
            path = %path.display(),
            data_bytes,
            "saved the snapshot"
        );
        Ok((Saved::Replaced, written))
    }

    /// Reads and verifies the snapshot in place in `dir`, all in memory,
    /// without taking the directory over: unlike [`SnapshotFiles::open`] it
    /// creates nothing and removes no temporary file, so it may look into
    /// the directory of a replica that is running (and may be in the middle
    /// of a save, whose temporary file `open` would delete). `None` if
    /// there is none. For tools and tests.
    pub fn peek(dir: impl AsRef<Path>) -> Result<Option<(M, Vec<u8>)>, SnapshotError> {
        SnapshotFiles {
            dir: dir.as_ref().to_path_buf(),
            in_place: Arc::new(Mutex::new(InPlace::Unknown)),
            _meta: PhantomData,
        }
        .load()
    }

    /// Reads and verifies the current snapshot, all in memory; `None` if
    /// there is none. (Tools and tests; a replica reads it with
    /// [`SnapshotFiles::open_current`].)
    pub fn load(&self) -> Result<Option<(M, Vec<u8>)>, SnapshotError> {
        let path = self.path();
        self.open_current()?
            .map(|(meta, data)| {
                Ok((
                    meta,
                    data.to_vec().map_err(SnapshotError::io("read", &path))?,
                ))
            })
            .transpose()
    }

    /// Verifies the current snapshot (reading it through, in pieces) and
    /// answers its metadata and its data, still in the file; `None` if
    /// there is none.
    pub fn open_current(&self) -> Result<Option<(M, SnapshotBytes)>, SnapshotError> {
        let mut in_place = self.lock_in_place();
        let loaded = self.read()?;
        *in_place = InPlace::Known(loaded.as_ref().and_then(|(meta, _)| meta.last_log_index()));
        Ok(loaded)
    }

    /// Reads and verifies the file; the caller holds the `in_place` lock.
    fn read(&self) -> Result<Option<(M, SnapshotBytes)>, SnapshotError> {
        let path = self.path();
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(SnapshotError::io("open", &path)(error)),
        };
        let file_bytes = file
            .metadata()
            .map_err(SnapshotError::io("stat", &path))?
            .len();
        let corrupt = |problem| SnapshotError::Corrupt {
            path: path.clone(),
            problem,
        };

        if file_bytes < HEADER_BYTES as u64 {
            return Err(corrupt(SnapshotCorruption::Truncated { file_bytes }));
        }
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact(&mut header)
            .map_err(SnapshotError::io("read", &path))?;
        let (fields, stored) = header.split_at(HEADER_FIELDS_BYTES);
        let field = |at: usize, len: usize| &fields[at..at + len];
        if field(0, 4) != MAGIC {
            return Err(corrupt(SnapshotCorruption::NotASnapshot));
        }
        let version = u32::from_le_bytes(to_array(field(4, 4)));
        if version != FORMAT_VERSION {
            return Err(SnapshotError::UnsupportedFormat {
                path,
                found: version,
            });
        }
        let meta_bytes = u64::from_le_bytes(to_array(field(8, 8)));
        let data_bytes = u64::from_le_bytes(to_array(field(16, 8)));
        let declared = (HEADER_BYTES as u64)
            .checked_add(meta_bytes)
            .and_then(|sum| sum.checked_add(data_bytes));
        if declared != Some(file_bytes) {
            return Err(corrupt(SnapshotCorruption::LengthMismatch {
                meta_bytes,
                data_bytes,
                file_bytes,
            }));
        }
        // The metadata is small (a log id and a membership); the data is
        // checked in pieces and stays in the file.
        let meta_len = usize::try_from(meta_bytes)
            .ok()
            .filter(|len| *len <= META_BYTES_MAX)
            .ok_or_else(|| corrupt(SnapshotCorruption::TooLarge { file_bytes }))?;
        let mut meta = vec![0u8; meta_len];
        file.read_exact(&mut meta)
            .map_err(SnapshotError::io("read", &path))?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(fields);
        hasher.update(&meta);
        let mut piece = vec![0u8; READ_PIECE_BYTES];
        let mut left = data_bytes;
        while left > 0 {
            let wanted = piece.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            file.read_exact(&mut piece[..wanted])
                .map_err(SnapshotError::io("read", &path))?;
            hasher.update(&piece[..wanted]);
            left -= wanted as u64;
        }
        let stored = u32::from_le_bytes(to_array(stored));
        let computed = hasher.finalize();
        if stored != computed {
            return Err(corrupt(SnapshotCorruption::Checksum { stored, computed }));
        }
        let meta = serde_json::from_slice(&meta)
            .map_err(|source| SnapshotError::Undecodable { path, source })?;
        Ok(Some((
            meta,
            SnapshotBytes::in_file(file, (HEADER_BYTES as u64) + meta_bytes, data_bytes),
        )))
    }
}

/// The data being written into a snapshot file, checksummed and counted on
/// the way.
struct Checksummed<W> {
    out: W,
    hasher: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.out.write(bytes)?;
        self.hasher.update(&bytes[..written]);
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// What [`SyncedInSteps`] syncs: a file, or a test's recorder.
trait SyncData: Write {
    /// Makes what was written so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
}

impl SyncData for &File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

/// Writes through to `out` and syncs it after every `step` bytes (see the
/// module doc), so that no more than a step of written data waits in the
/// page cache for the disk.
struct SyncedInSteps<W> {
    out: W,
    step: u64,
    unsynced: u64,
}

impl<W: SyncData> SyncedInSteps<W> {
    fn new(out: W, step: u64) -> Self {
        assert!(step > 0, "a sync step of zero bytes would sync forever");
        Self {
            out,
            step,
            unsynced: 0,
        }
    }
}

impl<W: SyncData> Write for SyncedInSteps<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.out.write(bytes)?;
        self.unsynced += written as u64;
        if self.unsynced >= self.step {
            self.out.sync_data()?;
            self.unsynced = 0;
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn header_fields(meta_bytes: u64, data_bytes: u64) -> [u8; HEADER_FIELDS_BYTES] {
    let mut fields = [0u8; HEADER_FIELDS_BYTES];
    fields[0..4].copy_from_slice(&MAGIC);
    fields[4..8].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    fields[8..16].copy_from_slice(&meta_bytes.to_le_bytes());
    fields[16..24].copy_from_slice(&data_bytes.to_le_bytes());
    fields
}

fn to_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    bytes
        .try_into()
        .expect("header fields are sliced at their fixed widths")
}

fn sync_directory(dir: &Path) -> Result<(), SnapshotError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(SnapshotError::io("fsync the directory", dir))
}

/// What is wrong with a snapshot file that fails verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotCorruption {
    /// The file does not start with the snapshot magic.
    #[error("it does not start with the snapshot magic")]
    NotASnapshot,
    /// The file is shorter than the header.
    #[error("it is {file_bytes} bytes long, shorter than the header")]
    Truncated {
        /// Size of the file.
        file_bytes: u64,
    },
    /// The lengths in the header do not add up to the file's size.
    #[error(
        "the header declares {meta_bytes} bytes of metadata and {data_bytes} bytes of data, \
         which do not add up to the file's {file_bytes} bytes"
    )]
    LengthMismatch {
        /// Declared metadata length.
        meta_bytes: u64,
        /// Declared data length.
        data_bytes: u64,
        /// Size of the file.
        file_bytes: u64,
    },
    /// The file does not fit in this machine's address space.
    #[error("the file's {file_bytes} bytes do not fit in memory")]
    TooLarge {
        /// Size of the file.
        file_bytes: u64,
    },
    /// The checksum does not match the contents.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Checksum read from the header.
        stored: u32,
        /// Checksum computed over the contents.
        computed: u32,
    },
}

/// Everything that can go wrong saving or loading a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A file system operation failed.
    #[error(
        "cannot {operation} {path}: {source}; check free space, permissions and the health of \
         the data volume"
    )]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The metadata could not be serialized.
    #[error(
        "cannot encode the snapshot metadata: {0}; this is a bug in palisade, please report it"
    )]
    Encode(#[source] serde_json::Error),

    /// The snapshot file failed verification. Its contents are never returned.
    #[error(
        "the snapshot {path} is corrupt: {problem}; this replica's state can no longer be \
         trusted: stop it, move its data directory aside for inspection, and re-add the replica \
         to the cluster under a new node id"
    )]
    Corrupt {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        problem: SnapshotCorruption,
    },

    /// The file was written in another format version.
    #[error(
        "the snapshot {path} has format version {found} but this build reads version \
         {FORMAT_VERSION}; run the palisade release that wrote it"
    )]
    UnsupportedFormat {
        /// The snapshot file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },

    /// The metadata has a valid checksum but does not deserialize.
    #[error(
        "the metadata of snapshot {path} has a valid checksum but does not decode ({source}); \
         it was probably written by another palisade release"
    )]
    Undecodable {
        /// The snapshot file.
        path: PathBuf,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl SnapshotError {
    fn io(operation: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io {
            operation,
            path,
            source,
        }
    }

    /// The [`io::ErrorKind`] this error becomes at the openraft boundary.
    pub fn io_kind(&self) -> io::ErrorKind {
        match self {
            SnapshotError::Io { source, .. } => source.kind(),
            SnapshotError::Encode(_) => io::ErrorKind::InvalidInput,
            SnapshotError::Corrupt { .. }
            | SnapshotError::UnsupportedFormat { .. }
            | SnapshotError::Undecodable { .. } => io::ErrorKind::InvalidData,
        }
    }
}

impl From<SnapshotError> for io::Error {
    fn from(error: SnapshotError) -> io::Error {
        io::Error::new(error.io_kind(), error)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Meta {
        last_index: u64,
        id: String,
    }

    impl SnapshotPosition for Meta {
        fn last_log_index(&self) -> Option<u64> {
            Some(self.last_index)
        }
    }

    fn meta(last_index: u64) -> Meta {
        Meta {
            last_index,
            id: format!("snapshot-{last_index}"),
        }
    }

    fn open(dir: &Path) -> SnapshotFiles<Meta> {
        SnapshotFiles::open(dir).unwrap()
    }

    /// Records how many bytes were written before each sync.
    #[derive(Default)]
    struct SyncRecorder {
        written: u64,
        unsynced: u64,
        synced_after: Vec<u64>,
    }

    impl Write for &mut SyncRecorder {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.written += bytes.len() as u64;
            self.unsynced += bytes.len() as u64;
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl SyncData for &mut SyncRecorder {
        fn sync_data(&mut self) -> io::Result<()> {
            self.synced_after.push(self.unsynced);
            self.unsynced = 0;
            Ok(())
        }
    }

    #[test]
    fn a_snapshot_is_synced_every_step_while_it_is_written() {
        let step = 64 * 1024;
        let mut recorder = SyncRecorder::default();
        {
            // As `save_streamed` writes: through its buffer, in pieces of
            // any size (an encoder's).
            let mut out = io::BufWriter::with_capacity(
                WRITE_BUFFER_BYTES / 16,
                SyncedInSteps::new(&mut recorder, step),
            );
            for piece in 0..10_000usize {
                out.write_all(&vec![b'x'; piece % 333]).unwrap();
            }
            out.flush().unwrap();
        }
        assert_eq!(
            recorder.written,
            (0..10_000u64).map(|piece| piece % 333).sum::<u64>()
        );
        // Never more than a step (plus one buffer's write) waits for a sync.
        let buffer = (WRITE_BUFFER_BYTES / 16) as u64;
        assert!(
            recorder.synced_after.len() as u64 >= recorder.written / (step + buffer),
            "synced {} times for {} bytes",
            recorder.synced_after.len(),
            recorder.written
        );
        assert!(
            recorder
                .synced_after
                .iter()
                .all(|&unsynced| unsynced >= step && unsynced < step + buffer),
            "{:?}",
            recorder.synced_after
        );
        assert!(recorder.unsynced < step);
    }

    #[test]
    fn no_snapshot_loads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open(dir.path()).load().unwrap().is_none());
    }

    #[test]
    fn save_then_load_round_trips_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(5), b"state at five").unwrap();
        files.save(&meta(9), b"state at nine").unwrap();

        let reopened = open(dir.path());
        let (loaded_meta, data) = reopened.load().unwrap().unwrap();
        assert_eq!(loaded_meta, meta(9));
        assert_eq!(data, b"state at nine");
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, [SNAPSHOT_FILE_NAME], "only the snapshot is left");
    }

    /// A streamed save writes the data as it is produced; the data it
    /// answers stays readable after the file is replaced, and a save that
    /// keeps the newer snapshot in place leaves no file behind.
    #[test]
    fn a_streamed_save_writes_as_it_goes_and_answers_readable_data() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        let piece = vec![7u8; 300 * 1024];
        let (saved, written) = files
            .save_streamed(&meta(5), |out| {
                for _ in 0..10 {
                    out.write_all(&piece)?;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(saved, Saved::Replaced);
        assert_eq!(written.len(), 10 * piece.len() as u64);
        let (loaded_meta, current) = files.open_current().unwrap().unwrap();
        assert_eq!(loaded_meta, meta(5));
        assert_eq!(current.to_vec().unwrap(), vec![7u8; 10 * piece.len()]);

        // Replaced by a newer one: the data answered before still reads.
        files.save(&meta(9), b"newer").unwrap();
        assert_eq!(written.to_vec().unwrap().len(), 10 * piece.len());
        assert_eq!(current.to_vec().unwrap(), vec![7u8; 10 * piece.len()]);
        assert_eq!(files.load().unwrap().unwrap(), (meta(9), b"newer".to_vec()));

        // Older than the one in place: kept, its bytes answered, no file left.
        let (saved, older) = files
            .save_streamed(&meta(7), |out| out.write_all(b"older"))
            .unwrap();
        assert_eq!(saved, Saved::KeptInPlace { in_place: Some(9) });
        assert_eq!(older.to_vec().unwrap(), b"older");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, [SNAPSHOT_FILE_NAME]);

        // A write that fails leaves the one in place, and no file.
        let failed = files.save_streamed(&meta(11), |out| {
            out.write_all(b"half")?;
            Err(io::Error::other("the encoder failed"))
        });
        assert!(failed.is_err());
        assert_eq!(files.load().unwrap().unwrap(), (meta(9), b"newer".to_vec()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A snapshot build that finishes after a newer snapshot was installed
    /// must not put its older state back in place: the log may already be
    /// purged past it, and the replica could not restart.
    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(9), b"installed at nine").unwrap();
        let late_build = files.save(&meta(5), b"built at five");
        assert_eq!(files.load().unwrap().unwrap().0, meta(9));
        assert_eq!(
            late_build.unwrap(),
            Saved::KeptInPlace { in_place: Some(9) }
        );

        // Equally from a handle that has not read the file yet (a restart).
        let reopened = open(dir.path());
        reopened.save(&meta(7), b"built at seven").unwrap();
        reopened.save(&meta(9), b"same index again").unwrap();
        assert_eq!(
            reopened.load().unwrap().unwrap(),
            (meta(9), b"installed at nine".to_vec())
        );
        assert_eq!(reopened.save(&meta(12), b"newer").unwrap(), Saved::Replaced);
        assert_eq!(reopened.load().unwrap().unwrap().0, meta(12));
    }

    #[test]
    fn a_corrupt_snapshot_in_place_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        open(dir.path()).save(&meta(9), b"good").unwrap();
        let path = dir.path().join(SNAPSHOT_FILE_NAME);
        let mut bad = fs::read(&path).unwrap();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        fs::write(&path, &bad).unwrap();

        let files = open(dir.path());
        assert_eq!(files.save(&meta(5), b"fresh").unwrap(), Saved::Replaced);
        assert_eq!(files.load().unwrap().unwrap(), (meta(5), b"fresh".to_vec()));
    }

    #[test]
    fn empty_data_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(0), b"").unwrap();
        assert_eq!(files.load().unwrap().unwrap(), (meta(0), Vec::new()));
    }

    #[test]
    fn half_written_snapshot_is_discarded_at_open() {
        let dir = tempfile::tempdir().unwrap();
        open(dir.path()).save(&meta(5), b"good").unwrap();
        // A crash after the temporary file was created, before the rename.
        // Before streamed saves the temporary file had one name; since,
        // each save's has a suffix of its own.
        fs::write(dir.path().join("snapshot.tmp"), b"PSNP half").unwrap();
        fs::write(dir.path().join("snapshot.tmp.a1B2c3"), b"PSNP half").unwrap();

        let files = open(dir.path());
        assert!(!dir.path().join("snapshot.tmp").exists());
        assert!(!dir.path().join("snapshot.tmp.a1B2c3").exists());
        assert_eq!(files.load().unwrap().unwrap(), (meta(5), b"good".to_vec()));
    }

    #[test]
    fn peek_reads_the_snapshot_and_leaves_a_save_in_progress_alone() {
        let dir = tempfile::tempdir().unwrap();
        open(dir.path()).save(&meta(5), b"good").unwrap();
        // The running replica's save, between creating its temporary file
        // and renaming it into place.
        let in_progress = dir.path().join("snapshot.tmp.a1B2c3");
        fs::write(&in_progress, b"PSNP half").unwrap();

        let peeked = SnapshotFiles::<Meta>::peek(dir.path()).unwrap();
        assert_eq!(peeked, Some((meta(5), b"good".to_vec())));
        assert!(in_progress.exists(), "peek removed a save in progress");
        assert_eq!(
            SnapshotFiles::<Meta>::peek(dir.path().join("missing")).unwrap(),
            None
        );
        assert!(
            !dir.path().join("missing").exists(),
            "peek made a directory"
        );
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(5), b"some snapshot data").unwrap();
        let good = fs::read(files.path()).unwrap();

        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            fs::write(files.path(), &bad).unwrap();
            let error = files.load().unwrap_err();
            assert_eq!(
                io::Error::from(error).kind(),
                io::ErrorKind::InvalidData,
                "flipped byte {at}"
            );
        }
    }

    #[test]
    fn truncated_snapshot_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(5), b"some snapshot data").unwrap();
        let good = fs::read(files.path()).unwrap();

        for len in [0, 3, HEADER_BYTES - 1, HEADER_BYTES, good.len() - 1] {
            fs::write(files.path(), &good[..len]).unwrap();
            let error = files.load().unwrap_err();
            assert!(
                matches!(error, SnapshotError::Corrupt { .. }),
                "truncated to {len}: {error}"
            );
        }
    }

    #[test]
    fn corrupt_message_names_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let files = open(dir.path());
        files.save(&meta(5), b"some snapshot data").unwrap();
        let mut bad = fs::read(files.path()).unwrap();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        fs::write(files.path(), &bad).unwrap();

        let message = files.load().unwrap_err().to_string();
        assert!(message.contains(SNAPSHOT_FILE_NAME), "{message}");
        assert!(message.contains("checksum mismatch"), "{message}");
    }
}
