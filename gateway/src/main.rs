//! The `palisade` binary: server (`gateway run`, `up`), CLI, and the hidden
//! per-execution shim of the process driver.

use clap::Parser;
use palisade_gateway::cli::{Cli, Command, GatewayCommand, report_error, run_client};
use palisade_gateway::driver::process::run_shim_if_requested;

fn main() {
    // The shim must run before any runtime or thread exists: it is a small
    // single-threaded supervisor of one execution.
    if let Some(code) = run_shim_if_requested() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    if let Command::Chaos(chaos) = cli.command {
        std::process::exit(palisade_gateway::cli::chaos::exec(chaos.args));
    }
    let server = matches!(cli.command, Command::Up(_) | Command::Gateway(_));
    if server {
        init_tracing();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Up(args) => palisade_gateway::up::run(args).await,
            Command::Gateway(GatewayCommand::Run(args)) => palisade_gateway::serve::run(args).await,
            Command::Shim(_) => unreachable!("the shim is dispatched before argument parsing"),
            _ => run_client(cli).await,
        }
    });
    // Replicas and shims may still hold references; do not wait for them.
    runtime.shutdown_background();
    if let Err(error) = result {
        std::process::exit(report_error(&error));
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PALISADE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Log files get plain text; a terminal gets colour.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
