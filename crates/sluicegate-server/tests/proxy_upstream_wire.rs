//! `sluicegate proxy`'s client to its upstream, against an upstream that writes its responses
//! byte for byte: the framings of RFC 9112 section 6.3 (chunked, length, until close, none),
//! interim responses, keep-alive reuse, which requests are sent again, an upstream that closes
//! idle connections or answers before reading the body, and responses that must be refused.
//! The parser's own cases (every framing rule, bad heads, chunked in any pieces) are unit
//! tests of `sluicegate_server::proxy::upstream`.

mod proxy_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use proxy_support::raw_upstream::{Exchange, Next, OK, RawUpstream, Reply, find};
use proxy_support::{BoxError, ProxyProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type TestResult = Result<(), BoxError>;

const RULES: &str = "routes:\n  - { prefix: / }\n";

/// The upstream's answers written out by hand, each for the path that names it.
fn scripts() -> Vec<(&'static str, Reply)> {
    vec![
        ("/chunked", Reply::Bytes(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n")),
        ("/until-close", Reply::BytesThenClose(b"HTTP/1.1 200 OK\r\n\r\nall of it, until the end")),
        ("/head-length", Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n")),
        ("/no-content", Reply::Bytes(b"HTTP/1.1 204 No Content\r\n\r\n")),
        ("/continue", Reply::Bytes(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\ncontinued")),
        ("/close-after", Reply::BytesThenClose(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")),
        ("/conflict", Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok")),
        ("/cut", Reply::BytesThenClose(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")),
        ("/drop-next", Reply::With(drop_next)),
        ("/duplex", Reply::With(duplex)),
        ("/early-chunked", Reply::With(early_chunked)),
        ("/read-then-silent", Reply::With(read_then_silent)),
        ("/ignore-body", Reply::With(ignore_body)),
        ("/early", Reply::With(early)),
        ("/stall", Reply::With(stall)),
    ]
}

/// Answers, then reads the next request on the connection and closes it unanswered (as an
/// upstream closing an idle connection just as a request comes).
fn drop_next(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        if exchange.read_body().await.is_some() && exchange.write(OK).await {
            exchange.next_head().await;
        }
        Next::Close
    })
}

/// Answers at once, then reads the whole body, then ends the answer.
fn early_chunked(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        if !exchange.write(head).await || exchange.read_body().await.is_none() {
            return Next::Close;
        }
        exchange.write(b"5\r\nearly\r\n0\r\n\r\n").await;
        Next::Serve
    })
}

/// Reads the whole body, then never answers, holding the connection.
fn read_then_silent(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        if exchange.read_body().await.is_some() {
            tokio::time::sleep(Duration::from_secs(300)).await;
        }
        Next::Close
    })
}

/// Reads nothing of the body and never answers, holding the connection.
fn ignore_body(_: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        tokio::time::sleep(Duration::from_secs(300)).await;
        Next::Close
    })
}

/// Answers 413 before reading the body, and closes once the proxy has sent the rest (read,
/// so that closing does not reset the connection).
fn early(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        let answer = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo big\n";
        if exchange.write(answer).await {
            exchange.read_to_end().await;
        }
        Next::Close
    })
}

/// Sends part of a body, then holds the connection open, sending nothing more, until the
/// proxy closes it.
fn stall(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nthen nothing";
        if exchange.read_body().await.is_some() && exchange.write(answer).await {
            exchange.read_to_end().await;
        }
        Next::Close
    })
}

