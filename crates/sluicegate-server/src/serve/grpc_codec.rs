//! The thin unary gRPC layer of the lean gRPC server (`grpc_lean.rs`), as pure functions of
//! bytes and headers: which requests are gRPC, the 5-byte message prefix, `grpc-timeout`, and
//! the statuses and trailers of an answer. HTTP/2 is h2's, the messages are prost's.

use std::borrow::Cow;
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use sluicegate_http::grpc_status::grpc_message;

pub(crate) use sluicegate_http::grpc_status::GrpcCode;

/// The one method served: Envoy's `ShouldRateLimit`.
pub(crate) const SHOULD_RATE_LIMIT: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The largest request message taken (tonic's default, which the tonic path keeps): a rate
/// limit request is a few hundred bytes.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The length of a gRPC message prefix: the compressed flag and a big-endian `u32` length.
pub(crate) const PREFIX_BYTES: usize = 5;

/// An answer that is a gRPC status other than OK, sent trailers-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The HTTP status: 200 for every gRPC error but a request that is not gRPC at all.
    pub(crate) http: StatusCode,
    /// The gRPC status.
    pub(crate) code: GrpcCode,
    /// The `grpc-message` (percent-encoded when sent).
    pub(crate) message: Cow<'static, str>,
    /// Whether to name the encodings the service takes (`grpc-accept-encoding: identity`).
    pub(crate) accept_identity: bool,
}

impl Refusal {
    /// A gRPC error `code` with `message`.
    pub(crate) fn new(code: GrpcCode, message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal {
            http: StatusCode::OK,
            code,
            message: message.into(),
            accept_identity: false,
        }
    }

    /// The answer to a call whose `grpc-timeout` passed first.
    pub(crate) fn deadline_exceeded() -> Refusal {
        Refusal::new(GrpcCode::DeadlineExceeded, "deadline exceeded")
    }

    /// The answer to a request that is not gRPC: HTTP 415 (so that no plain HTTP client takes
    /// it for a success), with a gRPC status a gRPC client understands too.
    pub(crate) fn not_grpc() -> Refusal {
        Refusal {
            http: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..Refusal::new(
                GrpcCode::InvalidArgument,
                "content-type must be application/grpc",
            )
        }
    }

    /// The trailers-only answer's headers.
    pub(crate) fn response(&self) -> http::Response<()> {
        let mut response = http::Response::new(());
        *response.status_mut() = self.http;
        let headers = response.headers_mut();
        headers.insert(http::header::CONTENT_TYPE, grpc_content_type());
        headers.insert("grpc-status", self.code.header_value());
        if !self.message.is_empty() {
            headers.insert("grpc-message", grpc_message(&self.message));
        }
        if self.accept_identity {
            headers.insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
        }
        response
    }
}

/// What a request's headers say about answering it: a deadline, or a refusal before its
/// message is read.
pub(crate) fn check_head(head: &http::request::Parts) -> Result<Option<Duration>, Refusal> {
    if head.uri.path() != SHOULD_RATE_LIMIT {
        return Err(Refusal::new(
            GrpcCode::Unimplemented,
            format!("unknown method {}", head.uri.path()),
        ));
    }
    if !is_grpc_content_type(head.headers.get(http::header::CONTENT_TYPE)) {
        return Err(Refusal::not_grpc());
    }
    if let Some(encoding) = head.headers.get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Refusal {
            accept_identity: true,
            ..Refusal::new(
                GrpcCode::Unimplemented,
                format!(
                    "grpc-encoding {} is not supported: send identity",
                    String::from_utf8_lossy(encoding.as_bytes())
                ),
            )
        });
    }
    // A timeout that does not parse is ignored, as tonic ignores it: the call is answered.
    Ok(head
        .headers
        .get("grpc-timeout")
        .and_then(|value| parse_grpc_timeout(value.as_bytes())))
}

/// Whether a request's content type is gRPC's: `application/grpc`, alone or with a `+format`
/// or parameters.
pub(crate) fn is_grpc_content_type(value: Option<&HeaderValue>) -> bool {
    let Some(value) = value.map(HeaderValue::as_bytes) else {
        return false;
    };
    match value.strip_prefix(b"application/grpc") {
        Some(rest) => rest.is_empty() || rest.starts_with(b"+") || rest.starts_with(b";"),
        None => false,
    }
}

/// A `grpc-timeout` value: 1 to 8 ASCII digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub(crate) fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Checks a request body read so far: a refusal as soon as its prefix declares a message over
/// [`MAX_MESSAGE_BYTES`], or more bytes arrive than the one message of a unary call.
pub(crate) fn check_partial(body: &[u8]) -> Result<(), Refusal> {
    let Some(declared) = declared_length(body) else {
        return Ok(());
    };
    if declared > MAX_MESSAGE_BYTES {
        return Err(Refusal::new(
            GrpcCode::ResourceExhausted,
            format!("request message of {declared} bytes is over the limit of {MAX_MESSAGE_BYTES}"),
        ));
    }
    if body.len() > PREFIX_BYTES + declared {
        return Err(Refusal::new(
            GrpcCode::Internal,
            "more than one request message in a unary call",
        ));
    }
    Ok(())
}

