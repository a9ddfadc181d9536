//! How a response counts for the controller: answered (`ok`), a sign of overload (`dropped`),
//! too slow (`timeout`), or nothing to learn from (ignored).

use std::fmt;
use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use sluicegate::adaptive::Outcome;

use crate::grpc_status::GrpcCode;

/// Decides what a response says about the service from its status and headers: an
/// [`Outcome`] to feed the controller, or `None` to give the permit back without a sample (a
/// response that did not test the service, such as a request refused by validation).
pub type Classifier = Arc<dyn Fn(StatusCode, &HeaderMap) -> Option<Outcome> + Send + Sync>;

/// The default rule: every 5xx (a 503 from upstream included) is `dropped`; a gRPC status of
/// `RESOURCE_EXHAUSTED` or `UNAVAILABLE` is `dropped`, and `DEADLINE_EXCEEDED` a `timeout`
/// (in the head of a trailers-only answer, or in the trailers); anything else is `ok`,
/// 4xx included: the service answered.
pub fn default_classifier(status: StatusCode, headers: &HeaderMap) -> Option<Outcome> {
    if status.is_server_error() {
        return Some(Outcome::Dropped);
    }
    Some(grpc_outcome(headers).unwrap_or(Outcome::Ok))
}

/// What a `grpc-status` field says, if it says anything about load.
pub(crate) fn grpc_outcome(fields: &HeaderMap) -> Option<Outcome> {
    match GrpcCode::from_header(fields.get("grpc-status")?)? {
        GrpcCode::ResourceExhausted | GrpcCode::Unavailable => Some(Outcome::Dropped),
        GrpcCode::DeadlineExceeded => Some(Outcome::Timeout),
        _ => None,
    }
}

/// The classifier a layer uses, printable.
#[derive(Clone)]
pub(crate) struct Classify(pub(crate) Classifier);

impl Default for Classify {
    fn default() -> Self {
        Classify(Arc::new(default_classifier))
    }
}

impl fmt::Debug for Classify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Classifier")
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn server_errors_and_grpc_overload_are_drops() {
        let none = HeaderMap::new();
        assert_eq!(default_classifier(StatusCode::OK, &none), Some(Outcome::Ok));
        assert_eq!(
            default_classifier(StatusCode::NOT_FOUND, &none),
            Some(Outcome::Ok)
        );
        for status in [500, 502, 503, 504] {
            let status = StatusCode::from_u16(status).expect("status");
            assert_eq!(default_classifier(status, &none), Some(Outcome::Dropped));
        }
        let mut grpc = HeaderMap::new();
        for (code, outcome) in [
            ("8", Outcome::Dropped),
            ("14", Outcome::Dropped),
            ("4", Outcome::Timeout),
            ("0", Outcome::Ok),
            ("5", Outcome::Ok),
        ] {
            grpc.insert("grpc-status", HeaderValue::from_static(code));
            assert_eq!(default_classifier(StatusCode::OK, &grpc), Some(outcome));
        }
    }
}
