//! A gRPC load generator for `ShouldRateLimit`, run as its own process: `--concurrency` calls in
//! flight over `--connections` HTTP/2 connections for `--duration` seconds (after a warm-up),
//! each call naming one key drawn uniformly from `--keys` values. Prints one line:
//! `decisions_per_sec=.. p50_us=.. p99_us=.. calls=.. ok=.. over_limit=.. errors=.. answered=..`
//! (`answered` also counts the warm-up's calls, for CPU time per call measured from outside).
//!
//! It is a plain unary gRPC client over cleartext HTTP/2 (h2c with prior knowledge, `http://`
//! only), driven directly with the `h2` crate rather than through tonic's stack, so that the
//! generator costs far less CPU per call than the servers it measures: every request body (the
//! gRPC frame of a prost-encoded `RateLimitRequest`) is encoded once at start-up, each call
//! sends one of them as is, and of the answer it reads only the HTTP status, `grpc-status` and
//! the response's `overall_code`. Each `--threads` thread runs its own single-threaded runtime
//! with its share of the connections and of the calls, so no call crosses threads. A connection
//! that fails is not reopened: the call that saw it counts as an error and its slot stops.
//!
//! `cargo run --release -p sluicegate-server --example rls_load -- --target http://127.0.0.1:8081 --keys 100000`

use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use h2::RecvStream;
use h2::client::SendRequest;
use hdrhistogram::Histogram;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use prost::Message as _;

/// The gRPC method every call names.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Load for a rate limit service.
#[derive(Debug, Parser)]
struct Args {
    /// The service's gRPC address (`http://host:port`: cleartext HTTP/2).
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
    /// Threads of the generator, each driving its share of the connections (at most
    /// `--connections`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    threads: u64,
}

/// What the calls of one slot, one thread or the whole run saw while measuring.
struct Tally {
    latency_ns: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    errors: u64,
    answered: u64,
}

impl Tally {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            // 1 ns to 60 s at three significant digits.
            latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            ok: 0,
            over_limit: 0,
            errors: 0,
            answered: 0,
        })
    }

    fn add(&mut self, other: &Tally) -> anyhow::Result<()> {
        self.latency_ns.add(&other.latency_ns)?;
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.errors += other.errors;
        self.answered += other.answered;
        Ok(())
    }
}

/// What the run's threads share, all fixed before the first call.
struct Plan {
    /// The request's head, cloned for each call.
    head: Request<()>,
    /// Every key's request body, framed for gRPC.
    bodies: &'static [Bytes],
    connections: u64,
    concurrency: usize,
    threads: u64,
    warmup: Duration,
    duration: Duration,
    /// When the load starts, set by the first thread ready to call.
    start: OnceLock<Instant>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.threads > args.connections {
        bail!(
            "--threads ({}) must not exceed --connections ({}): each thread drives its own connections",
            args.threads,
            args.connections
        );
    }
    let warmup = seconds("--warmup", args.warmup)?;
    let duration = seconds("--duration", args.duration)?;
    if duration.is_zero() {
        bail!("--duration must be more than 0 seconds");
    }
    let target = target_uri(&args.target)?;
    let plan = Plan {
        head: request_head(&target)?,
        bodies: request_bodies(&args.domain, &args.key, args.keys)?,
        connections: args.connections,
        concurrency: args.concurrency,
        threads: args.threads,
        warmup,
        duration,
        start: OnceLock::new(),
    };
    let ready = Barrier::new(usize::try_from(args.threads)?);
    let mut total = Tally::new()?;
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let threads: Vec<_> = (0..args.threads)
            .map(|thread| {
                let (plan, ready, target) = (&plan, &ready, &target);
                scope.spawn(move || run_thread(plan, thread, target, ready))
            })
            .collect();
        for thread in threads {
            let tally = thread
                .join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
            total.add(&tally)?;
        }
        Ok(())
    })?;
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

fn seconds(flag: &str, value: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| anyhow::anyhow!("{flag} must be a finite number of seconds, not {value}"))
}

