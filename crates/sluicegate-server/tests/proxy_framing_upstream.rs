//! How `sluicegate proxy` frames what its upstream answers (issue 30): each vector is an
//! answer written byte for byte by the upstream (`proxy_support::raw_upstream`), and the
//! client, on a raw socket, must never take a cut answer for whole, never get the bytes of one
//! answer as the next one's, and the next request must go on a new upstream connection when
//! the answer broke its own. The clients' side (requests) is tests/proxy_framing.rs.

mod framing_support;
mod proxy_support;

use std::future::Future;
use std::pin::Pin;

use framing_support::{check_upstream_and_next, exchange, shown};
use proxy_support::raw_upstream::{Exchange, Next, RawUpstream, Reply};
use proxy_support::{BoxError, Failures, PASS_ALL, ProxyProcess};

type TestResult = Result<(), BoxError>;

/// One upstream answer, to the request that asks for it, and what the client gets.
struct Vector {
    name: &'static str,
    /// The request target; the upstream answers it with `reply`.
    path: &'static str,
    reply: Reply,
    /// The client's request (its last field, `Connection: close`, and any body follow).
    request: &'static str,
    body: &'static [u8],
    /// The client's answers, as `shown`.
    answers: &'static [&'static str],
    /// The upstream connection cannot carry another request.
    broke: bool,
}

/// A whole answer, as an upstream trying to slip one in after another would write it.
macro_rules! smuggled {
    () => {
        "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nsmuggled"
    };
}

/// Answers `early` at once, reads nothing of the body (it is recorded as bytes, and not
/// framed), and holds the connection until the proxy closes it.
fn early(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        if exchange
            .write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nearly")
            .await
        {
            exchange.read_to_end().await;
        }
        Next::Close
    })
}

/// More than the proxy reads whole before it sends a request (16 KiB): streamed.
static LONG_BODY: [u8; 100_000] = [b'b'; 100_000];

fn vectors() -> Vec<Vector> {
    let get = "GET {path} HTTP/1.1\r\nhost: x\r\n";
    vec![
        Vector {
            name: "a body cut short, then the upstream closes",
            path: "/cut",
            reply: Reply::BytesThenClose(
                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this",
            ),
            request: get,
            body: b"",
            answers: &["200 only this (cut)"],
            broke: true,
        },
        Vector {
            // nginx answers 502 too ("upstream sent Content-Length and Transfer-Encoding").
            name: "Content-Length and Transfer-Encoding",
            path: "/length-and-chunked",
            reply: Reply::Bytes(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n\
                  5\r\nhello\r\n0\r\n\r\n",
            ),
            request: get,
            body: b"",
            answers: &["502"],
            broke: true,
        },
        Vector {
            // Read until the close, the client would get gzip-coded bytes with nothing saying
            // so (the field is hop-by-hop); nginx answers 502 too.
            name: "Transfer-Encoding: gzip without chunked",
            path: "/gzip-coded",
            reply: Reply::BytesThenClose(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nnot really gzip",
            ),
            request: get,
            body: b"",
            answers: &["502"],
            broke: true,
        },
        Vector {
            name: "a bad chunk size after a first chunk",
            path: "/bad-chunk",
            reply: Reply::Bytes(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n",
            ),
            request: get,
            body: b"",
            answers: &["200 hello (cut)"],
            broke: true,
        },
        Vector {
            // hyper's client skips interim answers; nginx 1.22 passes none on either.
            name: "100 and 103, then 200",
            path: "/interim",
            reply: Reply::Bytes(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
                  HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            ),
            request: get,
            body: b"",
            answers: &["200 ok"],
            broke: false,
        },
        Vector {
            name: "204, then a body",
            path: "/no-content",
            reply: Reply::Bytes(concat!("HTTP/1.1 204 No Content\r\n\r\n", smuggled!()).as_bytes()),
            request: get,
            body: b"",
            answers: &["204"],
            broke: true,
        },
        Vector {
            name: "304, then a body",
            path: "/not-modified",
            reply: Reply::Bytes(
                concat!("HTTP/1.1 304 Not Modified\r\n\r\n", smuggled!()).as_bytes(),
            ),
            request: get,
            body: b"",
            answers: &["304"],
            broke: true,
        },
        Vector {
            // The length a HEAD answer gives is the GET's: no body follows it.
            name: "a HEAD answer, then a body",
            path: "/head",
            reply: Reply::Bytes(
                concat!("HTTP/1.1 200 OK\r\ncontent-length: 46\r\n\r\n", smuggled!()).as_bytes(),
            ),
            request: "HEAD {path} HTTP/1.1\r\nhost: x\r\n",
            body: b"",
            answers: &["200"],
            broke: true,
        },
        Vector {
            // The rest of the body still goes up after the answer: the upstream would read
            // it as a request, so the connection ends with this exchange.
            name: "an answer before the request body was sent",
            path: "/early",
            reply: Reply::With(early),
            request: "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n",
            body: &LONG_BODY,
            answers: &["200 early"],
            broke: true,
        },
        Vector {
            name: "Connection: close, then the upstream closes",
            path: "/close",
            reply: Reply::BytesThenClose(
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
            ),
            request: get,
            body: b"",
            answers: &["200 ok"],
            broke: true,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_answer_is_framed_once_and_a_broken_connection_is_not_reused() -> TestResult
{
    let vectors = vectors();
    let upstream =
        RawUpstream::scripted(vectors.iter().map(|v| (v.path, v.reply)).collect()).await?;
    // One worker: one pool, so that a broken connection left in it would be the next one used.
    let proxy = ProxyProcess::start(&upstream.url(), PASS_ALL, &["--workers", "1"])?;
    let mut failures = Failures::default();
    for vector in &vectors {
        let what = vector.name;
        let since = upstream.requests().len();
        let mut sent = vector.request.replace("{path}", vector.path).into_bytes();
        sent.extend_from_slice(b"connection: close\r\n\r\n");
        sent.extend_from_slice(vector.body);
        let head = vector.request.starts_with("HEAD ");
        let answers = exchange(proxy.address, &sent, head).await?;
        let mut got = shown(&answers);
        // The proxy's own answers say why at length: the status is what matters here.
        for text in &mut got {
            if text.starts_with("502 ") {
                text.truncate(3);
            }
        }
        failures.check(
            &format!("{what}: the client's answers"),
            got,
            vector.answers.iter().map(|s| (*s).to_owned()).collect(),
        );
        // The upstream framed exactly one request (its body unread when it answered early).
        let body = (vector.path != "/early").then_some(&b""[..]);
        let one_request = [(vector.path, body)];
        let forwarded: &[(&str, Option<&[u8]>)] = &one_request;
        check_upstream_and_next(
            &mut failures,
            (proxy.address, &upstream),
            what,
            since,
            forwarded,
            vector.broke,
        )
        .await?;
    }
    failures.assert_none(&format!("proxy log:\n{}", proxy.log_text()));
    Ok(())
}
