//! The server's own answers: a 429 or 503 with `Retry-After` (seconds, HTTP date) or
//! `RateLimit` holds further calls to that host, on tokio's paused clock (the server records
//! when each call arrived on the same clock); past the maximum wait, calls fail at once.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use sluicegate_http::pace::{PaceError, PaceLayer};

use crate::support::{Answer, call, paced, server};

fn answer(status: StatusCode, name: &'static str, value: &'static str) -> Answer {
    Box::new(move || (status, vec![(name, value.to_owned())]))
}

/// A layer that never waits for its own limit.
fn generous() -> PaceLayer {
    PaceLayer::builder("gcra:rate=1000000/s,burst=1000000")
        .per_host()
        .build()
        .expect("layer")
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_holds_the_next_call() {
    let (address, script) = server(vec![answer(
        StatusCode::TOO_MANY_REQUESTS,
        "retry-after",
        "30",
    )])
    .await;
    let mut client = paced(&generous());
    assert_eq!(
        call(&mut client, address).await.expect("call"),
        429,
        "returned as it came"
    );
    assert_eq!(call(&mut client, address).await.expect("call"), 200);
    let arrivals = script.arrivals();
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_secs(30),
        "{arrivals:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_as_a_date_holds_until_then() {
    // Ten minutes ahead: the second or so of real time a slow run takes cannot matter.
    let (address, script) = server(vec![Box::new(|| {
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(600));
        (StatusCode::SERVICE_UNAVAILABLE, vec![("retry-after", date)])
    })])
    .await;
    let mut client = paced(&generous());
    assert_eq!(call(&mut client, address).await.expect("call"), 503);
    assert_eq!(call(&mut client, address).await.expect("call"), 200);
    let arrivals = script.arrivals();
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_secs(590),
        "{arrivals:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_ietf_ratelimit_field_holds_too() {
    let (address, script) = server(vec![answer(
        StatusCode::TOO_MANY_REQUESTS,
        "ratelimit",
        "\"per-minute\";r=0;t=45",
    )])
    .await;
    let mut client = paced(&generous());
    call(&mut client, address).await.expect("call");
    call(&mut client, address).await.expect("call");
    let arrivals = script.arrivals();
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_secs(45),
        "{arrivals:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn only_that_host_is_held() {
    let (held, _) = server(vec![answer(
        StatusCode::TOO_MANY_REQUESTS,
        "retry-after",
        "3600",
    )])
    .await;
    let (other, script) = server(Vec::new()).await;
    let mut client = paced(&generous());
    let start = tokio::time::Instant::now();
    call(&mut client, held).await.expect("call");
    call(&mut client, other).await.expect("call");
    // The paused clock moves only when every task waits on a timer: the other host's call
    // arrived before any hour could pass.
    assert!(script.arrivals()[0] - start < Duration::from_secs(3600));
}

#[tokio::test(start_paused = true)]
async fn a_hold_past_the_maximum_wait_fails_at_once() {
    let (address, script) = server(vec![answer(
        StatusCode::TOO_MANY_REQUESTS,
        "retry-after",
        "600",
    )])
    .await;
    let layer = PaceLayer::builder("gcra:rate=100/s,burst=100")
        .max_wait(Duration::from_secs(10))
        .build()
        .expect("layer");
    let mut client = paced(&layer);
    call(&mut client, address).await.expect("call");
    let error = call(&mut client, address).await.expect_err("held");
    match &error {
        PaceError::HeldByServer {
            retry_in, max_wait, ..
        } => {
            assert!(*retry_in > Duration::from_secs(10), "{error}");
            assert_eq!(*max_wait, Duration::from_secs(10));
        }
        other => panic!("not a hold: {other}"),
    }
    assert_eq!(script.arrivals().len(), 1, "the server never saw it");
}

#[tokio::test(start_paused = true)]
async fn other_answers_hold_nothing() {
    let (address, script) = server(vec![
        answer(StatusCode::OK, "retry-after", "600"),
        answer(StatusCode::INTERNAL_SERVER_ERROR, "retry-after", "600"),
        answer(StatusCode::TOO_MANY_REQUESTS, "retry-after", "soon"),
    ])
    .await;
    let mut client = paced(&generous());
    let start = tokio::time::Instant::now();
    for _ in 0..4 {
        call(&mut client, address).await.expect("call");
    }
    assert!(script.arrivals()[3] - start < Duration::from_secs(600));
}