/// Answers at once with 64 MiB while it reads a chunked request body at the same time (a
/// full-duplex upstream, as a streaming transform is), then ends the answer with `read` once
/// the body has all come.
fn duplex(exchange: &mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + '_>> {
    Box::pin(async move {
        let (stream, buf) = exchange.parts();
        let (mut reader, mut writer) = stream.split();
        let reading = async move {
            while find(buf, b"0\r\n\r\n").is_none() {
                // Only the end matters: keep a tail long enough to hold the last chunk's line.
                let keep = buf.len().saturating_sub(8);
                buf.drain(..keep);
                if !matches!(reader.read_buf(buf).await, Ok(n) if n > 0) {
                    return false;
                }
            }
            true
        };
        let writing = async {
            let block = vec![b'z'; 1 << 20];
            let mut framed = format!("{:x}\r\n", block.len()).into_bytes();
            framed.extend_from_slice(&block);
            framed.extend_from_slice(b"\r\n");
            writer
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await?;
            for _ in 0..64 {
                writer.write_all(&framed).await?;
            }
            Ok::<_, std::io::Error>(writer)
        };
        let (read, written) = tokio::join!(reading, writing);
        if let Ok(mut writer) = written {
            let last: &[u8] = if read {
                b"4\r\nread\r\n0\r\n\r\n"
            } else {
                b"0\r\n\r\n"
            };
            let _ = writer.write_all(last).await;
        }
        Next::Close
    })
}

