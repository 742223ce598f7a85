//! The `palisade-chaos` binary: see [`palisade_chaos::cli`] and the README
//! section "Chaos campaigns".
//!
//! It can also serve as the gateway of the process mode (`palisade-chaos
//! gateway run ...`, hidden): that is exactly `palisade gateway run`, the
//! same library code, so that this crate's own tests can run the process
//! mode without the `palisade` binary of another crate. The process
//! driver's shim re-executes the binary that runs the gateway, hence the
//! shim dispatch below, as in `palisade`'s own `main`.

use clap::Parser;
use palisade_chaos::cli::{ChaosCommand, Cli};

fn main() {
    // The process driver's shim, before any runtime or thread exists.
    if let Some(code) = palisade_gateway::driver::process::run_shim_if_requested() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let serving = matches!(cli.command, ChaosCommand::Gateway(_));
    init_tracing(if serving {
        "info,openraft=warn"
    } else {
        "error"
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            std::process::exit(2);
        }
    };
    let code = runtime.block_on(palisade_chaos::cli::run(cli));
    // Replica threads and processes are gone; do not wait for stragglers.
    runtime.shutdown_background();
    std::process::exit(code);
}

/// Replica logs are noisy under faults: only errors unless `PALISADE_LOG`
/// says otherwise.
fn init_tracing(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("PALISADE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
