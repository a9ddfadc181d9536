//! The `sluicegate` command.

mod check_config;
mod proxy_cmd;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc, not the system allocator: the proxy allocates about eleven times a request
/// (hyper's buffers and header maps, extensions, futures), which costs about 1,200 instructions
/// fewer a request than glibc's malloc (callgrind, BENCHMARKS.md). The service pays for it in
/// memory: peak RSS 218-246 MB against glibc's 214-215 under scripts/abuse.sh's million keys.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sluicegate: rate limiting as a library, on Redis, and as a service.
#[derive(Debug, Parser)]
#[command(version, about)]
enum Command {
    /// Print the version and exit.
    Version,
    /// Validate rule files and print the resolved rules (exit 1 and every error otherwise).
    CheckConfig(check_config::CheckConfigArgs),
    /// Run limiters over a trace or generated traffic; one JSON line per decision.
    Simulate(sluicegate_server::simulate::SimulateArgs),
    /// Serve the rate limit service: Envoy's gRPC API and HTTP JSON.
    Serve(sluicegate_server::serve::ServeArgs),
    /// Rate limit requests in front of an HTTP upstream: a reverse proxy with nginx's
    /// `limit_req` / `limit_conn` and more (rules: docs/proxy.md).
    Proxy(proxy_cmd::ProxyArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    match Command::parse() {
        Command::Version => println!("sluicegate {}", env!("CARGO_PKG_VERSION")),
        Command::CheckConfig(args) => {
            let valid = check_config::run(&args, &mut std::io::stdout(), &mut std::io::stderr())?;
            return Ok(if valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        Command::Simulate(args) => sluicegate_server::simulate::run(args)?,
        Command::Serve(args) => serve(&args)?,
        Command::Proxy(args) => {
            init_logging(args.log_json);
            proxy_cmd::run(&args, shutdown_signal())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the service until SIGTERM or Ctrl-C, then shuts down gracefully.
fn serve(args: &sluicegate_server::serve::ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    let runtime = sluicegate_server::serve::runtime()?;
    runtime.block_on(async {
        let mut server = sluicegate_server::serve::start(args.to_config()).await?;
        tokio::select! {
            result = server.join() => return result,
            () = shutdown_signal() => tracing::info!("shutting down"),
        }
        server.shutdown().await
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICEGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only on a terminal: a file or a pipe gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
