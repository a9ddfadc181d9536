//! Closing an HTTP/1.1 client connection gently when the proxy ends it while its client may
//! still be sending (nginx's `lingering_close`).
//!
//! When the proxy answers before it has read a request body (a 413 on the head, a 408, a
//! denial) it closes the connection. Closing a socket with unread bytes in it, or that bytes
//! arrive at afterwards, makes the kernel reset the connection, and a client that sends its
//! whole body before it reads may then see the reset instead of the answer waiting for it. So
//! hyper's handle on an HTTP/1.1 client socket ([`HandedBack`]) gives the socket back when
//! hyper drops it; once the connection has ended, the write side is shut (the client sees the
//! answer end) and what the client still sends is read and thrown away until it closes its
//! side, sends nothing for [`Lingering::timeout`], or [`Lingering::time`] has passed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a connection the proxy ended may go on taking a client's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lingering {
    /// The most time spent reading after the end (nginx's `lingering_time`).
    pub(crate) time: Duration,
    /// The longest wait for the client's next bytes (nginx's `lingering_timeout`).
    pub(crate) timeout: Duration,
}

/// A client socket that is sent back when dropped (by hyper, at the connection's end), so
/// that the connection can linger; an upgraded connection keeps it, and is not lingered on.
#[derive(Debug)]
pub(crate) struct HandedBack {
    /// `None` only once dropped.
    stream: Option<TcpStream>,
    back: Option<oneshot::Sender<TcpStream>>,
}

/// Where a [`HandedBack`] socket comes back.
pub(crate) type ComesBack = oneshot::Receiver<TcpStream>;

/// What is read and thrown away at a time (nginx reads 4 KiB).
const DISCARD_BUFFER: usize = 4 * 1024;

impl HandedBack {
    /// `stream`, sent back on the returned receiver when dropped if `lingering`.
    pub(crate) fn new(stream: TcpStream, lingering: bool) -> (HandedBack, Option<ComesBack>) {
        let (back, comes_back) = if lingering {
            let (back, comes_back) = oneshot::channel();
            (Some(back), Some(comes_back))
        } else {
            (None, None)
        };
        let handed = HandedBack {
            stream: Some(stream),
            back,
        };
        (handed, comes_back)
    }

    /// `poll` on the socket (which is only taken away when dropped).
    fn poll<T>(
        &mut self,
        poll: impl FnOnce(Pin<&mut TcpStream>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match self.stream.as_mut() {
            Some(stream) => poll(Pin::new(stream)),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl Drop for HandedBack {
    fn drop(&mut self) {
        if let (Some(back), Some(stream)) = (self.back.take(), self.stream.take()) {
            // A receiver gone (the connection's task ended first) closes the socket here.
            let _ = back.send(stream);
        }
    }
}

impl AsyncRead for HandedBack {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().poll(|stream| stream.poll_read(cx, buf))
    }
}

impl AsyncWrite for HandedBack {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll(|stream| stream.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll(|stream| stream.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll(|stream| stream.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll(|stream| stream.poll_shutdown(cx))
    }
}

impl Lingering {
    /// Shuts `stream`'s write side, then reads and throws away what the client sends, within
    /// these bounds, and closes it.
    pub(crate) async fn close(self, mut stream: TcpStream) {
        // Already shut when hyper closed the connection itself; this covers when it did not.
        let _ = stream.shutdown().await;
        let end = Instant::now() + self.time;
        let mut discarded = [0u8; DISCARD_BUFFER];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            // The usual end comes at once: the client has read the answer and closed its side.
            let read = stream.read(&mut discarded);
            match tokio::time::timeout(left.min(self.timeout), read).await {
                Ok(Ok(read)) if read > 0 => {}
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A connected pair over loopback, the server's side handed back when dropped.
    async fn pair() -> io::Result<(TcpStream, HandedBack, ComesBack)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let (server, _) = listener.accept().await?;
        let (server, comes_back) = HandedBack::new(server, true);
        let comes_back = comes_back.ok_or_else(|| io::Error::other("nothing comes back"))?;
        Ok((client, server, comes_back))
    }

    const LONG: Lingering = Lingering {
        time: Duration::from_secs(3600),
        timeout: Duration::from_secs(3600),
    };

    #[tokio::test]
    async fn the_answer_reaches_a_client_that_sends_its_whole_body_before_reading() -> TestResult {
        let (mut client, mut server, comes_back) = pair().await?;
        server.write_all(b"413").await?;
        // hyper drops its handle, with the body still coming.
        drop(server);
        let lingering = tokio::spawn(LONG.close(comes_back.await?));
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

    #[tokio::test]
    async fn a_socket_still_in_use_is_not_handed_back_and_none_is_without_lingering() -> TestResult
    {
        let (_client, server, mut comes_back) = pair().await?;
        assert!(comes_back.try_recv().is_err(), "handed back while in use");
        drop(server);
        assert!(comes_back.try_recv().is_ok());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let _client = TcpStream::connect(listener.local_addr()?).await?;
        let (server, _) = listener.accept().await?;
        assert!(HandedBack::new(server, false).1.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_goes_quiet_is_closed_after_the_timeout() -> TestResult {
        let (mut client, server, comes_back) = pair().await?;
        drop(server);
        client.write_all(b"more").await?;
        let quiet = Lingering {
            time: Duration::from_secs(3600),
            timeout: Duration::from_secs(5),
        };
        // On the paused clock: the lingering gives up on a client that sends no more after the
        // timeout, not the time.
        let start = Instant::now();
        quiet.close(comes_back.await?).await;
        let waited = start.elapsed();
        assert!(waited >= quiet.timeout && waited < quiet.time, "{waited:?}");
        let mut rest = Vec::new();
        // The lingering side is closed: the client reads its end.
        assert_eq!(client.read_to_end(&mut rest).await?, 0);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_sending_is_closed_after_the_time() -> TestResult {
        let (mut client, server, comes_back) = pair().await?;
        drop(server);
        let bounded = Lingering {
            time: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
        };
        let lingering = tokio::spawn(bounded.close(comes_back.await?));
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
