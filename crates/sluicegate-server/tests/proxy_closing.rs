//! `sluicegate proxy` as a process over loopback: how it closes a client connection it ends
//! while the client is still sending (nginx's `lingering_close`).

mod proxy_support;

use proxy_support::{BoxError, ProxyProcess, Upstream, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type TestResult = Result<(), BoxError>;

/// Far more than loopback's socket buffers hold: a proxy that closed without reading what
/// follows would make the kernel reset the connection before the client had sent it all.
const BODY: usize = 32 << 20;

/// A request head announcing a body of [`BODY`] bytes, and that body.
fn post_with_long_body() -> (String, Vec<u8>) {
    let head = format!("POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {BODY}\r\n\r\n");
    (head, vec![b'x'; BODY])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_its_whole_body_before_reading_gets_the_413() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--client-max-body-size", "1k"])?;
    let (head, body) = post_with_long_body();
    // Written whole, then read: the write fails if the proxy resets the connection.
    let answer = proxy.raw_exchange(&[head.as_bytes(), &body]).await?;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_a_denied_request_its_whole_body_gets_the_denial() -> TestResult {
    let upstream = Upstream::start().await?;
    let one = "limits:\n  one: { key: global, spec: \"gcra:rate=1/h,burst=1\" }\n\
               routes:\n  - { prefix: /, limits: [one] }\n";
    let proxy = ProxyProcess::start(&upstream.url(), one, &[])?;
    let spent = reqwest::get(proxy.url("/")).await?;
    assert_eq!(spent.status(), 200);
    let (head, body) = post_with_long_body();
    let answer = proxy.raw_exchange(&[head.as_bytes(), &body]).await?;
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_connection_is_not_counted_as_served() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(
        &upstream,
        &[
            "--client-max-body-size",
            "1k",
            "--lingering-timeout",
            "60s",
            "--lingering-time",
            "60s",
        ],
    )?;
    let mut client = TcpStream::connect(proxy.address).await?;
    let (head, body) = post_with_long_body();
    client.write_all(head.as_bytes()).await?;
    client.write_all(&body[..4096]).await?;
    // The answer, then the end of the proxy's side: the proxy lingers, reading what comes.
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    eventually("no connection counted while lingering", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 0)
    })
    .await?;
    // Still lingering: what the client sends is read, not answered with a reset (which a
    // second write after the first's would meet).
    client.write_all(&body[4096..8192]).await?;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    client.write_all(&body[8192..12288]).await?;
    Ok(())
}
