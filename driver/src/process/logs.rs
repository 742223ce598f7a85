//! The command's output: the shim reads the command's stdout and stderr from pipes
//! and appends them to `stdout.log` and `stderr.log`, each rotated into `<name>.1`
//! when it reaches [`LOG_FILE_BYTES_MAX`] (one rotated file is kept, the older one
//! is replaced). One execution's output thus takes at most
//! `2 streams × 2 files × LOG_FILE_BYTES_MAX` of disk, however much it prints.
//!
//! # Decisions
//!
//! - **Pipes, not files handed to the command.** A file the command holds open can
//!   only be truncated under it (losing what it writes meanwhile), and it can grow
//!   without bound between two checks. Reading a pipe, the shim sees every byte
//!   before it reaches the disk and cuts exactly at the cap. The cost: when the shim
//!   dies, the command's next write to its output fails (`EPIPE`), as a container's
//!   does when its shim dies.
//! - **Output is never a reason to stop reading.** When a write fails (disk full),
//!   the bytes are dropped and the failure is reported once on the shim's stderr
//!   (`shim.log`); the shim keeps draining the pipe so the command never blocks on
//!   a full pipe because the disk is full.
//! - Logs are not fsynced: they are diagnostics, not records.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Largest size of one log file (`stdout.log`, `stderr.log`) before it is rotated.
pub const LOG_FILE_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// Suffix of the one rotated file kept per stream.
pub const LOG_ROTATED_SUFFIX: &str = ".1";
/// Bytes read from the command's pipe at a time.
pub(crate) const LOG_READ_BUFFER_BYTES: usize = 64 * 1024;

/// An append-only log file rotated at a size cap.
#[derive(Debug)]
pub(crate) struct RotatingLog {
    path: PathBuf,
    rotated_path: PathBuf,
    /// `None` once the file could not be (re)opened: output is then dropped.
    file: Option<File>,
    /// Bytes in the current file.
    file_bytes: u64,
    file_bytes_max: u64,
    failure_reported: bool,
}

impl RotatingLog {
    /// Opens (appending) the log at `path`, rotating at `file_bytes_max` bytes.
    pub(crate) fn open(path: &Path, file_bytes_max: u64) -> io::Result<RotatingLog> {
        assert!(file_bytes_max > 0, "a log cap of zero bytes keeps nothing");
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let file_bytes = file.metadata()?.len();
        let mut rotated_name = path.as_os_str().to_owned();
        rotated_name.push(LOG_ROTATED_SUFFIX);
        Ok(RotatingLog {
            path: path.to_path_buf(),
            rotated_path: PathBuf::from(rotated_name),
            file: Some(file),
            file_bytes,
            file_bytes_max,
            failure_reported: false,
        })
    }

    /// Appends `bytes`, rotating whenever the current file is full, so no file ever
    /// holds more than the cap.
    pub(crate) fn append(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.file_bytes >= self.file_bytes_max {
                self.rotate();
            }
            let room = usize::try_from(self.file_bytes_max - self.file_bytes).unwrap_or(usize::MAX);
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            if let Some(file) = &mut self.file
                && let Err(error) = file.write_all(now)
            {
                self.report("writing", &error);
            }
            // Counted even when dropped: the cap bounds what this file may hold.
            self.file_bytes += now.len() as u64;
            bytes = rest;
        }
    }

    /// Replaces `<name>.1` with the current file and starts an empty one.
    fn rotate(&mut self) {
        self.file = None; // closed before the rename, so nothing is written after it
        if let Err(error) = fs::rename(&self.path, &self.rotated_path) {
            self.report("rotating", &error);
        }
        match OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)
        {
            Ok(file) => self.file = Some(file),
            Err(error) => self.report("reopening", &error),
        }
        self.file_bytes = 0;
    }

    fn report(&mut self, action: &str, error: &io::Error) {
        if !self.failure_reported {
            self.failure_reported = true;
            eprintln!(
                "palisade shim: {action} {} failed: {error}; output is dropped while this lasts",
                self.path.display()
            );
        }
    }
}

