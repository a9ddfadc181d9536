//! The upstream's response body, streamed to the client as it is read.

use std::future::Future;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::AsyncRead;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use crate::proxy::upstream::chunked::{ChunkedDecoder, Decoded};
use crate::proxy::upstream::conn::{Conn, Io};
use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::idle::Pool;
use crate::proxy::upstream::request::Outgoing;
use crate::proxy::upstream::response::Framing;
use crate::proxy::upstream::send_wait::{SendWait, Timeouts};

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

/// Where the body is read from.
#[derive(Debug)]
enum Source {
    /// A pooled connection, back to its pool when the body ends if it can be.
    Pooled(Conn, Arc<Pool>),
    /// The reading half of a connection whose request body a task of its own is still
    /// writing (the upstream answered before it had all of it); dropping the sender stops it.
    Uploading {
        io: Io<OwnedReadHalf>,
        /// The connection's timer, for the wait between two reads.
        timer: Pin<Box<Sleep>>,
        /// Held only to be dropped.
        _stop: oneshot::Sender<()>,
    },
    /// The connection is gone: the body ended, or failed.
    Gone,
}

/// The upstream's response body, streamed. Its connection goes back to the pool the moment
/// the body has been read to its end (a body dropped before its end closes the connection).
#[derive(Debug)]
pub struct PooledBody {
    state: State,
    source: Source,
    /// Whether the connection may carry another request once the body has ended.
    keep_alive: bool,
    wait: ReadWait,
}

/// How long a body may wait for its next bytes: the upstream timeout, as nginx's
/// `proxy_read_timeout` bounds the wait between two reads, not the whole body.
#[derive(Debug, Clone, Copy)]
struct ReadWait {
    timeout: Duration,
    /// When bytes of the body last came (the head's arrival to begin with; none for a body
    /// that came whole with its head, so that it costs no clock read).
    last_read: Option<Instant>,
}

impl PooledBody {
    /// The body framed as `framing`, read from `conn` (whose buffer holds what came after the
    /// head), which goes back to `pool` after it if `keep_alive`.
    pub(crate) fn pooled(
        framing: Framing,
        mut conn: Conn,
        pool: Arc<Pool>,
        keep_alive: bool,
        timeout: Duration,
    ) -> PooledBody {
        let state = State::new(framing, &mut conn.io.read);
        PooledBody::new(state, Source::Pooled(conn, pool), keep_alive, timeout)
    }

    /// The body of an answer that came before the request body had all been written: the rest
    /// of that body is written by a task of its own, so that the upstream, which may read it
    /// while it answers (as an echo does), gets it whether or not the client reads the answer
    /// meanwhile. The connection is not used again: what the upstream makes of the rest is
    /// unknown.
    pub(crate) fn uploading(
        framing: Framing,
        conn: Conn,
        rest: Outgoing,
        timeouts: Timeouts,
    ) -> PooledBody {
        let timeout = timeouts.upstream;
        let Conn { io, timer } = conn;
        let (mut io, writer) = io.split();
        let state = State::new(framing, &mut io.read);
        if matches!(state, State::Ended | State::Whole(_)) {
            // The answer is whole already, and the connection ends with it.
            return PooledBody::new(state, Source::Gone, false, timeout);
        }
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(finish_upload(rest, writer, stopped, timeouts));
        let source = Source::Uploading {
            io,
            timer,
            _stop: stop,
        };
        PooledBody::new(state, source, false, timeout)
    }

    /// No body at all (the answer to a switch to WebSocket, whose connection is a tunnel now).
    pub(crate) fn empty(timeout: Duration) -> PooledBody {
        PooledBody::new(State::Ended, Source::Gone, false, timeout)
    }

    fn new(state: State, source: Source, keep_alive: bool, timeout: Duration) -> PooledBody {
        let mut body = PooledBody {
            state,
            source,
            keep_alive,
            wait: ReadWait {
                timeout,
                last_read: None,
            },
        };
        if !matches!(body.state, State::Ended | State::Whole(_)) {
            body.wait.last_read = Some(Instant::now());
        }
        if matches!(body.state, State::Ended | State::Whole(_)) {
            body.release();
        }
        body
    }

