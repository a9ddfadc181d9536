//! SIGTERM with connections that would hold a graceful shutdown up (gRPC ones, and an HTTP
//! request whose body never ends): the service exits cleanly, by itself on the lean server, and at
//! the end of `--shutdown-grace` where a client never lets a connection close
//! (docs/grpc-conformance.md).

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{LEAN, RULES, ServeProcess, TONIC, TestResult};

/// A grace far shorter than `ServeProcess::wait_for_exit`'s bound, so that a shutdown that
/// waits for the client fails the check instead of passing late.
const GRACE: &str = "300ms";

/// The lean server drops a connection that never began HTTP/2 when it stops, grace or not.
#[tokio::test]
async fn lean_sigterm_with_a_silent_connection() -> TestResult {
    sigterm_with_a_silent_connection(&["--grpc-server", LEAN]).await
}

/// tonic's server waits for a connection that never began HTTP/2: the grace ends the wait.
#[tokio::test]
async fn tonic_sigterm_with_a_silent_connection_ends_at_the_grace() -> TestResult {
    sigterm_with_a_silent_connection(&["--grpc-server", TONIC, "--shutdown-grace", GRACE]).await
}

/// h2 and hyper wait for the answer to the PING that goes with GOAWAY before they close a
/// connection: a client that never answers it is closed at the end of the grace.
#[tokio::test]
async fn lean_sigterm_with_a_client_deaf_to_goaway() -> TestResult {
    sigterm_with_a_client_deaf_to_goaway(&["--grpc-server", LEAN]).await
}

#[tokio::test]
async fn lean_without_workers_sigterm_with_a_client_deaf_to_goaway() -> TestResult {
    sigterm_with_a_client_deaf_to_goaway(&["--grpc-server", LEAN, "--grpc-workers", "0"]).await
}

#[tokio::test]
async fn tonic_sigterm_with_a_client_deaf_to_goaway() -> TestResult {
    sigterm_with_a_client_deaf_to_goaway(&["--grpc-server", TONIC]).await
}

/// The HTTP listener waits for a request in flight: one whose body never ends is given up at
/// the end of the grace.
#[tokio::test]
async fn sigterm_with_an_http_body_never_finished() -> TestResult {
    let mut serve = ServeProcess::start(RULES, &["--shutdown-grace", GRACE])?;
    let mut slow = TcpStream::connect(serve.http).await?;
    slow.write_all(
        b"POST /json HTTP/1.1\r\nHost: sluicegate\r\nContent-Length: 100\r\n\
          Expect: 100-continue\r\n\r\n",
    )
    .await?;
    // The service asks for the body once its handler reads it: the request is in flight.
    let mut interim = Vec::new();
    let asked = tokio::time::timeout(Duration::from_secs(20), async {
        let mut chunk = [0u8; 256];
        while !interim.ends_with(b"\r\n\r\n") {
            match slow.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => interim.extend_from_slice(&chunk[..n]),
            }
        }
    });
    asked
        .await
        .map_err(|_| "no 100 Continue from the service")?;
    assert!(interim.starts_with(b"HTTP/1.1 100"), "{interim:?}");
    slow.write_all(b"{").await?;
    serve.terminate()?;
    assert!(serve.wait_for_exit()?.success());
    Ok(())
}

/// SIGTERM while a client holds a connection open without ever starting HTTP/2 on it (a TCP
/// health check, a stuck client): the service still exits, cleanly.
async fn sigterm_with_a_silent_connection(flags: &[&str]) -> TestResult {
    let mut serve = ServeProcess::start(RULES, flags)?;
    let mut silent = TcpStream::connect(serve.grpc).await?;
    read_first_frame(&mut silent).await?;
    serve.terminate()?;
    assert!(serve.wait_for_exit()?.success());
    Ok(())
}

/// SIGTERM while a client that began HTTP/2 (its preface and an empty SETTINGS frame) then
/// reads nothing and answers nothing: the service still exits, cleanly.
async fn sigterm_with_a_client_deaf_to_goaway(server_flags: &[&str]) -> TestResult {
    let flags = [server_flags, &["--shutdown-grace", GRACE]].concat();
    let mut serve = ServeProcess::start(RULES, &flags)?;
    let mut deaf = TcpStream::connect(serve.grpc).await?;
    deaf.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await?;
    read_first_frame(&mut deaf).await?;
    serve.terminate()?;
    assert!(serve.wait_for_exit()?.success());
    Ok(())
}

/// Reads the service's first frame header (its SETTINGS): the connection was accepted and
/// HTTP/2 begun on the service's side (bounded against a service that never sends it).
async fn read_first_frame(tcp: &mut TcpStream) -> TestResult {
    let mut first = [0u8; 9];
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_exact(&mut first));
    read.await.map_err(|_| "no SETTINGS from the service")??;
    Ok(())
}
