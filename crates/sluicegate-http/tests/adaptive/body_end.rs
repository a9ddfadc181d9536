//! When a response body ends, through both limiting layers and the body type they share
//! (`sluicegate_http::permit_body`): at its `None` or at a last frame after which it says it has
//! ended, on an error, or when it is dropped before either. The rate limit layer gives its
//! concurrency permit back in every case; the adaptive layer records its sample (`ok`) at the
//! end only, and counts an error or an early drop as `dropped`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use sluicegate::ManualClock;
use sluicegate::adaptive::{AdaptiveLimiter, Outcome};
use sluicegate_http::adaptive::{AdaptiveLimit, AdaptiveLimitLayer};
use sluicegate_http::rate_limit::key::Global;
use sluicegate_http::rate_limit::{MemoryBackend, RateLimit, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use crate::support::Recorder;

/// A response body that answers its frames in order, then its end. It says it has ended
/// (`is_end_stream`) once its frames are out only if `says_end`.
struct Scripted {
    frames: VecDeque<Result<Frame<Bytes>, &'static str>>,
    says_end: bool,
}

impl Scripted {
    /// `a`, `b`, then the end, which it does not announce.
    fn two_chunks() -> Scripted {
        Scripted {
            frames: VecDeque::from([Ok(chunk("a")), Ok(chunk("b"))]),
            says_end: false,
        }
    }

    /// `a`, `b`, saying with `b` that it is the last (as a `Full` body does).
    fn two_chunks_announced() -> Scripted {
        Scripted {
            says_end: true,
            ..Scripted::two_chunks()
        }
    }

    /// `a`, then an error.
    fn broken() -> Scripted {
        Scripted {
            frames: VecDeque::from([Ok(chunk("a")), Err("broken")]),
            says_end: false,
        }
    }
}

fn chunk(text: &'static str) -> Frame<Bytes> {
    Frame::data(Bytes::from_static(text.as_bytes()))
}

impl Body for Scripted {
    type Data = Bytes;
    type Error = &'static str;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
        Poll::Ready(self.get_mut().frames.pop_front())
    }

    fn is_end_stream(&self) -> bool {
        self.says_end && self.frames.is_empty()
    }
}

/// An inner service answering every call with a body from `script`.
#[derive(Clone)]
struct Answering(fn() -> Scripted);

impl Service<Request<()>> for Answering {
    type Response = Response<Scripted>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Scripted>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> Self::Future {
        ready(Ok(Response::new((self.0)())))
    }
}

type RateLimited = RateLimit<Answering, Global, MemoryBackend<(), ManualClock>>;

/// The rate limit layer with one `concurrency:limit=1` for every request, over `script`.
fn rate_limited(script: fn() -> Scripted) -> RateLimited {
    RateLimitLayer::builder(Global)
        .clock(ManualClock::new(0))
        .limit("concurrency:limit=1")
        .build()
        .expect("layer")
        .layer(Answering(script))
}

/// The adaptive layer (a limit of 1) over `script`, its controller recording each sample.
fn adaptive(script: fn() -> Scripted) -> (AdaptiveLimit<Answering>, AdaptiveLimitLayer, Recorder) {
    let recorder = Recorder::new(1);
    let layer = AdaptiveLimitLayer::new(AdaptiveLimiter::with_clock(
        recorder.clone(),
        ManualClock::new(0),
    ));
    (layer.layer(Answering(script)), layer, recorder)
}

/// `service` called once, when ready.
async fn call<S, B>(service: &mut S) -> Response<B>
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    let Ok(ready) = service.ready().await;
    let Ok(response) = ready.call(Request::new(())).await;
    response
}

/// The next thing `body` answers: a chunk's text, `error` or `end`.
async fn next<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> String {
    match body.frame().await {
        Some(Ok(frame)) => {
            let data = frame.into_data().expect("a data frame");
            String::from_utf8(data.to_vec()).expect("text")
        }
        Some(Err(_)) => "error".to_owned(),
        None => "end".to_owned(),
    }
}

/// Whether the rate limit layer's one permit is free: a request passes (and, its response
/// dropped at once, gives the permit back).
async fn permit_free(service: &mut RateLimited) -> bool {
    call(service).await.status() == 200
}

#[tokio::test]
async fn a_body_read_to_its_end_gives_the_permit_back_there_and_records_its_sample() {
    let mut limited = rate_limited(Scripted::two_chunks);
    let mut body = call(&mut limited).await.into_body();
    assert_eq!(
        (next(&mut body).await, next(&mut body).await),
        ("a".into(), "b".into())
    );
    assert!(
        !permit_free(&mut limited).await,
        "held until the end is seen"
    );
    assert_eq!(next(&mut body).await, "end");
    assert!(
        permit_free(&mut limited).await,
        "given back at the end, the body still alive"
    );

    let (mut service, layer, recorder) = adaptive(Scripted::two_chunks);
    let mut body = call(&mut service).await.into_body();
    assert_eq!(
        (next(&mut body).await, next(&mut body).await),
        ("a".into(), "b".into())
    );
    assert_eq!((layer.in_flight(), recorder.outcomes()), (1, vec![]));
    assert_eq!(next(&mut body).await, "end");
    assert_eq!(
        (layer.in_flight(), recorder.outcomes()),
        (0, vec![Outcome::Ok])
    );
}

#[tokio::test]
async fn a_body_that_says_it_has_ended_ends_with_its_last_frame() {
    let mut limited = rate_limited(Scripted::two_chunks_announced);
    let mut body = call(&mut limited).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    assert!(!permit_free(&mut limited).await, "held while data flows");
    assert_eq!(next(&mut body).await, "b");
    assert!(body.is_end_stream());
    assert!(
        permit_free(&mut limited).await,
        "given back with the last frame"
    );

    let (mut service, layer, recorder) = adaptive(Scripted::two_chunks_announced);
    let mut body = call(&mut service).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    assert_eq!(layer.in_flight(), 1);
    assert_eq!(next(&mut body).await, "b");
    // Servers poll such a body no further and drop it: the sample is recorded already.
    assert_eq!(
        (layer.in_flight(), recorder.outcomes()),
        (0, vec![Outcome::Ok])
    );
    drop(body);
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Ok],
        "its drop counts for nothing"
    );
}

#[tokio::test]
async fn a_body_that_fails_gives_the_permit_back_as_dropped() {
    let mut limited = rate_limited(Scripted::broken);
    let mut body = call(&mut limited).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    assert!(!permit_free(&mut limited).await, "held while data flows");
    assert_eq!(next(&mut body).await, "error");
    assert!(permit_free(&mut limited).await, "given back at the error");

    let (mut service, layer, recorder) = adaptive(Scripted::broken);
    let mut body = call(&mut service).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    assert_eq!(next(&mut body).await, "error");
    assert_eq!(
        (layer.in_flight(), recorder.outcomes()),
        (0, vec![Outcome::Dropped])
    );
}

#[tokio::test]
async fn a_body_dropped_before_its_end_gives_the_permit_back_as_dropped() {
    let mut limited = rate_limited(Scripted::two_chunks);
    let mut body = call(&mut limited).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    assert!(!permit_free(&mut limited).await, "held while data flows");
    drop(body);
    assert!(permit_free(&mut limited).await, "given back with the body");

    let (mut service, layer, recorder) = adaptive(Scripted::two_chunks);
    let mut body = call(&mut service).await.into_body();
    assert_eq!(next(&mut body).await, "a");
    drop(body);
    assert_eq!(
        (layer.in_flight(), recorder.outcomes()),
        (0, vec![Outcome::Dropped])
    );
}
