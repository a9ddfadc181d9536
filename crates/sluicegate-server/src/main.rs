//! The `sluicegate` command.

use clap::Parser;

/// Sluicegate: rate limiting as a library, on Redis, and as a service.
#[derive(Debug, Parser)]
#[command(version, about)]
enum Command {
    /// Print the version and exit.
    Version,
}

fn main() -> anyhow::Result<()> {
    match Command::parse() {
        Command::Version => println!("sluicegate {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
