//! Rejections as responses: an HTTP status with a text body naming the cause, or for a gRPC
//! call (`content-type: application/grpc...`) a trailers-only answer, HTTP 200 with
//! `grpc-status` (`RESOURCE_EXHAUSTED` for a rate limit) and the same fields as metadata.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::grpc_status::{GrpcCode, grpc_message};
use crate::rate_limit::backend::Verdict;
use crate::rate_limit::error::{BackendError, KeyError};
use crate::rate_limit::headers;
use crate::rate_limit::held::RateLimitBody;
use crate::rate_limit::policy::{MissingKey, Options, Rejection};

/// A rejection as the layer's response.
pub(crate) fn into_response<B>(response: Response<Bytes>) -> Response<RateLimitBody<B>> {
    response.map(RateLimitBody::answer)
}

/// Whether the request is a gRPC call.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The answer to a request a limit denied.
pub(crate) fn limited(options: &Options, verdict: Verdict, grpc: bool) -> Response<Bytes> {
    let fields = headers::fields(&verdict, &options.headers, true);
    let name = verdict
        .tightest()
        .map_or("default", |(_, limit)| limit.name());
    let concurrency = verdict
        .tightest()
        .is_some_and(|(_, limit)| limit.is_concurrency());
    let message = if concurrency {
        format!("too many requests in flight: concurrency limit \"{name}\" reached")
    } else {
        let retry = headers::retry_after(&verdict);
        format!("too many requests: rate limit \"{name}\" exceeded, retry in {retry} s")
    };
    let code = grpc.then_some(GrpcCode::ResourceExhausted);
    let mut response = build(options.status, code, message);
    headers::extend(response.headers_mut(), fields);
    finish(options, &Rejection::Limited(verdict), response)
}

/// The answer to a request whose key could not be read.
pub(crate) fn missing_key(options: &Options, error: KeyError, grpc: bool) -> Response<Bytes> {
    let status = match options.missing_key {
        MissingKey::RejectWith(status) => status,
        _ => error.status(),
    };
    let response = build(
        status,
        grpc.then(|| GrpcCode::from_http(status)),
        error.to_string(),
    );
    finish(options, &Rejection::MissingKey(error), response)
}

/// The answer to a request the backend could not decide.
pub(crate) fn backend_error(options: &Options, error: BackendError, grpc: bool) -> Response<Bytes> {
    let (status, code) = match &error {
        BackendError::KeyCapacity { .. } => (options.status, GrpcCode::ResourceExhausted),
        BackendError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, GrpcCode::Unavailable),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, GrpcCode::Internal),
    };
    let response = build(status, grpc.then_some(code), error.to_string());
    finish(options, &Rejection::Backend(error), response)
}

/// A text answer, or a trailers-only gRPC one when `grpc_code` is given.
fn build(status: StatusCode, grpc_code: Option<GrpcCode>, message: String) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    match grpc_code {
        Some(code) => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            headers.insert(HeaderName::from_static("grpc-status"), code.header_value());
            headers.insert(
                HeaderName::from_static("grpc-message"),
                grpc_message(&message),
            );
        }
        None => {
            *response.status_mut() = status;
            let headers = response.headers_mut();
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            let mut body = message;
            body.push('\n');
            *response.body_mut() = Bytes::from(body);
        }
    }
    response
}

fn finish(options: &Options, rejection: &Rejection, response: Response<Bytes>) -> Response<Bytes> {
    match &options.hook {
        Some(hook) => hook(rejection, response),
        None => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_is_told_by_its_content_type() {
        let mut headers = HeaderMap::new();
        assert!(!is_grpc(&headers));
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        assert!(is_grpc(&headers));
    }
}
