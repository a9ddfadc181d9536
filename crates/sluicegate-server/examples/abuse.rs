//! Hostile and sustained load for `sluicegate serve`, run as its own process by
//! `scripts/abuse.sh` and `scripts/redis-outage.sh`. Over gRPC (tonic) or `POST /json`
//! (HTTP/1.1, reqwest). Each subcommand prints `key=value` lines:
//!
//! - `victim`: limits one key (a per-descriptor `limit` override of 1 per day on
//!   `api`/`user=abuse-victim`, the one way the example rules hold a key limited for longer than
//!   a spray takes), calling until OVER_LIMIT; with `--check`, one call reporting its code.
//!   `code=.. calls=.. reset_s=..`
//! - `spray`: `--count` calls, `--concurrency` in flight, each naming something new: a user
//!   on the `api` rule (`users`), a distinct `limit` override (`overrides`) or an unknown domain
//!   (`domains`). `calls=.. secs=.. per_sec=.. ok=.. over_limit=.. errors=..`
//! - `sustain`: `--clients` callers back to back for `--phases` × `--phase-secs`, users drawn
//!   from `--users`; one line per phase (a call counts in the phase it started in).
//!   `phase=.. answers=.. per_sec=.. ok=.. over_limit=.. errors=.. p99_ms=.. max_ms=..`
//! - `metrics`: the series in `/metrics` (lines that are not comments) and the sum of
//!   `sluicegate_backend_errors`. `series=.. backend_errors=..`
//!
//! `cargo run --release -p sluicegate-server --example abuse -- spray --transport grpc --kind users --count 1000000`

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use hdrhistogram::Histogram;
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

/// Hostile and sustained load for a rate limit service.
#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Worker threads of the generator's runtime.
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Limit one key, or (`--check`) report whether it still is.
    Victim(VictimArgs),
    /// Calls that each name something new.
    Spray(SprayArgs),
    /// Sustained load, reported per phase.
    Sustain(SustainArgs),
    /// Count the series in `/metrics`.
    Metrics(MetricsArgs),
}

/// Where the service listens.
#[derive(Debug, clap::Args)]
struct Target {
    /// The service's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    grpc: String,
    /// The service's HTTP address (for `/json` and `/metrics`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    http: String,
    /// How calls are made.
    #[arg(long, value_enum, default_value_t = Transport::Grpc)]
    transport: Transport,
    /// HTTP/2 connections gRPC calls are spread over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    connections: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// `ShouldRateLimit` over gRPC.
    Grpc,
    /// `POST /json` over HTTP/1.1.
    Json,
}

#[derive(Debug, clap::Args)]
struct VictimArgs {
    #[command(flatten)]
    target: Target,
    /// Only report the key's code, in one call.
    #[arg(long)]
    check: bool,
    /// The user the key names.
    #[arg(long, default_value = "abuse-victim")]
    user: String,
    /// Calls before giving up on limiting the key.
    #[arg(long, default_value_t = 10)]
    max_calls: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// A new user on the `api` rule (`user=user-N`).
    Users,
    /// A distinct per-descriptor `limit` override (N+1000 per hour).
    Overrides,
    /// An unknown domain (`unknown-N`).
    Domains,
}

#[derive(Debug, clap::Args)]
struct SprayArgs {
    #[command(flatten)]
    target: Target,
    /// What each call names anew.
    #[arg(long, value_enum)]
    kind: Kind,
    /// Calls.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Added to every N, so that sprays can name different things.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    concurrency: u64,
}

#[derive(Debug, clap::Args)]
struct SustainArgs {
    #[command(flatten)]
    target: Target,
    /// Callers, each calling back to back.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    clients: u64,
    /// Users the calls are spread over (`api`/`user=uN`, uniformly).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    users: u64,
    /// Phases reported apart.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    phases: u64,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    phase_secs: f64,
    /// Created when the load starts (phase 0 begins), for a script to time its actions by.
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct MetricsArgs {
    /// The service's HTTP address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    http: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Victim(args) => victim(args).await,
            Command::Spray(args) => spray(args).await,
            Command::Sustain(args) => sustain(args).await,
            Command::Metrics(args) => metrics(args).await,
        }
    })
}

/// How a call was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    OverLimit,
    /// A gRPC error, an HTTP status other than 200 and 429, or no answer.
    Error,
}

/// Counts of answers by code.
#[derive(Debug, Default, Clone, Copy)]
struct Codes {
    ok: u64,
    over_limit: u64,
    errors: u64,
}

impl Codes {
    fn add(&mut self, answer: Answer) {
        match answer {
            Answer::Ok => self.ok += 1,
            Answer::OverLimit => self.over_limit += 1,
            Answer::Error => self.errors += 1,
        }
    }

