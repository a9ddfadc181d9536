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
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::Poll;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::proxy::request_body::{BodyFailure, BodyWatch, RequestBody, copy_to_retry};
use crate::proxy::upstream::body::PooledBody;
use crate::proxy::upstream::conn::{Conn, Sender, Sent};
use crate::proxy::upstream::idle::Pool;
use crate::proxy::upstream::send_wait::SendWait;
use crate::proxy::upstream::transport::{Tls, UpstreamProtocol};
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
    /// The upstream's answer is framed in a way two readers can read apart (the text says
    /// how).
    AmbiguousFraming(&'static str),
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
    /// TLS to the upstream (`https://`), if any.
    tls: Option<Tls>,
    /// Which HTTP the proxy speaks to the upstream.
    protocol: UpstreamProtocol,
    /// `http` or `https`, for the target of a request sent by h2.
    scheme: Scheme,
    /// The WebSocket tunnels open.
    pub(crate) tunnels: Tunnels,
}

/// Where and how the proxy reaches its upstream.
pub(crate) struct Reach {
    pub(crate) authority: Authority,
    pub(crate) tls: Option<Tls>,
    pub(crate) protocol: UpstreamProtocol,
}

/// How one exchange on one connection went.
enum Exchanged {
    Answered(Response<Incoming>),
    /// The connection closed before the request was sent: it may go on another.
    NotSent(Box<Request<RequestBody>>),
    Stalled,
    Failed(hyper::Error),
}

