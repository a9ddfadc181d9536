//! The pieces of tests/proxy_dodges.rs: a client that writes exact bytes from a chosen
//! loopback address, and an upstream that records the exact bytes of every request head it
//! receives and answers each `200`.
//!
//! Every address of 127.0.0.0/8 is this machine's on Linux: a socket bound to `127.1.3.7`
//! before it connects reaches a listener on `127.0.0.1` and is seen coming from `127.1.3.7`,
//! so one test can be as many clients (and as many "proxies") as it needs.

#![allow(dead_code, unreachable_pub)]

pub mod fronts;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::proxy_support::BoxError;

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
/// [`request`] say `Connection: close`). Bounded by a minute: a bound on a hang, not a timing.
pub async fn exchange(from: IpAddr, to: SocketAddr, request: &[u8]) -> Result<Answer, BoxError> {
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    let mut stream = socket.connect(to).await?;
    stream.write_all(request).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        // A reset after the answer ends it as a close does.
        let _ = stream.read_to_end(&mut answer).await;
    })
    .await
    .map_err(|_| format!("{to} held the connection of {from} for a minute"))?;
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

/// An upstream that writes nothing but `200 ok` and records each request head byte for byte,
/// as it arrived (the request line and fields, to the blank line).
pub struct RecordingUpstream {
    pub address: SocketAddr,
    heads: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RecordingUpstream {
    /// Listens on a free loopback port, on the test's runtime.
    pub async fn start() -> Result<RecordingUpstream, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let upstream = RecordingUpstream {
            address: listener.local_addr()?,
            heads: Arc::default(),
        };
        let heads = Arc::clone(&upstream.heads);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&heads)));
            }
        });
        Ok(upstream)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The heads received since the last call (a request is recorded before it is answered:
    /// once its client has the answer, its head is here).
    pub fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.heads.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The request target of a recorded head (`/a` of `GET /a HTTP/1.1`), as bytes.
pub fn target_of(head: &[u8]) -> &[u8] {
    head.split(|&b| b == b' ').nth(1).unwrap_or_default()
}

/// Every value of field `name` in a recorded head, as bytes, in order.
pub fn values_of<'h>(head: &'h [u8], name: &str) -> Vec<&'h [u8]> {
    head.split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let (field_name, value) = line.split_at(colon);
            field_name
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| value[1..].trim_ascii())
        })
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The length a head announces (none: no body; the tests send none).
fn content_length(head: &[u8]) -> usize {
    values_of(head, "content-length")
        .first()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}

async fn serve(mut stream: TcpStream, heads: Arc<Mutex<Vec<Vec<u8>>>>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(at) = find(&buf, b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        let length = content_length(&head);
        while buf.len() < length {
            if !matches!(stream.read_buf(&mut buf).await, Ok(n) if n > 0) {
                return;
            }
        }
        buf.drain(..length);
        // HTTP/1.0 (nginx's default to its upstreams) or `Connection: close`: one request.
        let request_line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        let close = request_line.ends_with(b" HTTP/1.0")
            || values_of(&head, "connection")
                .iter()
                .any(|v| v.eq_ignore_ascii_case(b"close"));
        heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(head);
        let answer: &[u8] = if close {
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n"
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"
        };
        if stream.write_all(answer).await.is_err() || close {
            return;
        }
    }
}

/// The inside of an nginx `http {}` block's common part: `limit_req` answers 429 (nginx's
/// default is 503), and `upstream app` is `upstream`.
pub fn nginx_http(upstream: SocketAddr, rest: &str) -> String {
    format!("limit_req_status 429;\nupstream app {{ server {upstream}; }}\n{rest}")
}

/// Collects what went wrong, to report every failure of a table at once.
#[derive(Debug, Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn push(&mut self, failure: String) {
        self.0.push(failure);
    }

    /// Records `what` unless `got == expected`.
    pub fn check<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, got: T, expected: T) {
        if got != expected {
            self.0
                .push(format!("{what}: got {got:?}, expected {expected:?}"));
        }
    }

    /// Fails the test with every failure, one a line, and `context` after them.
    pub fn assert_none(self, context: &str) {
        assert!(
            self.0.is_empty(),
            "{} failure(s):\n{}\n{context}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}
