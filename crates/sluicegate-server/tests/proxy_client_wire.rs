//! `sluicegate proxy`'s HTTP/1.1 server, against a client that writes its requests byte for
//! byte: pipelined requests answered in order, chunked request bodies, `Expect: 100-continue`,
//! HTTP/1.0 keep-alive, a denied request's unread body, and the heads that must be refused
//! (RFC 9112 section 6.3) with a status that says why and the connection closed. The parser's
//! own cases are unit tests of `sluicegate_http::proxy::h1`.

mod proxy_support;

use proxy_support::{BoxError, ProxyProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type TestResult = Result<(), BoxError>;

const RULES: &str = "limits:
  once: { key: peer_ip, spec: \"gcra:rate=1/h,burst=1\" }
routes:
  - { prefix: /limited, limits: [once], status: 429 }
  - { prefix: / }
";

async fn proxy() -> Result<(Upstream, ProxyProcess), BoxError> {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), RULES, &["--workers", "1"])?;
    Ok((upstream, proxy))
}

/// Writes `wire` a few bytes at a time, so that every head and body arrives in pieces.
async fn send_in_pieces(stream: &mut TcpStream, wire: &[u8]) -> TestResult {
    for piece in wire.chunks(3) {
        stream.write_all(piece).await?;
        stream.flush().await?;
    }
    Ok(())
}

/// A response as read off the wire.
#[derive(Debug)]
struct Answer {
    head: String,
    body: String,
}

impl Answer {
    fn status(&self) -> &str {
        self.head.get(9..12).unwrap_or_default()
    }
}

/// Reads one response whose body has a Content-Length (none if `to_head`); `None` at the end
/// of input.
async fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>, to_head: bool) -> Option<Answer> {
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length = if to_head {
        0
    } else {
        head.lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|value| value.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    while buf.len() < end + length {
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    let body = String::from_utf8_lossy(&buf[end..end + length]).into_owned();
    buf.drain(..end + length);
    Some(Answer { head, body })
}

/// Whether the proxy closes the connection (after what `buf` holds).
async fn closes(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    matches!(stream.read_to_end(&mut rest).await, Ok(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_in_pieces_are_answered_in_order() -> TestResult {
    let (_upstream, proxy) = proxy().await?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    send_in_pieces(
        &mut stream,
        b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /count HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n\
          PUT /count HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          HEAD /third HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await?;
    let mut buf = Vec::new();
    let first = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no first answer")?;
    assert_eq!(first.status(), "200", "{first:?}");
    assert!(first.body.contains("\"path\":\"/first\""), "{first:?}");
    let chunked = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no second answer")?;
    assert_eq!(
        (chunked.status(), chunked.body.as_str()),
        ("200", "11"),
        "{chunked:?}"
    );
    let length = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no third answer")?;
    assert_eq!(
        (length.status(), length.body.as_str()),
        ("200", "3"),
        "{length:?}"
    );
    let head = read_answer(&mut stream, &mut buf, true)
        .await
        .ok_or("no fourth answer")?;
    assert_eq!(head.status(), "200", "{head:?}");
    assert!(
        head.head.to_ascii_lowercase().contains("content-length:"),
        "{head:?}"
    );
    let last = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no last answer")?;
    assert!(last.body.contains("\"path\":\"/last\""), "{last:?}");
    assert!(last.head.contains("connection: close"), "{last:?}");
    assert!(
        closes(&mut stream).await,
        "the connection stays open after Connection: close"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_when_the_body_is_read() -> TestResult {
    let (_upstream, proxy) = proxy().await?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    stream
        .write_all(
            b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .await?;
    let mut buf = Vec::new();
    let interim = read_answer(&mut stream, &mut buf, true)
        .await
        .ok_or("no 100 Continue")?;
    assert_eq!(interim.status(), "100", "{interim:?}");
    stream.write_all(b"hello").await?;
    let answer = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no answer")?;
    assert_eq!(
        (answer.status(), answer.body.as_str()),
        ("200", "5"),
        "{answer:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_requests_body_is_skipped_and_the_connection_kept() -> TestResult {
    let (_upstream, proxy) = proxy().await?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    let mut buf = Vec::new();
    for expected in ["200", "429"] {
        send_in_pieces(
            &mut stream,
            b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
        )
        .await?;
        let answer = read_answer(&mut stream, &mut buf, false)
            .await
            .ok_or("no answer")?;
        assert_eq!(answer.status(), expected, "{answer:?}");
        assert!(!answer.head.contains("connection: close"), "{answer:?}");
    }
    // The denied body was skipped, not read as the next head.
    stream
        .write_all(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    let after = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no answer after")?;
    assert!(after.body.contains("\"path\":\"/after\""), "{after:?}");

    // A denied body that has not come (the client waits for 100 Continue) closes instead.
    stream
        .write_all(b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .await?;
    let denied = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no denial")?;
    assert_eq!(denied.status(), "429", "{denied:?}");
    assert!(denied.head.contains("connection: close"), "{denied:?}");
    assert!(closes(&mut stream).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_keeps_the_connection_only_when_asked() -> TestResult {
    let (_upstream, proxy) = proxy().await?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    let mut buf = Vec::new();
    for _ in 0..2 {
        stream
            .write_all(b"GET /kept HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await?;
        let answer = read_answer(&mut stream, &mut buf, false)
            .await
            .ok_or("no answer")?;
        assert!(answer.head.contains("connection: keep-alive"), "{answer:?}");
        assert!(answer.body.contains("\"path\":\"/kept\""), "{answer:?}");
    }
    stream.write_all(b"GET /once HTTP/1.0\r\n\r\n").await?;
    let answer = read_answer(&mut stream, &mut buf, false)
        .await
        .ok_or("no answer")?;
    assert!(answer.body.contains("\"path\":\"/once\""), "{answer:?}");
    assert!(closes(&mut stream).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_that_could_be_read_two_ways_are_refused_and_the_connection_closed() -> TestResult {
    let (_upstream, proxy) = proxy().await?;
    let long_field = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    let cases: [(&[u8], &str, &str); 6] = [
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            "400",
            "both Transfer-Encoding and Content-Length",
        ),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "501", "other than chunked"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "400", "disagree"),
        (b"GET / HTTP/1.1\r\n\r\n", "400", "without Host"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n folded: no\r\n\r\n", "400", "malformed"),
        (long_field.as_bytes(), "431", "longer than 64 KiB"),
    ];
    for (wire, status, reason) in cases {
        let mut stream = TcpStream::connect(proxy.address).await?;
        // A valid request after it must not be answered: nothing after a refusal is read.
        let mut both = wire.to_vec();
        both.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(&both).await?;
        let mut buf = Vec::new();
        let answer = read_answer(&mut stream, &mut buf, false)
            .await
            .ok_or("no answer")?;
        assert_eq!(answer.status(), status, "{answer:?}");
        assert!(answer.body.contains(reason), "{answer:?}");
        assert!(answer.head.contains("connection: close"), "{answer:?}");
        assert!(!String::from_utf8_lossy(&buf).contains("smuggled"));
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
        assert!(
            !String::from_utf8_lossy(&rest).contains("smuggled"),
            "{rest:?}"
        );
    }
    Ok(())
}
