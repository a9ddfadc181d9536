//! The answer to a request refused for overload: 503 with `Retry-After` and a text body saying
//! why, or for a gRPC call a trailers-only `UNAVAILABLE` (the code gRPC clients retry), with
//! the same delay as `retry-after` and `grpc-retry-pushback-ms` metadata.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use sluicegate::adaptive::{AcquireError, AdaptiveMetrics};

use crate::grpc_status::{GrpcCode, grpc_message};
use crate::ratelimit_fields::retry_after_seconds;

/// Why a request got no permit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refusal {
    /// The limit was reached and the layer does not queue.
    Full,
    /// The limit was reached and the wait queue held as many as it may.
    QueueFull { capacity: usize },
    /// No place freed up within the queue timeout.
    Timeout { waited: Duration },
}

impl From<AcquireError> for Refusal {
    fn from(error: AcquireError) -> Self {
        match error {
            // A limiter without a queue refuses as if the layer did not queue.
            AcquireError::QueueFull { capacity: 0 } => Refusal::Full,
            AcquireError::QueueFull { capacity } => Refusal::QueueFull { capacity },
            AcquireError::Timeout { waited } => Refusal::Timeout { waited },
            // The core may add causes; each is still a refusal for overload.
            _ => Refusal::Full,
        }
    }
}

/// Whether the request is a gRPC call (`content-type: application/grpc...`).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The answer to a refused request.
pub(crate) fn refused(
    refusal: Refusal,
    metrics: AdaptiveMetrics,
    retry_after: Duration,
    grpc: bool,
) -> Response<Bytes> {
    let seconds = retry_after_seconds(retry_after);
    let limit = metrics.limit;
    let cause = match refusal {
        Refusal::Full => format!("concurrency limit of {limit} reached"),
        Refusal::QueueFull { capacity } => format!(
            "concurrency limit of {limit} reached and the wait queue is full ({capacity} waiting)"
        ),
        Refusal::Timeout { waited } => format!(
            "no place freed within {} ms (concurrency limit of {limit})",
            waited.as_millis()
        ),
    };
    let message = format!("service overloaded: {cause}; retry in {seconds} s");
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    if grpc {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(
            HeaderName::from_static("grpc-status"),
            GrpcCode::Unavailable.header_value(),
        );
        let pushback = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
        headers.insert(
            HeaderName::from_static("grpc-retry-pushback-ms"),
            HeaderValue::from(pushback),
        );
        headers.insert(
            HeaderName::from_static("grpc-message"),
            grpc_message(&message),
        );
    } else {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        *response.body_mut() = Bytes::from(message + "\n");
    }
    response
}
