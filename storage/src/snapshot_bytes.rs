//! [`SnapshotBytes`]: a snapshot's bytes in a file, read a piece at a time,
//! never all in memory; [`SnapshotSpool`]: where a snapshot received from a
//! peer is written as it arrives.
//!
//! # Key decision: snapshots are files, not buffers
//!
//! A snapshot carries the whole replicated state, request receipts
//! included: hundreds of megabytes under sustained writes (receipts are
//! kept for a day). Held as one buffer, it was in memory once on the
//! replica that built it, again on each send, and again on the replica
//! receiving it, which is where replicas ran out of memory first. As a file
//! it is written as it is encoded ([`crate::SnapshotFiles::save_streamed`]),
//! sent by reading pieces of it, received into a spool file, and decoded
//! from a reader.
//!
//! A [`SnapshotBytes`] holds the file open: it stays readable after the
//! snapshot file is replaced by a newer one (the open file is the old
//! one), or after a spool file's name is gone (it never had one).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// A snapshot's bytes: `len` bytes of an open file from `start`.
#[derive(Debug, Clone)]
pub struct SnapshotBytes {
    file: Arc<File>,
    start: u64,
    len: u64,
}

impl SnapshotBytes {
    /// The `len` bytes of `file` from `start`.
    pub(crate) fn in_file(file: File, start: u64, len: u64) -> Self {
        SnapshotBytes {
            file: Arc::new(file),
            start,
            len,
        }
    }

    /// `bytes`, copied into a file of their own (an unnamed temporary file
    /// in `dir`, or in the system's temporary directory): tests, backups,
    /// and anything else that has the bytes in memory already.
    pub fn from_slice(bytes: &[u8], dir: Option<&Path>) -> io::Result<Self> {
        let mut spool = SnapshotSpool::new_in(dir)?;
        spool.write(bytes)?;
        spool.finish()
    }

    /// How many bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty snapshot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads up to `out.len()` bytes at `offset` (from the snapshot's
    /// start) into `out`; answers how many (0 at the end). Does not move
    /// any position: readers of one snapshot do not disturb each other.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        let left = self.len.saturating_sub(offset);
        let wanted = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if wanted == 0 {
            return Ok(0);
        }
        let out = &mut out[..wanted];
        let mut filled = 0;
        while filled < out.len() {
            match self
                .file
                .read_at(&mut out[filled..], self.start + offset + filled as u64)
            {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the snapshot's file ends before its {} bytes (at {})",
                            self.len,
                            offset + filled as u64
                        ),
                    ));
                }
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(filled)
    }

    /// A reader of the bytes from the start.
    pub fn reader(&self) -> SnapshotReader {
        SnapshotReader {
            bytes: self.clone(),
            position: 0,
        }
    }

    /// All the bytes in memory (tests and tools; a replica never does this
    /// with a snapshot of unknown size).
    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("a snapshot of {} bytes does not fit in memory", self.len),
            )
        })?;
        let mut all = Vec::new();
        all.try_reserve_exact(len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes for a snapshot"),
            )
        })?;
        self.reader().read_to_end(&mut all)?;
        Ok(all)
    }
}

/// Reads a [`SnapshotBytes`] from its start ([`SnapshotBytes::reader`]).
#[derive(Debug)]
pub struct SnapshotReader {
    bytes: SnapshotBytes,
    position: u64,
}

impl Read for SnapshotReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let read = self.bytes.read_at(self.position, out)?;
        self.position += read as u64;
        Ok(read)
    }
}

/// A snapshot being received: its bytes go to an unnamed temporary file as
/// they arrive, and [`SnapshotSpool::finish`] hands them over as
/// [`SnapshotBytes`]. The file has no name, so a crash leaves nothing
/// behind.
#[derive(Debug)]
pub struct SnapshotSpool {
    file: File,
    len: u64,
}

impl SnapshotSpool {
    /// A spool in `dir` (the replica's snapshot directory, so a large
    /// snapshot lands on the data volume, not on a small or memory-backed
    /// `/tmp`), or in the system's temporary directory.
    pub fn new_in(dir: Option<&Path>) -> io::Result<Self> {
        let file = match dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        Ok(SnapshotSpool { file, len: 0 })
    }

    /// Appends `piece`.
    pub fn write(&mut self, piece: &[u8]) -> io::Result<()> {
        self.file.write_all(piece)?;
        self.len += piece.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True before anything was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written. Not synced: a received snapshot is durable only
    /// once [`crate::SnapshotFiles`] saved it.
    pub fn finish(mut self) -> io::Result<SnapshotBytes> {
        self.file.flush()?;
        Ok(SnapshotBytes::in_file(self.file, 0, self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_back_in_pieces_and_whole() {
        let data: Vec<u8> = (0..10_000u32).flat_map(|n| n.to_le_bytes()).collect();
        let bytes = SnapshotBytes::from_slice(&data, None).unwrap();
        assert_eq!(bytes.len(), data.len() as u64);
        assert_eq!(bytes.to_vec().unwrap(), data);
        let mut piece = vec![0u8; 1000];
        assert_eq!(bytes.read_at(39_500, &mut piece).unwrap(), 500);
        assert_eq!(&piece[..500], &data[39_500..]);
        assert_eq!(bytes.read_at(40_000, &mut piece).unwrap(), 0);
        assert_eq!(bytes.read_at(u64::MAX, &mut piece).unwrap(), 0);
        let mut via_reader = Vec::new();
        std::io::copy(&mut bytes.reader(), &mut via_reader).unwrap();
        assert_eq!(via_reader, data);
    }

    #[test]
    fn an_empty_spool_gives_empty_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let spool = SnapshotSpool::new_in(Some(dir.path())).unwrap();
        assert!(spool.is_empty());
        let bytes = spool.finish().unwrap();
        assert!(bytes.is_empty());
        assert_eq!(bytes.to_vec().unwrap(), Vec::<u8>::new());
        // Unnamed: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
