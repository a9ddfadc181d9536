//! The statistics behind the live monitoring page (issue 12), kept in memory by the service
//! and read by the page: per-rule allowed / denied / shadow-denied / near-limit counts per second
//! over five minutes, decision latency percentiles over the last minute, and the heaviest
//! limited keys of the last minute.
//!
//! Each structure is a pure function of explicit time (`now`, microseconds since the epoch,
//! from the service's clock): none reads a clock, so tests drive them second by second. All are
//! `Send + Sync` with memory fixed at construction. The two recorded on every decision
//! ([`SecondCounts`], [`LatencyWindow`]) are lock-free and allocation-free; [`HeavyHitters`],
//! recorded only for denied requests, takes one short allocation-free lock.

mod heavy_hitters;
mod latency;
mod windows;

pub(crate) use heavy_hitters::HeavyHitters;
pub(crate) use latency::LatencyWindow;
pub(crate) use windows::{DEFAULT_SECONDS, RuleSeries, RuleStats};
