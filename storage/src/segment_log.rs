//! The entries of the Raft log on disk: append-only segment files, one
//! write and one `fdatasync` per group commit.
//!
//! # Why not a database table
//!
//! Until this module the entries were a table of the log's redb database.
//! A redb commit writes its B-tree pages, its allocator state and its
//! header for every transaction: ~8 page writes per commit and 0.23 ms on
//! this machine's disk against 0.13 ms for a bare 512-byte append and
//! `fdatasync`, and in a 256-client benchmark the three replicas' log
//! writers spent ~18 % of all CPU in redb and in the kernel copying its
//! pages (`perf`, `palisade-bench --clients 256`). A Raft log is only ever
//! appended at its end, cut at its end (truncate) and dropped from its
//! front (purge): the shape an append-only file serves with one write per
//! commit. The vote, the committed log id, the purge point and the format
//! stay in redb, which makes those small records atomic.
//!
//! # Layout
//!
//! Directory [`SEGMENTS_DIR`] beside the database; one file per segment,
//! named by the index of its first entry (`{first:020}.seg`, so names sort
//! by index). A file is a 16-byte header (the magic `PLSLOG01`, then the
//! first index, u64 little-endian) and a sequence of frames, one per entry
//! in index order: the record's length (u32 little-endian) and the record
//! itself, the same checksummed record the database held (CRC-32 over the
//! index and the entry's JSON, see the crate-private `record` module). A
//! new segment starts once the last one holds [`SEGMENT_BYTES_TARGET`], or
//! when an append does not continue it (after a purge past its end).
//!
//! # Space written ahead
//!
//! An `fdatasync` after a write that grows the file also writes the file's
//! new size and block map; after a write over space the file already has,
//! only the data. On this machine's disk that is ~0.17 against ~0.10 ms
//! for a 512-byte write, and 0.25 against 0.16 ms for 64 KiB (`fdatasync`
//! after each write, Python's `os` module). So a write that grows the last
//! segment also writes zeros after its frames, as many as the segment
//! holds between [`WRITTEN_AHEAD_BYTES_MIN`] and [`WRITTEN_AHEAD_BYTES_MAX`]
//! (made durable by the same `fdatasync`), and the appends after it
//! overwrite them. The zeros are not frames: a frame never has length 0,
//! and open stops at them and keeps them. A segment is cut to its last
//! frame when the next one begins, and a truncation drops the zeros with
//! the entries. (etcd preallocates its WAL files for the same reason.)
//!
//! # What a crash can leave, and what open does with it
//!
//! A write is acknowledged only after its `fdatasync`. A crash during a
//! write can leave, at the end of the last segment: zeros where the write
//! never reached the disk (the space written ahead, or a size extended
//! before its data), which open keeps as space written ahead; a frame the
//! file holds only part of (ext4 extends the file's size page by page as a
//! write proceeds); or, since a disk writes whole sectors in any order, a
//! frame with a sector of zeros in it (and perhaps frames after it that
//! did reach the disk). Such a frame, and everything after it, was never
//! acknowledged: a later group's `fdatasync` would have written it too. So
//! open cuts them off (and says so). Anything else that fails its checks is
//! corruption and refuses the open, as it did in the database: a frame
//! whose checksum does not match without a sector of zeros in it, anything
//! wrong in a segment that is not the last, a bad header, a segment that
//! does not continue the one before. A segment file created but whose
//! header never reached the disk is the torn tail of a new segment:
//! removed.
//!
//! Truncation (`ftruncate`, then `fdatasync`, and for whole segments an
//! unlink and an `fsync` of the directory) is durable before the writer
//! takes its next write, so stale entries beyond a truncation can never
//! reappear behind newer ones. Purged segments are unlinked only after the
//! purge point that covers them is durable in the database; a segment
//! whose unlink a crash undid holds only purged entries, and open removes
//! it again.
//!
//! # Concurrency
//!
//! Only the store's writer changes the segments, under the write lock of
//! the `RwLock` the owner keeps them in, and only for as long as a `pwrite`
//! (an append) or a cut (a truncation) takes: the `fdatasync` runs after
//! the lock is released (on handles taken with [`Segments::take_dirty`]).
//! Readers read with `pread` under the read lock, so that a truncation
//! never cuts a file under a read, which would fail it (and stop the
//! replica).

use std::fs;
use std::fs::File;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Corruption;
use crate::error::LogStoreError;
use crate::error::RecordKey;
use crate::record;

/// Directory of the segment files, inside the log's directory.
pub const SEGMENTS_DIR: &str = "log-segments";

/// Size at which the last segment is closed and the next append starts a
/// new one: large enough that a new file (and the directory `fsync` it
/// costs) is rare, small enough that a purge frees space soon after a
/// snapshot.
pub const SEGMENT_BYTES_TARGET: u64 = 64 * 1024 * 1024;

