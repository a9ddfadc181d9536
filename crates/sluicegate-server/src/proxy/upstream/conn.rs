//! One keep-alive connection to the upstream, and one exchange on it: the request written,
//! its response head read.
//!
//! The request and its response are driven by the task of the client's request, on the
//! connection itself: no task of its own, no channel to one (hyper's client connection is a
//! task its requests are handed to, and waking it cost about a third of the proxy's
//! instructions per request).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::{Instant, Sleep};

use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::request::Outgoing;
use crate::proxy::upstream::response::{self, Asked, Head, Parsed};
use crate::proxy::upstream::send_wait::{SendWait, Stall};

/// How many interim (1xx) responses may come before the final one.
const MAX_INTERIM: usize = 8;
/// How much room a read into the buffer asks for at least.
const READ_ROOM: usize = 8 * 1024;

/// A connection to the upstream (or its reading half) and what has been read from it and not
/// yet consumed.
#[derive(Debug)]
pub(crate) struct Io<S = TcpStream> {
    stream: S,
    pub(crate) read: BytesMut,
}

/// A keep-alive connection to the upstream, and the timer its requests wait on.
///
/// The timer lives as long as the connection and is moved to each request's deadline: moving a
/// registered timer later only updates it, where a timer per request is inserted into tokio's
/// timer wheel and removed from it again (about 1.5% of the proxy's instructions per request).
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) io: Io,
    pub(crate) timer: Pin<Box<Sleep>>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, deadline: Instant) -> Conn {
        Conn {
            io: Io {
                stream,
                read: BytesMut::new(),
            },
            timer: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }
}

/// An exchange that got no response head.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The connection failed; `answered`: whether any byte of a response arrived.
    Broken {
        error: UpstreamError,
        answered: bool,
    },
    /// The request went nowhere for as long as the side it waited for may take.
    Stalled(Stall),
}

impl<S: AsyncRead + Unpin> Io<S> {
    /// Reads more from the connection into the buffer; `Ok(0)` once the upstream has closed.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read.capacity() - self.read.len() < READ_ROOM / 2 {
            self.read.reserve(READ_ROOM);
        }
        // A read shorter than the room given clears the socket's readiness (tokio), so an idle
        // connection's next check costs no system call.
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.read)
    }
}

impl Io {
    /// The connection itself, and what has been read from it and not yet consumed.
    pub(crate) fn into_parts(self) -> (TcpStream, BytesMut) {
        (self.stream, self.read)
    }

    /// The reading half, with what has been read, and the writing half.
    pub(crate) fn split(self) -> (Io<OwnedReadHalf>, OwnedWriteHalf) {
        let (reader, writer) = self.stream.into_split();
        let io = Io {
            stream: reader,
            read: self.read,
        };
        (io, writer)
    }

    /// Whether an idle connection can no longer carry a request: the upstream closed it, or
    /// sent what no request asked for. Reads only if the socket was reported readable (no
    /// system call otherwise), outside the task's cooperative budget.
    pub(crate) fn is_stale(&mut self) -> bool {
        if !self.read.is_empty() {
            return true;
        }
        let mut probe = [0; 1];
        !matches!(
            self.stream.try_read(&mut probe),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock
        )
    }

    /// Writes the request's `head`, then its body (if any) while the response head is awaited:
    /// an upstream may answer before it has read the whole body, and then what is left of the
    /// body goes on while the response is read (and the connection is not used again).
    /// `asked`: what the request asked of its response. Every wait is bounded by `wait`, on
    /// `timer`.
    pub(crate) async fn exchange(
        &mut self,
        head: &[u8],
        outgoing: &mut Option<Outgoing>,
        asked: Asked,
        timer: &mut Pin<Box<Sleep>>,
        wait: &mut SendWait,
    ) -> Result<Head, Failed> {
        let mut head = head;
        let mut answered = false;
        let mut interim = 0;
        poll_fn(|cx| {
            while !head.is_empty() {
                match Pin::new(&mut self.stream).poll_write(cx, head) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(UpstreamError::Closed.into())),
                    Poll::Ready(Ok(written)) => head = &head[written..],
                    Poll::Ready(Err(error)) => {
                        return Poll::Ready(Err(UpstreamError::from(error).into()));
                    }
                    // The body has not begun: the upstream is the one to wait for.
                    Poll::Pending => {
                        return wait
                            .poll_stalled(None, timer, cx)
                            .map(|stall| Err(Failed::Stalled(stall)));
                    }
                }
            }
            if let Some(body) = outgoing.as_mut().filter(|body| !body.is_done()) {
                match body.poll_send(&mut self.stream, cx) {
                    Poll::Ready(Err(
                        error @ (UpstreamError::RequestBody(_)
                        | UpstreamError::RequestBodyTooLarge(_)),
                    )) => {
                        return Poll::Ready(Err(Failed::Broken { error, answered }));
                    }
                    // Otherwise the upstream stopped reading: it may have answered already.
                    Poll::Ready(_) | Poll::Pending => {}
                }
            }
            loop {
                let broken = move |error| Poll::Ready(Err(Failed::Broken { error, answered }));
                match response::parse(&mut self.read, asked) {
                    Err(error) => return broken(error),
                    Ok(Parsed::Final(head)) => return Poll::Ready(Ok(head)),
                    // A bound, so that an upstream cannot keep a request busy with them.
                    Ok(Parsed::Interim) if interim == MAX_INTERIM => {
                        return broken(UpstreamError::InvalidResponse(
                            "more than 8 interim (1xx) responses",
                        ));
                    }
                    Ok(Parsed::Interim) => interim += 1,
                    Ok(Parsed::Partial) => match self.poll_fill(cx) {
                        Poll::Ready(Ok(0)) => return broken(UpstreamError::Closed),
                        Poll::Ready(Ok(_)) => answered = true,
                        Poll::Ready(Err(error)) => return broken(error.into()),
                        Poll::Pending => {
                            return wait
                                .poll_stalled(outgoing.as_ref(), timer, cx)
                                .map(|stall| Err(Failed::Stalled(stall)));
                        }
                    },
                }
            }
        })
        .await
    }
}

impl From<UpstreamError> for Failed {
    /// A failure before any of a response came.
    fn from(error: UpstreamError) -> Failed {
        Failed::Broken {
            error,
            answered: false,
        }
    }
}
