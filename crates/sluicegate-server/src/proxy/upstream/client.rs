//! Sending a request to the upstream on a pooled connection of the current worker thread,
//! each wait bounded, and resending it once when a kept-alive connection turned out closed.
//!
//! One pool per worker thread: a request is sent on an idle connection of the pool of the
//! thread serving it, so that a request never wakes a task of another thread, and the pool
//! is a plain stack behind a lock no other thread takes (hyper-util's pooled client keys
//! every checkout by scheme and authority in a shared map, and spawns a task per request to
//! put the connection back).

use std::cell::Cell;
use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::Poll;
use std::time::Duration;

use http::uri::Authority;
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::proxy::request_body::{BodyFailure, BodyWatch, RequestBody, copy_to_retry};
use crate::proxy::upstream::body::PooledBody;
use crate::proxy::upstream::conn::Conn;
use crate::proxy::upstream::idle::Pool;
use crate::proxy::upstream::send_wait::SendWait;
use crate::proxy::upstream::tunnel::Tunnels;
use sluicegate_http::rate_limit::HoldPermits;

thread_local! {
    /// The worker the current thread is (0: none, a thread of the caller's runtime).
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Why a request got no response from the upstream.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made (the text says why).
    Connect(String),
    /// The connection failed, or the upstream broke HTTP, before the response head came.
    Upstream(hyper::Error),
    /// The upstream answered `101` to a request that asked for no switch.
    Switched,
    /// The upstream's answer gave both a `Content-Length` and a `Transfer-Encoding`.
    LengthAndCoding,
    /// The upstream did not answer within the upstream timeout (from the request's start, or
    /// from its body's end).
    Timeout,
    /// The upstream took nothing more of the request body for the upstream timeout.
    BodyNotTaken,
    /// The client's body failed before the response head came.
    Body(BodyFailure),
}

/// The proxy's client to one upstream.
pub(crate) struct UpstreamClient {
    /// One pool per worker thread, and one for threads of no worker.
    pools: Vec<Arc<Pool>>,
    /// `host:port`.
    address: String,
    connect_timeout: Duration,
    /// The WebSocket tunnels open.
    pub(crate) tunnels: Tunnels,
}

/// How one exchange on one connection went.
enum Exchanged {
    Answered(Response<Incoming>),
    /// The connection closed before the request was sent: it may go on another.
    NotSent(Request<RequestBody>),
    Stalled,
    Failed(hyper::Error),
}

impl UpstreamClient {
    pub(crate) fn new(
        authority: &Authority,
        workers: usize,
        connect_timeout: Duration,
        idle_timeout: Duration,
        tunnels_open: Arc<AtomicU64>,
    ) -> UpstreamClient {
        UpstreamClient {
            pools: (0..=workers)
                .map(|_| Arc::new(Pool::new(idle_timeout)))
                .collect(),
            address: format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            connect_timeout,
            tunnels: Tunnels::new(tunnels_open),
        }
    }

    /// Marks the current thread as worker `index` (1-based).
    pub(crate) fn enter_worker(index: usize) {
        WORKER.with(|w| w.set(index));
    }

    /// The current thread's pool.
    fn pool(&self) -> &Arc<Pool> {
        let index = WORKER.with(Cell::get);
        self.pools.get(index).unwrap_or(&self.pools[0])
    }

    /// Sends `request` on an idle connection of the current thread's pool, or a new one, and
    /// returns the response once its head has come. Connecting and the head together are
    /// bounded by `timeout`, and so is each wait between two pieces of the request body
    /// taken by the upstream, and the wait for the answer after it ([`SendWait`]).
    ///
    /// `client_switch`: the client's side of a switch to WebSocket the request asks for; a
    /// `101` answer joins it to the upstream's in a tunnel.
    ///
    /// A request a kept-alive connection turned out to be closed for is sent again, once, on
    /// a new connection, when that cannot do what it did not: it was never sent, or its
    /// method is idempotent, no response came, and its body can be sent again from its start.
    pub(crate) async fn send(
        &self,
        mut request: Request<RequestBody>,
        client_switch: Option<OnUpgrade>,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        let watch = request.body().watch();
        let began = Instant::now();
        let deadline = began + timeout;
        let mut wait = SendWait::new(timeout, began);
        let pool = self.pool();
        // One more connection at most for a request that may have been seen: an upstream
        // that fails every request on arrival gets it twice, not once per pooled connection.
        let mut retried = false;
        let mut unsent_on_new = 0;
        loop {
            let (mut conn, reused) = match pool.checkout() {
                Some(conn) => (conn, true),
                // Boxed: a future that is rarely awaited would otherwise make every request's
                // larger.
                None => (Box::pin(self.connect(pool, deadline)).await?, false),
            };
            let again = (reused && !retried)
                .then(|| copy_to_retry(&request))
                .flatten();
            conn.timer.as_mut().reset(deadline);
            match exchange(&mut conn, request, watch.as_deref(), &mut wait).await {
                Exchanged::Answered(response) => {
                    return self.answered(response, conn, pool, watch, client_switch, timeout);
                }
                Exchanged::NotSent(back) => {
                    conn.close();
                    // A new connection that closes at once, again and again, is the upstream's
                    // failure, not a race.
                    unsent_on_new += usize::from(!reused);
                    if unsent_on_new > 1 {
                        return Err(SendError::Connect(
                            "the upstream closed each new connection at once".to_owned(),
                        ));
                    }
                    request = back;
                }
                Exchanged::Stalled => {
                    conn.close();
                    let taking = watch.as_ref().is_some_and(|body| !body.has_ended());
                    return Err(if taking {
                        SendError::BodyNotTaken
                    } else {
                        SendError::Timeout
                    });
                }
                Exchanged::Failed(error) => {
                    conn.close();
                    if let Some(failure) = watch.as_ref().and_then(|body| body.take_failure()) {
                        return Err(SendError::Body(failure));
                    }
                    match again {
                        Some(again) if is_closed_before_response(&error) => {
                            request = again;
                            retried = true;
                        }
                        _ => return Err(SendError::Upstream(error)),
                    }
                }
            }
        }
    }