/// The last segment keeps zeros written ahead of its end, so that an
/// append overwrites space the file already has instead of growing it (see
/// "Space written ahead" in the module doc): at most this much at a time
/// (the group that writes them waits for them: 1 MiB made the slowest
/// groups of `log_append` at 256 in flight 3.5 ms, 4 MiB 10 ms)...
pub const WRITTEN_AHEAD_BYTES_MAX: u64 = 256 * 1024;
/// ... and at least this much: the zeros written at once are as many as
/// the segment holds already, between the two bounds, so a log that stays
/// small (a test's) writes 64 KiB of them, not the most.
pub const WRITTEN_AHEAD_BYTES_MIN: u64 = 64 * 1024;

/// Size of the sectors a torn write is made of: a frame the disk wrote only
/// part of shows zeros from a sector boundary on (see
/// [`looks_torn`]).
const SECTOR_BYTES: u64 = 512;

/// Largest record a frame may announce. Entries are bounded far below
/// this by the lifecycle's limits; a larger length is a damaged frame, not
/// an allocation to attempt.
const RECORD_BYTES_MAX: u32 = 256 * 1024 * 1024;

const MAGIC: &[u8; 8] = b"PLSLOG01";
const HEADER_BYTES: u64 = 16;
const LENGTH_BYTES: u64 = 4;
const SUFFIX: &str = ".seg";

/// One segment file and where its entries are.
#[derive(Debug)]
struct Segment {
    /// Index of its first entry (as named and as in its header).
    first: u64,
    path: PathBuf,
    file: Arc<File>,
    /// Offset of each entry's frame: entry `first + i` at `offsets[i]`.
    offsets: Vec<u64>,
    /// End of the last frame, where the next one is written.
    end: u64,
    /// Length of the file: zeros from `end` to here (written ahead, see the
    /// module doc). Only the last segment has any.
    allocated: u64,
}

impl Segment {
    /// The index the next entry of this segment would have.
    fn next_index(&self) -> u64 {
        self.first + self.offsets.len() as u64
    }

    /// Frame bounds of entry `index`, which the segment holds.
    fn frame(&self, index: u64) -> (u64, u64) {
        let at = (index - self.first) as usize;
        let start = self.offsets[at];
        let end = self.offsets.get(at + 1).copied().unwrap_or(self.end);
        (start, end)
    }
}

/// Where one entry is.
#[derive(Debug, Clone)]
struct Located {
    file: Arc<File>,
    path: Arc<Path>,
    index: u64,
    /// Frame start and end.
    start: u64,
    end: u64,
}

/// A segment written to and not yet synced.
#[derive(Debug, Clone)]
pub(crate) struct Dirty {
    path: PathBuf,
    file: Arc<File>,
}

impl Dirty {
    /// `fdatasync`s the segment.
    pub(crate) fn sync(&self) -> Result<(), LogStoreError> {
        self.file
            .sync_data()
            .map_err(segment_io(&self.path, "sync"))
    }
}

/// The segment files of one log.
#[derive(Debug)]
pub(crate) struct Segments {
    dir: PathBuf,
    /// In index order, each continuing the one before.
    files: Vec<Segment>,
    /// Segments written to since the last [`Segments::take_dirty`].
    dirty: Vec<Dirty>,
    /// Size at which the last segment is closed ([`SEGMENT_BYTES_TARGET`];
    /// smaller in tests).
    target_bytes: u64,
    /// The zeros written ahead (allocated at the first such write).
    zeros: Option<Vec<u8>>,
}

impl Segments {
    /// Opens (creating if needed) the segment directory `dir` and reads
    /// every segment: every frame is checked, a torn tail is cut off (see
    /// the module doc), and segments holding only entries at or below
    /// `purged` are removed.
    pub(crate) fn open(dir: &Path, purged: Option<u64>) -> Result<Self, LogStoreError> {
        let directory_error = |source| LogStoreError::Directory {
            path: dir.to_path_buf(),
            source,
        };
        if !dir.exists() {
            // Only this replica's user reads its log.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(directory_error)?;
            if let Some(parent) = dir.parent() {
                sync_directory(parent)?;
            }
        }
        let mut named = Vec::new();
        for item in fs::read_dir(dir).map_err(directory_error)? {
            let item = item.map_err(directory_error)?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            match name.strip_suffix(SUFFIX).map(str::parse::<u64>) {
                Some(Ok(first)) => named.push((first, item.path())),
                _ => {
                    return Err(LogStoreError::SegmentFile {
                        path: item.path(),
                        problem: "is not a segment file of the log (only \
                                  `<first index>.seg` files belong in this directory)"
                            .into(),
                    });
                }
            }
        }
        named.sort();
        let mut segments = Segments {
            dir: dir.to_path_buf(),
            files: Vec::with_capacity(named.len()),
            dirty: Vec::new(),
            target_bytes: SEGMENT_BYTES_TARGET,
            zeros: None,
        };
        let count = named.len();
        for (position, (first, path)) in named.into_iter().enumerate() {
            let last = position + 1 == count;
            let Some(segment) = read_segment(first, &path, last)? else {
                // The torn creation of the last segment.
                remove_file(&path)?;
                sync_directory(dir)?;
                continue;
            };
            segments.files.push(segment);
        }
        if let Some(purged) = purged {
            segments.remove_purged(purged)?;
        }
        for pair in segments.files.windows(2) {
            if pair[1].first != pair[0].next_index() {
                return Err(LogStoreError::Corrupt {
                    record: RecordKey::Entry {
                        index: pair[1].first,
                    },
                    problem: Corruption::Hole {
                        previous: pair[0].next_index().saturating_sub(1),
                    },
                });
            }
        }
        Ok(segments)
    }