/// Copies `reader` into `log` until end of file (every writer closed the pipe).
/// Returns how many bytes were read.
pub(crate) fn pump(mut reader: impl Read, log: &mut RotatingLog) -> io::Result<u64> {
    let mut buffer = vec![0_u8; LOG_READ_BUFFER_BYTES];
    let mut total = 0_u64;
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => return Ok(total),
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        log.append(&buffer[..read]);
        total += read as u64;
    }
}

// ---------------------------------------------------------------------------------
// Reading (gateway side): `ComputeDriver::read_log`.
//
// A cursor names a position in one file by the file's identity — inode and birth
// time, which a rotation does not change (a rename keeps the inode) — and a byte
// offset in it: `<inode>.<birth_ns>:<offset>`. The writer only ever appends to the
// current file and renames it to `<name>.1` when full, so a reader holding a cursor
// finds its file either as the current one (read on) or as the rotated one (read to
// its end, then go on at offset 0 of the current one), or not at all (rotated away
// twice: `skipped`, go on at the oldest file kept). The birth time guards against an
// inode number reused by the next file (filesystems without birth times report 0;
// there a reuse after two rotations between reads could go unnoticed).
// The current file is opened before the rotated one: a rotation in between then
// shows one file under both names, which reads correctly.

/// The cursor of "before anything": the oldest file kept, from its start.
pub const LOG_CURSOR_BEGINNING: &str = "0.0:0";
/// How far back from the end `--tail` scans for line breaks (per file).
pub(super) const LOG_TAIL_SCAN_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// A position in one log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogCursor {
    inode: u64,
    birth_ns: u64,
    offset: u64,
}

impl LogCursor {
    pub(super) fn parse(text: &str) -> Option<LogCursor> {
        let (file, offset) = text.split_once(':')?;
        let (inode, birth_ns) = file.split_once('.')?;
        Some(LogCursor {
            inode: inode.parse().ok()?,
            birth_ns: birth_ns.parse().ok()?,
            offset: offset.parse().ok()?,
        })
    }

    fn render(&self) -> String {
        format!("{}.{}:{}", self.inode, self.birth_ns, self.offset)
    }

    fn is_beginning(&self) -> bool {
        self.inode == 0
    }
}

/// One log file opened for reading, with its identity.
struct OpenLog {
    file: File,
    inode: u64,
    birth_ns: u64,
    len: u64,
}

impl OpenLog {
    fn open(path: &Path) -> io::Result<Option<OpenLog>> {
        use std::os::unix::fs::MetadataExt;
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let metadata = file.metadata()?;
        let birth_ns = metadata
            .created()
            .ok()
            .and_then(|born| born.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos() as u64);
        Ok(Some(OpenLog {
            inode: metadata.ino(),
            birth_ns,
            len: metadata.len(),
            file,
        }))
    }

    fn is(&self, cursor: &LogCursor) -> bool {
        self.inode == cursor.inode && self.birth_ns == cursor.birth_ns
    }

    fn at(&self, offset: u64) -> LogCursor {
        LogCursor {
            inode: self.inode,
            birth_ns: self.birth_ns,
            offset,
        }
    }

