//! `leaky-queue` shaping (nginx `limit_req` with `burst`, `delay=`, `nodelay`), on tokio's
//! paused clock: a request is held for exactly its wait, then passed; and a store that
//! answers later.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Empty;
use sluicegate::state_machine::Op;
use sluicegate::store::{Held, MemoryStore, Now, Request as StoreRequest, Store, StoreDecision};
use sluicegate::{AnyAlgorithm, CheckError, KeyedLimiter, ManualClock};
use sluicegate_http::rate_limit::key::Global;
use sluicegate_http::rate_limit::{LimitInfo, RateLimitBody, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

type Answer = Response<RateLimitBody<Empty<Bytes>>>;

/// An inner service counting its calls.
fn counting() -> (
    Arc<AtomicUsize>,
    impl Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let service = tower::service_fn(move |_request: Request<()>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Empty::new())) }
    });
    (calls, service)
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

async fn start<S>(service: &mut S) -> S::Future
where
    S: Service<Request<()>, Response = Answer, Error = Infallible>,
{
    service.ready().await.expect("ready").call(Request::new(()))
}

fn status(answer: Poll<Result<Answer, Infallible>>) -> Option<u16> {
    match answer {
        Poll::Ready(Ok(response)) => Some(response.status().as_u16()),
        Poll::Pending => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_shaped_request_is_held_for_its_wait_then_passed() {
    let (calls, inner) = counting();
    let layer = RateLimitLayer::builder(Global)
        .clock(ManualClock::new(0))
        .limit("leaky-queue:rate=10/s,burst=2")
        .build()
        .expect("layer");
    let mut service = layer.layer(inner);

    let mut first = Box::pin(start(&mut service).await);
    assert_eq!(
        status(poll_once(&mut first)),
        Some(200),
        "the first passes at once"
    );
    let mut second = Box::pin(start(&mut service).await);
    let mut third = Box::pin(start(&mut service).await);
    let mut fourth = Box::pin(start(&mut service).await);
    assert_eq!(
        status(poll_once(&mut fourth)),
        Some(429),
        "beyond the burst"
    );
    assert_eq!(status(poll_once(&mut second)), None);
    assert_eq!(status(poll_once(&mut third)), None);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "held requests have not reached the service"
    );

    tokio::time::advance(Duration::from_millis(99)).await;
    assert_eq!(status(poll_once(&mut second)), None);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        status(poll_once(&mut second)),
        Some(200),
        "held exactly 100 ms"
    );
    assert_eq!(status(poll_once(&mut third)), None);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(status(poll_once(&mut third)), Some(200), "held 200 ms");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(layer.stats().delayed, 2);
}

#[tokio::test(start_paused = true)]
async fn delay_passes_the_first_excess_at_once_and_nodelay_all_of_the_burst() {
    for (spec, expected) in [
        (
            "leaky-queue:rate=10/s,burst=3,delay=1",
            [Some(200), Some(200), None, None, Some(429)],
        ),
        (
            "leaky-queue:rate=10/s,burst=3,nodelay",
            [Some(200), Some(200), Some(200), Some(200), Some(429)],
        ),
    ] {
        let (_, inner) = counting();
        let layer = RateLimitLayer::builder(Global)
            .clock(ManualClock::new(0))
            .limit(spec)
            .build()
            .expect("layer");
        let mut service = layer.layer(inner);
        let mut seen = Vec::new();
        for _ in 0..5 {
            let mut answer = Box::pin(start(&mut service).await);
            seen.push(status(poll_once(&mut answer)));
        }
        assert_eq!(seen, expected, "{spec}");
    }
}

#[tokio::test(start_paused = true)]
async fn dry_run_does_not_shape() {
    let (calls, inner) = counting();
    let layer = RateLimitLayer::builder(Global)
        .clock(ManualClock::new(0))
        .limit("leaky-queue:rate=10/s,burst=1")
        .dry_run(true)
        .build()
        .expect("layer");
    let mut service = layer.layer(inner);
    for _ in 0..4 {
        let mut answer = Box::pin(start(&mut service).await);
        assert_eq!(status(poll_once(&mut answer)), Some(200));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(layer.stats().dry_run_denied, 2);
}

/// A store of the test's own that answers only when the test lets it: the layer's path for
/// remote stores. It decides in the core's memory store once let through.
struct Gated {
    memory: MemoryStore<AnyAlgorithm, ManualClock>,
    gate: Arc<tokio::sync::Semaphore>,
}

type GatedLimit = Arc<KeyedLimiter<String, AnyAlgorithm, ManualClock>>;

impl Store<String> for Gated {
    type Limit = GatedLimit;
    type Error = CheckError;

    fn capacity(&self, limit: &GatedLimit) -> u64 {
        Store::<String>::capacity(&self.memory, limit)
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [StoreRequest<'a, GatedLimit, String>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, CheckError> {
        let _pass = self.gate.acquire().await;
        self.memory.decide(requests, op, now).await
    }

    async fn release<'a>(
        &'a self,
        requests: &'a [StoreRequest<'a, GatedLimit, String>],
        held: &'a [Held],
    ) -> Result<(), CheckError> {
        self.memory.release(requests, held).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_later() {
    let (calls, inner) = counting();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let algorithm: AnyAlgorithm = "leaky-queue:rate=10/s,burst=1".parse().expect("spec");
    let info = LimitInfo::of("slow", &algorithm);
    let limiter = KeyedLimiter::with_clock(algorithm, ManualClock::new(0));
    let store = Gated {
        memory: MemoryStore::new(),
        gate: Arc::clone(&gate),
    };
    let layer = RateLimitLayer::builder(Global)
        .build_with_store(Arc::new(store), [(info, Arc::new(limiter))])
        .expect("layer");
    let mut service = layer.layer(inner);
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(Box::pin(start(&mut service).await));
    }
    for answer in &mut answers {
        assert_eq!(
            status(poll_once(answer)),
            None,
            "the store has not answered"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    gate.add_permits(3);
    tokio::task::yield_now().await;
    let seen: Vec<_> = answers.iter_mut().map(|a| status(poll_once(a))).collect();
    assert_eq!(seen, [Some(200), None, Some(429)], "the second is shaped");
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(status(poll_once(&mut answers[1])), Some(200));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