    /// The first and last index the segments hold (purged entries
    /// included), or `None` when they hold none.
    pub(crate) fn bounds(&self) -> Option<(u64, u64)> {
        let first = self
            .files
            .iter()
            .find(|segment| !segment.offsets.is_empty())?;
        let last = self.files.iter().rev().find(|s| !s.offsets.is_empty())?;
        Some((first.first, last.next_index() - 1))
    }

    /// The stored records of the entries with index in `start..end`
    /// (`end == None`: to the end), in order (their checksums are checked
    /// where they are decoded); with `bytes_max`, only as many as fit in
    /// it (at least one). Read under the caller's lock on the segments, so
    /// that no truncation cuts a file while it is read.
    pub(crate) fn read(
        &self,
        start: u64,
        end: Option<u64>,
        bytes_max: Option<usize>,
    ) -> Result<Vec<(u64, Vec<u8>)>, LogStoreError> {
        read_records(&self.locate(start, end, bytes_max))
    }

    /// Where the entries with index in `start..end` are (`end == None`: to
    /// the end), in order; with `bytes_max`, only as many as fit in it
    /// (at least one).
    fn locate(&self, start: u64, end: Option<u64>, bytes_max: Option<usize>) -> Vec<Located> {
        let mut located = Vec::new();
        let mut bytes = 0u64;
        for segment in &self.files {
            let from = start.max(segment.first);
            let to = end.map_or(segment.next_index(), |end| end.min(segment.next_index()));
            if from >= to {
                continue;
            }
            let path: Arc<Path> = Arc::from(segment.path.as_path());
            for index in from..to {
                let (frame_start, frame_end) = segment.frame(index);
                let record_bytes = frame_end - frame_start - LENGTH_BYTES;
                if let Some(bytes_max) = bytes_max
                    && !located.is_empty()
                    && bytes + record_bytes > bytes_max as u64
                {
                    return located;
                }
                bytes += record_bytes;
                located.push(Located {
                    file: Arc::clone(&segment.file),
                    path: Arc::clone(&path),
                    index,
                    start: frame_start,
                    end: frame_end,
                });
            }
        }
        located
    }

    /// Appends `records` (index, stored record), which continue the log
    /// as the caller checked: at the end of the last segment if they
    /// continue it and it has room, else in a new segment. Not durable
    /// until the caller synced what [`Segments::take_dirty`] returns.
    pub(crate) fn append(&mut self, records: &[(u64, Arc<[u8]>)]) -> Result<(), LogStoreError> {
        let Some((first_index, _)) = records.first() else {
            return Ok(());
        };
        let continues = self.files.last().is_some_and(|segment| {
            segment.next_index() == *first_index && segment.end < self.target_bytes
        });
        if !continues {
            self.create(*first_index)?;
        }
        let segment = self.files.last_mut().expect("a segment was just ensured");
        let mut frames = Vec::with_capacity(
            records
                .iter()
                .map(|(_, stored)| stored.len() + LENGTH_BYTES as usize)
                .sum(),
        );
        let mut offsets = Vec::with_capacity(records.len());
        for (index, stored) in records {
            assert_eq!(
                *index,
                segment.next_index() + offsets.len() as u64,
                "appended records continue the segment"
            );
            offsets.push(segment.end + frames.len() as u64);
            let length = u32::try_from(stored.len())
                .ok()
                .filter(|length| *length <= RECORD_BYTES_MAX)
                .ok_or_else(|| LogStoreError::SegmentFile {
                    path: segment.path.clone(),
                    problem: format!(
                        "cannot hold the entry at index {index}: its record is {} bytes, over \
                         the limit of {RECORD_BYTES_MAX}",
                        stored.len()
                    ),
                })?;
            frames.extend_from_slice(&length.to_le_bytes());
            frames.extend_from_slice(stored);
        }
        segment
            .file
            .write_all_at(&frames, segment.end)
            .map_err(segment_io(&segment.path, "append to"))?;
        segment.offsets.extend(offsets);
        segment.end += frames.len() as u64;
        if segment.end >= segment.allocated {
            // This write grew the file anyway: write zeros ahead of it, made
            // durable by the same fdatasync, for the next appends to overwrite.
            let ahead = segment
                .end
                .clamp(WRITTEN_AHEAD_BYTES_MIN, WRITTEN_AHEAD_BYTES_MAX);
            let zeros = self
                .zeros
                .get_or_insert_with(|| vec![0; WRITTEN_AHEAD_BYTES_MAX as usize]);
            segment
                .file
                .write_all_at(&zeros[..ahead as usize], segment.end)
                .map_err(segment_io(&segment.path, "write ahead in"))?;
            segment.allocated = segment.end + ahead;
        }
        if !self
            .dirty
            .iter()
            .any(|dirty| Arc::ptr_eq(&dirty.file, &segment.file))
        {
            self.dirty.push(Dirty {
                path: segment.path.clone(),
                file: Arc::clone(&segment.file),
            });
        }
        Ok(())
    }

