//! The `palisade` binary allocates with jemalloc (why: the doc of its
//! `#[global_allocator]` in `src/main.rs`). Asked through jemalloc's own
//! configuration variable to print its statistics at exit, the binary
//! prints them; under the system allocator the variable means nothing.

use std::process::Command;

/// jemalloc's `MALLOC_CONF` under the prefix tikv-jemalloc-sys gives its
/// symbols (the binary's jemalloc never reads the unprefixed one).
const JEMALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

#[test]
fn the_binary_allocates_with_jemalloc() {
    let output = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("--version")
        .env(JEMALLOC_CONF_ENV, "stats_print:true")
        .output()
        .expect("run palisade --version");
    assert!(
        output.status.success(),
        "palisade --version failed: {output:?}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("jemalloc statistics"),
        "no jemalloc statistics at exit, so the binary does not allocate with jemalloc; stderr:\n{stderr}"
    );
}