    fn merge(&mut self, other: Codes) {
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.errors += other.errors;
    }

    fn total(&self) -> u64 {
        self.ok + self.over_limit + self.errors
    }
}

/// Makes calls over one transport; cheap to clone (shares connections).
#[derive(Clone)]
enum Caller {
    Grpc(RateLimitServiceClient<Channel>),
    Json {
        client: reqwest::Client,
        url: Arc<str>,
    },
}

impl Caller {
    async fn call(&mut self, request: RateLimitRequest) -> Answer {
        match self {
            Caller::Grpc(client) => match client.should_rate_limit(request).await {
                Ok(response) => match Code::try_from(response.get_ref().overall_code) {
                    Ok(Code::Ok) => Answer::Ok,
                    Ok(Code::OverLimit) => Answer::OverLimit,
                    _ => Answer::Error,
                },
                Err(_) => Answer::Error,
            },
            Caller::Json { client, url } => {
                let sent = client
                    .post(&**url)
                    .header("content-type", "application/json")
                    .body(json_body(&request))
                    .send()
                    .await;
                let Ok(response) = sent else {
                    return Answer::Error;
                };
                let status = response.status().as_u16();
                // Read to the end so that the connection is reused.
                if response.bytes().await.is_err() {
                    return Answer::Error;
                }
                match status {
                    200 => Answer::Ok,
                    429 => Answer::OverLimit,
                    _ => Answer::Error,
                }
            }
        }
    }
}

/// One caller per connection (gRPC) or one pooled HTTP/1.1 client (`/json`).
async fn callers(target: &Target) -> anyhow::Result<Vec<Caller>> {
    match target.transport {
        Transport::Grpc => {
            let mut callers = Vec::new();
            for _ in 0..target.connections {
                let channel = Endpoint::from_shared(target.grpc.clone())?
                    .connect()
                    .await
                    .with_context(|| format!("cannot connect to {}", target.grpc))?;
                callers.push(Caller::Grpc(RateLimitServiceClient::new(channel)));
            }
            Ok(callers)
        }
        Transport::Json => {
            let client = reqwest::Client::builder()
                .http1_only()
                .timeout(Duration::from_secs(10))
                .build()?;
            let url: Arc<str> = format!("{}/json", target.http.trim_end_matches('/')).into();
            Ok(vec![Caller::Json { client, url }])
        }
    }
}

/// The JSON form of `request`, as `POST /json` takes it.
fn json_body(request: &RateLimitRequest) -> String {
    let descriptors: Vec<serde_json::Value> = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let entries: Vec<serde_json::Value> = descriptor
                .entries
                .iter()
                .map(|e| json!({"key": e.key, "value": e.value}))
                .collect();
            match &descriptor.limit {
                None => json!({"entries": entries}),
                Some(limit) => {
                    let unit = RateLimitUnit::try_from(limit.unit)
                        .map_or("UNKNOWN", |unit| unit.as_str_name());
                    json!({
                        "entries": entries,
                        "limit": {"requestsPerUnit": limit.requests_per_unit, "unit": unit},
                    })
                }
            }
        })
        .collect();
    json!({"domain": request.domain, "descriptors": descriptors}).to_string()
}

fn request_for(
    domain: &str,
    key: &str,
    value: &str,
    limit: Option<RateLimitOverride>,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            }],
            limit,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

fn code_name(answer: Answer) -> &'static str {
    match answer {
        Answer::Ok => "OK",
        Answer::OverLimit => "OVER_LIMIT",
        Answer::Error => "ERROR",
    }
}

async fn victim(args: VictimArgs) -> anyhow::Result<()> {
    let request = request_for(
        "api",
        "user",
        &args.user,
        Some(RateLimitOverride {
            requests_per_unit: 1,
            unit: RateLimitUnit::Day as i32,
        }),
    );
    let max_calls = if args.check { 1 } else { args.max_calls };
    let mut caller = callers(&args.target)
        .await?
        .into_iter()
        .next()
        .context("no caller")?;
    for calls in 1..=max_calls {
        let answer = caller.call(request.clone()).await;
        if answer == Answer::OverLimit || args.check {
            println!(
                "code={} calls={calls} reset_s={}",
                code_name(answer),
                seconds_to_utc_midnight()
            );
            return Ok(());
        }
    }
    bail!("{} was not limited after {max_calls} calls", args.user)
}

/// Seconds until the day's fixed window (aligned to the Unix epoch) ends.
fn seconds_to_utc_midnight() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    86_400 - now % 86_400
}

