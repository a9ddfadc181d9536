//! `serve`'s HTTP and admin listeners close a connection whose client is slow to send a request
//! head (a byte at a time, or nothing after the last response), over HTTP/1.1 and h2 alike,
//! and fail a request body that stops coming: each such connection held a task and its
//! buffers for as long as the client liked.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use sluicegate_server::serve::{ServerConfig, start};

type BoxError = Box<dyn std::error::Error>;
type TestResult = Result<(), BoxError>;

/// Far longer than the header timeout the server is given: reaching it means the connection
/// was left open.
const HANG: Duration = Duration::from_secs(30);

/// What the server sends on a new connection to `addr` after `sent`, until it closes it: all
/// of it, or an error if it is still open after [`HANG`].
async fn answer_until_closed(addr: SocketAddr, sent: &str) -> Result<String, BoxError> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(sent.as_bytes()).await?;
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(HANG, stream.read(&mut buf)).await {
            Err(_) => {
                return Err("the connection is still open long past the header timeout".into());
            }
            Ok(Ok(0) | Err(_)) => return Ok(String::from_utf8_lossy(&received).into_owned()),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// A head sent in part and never finished, and a keep-alive connection left idle after its
/// answer, are both closed; a request sent in time is answered.
async fn closes_slow_heads(addr: SocketAddr, path: &str) -> TestResult {
    let head = format!("GET {path} HTTP/1.1\r\nHost: sluicegate\r\n");
    let answered = answer_until_closed(addr, &head).await?;
    assert!(
        answered.is_empty() || answered.starts_with("HTTP/1.1 408"),
        "an unfinished head gets no answer but a 408: {answered:?}"
    );
    let answered = answer_until_closed(addr, &format!("{head}\r\n")).await?;
    assert!(
        answered.starts_with("HTTP/1.1 200"),
        "a whole head is answered before the idle connection is closed: {answered:?}"
    );
    Ok(())
}

/// A request body that stops coming is answered 400, naming the timeout, and its connection
/// closed.
async fn fails_slow_bodies(addr: SocketAddr, method_and_path: &str) -> TestResult {
    let sent = format!(
        "{method_and_path} HTTP/1.1\r\nHost: sluicegate\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"domain\":"
    );
    let answered = answer_until_closed(addr, &sent).await?;
    assert!(
        answered.starts_with("HTTP/1.1 400"),
        "a body that stops coming is answered 400: {answered:?}"
    );
    assert!(answered.contains("--client-body-timeout"), "{answered:?}");
    Ok(())
}

/// An h2 connection (prior knowledge) that sends nothing after its preface, and one left idle
/// after an answer, are both ended, each told first with `GOAWAY`.
async fn closes_idle_h2(addr: SocketAddr, path: &str) -> TestResult {
    // Nothing after the handshake: no request ever opened.
    let (_h2, connection) = h2::client::handshake(TcpStream::connect(addr).await?).await?;
    tokio::time::timeout(HANG, connection)
        .await
        .map_err(|_| "an h2 connection with no request stays open past the header timeout")??;

    let (h2, connection) = h2::client::handshake(TcpStream::connect(addr).await?).await?;
    let connection = tokio::spawn(connection);
    let mut h2 = h2.ready().await?;
    let request = http::Request::get(format!("http://{addr}{path}")).body(())?;
    let (response, _) = h2.send_request(request, true)?;
    let response = response.await?;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        chunk?;
    }
    // The answer came whole; the connection, idle since, is ended with a `GOAWAY` (no error).
    tokio::time::timeout(HANG, connection)
        .await
        .map_err(|_| "an idle h2 connection stays open past the header timeout")???;
    Ok(())
}

/// Whether a new connection to `addr` gets `200` for `GET path`.
async fn answers(addr: SocketAddr, path: &str) -> TestResult {
    let status = reqwest::get(format!("http://{addr}{path}")).await?.status();
    assert_eq!(status, 200, "GET {path} on {addr}");
    Ok(())
}

/// A directory holding a rule file of one rule.
fn rules_dir() -> Result<tempfile::TempDir, BoxError> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("rules.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    Ok(dir)
}

#[tokio::test]
async fn slow_and_idle_clients_are_closed_on_both_listeners() -> TestResult {
    let dir = rules_dir()?;
    let server = start(ServerConfig {
        client_header_timeout: Duration::from_millis(300),
        client_body_timeout: Duration::from_millis(300),
        ..ServerConfig::on_free_loopback_ports(dir.path())
    })
    .await?;
    closes_slow_heads(server.http_addr, "/healthcheck").await?;
    let admin = server.admin_addr.ok_or("the admin listener is on")?;
    closes_slow_heads(admin, "/metrics").await?;
    closes_idle_h2(server.http_addr, "/healthcheck").await?;
    closes_idle_h2(admin, "/metrics").await?;
    fails_slow_bodies(server.http_addr, "POST /json").await?;
    fails_slow_bodies(admin, "PUT /admin/mode").await?;
    // The listeners still answer new connections.
    answers(server.http_addr, "/healthcheck").await?;
    answers(admin, "/metrics").await?;
    server.shutdown().await?;
    Ok(())
}

/// A shutdown does not wait for connections whose client has sent nothing yet: they have
/// nothing begun to finish.
#[tokio::test]
async fn a_shutdown_does_not_wait_for_silent_connections() -> TestResult {
    let dir = rules_dir()?;
    // Both far past the wait below: reaching either means the shutdown waited for a silent
    // connection.
    let server = start(ServerConfig {
        client_header_timeout: Duration::from_secs(300),
        shutdown_grace: Duration::from_secs(300),
        ..ServerConfig::on_free_loopback_ports(dir.path())
    })
    .await?;
    let admin = server.admin_addr.ok_or("the admin listener is on")?;
    let silent_http = TcpStream::connect(server.http_addr).await?;
    let silent_admin = TcpStream::connect(admin).await?;
    // Partway into h2's preface: told neither protocol yet.
    let mut partial = TcpStream::connect(server.http_addr).await?;
    partial.write_all(b"PRI * HTTP/2.0\r\n").await?;
    // A request on a later connection answered: each listener has taken the connections
    // made to it before (a listener accepts in the order they came).
    answers(server.http_addr, "/healthcheck").await?;
    answers(admin, "/metrics").await?;
    tokio::time::timeout(HANG, server.shutdown())
        .await
        .map_err(|_| "the shutdown waited for connections that sent nothing")??;
    drop((silent_http, silent_admin, partial));
    Ok(())
}