/// The target as a URI, refusing what this client cannot speak.
fn target_uri(target: &str) -> anyhow::Result<Uri> {
    let uri: Uri = target
        .parse()
        .with_context(|| format!("--target {target:?} is not a URI"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--target {target:?} must start with http:// (cleartext HTTP/2 only)");
    }
    if uri.host().is_none() {
        bail!("--target {target:?} names no host");
    }
    Ok(uri)
}

/// A `ShouldRateLimit` call's head: POST to the method's path, with gRPC's headers.
fn request_head(target: &Uri) -> anyhow::Result<Request<()>> {
    let authority = target.authority().context("--target names no host")?;
    let uri = Uri::builder()
        .scheme("http")
        .authority(authority.clone())
        .path_and_query(SHOULD_RATE_LIMIT)
        .build()?;
    Ok(Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(())?)
}

/// The framed request of each key value `k0`, `k1`, ...: encoded once here so that a call only
/// clones a handle. They live as long as the process, so every thread and slot reads the same
/// ones, and each handle is static: its clone touches no shared counter.
fn request_bodies(domain: &str, key: &str, keys: u64) -> anyhow::Result<&'static [Bytes]> {
    let mut all = BytesMut::new();
    let mut ends = Vec::with_capacity(usize::try_from(keys)?);
    for i in 0..keys {
        let request = RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.to_owned(),
                    value: format!("k{i}"),
                }],
                limit: None,
                hits_addend: None,
            }],
            hits_addend: 0,
        };
        all.put_u8(0); // not compressed
        all.put_u32(u32::try_from(request.encoded_len())?);
        request.encode(&mut all)?;
        ends.push(all.len());
    }
    let all: &'static [u8] = Vec::leak(all.to_vec());
    let mut start = 0;
    let bodies: Vec<Bytes> = ends
        .into_iter()
        .map(|end| {
            let body = Bytes::from_static(&all[start..end]);
            start = end;
            body
        })
        .collect();
    Ok(Vec::leak(bodies))
}

/// One thread: its connections (`c` with `c % threads == thread`) and the slots on them, on a
/// runtime of its own.
fn run_thread(plan: &Plan, thread: u64, target: &Uri, ready: &Barrier) -> anyhow::Result<Tally> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let connections: Vec<u64> = (0..plan.connections)
        .filter(|c| c % plan.threads == thread)
        .collect();
    let senders = runtime.block_on(async {
        let mut senders = Vec::new();
        for _ in &connections {
            senders.push(connect(target).await?);
        }
        anyhow::Ok(senders)
    });
    // Waited for even on failure, so that no other thread waits forever.
    ready.wait();
    let senders = senders?;
    let start = *plan.start.get_or_init(Instant::now);
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    runtime.block_on(async {
        let mut slots = tokio::task::JoinSet::new();
        for slot in 0..plan.concurrency {
            let connection = slot as u64 % plan.connections;
            let Some(index) = connections.iter().position(|&c| c == connection) else {
                continue;
            };
            slots.spawn(call_until(
                senders[index].clone(),
                plan.head.clone(),
                plan.bodies,
                slot as u64,
                measure_from,
                end,
            ));
        }
        drop(senders);
        let mut total = Tally::new()?;
        while let Some(tally) = slots.join_next().await {
            total.add(&tally.context("load task panicked")??)?;
        }
        Ok(total)
    })
}

/// Opens one HTTP/2 connection to `target` and drives it on the current runtime.
async fn connect(target: &Uri) -> anyhow::Result<SendRequest<Bytes>> {
    let host = target.host().context("--target names no host")?;
    // The brackets of an IPv6 literal are the URI's, not the address's.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = target.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .with_context(|| format!("cannot connect to {target}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = h2::client::handshake(stream)
        .await
        .with_context(|| format!("HTTP/2 handshake with {target} failed"))?;
    tokio::spawn(async move {
        // Its end (the load is over, or the peer went away) shows in the calls.
        let _ = connection.await;
    });
    Ok(sender)
}

