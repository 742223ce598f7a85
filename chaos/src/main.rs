//! The `palisade-chaos` binary: see [`palisade_chaos::cli`] and the README
//! section "Chaos campaigns".

use clap::Parser;

fn main() {
    let cli = palisade_chaos::cli::Cli::parse();
    init_tracing();
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
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("PALISADE_LOG").unwrap_or_else(|_| EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
