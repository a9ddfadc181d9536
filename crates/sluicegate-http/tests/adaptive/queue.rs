//! The wait queue: a request waits for a place up to its timeout (on tokio's paused clock),
//! a full queue refuses at once, and a place freed goes to the request waiting longest.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use sluicegate::adaptive::{AdaptiveLimiter, Aimd};
use sluicegate_http::adaptive::{AdaptiveBody, AdaptiveLimitLayer};
use tower::{Layer, Service, ServiceExt};

use crate::support::{client, serve, streaming};

type Answer = Response<AdaptiveBody<Full<Bytes>>>;

fn one_place_one_waiter() -> AdaptiveLimiter<Aimd> {
    let fixed = Aimd::builder()
        .min_limit(1)
        .initial_limit(1)
        .max_limit(1)
        .build()
        .expect("aimd");
    AdaptiveLimiter::builder(fixed)
        .queue_capacity(1)
        .build()
        .expect("limiter")
}

/// The response future of a call to `service` once it is ready, boxed to be polled by hand.
async fn start<S>(service: &mut S) -> Pin<Box<S::Future>>
where
    S: Service<Request<()>, Response = Answer, Error = Infallible>,
{
    Box::pin(service.ready().await.expect("ready").call(Request::new(())))
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

async fn text(answer: Answer) -> (u16, String) {
    let status = answer.status().as_u16();
    let body = answer.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8(body.to_vec()).expect("utf-8"))
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_refused_when_its_timeout_runs_out_and_admitted_when_a_place_frees() {
    let layer = AdaptiveLimitLayer::builder(one_place_one_waiter())
        .queue_timeout(Duration::from_millis(100))
        .build();
    let inner = tower::service_fn(|_request: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"data"))))
    });
    let mut service = layer.layer(inner);

    // The first holds the place as long as its body is unread.
    let first = start(&mut service).await.await.expect("first");
    assert_eq!(first.status(), 200);
    let mut waiting = start(&mut service).await;
    assert!(poll_once(&mut waiting).is_pending(), "it waits");
    assert_eq!(layer.queued(), 1);
    // The queue holds one: the next is refused at once.
    let refused = start(&mut service).await.await.expect("third");
    assert_eq!(
        text(refused).await,
        (
            503,
            "service overloaded: concurrency limit of 1 reached and the wait queue is full \
             (1 waiting); retry in 1 s\n"
                .to_string()
        )
    );
    tokio::time::advance(Duration::from_millis(99)).await;
    assert!(poll_once(&mut waiting).is_pending(), "99 ms: still waiting");
    tokio::time::advance(Duration::from_millis(1)).await;
    let Poll::Ready(Ok(timed_out)) = poll_once(&mut waiting) else {
        panic!("answered at 100 ms");
    };
    assert_eq!(
        text(timed_out).await,
        (
            503,
            "service overloaded: no place freed within 100 ms (concurrency limit of 1); \
             retry in 1 s\n"
                .to_string()
        )
    );
    assert_eq!((layer.queued(), layer.rejected()), (0, 2));

    // Another waits; the first body is read to its end, and the place is handed over.
    let mut admitted = start(&mut service).await;
    assert!(poll_once(&mut admitted).is_pending());
    assert_eq!(text(first).await, (200, "data".to_string()));
    let Poll::Ready(Ok(admitted)) = poll_once(&mut admitted) else {
        panic!("admitted as the first ended");
    };
    assert_eq!(text(admitted).await, (200, "data".to_string()));
    assert_eq!(layer.in_flight(), 0);
}

#[tokio::test]
async fn over_loopback_a_queued_request_gets_the_place_the_first_frees() {
    let layer = AdaptiveLimitLayer::builder(one_place_one_waiter())
        // Far longer than the test: the outcome cannot hang on the machine's speed.
        .queue_timeout(Duration::from_secs(3600))
        .build();
    let (mut bodies, stream) = streaming();
    let app = Router::new()
        .route("/stream", get(stream))
        .route("/", get(|| async { "second" }))
        .layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    let first = client
        .get(format!("http://{address}/stream"))
        .send()
        .await
        .expect("first");
    let body = bodies.recv().await.expect("the first body");
    let second = tokio::spawn({
        let client = client.clone();
        async move {
            let answer = client
                .get(format!("http://{address}/"))
                .send()
                .await
                .expect("second");
            (answer.status().as_u16(), answer.text().await.expect("body"))
        }
    });
    while layer.queued() == 0 {
        tokio::task::yield_now().await;
    }
    body.send(Bytes::from_static(b"first")).await.expect("send");
    drop(body);
    assert_eq!(first.text().await.expect("first body"), "first");
    assert_eq!(second.await.expect("task"), (200, "second".to_string()));
    assert_eq!(
        (layer.in_flight(), layer.queued(), layer.rejected()),
        (0, 0, 0)
    );
}
