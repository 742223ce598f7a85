//! Fail-stop for the server commands (`gateway run`, `up`): any panic ends
//! the process.
//!
//! Why the whole process: a panic unwinds only the task it happened in.
//! In apply that leaves the state half-applied behind a poisoned lock while
//! the rest of the replica — gRPC handlers, the executor, health — keeps
//! going; in a storage or Raft task it leaves a replica that answers but
//! cannot commit. Neither is a state worth serving from, and the Raft log
//! plus snapshots on disk are exactly what a restart rebuilds a correct
//! state from. So: log the panic, then abort.
//!
//! Two layers give the same behaviour everywhere: the release profile has
//! `panic = "abort"` (workspace `Cargo.toml`), and [`install`] sets a panic
//! hook that aborts after the default report, so debug builds (the ones
//! the end-to-end tests run) stop the same way. A hook, not
//! `catch_unwind` around apply: it also covers panics in tasks we do not
//! own (openraft's, tonic's) and cannot be forgotten on a new code path.

/// What a replica prints, after the panic's own report, before it aborts.
pub const PANIC_MESSAGE: &str = "FATAL: a panic in this replica; aborting the process so it never \
     serves a half-applied state (fail-stop). Its log and snapshots on disk are intact: start it \
     again (`palisade up` and systemd restart it) and report the panic above";

/// Makes every panic in this process abort it (see the module doc).
pub fn install() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("{PANIC_MESSAGE}");
        std::process::abort();
    }));
}
