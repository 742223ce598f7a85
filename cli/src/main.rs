//! The `palisade` binary: server (`gateway run`, `up`), CLI, chaos
//! campaigns, and the hidden per-execution shim of the process driver.

use clap::Parser;
use palisade_cli::commands::{
    ChaosCommand, Cli, Command, GatewayCommand, report_error, run_client,
};
use palisade_cli::serve::LogFormat;
use palisade_driver::process::run_shim_if_requested;

fn main() {
    // The shim must run before any runtime or thread exists: it is a small
    // single-threaded supervisor of one execution.
    if let Some(code) = run_shim_if_requested() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let server = matches!(cli.command, Command::Up(_) | Command::Gateway(_));
    let chaos = matches!(cli.command, Command::Chaos(_));
    let format = match &cli.command {
        Command::Gateway(GatewayCommand::Run(args)) => args.log_format,
        _ => LogFormat::Text,
    };
    if server {
        palisade_cli::fail_stop::install();
        init_tracing("info,openraft=warn", format);
    } else if chaos {
        // Replica logs are noisy under faults: only errors unless
        // `PALISADE_LOG` says otherwise.
        init_tracing("error", format);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        let result = match cli.command {
            Command::Up(args) => palisade_cli::up::run(args).await,
            Command::Gateway(GatewayCommand::Run(args)) => palisade_cli::serve::run(args).await,
            // The harness has its own exit codes (0 clean, 1 anomaly, 2 could not run).
            Command::Chaos(ChaosCommand::Run(args)) => {
                return palisade_chaos::cli::run_campaigns(args).await;
            }
            Command::Shim(_) => unreachable!("the shim is dispatched before argument parsing"),
            _ => run_client(cli).await,
        };
        match result {
            Ok(()) => 0,
            Err(error) => report_error(&error),
        }
    });
    // Replicas and shims may still hold references; do not wait for them.
    runtime.shutdown_background();
    std::process::exit(code);
}

fn init_tracing(default_filter: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("PALISADE_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // One object per line, with the current span and its parents, so
        // each line carries the request's trace id (`span.trace_id`).
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
        // Log files get plain text; a terminal gets colour.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}
