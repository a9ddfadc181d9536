//! The pieces of tests/proxy_framing.rs: a client that writes exact bytes to the proxy and
//! splits what comes back into answers, and the checks every vector ends with: the requests
//! the upstream received for it, and a next request that must be answered, on a new upstream
//! connection when the vector's was broken.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::proxy_support::raw_upstream::{RawUpstream, Received, find};
use crate::proxy_support::{BoxError, Failures, raw_exchange};

/// One answer as the client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// Its framing said where it ends, and all of it came: a client may take it for whole.
    pub whole: bool,
}

impl Answer {
    /// A whole answer of `status` with `body`.
    pub fn whole(status: u16, body: &[u8]) -> Answer {
        Answer {
            status,
            body: body.to_vec(),
            whole: true,
        }
    }

    /// An answer of `status` whose body stopped after `body`, short of its end.
    pub fn cut(status: u16, body: &[u8]) -> Answer {
        Answer {
            status,
            body: body.to_vec(),
            whole: false,
        }
    }
}

/// Answers as a table shows them: the status, the body when it has one, and `(cut)` when it
/// stopped short of its end.
pub fn shown(answers: &[Answer]) -> Vec<String> {
    answers
        .iter()
        .map(|answer| {
            let mut text = answer.status.to_string();
            if !answer.body.is_empty() {
                text.push(' ');
                text.push_str(&String::from_utf8_lossy(&answer.body));
            }
            if !answer.whole {
                text.push_str(" (cut)");
            }
            text
        })
        .collect()
}

/// Writes `sent` in one write on a new connection to `server`, reads until it closes the
/// connection (every vector's last request says `Connection: close`), and splits what came
/// into answers (`head`: they answer `HEAD` requests, and have no bodies).
pub async fn exchange(
    server: SocketAddr,
    sent: &[u8],
    head: bool,
) -> Result<Vec<Answer>, BoxError> {
    Ok(answers(&raw_exchange(server, &[sent]).await?, head))
}

/// The answers in `bytes`, as a client frames them: 1xx answers are skipped; the last one
/// may be cut short.
fn answers(mut bytes: &[u8], head: bool) -> Vec<Answer> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some(end) = find(bytes, b"\r\n\r\n").map(|at| at + 4) else {
            out.push(Answer::cut(status_of(bytes), b""));
            break;
        };
        let fields = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let status = status_of(bytes);
        bytes = &bytes[end..];
        if (100..200).contains(&status) {
            continue;
        }
        if head || status == 204 || status == 304 {
            out.push(Answer::whole(status, b""));
        } else if fields.contains("\r\ntransfer-encoding: chunked\r\n") {
            let (answer, rest) = chunked(status, bytes);
            out.push(answer);
            bytes = rest;
        } else if let Some(length) = content_length(&fields) {
            let whole = bytes.len() >= length;
            let body = &bytes[..length.min(bytes.len())];
            out.push(Answer {
                status,
                body: body.to_vec(),
                whole,
            });
            bytes = &bytes[body.len()..];
        } else {
            // Until the connection's end, which is its end.
            out.push(Answer::whole(status, bytes));
            break;
        }
    }
    out
}

fn status_of(head: &[u8]) -> u16 {
    head.get(9..12)
        .and_then(|code| std::str::from_utf8(code).ok()?.parse().ok())
        .unwrap_or(0)
}

fn content_length(fields: &str) -> Option<usize> {
    fields
        .lines()
        .find_map(|line| line.strip_prefix("content-length:")?.trim().parse().ok())
}

/// A chunked body's answer, and what follows it.
fn chunked(status: u16, mut bytes: &[u8]) -> (Answer, &[u8]) {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = find(bytes, b"\r\n") else {
            return (Answer::cut(status, &body), b"");
        };
        let size = std::str::from_utf8(&bytes[..line_end])
            .ok()
            .and_then(|line| usize::from_str_radix(line.split(';').next()?, 16).ok());
        let Some(size) = size else {
            return (Answer::cut(status, &body), b"");
        };
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            // No trailers from the proxy: the blank line ends it.
            return match bytes.strip_prefix(b"\r\n") {
                Some(rest) => (Answer::whole(status, &body), rest),
                None => (Answer::cut(status, &body), b""),
            };
        }
        if bytes.len() < size + 2 {
            body.extend_from_slice(&bytes[..size.min(bytes.len())]);
            return (Answer::cut(status, &body), b"");
        }
        body.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

/// What the upstream must have received for a vector: each request's target and body
/// (`None`: its body never came whole), in order.
pub type Forwarded = &'static [(&'static str, Option<&'static [u8]>)];

/// The upstream's requests since `since` (an index into [`RawUpstream::requests`]).
pub fn received_since(upstream: &RawUpstream, since: usize) -> Vec<Received> {
    upstream.requests().split_off(since)
}

/// Checks what the upstream received for the vector `what` (its requests from `since` on)
/// against `forwarded`, then sends a next request: it must be answered `200 ok`, reach the
/// upstream once, and, when the vector `broke` its upstream connection, on a connection none
/// of the vector's requests went on.
pub async fn check_upstream_and_next(
    failures: &mut Failures,
    (proxy, upstream): (SocketAddr, &RawUpstream),
    what: &str,
    since: usize,
    forwarded: &[(&str, Option<&[u8]>)],
    broke: bool,
) -> Result<(), BoxError> {
    let received = received_since(upstream, since);
    let got: Vec<(String, Option<Vec<u8>>)> = received
        .iter()
        .map(|r| (r.target(), r.body.clone()))
        .collect();
    let expected: Vec<(String, Option<Vec<u8>>)> = forwarded
        .iter()
        .map(|&(target, body)| (target.to_owned(), body.map(<[u8]>::to_vec)))
        .collect();
    if got != expected {
        failures.push(format!(
            "{what}: the upstream received {got:?} (requests per connection: {:?}), \
             expected {expected:?}",
            per_connection(&received)
        ));
    }
    // Not idempotent: a request written on a dead connection would not be sent again, and
    // would fail rather than hide.
    let next =
        b"POST /next HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnext";
    let since_next = upstream.requests().len();
    let answers = exchange(proxy, next, false).await?;
    failures.check(
        &format!("{what}: the next request's answers"),
        shown(&answers),
        vec!["200 ok".to_owned()],
    );
    let after = received_since(upstream, since_next);
    let on_new = after.first().map(|r| r.connection);
    failures.check(
        &format!("{what}: the requests the next one became upstream"),
        after.iter().map(Received::target).collect::<Vec<_>>(),
        vec!["/next".to_owned()],
    );
    if broke && received.iter().any(|r| Some(r.connection) == on_new) {
        failures.push(format!(
            "{what}: the next request went on the broken upstream connection {on_new:?}"
        ));
    }
    Ok(())
}

/// How many requests each connection carried.
fn per_connection(received: &[Received]) -> BTreeMap<usize, usize> {
    let mut counts = BTreeMap::new();
    for request in received {
        *counts.entry(request.connection).or_default() += 1;
    }
    counts
}
