//! The pieces of tests/proxy_dodges.rs: a client that writes exact bytes from a chosen
//! loopback address (the upstream that records the exact bytes of every request head it
//! receives is `proxy_support::raw_upstream`).
//!
//! Every address of 127.0.0.0/8 is this machine's on Linux: a socket bound to `127.1.3.7`
//! before it connects reaches a listener on `127.0.0.1` and is seen coming from `127.1.3.7`,
//! so one test can be as many clients (and as many "proxies") as it needs.

#![allow(dead_code, unreachable_pub)]

pub mod fronts;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::net::TcpSocket;

use crate::proxy_support::{BoxError, exchange_on};

/// What a server answered, as a client reads it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status of the first (and only) response.
    pub status: u16,
    /// The whole answer, lossily as text (for messages).
    pub text: String,
}

impl Answer {
    /// The body (what follows the head).
    pub fn body(&self) -> &str {
        self.text
            .split_once("\r\n\r\n")
            .map_or("", |(_, body)| body)
    }
}

/// How a request was answered, for tables of expectations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 200: passed to the upstream.
    Pass,
    /// 429: a limit denied it.
    Deny,
    /// 400: refused as malformed.
    Bad,
    /// Anything else.
    Other(u16),
}

impl Outcome {
    pub fn of(status: u16) -> Outcome {
        match status {
            200 => Outcome::Pass,
            429 => Outcome::Deny,
            400 => Outcome::Bad,
            other => Outcome::Other(other),
        }
    }
}

/// `127.a.b.c`.
pub const fn lo(a: u8, b: u8, c: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, a, b, c))
}

/// Writes `request` as it is on a new connection from `from` (port chosen by the kernel) to
/// `to`, and reads the answer until the server closes the connection (requests made by
/// [`request`] say `Connection: close`).
pub async fn exchange(from: IpAddr, to: SocketAddr, request: &[u8]) -> Result<Answer, BoxError> {
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    let answer = exchange_on(socket.connect(to).await?, &[request]).await?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{to} answered {from} with no status line: {text:?}"))?;
    Ok(Answer { status, text })
}

/// A `GET` request for `target`, with `fields` (each a whole field line without its CRLF:
/// `b"Host: x"`, written as they are, bytes that are not text included), then
/// `Connection: close`.
pub fn request(target: &[u8], fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for field in fields {
        out.extend_from_slice(field);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// `name: value` as one field line.
pub fn field(name: &str, value: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(name.len() + 2 + value.len());
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b": ");
    line.extend_from_slice(value);
    line
}

/// `bytes` as printable text for messages (`\xff` for a byte that is not ASCII).
pub fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// The inside of an nginx `http {}` block's common part: `limit_req` answers 429 (nginx's
/// default is 503), and `upstream app` is `upstream`.
pub fn nginx_http(upstream: SocketAddr, rest: &str) -> String {
    format!("limit_req_status 429;\nupstream app {{ server {upstream}; }}\n{rest}")
}
