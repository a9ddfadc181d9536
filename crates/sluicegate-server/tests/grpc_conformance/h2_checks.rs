//! The service as HTTP/2 sees it, from a raw `h2` client: what gRPC libraries never send, and
//! the connection-level behaviour they rely on. Each check takes the gRPC address of a
//! running service.

#![allow(unreachable_pub)]

use std::net::SocketAddr;

use bytes::Bytes;
use prost::Message as _;

use super::TestResult;
use super::raw::{METHOD, call, call_with, connect, frame, headers, request, still_serves, unary};
use super::tonic_checks::OK;

/// Errors are trailers-only: `grpc-status` and `grpc-message` in the one HEADERS frame that
/// ends the stream, with HTTP status 200 and the gRPC content type.
pub async fn errors_are_trailers_only(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let answer = unary(
        &mut connection.client,
        grpc,
        &super::tonic_checks::request("", &[("user", "ann")]),
    )
    .await?;
    assert_eq!(answer.status, 200);
    assert!(answer.trailers.is_none(), "{answer:?}");
    assert!(answer.body.is_empty(), "{answer:?}");
    assert_eq!(answer.grpc_status(), Some("3"), "{answer:?}");
    assert!(answer.grpc_message().contains("domain"), "{answer:?}");
    let content_type = answer.headers.get("content-type").map(|v| v.as_bytes());
    assert_eq!(content_type, Some(&b"application/grpc"[..]), "{answer:?}");
    // A success carries its status in trailers after the message.
    let answer = unary(&mut connection.client, grpc, &request(&[("user", "ann")])).await?;
    assert_eq!(answer.grpc_status(), Some("0"), "{answer:?}");
    assert!(answer.trailers.is_some(), "{answer:?}");
    assert_eq!(answer.message()?.overall_code, OK);
    Ok(())
}

/// A stream reset after its headers and half its message leaves the connection serving: the
/// next call on it is answered.
pub async fn a_stream_reset_mid_call_leaves_the_connection_serving(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let message = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    for _ in 0..3 {
        let mut ready = connection.client.clone().ready().await?;
        let head = headers(grpc, METHOD, "application/grpc", &[])?;
        let (_response, mut send) = ready.send_request(head, false)?;
        send.send_data(Bytes::copy_from_slice(&message[..message.len() / 2]), false)?;
        send.send_reset(h2::Reason::CANCEL);
    }
    let answer = unary(&mut connection.client, grpc, &request(&[("user", "ann")])).await?;
    assert_eq!(answer.grpc_status(), Some("0"), "{answer:?}");
    assert_eq!(answer.message()?.overall_code, OK);
    Ok(())
}

