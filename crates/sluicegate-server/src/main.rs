//! The `sluicegate` command.

use clap::Parser;

mod simulate;

/// Sluicegate: rate limiting as a library, on Redis, and as a service.
#[derive(Debug, Parser)]
#[command(version, about)]
enum Command {
    /// Print the version and exit.
    Version,
    /// Run limiters over a trace or generated traffic; one JSON line per decision.
    Simulate(simulate::SimulateArgs),
}

fn main() -> anyhow::Result<()> {
    match Command::parse() {
        Command::Version => println!("sluicegate {}", env!("CARGO_PKG_VERSION")),
        Command::Simulate(args) => simulate::run(args)?,
    }
    Ok(())
}
