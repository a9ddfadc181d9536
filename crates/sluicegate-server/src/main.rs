//! The `sluicegate` command.

mod check_config;

use std::process::ExitCode;

use clap::Parser;

/// Sluicegate: rate limiting as a library, on Redis, and as a service.
#[derive(Debug, Parser)]
#[command(version, about)]
enum Command {
    /// Print the version and exit.
    Version,
    /// Validate rule files and print the resolved rules (exit 1 and every error otherwise).
    CheckConfig(check_config::CheckConfigArgs),
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
    }
    Ok(ExitCode::SUCCESS)
}
