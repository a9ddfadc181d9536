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

// The engine and the admin page wire these in next; until then only the tests use them.
#![allow(dead_code)]

mod heavy_hitters;
mod latency;
mod windows;

// Unused until the same wiring lands (the lint for re-exports is not `dead_code`).
#[allow(unused_imports)]
pub(crate) use heavy_hitters::{HEAVY_COUNTERS, HeavyHitters, MAX_KEY_BYTES};
#[allow(unused_imports)]
pub(crate) use latency::{
    LATENCY_BUCKETS, LATENCY_OVERFLOW_MICROS, LATENCY_WINDOW_SECONDS, LatencyWindow,
};
#[allow(unused_imports)]
pub(crate) use windows::{DEFAULT_SECONDS, MICROS_PER_SECOND, RuleSeries, RuleStats, SecondCounts};
