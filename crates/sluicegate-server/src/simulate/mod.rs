//! `sluicegate simulate`: runs limiters over a trace (or generated traffic) and reports every
//! decision as a JSON line, as the README's `simulate` section shows.

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

pub(crate) use args::SimulateArgs;
pub(crate) use run::run;
