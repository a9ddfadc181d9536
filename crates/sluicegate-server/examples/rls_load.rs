//! A gRPC load generator for `ShouldRateLimit`, run as its own process: `--concurrency` calls in
//! flight over `--connections` HTTP/2 connections for `--duration` seconds (after a warm-up),
//! each call naming one key drawn uniformly from `--keys` values. Prints one line:
//! `decisions_per_sec=.. p50_us=.. p99_us=.. calls=.. ok=.. over_limit=.. errors=.. answered=..`
//! (`answered` also counts the warm-up's calls, for CPU time per call measured from outside).
//!
//! `cargo run --release -p sluicegate-server --example rls_load -- --target http://127.0.0.1:8081 --keys 100000`

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

/// Load for a rate limit service.
#[derive(Debug, Parser)]
struct Args {
    /// The service's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    target: String,
    /// The request's domain.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor entry's key.
    #[arg(long, default_value = "key")]
    key: String,
    /// How many distinct values the entry takes (`k0`, `k1`, ...); 1 is one hot key.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    connections: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before measuring (not recorded).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Worker threads of the generator's runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// What one task saw while measuring.
struct Tally {
    latency_ns: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    errors: u64,
    answered: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        let channel = Endpoint::from_shared(args.target.clone())?
            .connect()
            .await
            .with_context(|| format!("cannot connect to {}", args.target))?;
        channels.push(channel);
    }
    // Built once so the generator spends its time calling, not formatting.
    let requests: std::sync::Arc<Vec<RateLimitRequest>> = std::sync::Arc::new(
        (0..args.keys)
            .map(|i| request_for(&args.domain, &args.key, &format!("k{i}")))
            .collect(),
    );
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.duration);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..args.concurrency {
        let channel = channels[task % channels.len()].clone();
        let requests = std::sync::Arc::clone(&requests);
        tasks.spawn(call_until(
            channel,
            requests,
            task as u64,
            measure_from,
            end,
        ));
    }
    let mut total = Tally {
        latency_ns: new_histogram()?,
        ok: 0,
        over_limit: 0,
        errors: 0,
        answered: 0,
    };
    while let Some(tally) = tasks.join_next().await {
        let tally = tally.context("load task panicked")??;
        total.latency_ns.add(&tally.latency_ns)?;
        total.ok += tally.ok;
        total.over_limit += tally.over_limit;
        total.errors += tally.errors;
        total.answered += tally.answered;
    }
    let calls = total.latency_ns.len();
    let us = |q: f64| total.latency_ns.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "decisions_per_sec={:.0} p50_us={:.1} p99_us={:.1} calls={calls} ok={} over_limit={} errors={} answered={}",
        (total.ok + total.over_limit) as f64 / args.duration,
        us(0.50),
        us(0.99),
        total.ok,
        total.over_limit,
        total.errors,
        total.answered,
    );
    Ok(())
}

/// One in-flight slot: calls back to back, recording the calls that start after the warm-up.
async fn call_until(
    channel: Channel,
    requests: std::sync::Arc<Vec<RateLimitRequest>>,
    seed: u64,
    measure_from: Instant,
    end: Instant,
) -> anyhow::Result<Tally> {
    let mut client = RateLimitServiceClient::new(channel);
    let mut tally = Tally {
        latency_ns: new_histogram()?,
        ok: 0,
        over_limit: 0,
        errors: 0,
        answered: 0,
    };
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    loop {
        let sent = Instant::now();
        if sent >= end {
            return Ok(tally);
        }
        let request = requests[pick(&mut state, requests.len())].clone();
        let answer = client.should_rate_limit(request).await;
        let took = sent.elapsed();
        if answer.is_ok() {
            tally.answered += 1;
        }
        if sent < measure_from {
            continue;
        }
        match answer {
            Ok(response) if response.get_ref().overall_code == Code::OverLimit as i32 => {
                tally.over_limit += 1;
            }
            Ok(_) => tally.ok += 1,
            Err(_) => {
                tally.errors += 1;
                continue;
            }
        }
        tally
            .latency_ns
            .saturating_record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    // 1 ns to 60 s at three significant digits.
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

/// A uniform index below `len` (xorshift: the generator needs speed, not quality).
fn pick(state: &mut u64, len: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % len as u64) as usize
}

fn request_for(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}
