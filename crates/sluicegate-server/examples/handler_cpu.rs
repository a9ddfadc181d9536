//! CPU time of one `ShouldRateLimit` call in process, without the network and HTTP/2: decode
//! the request's protobuf, answer it, encode the answer's protobuf. `serve` runs
//! `sluicegate serve`'s gRPC handler in memory on the service benchmark's rules; `noop` runs
//! the benchmark ceiling's handler (answer OK, decide nothing). The difference is what deciding
//! adds to a call, measured far more steadily than through a loaded server.
//!
//! ```sh
//! cargo build --release -p sluicegate-server --example handler_cpu
//! target/release/examples/handler_cpu serve|noop [CALLS_PER_ROUND] [ROUNDS] [KEYS]
//! ```
//!
//! It prints the fastest round's nanoseconds per call (the least disturbed by other work on
//! the machine) and the median round's. On a busy machine, counting instructions is steadier
//! still (see `one_call`).

use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message as _;
use sluicegate_rules::{LoadOptions, RuleSet};
use sluicegate_server::serve::{Engine, EngineOptions, GrpcService, Metrics};
use tonic::Request;

/// The `sluicegate` binary's allocator, so that a call costs here what it costs in `serve`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "shared/always_ok.rs"]
mod always_ok;
use always_ok::AlwaysOk;

/// The service benchmark's rules (`scripts/bench-service.sh`).
const RULES: &str = "domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "serve".into());
    let calls: usize = args.next().unwrap_or_else(|| "200000".into()).parse()?;
    let rounds: usize = args.next().unwrap_or_else(|| "15".into()).parse()?;
    let keys: usize = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let service: Box<dyn RateLimitService> = match which.as_str() {
        "serve" => {
            let rules = RuleSet::from_sources(
                &[("bench.yaml".into(), RULES.to_owned())],
                &LoadOptions::default(),
            )?;
            let engine = Engine::new(rules, EngineOptions::default(), Arc::new(Metrics::new()))?;
            Box::new(GrpcService::new(Arc::new(engine)))
        }
        "noop" => Box::new(AlwaysOk),
        other => return Err(format!("unknown handler {other:?}: serve or noop").into()),
    };
    let bodies: Vec<Vec<u8>> = (0..keys.max(1))
        .map(|k| request_body(&format!("k{k}")))
        .collect();
    let mut out = Vec::with_capacity(256);
    let mut per_call = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        for i in 0..calls {
            one_call(service.as_ref(), &bodies[i % bodies.len()], &mut out)?;
        }
        per_call.push(started.elapsed().as_nanos() as f64 / calls as f64);
    }
    per_call.sort_by(f64::total_cmp);
    println!(
        "{which}: fastest round {:.0} ns/call, median round {:.0} ns/call ({rounds} rounds of {calls} calls, {keys} key(s))",
        per_call[0],
        per_call[per_call.len() / 2]
    );
    Ok(())
}

/// One call, from the request's bytes to the answer's. Never inlined, so that instructions
/// can be counted in it alone:
/// `valgrind --tool=callgrind --toggle-collect='*one_call*' handler_cpu serve 10000 1`.
#[inline(never)]
fn one_call(
    service: &dyn RateLimitService,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Box<dyn std::error::Error>> {
    let request = RateLimitRequest::decode(body)?;
    let response = answer(service, request)?;
    out.clear();
    response.encode(out)?;
    std::hint::black_box(out);
    Ok(())
}

/// Runs a handler that does not wait (in memory, nothing does) to its answer.
fn answer(
    service: &dyn RateLimitService,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, Box<dyn std::error::Error>> {
    let mut future = pin!(service.should_rate_limit(Request::new(request)));
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(answer) => Ok(answer?.into_inner()),
        Poll::Pending => Err("the handler waited: not an in-memory answer".into()),
    }
}

/// The benchmark's request for one key, as protobuf.
fn request_body(value: &str) -> Vec<u8> {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "key".into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        ..RateLimitRequest::default()
    }
    .encode_to_vec()
}
