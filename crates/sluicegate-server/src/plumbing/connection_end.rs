//! How a client connection ends, for every listener that serves HTTP with hyper (the proxy's,
//! `serve`'s HTTP API and the admin listener): HTTP/1.1 told from h2 by the first bytes, a
//! bound on how long a connection may have no request open (nginx's `client_header_timeout`
//! and `keepalive_timeout`, for h2 as for HTTP/1.1: hyper bounds neither an idle h2
//! connection nor, without a timer, an HTTP/1.1 head), and the graceful end on shutdown.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::rt::bounds::Http2ServerConnExec;
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::plumbing::branch_wakers::BranchWakers;
use crate::plumbing::client_idle::Requests;
use crate::plumbing::h2_stall::Stalls;

/// What every h2 connection opens with (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a client connection speaks, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1 (or 1.0).
    Http1,
    /// h2, over TLS by ALPN or in the clear with prior knowledge.
    H2,
}

/// What the first bytes of `stream` tell (left unread for hyper): hyper waits for them before
/// it serves anything, so they are waited for here first, bounded by `header_timeout` and
/// not past a shutdown (`stopping`). `None`: the client closed, failed, or took too long, or
/// the server stops.
pub(crate) async fn protocol_told(
    stream: &TcpStream,
    header_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
) -> Option<Protocol> {
    unless_stopped(stopping, bounded(header_timeout, first_bytes(stream)))
        .await
        .flatten()
        .and_then(|told| told.ok().flatten())
}

/// Waits until the first bytes tell HTTP/1.1 from h2; `None`: the client closed first.
async fn first_bytes(stream: &TcpStream) -> std::io::Result<Option<Protocol>> {
    let mut first = [0u8; H2_PREFACE.len()];
    loop {
        let seen = stream.peek(&mut first).await?;
        if seen == 0 {
            return Ok(None);
        }
        if first[..seen] != H2_PREFACE[..seen] {
            return Ok(Some(Protocol::Http1));
        }
        if seen == first.len() {
            return Ok(Some(Protocol::H2));
        }
        // Part of h2's preface: a peek would return at once until more comes.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `future`'s output, unless the server stops first (`stopping` told): what a connection
/// waits for before it has begun anything (its first bytes, a TLS handshake) is not waited
/// for by a shutdown. When both are ready the output wins: whether a connection whose first
/// bytes have come is served does not depend on which wake-up came first.
pub(crate) async fn unless_stopped<F: Future>(
    stopping: &mut watch::Receiver<()>,
    future: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        output = future => Some(output),
        _ = stopping.changed() => None,
    }
}

/// `future`'s output, unless `bound` (not zero: no bound) runs out first.
pub(crate) async fn bounded<F: Future>(bound: Duration, future: F) -> Option<F::Output> {
    if bound.is_zero() {
        return Some(future.await);
    }
    tokio::time::timeout(bound, future).await.ok()
}

/// hyper's builders of both protocols, as a listener sets them up.
pub(crate) struct Builders {
    pub(crate) http1: http1::Builder,
    pub(crate) http2: http2::Builder<TokioExecutor>,
}

/// Serves `io` with `service` by `protocol` until it ends ([`until_ended`]: `stopping`,
/// `idle`, `stalled`). HTTP/1.1 with upgrades: a switch the service answers `101` to takes
/// the connection over.
pub(crate) async fn serve_until_ended<IO, S, B>(
    io: IO,
    service: S,
    protocol: Protocol,
    builders: &Builders,
    stopping: watch::Receiver<()>,
    idle: Option<(Arc<Requests>, Duration)>,
    stalled: Option<(Arc<Stalls>, Duration)>,
) -> Ended
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<B>, Error = std::convert::Infallible>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: Http2ServerConnExec<S::Future, B>,
{
    match protocol {
        Protocol::Http1 => {
            let connection = builders.http1.serve_connection(io, service).with_upgrades();
            let finish = |connection: Pin<&mut _>| {
                http1::UpgradeableConnection::graceful_shutdown(connection);
            };
            until_ended(connection, finish, protocol, stopping, idle, stalled).await
        }
        Protocol::H2 => {
            let connection = builders.http2.serve_connection(io, service);
            let finish = |connection: Pin<&mut _>| {
                http2::Connection::graceful_shutdown(connection);
            };
            until_ended(connection, finish, protocol, stopping, idle, stalled).await
        }
    }
}

/// How a connection's serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// hyper ended it cleanly: the client closed, an answer closed it (hyper's own 431 to a
    /// head past the bound included), or it finished when told to.
    Closed,
    /// hyper ended it on an error: the client reset it, broke HTTP, or read nothing of its
    /// response for the send timeout.
    Failed,
    /// The server dropped it: idle, stalled, or told to finish and idle since.
    Dropped,
}

