//! The limit holds: never more requests in flight than it allows, and the others get 503 with
//! `Retry-After` (gRPC calls `UNAVAILABLE`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sluicegate::adaptive::{AdaptiveLimiter, Aimd};
use sluicegate_http::adaptive::AdaptiveLimitLayer;
use tokio::sync::watch;

use crate::support::{client, get as fetch, serve, streaming};

/// AIMD pinned at `limit`: the limit cannot move, so what is tested is the layer.
fn fixed(limit: u32) -> Aimd {
    Aimd::builder()
        .min_limit(limit)
        .initial_limit(limit)
        .max_limit(limit)
        .build()
        .expect("aimd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_in_flight_than_the_limit_and_the_rest_get_503_with_retry_after() {
    let layer = AdaptiveLimitLayer::builder(AdaptiveLimiter::new(fixed(4)))
        .retry_after(Duration::from_millis(1500))
        .build();
    let running = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    // Handlers hold their place until the test opens the gate.
    let (open, gate) = watch::channel(false);
    let handler = {
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        move || {
            let (running, most, mut gate) = (Arc::clone(&running), Arc::clone(&most), gate.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                gate.wait_for(|open| *open).await.expect("gate");
                running.fetch_sub(1, Ordering::SeqCst);
                "done"
            }
        }
    };
    let app = Router::new().route("/", get(handler)).layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..20 {
        let (client, answers_tx) = (client.clone(), answers_tx.clone());
        tokio::spawn(async move {
            answers_tx
                .send(fetch(&client, address, "/").await)
                .expect("test listening");
        });
    }
    // With four held, the other sixteen are refused without waiting for them.
    for _ in 0..16 {
        let (status, headers, body) = answers.recv().await.expect("an answer");
        assert_eq!(status, 503);
        assert_eq!(headers["retry-after"], "2", "1.5 s rounded up");
        assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
        assert_eq!(
            body,
            "service overloaded: concurrency limit of 4 reached; retry in 2 s\n"
        );
    }
    let metrics = layer.metrics();
    assert_eq!(
        (
            metrics.limit,
            metrics.in_flight,
            metrics.queued,
            metrics.rejected
        ),
        (4, 4, 0, 16)
    );
    open.send(true).expect("open");
    for _ in 0..4 {
        let (status, _, body) = answers.recv().await.expect("an answer");
        assert_eq!((status, body.as_str()), (200, "done"));
    }
    assert_eq!(most.load(Ordering::SeqCst), 4, "never more than the limit");
    assert_eq!(layer.in_flight(), 0);
    assert_eq!(layer.rejected(), 16);
}

#[tokio::test]
async fn a_grpc_call_refused_gets_unavailable_with_the_delay_as_metadata() {
    let layer = AdaptiveLimitLayer::new(AdaptiveLimiter::new(fixed(1)));
    let (mut bodies, stream) = streaming();
    let app = Router::new().route("/", get(stream)).layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    let held = client
        .get(format!("http://{address}/"))
        .send()
        .await
        .expect("first");
    let _body = bodies.recv().await.expect("the first body");
    let refused = client
        .get(format!("http://{address}/"))
        .header("content-type", "application/grpc")
        .send()
        .await
        .expect("grpc call");
    assert_eq!(refused.status(), 200, "gRPC answers in its own status");
    let headers = refused.headers();
    assert_eq!(headers["grpc-status"], "14");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["grpc-retry-pushback-ms"], "1000");
    assert_eq!(
        headers["grpc-message"],
        "service overloaded: concurrency limit of 1 reached; retry in 1 s"
    );
    assert_eq!(headers["content-type"], "application/grpc");
    drop(held);
}

#[tokio::test]
async fn each_route_has_its_own_limit() {
    let slow = AdaptiveLimitLayer::new(AdaptiveLimiter::new(fixed(1)));
    let fast = AdaptiveLimitLayer::new(AdaptiveLimiter::new(fixed(1)));
    let (mut bodies, stream) = streaming();
    let app = Router::new()
        .route("/slow", get(stream).route_layer(slow.clone()))
        .route("/fast", get(|| async { "fast" }).route_layer(fast.clone()));
    let address = serve(app).await;
    let client = client();

    let held = client
        .get(format!("http://{address}/slow"))
        .send()
        .await
        .expect("slow");
    let body = bodies.recv().await.expect("the slow body");
    assert_eq!(fetch(&client, address, "/slow").await.0, 503);
    // The slow route's full limit does not touch the fast one.
    for _ in 0..3 {
        assert_eq!(fetch(&client, address, "/fast").await.0, 200);
    }
    assert_eq!((slow.rejected(), fast.rejected()), (1, 0));
    drop(body);
    assert_eq!(held.text().await.expect("slow body"), "");
    assert_eq!(slow.in_flight(), 0);
    // Its place is free again (the head is enough: the body stays open).
    let again = client
        .get(format!("http://{address}/slow"))
        .send()
        .await
        .expect("slow again");
    assert_eq!(again.status(), 200);
    drop(bodies.recv().await.expect("the second slow body"));
}
