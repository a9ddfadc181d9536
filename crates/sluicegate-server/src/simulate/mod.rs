//! `sluicegate simulate`: runs limiters over a trace (or generated traffic) and reports every
//! decision as a JSON line, as DESIGN section 5 specifies; or, with `--adaptive`, an adaptive
//! concurrency limit in front of a simulated server ([`adaptive`]).

pub mod adaptive;
mod args;
mod event;
mod output;
mod plot;
mod run;
mod trace;
mod traffic;

pub use args::SimulateArgs;
pub use run::run;
