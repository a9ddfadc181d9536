//! `serve`'s HTTP and admin listeners close a connection whose client is slow to send a request
//! head (a byte at a time, or nothing after the last response): each such connection held a
//! task and its buffers for as long as the client liked.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use sluicegate_server::serve::{ServerConfig, start};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Far longer than the header timeout the server is given: reaching it means the connection
/// was left open.
const HANG: Duration = Duration::from_secs(30);

/// What the server sends before it closes `stream`: all of it, or an error if it is still open
/// after [`HANG`].
async fn read_until_closed(stream: &mut TcpStream) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(HANG, stream.read(&mut buf)).await {
            Err(_) => {
                return Err("the connection is still open long past the header timeout".into());
            }
            Ok(Ok(0) | Err(_)) => return Ok(received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// A head sent in part and never finished, and a keep-alive connection left idle after its
/// answer, are both closed; a request sent in time is answered.
async fn closes_slow_heads(addr: SocketAddr, path: &str) -> TestResult {
    let mut slow = TcpStream::connect(addr).await?;
    slow.write_all(format!("GET {path} HTTP/1.1\r\nHost: sluicegate\r\n").as_bytes())
        .await?;
    let answered = read_until_closed(&mut slow).await?;
    let answered = String::from_utf8_lossy(&answered);
    assert!(
        answered.is_empty() || answered.starts_with("HTTP/1.1 408"),
        "an unfinished head gets no answer but a 408: {answered:?}"
    );

    let mut idle = TcpStream::connect(addr).await?;
    idle.write_all(format!("GET {path} HTTP/1.1\r\nHost: sluicegate\r\n\r\n").as_bytes())
        .await?;
    let answered = read_until_closed(&mut idle).await?;
    let answered = String::from_utf8_lossy(&answered);
    assert!(
        answered.starts_with("HTTP/1.1 200"),
        "a whole head is answered before the idle connection is closed: {answered:?}"
    );
    Ok(())
}

#[tokio::test]
async fn slow_and_idle_clients_are_closed_on_both_listeners() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("rules.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    let server = start(ServerConfig {
        client_header_timeout: Duration::from_millis(300),
        ..ServerConfig::on_free_loopback_ports(dir.path())
    })
    .await?;
    closes_slow_heads(server.http_addr, "/healthcheck").await?;
    let admin = server.admin_addr.ok_or("the admin listener is on")?;
    closes_slow_heads(admin, "/metrics").await?;
    // The listeners still answer new connections.
    let body = reqwest::get(format!("http://{}/healthcheck", server.http_addr))
        .await?
        .text()
        .await?;
    assert_eq!(body, "OK");
    server.shutdown().await?;
    Ok(())
}
