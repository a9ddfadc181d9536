//! `sluicegate proxy` as a process over loopback: a WebSocket handshake the upstream accepts
//! turns the client's connection into a tunnel to it, after the route's limits have counted
//! the handshake.

mod proxy_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy_support::{BoxError, ProxyProcess, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type TestResult = Result<(), BoxError>;

/// An upstream that accepts a WebSocket handshake (`101`, then `hello` in the same write) and
/// then echoes what comes, and answers anything else `200 ok`; it keeps every request head.
struct EchoUpstream {
    address: std::net::SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl EchoUpstream {
    async fn start() -> Result<EchoUpstream, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&kept)));
            }
        });
        Ok(EchoUpstream { address, heads })
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn last_head(&self) -> String {
        let heads = self
            .heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        heads
            .last()
            .cloned()
            .unwrap_or_default()
            .to_ascii_lowercase()
    }
}

async fn serve(mut stream: TcpStream, heads: Arc<Mutex<Vec<String>>>) {
    loop {
        let Some(head) = read_head(&mut stream).await else {
            return;
        };
        let switch = head.to_ascii_lowercase().contains("upgrade: websocket");
        heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(head);
        if !switch {
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        let switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                         Connection: Upgrade\r\n\r\nhello";
        if stream.write_all(switched).await.is_err() {
            return;
        }
        let mut piece = [0u8; 1024];
        while let Ok(read) = stream.read(&mut piece).await {
            if read == 0 || stream.write_all(&piece[..read]).await.is_err() {
                return;
            }
        }
        return;
    }
}

/// A request head, read a byte at a time so that nothing after it is taken.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await.ok()?;
        head.push(byte);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The response head on `stream`, read a byte at a time; bounded by a minute (a bound on a
/// hang, not a timing).
async fn response_head(stream: &mut TcpStream) -> Result<String, BoxError> {
    tokio::time::timeout(Duration::from_secs(60), read_head(stream))
        .await?
        .map(|head| head.to_ascii_lowercase())
        .ok_or_else(|| "the connection closed before a response head".into())
}

const HANDSHAKE: &str = "GET /chat HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\n\
                         upgrade: websocket\r\nsec-websocket-version: 13\r\n\
                         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// Reads exactly `length` bytes, bounded by a minute.
async fn read_bytes(stream: &mut TcpStream, length: usize) -> Result<Vec<u8>, BoxError> {
    let mut bytes = vec![0u8; length];
    tokio::time::timeout(Duration::from_secs(60), stream.read_exact(&mut bytes)).await??;
    Ok(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_handshake_the_upstream_accepts_becomes_a_tunnel() -> TestResult {
    let upstream = EchoUpstream::start().await?;
    let rules = "routes:\n  - { prefix: / }\n";
    let proxy = ProxyProcess::start(&upstream.url(), rules, &["--upstream-timeout", "1s"])?;
    let mut client = TcpStream::connect(proxy.address).await?;
    client.write_all(HANDSHAKE.as_bytes()).await?;
    let head = response_head(&mut client).await?;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    assert!(head.contains("upgrade: websocket\r\n"), "{head}");
    assert!(head.contains("connection: upgrade\r\n"), "{head}");
    // The upstream was asked to switch, with the handshake's own fields.
    let asked = upstream.last_head();
    assert!(asked.contains("connection: upgrade\r\n"), "{asked}");
    assert!(asked.contains("upgrade: websocket\r\n"), "{asked}");
    assert!(asked.contains("sec-websocket-key: "), "{asked}");
    // What the upstream sent with its `101`, then an echo both ways.
    assert_eq!(read_bytes(&mut client, 5).await?, b"hello");
    client.write_all(b"ping").await?;
    assert_eq!(read_bytes(&mut client, 4).await?, b"ping");
    assert_eq!(proxy.metric("sluicegate_proxy_websockets").await?, 1);
    // Quiet for the upstream timeout, the tunnel is closed.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), client.read_to_end(&mut rest)).await??;
    assert!(rest.is_empty());
    eventually("the tunnel is counted closed", || async {
        Ok(proxy.metric("sluicegate_proxy_websockets").await? == 0)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_is_counted_by_the_limits_and_no_other_switch_is_asked() -> TestResult {
    let upstream = EchoUpstream::start().await?;
    let one = "limits:\n  one: { key: global, spec: \"gcra:rate=1/h,burst=1\" }\n\
               routes:\n  - { prefix: /chat, limits: [one] }\n  - { prefix: / }\n";
    let proxy = ProxyProcess::start(&upstream.url(), one, &[])?;
    let mut first = TcpStream::connect(proxy.address).await?;
    first.write_all(HANDSHAKE.as_bytes()).await?;
    assert!(
        response_head(&mut first)
            .await?
            .starts_with("http/1.1 101 ")
    );
    let mut second = TcpStream::connect(proxy.address).await?;
    second.write_all(HANDSHAKE.as_bytes()).await?;
    let denied = response_head(&mut second).await?;
    assert!(denied.starts_with("http/1.1 429 "), "{denied}");
    // The first tunnel is not held by the second's denial.
    first.write_all(b"still here").await?;
    assert_eq!(read_bytes(&mut first, 15).await?, b"hellostill here");
    // h2c is no switch the proxy asks of the upstream: a tunnel would carry requests no limit
    // sees. The request is passed on as an ordinary one.
    let mut h2c = TcpStream::connect(proxy.address).await?;
    h2c.write_all(b"GET /other HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
        .await?;
    let answer = response_head(&mut h2c).await?;
    assert!(answer.starts_with("http/1.1 200 "), "{answer}");
    let asked = upstream.last_head();
    assert!(asked.starts_with("get /other "), "{asked}");
    assert!(!asked.contains("upgrade"), "{asked}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_counts_a_websocket_until_its_tunnel_closes() -> TestResult {
    let upstream = EchoUpstream::start().await?;
    let one = "limits:\n  one: { key: global, spec: \"concurrency:limit=1\" }\n\
               routes:\n  - { prefix: /chat, limits: [one] }\n";
    let proxy = ProxyProcess::start(&upstream.url(), one, &[])?;
    let handshake = async || -> Result<(TcpStream, String), BoxError> {
        let mut client = TcpStream::connect(proxy.address).await?;
        client.write_all(HANDSHAKE.as_bytes()).await?;
        let head = response_head(&mut client).await?;
        Ok((client, head))
    };
    let (mut open, head) = handshake().await?;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    // The tunnel is open: its place is taken, as nginx's `limit_conn` counts a WebSocket.
    let (_, refused) = handshake().await?;
    assert!(refused.starts_with("http/1.1 429 "), "{refused}");
    // Closed by its client, the tunnel gives its place back.
    open.shutdown().await?;
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), open.read_to_end(&mut rest)).await??;
    drop(open);
    eventually("the place is given back", || async {
        Ok(handshake().await?.1.starts_with("http/1.1 101 "))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_a_websocket_goes_on_for_the_grace_and_is_then_closed() -> TestResult {
    let upstream = EchoUpstream::start().await?;
    let rules = "routes:\n  - { prefix: / }\n";
    let proxy = ProxyProcess::start(&upstream.url(), rules, &["--shutdown-grace", "5s"])?;
    let mut client = TcpStream::connect(proxy.address).await?;
    client.write_all(HANDSHAKE.as_bytes()).await?;
    assert!(
        response_head(&mut client)
            .await?
            .starts_with("http/1.1 101 ")
    );
    assert_eq!(read_bytes(&mut client, 5).await?, b"hello");
    proxy.terminate()?;
    // Stopping: no new connection is taken, but the WebSocket open still carries messages.
    eventually("the proxy stops accepting", || async {
        Ok(TcpStream::connect(proxy.address).await.is_err())
    })
    .await?;
    client.write_all(b"still").await?;
    assert_eq!(read_bytes(&mut client, 5).await?, b"still");
    // After the grace, the tunnel is closed and the proxy exits.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), client.read_to_end(&mut rest)).await??;
    proxy
        .exits_cleanly(
            Duration::from_secs(60),
            "the proxy did not exit after its grace",
        )
        .await?;
    Ok(())
}