    /// The response whose head came on `conn`, its body read from it.
    fn answered(
        &self,
        mut response: Response<Incoming>,
        conn: Conn,
        pool: &Arc<Pool>,
        watch: Option<Arc<BodyWatch>>,
        client_switch: Option<OnUpgrade>,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client) = client_switch else {
                conn.close();
                return Err(SendError::Switched);
            };
            let upstream = hyper::upgrade::on(&mut response);
            // The route's `concurrency` permits go with the tunnel, not the empty body.
            let held = HoldPermits::new();
            self.tunnels.open(client, upstream, timeout, held.clone());
            // Let go, not closed: hyper hands the connection over to the tunnel.
            drop(conn);
            let mut response = response.map(|_| PooledBody::empty());
            response.extensions_mut().insert(held);
            return Ok(response);
        }
        // hyper reads such an answer by its chunks (RFC 9112 section 6.3) and keeps both
        // fields: passed on, the length would frame the client's copy, which a client would
        // then take for whole when cut to it. It may be an attempt at splitting answers:
        // refused, as nginx refuses it, and the connection it came on closed.
        let headers = response.headers();
        if headers.contains_key(header::TRANSFER_ENCODING)
            && headers.contains_key(header::CONTENT_LENGTH)
        {
            conn.close();
            return Err(SendError::LengthAndCoding);
        }
        // An upstream that answered before the whole body was sent may not read the rest as
        // this request's: the connection ends with this response.
        let reusable = watch.as_ref().is_none_or(|body| body.has_ended());
        let pool = Arc::clone(pool);
        Ok(response.map(|incoming| PooledBody::pooled(incoming, conn, pool, reusable, timeout)))
    }

    /// A new connection, made before `deadline` (else [`SendError::Timeout`]) and within the
    /// connect timeout.
    async fn connect(&self, pool: &Arc<Pool>, deadline: Instant) -> Result<Conn, SendError> {
        let connect = TcpStream::connect(self.address.as_str());
        let connect_by = Instant::now() + self.connect_timeout;
        let stream = match tokio::time::timeout_at(connect_by.min(deadline), connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                return Err(SendError::Connect(format!("tcp connect error: {error}")));
            }
            Err(_) if deadline <= connect_by => return Err(SendError::Timeout),
            Err(_) => {
                return Err(SendError::Connect(format!(
                    "no connection within {:?}",
                    self.connect_timeout
                )));
            }
        };
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|error| SendError::Connect(error.to_string()))?;
        let task = tokio::spawn(async move {
            // Its end (the upstream closed, or broke HTTP) is seen by the request on it.
            let _ = connection.with_upgrades().await;
        });
        pool.start_sweeping();
        Ok(Conn::new(sender, task.abort_handle()))
    }
}

/// Sends `request` on `conn` and waits for the response head, each wait bounded by `wait`.
async fn exchange(
    conn: &mut Conn,
    request: Request<RequestBody>,
    watch: Option<&BodyWatch>,
    wait: &mut SendWait,
) -> Exchanged {
    // A kept-alive connection may still be finishing its last exchange.
    let ready = poll_fn(|cx| {
        if let Poll::Ready(ready) = conn.sender.poll_ready(cx) {
            return Poll::Ready(Some(ready));
        }
        wait.poll_stalled(None, &mut conn.timer, cx).map(|()| None)
    })
    .await;
    match ready {
        None => return Exchanged::Stalled,
        Some(Err(_)) => return Exchanged::NotSent(request),
        Some(Ok(())) => {}
    }
    let mut sent = pin!(conn.sender.try_send_request(request));
    poll_fn(|cx| {
        if let Poll::Ready(sent) = sent.as_mut().poll(cx) {
            return Poll::Ready(match sent {
                Ok(response) => Exchanged::Answered(response),
                Err(mut failed) => match failed.take_message() {
                    Some(request) => Exchanged::NotSent(request),
                    None => Exchanged::Failed(failed.into_error()),
                },
            });
        }
        let body = watch.map(BodyWatch::state);
        wait.poll_stalled(body, &mut conn.timer, cx)
            .map(|()| Exchanged::Stalled)
    })
    .await
}

/// Whether `error` says the connection closed before any of a response came, as a
/// kept-alive connection the upstream closed while idle does.
fn is_closed_before_response(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        source = cause.source();
    }
    false
}
