//! The `palisade` binary: server (`gateway run`, `up`), CLI, chaos
//! campaigns, and the hidden per-execution shim of the process driver.

use clap::Parser;
use palisade_cli::commands::{
    ChaosCommand, Cli, Command, GatewayCommand, report_error, run_client,
};
use palisade_cli::serve::LogFormat;
use palisade_driver::process::run_shim_if_requested;

/// jemalloc, not the system allocator. Under sustained writes glibc's
/// malloc kept a busy leader's freed memory in its per-thread arenas: in a
/// 12-minute soak the leader took 487 MB from the system for 188 MB in use
/// (`malloc_stats`), its RSS still rising ~20 MB a minute at the end, and
/// `_int_malloc`, `malloc_consolidate` and `_int_free` were a tenth of its
/// CPU. jemalloc returns unused pages after a decay time; mimalloc was
/// measured too and served fewer requests.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    // The shim must run before any runtime or thread exists: it is a small
    // single-threaded supervisor of one execution.
    if let Some(code) = run_shim_if_requested() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let server = matches!(cli.command, Command::Up(_) | Command::Gateway(_));
    let chaos = matches!(cli.command, Command::Chaos(_));
    let (format, otlp_endpoint, worker_threads) = match &cli.command {
        Command::Gateway(GatewayCommand::Run(args)) => (
            args.log_format,
            args.otlp_endpoint.clone(),
            args.worker_threads,
        ),
        _ => (LogFormat::Text, None, None),
    };
    let mut otlp = None;
    if server {
        palisade_cli::fail_stop::install();
        otlp = match init_tracing("info,openraft=warn", format, otlp_endpoint.as_deref()) {
            Ok(otlp) => otlp,
            Err(error) => {
                eprintln!("error: {}", palisade_cli::commands::describe(&error));
                std::process::exit(2);
            }
        };
    } else if chaos {
        // Replica logs are noisy under faults: only errors unless
        // `PALISADE_LOG` says otherwise.
        if let Err(error) = init_tracing("error", format, None) {
            eprintln!("error: {}", palisade_cli::commands::describe(&error));
            std::process::exit(2);
        }
    }
    // What `Runtime::new()` builds, with `gateway run --worker-threads`.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = worker_threads {
        builder.worker_threads(usize::from(threads));
    }
    let runtime = match builder.build() {
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
    if let Some(provider) = otlp {
        // Sends the spans still batched.
        let _ = provider.shutdown();
    }
    std::process::exit(code);
}

/// Installs the log subscriber: `format` lines on stderr, filtered by
/// PALISADE_LOG (else `default_filter`), and with `otlp_endpoint` the
/// same spans exported over OTLP; returns the exporter's provider, to be
/// shut down (flushed) at exit.
fn init_tracing(
    default_filter: &str,
    format: LogFormat,
    otlp_endpoint: Option<&str>,
) -> anyhow::Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>> {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter =
        EnvFilter::try_from_env("PALISADE_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        // One object per line, with the current span and its parents, so
        // each line carries the request's trace id (`span.trace_id`).
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
        // Log files get plain text; a terminal gets colour.
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
    };
    let provider = otlp_endpoint.map(otlp_provider).transpose()?;
    let export = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider as _;
        tracing_opentelemetry::layer().with_tracer(provider.tracer("palisade"))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(export)
        .init();
    Ok(provider)
}

/// The OTLP exporter (HTTP/protobuf to `endpoint`), batched: spans leave
/// at most a second after they end.
fn otlp_provider(endpoint: &str) -> anyhow::Result<opentelemetry_sdk::trace::SdkTracerProvider> {
    use anyhow::Context as _;
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_secs(5))
        .build()
        .with_context(|| format!("cannot set up the OTLP exporter to {endpoint}"))?;
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            opentelemetry_sdk::trace::BatchConfigBuilder::default()
                .with_scheduled_delay(std::time::Duration::from_secs(1))
                .build(),
        )
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("palisade")
                .build(),
        )
        .build())
}
