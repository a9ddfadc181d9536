//! `sluicegate simulate`: runs limiters over a trace (or generated traffic) and reports every
//! decision as a JSON line, as the README's `simulate` section shows; or, with `--adaptive`,
//! an adaptive concurrency limit in front of a simulated server ([`adaptive`]).

pub mod adaptive;
mod args;
mod event;
mod output;
mod plot;
mod run;
mod trace;
mod traffic;

#[cfg(test)]
#[path = "../../../sluicegate/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;

pub use args::SimulateArgs;
pub use run::run;
