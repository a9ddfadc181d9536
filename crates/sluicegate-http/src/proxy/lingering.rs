//! Closing an HTTP/1.1 client connection gently when the proxy ends it while its client may
//! still be sending (nginx's `lingering_close`).
//!
//! When the proxy answers before it has read a request body (a 413 on the head, a 408, a
//! denial) it closes the connection. Closing a socket with unread bytes in it, or that bytes
//! arrive at afterwards, makes the kernel reset the connection, and a client that sends its
//! whole body before it reads may then see the reset instead of the answer waiting for it. So
//! the proxy keeps a second handle on every HTTP/1.1 client socket; once hyper is done with the
//! connection, the write side is shut (the client sees the answer end) and what the client
//! still sends is read and thrown away until it closes its side, sends nothing for
//! [`Lingering::timeout`], or [`Lingering::time`] has passed.

use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a connection the proxy ended may go on taking a client's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lingering {
    /// The most time spent reading after the end (nginx's `lingering_time`).
    pub(crate) time: Duration,
    /// The longest wait for the client's next bytes (nginx's `lingering_timeout`).
    pub(crate) timeout: Duration,
}

/// A second handle on a client socket: closing the handle hyper owns leaves the socket open
/// until this one is closed too.
#[derive(Debug)]
pub(crate) struct SocketTwin(std::net::TcpStream);

/// What is read and thrown away at a time (nginx reads 4 KiB; fewer reads for a large body).
const DISCARD_BUFFER: usize = 16 * 1024;

impl SocketTwin {
    /// A second handle on `stream`'s socket; `None` if the process has no descriptor left for
    /// it (that connection is then closed at once, as without lingering).
    pub(crate) fn of(stream: &TcpStream) -> Option<SocketTwin> {
        let descriptor = stream.as_fd().try_clone_to_owned().ok()?;
        Some(SocketTwin(std::net::TcpStream::from(descriptor)))
    }

    /// Shuts the write side, then reads and throws away what the client sends, within
    /// `lingering`, and closes the socket.
    pub(crate) async fn linger(self, lingering: Lingering) {
        let SocketTwin(socket) = self;
        // Already shut when hyper closed the connection itself; this covers when it did not.
        let _ = socket.shutdown(Shutdown::Write);
        // The usual end: the client has read the answer and closed its side already.
        let mut first = [0u8; 512];
        match (&socket).read(&mut first) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
        let Ok(mut stream) = TcpStream::from_std(socket) else {
            return;
        };
        let end = Instant::now() + lingering.time;
        let mut discarded = vec![0u8; DISCARD_BUFFER];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let wait = left.min(lingering.timeout);
            match tokio::time::timeout(wait, stream.read(&mut discarded)).await {
                Ok(Ok(read)) if read > 0 => {}
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A connected pair over loopback, and a twin of the server side.
    async fn pair() -> io::Result<(TcpStream, TcpStream, SocketTwin)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let (server, _) = listener.accept().await?;
        let twin = SocketTwin::of(&server)
            .ok_or("no descriptor for the twin")
            .map_err(io::Error::other)?;
        Ok((client, server, twin))
    }

    const LONG: Lingering = Lingering {
        time: Duration::from_secs(3600),
        timeout: Duration::from_secs(3600),
    };

    #[tokio::test]
    async fn the_answer_reaches_a_client_that_sends_its_whole_body_before_reading() -> TestResult {
        let (mut client, mut server, twin) = pair().await?;
        server.write_all(b"413").await?;
        // The handle hyper owned goes first, with the body still coming.
        drop(server);
        let lingering = tokio::spawn(twin.linger(LONG));
        // More than the socket buffers hold: without the reads, this write would fail.
        client.write_all(&vec![b'x'; 8 << 20]).await?;
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await?;
        assert_eq!(answer, b"413");
        client.shutdown().await?;
        drop(client);
        lingering.await?;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_goes_quiet_is_closed_after_the_timeout() -> TestResult {
        let (mut client, server, twin) = pair().await?;
        drop(server);
        client.write_all(b"more").await?;
        let quiet = Lingering {
            time: Duration::from_secs(3600),
            timeout: Duration::from_secs(5),
        };
        // On the paused clock: the lingering gives up on a client that sends no more after the
        // timeout, not the time.
        let start = Instant::now();
        twin.linger(quiet).await;
        let waited = start.elapsed();
        assert!(waited >= quiet.timeout && waited < quiet.time, "{waited:?}");
        let mut rest = Vec::new();
        // The lingering side is closed: the client reads its end.
        assert_eq!(client.read_to_end(&mut rest).await?, 0);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_sending_is_closed_after_the_time() -> TestResult {
        let (mut client, server, twin) = pair().await?;
        drop(server);
        let bounded = Lingering {
            time: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
        };
        let lingering = tokio::spawn(twin.linger(bounded));
        let sender = tokio::spawn(async move {
            // A byte a second, for longer than the lingering time: sent until the socket
            // fails, which it does once the lingering side has closed.
            for _ in 0..3600 {
                if client.write_all(b"x").await.is_err() {
                    return true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            false
        });
        lingering.await?;
        assert!(sender.await?, "the client could send for an hour");
        Ok(())
    }
}
