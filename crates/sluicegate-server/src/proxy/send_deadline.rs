//! A client connection whose writes must make progress: a client that stops reading its
//! responses (or reads a byte a minute) would otherwise hold its connection, and the upstream
//! connection streaming to it, for as long as it likes (nginx bounds it with `send_timeout`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::plumbing::Requests;

/// `io`, where a write that cannot go on for `timeout` fails with [`io::ErrorKind::TimedOut`]
/// (which ends the connection). The time counts from when a write first waits, and starts
/// again with every byte written: a slow reader that keeps reading is not cut off.
///
/// It also tells the connection's idle watch while a write waits, and when one that waited
/// went on: a response whose body has ended may still be in hyper's write buffer, and a
/// connection sending it to a slow reader is not idle.
pub(crate) struct SendDeadline<IO> {
    io: IO,
    /// Zero: writes wait as long as they must.
    timeout: Duration,
    /// Made at the first write that waits, and reused: most connections never wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether a write waits now (and `timer` runs for it).
    waiting: bool,
    /// The connection's idle watch.
    activity: Arc<Requests>,
}

impl<IO> SendDeadline<IO> {
    pub(crate) fn new(io: IO, timeout: Duration, activity: Arc<Requests>) -> SendDeadline<IO> {
        SendDeadline {
            io,
            timeout,
            timer: None,
            waiting: false,
            activity,
        }
    }

    /// Passes on what a write gave; a write that waits starts (or goes on counting) the time.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() {
            if self.waiting {
                self.waiting = false;
                self.activity.write_waits(false);
            }
            return written;
        }
        if !self.waiting {
            self.waiting = true;
            self.activity.write_waits(true);
            if !self.timeout.is_zero() {
                let deadline = Instant::now() + self.timeout;
                match &mut self.timer {
                    Some(timer) => timer.as_mut().reset(deadline),
                    None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                }
            }
        }
        // None: no bound (a zero timeout).
        let Some(timer) = self.timer.as_mut() else {
            return Poll::Pending;
        };
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing of its response for {:?} (--client-send-timeout)",
                self.timeout
            ),
        )))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for SendDeadline<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for SendDeadline<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let shut = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, shut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_too_long_fails_and_one_that_progresses_does_not() -> io::Result<()>
    {
        // A pipe of 64 bytes that nobody reads: the second write waits.
        let (writer, reader) = tokio::io::duplex(64);
        let mut io = SendDeadline::new(writer, Duration::from_secs(60), Requests::new());
        io.write_all(&[0; 64]).await?;
        let error = io.write_all(&[0; 64]).await.err();
        assert_eq!(
            error.as_ref().map(io::Error::kind),
            Some(io::ErrorKind::TimedOut)
        );
        let text = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("--client-send-timeout"), "{text}");
        // Held open until here: a closed pipe would fail the first write otherwise.
        drop(reader);

        // A reader that takes 50 s per 64 bytes keeps every write under the bound.
        let (writer, mut slow) = tokio::io::duplex(64);
        let mut io = SendDeadline::new(writer, Duration::from_secs(60), Requests::new());
        let reading = tokio::spawn(async move {
            let mut chunk = [0; 64];
            let mut total = 0;
            while total < 64 * 5 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                total += slow.read(&mut chunk).await?;
            }
            io::Result::Ok(total)
        });
        io.write_all(&[0; 64 * 5]).await?;
        assert_eq!(reading.await?.ok(), Some(64 * 5));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_write_waits_is_not_idle() -> io::Result<()> {
        // A response's tail still going out to a slow reader after its body has ended: no
        // request is open, but the connection is busy.
        let requests = Requests::new();
        let timeout = Duration::from_secs(60);
        let (writer, mut reader) = tokio::io::duplex(64);
        let mut io = SendDeadline::new(writer, Duration::ZERO, Arc::clone(&requests));
        io.write_all(&[0; 64]).await?;
        let watch = {
            let requests = Arc::clone(&requests);
            tokio::spawn(async move { requests.idle_for(requests.opened(), timeout).await })
        };
        let writing = tokio::spawn(async move { io.write_all(&[0; 64]).await });
        tokio::time::sleep(timeout * 5).await;
        assert!(!watch.is_finished());
        // Taken at last: the write goes on, and the idle time counts from then.
        let taken = Instant::now();
        let mut all = [0; 128];
        reader.read_exact(&mut all).await?;
        writing.await??;
        assert!(watch.await.is_ok());
        assert!(taken.elapsed() >= timeout, "{:?}", taken.elapsed());
        assert!(taken.elapsed() < timeout * 2, "{:?}", taken.elapsed());
        Ok(())
    }
}
