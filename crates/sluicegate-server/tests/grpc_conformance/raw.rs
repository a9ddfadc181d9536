//! A gRPC call written out by hand on an `h2` client connection, so that a check can send
//! what no gRPC library would (a wrong content type, a cut message, a stray compressed flag,
//! a reset mid-call) and see every header and trailer of the answer.

#![allow(unreachable_pub)]

use std::net::SocketAddr;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use h2::client::SendRequest;
use http::{HeaderMap, Request, StatusCode};
use prost::Message as _;

use super::BoxError;

pub use crate::grpc_wire::{METHOD, frame};

/// An HTTP/2 connection to the service: the handle that opens streams, and the task that
/// drives the connection (its result: how the connection ended).
pub struct Connection {
    pub client: SendRequest<Bytes>,
    /// Sends HTTP/2 PINGs on the connection.
    pub ping_pong: Option<h2::PingPong>,
    pub driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

/// Opens an HTTP/2 connection (prior knowledge, as gRPC does) to `grpc`.
pub async fn connect(grpc: SocketAddr) -> Result<Connection, BoxError> {
    let tcp = tokio::net::TcpStream::connect(grpc).await?;
    let (client, mut connection) = h2::client::handshake(tcp).await?;
    let ping_pong = connection.ping_pong();
    let driver = tokio::spawn(connection);
    Ok(Connection {
        client,
        ping_pong,
        driver,
    })
}

/// A gRPC request's headers for `path`, with `content_type` and any `extra` headers.
pub fn headers(
    grpc: SocketAddr,
    path: &str,
    content_type: &str,
    extra: &[(&str, &str)],
) -> Result<Request<()>, BoxError> {
    let mut request = Request::post(format!("http://{grpc}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    Ok(request.body(())?)
}

/// A request for `descriptors`, each of one `(key, value)` entry, in the suite's domain.
pub fn request(descriptors: &[(&str, &str)]) -> RateLimitRequest {
    super::tonic_checks::request("conformance", descriptors)
}

/// Everything the service answered on one stream.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// None: the answer ended with its headers (a trailers-only answer).
    pub trailers: Option<HeaderMap>,
}

impl Answer {
    /// The `grpc-status`, wherever the answer carried it (trailers, or trailers-only headers).
    pub fn grpc_status(&self) -> Option<&str> {
        self.trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| self.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
    }

    /// The `grpc-message`, wherever the answer carried it.
    pub fn grpc_message(&self) -> String {
        self.trailers
            .as_ref()
            .and_then(|t| t.get("grpc-message"))
            .or_else(|| self.headers.get("grpc-message"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The one response message of a successful call.
    pub fn message(&self) -> Result<RateLimitResponse, BoxError> {
        let (prefix, rest) = self.body.split_at_checked(5).ok_or("no message prefix")?;
        if prefix[0] != 0 {
            return Err("the answer is compressed".into());
        }
        Ok(RateLimitResponse::decode(rest)?)
    }
}

/// Sends `head` and then `body` in one DATA frame ending the stream; the whole answer.
pub async fn call(
    client: &mut SendRequest<Bytes>,
    head: Request<()>,
    body: Vec<u8>,
) -> Result<Answer, BoxError> {
    let mut ready = client.clone().ready().await?;
    let (response, mut send) = ready.send_request(head, false)?;
    // The service may answer and close the stream before it reads the body (an unknown method,
    // a message over the limit): the send then fails, and the answer says what happened.
    let _ = send.send_data(Bytes::from(body), true);
    read_answer(response).await
}

/// A well-formed call of `request`: the whole answer.
pub async fn unary(
    client: &mut SendRequest<Bytes>,
    grpc: SocketAddr,
    request: &RateLimitRequest,
) -> Result<Answer, BoxError> {
    call_with(client, grpc, &[], false, request).await
}

/// A call of `request` with `extra` headers, its message flagged `compressed` (sent as is).
pub async fn call_with(
    client: &mut SendRequest<Bytes>,
    grpc: SocketAddr,
    extra: &[(&str, &str)],
    compressed: bool,
    request: &RateLimitRequest,
) -> Result<Answer, BoxError> {
    let head = headers(grpc, METHOD, "application/grpc", extra)?;
    call(client, head, frame(compressed, &request.encode_to_vec())).await
}

/// Checks that the connection still serves: a plain call on it is answered OK.
pub async fn still_serves(
    client: &mut SendRequest<Bytes>,
    grpc: SocketAddr,
) -> Result<(), BoxError> {
    let answer = unary(client, grpc, &request(&[("user", "ann")])).await?;
    let overall = answer.message()?.overall_code;
    if overall != super::tonic_checks::OK {
        return Err(format!("a plain call answered {overall}: {answer:?}").into());
    }
    Ok(())
}

/// Reads an answer to its end: headers, every DATA frame, and the trailers if any.
pub async fn read_answer(response: h2::client::ResponseFuture) -> Result<Answer, BoxError> {
    let response = response.await?;
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    let ended_with_headers = body.is_end_stream();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let trailers = if ended_with_headers {
        None
    } else {
        body.trailers().await?
    };
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body: bytes,
        trailers,
    })
}
