//! gRPC statuses as they travel in HTTP/2 headers: the `grpc-status` code and the
//! percent-encoded `grpc-message`. Both the layer's gRPC rejections and the service's gRPC
//! server write them here.
//!
//! ```
//! use sluicegate_http::grpc_status::{GrpcCode, grpc_message};
//!
//! assert_eq!(GrpcCode::ResourceExhausted.header_value(), "8");
//! assert_eq!(grpc_message("100% full\n"), "100%25 full%0A");
//! ```

use http::{HeaderValue, StatusCode};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// The gRPC status codes Sluicegate answers with.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrpcCode {
    /// The call succeeded.
    Ok = 0,
    /// An error with no better code.
    Unknown = 2,
    /// The request is not one that can be answered.
    InvalidArgument = 3,
    /// The call's deadline passed before its answer was ready.
    DeadlineExceeded = 4,
    /// The caller may not make this call.
    PermissionDenied = 7,
    /// A limit was reached: a rate limit, or a message or memory bound.
    ResourceExhausted = 8,
    /// The method, service or encoding is not served.
    Unimplemented = 12,
    /// Something broke on the way: bad framing, an internal fault.
    Internal = 13,
    /// The service or what it depends on is unavailable for now.
    Unavailable = 14,
    /// The caller did not say who it is.
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The code as the `grpc-status` header carries it.
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from(self as u16)
    }

    /// The code a `grpc-status` value names, if it is one of these.
    pub fn from_header(value: &HeaderValue) -> Option<GrpcCode> {
        Some(match value.as_bytes() {
            b"0" => GrpcCode::Ok,
            b"2" => GrpcCode::Unknown,
            b"3" => GrpcCode::InvalidArgument,
            b"4" => GrpcCode::DeadlineExceeded,
            b"7" => GrpcCode::PermissionDenied,
            b"8" => GrpcCode::ResourceExhausted,
            b"12" => GrpcCode::Unimplemented,
            b"13" => GrpcCode::Internal,
            b"14" => GrpcCode::Unavailable,
            b"16" => GrpcCode::Unauthenticated,
            _ => return None,
        })
    }

    /// The code gRPC's HTTP-to-gRPC mapping gives an HTTP status.
    pub fn from_http(status: StatusCode) -> GrpcCode {
        match status.as_u16() {
            400 => GrpcCode::InvalidArgument,
            401 => GrpcCode::Unauthenticated,
            403 => GrpcCode::PermissionDenied,
            404 => GrpcCode::Unimplemented,
            429 => GrpcCode::ResourceExhausted,
            502..=504 => GrpcCode::Unavailable,
            500..=599 => GrpcCode::Internal,
            _ => GrpcCode::Unknown,
        }
    }
}

/// What gRPC percent-encodes in `grpc-message`: every byte outside printable ASCII, and `%`.
const GRPC_MESSAGE: &AsciiSet = &CONTROLS.add(b'%');

/// `text` as a `grpc-message` value.
pub fn grpc_message(text: &str) -> HeaderValue {
    let encoded = utf8_percent_encode(text, GRPC_MESSAGE).to_string();
    // Every byte is printable ASCII once encoded, so this cannot fail.
    HeaderValue::try_from(encoded).unwrap_or_else(|_| HeaderValue::from_static("error"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_percent_encoded_outside_printable_ascii() {
        assert_eq!(
            grpc_message("a 100% \"x\"\n\u{e9}"),
            "a 100%25 \"x\"%0A%C3%A9"
        );
        assert_eq!(grpc_message("a b"), "a b");
    }

    #[test]
    fn header_values_read_back_as_their_codes() {
        for code in [
            GrpcCode::Ok,
            GrpcCode::Unavailable,
            GrpcCode::Unauthenticated,
        ] {
            assert_eq!(GrpcCode::from_header(&code.header_value()), Some(code));
        }
        assert_eq!(GrpcCode::from_header(&HeaderValue::from_static("1")), None);
    }

    #[test]
    fn http_statuses_map_as_grpc_maps_them() {
        assert_eq!(
            GrpcCode::from_http(StatusCode::TOO_MANY_REQUESTS),
            GrpcCode::ResourceExhausted
        );
        assert_eq!(
            GrpcCode::from_http(StatusCode::BAD_GATEWAY),
            GrpcCode::Unavailable
        );
        assert_eq!(
            GrpcCode::from_http(StatusCode::INTERNAL_SERVER_ERROR),
            GrpcCode::Internal
        );
        assert_eq!(
            GrpcCode::from_http(StatusCode::IM_A_TEAPOT),
            GrpcCode::Unknown
        );
    }
}
