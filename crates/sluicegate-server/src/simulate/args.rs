//! The command line of `sluicegate simulate`.

use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use sluicegate::clock::micros_ceil;
use sluicegate::rate::parse_duration;
use sluicegate::spec::AlgorithmSpec;
use sluicegate::{AnyAlgorithm, Micros};

use crate::simulate::adaptive::{ControllerSpec, LimitsSpec, Load, ServerSpec};
use crate::simulate::traffic::TrafficSpec;

/// Runs limiters over a trace and prints each decision as a JSON line; or, with `--adaptive`,
/// an adaptive concurrency limit in front of a simulated server, one JSON line per second.
///
/// A trace is CSV, `t,key,permits,op` (t in seconds since the start; op one of check, peek,
/// acquire, try:SECONDS, set_rate:RATE, release). Output lines are flushed as each event is
/// read, so another program can drive the command through a pipe one event at a time.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct SimulateArgs {
    /// A limiter, `ALGORITHM:key=value,...` (e.g. `gcra:rate=10/s,burst=5`); repeat to run
    /// several side by side (each output line then carries `"limiter": INDEX`). Algorithms:
    /// token-bucket, gcra, fixed-window, sliding-log, sliding-window, leaky-bucket, leaky-queue,
    /// smooth-bursty, smooth-warmup, concurrency.
    #[arg(
        long = "limiter",
        value_name = "SPEC",
        required_unless_present = "adaptive",
        value_parser = parse_limiter
    )]
    pub(crate) limiters: Vec<LimiterArg>,

    /// The trace to read, or `-` for standard input (the default without --traffic).
    #[arg(long, value_name = "FILE|-", conflicts_with = "traffic")]
    pub(crate) trace: Option<PathBuf>,

    /// Generates the traffic instead of reading a trace: `poisson:rate=20/s,duration=10s`,
    /// `uniform:rate=5/s,duration=4s`, `burst:size=50,every=5s,duration=20s`,
    /// `ramp:from=10/s,to=100/s,duration=60s` (Poisson at a rate moving linearly; each also
    /// takes `keys=N` and `permits=N`).
    #[arg(long, value_name = "GEN", value_parser = TrafficSpec::parse)]
    pub(crate) traffic: Option<TrafficSpec>,

    /// An adaptive concurrency limit, `CONTROLLER[:key=value,...]` (e.g. `vegas`,
    /// `percentile:target=50ms,p=0.99`, `fixed:limit=20`, `none`), in front of the --server,
    /// clients arriving by --traffic; prints one JSON line per simulated second. Repeat to
    /// compare several on the same traffic (lines then carry `"controller": INDEX`).
    #[arg(
        long,
        value_name = "CONTROLLER",
        value_parser = ControllerSpec::from_str,
        conflicts_with_all = ["limiters", "trace"],
        requires_all = ["server", "traffic"]
    )]
    pub(crate) adaptive: Vec<ControllerSpec>,

    /// With --adaptive: the simulated server, `mmc:workers=W,service=MEAN[,change=T:W2,...]`:
    /// W workers, exponential service times of mean MEAN (e.g. 20ms), one FIFO queue; each
    /// change sets the workers to W2 at T (e.g. change=60s:5). Also `cv=X` (lognormal service
    /// times with that coefficient of variation), `queue=N` (at most N wait; more are
    /// rejected after `reject=DUR`, default 1ms), `fail=P` (each answer an error with
    /// probability P).
    #[arg(
        long,
        value_name = "SERVER",
        value_parser = ServerSpec::parse,
        requires = "adaptive",
        conflicts_with_all = ["limiters", "trace"]
    )]
    pub(crate) server: Option<ServerSpec>,

    /// With --adaptive: more arrivals on the first client, `GEN@START` (e.g.
    /// `poisson:rate=1000/s,duration=10s@60s`, a spike at 60 s); repeatable.
    #[arg(
        long,
        value_name = "GEN@START",
        value_parser = parse_extra,
        requires = "adaptive",
        conflicts_with_all = ["limiters", "trace"]
    )]
    pub(crate) extra_traffic: Vec<(TrafficSpec, Micros)>,

    /// With --adaptive: another client, `GEN[@START]`, with a limit of its own (the same
    /// controller) in front of the same server; repeatable.
    #[arg(
        long,
        value_name = "GEN[@START]",
        value_parser = parse_extra,
        requires = "adaptive",
        conflicts_with_all = ["limiters", "trace"]
    )]
    pub(crate) client: Vec<(TrafficSpec, Micros)>,

    /// With --adaptive: `min=N,initial=N,max=N` (any of them), the bounds of every adaptive
    /// controller that does not set its own.
    #[arg(
        long,
        value_name = "BOUNDS",
        value_parser = LimitsSpec::parse,
        requires = "adaptive",
        conflicts_with_all = ["limiters", "trace"]
    )]
    pub(crate) limits: Option<LimitsSpec>,

    /// With --adaptive: how long a client waits for its answer (default 1s); one answered
    /// later is not goodput, and the limit hears of it as a timeout.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_client_timeout,
        requires = "adaptive",
        conflicts_with_all = ["limiters", "trace"]
    )]
    pub(crate) client_timeout: Option<Micros>,

    /// Draws allowed and rejected requests over time, one panel per limiter, as SVG; with
    /// --adaptive, the limit and in-flight, p50 and p99 latency, and goodput per second, one
    /// panel per controller.
    #[arg(long, value_name = "OUT.svg")]
    pub(crate) plot: Option<PathBuf>,

    /// The seed for --traffic (and, with --adaptive, the service times and the controllers'
    /// own randomness): the same seed gives the same output.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) seed: u64,
}

