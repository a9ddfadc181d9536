//! The layer's added cost per request, ours against tower_governor's, in the same run.
//!
//! Both wrap the same inner service (an empty 200 with axum's body type, ready at once) and key
//! requests by the peer address, which each request carries as axum's `ConnectInfo<SocketAddr>`
//! extension (the only place tower_governor's `PeerIpKeyExtractor` reads it). Every iteration builds the request, calls the service and polls
//! the response future once (both answer at once); `baseline` does the same without a layer,
//! so a layer's added cost is its time minus the baseline's.
//!
//! Cases: `allowed` (one key, a quota no request exhausts: 10^9/s, bursts of 10^9) and
//! `denied` (one key, one request an hour, spent before measuring). tower_governor is
//! configured as its docs show, with an error handler answering an empty 429 (its default
//! needs a body type built from its error).
//!
//! After criterion's groups, a paired loop (the cases interleaved, 31 rounds of about 20 ms
//! each) prints each layer's added cost and the ratio ours / tower_governor's: the median of
//! the rounds' ratios, each against its own round's baseline. With
//! `LAYER_COUNT=CASE:N` it only runs `N` requests of one case, for counting instructions under
//! callgrind (see `count_only`).

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use criterion::Criterion;
use http::{Request, Response, StatusCode};
use sluicegate::{Gcra, Rate};
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::PeerIp;
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::{GovernorError, GovernorLayer};

#[derive(Clone, Copy)]
struct Inner;

impl Service<Request<()>> for Inner {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> Self::Future {
        ready(Ok(Response::new(Body::empty())))
    }
}

const PEER: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7)),
    40_000,
);

fn request() -> Request<()> {
    let mut request = Request::new(());
    request.extensions_mut().insert(ConnectInfo(PEER));
    request
}

/// One request through `service`, its future polled once: the answer's status.
fn once<S, B>(service: &mut S) -> StatusCode
where
    S: Service<Request<()>, Response = Response<B>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(())) = service.poll_ready(&mut cx) else {
        panic!("not ready");
    };
    let future = pin!(service.call(black_box(request())));
    match future.poll(&mut cx) {
        Poll::Ready(Ok(response)) => black_box(response).status(),
        _ => panic!("not answered at once"),
    }
}

/// The services of one case.
struct Case {
    name: &'static str,
    run: Box<dyn FnMut() -> StatusCode>,
}

fn cases() -> Vec<Case> {
    let mut cases = vec![Case {
        name: "baseline",
        run: Box::new(|| once(&mut Inner)),
    }];
    for allowed in [true, false] {
        let gcra = if allowed {
            Gcra::new(
                Rate::per_second(1_000_000_000).expect("rate"),
                1_000_000_000,
            )
        } else {
            Gcra::new(Rate::per_hour(1).expect("rate"), 1)
        };
        let ours = RateLimitLayer::builder(PeerIp)
            .limit(gcra.expect("gcra"))
            .build()
            .expect("layer");
        let mut ours = ours.layer(Inner);

        let mut config = GovernorConfigBuilder::default();
        if allowed {
            config.per_nanosecond(1).burst_size(1_000_000_000);
        } else {
            config.per_second(3600).burst_size(1);
        }
        let config = config.finish().expect("governor config");
        let governor = GovernorLayer::new(config).error_handler(|error| {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = match error {
                GovernorError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            response
        });
        let mut governor = governor.layer(Inner);

        let expected = if allowed {
            StatusCode::OK
        } else {
            // Spend the one permit.
            assert_eq!(once(&mut ours), StatusCode::OK);
            assert_eq!(once(&mut governor), StatusCode::OK);
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(once(&mut ours), expected);
        assert_eq!(once(&mut governor), expected);
        let (ours_name, governor_name) = if allowed {
            ("sluicegate_allowed", "tower_governor_allowed")
        } else {
            ("sluicegate_denied", "tower_governor_denied")
        };
        cases.push(Case {
            name: ours_name,
            run: Box::new(move || once(&mut ours)),
        });
        cases.push(Case {
            name: governor_name,
            run: Box::new(move || once(&mut governor)),
        });
    }
    cases
}

fn criterion_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("layer");
    for mut case in cases() {
        group.bench_function(case.name, |b| b.iter(&mut case.run));
    }
    group.finish();
}

/// Interleaved timing of every case: per case, ns per request in each round, rounds in order.
/// Each sample lasts about 20 ms, whatever a request costs.
fn paired() -> Vec<(&'static str, Vec<f64>)> {
    let mut cases = cases();
    let iterations: Vec<u32> = cases
        .iter_mut()
        .map(|case| {
            let started = Instant::now();
            for _ in 0..1_000 {
                black_box((case.run)());
            }
            let per_request = started.elapsed().as_secs_f64() / 1_000.0;
            (SAMPLE.as_secs_f64() / per_request).clamp(100.0, 10_000_000.0) as u32
        })
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        for ((case, samples), &n) in cases.iter_mut().zip(&mut samples).zip(&iterations) {
            let started = Instant::now();
            for _ in 0..n {
                black_box((case.run)());
            }
            samples.push(started.elapsed().as_nanos() as f64 / f64::from(n));
        }
    }
    cases.iter().map(|case| case.name).zip(samples).collect()
}

