//! The client's connection as the server and a request's body share it: the socket, what has
//! been read from it and not consumed, and how much of the request body is left.
//!
//! The server and the body run on the same task but for the rest of an upload a fast answer
//! leaves (`upstream::body`), so the lock is taken by one at a time and never waited for.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::SizeHint;
use parking_lot::Mutex;
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use crate::proxy::client_body::ClientBodyError;
use crate::proxy::wire::{ChunkedDecoder, Decoded, Malformed};

/// How much room a read into the buffer asks for at least.
const READ_ROOM: usize = 8 * 1024;
/// The interim answer to `Expect: 100-continue`, written when the body is first read.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// How much of the current request's body is left to read.
#[derive(Debug)]
pub(crate) enum BodyLeft {
    /// None: the next request's head comes next.
    Ended,
    /// This many bytes.
    Length(u64),
    /// Up to the chunked coding's last chunk.
    Chunked(ChunkedDecoder),
    /// The chunked coding broke: the connection cannot carry another request.
    Broken(&'static str),
}

/// The client's connection.
#[derive(Debug)]
pub(crate) struct ClientIo {
    stream: TcpStream,
    pub(crate) read: BytesMut,
    pub(crate) body: BodyLeft,
    /// How much of `100 Continue` is left to write before the body is read.
    pub(crate) continue_left: usize,
}

pub(crate) type SharedIo = Arc<Mutex<ClientIo>>;

impl ClientIo {
    pub(crate) fn new(stream: TcpStream, read: BytesMut) -> ClientIo {
        ClientIo {
            stream,
            read,
            body: BodyLeft::Ended,
            continue_left: 0,
        }
    }

    /// Asks for `100 Continue` to be written when the body is first read.
    pub(crate) fn expect_continue(&mut self) {
        self.continue_left = CONTINUE.len();
    }

    /// Reads more into the buffer; `Ok(0)`: the client closed its side.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.read.reserve(READ_ROOM);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.read)
    }

    pub(crate) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, bytes)
    }

    pub(crate) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    /// Consumes what the buffer holds of a body nobody reads; whether that was all of it, so
    /// that the next request's head follows.
    pub(crate) fn discard_buffered_body(&mut self) -> bool {
        loop {
            match &mut self.body {
                BodyLeft::Ended => return true,
                BodyLeft::Broken(_) => return false,
                BodyLeft::Length(left) => {
                    let Ok(left_here) = usize::try_from(*left) else {
                        return false;
                    };
                    if left_here > self.read.len() {
                        return false;
                    }
                    let _ = self.read.split_to(left_here);
                    self.body = BodyLeft::Ended;
                }
                BodyLeft::Chunked(decoder) => match decoder.decode(&mut self.read) {
                    Ok(Decoded::Data(_)) => {}
                    Ok(Decoded::Done) => self.body = BodyLeft::Ended,
                    Ok(Decoded::NeedMore) => return false,
                    Err(Malformed(what)) => self.body = BodyLeft::Broken(what),
                },
            }
        }
    }

    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, ClientBodyError>>> {
        while self.continue_left > 0 {
            let start = CONTINUE.len() - self.continue_left;
            let written = ready!(Pin::new(&mut self.stream).poll_write(cx, &CONTINUE[start..]))?;
            if written == 0 {
                return Poll::Ready(Some(Err(ClientBodyError::Closed)));
            }
            self.continue_left -= written;
        }
        loop {
            match &mut self.body {
                BodyLeft::Ended => return Poll::Ready(None),
                BodyLeft::Broken(what) => {
                    return Poll::Ready(Some(Err(ClientBodyError::Malformed(what))));
                }
                BodyLeft::Length(left) if !self.read.is_empty() => {
                    let take = usize::try_from(*left)
                        .map_or(self.read.len(), |left| left.min(self.read.len()));
                    *left -= take as u64;
                    if *left == 0 {
                        self.body = BodyLeft::Ended;
                    }
                    return Poll::Ready(Some(Ok(self.read.split_to(take).freeze())));
                }
                BodyLeft::Length(_) => {}
                BodyLeft::Chunked(decoder) => match decoder.decode(&mut self.read) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(data))),
                    Ok(Decoded::Done) => {
                        self.body = BodyLeft::Ended;
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(Malformed(what)) => self.body = BodyLeft::Broken(what),
                },
            }
            if let BodyLeft::Length(_) | BodyLeft::Chunked(_) = self.body {
                if ready!(self.poll_fill(cx))? == 0 {
                    return Poll::Ready(Some(Err(ClientBodyError::Closed)));
                }
            }
        }
    }
}

/// A request body read off the client's HTTP/1.1 connection as it is polled.
#[derive(Debug)]
pub struct H1Body {
    io: SharedIo,
}

impl H1Body {
    pub(crate) fn new(io: SharedIo) -> H1Body {
        H1Body { io }
    }

    pub(crate) fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, ClientBodyError>>> {
        self.io.lock().poll_body(cx)
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        matches!(self.io.lock().body, BodyLeft::Ended)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.io.lock().body {
            BodyLeft::Ended => SizeHint::with_exact(0),
            BodyLeft::Length(left) => SizeHint::with_exact(left),
            BodyLeft::Chunked(_) | BodyLeft::Broken(_) => SizeHint::default(),
        }
    }
}
