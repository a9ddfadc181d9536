//! Several limits decided together, and dry run.

use std::net::IpAddr;
use std::num::NonZeroU64;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sluicegate::ManualClock;
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::PeerIp;

use crate::support::{client, get as fetch, serve, statuses};

async fn ok() -> &'static str {
    "ok"
}

const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

#[tokio::test]
async fn two_limits_all_or_nothing() {
    let clock = ManualClock::new(0);
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(clock.clone())
        .limit_named("per-second", "fixed-window:limit=2,window=1s")
        .limit_named("hourly", "sliding-log:limit=3,window=1h")
        .build()
        .expect("layer");
    let address = serve(Router::new().route("/", get(ok)).layer(layer.clone())).await;
    let client = client();
    let hourly_left = || {
        layer.backend().limiters()[1]
            .peek(&LOCALHOST, NonZeroU64::MIN)
            .expect("peek")
            .remaining()
    };

    assert_eq!(statuses(&client, address, "/", 2).await, [200, 200]);
    let (status, headers, _) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(headers["ratelimit"], "\"per-second\";r=0;t=1");
    assert_eq!(
        hourly_left(),
        1,
        "the hourly limit was not charged for the denied request"
    );

    clock.advance(Duration::from_secs(1));
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);
    let (status, headers, _) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(headers["ratelimit-policy"], "\"hourly\";q=3;w=3600");
    assert_eq!(headers["retry-after"], "3599");
    let per_second_left = layer.backend().limiters()[0]
        .peek(&LOCALHOST, NonZeroU64::MIN)
        .expect("peek")
        .remaining();
    assert_eq!(per_second_left, 1, "nor the per-second limit for this one");
}

#[tokio::test]
async fn dry_run_decides_and_counts_but_lets_everything_through() {
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(ManualClock::new(0))
        .limit("fixed-window:limit=1,window=1h")
        .dry_run(true)
        .headers_on_allowed(true)
        .build()
        .expect("layer");
    let address = serve(Router::new().route("/", get(ok)).layer(layer.clone())).await;
    let client = client();
    assert_eq!(statuses(&client, address, "/", 2).await, [200, 200]);
    let (status, headers, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(headers["ratelimit"], "\"fixed-window\";r=0;t=3600");
    assert!(headers.get("retry-after").is_none());
    let stats = layer.stats();
    assert_eq!((stats.dry_run_denied, stats.denied), (2, 0));
    let left = layer.backend().limiters()[0]
        .peek(&LOCALHOST, NonZeroU64::MIN)
        .expect("peek")
        .remaining();
    assert_eq!(left, 0, "the allowed request was counted");
}