/// A byte-for-byte upstream and a proxy of one worker in front of it (one pool, so that its
/// connections to the upstream can be counted), started with `extra` arguments.
async fn wire_proxy(extra: &[&str]) -> Result<(RawUpstream, ProxyProcess), BoxError> {
    let upstream = RawUpstream::scripted(scripts()).await?;
    let mut args = vec!["--workers", "1"];
    args.extend_from_slice(extra);
    let proxy = ProxyProcess::start(&upstream.url(), RULES, &args)?;
    Ok((upstream, proxy))
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_framing_passes_and_the_connection_is_kept_when_it_can_be() -> TestResult {
    let (upstream, proxy) = wire_proxy(&[]).await?;
    let c = client();

    let chunked = c.get(proxy.url("/chunked")).send().await?.text().await?;
    assert_eq!(chunked, "hello world");
    let head = c.head(proxy.url("/head-length")).send().await?;
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "1234");
    assert_eq!(head.bytes().await?.len(), 0);
    assert_eq!(c.get(proxy.url("/no-content")).send().await?.status(), 204);
    let interim = c.get(proxy.url("/continue")).send().await?;
    assert_eq!(interim.status(), 200);
    assert_eq!(interim.text().await?, "continued");
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    // All of it on one upstream connection.
    assert_eq!(upstream.connections(), 1);

    // A body that ends when the connection does: whole, and the next request on a new one.
    let until_close = c
        .get(proxy.url("/until-close"))
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(until_close, "all of it, until the end");
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(upstream.connections(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_upstream_closed_is_not_used_for_the_next_request() -> TestResult {
    let (_upstream, proxy) = wire_proxy(&[]).await?;
    let c = client();
    for _ in 0..5 {
        // The upstream closes each connection after its response, saying nothing.
        let response = c.get(proxy.url("/close-after")).send().await?;
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await?, "ok");
    }
    for method in [reqwest::Method::GET, reqwest::Method::POST] {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let response = c.request(method, proxy.url("/close-after")).send().await?;
        assert_eq!(response.status(), 200);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_idempotent_request_nothing_answered_is_sent_again() -> TestResult {
    let (upstream, proxy) = wire_proxy(&["--client-body-buffer-size", "8"]).await?;
    let c = client();

    // A GET the upstream drops unanswered is sent again on a new connection.
    assert_eq!(c.get(proxy.url("/drop-next")).send().await?.status(), 200);
    assert_eq!(c.get(proxy.url("/get")).send().await?.text().await?, "ok");
    assert_eq!(upstream.requests_to("/get"), 2);
    assert_eq!(upstream.connections(), 2);

    // A POST is not: the upstream may have acted on it.
    assert_eq!(c.get(proxy.url("/drop-next")).send().await?.status(), 200);
    assert_eq!(c.post(proxy.url("/post")).send().await?.status(), 502);
    assert_eq!(upstream.requests_to("/post"), 1);

    // A PUT whose small body was read whole before it was sent is: the proxy still has it.
    assert_eq!(c.get(proxy.url("/drop-next")).send().await?.status(), 200);
    let put = c.put(proxy.url("/put")).body("a body").send().await?;
    assert_eq!(put.status(), 200);
    assert_eq!(upstream.requests_to("/put"), 2);
    // So is one whose body came without a length and ended within the buffer.
    assert_eq!(c.get(proxy.url("/drop-next")).send().await?.status(), 200);
    let parts: Vec<Result<&'static str, std::io::Error>> = vec![Ok("short")];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let put = c.put(proxy.url("/short")).body(streamed).send().await?;
    assert_eq!(put.status(), 200);
    assert_eq!(upstream.requests_to("/short"), 2);

    // Not one whose body was streamed (longer than the buffer): what was read of it cannot be
    // read again.
    assert_eq!(c.get(proxy.url("/drop-next")).send().await?.status(), 200);
    let parts: Vec<Result<&'static str, std::io::Error>> = vec![Ok("a streamed body")];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let put = c.put(proxy.url("/streamed")).body(streamed).send().await?;
    assert_eq!(put.status(), 502);
    assert_eq!(upstream.requests_to("/streamed"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_answered_before_its_request_body_was_sent_is_not_used_again() -> TestResult {
    let (upstream, proxy) = wire_proxy(&[]).await?;
    let c = client();
    // The upstream reads the rest of the body while its answer is open (as an echo does): the
    // rest goes on, and the answer ends.
    let big = vec![b'x'; 16 << 20];
    let early = c.post(proxy.url("/early-chunked")).body(big).send().await?;
    assert_eq!(early.status(), 200);
    assert_eq!(early.text().await?, "early");
    // What that upstream made of the body is its own: the next request goes on a new connection.
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(upstream.connections(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_an_early_answer_came_for_goes_on_while_the_client_reads_nothing() -> TestResult {
    let (_upstream, proxy) = wire_proxy(&[]).await?;
    // 32 MiB up while 64 MiB come down: more than the sockets on the way can hold, so the
    // upload ends only if the proxy writes it whether or not the answer is being read.
    let taken = Arc::new(tokio::sync::Notify::new());
    let last_taken = taken.clone();
    let chunks = (0..32).map(move |i| {
        if i == 31 {
            last_taken.notify_one();
        }
        Ok::<_, std::io::Error>(vec![b'y'; 1 << 20])
    });
    let body = reqwest::Body::wrap_stream(tokio_stream::iter(chunks));
    let response = client()
        .post(proxy.url("/duplex"))
        .body(body)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    // A bound on a hang, not a timing: the upload either ends or never does.
    tokio::time::timeout(Duration::from_secs(120), taken.notified())
        .await
        .map_err(|_| "the upload stalled while the answer was not being read")?;
    let answer = response.bytes().await?;
    assert_eq!(answer.len(), (64 << 20) + 4);
    assert!(answer.ends_with(b"read"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_upstream_stops_sending_is_cut_off_after_the_upstream_timeout() -> TestResult {
    let (upstream, proxy) = wire_proxy(&["--upstream-timeout", "300ms"]).await?;
    // A bound on a hang, not a timing: without the proxy's wait between reads, the body never
    // ends.
    let outcome = tokio::time::timeout(Duration::from_secs(60), async {
        let response = client().get(proxy.url("/stall")).send().await?;
        response.bytes().await
    })
    .await
    .map_err(|_| "the body of a stalled upstream never ended")?;
    assert!(outcome.is_err(), "{outcome:?}");
    // The next request is served, on a new connection.
    assert_eq!(
        client().get(proxy.url("/")).send().await?.text().await?,
        "ok"
    );
    assert_eq!(upstream.connections(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_answered_501_and_never_reaches_the_upstream() -> TestResult {
    let (upstream, proxy) = wire_proxy(&[]).await?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    stream
        .write_all(b"CONNECT app.example:443 HTTP/1.1\r\nhost: app.example:443\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while find(&answer, b"tunnel (CONNECT)\n").is_none() {
            if !matches!(stream.read_buf(&mut answer).await, Ok(n) if n > 0) {
                break;
            }
        }
    })
    .await
    .map_err(|_| "no answer to CONNECT")?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 501 "), "{answer}");
    assert_eq!(upstream.connections(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stops_coming_is_answered_408() -> TestResult {
    // Streamed (no body is read whole first), so that the request is on its way upstream.
    let args = [
        "--client-body-timeout",
        "300ms",
        "--client-body-buffer-size",
        "0",
    ];
    let (upstream, proxy) = wire_proxy(&args).await?;
    let head = "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n";
    let answer = proxy.raw_exchange(&[head.as_bytes(), b"abc"]).await?;
    let why = "nothing more of the request body came for 300ms";
    let metric = "sluicegate_proxy_client_body_timeouts_total";
    assert_cut_off(&proxy, &upstream, &answer, "408", why, metric).await
}

/// Checks that `answer` is the proxy's `status`, saying `why`, counted once in `metric`, and
/// that the upstream connection went with the request: the next one takes a new connection.
async fn assert_cut_off(
    proxy: &ProxyProcess,
    upstream: &RawUpstream,
    answer: &str,
    status: &str,
    why: &str,
    metric: &str,
) -> TestResult {
    assert!(
        answer.starts_with(&format!("HTTP/1.1 {status} ")),
        "{answer}"
    );
    assert!(answer.contains(why), "{answer}");
    assert_eq!(proxy.metric(metric).await?, 1);
    assert_eq!(
        client().get(proxy.url("/")).send().await?.text().await?,
        "ok"
    );
    assert_eq!(upstream.connections(), 2);
    Ok(())
}

/// One request an hour, for everything: a request the bound on bodies refuses must not spend it.
const ONE_AN_HOUR: &str = "limits:\n  one: { key: global, spec: \"gcra:rate=1/h,burst=1\" }\n\
                           routes:\n  - { prefix: /, limits: [one] }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_announced_longer_than_the_bound_is_413_before_any_limit() -> TestResult {
    let upstream = RawUpstream::scripted(scripts()).await?;
    let args = ["--workers", "1", "--client-max-body-size", "1k"];
    let proxy = ProxyProcess::start(&upstream.url(), ONE_AN_HOUR, &args)?;
    // Refused on its head alone: the client need not send the body.
    let head = "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1025\r\n\r\n";
    let answer = proxy.raw_exchange(&[head.as_bytes()]).await?;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("longer than 1024 bytes"), "{answer}");
    // h2 announces its length the same way.
    let tcp = TcpStream::connect(proxy.address).await?;
    let (mut h2, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let request = axum::http::Request::post(proxy.url("/"))
        .header("content-length", "5000")
        .body(())?;
    let (response, _body) = h2.send_request(request, false)?;
    assert_eq!(response.await?.status(), 413);
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_client_body_too_large_total")
            .await?,
        2
    );
    assert_eq!(upstream.connections(), 0);
    // Neither spent the one request an hour: a body of exactly the bound takes it.
    let c = client();
    let at_bound = c.post(proxy.url("/")).body(vec![b'x'; 1024]).send().await?;
    assert_eq!(at_bound.status(), 200);
    let spent = c.post(proxy.url("/")).body("x").send().await?;
    assert_eq!(spent.status(), 429);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_length_that_grows_past_the_bound_is_413_and_cut() -> TestResult {
    // Streamed after its first 512 bytes.
    let args = [
        "--client-max-body-size",
        "1k",
        "--client-body-buffer-size",
        "512",
    ];
    let (upstream, proxy) = wire_proxy(&args).await?;
    // Within the bound, a chunked body passes whole.
    let parts: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b'a'; 600]), Ok(vec![b'b'; 424])];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let response = client().post(proxy.url("/")).body(streamed).send().await?;
    assert_eq!(response.status(), 200);
    // Past it, and never ended: the upstream (which waits for the last chunk) sees its
    // connection closed, and the client gets a 413.
    let head = "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunk = format!("258\r\n{}\r\n", "c".repeat(600));
    let answer = proxy
        .raw_exchange(&[head.as_bytes(), chunk.as_bytes(), chunk.as_bytes()])
        .await?;
    let why = "longer than 1024 bytes";
    let metric = "sluicegate_proxy_client_body_too_large_total";
    assert_cut_off(&proxy, &upstream, &answer, "413", why, metric).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_is_read_whole_before_the_request_goes_upstream() -> TestResult {
    let (upstream, proxy) = wire_proxy(&["--client-body-buffer-size", "10"]).await?;
    // A body of the buffer's size, and then one a byte longer, each half sent.
    let mut small = TcpStream::connect(proxy.address).await?;
    small
        .write_all(b"POST /small HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
        .await?;
    let mut long = TcpStream::connect(proxy.address).await?;
    long.write_all(b"POST /long HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\nabc")
        .await?;
    // The longer one is streamed: its request reaches the upstream before its body ends.
    proxy_support::eventually("the streamed request reaches the upstream", || async {
        Ok(upstream.requests_to("/long") == 1)
    })
    .await?;
    // The smaller one, sent first, is still being read from its client.
    assert_eq!(upstream.requests_to("/small"), 0);
    assert_eq!(upstream.connections(), 1);
    for (stream, rest) in [(&mut small, &b"defghij"[..]), (&mut long, &b"defghijk"[..])] {
        stream.write_all(rest).await?;
        let mut answer = Vec::new();
        proxy_support::read_past(stream, &mut answer, b"\r\n\r\nok")
            .await
            .ok_or("no answer")?;
        assert!(answer.starts_with(b"HTTP/1.1 200 "));
    }
    assert_eq!(upstream.requests_to("/small"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_that_stops_coming_is_answered_408_and_never_reaches_the_upstream()
-> TestResult {
    let (upstream, proxy) = wire_proxy(&["--client-body-timeout", "300ms"]).await?;
    let head = "POST /stops HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n";
    let answer = proxy.raw_exchange(&[head.as_bytes(), b"abc"]).await?;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_client_body_timeouts_total")
            .await?,
        1
    );
    assert_eq!(upstream.connections(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_request_body_that_stops_coming_is_answered_408() -> TestResult {
    // Read whole first (the default for a short body), and streamed.
    for buffer in ["16k", "0"] {
        let args = [
            "--client-body-timeout",
            "300ms",
            "--client-body-buffer-size",
            buffer,
        ];
        let (upstream, proxy) = wire_proxy(&args).await?;
        let tcp = TcpStream::connect(proxy.address).await?;
        let (mut h2, connection) = h2::client::handshake(tcp).await?;
        tokio::spawn(connection);
        let request = axum::http::Request::post(proxy.url("/"))
            .header("content-length", "10")
            .body(())?;
        let (response, mut body) = h2.send_request(request, false)?;
        body.send_data(bytes::Bytes::from_static(b"abc"), false)?;
        // A bound on a hang, not a timing: the stream held open, nothing more sent.
        let response = tokio::time::timeout(Duration::from_secs(60), response)
            .await
            .map_err(|_| "no answer to an h2 request whose body stopped")??;
        assert_eq!(response.status(), 408, "buffer {buffer}");
        assert_eq!(upstream.connections(), usize::from(buffer == "0"));
        drop(body);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_client_breaks_off_is_not_counted_as_the_upstreams_failure() -> TestResult {
    // Read whole first, and streamed: the client closes its side in the middle of the body.
    for buffer in ["16k", "0"] {
        let (_upstream, proxy) = wire_proxy(&["--client-body-buffer-size", buffer]).await?;
        let mut stream = TcpStream::connect(proxy.address).await?;
        stream
            .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
            .await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        // A bound on a hang; an error (a reset) ends the answer as a close does.
        let _ = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer))
            .await
            .map_err(|_| "the proxy held a half-closed connection")?;
        let answer = String::from_utf8_lossy(&answer);
        // Its side still open to read: it learns why, and no 502 blames the upstream.
        assert!(
            answer.starts_with("HTTP/1.1 400 "),
            "buffer {buffer}: {answer}"
        );
        assert!(
            answer.contains("the request body failed"),
            "buffer {buffer}: {answer}"
        );
        assert_eq!(
            proxy
                .metric("sluicegate_proxy_upstream_errors_total{kind=\"other\"}")
                .await?,
            0,
            "buffer {buffer}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stops_after_an_early_answer_ends_the_answer() -> TestResult {
    // The upstream answers at once and ends its answer only once the whole body has come.
    let args = [
        "--client-body-timeout",
        "300ms",
        "--client-body-buffer-size",
        "0",
    ];
    let (_upstream, proxy) = wire_proxy(&args).await?;
    let head = "POST /early-chunked HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n";
    let answer = proxy.raw_exchange(&[head.as_bytes(), b"abc"]).await?;
    // The rest of the upload was given up, the upstream saw the body cut short, and the answer
    // ends without its last chunk: the client cannot take it for whole.
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(!answer.ends_with("0\r\n\r\n"), "{answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_takes_no_more_of_the_body_is_a_504() -> TestResult {
    let (_upstream, proxy) = wire_proxy(&["--upstream-timeout", "300ms"]).await?;
    // More than the sockets on the way hold, so that the writes to the upstream stop.
    let body = vec![b'x'; 32 << 20];
    let head = format!(
        "POST /ignore-body HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let stream = TcpStream::connect(proxy.address).await?;
    let (mut reader, mut writer) = stream.into_split();
    tokio::spawn(async move {
        // Fails once the proxy has answered and closed.
        let _ = writer.write_all(head.as_bytes()).await;
        let _ = writer.write_all(&body).await;
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        let _ = reader.read_to_end(&mut answer).await;
    })
    .await
    .map_err(|_| "the proxy waited a minute on an upstream that reads nothing")?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 504 "), "{answer}");
    assert!(
        answer.contains("took nothing more of the request body for 300ms"),
        "{answer}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_takes_the_body_and_never_answers_is_a_504() -> TestResult {
    let (_upstream, proxy) = wire_proxy(&["--upstream-timeout", "300ms"]).await?;
    let response = client()
        .post(proxy.url("/read-then-silent"))
        .body("the whole body")
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    let text = response.text().await?;
    assert!(text.contains("did not answer within 300ms"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_keeps_coming_is_not_cut_at_the_upstream_timeout() -> TestResult {
    let counting = Upstream::start().await?;
    let proxy = ProxyProcess::start(&counting.url(), RULES, &["--upstream-timeout", "2s"])?;
    // Ten pieces 400 ms apart: the whole upload takes twice the upstream timeout, and no wait
    // between two pieces comes near it.
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            if sender
                .send(Ok::<_, std::io::Error>(vec![b'y'; 1000]))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let counted = client().post(proxy.url("/count")).body(body).send().await?;
    assert_eq!(counted.status(), 200);
    assert_eq!(counted.text().await?, "10000");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_keepalive_timeout_is_not_used_again() -> TestResult {
    // Long enough that a busy machine's pause between the first two requests does not idle
    // the connection out (it did at 500 ms, once, with every test of this file running).
    let (upstream, proxy) = wire_proxy(&["--upstream-keepalive-timeout", "2s"]).await?;
    let c = client();
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(upstream.connections(), 1);
    // Idle four times the timeout (at least: a sleep is never shorter).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(upstream.connections(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_response_is_a_502_that_says_what_is_wrong() -> TestResult {
    let (_upstream, proxy) = wire_proxy(&[]).await?;
    let c = client();
    let conflict = c.get(proxy.url("/conflict")).send().await?;
    assert_eq!(conflict.status(), 502);
    let text = conflict.text().await?;
    assert!(
        text.contains("the upstream failed: invalid content-length"),
        "{text}"
    );

    // Cut short after the head: the client's response fails (the proxy may not have sent its
    // head yet), it never looks whole.
    match c.get(proxy.url("/cut")).send().await {
        Ok(cut) => assert!(cut.bytes().await.is_err()),
        Err(error) => assert!(!error.is_status(), "{error}"),
    }

    assert_eq!(c.get(proxy.url("/")).send().await?.text().await?, "ok");
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_upstream_errors_total{kind=\"other\"}")
            .await?,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_are_framed_for_the_upstream() -> TestResult {
    let (upstream, proxy) = wire_proxy(&[]).await?;
    let c = client();

    c.post(proxy.url("/")).body("twelve bytes").send().await?;
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.contains("content-length: 12\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");

    // `Expect: 100-continue` is the proxy's to answer, and not passed on (as nginx).
    let expecting = "POST /expect HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n\
                     content-length: 5\r\nconnection: close\r\n\r\nhello";
    let answer = proxy.raw_exchange(&[expecting.as_bytes()]).await?;
    assert!(answer.contains("HTTP/1.1 200 OK\r\n"), "{answer}");
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.starts_with("post /expect "), "{head}");
    assert!(!head.contains("expect:"), "{head}");

    // A body of unknown length (chunked from the client) that ends within the buffer (16 KiB)
    // goes with its length, as nginx sends it; a longer one goes on chunked.
    let parts: Vec<Result<&'static str, std::io::Error>> = vec![Ok("one, "), Ok("two")];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let response = c.post(proxy.url("/")).body(streamed).send().await?;
    assert_eq!(response.status(), 200);
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.contains("content-length: 8\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    let parts: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b'a'; 10_000]), Ok(vec![b'b'; 10_000])];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let response = c.post(proxy.url("/")).body(streamed).send().await?;
    assert_eq!(response.status(), 200);
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    assert!(!head.contains("content-length"), "{head}");

    // An h2 GET whose end came in an empty DATA frame after its head has no body upstream.
    let tcp = TcpStream::connect(proxy.address).await?;
    let (h2, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let mut h2 = h2.ready().await?;
    let request = axum::http::Request::get(proxy.url("/h2-empty")).body(())?;
    let (response, mut body) = h2.send_request(request, false)?;
    body.send_data(bytes::Bytes::new(), true)?;
    assert_eq!(response.await?.status(), 200);
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.starts_with("get /h2-empty "), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(!head.contains("content-length"), "{head}");

    // A POST with an empty chunked body says so with its length.
    let parts: Vec<Result<&'static str, std::io::Error>> = vec![Ok("")];
    let streamed = reqwest::Body::wrap_stream(futures_stream(parts));
    let response = c.post(proxy.url("/empty")).body(streamed).send().await?;
    assert_eq!(response.status(), 200);
    let head = upstream.last_head().to_ascii_lowercase();
    assert!(head.starts_with("post /empty "), "{head}");
    assert!(head.contains("content-length: 0\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");

    // An upstream that answers without reading the body, and closes: the answer reaches the
    // client.
    let early = c
        .post(proxy.url("/early"))
        .body(vec![b'x'; 1024])
        .send()
        .await?;
    assert_eq!(early.status(), 413);
    assert_eq!(early.text().await?, "too big\n");

    // The same bodies, decoded, at an upstream that counts them.
    let counting = Upstream::start().await?;
    let proxy = ProxyProcess::start(&counting.url(), RULES, &[])?;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..64).map(|_| Ok(vec![b'y'; 100_000])).collect();
    let streamed = reqwest::Body::wrap_stream(futures_stream(chunks));
    let counted = c.post(proxy.url("/count")).body(streamed).send().await?;
    assert_eq!(counted.text().await?, "6400000");
    Ok(())
}

/// A stream of the given items (for a request body of unknown length).
fn futures_stream<T: Send + 'static>(
    items: Vec<T>,
) -> impl tokio_stream::Stream<Item = T> + Send + 'static {
    tokio_stream::iter(items)
}
