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
