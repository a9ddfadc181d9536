//! The upstream's response body, streamed to the client as it is read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::proxy::upstream::conn::Conn;
use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::idle::Pool;

/// The upstream's response body, streamed. Its connection goes back to the pool the moment
/// the body has been read to its end, if it can carry another request; a body dropped
/// before its end, or that fails, closes it. Each wait for the next piece is bounded by the
/// upstream timeout (nginx's `proxy_read_timeout`).
#[derive(Debug)]
pub struct PooledBody {
    /// What is left to read (none: the body ended, failed, or never was).
    incoming: Option<Incoming>,
    /// The connection it is read from, until the body ends.
    conn: Option<Returning>,
    timeout: Duration,
    /// A wait for the next piece has begun (the connection's timer runs).
    waiting: bool,
}

/// A connection on its way back to its pool.
#[derive(Debug)]
struct Returning {
    conn: Conn,
    pool: Arc<Pool>,
    /// The connection can carry another request once the body ends: not when the
    /// upstream answered before it had the whole request.
    reusable: bool,
}

impl PooledBody {
    /// `incoming`, read from `conn`, which goes back to `pool` at the body's end if
    /// `reusable`.
    pub(crate) fn pooled(
        incoming: Incoming,
        conn: Conn,
        pool: Arc<Pool>,
        reusable: bool,
        timeout: Duration,
    ) -> PooledBody {
        let mut body = PooledBody {
            incoming: Some(incoming),
            conn: Some(Returning {
                conn,
                pool,
                reusable,
            }),
            timeout,
            waiting: false,
        };
        if body.incoming.as_ref().is_some_and(Body::is_end_stream) {
            body.ended();
        }
        body
    }

    /// No body (a switch's answer).
    pub(crate) fn empty() -> PooledBody {
        PooledBody {
            incoming: None,
            conn: None,
            timeout: Duration::ZERO,
            waiting: false,
        }
    }

    /// The body has been read to its end: the connection goes back, or, if it cannot carry
    /// another request, is let go (hyper closes it once it has finished what it is doing).
    fn ended(&mut self) {
        self.incoming = None;
        if let Some(returning) = self.conn.take() {
            if returning.reusable {
                returning.pool.put(returning.conn);
            }
        }
    }

    /// The body failed: its connection is closed at once.
    fn failed(&mut self) {
        self.incoming = None;
        if let Some(returning) = self.conn.take() {
            returning.conn.close();
        }
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // Dropped before its end: what is left of it is on the connection.
        self.failed();
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
        let Some(incoming) = this.incoming.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(&mut *incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting = false;
                // Trailers are the last frame: whoever reads the body need not ask again.
                if frame.is_trailers() || incoming.is_end_stream() {
                    this.ended();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.ended();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                this.failed();
                Poll::Ready(Some(Err(UpstreamError::Http(error))))
            }
            Poll::Pending => {
                let Some(returning) = this.conn.as_mut() else {
                    return Poll::Pending;
                };
                let timer = &mut returning.conn.timer;
                if !this.waiting {
                    this.waiting = true;
                    timer.as_mut().reset(Instant::now() + this.timeout);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    this.failed();
                    return Poll::Ready(Some(Err(UpstreamError::BodyTimeout(this.timeout))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}