    /// The files written since the last sync, to `fdatasync` (outside the
    /// lock the segments are kept under); the caller must sync each.
    pub(crate) fn take_dirty(&mut self) -> Vec<Dirty> {
        std::mem::take(&mut self.dirty)
    }

    /// Removes the entries from `first_removed` on, durably before it
    /// returns (see the module doc).
    pub(crate) fn truncate_from(&mut self, first_removed: u64) -> Result<(), LogStoreError> {
        let mut unlinked = false;
        while let Some(segment) = self.files.last_mut() {
            if segment.first >= first_removed {
                let path = segment.path.clone();
                self.files.pop();
                remove_file(&path)?;
                unlinked = true;
                continue;
            }
            if first_removed < segment.next_index() {
                let (cut, _) = segment.frame(first_removed);
                segment
                    .file
                    .set_len(cut)
                    .and_then(|()| segment.file.sync_data())
                    .map_err(segment_io(&segment.path, "truncate"))?;
                segment
                    .offsets
                    .truncate((first_removed - segment.first) as usize);
                segment.end = cut;
                segment.allocated = cut;
            }
            break;
        }
        if unlinked {
            // A file removed from the end must stay removed: its stale
            // entries would otherwise come back behind newer ones.
            sync_directory(&self.dir)?;
            let files = &self.files;
            self.dirty
                .retain(|dirty| files.iter().any(|s| Arc::ptr_eq(&s.file, &dirty.file)));
        }
        Ok(())
    }

    /// Removes the segments all of whose entries are at or below
    /// `purged`. Call only once `purged` is durable as the purge point.
    pub(crate) fn remove_purged(&mut self, purged: u64) -> Result<(), LogStoreError> {
        let keep_from = self
            .files
            .iter()
            .position(|segment| segment.next_index() > purged + 1)
            .unwrap_or(self.files.len());
        for segment in self.files.drain(..keep_from) {
            remove_file(&segment.path)?;
            self.dirty
                .retain(|dirty| !Arc::ptr_eq(&dirty.file, &segment.file));
        }
        Ok(())
    }

    /// Starts a new segment whose first entry will be `first`, durably
    /// (its header and its directory entry).
    fn create(&mut self, first: u64) -> Result<(), LogStoreError> {
        // Only the last segment may end in a torn write (see the module
        // doc): the one before is made durable before the next begins.
        if let Some(previous) = self.files.last_mut() {
            // A closed segment ends at its last frame: only the last one
            // has zeros written ahead.
            if previous.allocated > previous.end {
                previous
                    .file
                    .set_len(previous.end)
                    .map_err(segment_io(&previous.path, "close"))?;
                previous.allocated = previous.end;
            }
            previous
                .file
                .sync_data()
                .map_err(segment_io(&previous.path, "sync"))?;
            let file = Arc::clone(&previous.file);
            self.dirty.retain(|dirty| !Arc::ptr_eq(&dirty.file, &file));
        }
        let path = self.dir.join(segment_name(first));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(segment_io(&path, "create"))?;
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&first.to_le_bytes());
        file.write_all_at(&header, 0)
            .and_then(|()| file.sync_data())
            .map_err(segment_io(&path, "create"))?;
        sync_directory(&self.dir)?;
        self.files.push(Segment {
            first,
            path,
            file: Arc::new(file),
            offsets: Vec::new(),
            end: HEADER_BYTES,
            allocated: HEADER_BYTES,
        });
        Ok(())
    }
}