/// The one message of a whole unary request body (every byte the stream carried).
pub(crate) fn unary_message(body: &[u8]) -> Result<&[u8], Refusal> {
    check_partial(body)?;
    let Some(declared) = declared_length(body) else {
        return Err(Refusal::new(
            GrpcCode::Internal,
            "the request ended before its message",
        ));
    };
    if body[0] != 0 {
        return Err(Refusal::new(
            GrpcCode::Internal,
            "the request message is flagged compressed, but the call named no grpc-encoding",
        ));
    }
    let message = &body[PREFIX_BYTES..];
    if message.len() < declared {
        return Err(Refusal::new(
            GrpcCode::Internal,
            format!(
                "the request ended inside its message ({} of {declared} bytes)",
                message.len()
            ),
        ));
    }
    Ok(message)
}

/// The length a body's message prefix declares, once the prefix is in.
pub(crate) fn declared_length(body: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = body.get(1..PREFIX_BYTES)?.try_into().ok()?;
    usize::try_from(u32::from_be_bytes(prefix)).ok()
}

/// `message` framed for the wire (uncompressed), written into `buffer`'s spare room: the
/// buffer's allocation is reused once the frame sent before has been written out.
pub(crate) fn encode_message(message: &impl prost::Message, buffer: &mut BytesMut) -> Bytes {
    let length = message.encoded_len();
    buffer.reserve(PREFIX_BYTES + length);
    buffer.put_u8(0);
    buffer.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Cannot fail: the room was reserved above.
    let _ = message.encode(buffer);
    buffer.split().freeze()
}

/// The headers of a successful answer, before its message.
pub(crate) fn ok_response() -> http::Response<()> {
    let mut response = http::Response::new(());
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, grpc_content_type());
    response
}

/// The trailers of a successful answer, after its message.
pub(crate) fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", GrpcCode::Ok.header_value());
    trailers
}

fn grpc_content_type() -> HeaderValue {
    HeaderValue::from_static("application/grpc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_are_application_grpc_with_a_format_or_parameters() {
        let is_grpc =
            |text: &'static str| is_grpc_content_type(Some(&HeaderValue::from_static(text)));
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(grpc), "{grpc}");
        }
        for other in [
            "application/json",
            "application/grpcx",
            "application/grpc-web",
            "",
        ] {
            assert!(!is_grpc(other), "{other}");
        }
        assert!(!is_grpc_content_type(None));
    }

    #[test]
    fn timeouts_have_up_to_eight_digits_and_a_unit() {
        assert_eq!(
            parse_grpc_timeout(b"200m"),
            Some(Duration::from_millis(200))
        );
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"3S"), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_grpc_timeout(b"99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout(b"5n"), Some(Duration::from_nanos(5)));
        for bad in [
            &b""[..],
            b"m",
            b"123456789m",
            b"12x",
            b"-1S",
            b"1.5S",
            b"20",
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut body = vec![flag];
        body.extend_from_slice(&u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
        body.extend_from_slice(message);
        body
    }

    #[test]
    fn a_whole_body_gives_its_message() {
        let body = framed(0, b"abc");
        assert_eq!(unary_message(&body), Ok(&b"abc"[..]));
        assert_eq!(unary_message(&framed(0, b"")), Ok(&b""[..]));
    }

    #[test]
    fn broken_bodies_are_internal() {
        let whole = framed(0, b"abcdef");
        for broken in [
            &whole[..0],
            &whole[..3],
            &whole[..whole.len() - 1],
            &framed(1, b"abc")[..],
            &[whole.as_slice(), b"x"].concat()[..],
        ] {
            let refused = unary_message(broken).err();
            assert_eq!(
                refused.map(|r| r.code),
                Some(GrpcCode::Internal),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn a_prefix_over_the_limit_is_refused_before_the_message_arrives() {
        let mut prefix = vec![0];
        prefix.extend_from_slice(
            &u32::try_from(MAX_MESSAGE_BYTES + 1)
                .unwrap_or(0)
                .to_be_bytes(),
        );
        let refused = check_partial(&prefix).err();
        assert_eq!(refused.map(|r| r.code), Some(GrpcCode::ResourceExhausted));
        assert_eq!(check_partial(&prefix[..4]), Ok(()));
    }

    #[test]
    fn messages_are_framed_uncompressed_into_the_buffer() {
        let mut buffer = BytesMut::new();
        let message = envoy_types::pb::google::protobuf::Duration {
            seconds: 7,
            nanos: 0,
        };
        let frame = encode_message(&message, &mut buffer);
        assert_eq!(
            &frame[..],
            &framed(0, &prost::Message::encode_to_vec(&message))[..]
        );
        assert!(buffer.is_empty());
    }

    #[test]
    fn refusals_are_trailers_only_with_the_grpc_content_type() {
        let response = Refusal {
            accept_identity: true,
            ..Refusal::new(GrpcCode::Unimplemented, "no")
        }
        .response();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["grpc-status"], "12");
        assert_eq!(headers["grpc-message"], "no");
        assert_eq!(headers["grpc-accept-encoding"], "identity");
    }
}