    /// The connection back to its pool if it can carry another request, else closed (an
    /// upload still going on with it stops).
    fn release(&mut self) {
        if let Source::Pooled(conn, pool) = std::mem::replace(&mut self.source, Source::Gone) {
            if self.keep_alive && conn.io.read.is_empty() {
                pool.put(conn);
            }
        }
    }

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        match &mut self.state {
            State::Ended => return Poll::Ready(None),
            State::Whole(whole) => {
                let whole = std::mem::take(whole);
                self.state = State::Ended;
                return Poll::Ready(Some(Ok(whole)));
            }
            _ => {}
        }
        let wait = &mut self.wait;
        let read = match &mut self.source {
            Source::Pooled(conn, _) => {
                read_body(&mut self.state, &mut conn.io, &mut conn.timer, wait, cx)
            }
            Source::Uploading { io, timer, .. } => read_body(&mut self.state, io, timer, wait, cx),
            // Not reached: the connection goes only with the end of the body, or an error.
            Source::Gone => Poll::Ready(Some(Err(UpstreamError::Closed))),
        };
        if matches!(self.state, State::Ended) {
            self.release();
        }
        read
    }
}

impl State {
    /// The state of a body framed as `framing`, the start of which `read` holds.
    fn new(framing: Framing, read: &mut BytesMut) -> State {
        match framing {
            Framing::Empty | Framing::Length(0) => State::Ended,
            Framing::Length(length) => match usize::try_from(length) {
                Ok(length) if length <= read.len() => State::Whole(read.split_to(length).freeze()),
                _ => State::Length(length),
            },
            Framing::Chunked => State::Chunked(ChunkedDecoder::default()),
            Framing::UntilClose => State::UntilClose,
        }
    }
}

/// The next piece of a body being read from `io` (`state` is `Length`, `Chunked` or
/// `UntilClose`, and `Ended` once the body has ended), waiting on `timer` at most `wait`'s
/// timeout for bytes.
fn read_body<S: AsyncRead + Unpin>(
    state: &mut State,
    io: &mut Io<S>,
    timer: &mut Pin<Box<Sleep>>,
    wait: &mut ReadWait,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Bytes, UpstreamError>>> {
    loop {
        match state {
            State::Length(left) if !io.read.is_empty() => {
                let take = usize::try_from(*left).map_or(io.read.len(), |l| l.min(io.read.len()));
                *left -= take as u64;
                if *left == 0 {
                    *state = State::Ended;
                }
                return Poll::Ready(Some(Ok(io.read.split_to(take).freeze())));
            }
            State::Chunked(decoder) => match decoder.decode(&mut io.read)? {
                Decoded::Data(data) => return Poll::Ready(Some(Ok(data))),
                Decoded::Done => {
                    *state = State::Ended;
                    return Poll::Ready(None);
                }
                Decoded::NeedMore => {}
            },
            State::UntilClose if !io.read.is_empty() => {
                return Poll::Ready(Some(Ok(io.read.split().freeze())));
            }
            State::Ended | State::Whole(_) => return Poll::Ready(None),
            State::Length(_) | State::UntilClose => {}
        }
        let Poll::Ready(filled) = io.poll_fill(cx) else {
            // Moved only when the wait begins, not at every read: a body read without waiting
            // costs no timer update.
            let due = *wait.last_read.get_or_insert_with(Instant::now) + wait.timeout;
            if timer.deadline() != due {
                timer.as_mut().reset(due);
            }
            ready!(timer.as_mut().poll(cx));
            return Poll::Ready(Some(Err(UpstreamError::BodyTimeout(wait.timeout))));
        };
        if filled? == 0 {
            if matches!(state, State::UntilClose) {
                *state = State::Ended;
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Err(UpstreamError::Closed)));
        }
        wait.last_read = Some(Instant::now());
    }
}

/// Writes the rest of a request body, until it has all been written, or `stopped` (the answer
/// ended or was dropped, and the connection with it), or it went nowhere for longer than
/// `timeouts` allow.
async fn finish_upload(
    mut rest: Outgoing,
    mut writer: OwnedWriteHalf,
    stopped: oneshot::Receiver<()>,
    timeouts: Timeouts,
) {
    let mut wait = SendWait::new(timeouts, Instant::now());
    let mut timer = Box::pin(tokio::time::sleep(timeouts.upstream));
    let sending = poll_fn(|cx| {
        if let Poll::Ready(sent) = rest.poll_send(&mut writer, cx) {
            return Poll::Ready(sent.is_ok());
        }
        wait.poll_stalled(Some(&rest), &mut timer, cx)
            .map(|_| false)
    });
    tokio::select! {
        biased;
        _ = stopped => {}
        sent = sending => {
            if sent {
                // Not shut down: the upstream may take a half-closed connection for a client
                // gone while it still answers. The reading half closes it when it goes.
                writer.forget();
            }
            // Else dropped, which shuts it down: the upstream sees the body cut short.
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
        let polled = this.poll_data(cx);
        if let Poll::Ready(Some(Err(_))) = polled {
            this.source = Source::Gone;
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
