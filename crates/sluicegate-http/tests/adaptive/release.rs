//! The permit is held until the response body ends, then reports its latency as `ok`; a client
//! that goes away mid-body gives it back as `dropped`.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use sluicegate::ManualClock;
use sluicegate::adaptive::{AdaptiveLimiter, Outcome, Sample};
use sluicegate_http::adaptive::AdaptiveLimitLayer;

use crate::support::{Recorder, client, get as fetch, serve, streaming};

#[tokio::test]
async fn the_permit_is_held_until_the_body_ends_and_dropped_when_the_client_goes_away() {
    let clock = ManualClock::new(1_000);
    let recorder = Recorder::new(1);
    let layer =
        AdaptiveLimitLayer::new(AdaptiveLimiter::with_clock(recorder.clone(), clock.clone()));
    let (mut bodies, stream) = streaming();
    let app = Router::new()
        .route("/stream", get(stream))
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    // The head has come, the body is open: the permit is held.
    let mut first = client
        .get(format!("http://{address}/stream"))
        .send()
        .await
        .expect("first");
    assert_eq!(first.status(), 200);
    let body = bodies.recv().await.expect("the first body");
    clock.advance(Duration::from_millis(30));
    assert_eq!(fetch(&client, address, "/").await.0, 503);
    body.send(Bytes::from_static(b"part")).await.expect("send");
    assert_eq!(
        first.chunk().await.expect("chunk").as_deref(),
        Some(&b"part"[..])
    );
    assert_eq!(
        fetch(&client, address, "/").await.0,
        503,
        "held while data flows"
    );
    assert_eq!(layer.in_flight(), 1);

    // The end: released, with the latency from the grant to the end, before the client sees
    // the end.
    clock.advance(Duration::from_millis(20));
    drop(body);
    assert_eq!(first.chunk().await.expect("end"), None);
    assert_eq!(
        recorder.samples(),
        [Sample::ok(1_000, 50_000, 1)],
        "one sample, 30 + 20 ms, one in flight"
    );
    assert_eq!(layer.in_flight(), 0);
    assert_eq!(fetch(&client, address, "/").await.0, 200);
    assert_eq!(recorder.outcomes(), [Outcome::Ok, Outcome::Ok]);

    // A client that goes away mid-body: the server drops the body and the permit with it.
    let second = client
        .get(format!("http://{address}/stream"))
        .send()
        .await
        .expect("second");
    let body = bodies.recv().await.expect("the second body");
    assert_eq!(fetch(&client, address, "/").await.0, 503);
    drop(second);
    // Sends fail once the server has dropped the body (the permit went just before it).
    let mut sends = 0;
    while body.send(Bytes::from_static(b"more")).await.is_ok() {
        sends += 1;
        assert!(sends < 10_000, "the server never dropped the body");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Ok, Outcome::Ok, Outcome::Dropped],
        "abandoned: dropped"
    );
    assert_eq!(layer.in_flight(), 0);
    assert_eq!(fetch(&client, address, "/").await.0, 200);
}

#[tokio::test]
async fn an_answer_without_a_body_completes_with_its_head() {
    let recorder = Recorder::new(1);
    let layer = AdaptiveLimitLayer::new(AdaptiveLimiter::with_clock(
        recorder.clone(),
        ManualClock::new(0),
    ));
    let app = Router::new()
        .route("/", get(|| async { "a body HEAD does not send" }))
        .route("/empty", get(|| async { http::StatusCode::NO_CONTENT }))
        .layer(layer.clone());
    let address = serve(app).await;
    let client = client();
    for _ in 0..2 {
        let head = client
            .head(format!("http://{address}/"))
            .send()
            .await
            .expect("head");
        assert_eq!(head.status(), 200);
        let empty = client
            .get(format!("http://{address}/empty"))
            .send()
            .await
            .expect("empty");
        assert_eq!(empty.status(), 204);
    }
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Ok; 4],
        "none counted as abandoned"
    );
    assert_eq!(layer.in_flight(), 0);
}
