//! Keeping the replicas' logs of a failed test: the cluster's temporary
//! directory goes away with the test, so a panicking test copies them out.

use std::path::PathBuf;

/// When dropped during a panic, copies every `gateway.log` under `root`
/// (one directory per replica) to `$TMPDIR/palisade-failed-TEST/`, which
/// survives the test's temporary directory. Declare it after the cluster,
/// so it drops first.
#[derive(Debug)]
pub struct KeepLogsOnFailure {
    /// The cluster's directory.
    pub root: PathBuf,
    /// The test's name.
    pub test: &'static str,
}

impl Drop for KeepLogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let kept = std::env::temp_dir().join(format!("palisade-failed-{}", self.test));
        for entry in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let log = entry.path().join("gateway.log");
            if log.is_file() {
                let into = kept.join(entry.file_name());
                let _ = std::fs::create_dir_all(&into);
                let _ = std::fs::copy(&log, into.join("gateway.log"));
            }
        }
        eprintln!("replica logs kept in {}", kept.display());
    }
}