/// Rounds of the paired loop, and how long each case runs in one.
const ROUNDS: usize = 31;
const SAMPLE: Duration = Duration::from_millis(20);

/// The median of `values` and the middle half's range.
fn median_and_middle(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.25), at(0.75))
}

/// One request of `case`. Never inlined, so that instructions can be counted in it alone.
#[inline(never)]
fn one_call(case: &mut Case) -> StatusCode {
    (case.run)()
}

/// `LAYER_COUNT=CASE:N`: runs `N` requests of the case named `CASE` and nothing else, for an
/// instruction count that does not depend on the machine's load:
/// `LAYER_COUNT=sluicegate_allowed:10000 valgrind --tool=callgrind --toggle-collect='*one_call*'
/// target/release/deps/layer-HASH` (`cargo bench --bench layer --no-run` names the binary).
fn count_only(spec: &str) {
    let (name, n) = spec.split_once(':').unwrap_or((spec, "10000"));
    let n: u32 = n.parse().expect("LAYER_COUNT=CASE:N, N a number");
    let mut cases = cases();
    let Some(case) = cases.iter_mut().find(|case| case.name == name) else {
        let names: Vec<_> = cases.iter().map(|case| case.name).collect();
        panic!("no case {name:?} in LAYER_COUNT; cases: {names:?}");
    };
    for _ in 0..n {
        black_box(one_call(case));
    }
}

fn main() {
    if let Ok(spec) = std::env::var("LAYER_COUNT") {
        count_only(&spec);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    criterion_groups(&mut criterion);
    criterion.final_summary();

    // Not when run as a test (`cargo test --benches`), listed, or profiled.
    if std::env::args().any(|a| ["--test", "--list", "--profile-time"].contains(&a.as_str())) {
        return;
    }
    let rounds = paired();
    let samples = |name: &str| {
        rounds
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, samples)| samples.clone())
            .unwrap_or_default()
    };
    let baseline = samples("baseline");
    let median = |name: &str| median_and_middle(samples(name)).0;
    println!(
        "\npaired loop, median ns per request ({ROUNDS} rounds of ~{} ms per case):",
        SAMPLE.as_millis()
    );
    for (name, _) in &rounds {
        let t = median(name);
        println!(
            "  {name:<24} {t:8.1} ns  (added {:6.1} ns)",
            t - median("baseline")
        );
    }
    for case in ["allowed", "denied"] {
        let ours = samples(&format!("sluicegate_{case}"));
        let theirs = samples(&format!("tower_governor_{case}"));
        // Each round's ratio, against that round's baseline: the cases of one round ran within
        // a tenth of a second of each other, so a slow spell of the machine cancels out.
        let ratios: Vec<f64> = (0..ROUNDS)
            .map(|r| (ours[r] - baseline[r]) / (theirs[r] - baseline[r]))
            .collect();
        let (ratio, low, high) = median_and_middle(ratios);
        let base = median("baseline");
        println!(
            "  {case}: added cost sluicegate {:.1} ns, tower_governor {:.1} ns; ratio per \
             round: median {ratio:.2}, middle half {low:.2}–{high:.2}",
            median(&format!("sluicegate_{case}")) - base,
            median(&format!("tower_governor_{case}")) - base,
        );
    }
}
