//! Crash test: a writer process appends entries in a loop and announces each
//! index once `append` reported it flushed; the test SIGKILLs the writer at an
//! arbitrary point (no destructor, no clean shutdown), reopens the log and
//! checks that every announced index is there, verifies, and that the log is
//! contiguous. Several rounds, each resuming the same log after a kill.
//!
//! The writer is this test binary itself, re-executed with
//! [`WRITER_DIRECTORY_ENV`] set, running only the `crash_writer` test.
//!
//! What this proves: a process killed at any point (including inside a
//! write, whose torn end the next open cuts off) reopens to a consistent
//! log holding everything it announced. Entries are padded so that a write
//! takes long enough for some kills to land inside one. What it cannot
//! tell: a callback fired before its entries' `fdatasync`, or even before
//! their write — a SIGKILL keeps the page cache, and a segment write is
//! microseconds, so a kill almost never lands between the two (with the
//! callback moved before the write this test still passed in a run). That
//! order is checked by the log store's unit test
//! `append_returns_before_the_commit_and_queued_appends_commit_together`,
//! which holds the writer and sees no callback fire before it ran; the
//! fsync against power loss is the segment's `fdatasync` (and redb's
//! `Durability::Immediate` for the records beside it).

#![cfg(unix)]

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::process::Stdio;

use openraft::EntryPayload;
use openraft::RaftLogReader;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::type_config::TypeConfigExt;
use palisade_storage::LogStore;

use common::TestConfig;
use common::command_entry;

/// Set in the writer process: the log directory to append to.
const WRITER_DIRECTORY_ENV: &str = "PALISADE_STORAGE_CRASH_WRITER_DIRECTORY";

/// Kill rounds, each killing the writer after a different number of
/// announced entries.
const ROUNDS: usize = 4;
const ANNOUNCED_BEFORE_KILL: [usize; ROUNDS] = [150, 400, 20, 250];

/// Largest batch the writer hands to one `append`.
const BATCH_ENTRIES_MAX: u64 = 7;

const SIGKILL: i32 = 9;

/// Padding that makes each entry large, so that a commit takes long enough
/// for a kill to land inside it.
const COMMAND_PADDING_BYTES: usize = 16 * 1024;

fn command(index: u64) -> String {
    format!("command {index} {}", "x".repeat(COMMAND_PADDING_BYTES))
}

/// The writer process of [`sigkill_loses_no_flushed_entry`]. Run as a plain
/// test (without the environment variable) it does nothing.
#[test]
fn crash_writer() {
    let Some(dir) = std::env::var_os(WRITER_DIRECTORY_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut store = LogStore::<TestConfig>::open(&dir).unwrap();
        let state = store.get_log_state().await.unwrap();
        let mut next = state.last_log_id.map_or(0, |id| id.index + 1);
        let mut batch_entries = 1;
        loop {
            let batch = next..next + batch_entries;
            let entries = batch
                .clone()
                .map(|index| command_entry(1, index, command(index)));

            // Announce the batch as soon as the callback fires, independently
            // of `append` returning: a callback that fired before the commit
            // would be announced while the commit is still in flight.
            let (flushed_tx, flushed_rx) = TestConfig::oneshot::<std::io::Result<()>>();
            let announce = tokio::spawn(async move {
                flushed_rx.await.unwrap().unwrap();
                // Straight to fd 1: the test harness does not capture this.
                let mut out = std::io::stdout().lock();
                for index in batch {
                    writeln!(out, "flushed {index}").unwrap();
                }
                out.flush().unwrap();
            });
            store
                .append(entries, IOFlushed::signal(flushed_tx))
                .await
                .unwrap();
            announce.await.unwrap();

            next += batch_entries;
            batch_entries = batch_entries % BATCH_ENTRIES_MAX + 1;
        }
    });
}

/// Starts a writer on `dir`, collects announced indexes until `kill_after`
/// of them, then SIGKILLs it.
fn run_writer_and_kill(dir: &Path, kill_after: usize, announced: &mut BTreeSet<u64>) {
    let mut writer = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_writer", "--nocapture", "--test-threads=1"])
        .env(WRITER_DIRECTORY_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = writer.stdout.take().unwrap();

    let mut seen = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let Some(index) = line.strip_prefix("flushed ") else {
            continue; // the test harness's own output
        };
        let index: u64 = index.parse().unwrap();
        assert!(announced.insert(index), "index {index} announced twice");
        seen += 1;
        if seen == kill_after {
            break;
        }
    }
    assert_eq!(
        seen, kill_after,
        "the writer stopped early; its stderr above says why"
    );

    // Child::kill sends SIGKILL on Unix. The writer is still appending.
    writer.kill().unwrap();
    let status = writer.wait().unwrap();
    assert_eq!(status.signal(), Some(SIGKILL), "writer ended with {status}");
}

#[test]
fn sigkill_loses_no_flushed_entry() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut announced = BTreeSet::new();

    for kill_after in ANNOUNCED_BEFORE_KILL {
        run_writer_and_kill(dir.path(), kill_after, &mut announced);

        let store = LogStore::<TestConfig>::open(dir.path()).unwrap();
        // A full scan: every checksum, every index, no hole.
        let entry_count = store.verify().unwrap();
        let entries = runtime
            .block_on(store.reader().try_get_log_entries(..))
            .unwrap();
        assert_eq!(entries.len() as u64, entry_count);

        for (position, entry) in entries.iter().enumerate() {
            let index = position as u64;
            assert_eq!(entry.index(), index, "the log is not contiguous from 0");
            match &entry.payload {
                EntryPayload::Normal(stored) => {
                    assert!(
                        stored == &command(index),
                        "entry {index} holds another command"
                    )
                }
                other => panic!("entry {index} holds {other:?}"),
            }
        }
        let last_announced = *announced.last().unwrap();
        assert!(
            entry_count > last_announced,
            "index {last_announced} was announced flushed but the log ends before it \
             ({entry_count} entries)"
        );
        // Entries appended but not yet announced when the kill came may be
        // there too; the next round continues after them.
        eprintln!(
            "round killed after {kill_after} announced entries: {entry_count} entries on disk, \
             last announced {last_announced}"
        );
    }
}