impl UpstreamClient {
    pub(crate) fn new(
        reach: Reach,
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
                reach.authority.host(),
                reach
                    .authority
                    .port_u16()
                    .unwrap_or(if reach.tls.is_some() { 443 } else { 80 })
            ),
            connect_timeout,
            scheme: if reach.tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            },
            tls: reach.tls,
            protocol: reach.protocol,
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
    /// A request a kept-alive connection turned out to be closed for goes on another, when
    /// that cannot do what it did not: it was never sent (then on a new connection), or, once,
    /// its method is idempotent, no response came, and its body can be sent again from its
    /// start.
    pub(crate) async fn send(
        &self,
        mut request: Box<Request<RequestBody>>,
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
        // After a kept-alive connection closed under a request that never left, the request
        // goes on a new one: the others idle beside it are likely closed too (an upstream
        // that restarted).
        let mut fresh_only = false;
        loop {
            let pooled = if fresh_only { None } else { pool.checkout() };
            let (mut conn, reused) = match pooled {
                Some(conn) => (conn, true),
                // Boxed: a future that is rarely awaited would otherwise make every request's
                // larger.
                None => (Box::pin(self.connect(pool, deadline)).await?, false),
            };
            let again = (reused && !retried)
                .then(|| copy_to_retry(&request))
                .flatten()
                .map(Box::new);
            conn.timer.as_mut().reset(deadline);
            if conn.is_h2() {
                self.in_absolute_form(&mut request);
            }
            match exchange(&mut conn, request, watch.as_deref(), &mut wait).await {
                Exchanged::Answered(response) => {
                    return self.answered(response, conn, pool, watch, client_switch, timeout);
                }
                Exchanged::NotSent(back) => {
                    conn.close();
                    // A new connection that closes at once is the upstream's failure, not a
                    // race.
                    if !reused {
                        return Err(SendError::Connect(
                            "the upstream closed a new connection at once".to_owned(),
                        ));
                    }
                    fresh_only = true;
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

    /// Puts `request`'s target in absolute form, as h2 sends it (`:scheme`, `:authority`):
    /// the authority its `Host` names.
    fn in_absolute_form(&self, request: &mut Request<RequestBody>) {
        let host = request
            .headers()
            .get(http::header::HOST)
            .and_then(|host| Authority::try_from(host.as_bytes()).ok());
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = host;
        parts.path_and_query = request.uri().path_and_query().cloned();
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
            // `:authority` says it.
            request.headers_mut().remove(http::header::HOST);
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
        if let Some(why) = ambiguous_framing(response.headers()) {
            conn.close();
            return Err(SendError::AmbiguousFraming(why));
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
        let conn = match &self.tls {
            None => {
                let h2 = self.protocol == UpstreamProtocol::H2;
                handshake(TokioIo::new(stream), h2).await
            }
            Some(tls) => {
                let handshake_tls = tls.connector.connect(tls.server_name.clone(), stream);
                let stream =
                    match tokio::time::timeout_at(connect_by.min(deadline), handshake_tls).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            return Err(SendError::Connect(format!("TLS handshake: {error}")));
                        }
                        Err(_) if deadline <= connect_by => return Err(SendError::Timeout),
                        Err(_) => {
                            return Err(SendError::Connect(format!(
                                "no TLS handshake within {:?}",
                                self.connect_timeout
                            )));
                        }
                    };
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                handshake(TokioIo::new(stream), h2).await
            }
        }
        .map_err(|error| SendError::Connect(error.to_string()))?;
        if conn.is_h2() {
            pool.share(&conn);
        }
        pool.start_sweeping();
        Ok(conn)
    }
}

/// Starts HTTP (`h2`, else HTTP/1.1) on a connection made, its driving task on the current
/// runtime.
async fn handshake<I>(io: I, h2: bool) -> hyper::Result<Conn>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    if h2 {
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await?;
        tokio::spawn(async move {
            // Its end is seen by the requests on it.
            let _ = connection.await;
        });
        return Ok(Conn::new(Sender::H2(sender), None));
    }
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake(io)
        .await?;
    let task = tokio::spawn(async move {
        // Its end (the upstream closed, or broke HTTP) is seen by the request on it.
        let _ = connection.with_upgrades().await;
    });
    Ok(Conn::new(Sender::Http1(sender), Some(task.abort_handle())))
}

/// Sends `request` on `conn` and waits for the response head, each wait bounded by `wait`.
async fn exchange(
    conn: &mut Conn,
    request: Box<Request<RequestBody>>,
    watch: Option<&BodyWatch>,
    wait: &mut SendWait,
) -> Exchanged {
    // A kept-alive connection may still be finishing its last exchange.
    let ready = poll_fn(|cx| {
        if let Poll::Ready(ready) = conn.poll_ready(cx) {
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
    match &mut conn.sender {
        Sender::Http1(sender) => {
            let sent = pin!(sender.try_send_request(*request));
            answer(sent, &mut conn.timer, watch, wait).await
        }
        Sender::H2(sender) => {
            let sent = pin!(sender.try_send_request(*request));
            answer(sent, &mut conn.timer, watch, wait).await
        }
    }
}

/// Waits for the answer to a request `sent`, each wait bounded by `wait` on `timer`.
///
/// `sent` comes pinned where the caller made it: pinned here, hyper's future (which holds the
/// request until it is sent) would take its room in this future twice.
async fn answer(
    mut sent: Pin<&mut impl Future<Output = Sent>>,
    timer: &mut Pin<Box<Sleep>>,
    watch: Option<&BodyWatch>,
    wait: &mut SendWait,
) -> Exchanged {
    poll_fn(|cx| {
        if let Poll::Ready(sent) = sent.as_mut().poll(cx) {
            return Poll::Ready(match sent {
                Ok(response) => Exchanged::Answered(response),
                Err(mut failed) => match failed.take_message() {
                    Some(request) => Exchanged::NotSent(Box::new(request)),
                    None => Exchanged::Failed(failed.into_error()),
                },
            });
        }
        let body = watch.map(BodyWatch::state);
        wait.poll_stalled(body, timer, cx)
            .map(|()| Exchanged::Stalled)
    })
    .await
}

/// What makes an answer's framing ambiguous, if anything; such an answer is refused, as nginx
/// refuses it, and the connection it came on closed.
///
/// - A `Transfer-Encoding` beside a `Content-Length`: hyper reads the body by its chunks (RFC
///   9112 section 6.3) and keeps both fields; passed on, the length would frame the client's
///   copy, which a client would then take for whole when cut to it. It may be an attempt at
///   splitting answers.
/// - A `Transfer-Encoding` other than `chunked` alone: hyper would read a `gzip` body until the
///   connection closes, and `gzip, chunked` by its chunks, and the client would get the coded
///   bytes with nothing saying they are coded (the field is hop-by-hop).
fn ambiguous_framing(headers: &http::HeaderMap) -> Option<&'static str> {
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter();
    let first = codings.next()?;
    if headers.contains_key(header::CONTENT_LENGTH) {
        return Some("it sent both Content-Length and Transfer-Encoding");
    }
    let chunked_alone = codings.next().is_none()
        && first
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"chunked");
    (!chunked_alone).then_some("it sent a Transfer-Encoding other than chunked alone")
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