/// The request the `n`-th call of a spray makes.
fn spray_request(kind: Kind, n: u64) -> anyhow::Result<RateLimitRequest> {
    Ok(match kind {
        Kind::Users => request_for("api", "user", &format!("user-{n}"), None),
        Kind::Overrides => request_for(
            "api",
            "user",
            "override-spray",
            Some(RateLimitOverride {
                requests_per_unit: u32::try_from(1000 + n).context("override beyond u32")?,
                unit: RateLimitUnit::Hour as i32,
            }),
        ),
        Kind::Domains => request_for(&format!("unknown-{n}"), "user", "x", None),
    })
}

async fn spray(args: SprayArgs) -> anyhow::Result<()> {
    let callers = callers(&args.target).await?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..args.concurrency {
        let mut caller = callers[task as usize % callers.len()].clone();
        let next = Arc::clone(&next);
        let (kind, count, offset) = (args.kind, args.count, args.offset);
        tasks.spawn(async move {
            let mut codes = Codes::default();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return anyhow::Ok(codes);
                }
                codes.add(caller.call(spray_request(kind, offset + n)?).await);
            }
        });
    }
    let mut total = Codes::default();
    while let Some(codes) = tasks.join_next().await {
        total.merge(codes.context("spray task panicked")??);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "calls={} secs={secs:.1} per_sec={:.0} ok={} over_limit={} errors={}",
        total.total(),
        total.total() as f64 / secs,
        total.ok,
        total.over_limit,
        total.errors,
    );
    Ok(())
}

/// What one caller saw in one phase.
struct PhaseTally {
    codes: Codes,
    latency_ns: Histogram<u64>,
}

async fn sustain(args: SustainArgs) -> anyhow::Result<()> {
    let callers = callers(&args.target).await?;
    let requests: Arc<Vec<RateLimitRequest>> = Arc::new(
        (0..args.users)
            .map(|u| request_for("api", "user", &format!("u{u}"), None))
            .collect(),
    );
    let phase = Duration::from_secs_f64(args.phase_secs);
    let phases = args.phases;
    let started = Instant::now();
    if let Some(path) = &args.ready_file {
        std::fs::write(path, "started\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let end = started + phase * u32::try_from(phases)?;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..args.clients {
        let mut caller = callers[client as usize % callers.len()].clone();
        let requests = Arc::clone(&requests);
        tasks.spawn(async move {
            let mut tallies = Vec::new();
            for _ in 0..phases {
                tallies.push(PhaseTally {
                    codes: Codes::default(),
                    latency_ns: new_histogram()?,
                });
            }
            let mut state = (client + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    return anyhow::Ok(tallies);
                }
                let index = (sent - started).as_nanos() / phase.as_nanos().max(1);
                let index = usize::try_from(index)?.min(tallies.len() - 1);
                let answer = caller
                    .call(requests[pick(&mut state, requests.len())].clone())
                    .await;
                let took = u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
                tallies[index].codes.add(answer);
                tallies[index].latency_ns.saturating_record(took);
            }
        });
    }
    let mut total = Vec::new();
    for _ in 0..phases {
        total.push(PhaseTally {
            codes: Codes::default(),
            latency_ns: new_histogram()?,
        });
    }
    while let Some(tallies) = tasks.join_next().await {
        for (sum, tally) in total
            .iter_mut()
            .zip(tallies.context("load task panicked")??)
        {
            sum.codes.merge(tally.codes);
            sum.latency_ns.add(&tally.latency_ns)?;
        }
    }
    for (index, tally) in total.iter().enumerate() {
        let ms = |ns: u64| ns as f64 / 1e6;
        println!(
            "phase={index} answers={} per_sec={:.0} ok={} over_limit={} errors={} p99_ms={:.2} max_ms={:.2}",
            tally.codes.total(),
            tally.codes.total() as f64 / args.phase_secs,
            tally.codes.ok,
            tally.codes.over_limit,
            tally.codes.errors,
            ms(tally.latency_ns.value_at_quantile(0.99)),
            ms(tally.latency_ns.max()),
        );
    }
    Ok(())
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    // 1 µs to 60 s at three significant digits.
    Ok(Histogram::new_with_bounds(1_000, 60_000_000_000, 3)?)
}

/// A uniform index below `len` (xorshift: the generator needs speed, not quality).
fn pick(state: &mut u64, len: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % len as u64) as usize
}

async fn metrics(args: MetricsArgs) -> anyhow::Result<()> {
    let url = format!("{}/metrics", args.http.trim_end_matches('/'));
    let text = reqwest::get(&url)
        .await
        .with_context(|| format!("cannot get {url}"))?
        .error_for_status()?
        .text()
        .await?;
    let series = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .count();
    let backend_errors: f64 = text
        .lines()
        .filter(|line| line.starts_with("sluicegate_backend_errors"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!("series={series} backend_errors={backend_errors:.0}");
    Ok(())
}