/// Reads the stored records of `located` (in order), one `pread` per run
/// of consecutive frames; a frame whose length prefix disagrees with the
/// index is corruption.
fn read_records(located: &[Located]) -> Result<Vec<(u64, Vec<u8>)>, LogStoreError> {
    let mut records = Vec::with_capacity(located.len());
    let mut at = 0;
    while at < located.len() {
        // One read for a run of consecutive frames of one file.
        let run_start = at;
        while at + 1 < located.len()
            && Arc::ptr_eq(&located[at + 1].file, &located[run_start].file)
            && located[at + 1].start == located[at].end
        {
            at += 1;
        }
        let first = &located[run_start];
        let mut bytes = vec![0; (located[at].end - first.start) as usize];
        first
            .file
            .read_exact_at(&mut bytes, first.start)
            .map_err(segment_io(&first.path, "read"))?;
        for entry in &located[run_start..=at] {
            let frame =
                &bytes[(entry.start - first.start) as usize..(entry.end - first.start) as usize];
            let (length, stored) = frame.split_at(LENGTH_BYTES as usize);
            let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
            if length != stored.len() {
                return Err(LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: entry.index },
                    problem: Corruption::Truncated {
                        record_bytes: stored.len(),
                    },
                });
            }
            records.push((entry.index, stored.to_vec()));
        }
        at += 1;
    }
    Ok(records)
}

/// The file name of the segment whose first entry is `first`.
fn segment_name(first: u64) -> String {
    format!("{first:020}{SUFFIX}")
}

/// Reads and checks one segment file. `last`: it is the last segment, the
/// only one that may end in a torn write (cut off here). `None`: a last
/// segment whose header is incomplete (its creation was torn).
fn read_segment(first: u64, path: &Path, last: bool) -> Result<Option<Segment>, LogStoreError> {
    let bad = |problem: String| LogStoreError::SegmentFile {
        path: path.to_path_buf(),
        problem,
    };
    let file = File::options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(segment_io(path, "open"))?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut &file, &mut bytes).map_err(segment_io(path, "read"))?;
    if (bytes.len() as u64) < HEADER_BYTES {
        let zeros = bytes.iter().all(|byte| *byte == 0);
        let header_begun = bytes.iter().zip(MAGIC).all(|(byte, magic)| byte == magic);
        if last && (zeros || header_begun) {
            tracing::warn!(path = %path.display(), "removing a segment whose creation a crash interrupted");
            return Ok(None);
        }
        return Err(bad(format!(
            "is {} bytes long, shorter than a segment header",
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(bad("does not start with a segment header".into()));
    }
    let named = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if named != first {
        return Err(bad(format!(
            "has a header for a segment starting at index {named}"
        )));
    }
    let mut segment = Segment {
        first,
        path: path.to_path_buf(),
        file: Arc::new(file),
        offsets: Vec::new(),
        end: HEADER_BYTES,
        allocated: bytes.len() as u64,
    };
    let mut at = HEADER_BYTES as usize;
    // Whether the scan stopped at a torn write, cut off below (a last
    // segment's zeros after its last frame are space written ahead: kept).
    let mut torn_at = None;
    while at < bytes.len() {
        let index = segment.next_index();
        let rest = &bytes[at..];
        let torn = |why: &str| -> Result<(), LogStoreError> {
            if !last {
                return Err(LogStoreError::Corrupt {
                    record: RecordKey::Entry { index },
                    problem: Corruption::Truncated {
                        record_bytes: rest.len(),
                    },
                });
            }
            tracing::warn!(
                path = %path.display(),
                index,
                cut_bytes = rest.len(),
                why,
                "cutting off the end of the log that a crash left half-written (never acknowledged)"
            );
            Ok(())
        };
        if rest.len() < LENGTH_BYTES as usize {
            torn("an incomplete frame length")?;
            torn_at = Some(at);
            break;
        }
        let length = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        if length == 0 && rest.iter().all(|byte| *byte == 0) {
            if !last {
                torn("zeros where the next frame would be")?;
            }
            // The space written ahead (or a write a crash left unwritten:
            // zeros all the same); the next append overwrites it.
            break;
        }
        let torn_sector = |span_end: usize| last && looks_torn(&bytes, at, span_end);
        if length > RECORD_BYTES_MAX || (length as usize) < record::CHECKSUM_BYTES {
            if torn_sector(at + LENGTH_BYTES as usize) {
                torn("a frame length in a sector the disk never wrote")?;
                torn_at = Some(at);
                break;
            }
            return Err(LogStoreError::Corrupt {
                record: RecordKey::Entry { index },
                problem: Corruption::Truncated {
                    record_bytes: length as usize,
                },
            });
        }
        let frame_end = LENGTH_BYTES as usize + length as usize;
        if rest.len() < frame_end {
            torn("an incomplete frame")?;
            torn_at = Some(at);
            break;
        }
        if let Err(problem) = record::decode(
            &index.to_be_bytes(),
            &rest[LENGTH_BYTES as usize..frame_end],
        ) {
            if torn_sector(at + frame_end) {
                torn("a frame with a sector the disk never wrote")?;
                torn_at = Some(at);
                break;
            }
            return Err(LogStoreError::Corrupt {
                record: RecordKey::Entry { index },
                problem,
            });
        }
        segment.offsets.push(at as u64);
        at += frame_end;
        segment.end = at as u64;
    }
    if torn_at.is_some() {
        segment
            .file
            .set_len(segment.end)
            .and_then(|()| segment.file.sync_data())
            .map_err(segment_io(path, "cut the torn end of"))?;
        segment.allocated = segment.end;
    }
    Ok(Some(segment))
}

/// Whether the frame at `at` (its bytes up to `span_end`) shows the mark of
/// a write the disk only partly made: a sector it overlaps that holds only
/// zeros from the frame's start (or the sector's) to the sector's end (or
/// the file's). A disk writes whole sectors, and a frame is written over
/// zeros (the space written ahead, or a file grown by the write), so a
/// sector that never reached the disk reads as zeros; a frame damaged on
/// the disk after it was written rarely loses a whole sector to zeros.
fn looks_torn(bytes: &[u8], at: usize, span_end: usize) -> bool {
    let sector = SECTOR_BYTES as usize;
    let span_end = span_end.min(bytes.len());
    let mut start = at;
    while start < span_end {
        let sector_end = ((start / sector) + 1) * sector;
        let zeros = &bytes[start..sector_end.min(bytes.len())];
        if zeros.iter().all(|byte| *byte == 0) {
            return true;
        }
        start = sector_end;
    }
    false
}

fn remove_file(path: &Path) -> Result<(), LogStoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(segment_io(path, "remove")(error)),
    }
}

