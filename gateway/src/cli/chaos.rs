//! `palisade chaos ...`: runs the chaos harness, which is its own binary,
//! `palisade-chaos` (crate `palisade-chaos`). The harness depends on this
//! crate (it runs replicas through `palisade_gateway::node`), so this crate
//! cannot call into it; instead `palisade chaos ARGS` replaces itself with
//! `palisade-chaos ARGS`, found next to this executable (where cargo puts
//! both) or on `PATH`. Build it with `cargo build -p palisade-chaos`.

use std::ffi::OsString;
use std::path::PathBuf;

/// The harness binary's name.
pub const CHAOS_BINARY: &str = "palisade-chaos";

/// Where the harness binary is: next to this executable, else on `PATH`.
fn chaos_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|me| me.parent().map(|dir| dir.join(CHAOS_BINARY)))
        .filter(|candidate| candidate.exists())
        .unwrap_or_else(|| PathBuf::from(CHAOS_BINARY))
}

/// Replaces this process with `palisade-chaos ARGS`; returns the exit code
/// only if that could not be done.
pub fn exec(args: Vec<OsString>) -> i32 {
    use std::os::unix::process::CommandExt;
    let binary = chaos_binary();
    let error = std::process::Command::new(&binary).args(args).exec();
    eprintln!(
        "error: cannot run {}: {error}; build it with `cargo build -p palisade-chaos` \
         (it is looked for next to this executable, then on PATH)",
        binary.display()
    );
    2
}
