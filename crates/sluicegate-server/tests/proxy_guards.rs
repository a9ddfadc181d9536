//! `sluicegate proxy`'s header guards, nginx's defaults: request fields named with an
//! underscore are dropped before the limits and the upstream see them (kept with
//! `--underscores-in-headers`), a response `Content-Length` given more than once reaches the
//! client once (or is a 502 if its values differ), and a request head past
//! `--client-max-header-size` is refused, over HTTP/1.1 and h2.

mod proxy_support;

use std::time::Duration;

use proxy_support::raw_upstream::{RawUpstream, Reply};
use proxy_support::{BoxError, ProxyProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type TestResult = Result<(), BoxError>;

const PASS_ALL: &str = "routes:\n  - { prefix: / }\n";

/// An upstream answering the paths of the length tests with their `Content-Length`s written
/// by hand, and `200 ok` to any other.
async fn raw_upstream() -> Result<RawUpstream, BoxError> {
    RawUpstream::scripted(vec![
        (
            "/length-list",
            Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello"),
        ),
        (
            "/length-twice",
            Reply::Bytes(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nx-between: 1\r\nContent-Length: 5\r\n\r\nhello",
            ),
        ),
        (
            "/length-differ",
            Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello"),
        ),
    ])
    .await
}

/// The lines of an answer's head.
fn head_lines(answer: &str) -> Vec<&str> {
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    head.split("\r\n").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_named_with_an_underscore_reaches_the_upstream_only_when_kept() -> TestResult {
    let upstream = raw_upstream().await?;
    let sent = "GET /fields HTTP/1.1\r\nhost: app\r\nX_Forwarded_For: 6.6.6.6\r\n\
                x_api_key: twin\r\nx-api-key: real\r\nx_api_key: twin2\r\n\
                connection: close\r\n\r\n";

    let dropping = ProxyProcess::start(&upstream.url(), PASS_ALL, &[])?;
    let answer = dropping.raw_exchange(&[sent.as_bytes()]).await?;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let head = upstream.last_head();
    assert!(head.starts_with("get /fields "), "{head}");
    assert!(!head.contains('_'), "{head}");
    assert!(!head.contains("6.6.6.6"), "{head}");
    assert!(!head.contains("twin"), "{head}");
    assert!(head.contains("\r\nx-api-key: real\r\n"), "{head}");
    // The forwarding list is the proxy's alone: the twin added nothing to it.
    assert!(
        head.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"),
        "{head}"
    );

    // h2 names its fields the same way.
    let tcp = TcpStream::connect(dropping.address).await?;
    let (mut h2, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let request = axum::http::Request::get(dropping.url("/h2-fields"))
        .header("x_api_key", "twin")
        .header("x-api-key", "real")
        .body(())?;
    let (response, _) = h2.send_request(request, true)?;
    assert_eq!(response.await?.status(), 200);
    let head = upstream.last_head();
    assert!(head.starts_with("get /h2-fields "), "{head}");
    assert!(!head.contains("x_api_key"), "{head}");
    assert!(head.contains("\r\nx-api-key: real\r\n"), "{head}");

    let keeping = ProxyProcess::start(&upstream.url(), PASS_ALL, &["--underscores-in-headers"])?;
    let answer = keeping.raw_exchange(&[sent.as_bytes()]).await?;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let head = upstream.last_head();
    assert!(head.contains("\r\nx_forwarded_for: 6.6.6.6\r\n"), "{head}");
    assert!(head.contains("\r\nx_api_key: twin\r\n"), "{head}");
    assert!(head.contains("\r\nx_api_key: twin2\r\n"), "{head}");
    assert!(head.contains("\r\nx-api-key: real\r\n"), "{head}");
    Ok(())
}

/// One request an hour for each `x-api-key`.
const ONE_AN_HOUR_PER_KEY: &str = "limits:\n  per_key:\n    key: { header: x-api-key }\n    \
                                   spec: \"gcra:rate=1/h,burst=1\"\n\
                                   routes:\n  - { prefix: /, limits: [per_key] }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_keyed_on_a_field_is_not_moved_by_its_underscore_twin() -> TestResult {
    let upstream = raw_upstream().await?;
    let proxy = ProxyProcess::start(&upstream.url(), ONE_AN_HOUR_PER_KEY, &[])?;
    let request = |fields: &str| {
        format!("GET /keyed HTTP/1.1\r\nhost: app\r\n{fields}connection: close\r\n\r\n")
    };
    let first = proxy
        .raw_exchange(&[request("x-api-key: a\r\n").as_bytes()])
        .await?;
    assert!(first.starts_with("HTTP/1.1 200 "), "{first}");
    // The key is still `a`'s, spent: a twin naming another key does not make it one.
    let twin_elsewhere = proxy
        .raw_exchange(&[request("x_api_key: b\r\nx-api-key: a\r\n").as_bytes()])
        .await?;
    assert!(
        twin_elsewhere.starts_with("HTTP/1.1 429 "),
        "{twin_elsewhere}"
    );
    // Key `b`, fresh, passes; the twin naming the spent key reaches no one.
    let twin_of_spent = proxy
        .raw_exchange(&[request("x-api-key: b\r\nx_api_key: a\r\n").as_bytes()])
        .await?;
    assert!(
        twin_of_spent.starts_with("HTTP/1.1 200 "),
        "{twin_of_spent}"
    );
    let head = upstream.last_head();
    assert!(head.contains("\r\nx-api-key: b\r\n"), "{head}");
    assert!(!head.contains("x_api_key"), "{head}");
    assert_eq!(upstream.heads().len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_length_given_twice_reaches_the_client_once_and_two_lengths_are_a_502() -> TestResult {
    let upstream = raw_upstream().await?;
    let proxy = ProxyProcess::start(&upstream.url(), PASS_ALL, &[])?;
    for path in ["/length-list", "/length-twice"] {
        let sent = format!("GET {path} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n");
        let answer = proxy.raw_exchange(&[sent.as_bytes()]).await?;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{path}: {answer}");
        let lengths: Vec<&str> = head_lines(&answer)
            .into_iter()
            .filter(|line| line.to_ascii_lowercase().starts_with("content-length:"))
            .collect();
        assert_eq!(lengths, ["content-length: 5"], "{path}: {answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "{path}: {answer}");
    }
    // An h2 client gets the one value too.
    let tcp = TcpStream::connect(proxy.address).await?;
    let (mut h2, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    for path in ["/length-list", "/length-twice"] {
        let request = axum::http::Request::get(proxy.url(path)).body(())?;
        let (response, _) = h2.send_request(request, true)?;
        let response = response.await?;
        assert_eq!(response.status(), 200, "{path}");
        let lengths: Vec<_> = response
            .headers()
            .get_all("content-length")
            .iter()
            .collect();
        assert_eq!(lengths, ["5"], "{path}");
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            body.flow_control().release_capacity(chunk.len())?;
            text.extend_from_slice(&chunk);
        }
        assert_eq!(text, b"hello", "{path}");
    }

    let sent = "GET /length-differ HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n";
    let answer = proxy.raw_exchange(&[sent.as_bytes()]).await?;
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert!(answer.contains("invalid content-length"), "{answer}");
    assert!(!answer.contains("hello"), "{answer}");
    Ok(())
}

/// A request head of exactly `size` bytes: a request line and header lines of up to 4 KiB
/// (hyper takes at most 100 fields), padded to the byte.
fn head_of(size: usize) -> Vec<u8> {
    let mut head = b"GET /sized HTTP/1.1\r\nhost: app\r\nconnection: close\r\n".to_vec();
    let mut field = 0;
    // Each line `x-pad-NN: <value>\r\n`; the last one takes what is left, then the blank line.
    while size - head.len() - 2 > 4096 + 16 {
        head.extend_from_slice(format!("x-pad-{field:02}: ").as_bytes());
        head.resize(head.len() + 4096, b'p');
        head.extend_from_slice(b"\r\n");
        field += 1;
    }
    let line_start = format!("x-pad-{field:02}: ");
    let value = size - head.len() - 2 - line_start.len() - 2;
    head.extend_from_slice(line_start.as_bytes());
    head.resize(head.len() + value, b'q');
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(head.len(), size);
    head
}

/// Sends `head` on a new connection, reading at the same time (the proxy may answer and close
/// before the head is all sent: a write that then fails is no failure here), and returns what
/// came back until the proxy closed. Bounded by a minute: a bound on a hang, not a timing.
async fn sent_whole_or_not(proxy: &ProxyProcess, head: Vec<u8>) -> Result<String, BoxError> {
    let stream = TcpStream::connect(proxy.address).await?;
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(&head).await;
        // Held open: the end of the answer must be the proxy's doing.
        writer
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        let _ = reader.read_to_end(&mut answer).await;
    })
    .await
    .map_err(|_| "the proxy held the connection of an oversized head for a minute")?;
    drop(writing.await?);
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_head_past_the_bound_is_431_and_one_within_it_passes() -> TestResult {
    let upstream = raw_upstream().await?;
    let default = ProxyProcess::start(&upstream.url(), PASS_ALL, &[])?;
    let bounded = ProxyProcess::start(
        &upstream.url(),
        PASS_ALL,
        &["--client-max-header-size", "16k"],
    )?;
    for (proxy, bound) in [(&default, 32 << 10), (&bounded, 16 << 10)] {
        let before = upstream.heads().len();
        for size in [bound + 1, bound + 4096, 40 << 10] {
            let answer = sent_whole_or_not(proxy, head_of(size)).await?;
            assert!(
                answer.starts_with("HTTP/1.1 431 "),
                "{size} bytes, bound {bound}: {answer}"
            );
        }
        assert_eq!(upstream.heads().len(), before, "bound {bound}");
        // A head of the bound exactly passes, whole.
        let answer = sent_whole_or_not(proxy, head_of(bound)).await?;
        assert!(
            answer.starts_with("HTTP/1.1 200 "),
            "bound {bound}: {answer}"
        );
        let head = upstream.last_head();
        assert!(head.starts_with("get /sized "), "{head}");
        assert!(head.contains("x-pad-00: pppp"), "{head}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_still_sending_its_head_after_the_431_is_not_reset() -> TestResult {
    let upstream = raw_upstream().await?;
    // Lingering long enough that only the client's close can end it here.
    let args = ["--lingering-time", "300s", "--lingering-timeout", "120s"];
    let proxy = ProxyProcess::start(&upstream.url(), PASS_ALL, &args)?;
    let mut stream = TcpStream::connect(proxy.address).await?;
    let piece = format!("x-more: {}\r\n", "m".repeat(16 << 10));
    stream
        .write_all(b"GET /endless HTTP/1.1\r\nhost: app\r\n")
        .await?;
    for _ in 0..3 {
        stream.write_all(piece.as_bytes()).await?;
    }
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        let _ = stream.read_to_end(&mut answer).await;
    })
    .await
    .map_err(|_| "no end of the answer to an oversized head")?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    // Served no more (lingering, or closed): only then is the socket's fate settled.
    proxy_support::eventually("the connection is no longer served", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 0)
    })
    .await?;
    // The proxy's side is shut, not closed: what the client still sends is read and thrown
    // away (as nginx lingers), where a closed socket would answer it with a reset, and the
    // next write would fail.
    for _ in 0..8 {
        stream.write_all(piece.as_bytes()).await?;
        tokio::task::yield_now().await;
    }
    stream.shutdown().await?;
    assert!(upstream.heads().is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_that_never_end_are_each_answered_and_closed() -> TestResult {
    let upstream = raw_upstream().await?;
    // Idle connections are not what closes them here.
    let proxy = ProxyProcess::start(
        &upstream.url(),
        PASS_ALL,
        &["--client-header-timeout", "300s"],
    )?;
    // 380 KiB of a head with no end each, below hyper's own cap on a connection's buffer
    // (408 KiB): held, every one, without the bound.
    let mut unfinished = b"GET /endless HTTP/1.1\r\nhost: app\r\n".to_vec();
    while unfinished.len() < 380 << 10 {
        unfinished.extend_from_slice(b"x-more: ");
        unfinished.resize(unfinished.len() + 4000, b'm');
        unfinished.extend_from_slice(b"\r\n");
    }
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..60 {
        let head = unfinished.clone();
        let address = proxy.address;
        clients.spawn(async move {
            let stream = TcpStream::connect(address).await?;
            let (mut reader, mut writer) = stream.into_split();
            let writing = tokio::spawn(async move {
                let _ = writer.write_all(&head).await;
                writer
            });
            let mut answer = Vec::new();
            tokio::time::timeout(Duration::from_secs(60), async {
                let _ = reader.read_to_end(&mut answer).await;
            })
            .await
            .map_err(|_| "an endless head held its connection for a minute")?;
            drop(writing.await?);
            Ok::<_, BoxError>(String::from_utf8_lossy(&answer).into_owned())
        });
    }
    let mut answered = 0;
    while let Some(answer) = clients.join_next().await {
        let answer = answer??;
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        answered += 1;
    }
    assert_eq!(answered, 60);
    assert!(upstream.heads().is_empty());
    Ok(())
}

/// What an h2 request with a field of `value_len` bytes got: its status, or the stream's
/// error.
async fn h2_with_field(proxy: &ProxyProcess, value_len: usize) -> Result<String, BoxError> {
    let tcp = TcpStream::connect(proxy.address).await?;
    let (mut h2, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let request = axum::http::Request::get(proxy.url("/h2-sized"))
        .header("x-pad", "h".repeat(value_len))
        .body(())?;
    let (response, _) = h2.send_request(request, true)?;
    let outcome = tokio::time::timeout(Duration::from_secs(60), response)
        .await
        .map_err(|_| "no answer to an h2 request")?;
    Ok(match outcome {
        Ok(response) => response.status().as_u16().to_string(),
        Err(error) => format!("stream error: {error}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_header_list_past_the_bound_is_refused_and_one_within_it_passes() -> TestResult {
    let upstream = raw_upstream().await?;
    let default = ProxyProcess::start(&upstream.url(), PASS_ALL, &[])?;
    let bounded = ProxyProcess::start(
        &upstream.url(),
        PASS_ALL,
        &["--client-max-header-size", "16k"],
    )?;
    for (proxy, bound) in [(&default, 32usize << 10), (&bounded, 16 << 10)] {
        let before = upstream.heads().len();
        for value_len in [bound, bound + 4096, 40 << 10] {
            let outcome = h2_with_field(proxy, value_len).await?;
            assert_eq!(outcome, "431", "{value_len} bytes, bound {bound}");
        }
        assert_eq!(upstream.heads().len(), before, "bound {bound}");
        // Well within (h2 counts 32 bytes more for each field, the pseudo-fields included).
        let outcome = h2_with_field(proxy, bound - 1024).await?;
        assert_eq!(outcome, "200", "bound {bound}");
        assert!(upstream.last_head().starts_with("get /h2-sized "));
    }
    Ok(())
}
