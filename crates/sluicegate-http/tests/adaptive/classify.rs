//! How answers count: 5xx and gRPC overload as drops, slow answers as timeouts when asked,
//! a failed inner service as a drop, and a classifier of one's own.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use sluicegate::ManualClock;
use sluicegate::adaptive::{AdaptiveLimiter, Outcome};
use sluicegate_http::adaptive::{AdaptiveLimitBuilder, AdaptiveLimitLayer};
use tower::{Layer, ServiceExt};

use crate::support::Recorder;

fn layer(recorder: &Recorder) -> AdaptiveLimitBuilder {
    AdaptiveLimitLayer::builder(AdaptiveLimiter::with_clock(
        recorder.clone(),
        ManualClock::new(0),
    ))
}

/// Calls `layer` in front of a service answering `status` after `delay` (on tokio's clock),
/// and reads the answer to its end.
async fn answer_with(layer: &AdaptiveLimitLayer, status: u16, delay: Duration) -> u16 {
    let inner = tower::service_fn(move |_request: Request<()>| async move {
        tokio::time::sleep(delay).await;
        let mut response = Response::new(Full::new(Bytes::from_static(b"body")));
        *response.status_mut() = StatusCode::from_u16(status).expect("status");
        Ok::<_, std::convert::Infallible>(response)
    });
    let response = layer
        .layer(inner)
        .oneshot(Request::new(()))
        .await
        .expect("infallible");
    let status = response.status().as_u16();
    response.into_body().collect().await.expect("body");
    status
}

#[tokio::test]
async fn server_errors_are_drops_and_client_errors_answers() {
    let recorder = Recorder::new(10);
    let layer = layer(&recorder).build();
    for status in [200, 404, 500, 503] {
        assert_eq!(answer_with(&layer, status, Duration::ZERO).await, status);
    }
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Ok, Outcome::Ok, Outcome::Dropped, Outcome::Dropped]
    );
}

#[tokio::test(start_paused = true)]
async fn answers_slower_than_timeout_after_are_timeouts() {
    let recorder = Recorder::new(10);
    let layer = layer(&recorder)
        .timeout_after(Duration::from_millis(100))
        .build();
    answer_with(&layer, 200, Duration::from_millis(100)).await;
    answer_with(&layer, 200, Duration::from_millis(101)).await;
    // A drop stays a drop, however slow.
    answer_with(&layer, 502, Duration::from_millis(500)).await;
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Ok, Outcome::Timeout, Outcome::Dropped]
    );
}

#[tokio::test]
async fn a_classifier_of_ones_own_decides_and_may_ignore() {
    let recorder = Recorder::new(10);
    let layer = layer(&recorder)
        .classify(|status, _headers| match status.as_u16() {
            429 => Some(Outcome::Dropped),
            400..=499 => None,
            _ => Some(Outcome::Ok),
        })
        .build();
    for status in [429, 400, 500, 200] {
        answer_with(&layer, status, Duration::ZERO).await;
    }
    assert_eq!(
        recorder.outcomes(),
        [Outcome::Dropped, Outcome::Ok, Outcome::Ok],
        "the 400 gave its place back without a sample"
    );
    assert_eq!(layer.in_flight(), 0);
}

#[tokio::test]
async fn a_grpc_status_in_the_trailers_or_a_failed_service_is_a_drop() {
    let recorder = Recorder::new(10);
    let layer = layer(&recorder).build();
    let grpc = tower::service_fn(|_request: Request<()>| async {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        let frames = [
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"message"))),
            Ok(Frame::trailers(trailers)),
        ];
        Ok::<_, std::convert::Infallible>(Response::new(StreamBody::new(tokio_stream::iter(
            frames,
        ))))
    });
    let response = layer
        .layer(grpc)
        .oneshot(Request::new(()))
        .await
        .expect("infallible");
    assert_eq!(response.status(), 200);
    let collected = response.into_body().collect().await.expect("body");
    assert_eq!(
        collected.trailers().map(|t| &t["grpc-status"]),
        Some(&HeaderValue::from_static("14"))
    );

    let failing = tower::service_fn(|_request: Request<()>| async {
        Err::<Response<Full<Bytes>>, _>("the upstream is gone")
    });
    let failed = layer.layer(failing).oneshot(Request::new(())).await;
    assert_eq!(failed.err(), Some("the upstream is gone"));
    assert_eq!(recorder.outcomes(), [Outcome::Dropped, Outcome::Dropped]);
    assert_eq!(layer.in_flight(), 0);
}