/// A burst of calls reset as soon as they are opened (as a client cancelling everything in
/// flight does, or an HTTP/2 rapid-reset attack): the service may close that connection (the
/// tonic path sends GOAWAY ENHANCE_YOUR_CALM past 20 such streams), but keeps serving new
/// ones.
pub async fn a_burst_of_resets_leaves_the_service_serving(grpc: SocketAddr) -> TestResult {
    let connection = connect(grpc).await?;
    for _ in 0..200 {
        let Ok(mut ready) = connection.client.clone().ready().await else {
            break; // The service closed the connection: allowed.
        };
        let head = headers(grpc, METHOD, "application/grpc", &[])?;
        let Ok((_response, mut send)) = ready.send_request(head, false) else {
            break;
        };
        send.send_reset(h2::Reason::CANCEL);
    }
    let mut connection = connect(grpc).await?;
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A connection dropped with a call half sent leaves the service serving new connections.
pub async fn a_connection_dropped_mid_request_leaves_the_service_serving(
    grpc: SocketAddr,
) -> TestResult {
    let message = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    for _ in 0..3 {
        let connection = connect(grpc).await?;
        let mut ready = connection.client.clone().ready().await?;
        let head = headers(grpc, METHOD, "application/grpc", &[])?;
        let (_response, mut send) = ready.send_request(head, false)?;
        send.send_data(Bytes::copy_from_slice(&message[..3]), false)?;
        // Let the frames out before the socket goes.
        tokio::task::yield_now().await;
        connection.driver.abort();
    }
    let mut connection = connect(grpc).await?;
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A message cut short (the stream ends inside it) is INTERNAL, as are a message flagged
/// compressed on a call that named no `grpc-encoding` and bytes that are not a protobuf
/// message (a string field declared 100 bytes long that ends after 1).
pub async fn broken_framing_is_internal(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let whole = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    let cut = whole[..whole.len() - 2].to_vec();
    let prefix_only = whole[..3].to_vec();
    let flagged = frame(true, &request(&[("user", "ann")]).encode_to_vec());
    let garbage = frame(false, &[0x0a, 0x64, b'x']);
    let broken = [
        ("cut", cut),
        ("prefix", prefix_only),
        ("flagged", flagged),
        ("garbage", garbage),
    ];
    for (name, body) in broken {
        let head = headers(grpc, METHOD, "application/grpc", &[])?;
        let answer = call(&mut connection.client, head, body).await?;
        assert_eq!(answer.grpc_status(), Some("13"), "{name}: {answer:?}");
        assert!(!answer.grpc_message().is_empty(), "{name}: {answer:?}");
    }
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A message split over several DATA frames (the prefix cut in two, the message in pieces) is
/// read whole and answered.
pub async fn a_message_in_several_frames_is_answered(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let message = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    let mut ready = connection.client.clone().ready().await?;
    let head = headers(grpc, METHOD, "application/grpc", &[])?;
    let (response, mut send) = ready.send_request(head, false)?;
    let cuts = [0, 2, 7, message.len() - 1, message.len()];
    for piece in cuts.windows(2) {
        let last = piece[1] == message.len();
        send.send_data(Bytes::copy_from_slice(&message[piece[0]..piece[1]]), last)?;
    }
    let answer = super::raw::read_answer(response).await?;
    assert_eq!(answer.grpc_status(), Some("0"), "{answer:?}");
    assert_eq!(answer.message()?.overall_code, OK);
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A `grpc-timeout` the decision beats is answered as usual, and one that does not parse is
/// ignored (as tonic ignores it): the call is answered.
pub async fn timeouts_that_do_not_expire_or_parse_leave_the_call_answered(
    grpc: SocketAddr,
) -> TestResult {
    let mut connection = connect(grpc).await?;
    let call = request(&[("user", "ann")]);
    for timeout in ["10S", "99999999m", "bogus", "1x"] {
        let extra = [("grpc-timeout", timeout)];
        let answer = call_with(&mut connection.client, grpc, &extra, false, &call).await?;
        assert_eq!(answer.grpc_status(), Some("0"), "{timeout}: {answer:?}");
        assert_eq!(answer.message()?.overall_code, OK, "{timeout}");
    }
    Ok(())
}

/// A gzip-compressed call is refused as the gRPC compression spec says: UNIMPLEMENTED, and
/// `grpc-accept-encoding` naming what the service takes (identity).
pub async fn gzip_requests_are_refused_with_the_accepted_encodings(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let gzip = [("grpc-encoding", "gzip")];
    let call = request(&[("user", "ann")]);
    let answer = call_with(&mut connection.client, grpc, &gzip, true, &call).await?;
    assert_eq!(answer.grpc_status(), Some("12"), "{answer:?}");
    let accepted = answer
        .headers
        .get("grpc-accept-encoding")
        .and_then(|v| v.to_str().ok())
        .ok_or("no grpc-accept-encoding")?;
    assert!(accepted.contains("identity"), "{accepted}");
    Ok(())
}

/// A method the service does not have is UNIMPLEMENTED, trailers-only.
pub async fn an_unknown_method_is_unimplemented(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let body = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/Nope",
        "/grpc.health.v1.Health/Check",
    ] {
        let head = headers(grpc, path, "application/grpc", &[])?;
        let answer = call(&mut connection.client, head, body.clone()).await?;
        assert_eq!(answer.grpc_status(), Some("12"), "{path}: {answer:?}");
    }
    Ok(())
}

/// HTTP/2 PING frames are answered.
pub async fn pings_are_answered(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let mut ping_pong = connection.ping_pong.take().ok_or("no ping handle")?;
    for _ in 0..3 {
        ping_pong.ping(h2::Ping::opaque()).await?;
    }
    // The connection still serves calls.
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A request with a content type other than `application/grpc` is refused with HTTP 415, as
/// the gRPC spec asks, so that no plain HTTP client takes it for a success.
pub async fn a_content_type_not_grpc_is_415(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let body = frame(false, &request(&[("user", "ann")]).encode_to_vec());
    for content_type in ["application/json", "text/plain", "application/grpcx"] {
        let head = headers(grpc, METHOD, content_type, &[])?;
        let answer = call(&mut connection.client, head, body.clone()).await?;
        assert_eq!(answer.status, 415, "{content_type}: {answer:?}");
        assert_ne!(
            answer.grpc_status(),
            Some("0"),
            "{content_type}: {answer:?}"
        );
    }
    for content_type in ["application/grpc+proto", "application/grpc; charset=utf-8"] {
        let head = headers(grpc, METHOD, content_type, &[])?;
        let answer = call(&mut connection.client, head, body.clone()).await?;
        assert_eq!(answer.message()?.overall_code, OK, "{content_type}");
    }
    Ok(())
}

/// A message over the 4 MiB limit is RESOURCE_EXHAUSTED, and the connection is not dropped:
/// the next call on it is answered.
pub async fn an_oversized_message_is_resource_exhausted_on_a_live_connection(
    grpc: SocketAddr,
) -> TestResult {
    let mut connection = connect(grpc).await?;
    let huge = super::tonic_checks::request(&"x".repeat(5 << 20), &[("user", "ann")]);
    let answer = unary(&mut connection.client, grpc, &huge).await?;
    assert_eq!(answer.grpc_status(), Some("8"), "{answer:?}");
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}

/// A call with `grpc-timeout` whose decision is held up past the deadline (`grpc` must be a
/// service whose decisions hang, on a frozen Redis) is ended by the service, not left to hang,
/// with one of `statuses`. The gRPC spec's answer is DEADLINE_EXCEEDED (4), the lean server's;
/// tonic's server ends it CANCELLED (1, "Timeout expired").
pub async fn a_call_past_its_deadline_is_ended_by_the_service(
    grpc: SocketAddr,
    statuses: &[&str],
) -> TestResult {
    let mut connection = connect(grpc).await?;
    let deadline = [("grpc-timeout", "200m")];
    let late = request(&[("counted", "late")]);
    let answer = call_with(&mut connection.client, grpc, &deadline, false, &late).await?;
    let status = answer.grpc_status().ok_or("no grpc-status")?;
    assert!(statuses.contains(&status), "{answer:?}");
    // A domain without rules needs no counter: answered at once on the same connection.
    let elsewhere = super::tonic_checks::request("elsewhere", &[("user", "ann")]);
    let answer = unary(&mut connection.client, grpc, &elsewhere).await?;
    assert_eq!(answer.message()?.overall_code, OK);
    Ok(())
}

/// With keepalive on (`grpc` must be a service started with `--grpc-keepalive-interval`), a
/// client that never answers the service's PINGs is sent one and then has its connection
/// closed. The client here is bytes on a socket: HTTP/2's preface and an empty SETTINGS frame,
/// then silence (every HTTP/2 library answers PINGs by itself).
pub async fn an_unanswered_keepalive_ping_closes_the_connection(grpc: SocketAddr) -> TestResult {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const PING: u8 = 0x6;
    let mut tcp = tokio::net::TcpStream::connect(grpc).await?;
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await?;
    let mut received = Vec::new();
    // Bounded against a service that never closes it (the check then fails, below).
    let read = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        let mut chunk = [0u8; 4096];
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection was never closed");
    // The frames the service sent, by type: 9-byte headers (a 24-bit length, then the type).
    let mut types = Vec::new();
    let mut rest = received.as_slice();
    while let [a, b, c, kind, _, _, _, _, _, tail @ ..] = rest {
        let length = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
        types.push(*kind);
        rest = tail.get(length..).unwrap_or_default();
    }
    assert!(types.contains(&PING), "no PING before the close: {types:?}");
    Ok(())
}