    /// Reads up to `bytes_max` from `offset` (the file may have grown since it was
    /// opened: read what is there).
    fn read_from(&self, offset: u64, bytes_max: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut data = vec![0_u8; bytes_max];
        let mut filled = 0;
        while filled < bytes_max {
            match self
                .file
                .read_at(&mut data[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        }
        data.truncate(filled);
        Ok(data)
    }

    /// The offset where the last `lines` lines start, scanning back at most
    /// [`LOG_TAIL_SCAN_BYTES_MAX`] (a last line without its newline counts).
    /// `Err(found)` when fewer start in the file: `found` lines start after a
    /// newline; what precedes the first newline is the end of a line that
    /// began in the rotated file, or the file's first line.
    fn tail_offset(&self, lines: u32) -> io::Result<Result<u64, u32>> {
        use std::os::unix::fs::FileExt;
        let end = self.len;
        let floor = end.saturating_sub(LOG_TAIL_SCAN_BYTES_MAX);
        let mut found = 0_u32;
        let mut block = vec![0_u8; LOG_READ_BUFFER_BYTES];
        let mut position = end;
        // A last line without its newline still counts as a line.
        let mut skip_final_newline = true;
        while position > floor {
            let start = position.saturating_sub(block.len() as u64).max(floor);
            let length = (position - start) as usize;
            self.file.read_exact_at(&mut block[..length], start)?;
            for index in (0..length).rev() {
                let at = start + index as u64;
                if block[index] == b'\n' {
                    if skip_final_newline && at + 1 == end {
                        skip_final_newline = false;
                        continue;
                    }
                    found += 1;
                    if found == lines {
                        return Ok(Ok(at + 1));
                    }
                }
                skip_final_newline = false;
            }
            position = start;
        }
        Ok(Err(found))
    }
}

/// Reads one stream of the execution in `execution_dir` from `start`.
pub(super) fn read_log(
    execution_dir: &Path,
    file_name: &str,
    start: &crate::LogStart,
    bytes_max: usize,
) -> io::Result<crate::LogRead> {
    let path = execution_dir.join(file_name);
    let mut rotated_name = path.as_os_str().to_owned();
    rotated_name.push(LOG_ROTATED_SUFFIX);
    // Current first, then rotated (see above).
    let current = OpenLog::open(&path)?;
    let rotated = OpenLog::open(Path::new(&rotated_name))?;
    let oldest = |skipped: bool| -> (Option<&OpenLog>, u64, bool) {
        match (&rotated, &current) {
            (Some(rotated), _) => (Some(rotated), 0, skipped),
            (None, Some(current)) => (Some(current), 0, skipped),
            (None, None) => (None, 0, skipped),
        }
    };
    let (file, offset, skipped) = match start {
        crate::LogStart::Beginning => oldest(false),
        crate::LogStart::Cursor(text) => {
            let cursor = LogCursor::parse(text).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "not a cursor of this driver")
            })?;
            if cursor.is_beginning() {
                oldest(false)
            } else if let Some(current) = current.as_ref().filter(|file| file.is(&cursor)) {
                (Some(current), cursor.offset, false)
            } else if let Some(old) = rotated.as_ref().filter(|file| file.is(&cursor)) {
                if cursor.offset >= old.len && current.as_ref().is_some_and(|c| !c.is(&cursor)) {
                    // The rotated file is complete (nothing writes it any more).
                    (current.as_ref(), 0, false)
                } else {
                    (Some(old), cursor.offset, false)
                }
            } else {
                // Rotated away twice since the cursor was issued.
                oldest(true)
            }
        }
        crate::LogStart::TailLines(lines) => {
            let lines = (*lines).max(1);
            match &current {
                None => oldest(false),
                Some(current_file) => match current_file.tail_offset(lines)? {
                    Ok(offset) => (Some(current_file), offset, false),
                    Err(found) => match &rotated {
                        Some(rotated_file) if !rotated_file.is(&current_file.at(0)) => {
                            // The rotated file's unfinished last line is the one
                            // the current file's head finishes: it counts once.
                            match rotated_file.tail_offset(lines - found)? {
                                Ok(offset) => (Some(rotated_file), offset, false),
                                Err(_) => (Some(rotated_file), 0, false),
                            }
                        }
                        _ => (Some(current_file), 0, false),
                    },
                },
            }
        }
    };
    let Some(file) = file else {
        return Ok(crate::LogRead {
            data: Vec::new(),
            cursor: LOG_CURSOR_BEGINNING.to_owned(),
            skipped,
        });
    };
    let data = file.read_from(offset, bytes_max)?;
    let cursor = file.at(offset + data.len() as u64).render();
    Ok(crate::LogRead {
        data,
        cursor,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_cut_exactly_at_the_cap_and_one_rotation_is_kept() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("stdout.log");
        let cap = 1000_u64;
        let mut log = RotatingLog::open(&path, cap).expect("open");
        // 3.5 caps of numbered bytes, in odd-sized pieces.
        let output: Vec<u8> = (0..3500_u32).map(|index| (index % 251) as u8).collect();
        let read = pump(io::Cursor::new(&output).chain(io::empty()), &mut log).expect("pump");
        assert_eq!(read, 3500);
        drop(log);
        let current = fs::read(&path).expect("current");
        let rotated = fs::read(dir.path().join("stdout.log.1")).expect("rotated");
        assert_eq!(current, output[3000..]);
        assert_eq!(rotated, output[2000..3000]);
        assert_eq!(rotated.len() as u64, cap);
    }

    fn read_all(dir: &Path, mut start: crate::LogStart, bytes_max: usize) -> (Vec<u8>, String) {
        let mut all = Vec::new();
        loop {
            let read = read_log(dir, "stdout.log", &start, bytes_max).expect("read");
            assert!(!read.skipped);
            start = crate::LogStart::Cursor(read.cursor.clone());
            if read.data.is_empty() {
                return (all, read.cursor);
            }
            all.extend(read.data);
        }
    }

    #[test]
    fn a_reader_with_a_cursor_follows_rotations_without_losing_or_repeating() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("stdout.log");
        // No file yet: the beginning, empty.
        let (none, mut cursor) = read_all(dir.path(), crate::LogStart::Beginning, 64);
        assert!(none.is_empty());
        assert_eq!(cursor, LOG_CURSOR_BEGINNING);
        let mut log = RotatingLog::open(&path, 1000).expect("open");
        let output: Vec<u8> = (0..2600_u32).map(|index| (index % 251) as u8).collect();
        let mut seen = Vec::new();
        // Write in pieces, reading in between with small reads: one rotation at
        // most between two reads.
        for piece in output.chunks(300) {
            log.append(piece);
            let (data, next) = read_all(dir.path(), crate::LogStart::Cursor(cursor), 70);
            seen.extend(data);
            cursor = next;
        }
        assert_eq!(seen, output);
        // Two rotations between reads: the reader is told it skipped.
        log.append(&[1_u8; 2500]);
        let read = read_log(
            dir.path(),
            "stdout.log",
            &crate::LogStart::Cursor(cursor),
            10,
        )
        .expect("read");
        assert!(read.skipped);
    }

    #[test]
    fn tail_starts_at_the_last_lines() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("stdout.log");
        let mut log = RotatingLog::open(&path, 30).expect("open");
        for line in 0..10 {
            log.append(format!("line {line}\n").as_bytes());
        }
        drop(log);
        let (tail, _) = read_all(dir.path(), crate::LogStart::TailLines(3), 1000);
        assert_eq!(String::from_utf8(tail).unwrap(), "line 7\nline 8\nline 9\n");
        // More lines than the current file holds: on into the rotated one.
        let (tail, _) = read_all(dir.path(), crate::LogStart::TailLines(5), 1000);
        assert_eq!(
            String::from_utf8(tail).unwrap(),
            "line 5\nline 6\nline 7\nline 8\nline 9\n"
        );
    }

    #[test]
    fn a_reopened_log_counts_what_it_already_holds() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("stderr.log");
        fs::write(&path, [b'a'; 90]).expect("seed");
        let mut log = RotatingLog::open(&path, 100).expect("open");
        log.append(&[b'b'; 20]);
        drop(log);
        assert_eq!(fs::read(&path).expect("current"), [b'b'; 10]);
        let rotated = fs::read(dir.path().join("stderr.log.1")).expect("rotated");
        assert_eq!(rotated.len(), 100);
        assert!(rotated.ends_with(&[b'b'; 10]));
    }
}
