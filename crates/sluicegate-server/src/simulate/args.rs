//! The command line of `sluicegate simulate`.

use std::path::PathBuf;

use clap::Args;
use sluicegate::{AlgorithmSpec, AnyAlgorithm};

use crate::simulate::traffic::TrafficSpec;

/// Runs limiters over a trace and prints each decision as a JSON line.
///
/// A trace is CSV, `t,key,permits,op` (t in seconds since the start; op one of check, peek,
/// acquire, try:SECONDS, set_rate:RATE, release). Output lines are flushed as each event is
/// read, so another program can drive the command through a pipe one event at a time.
#[derive(Debug, Args)]
#[command(after_help = TRACE_HELP)]
pub(crate) struct SimulateArgs {
    /// A limiter, `ALGORITHM:key=value,...` (e.g. `gcra:rate=10/s,burst=5`); repeat to run
    /// several side by side (each output line then carries `"limiter": INDEX`). Algorithms:
    /// token-bucket, gcra, fixed-window, sliding-log, sliding-window, leaky-bucket, leaky-queue,
    /// smooth-bursty, smooth-warmup, concurrency.
    #[arg(long = "limiter", value_name = "SPEC", required = true, value_parser = parse_limiter)]
    pub(crate) limiters: Vec<LimiterArg>,

    /// The trace to read, or `-` for standard input (the default without --traffic).
    #[arg(long, value_name = "FILE|-", conflicts_with = "traffic")]
    pub(crate) trace: Option<PathBuf>,

    /// Generates the traffic instead of reading a trace: `poisson:rate=20/s,duration=10s`,
    /// `uniform:rate=5/s,duration=4s`, `burst:size=50,every=5s,duration=20s` (each also takes
    /// `keys=N` and `permits=N`).
    #[arg(long, value_name = "GEN", value_parser = TrafficSpec::parse)]
    pub(crate) traffic: Option<TrafficSpec>,

    /// Draws allowed and rejected requests over time, one panel per limiter, as SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub(crate) plot: Option<PathBuf>,

    /// The seed for --traffic: the same seed gives the same traffic.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) seed: u64,
}

const TRACE_HELP: &str = "\
A trace is CSV, one event a line: t,key,permits,op (a header line and # comments allowed).
  t        seconds since the start (decimal, to the microsecond), never decreasing
  permits  default 1
  op       check (default) | peek | acquire | try:SECONDS | set_rate:RATE | release
           (a negative try:SECONDS waits for nothing, as Guava's tryAcquire)
Each event gets one JSON line per limiter, flushed at once:
  {\"t\":0.2,\"key\":\"a\",\"permits\":1,\"op\":\"check\",\"allowed\":true,\"limit\":5,\"remaining\":4,
   \"reset_after\":0.8,\"retry_after\":null,\"wait\":0.0}
or {\"t\":...,\"error\":\"...\"} for an event the limiter cannot take; the run goes on.";

/// One `--limiter`: the algorithm, and its spec for titles.
#[derive(Debug, Clone)]
pub(crate) struct LimiterArg {
    pub(crate) spec: AlgorithmSpec,
    pub(crate) algorithm: AnyAlgorithm,
}

fn parse_limiter(text: &str) -> Result<LimiterArg, sluicegate::ConfigError> {
    let spec: AlgorithmSpec = text.parse()?;
    let algorithm = spec.build()?;
    Ok(LimiterArg { spec, algorithm })
}