impl SimulateArgs {
    /// `--extra-traffic` and `--client` as the adaptive scenario's loads.
    pub(crate) fn loads(&self) -> Vec<Load> {
        let extra = self.extra_traffic.iter().map(|(traffic, start)| Load {
            client: 0,
            traffic: traffic.clone(),
            start: *start,
        });
        let clients = self
            .client
            .iter()
            .enumerate()
            .map(|(index, (traffic, start))| Load {
                client: index + 1,
                traffic: traffic.clone(),
                start: *start,
            });
        extra.chain(clients).collect()
    }
}

/// `GEN[@START]`: a traffic generator and when it begins (default 0).
pub(crate) fn parse_extra(text: &str) -> Result<(TrafficSpec, Micros), String> {
    let (generator, start) = match text.rsplit_once('@') {
        Some((generator, start)) => {
            let start = parse_duration(start.trim())
                .map(micros_ceil)
                .map_err(|e| format!("bad start `{}`: {e}", start.trim()))?;
            (generator, start)
        }
        None => (text, 0),
    };
    Ok((TrafficSpec::parse(generator)?, start))
}

/// How long a simulated client waits when `--client-timeout` is not given.
pub(crate) const DEFAULT_CLIENT_TIMEOUT: Micros = 1_000_000;

fn parse_client_timeout(text: &str) -> Result<Micros, String> {
    let micros = parse_duration(text)
        .map(micros_ceil)
        .map_err(|e| e.to_string())?;
    if micros == 0 {
        return Err("must be more than zero (e.g. 1s)".into());
    }
    Ok(micros)
}

const AFTER_HELP: &str = "\
A trace is CSV, one event a line: t,key,permits,op (a header line and # comments allowed).
  t        seconds since the start (decimal, to the microsecond), never decreasing
  permits  default 1
  op       check (default) | peek | acquire | try:SECONDS | set_rate:RATE | release
           (a negative try:SECONDS waits for nothing, as Guava's tryAcquire)
Each event gets one JSON line per limiter, flushed at once:
  {\"t\":0.2,\"key\":\"a\",\"permits\":1,\"op\":\"check\",\"allowed\":true,\"limit\":5,\"remaining\":4,
   \"reset_after\":0.8,\"retry_after\":null,\"wait\":0.0}
or {\"t\":...,\"error\":\"...\"} for an event the limiter cannot take; the run goes on.

--adaptive CONTROLLER (DUR is a duration such as 50ms, F a number, N a whole number):
  aimd[:min=N,max=N,initial=N,backoff=F,timeout=DUR,window=DUR]
  vegas[:min=N,max=N,initial=N,smoothing=F,alpha=N,beta=N,probe=N,window=DUR]
  gradient2[:min=N,max=N,initial=N,smoothing=F,tolerance=F,long_window=N,headroom=N,
            window=DUR]
  envoy-gradient[:min=N,max=N,initial=N,pinned=N,percentile=F,buffer=F,requests=N,jitter=F,
                 interval=DUR,update=DUR]
  percentile[:target=DUR|multiple=F,p=F,window=DUR,min_samples=N,min=N,max=N,initial=N]
  (aimd, gradient2, envoy-gradient and percentile also take backoff=F, gradient2
   short_window=N; percentile without a target holds twice the lowest
   window latency it has seen)
  fixed:limit=N
  none
window=DUR on aimd, vegas and gradient2 feeds them one sample per window (the average
latency, the largest in-flight, the worst outcome: Netflix's WindowedLimit), not every one.
The proxy's `adaptive:` route setting reads the same specs.
A discrete-event simulation, seeded and deterministic: each arrival is one request, admitted
while fewer than the limit are in flight and rejected otherwise (no queue); the server answers
in FIFO order; a client gives up after --client-timeout, but the server still does the work,
and the limit gets the sample (a timeout) when it answers. One JSON line per simulated second:
  {\"t\":1,\"limit\":20,\"in_flight\":14,\"p50_ms\":21.7,\"p99_ms\":96.2,\"goodput\":493,
   \"rejected\":0,\"timed_out\":0,\"arrivals\":493}
  t          the second's end (seconds since the start)
  limit      the limit then (null for none); in_flight: admitted and not yet answered, then
  p50_ms     (and p99_ms) latency of the requests answered in the second (null if none)
  goodput    answered while the client still waited; rejected: turned away by the limit;
  timed_out  clients that gave up; arrivals: requests that arrived";

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
