//! The upstream's response body, streamed to the client as it is read.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::proxy::upstream::chunked::{ChunkedDecoder, Decoded};
use crate::proxy::upstream::conn::Conn;
use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::pool::Pool;
use crate::proxy::upstream::request::Outgoing;
use crate::proxy::upstream::response::Framing;

/// Where the body is.
#[derive(Debug)]
enum State {
    /// The whole body, read with the head.
    Whole(Bytes),
    /// This many bytes left to read.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the upstream closes.
    UntilClose,
    Ended,
}

/// The upstream's response body, streamed. Its connection goes back to the pool the moment
/// the body has been read to its end (a body dropped before its end closes the connection).
#[derive(Debug)]
pub struct PooledBody {
    state: State,
    conn: Option<(Conn, Arc<Pool>)>,
    /// What is left of the request's body when the upstream answered before reading it all.
    outgoing: Option<Outgoing>,
    /// Whether the connection may carry another request once the body has ended.
    keep_alive: bool,
}

impl PooledBody {
    /// The body framed as `framing`, read from `conn` (whose buffer holds what came after the
    /// head).
    pub(crate) fn new(
        framing: Framing,
        mut conn: Conn,
        pool: Arc<Pool>,
        outgoing: Option<Outgoing>,
        keep_alive: bool,
    ) -> PooledBody {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Ended,
            Framing::Length(length) => match usize::try_from(length) {
                Ok(length) if length <= conn.io.read.len() => {
                    State::Whole(conn.io.read.split_to(length).freeze())
                }
                _ => State::Length(length),
            },
            Framing::Chunked => State::Chunked(ChunkedDecoder::default()),
            Framing::UntilClose => State::UntilClose,
        };
        let mut body = PooledBody {
            conn: Some((conn, pool)),
            state,
            outgoing,
            keep_alive,
        };
        if matches!(body.state, State::Ended | State::Whole(_)) {
            body.release();
        }
        body
    }

    /// The connection back to its pool if it can carry another request, else closed.
    fn release(&mut self) {
        if let Some((conn, pool)) = self.conn.take() {
            if self.keep_alive && conn.io.read.is_empty() {
                pool.put(conn);
            }
        }
    }

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        loop {
            let io = match (&mut self.state, &mut self.conn) {
                (State::Ended, _) => return Poll::Ready(None),
                (State::Whole(whole), _) => {
                    let whole = std::mem::take(whole);
                    self.state = State::Ended;
                    return Poll::Ready(Some(Ok(whole)));
                }
                // Not reached: the connection goes only with the end of the body, or an error.
                (_, None) => return Poll::Ready(Some(Err(UpstreamError::Closed))),
                (_, Some((conn, _))) => &mut conn.io,
            };
            match &mut self.state {
                State::Length(left) if !io.read.is_empty() => {
                    let take =
                        usize::try_from(*left).map_or(io.read.len(), |l| l.min(io.read.len()));
                    *left -= take as u64;
                    let data = io.read.split_to(take).freeze();
                    if *left == 0 {
                        self.state = State::Ended;
                        self.release();
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                State::Chunked(decoder) => match decoder.decode(&mut io.read)? {
                    Decoded::Data(data) => return Poll::Ready(Some(Ok(data))),
                    Decoded::Done => {
                        self.state = State::Ended;
                        self.release();
                        return Poll::Ready(None);
                    }
                    Decoded::NeedMore => {}
                },
                State::UntilClose if !io.read.is_empty() => {
                    return Poll::Ready(Some(Ok(io.read.split().freeze())));
                }
                _ => {}
            }
            if ready!(io.poll_fill(cx))? == 0 {
                if matches!(self.state, State::UntilClose) {
                    self.state = State::Ended;
                    self.conn = None;
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Err(UpstreamError::Closed)));
            }
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = self.get_mut();
        // The rest of a request body the upstream answered early, which it may still be
        // reading (as an echo does). Only a reader of the response moves it on, as hyper's own
        // client did not: a client that reads nothing before its upload ends, of an upstream
        // that answers while it reads, waits on itself.
        if let (Some(outgoing), Some((conn, _))) = (&mut this.outgoing, &mut this.conn) {
            if outgoing.poll_send(conn.io.stream(), cx).is_ready() {
                this.outgoing = None;
            }
        }
        let polled = this.poll_data(cx);
        if let Poll::Ready(Some(Err(_))) = polled {
            this.conn = None;
            this.state = State::Ended;
        }
        polled.map(|data| data.map(|data| data.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Ended)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Whole(whole) => SizeHint::with_exact(whole.len() as u64),
            State::Length(left) => SizeHint::with_exact(*left),
            State::Ended => SizeHint::with_exact(0),
            State::Chunked(_) | State::UntilClose => SizeHint::default(),
        }
    }
}