/// How one call went.
enum Outcome {
    /// The service answered with this `overall_code`.
    Decided(i32),
    /// The call failed; the connection may still serve others.
    Failed,
    /// The connection is gone.
    ConnectionLost,
}

/// One in-flight slot: calls back to back, recording the calls that start after the warm-up.
async fn call_until(
    mut sender: SendRequest<Bytes>,
    head: Request<()>,
    bodies: &'static [Bytes],
    seed: u64,
    measure_from: Instant,
    end: Instant,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::new()?;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    loop {
        let sent = Instant::now();
        if sent >= end {
            return Ok(tally);
        }
        let body = bodies[pick(&mut state, bodies.len())].clone();
        let outcome = match std::future::poll_fn(|cx| sender.poll_ready(cx)).await {
            Ok(()) => call(&mut sender, head.clone(), body).await,
            Err(_) => Outcome::ConnectionLost,
        };
        let took = sent.elapsed();
        let measured = sent >= measure_from;
        match outcome {
            Outcome::Decided(code) => {
                tally.answered += 1;
                if !measured {
                    continue;
                }
                if code == Code::OverLimit as i32 {
                    tally.over_limit += 1;
                } else {
                    tally.ok += 1;
                }
                tally
                    .latency_ns
                    .saturating_record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
            }
            Outcome::Failed => tally.errors += u64::from(measured),
            Outcome::ConnectionLost => {
                tally.errors += u64::from(measured);
                return Ok(tally);
            }
        }
    }
}

/// One unary call: sends the head and the body, reads the answer's status, message and trailers.
async fn call(sender: &mut SendRequest<Bytes>, head: Request<()>, body: Bytes) -> Outcome {
    // A failure here that is the connection's shows in the next call's `ready`.
    let Ok((response, mut send)) = sender.send_request(head, false) else {
        return Outcome::Failed;
    };
    if send.send_data(body, true).is_err() {
        return Outcome::Failed;
    }
    let Ok(response) = response.await else {
        return Outcome::Failed;
    };
    if response.status() != StatusCode::OK {
        return Outcome::Failed;
    }
    let mut body = response.into_body();
    if body.is_end_stream() {
        // Trailers-only: an error (an OK carries a message), whatever grpc-status says.
        return Outcome::Failed;
    }
    let Some(message) = read_message(&mut body).await else {
        return Outcome::Failed;
    };
    match body.trailers().await {
        Ok(Some(trailers)) if grpc_ok(&trailers) => {}
        _ => return Outcome::Failed,
    }
    match RateLimitResponse::decode(message) {
        Ok(answer) => Outcome::Decided(answer.overall_code),
        Err(_) => Outcome::Failed,
    }
}

/// The one uncompressed message of a unary answer, without its frame; `None` if the body is
/// anything else. Gives the received bytes back to the connection's flow control as it reads.
async fn read_message(body: &mut RecvStream) -> Option<Bytes> {
    let mut first: Option<Bytes> = None;
    let mut more = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        body.flow_control().release_capacity(chunk.len()).ok()?;
        match &first {
            None => first = Some(chunk),
            Some(first) => {
                if more.is_empty() {
                    more.extend_from_slice(first);
                }
                more.extend_from_slice(&chunk);
            }
        }
    }
    // Usually the whole answer is one DATA frame, taken without a copy.
    let mut framed = if more.is_empty() {
        first?
    } else {
        more.freeze()
    };
    if framed.len() < 5 || framed[0] != 0 {
        return None;
    }
    framed.advance(1);
    let length = usize::try_from(framed.get_u32()).ok()?;
    (framed.len() == length).then_some(framed)
}

/// Whether the trailers say the call succeeded.
fn grpc_ok(trailers: &HeaderMap) -> bool {
    trailers.get("grpc-status") == Some(&HeaderValue::from_static("0"))
}

/// A uniform index below `len` (xorshift: the generator needs speed, not quality).
fn pick(state: &mut u64, len: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % len as u64) as usize
}