impl Ended {
    fn of(served: &Result<(), hyper::Error>) -> Ended {
        match served {
            Ok(()) => Ended::Closed,
            // hyper answered the head itself (431, or 414 for a target past 64 KiB) and closed:
            // the client may still be sending the rest of the head, and is to read that
            // answer, not a reset, as nginx lingers after its own 400.
            Err(error) if error.is_parse_too_large() => Ended::Closed,
            Err(_) => Ended::Failed,
        }
    }
}

/// Why a connection is told to finish what it has begun.
enum Closing {
    /// The server stops.
    Stopping,
    /// No request has been open for the idle timeout.
    Idle,
}

/// Drives `connection` until it ends, or is dropped, and says which.
///
/// - When the server stops, or `idle` says no request has been open for its timeout, the
///   connection is told to finish what it has begun (h2: `GOAWAY`). An HTTP/1.1 connection
///   idle that long is dropped at once instead: it has nothing begun, and hyper would go on
///   reading a head it had begun on a new connection.
/// - A connection told to finish is dropped once no request has been open on it for the idle
///   timeout since it was told: a head that never ends, a peer gone without a word (h2's
///   closing ping unanswered). Requests it had begun, or that came before the client saw
///   `GOAWAY`, finish first, however long they take.
/// - A connection with an h2 response `stalled` says its client has taken nothing of for
///   that long is dropped at any time, its other streams with it: hyper gives no way to reset
///   one stream whose body it is not asking for more.
async fn until_ended<C: Future<Output = Result<(), hyper::Error>>>(
    connection: C,
    finish: impl FnOnce(Pin<&mut C>),
    protocol: Protocol,
    mut stopping: watch::Receiver<()>,
    idle: Option<(Arc<Requests>, Duration)>,
    stalled: Option<(Arc<Stalls>, Duration)>,
) -> Ended {
    tokio::pin!(connection);
    let idle_since = |since: Instant| {
        let idle = idle.clone();
        async move {
            match idle {
                Some((requests, timeout)) => requests.idle_for(since, timeout).await,
                None => std::future::pending().await,
            }
        }
    };
    let opened = idle
        .as_ref()
        .map_or_else(Instant::now, |(requests, _)| requests.opened());
    let idle_for = idle_since(opened);
    tokio::pin!(idle_for);
    let stalled_for = async {
        match &stalled {
            Some((stalls, timeout)) => stalls.stalled_for(*timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stalled_for);
    let told_to_stop = stopping.changed();
    tokio::pin!(told_to_stop);
    // The connection is polled at every wake-up, the rest only when their own waker fired.
    let branches = BranchWakers::<3>::new();
    let closing = poll_fn(|cx| {
        let woken = branches.woken(cx);
        // A client that goes away mid-request is no error of the proxy's.
        if let Poll::Ready(served) = connection.as_mut().poll(cx) {
            return Poll::Ready(Err(Ended::of(&served)));
        }
        if woken.has(STALLED) && branches.poll(STALLED, stalled_for.as_mut()).is_ready() {
            stalled_log();
            return Poll::Ready(Err(Ended::Dropped));
        }
        if woken.has(STOPPING) && branches.poll(STOPPING, told_to_stop.as_mut()).is_ready() {
            return Poll::Ready(Ok(Closing::Stopping));
        }
        if woken.has(IDLE) && branches.poll(IDLE, idle_for.as_mut()).is_ready() {
            return Poll::Ready(Ok(Closing::Idle));
        }
        Poll::Pending
    })
    .await;
    let closing = match closing {
        Ok(closing) => closing,
        Err(ended) => return ended,
    };
    if matches!(closing, Closing::Idle) && protocol == Protocol::Http1 {
        return Ended::Dropped;
    }
    finish(connection.as_mut());
    let idle_after = idle_since(Instant::now());
    tokio::pin!(idle_after);
    branches.wake(IDLE);
    poll_fn(|cx| {
        let woken = branches.woken(cx);
        if let Poll::Ready(served) = connection.as_mut().poll(cx) {
            return Poll::Ready(Ended::of(&served));
        }
        if woken.has(STALLED) && branches.poll(STALLED, stalled_for.as_mut()).is_ready() {
            stalled_log();
            return Poll::Ready(Ended::Dropped);
        }
        if woken.has(IDLE) && branches.poll(IDLE, idle_after.as_mut()).is_ready() {
            return Poll::Ready(Ended::Dropped);
        }
        Poll::Pending
    })
    .await
}

/// The branches of a connection's task ([`BranchWakers`]) beside the connection itself.
const STALLED: usize = 0;
const STOPPING: usize = 1;
const IDLE: usize = 2;

fn stalled_log() {
    tracing::info!(
        "closed a client connection: it took nothing of an h2 response for --client-send-timeout"
    );
}