pub(crate) fn sync_directory(dir: &Path) -> Result<(), LogStoreError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| LogStoreError::Directory {
            path: dir.to_path_buf(),
            source,
        })
}

fn segment_io(path: &Path, operation: &'static str) -> impl FnOnce(io::Error) -> LogStoreError {
    let path = path.to_path_buf();
    move |source| LogStoreError::SegmentIo {
        path,
        operation,
        source,
    }
}

/// TEST-ONLY: the stored records of the log in `log_dir`, read raw (no
/// check), with each segment's path and first index.
#[cfg(test)]
pub(crate) fn raw_records_for_tests(log_dir: &Path) -> Vec<(PathBuf, u64, Vec<Vec<u8>>)> {
    let dir = log_dir.join(SEGMENTS_DIR);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|item| item.unwrap().path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            let first = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
            let mut records = Vec::new();
            let mut at = HEADER_BYTES as usize;
            while at + 4 <= bytes.len() {
                let length = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                if length == 0 {
                    break; // The zeros written ahead.
                }
                records.push(bytes[at + 4..at + 4 + length].to_vec());
                at += 4 + length;
            }
            (path, first, records)
        })
        .collect()
}

/// TEST-ONLY: rewrites the segment of the log in `log_dir` that holds
/// entry `index` with its stored record replaced by `replacement` (removed:
/// `None`), bypassing every check.
#[cfg(test)]
pub(crate) fn rewrite_record_for_tests(log_dir: &Path, index: u64, replacement: Option<Vec<u8>>) {
    for (path, first, mut records) in raw_records_for_tests(log_dir) {
        if index < first || index >= first + records.len() as u64 {
            continue;
        }
        let at = (index - first) as usize;
        match replacement {
            Some(replacement) => records[at] = replacement,
            None => {
                records.remove(at);
            }
        }
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&first.to_le_bytes());
        for record in records {
            bytes.extend_from_slice(&(record.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&record);
        }
        fs::write(&path, bytes).unwrap();
        return;
    }
    panic!("no segment holds entry {index}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(indexes: std::ops::Range<u64>) -> Vec<(u64, Arc<[u8]>)> {
        indexes
            .map(|index| {
                let payload = format!("{{\"entry\":{index}}}");
                let stored: Arc<[u8]> =
                    record::encode(&index.to_be_bytes(), payload.as_bytes()).into();
                (index, stored)
            })
            .collect()
    }

    fn sync(segments: &mut Segments) {
        for dirty in segments.take_dirty() {
            dirty.sync().unwrap();
        }
    }

    fn read_all(segments: &Segments) -> Vec<u64> {
        read_records(&segments.locate(0, None, None))
            .unwrap()
            .into_iter()
            .map(|(index, _)| index)
            .collect()
    }

    fn only_file(dir: &Path) -> PathBuf {
        let mut files: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|f| f.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.pop().unwrap()
    }

    #[test]
    fn appends_read_back_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(5..8)).unwrap();
        segments.append(&records(8..10)).unwrap();
        sync(&mut segments);
        assert_eq!(read_all(&segments), (5..10).collect::<Vec<_>>());
        assert_eq!(segments.bounds(), Some((5, 9)));
        drop(segments);
        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), (5..10).collect::<Vec<_>>());
        let stored = read_records(&segments.locate(7, Some(8), None)).unwrap();
        assert_eq!(stored, vec![(7, records(7..8)[0].1.to_vec())]);
    }

    /// What a crash in the middle of a write leaves: part of a frame at the
    /// end of the last segment, or zeros. Never acknowledged, so it is cut
    /// off. A whole frame whose checksum fails is corruption.
    #[test]
    fn a_torn_tail_is_cut_off_and_a_whole_bad_frame_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(1..4)).unwrap();
        sync(&mut segments);
        let (second, _) = segments.files[0].frame(2);
        let (third, end) = segments.files[0].frame(3);
        drop(segments);
        let path = only_file(dir.path());
        let file = File::options().read(true).write(true).open(&path).unwrap();

        file.set_len(end - 3).unwrap();
        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), vec![1, 2]);
        assert_eq!(fs::metadata(&path).unwrap().len(), third, "cut on disk");
        drop(segments);

        // Zeros after the last frame (a size extended before its data, or
        // the space written ahead): kept, and the next append overwrites
        // them.
        file.set_len(third + 64).unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), vec![1, 2]);
        assert_eq!(fs::metadata(&path).unwrap().len(), third + 64);
        segments.append(&records(3..4)).unwrap();
        sync(&mut segments);
        drop(segments);
        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), vec![1, 2, 3]);
        drop(segments);

        let mut byte = [0u8];
        file.read_exact_at(&mut byte, second + 6).unwrap();
        file.write_all_at(&[byte[0] ^ 0x10], second + 6).unwrap();
        let error = Segments::open(dir.path(), None).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 2 },
                    problem: Corruption::Checksum { .. }
                }
            ),
            "{error}"
        );
    }

    /// An append that grows the file writes zeros ahead of its frames,
    /// made durable with them, and the appends after it overwrite those
    /// zeros instead of growing the file: an `fdatasync` of a write over
    /// space the file has costs this machine's disk ~0.1 ms against ~0.17
    /// for an append that grows it. A closed segment ends at its last
    /// frame, and a truncation drops the zeros with the entries.
    #[test]
    fn appends_overwrite_zeros_written_ahead_and_closed_segments_end_at_their_last_frame() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(1..3)).unwrap();
        sync(&mut segments);
        let path = only_file(dir.path());
        let (_, end) = segments.files[0].frame(2);
        let length = fs::metadata(&path).unwrap().len();
        assert_eq!(length, end + WRITTEN_AHEAD_BYTES_MIN, "zeros written ahead");
        segments.append(&records(3..5)).unwrap();
        sync(&mut segments);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            length,
            "the next appends overwrite the zeros"
        );
        drop(segments);

        let mut segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), (1..5).collect::<Vec<_>>());
        assert_eq!(fs::metadata(&path).unwrap().len(), length, "kept at open");
        segments.append(&records(5..6)).unwrap();
        sync(&mut segments);
        assert_eq!(fs::metadata(&path).unwrap().len(), length);

        segments.truncate_from(4).unwrap();
        let (_, cut) = segments.files[0].frame(3);
        assert_eq!(fs::metadata(&path).unwrap().len(), cut);

        segments.target_bytes = cut;
        segments.append(&records(4..5)).unwrap();
        sync(&mut segments);
        assert_eq!(segments.files.len(), 2, "the first segment was full");
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            cut,
            "a closed segment has no zeros after its last frame"
        );
        drop(segments);
        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), (1..5).collect::<Vec<_>>());
    }

    /// A write that reached the disk only in part leaves a sector of zeros
    /// (the space written ahead) inside a frame, possibly with later
    /// sectors of the same unacknowledged write on the disk: in the last
    /// segment that frame and everything after it are cut off. The same in
    /// a closed segment, and a frame damaged without a sector of zeros, are
    /// corruption.
    #[test]
    fn a_frame_with_a_sector_never_written_is_a_torn_write_in_the_last_segment_only() {
        let assert_corrupt_at_entry_3 = |dir: &Path| {
            let error = Segments::open(dir, None).unwrap_err();
            assert!(
                matches!(
                    error,
                    LogStoreError::Corrupt {
                        record: RecordKey::Entry { index: 3 },
                        ..
                    }
                ),
                "{error}"
            );
        };
        let big = |indexes: std::ops::Range<u64>| -> Vec<(u64, Arc<[u8]>)> {
            indexes
                .map(|index| {
                    let payload = format!("{{\"entry\":{index},\"pad\":\"{}\"}}", "p".repeat(700));
                    (
                        index,
                        record::encode(&index.to_be_bytes(), payload.as_bytes()).into(),
                    )
                })
                .collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&big(1..6)).unwrap();
        sync(&mut segments);
        // Frame 3 spans at least one whole sector.
        let (third, third_end) = segments.files[0].frame(3);
        drop(segments);
        let path = only_file(dir.path());
        let file = File::options().read(true).write(true).open(&path).unwrap();
        let sector = third.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        assert!(sector + SECTOR_BYTES <= third_end);
        let original = fs::read(&path).unwrap();
        file.write_all_at(&[0; SECTOR_BYTES as usize], sector)
            .unwrap();

        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(
            read_all(&segments),
            vec![1, 2],
            "4 and 5 were never acknowledged"
        );
        assert_eq!(fs::metadata(&path).unwrap().len(), third, "cut on disk");
        drop(segments);

        // The same frame damaged otherwise (a flipped byte) is corruption.
        fs::write(&path, &original).unwrap();
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, sector + 7).unwrap();
        file.write_all_at(&[byte[0] ^ 0x10], sector + 7).unwrap();
        assert_corrupt_at_entry_3(dir.path());

        // A sector of zeros in a segment that is not the last: corruption.
        fs::write(&path, &original).unwrap();
        file.write_all_at(&[0; SECTOR_BYTES as usize], sector)
            .unwrap();
        let next = dir.path().join(segment_name(6));
        let mut header = Vec::new();
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&6u64.to_le_bytes());
        fs::write(&next, header).unwrap();
        assert_corrupt_at_entry_3(dir.path());
    }

    #[test]
    fn truncation_and_purge_remove_what_they_cover_and_new_segments_continue() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(1..6)).unwrap();
        // A new segment: an append after a purge past the end.
        segments.append(&records(20..23)).unwrap();
        sync(&mut segments);
        segments.truncate_from(21).unwrap();
        assert_eq!(read_all(&segments), vec![1, 2, 3, 4, 5, 20]);
        segments.truncate_from(20).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        segments.append(&records(6..8)).unwrap();
        sync(&mut segments);
        segments.remove_purged(4).unwrap();
        assert_eq!(
            read_all(&segments),
            (1..8).collect::<Vec<_>>(),
            "the segment holds 5.."
        );
        segments.remove_purged(7).unwrap();
        assert_eq!(read_all(&segments), Vec::<u64>::new());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        segments.append(&records(8..9)).unwrap();
        sync(&mut segments);
        drop(segments);
        let segments = Segments::open(dir.path(), Some(7)).unwrap();
        assert_eq!(read_all(&segments), vec![8]);
    }

    /// Only the last segment may end torn: the one before is synced when
    /// the next begins, not left for the group's sync.
    #[test]
    fn a_full_segment_is_synced_before_the_next_begins() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.target_bytes = 64;
        segments.append(&records(1..4)).unwrap();
        segments.append(&records(4..6)).unwrap();
        assert_eq!(segments.files.len(), 2, "the first segment was full");
        let dirty = segments.take_dirty();
        assert_eq!(dirty.len(), 1, "{dirty:?}");
        assert_eq!(dirty[0].path, segments.files[1].path);
        drop(segments);
        let segments = Segments::open(dir.path(), None).unwrap();
        assert_eq!(read_all(&segments), (1..6).collect::<Vec<_>>());
    }

    #[test]
    fn a_gap_between_segments_is_a_hole_unless_purged() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(1..3)).unwrap();
        segments.append(&records(10..12)).unwrap();
        sync(&mut segments);
        drop(segments);
        let error = Segments::open(dir.path(), None).unwrap_err();
        assert!(
            matches!(
                error,
                LogStoreError::Corrupt {
                    record: RecordKey::Entry { index: 10 },
                    problem: Corruption::Hole { previous: 2 }
                }
            ),
            "{error}"
        );
        // With everything before the gap purged, the old segment goes.
        let segments = Segments::open(dir.path(), Some(9)).unwrap();
        assert_eq!(read_all(&segments), vec![10, 11]);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn limited_locate_returns_at_least_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut segments = Segments::open(dir.path(), None).unwrap();
        segments.append(&records(1..10)).unwrap();
        let one = segments.locate(1, None, Some(1));
        assert_eq!(one.len(), 1);
        let record_bytes = records(1..2)[0].1.len();
        assert_eq!(segments.locate(1, None, Some(3 * record_bytes)).len(), 3);
        assert_eq!(segments.locate(3, Some(5), None).len(), 2);
    }

    #[test]
    fn foreign_files_refuse_open() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
        let error = Segments::open(dir.path(), None).unwrap_err();
        assert!(error.to_string().contains("notes.txt"), "{error}");
    }
}
