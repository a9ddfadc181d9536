//! Waiting for the limiter's permits (a manual clock, which the wait advances), one budget or
//! one per host, and the maximum wait.

use std::time::Duration;

use sluicegate::{Clock, ManualClock};
use sluicegate_http::pace::{PaceError, PaceLayer};

use crate::support::{call, paced, server};

#[tokio::test]
async fn each_call_waits_for_its_permit() {
    let (address, script) = server(Vec::new()).await;
    let clock = ManualClock::new(0);
    let layer = PaceLayer::builder("gcra:rate=1/s,burst=1")
        .clock(clock.clone())
        .build()
        .expect("layer");
    let mut client = paced(&layer);
    for _ in 0..3 {
        assert_eq!(call(&mut client, address).await.expect("call"), 200);
    }
    // The first at once, then a second's wait before each of the others.
    assert_eq!(clock.now(), 2_000_000);
    assert_eq!(script.arrivals().len(), 3);
}

#[tokio::test]
async fn clones_share_one_budget() {
    let (address, _) = server(Vec::new()).await;
    let clock = ManualClock::new(0);
    let layer = PaceLayer::builder("gcra:rate=1/s,burst=2")
        .clock(clock.clone())
        .build()
        .expect("layer");
    let (mut one, mut two) = (paced(&layer), paced(&layer.clone()));
    call(&mut one, address).await.expect("call");
    call(&mut two, address).await.expect("call");
    assert_eq!(clock.now(), 0, "the burst of 2 is spent by both");
    call(&mut one, address).await.expect("call");
    assert_eq!(clock.now(), 1_000_000);
}

#[tokio::test]
async fn per_host_budgets_are_apart() {
    let (a, _) = server(Vec::new()).await;
    let (b, _) = server(Vec::new()).await;
    let clock = ManualClock::new(0);
    let layer = PaceLayer::builder("gcra:rate=1/s,burst=1")
        .per_host()
        .clock(clock.clone())
        .build()
        .expect("layer");
    let mut client = paced(&layer);
    call(&mut client, a).await.expect("call");
    call(&mut client, b).await.expect("call");
    assert_eq!(clock.now(), 0, "one permit from each host's budget");
    call(&mut client, a).await.expect("call");
    assert_eq!(clock.now(), 1_000_000);
}

#[tokio::test]
async fn a_wait_past_the_maximum_fails_at_once_and_takes_nothing() {
    let (address, script) = server(Vec::new()).await;
    let clock = ManualClock::new(0);
    let layer = PaceLayer::builder("gcra:rate=1/s,burst=1")
        .clock(clock.clone())
        .max_wait(Duration::from_millis(500))
        .build()
        .expect("layer");
    let mut client = paced(&layer);
    call(&mut client, address).await.expect("call");
    let error = call(&mut client, address)
        .await
        .expect_err("too long a wait");
    assert!(
        matches!(&error, PaceError::WaitTooLong { max_wait, .. } if *max_wait == Duration::from_millis(500)),
        "{error}"
    );
    assert!(error.to_string().contains("maximum wait"), "{error}");
    assert_eq!(clock.now(), 0, "no wait was slept");
    assert_eq!(script.arrivals().len(), 1, "the server never saw it");
    // Nothing was taken: a second later the permit is there.
    clock.advance(Duration::from_secs(1));
    assert_eq!(call(&mut client, address).await.expect("call"), 200);
}

#[test]
fn a_bad_limit_is_a_clear_error() {
    let error = PaceLayer::builder("gcra:rate=fast")
        .build()
        .expect_err("bad");
    assert!(error.to_string().contains("gcra:rate=fast"), "{error}");
}
