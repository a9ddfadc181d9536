//! The limit follows latency: requests over loopback whose service time the handler sets on
//! the limiter's manual clock, so the latencies the controller sees are exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sluicegate::ManualClock;
use sluicegate::adaptive::{AdaptiveLimiter, Percentile};
use sluicegate_http::adaptive::AdaptiveLimitLayer;

use crate::support::{client, get as fetch, serve};

#[tokio::test]
async fn the_limit_falls_when_latency_grows_past_the_target() {
    let clock = ManualClock::new(0);
    // p99 of each 100 ms window (at least 2 samples) held under 20 ms.
    let percentile = Percentile::builder(Duration::from_millis(20))
        .window(Duration::from_millis(100))
        .min_samples(2)
        .min_limit(1)
        .initial_limit(16)
        .max_limit(16)
        .build()
        .expect("percentile");
    let layer = AdaptiveLimitLayer::new(AdaptiveLimiter::with_clock(percentile, clock.clone()));
    let service_micros = Arc::new(AtomicU64::new(5_000));
    let handler = {
        let (clock, service_micros) = (clock.clone(), Arc::clone(&service_micros));
        move || {
            // The request "takes" its service time on the limiter's clock.
            clock.advance_micros(service_micros.load(Ordering::SeqCst));
            async { "ok" }
        }
    };
    let app = Router::new().route("/", get(handler)).layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    // 5 ms answers: under the target, the limit holds.
    for _ in 0..60 {
        assert_eq!(fetch(&client, address, "/").await.0, 200);
    }
    assert_eq!(layer.limit(), 16);

    // 50 ms answers: each window's p99 is over the target, and the limit halves per window.
    service_micros.store(50_000, Ordering::SeqCst);
    let mut limits = vec![layer.limit()];
    for _ in 0..20 {
        assert_eq!(fetch(&client, address, "/").await.0, 200);
        let limit = layer.limit();
        if limits.last() != Some(&limit) {
            limits.push(limit);
        }
    }
    assert_eq!(
        limits,
        [16, 8, 4, 2, 1],
        "halved window by window to the minimum"
    );

    // Fast again: the limit may climb back (slow start), never above 16.
    service_micros.store(5_000, Ordering::SeqCst);
    for _ in 0..60 {
        assert_eq!(fetch(&client, address, "/").await.0, 200);
    }
    assert!(layer.limit() <= 16);
}
