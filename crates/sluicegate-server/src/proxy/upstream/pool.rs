//! Keep-alive HTTP/1.1 connections to the upstream, one pool per worker thread.
//!
//! A request is sent on an idle connection of the pool of the thread serving it (or on a new
//! one), and the connection goes back to that pool the moment the response body has been read
//! to its end. The request's own task writes it and reads its response, so a request never
//! wakes a task of another thread, nor (but for the rest of a body an early answer leaves)
//! another task at all; and the pool is a plain stack behind a lock no other thread takes
//! (hyper-util's pooled client keyed every checkout by scheme and authority in a shared map,
//! and spawned a task per request to put the connection back).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::uri::Authority;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::proxy::client_body::ClientBody;
use crate::proxy::forwarding::ForwardingFields;
use crate::proxy::upstream::body::PooledBody;
use crate::proxy::upstream::conn::{Conn, Failed};
use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::idle::Pool;
use crate::proxy::upstream::request::{self, BodyBounds, Outgoing, ReadFirst};
use crate::proxy::upstream::response::Asked;
use crate::proxy::upstream::send_wait::{SendWait, Stall, Timeouts};
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
    /// The connection failed while the request was sent or its response head read.
    Upstream(UpstreamError),
    /// The upstream did not answer within the upstream timeout (a request without body, from
    /// its start; one with a body, from the body's end).
    Timeout,
    /// The upstream took nothing more of the request body for the upstream timeout.
    BodyNotTaken,
    /// The client sent nothing more of its request body for the client body timeout.
    ClientBodyTimeout,
    /// The client's request body, sent without a length, grew past the bound on bodies (in
    /// bytes) before the upstream answered.
    BodyTooLarge(u64),
    /// The client's request body failed (the client went away, or broke its framing).
    ClientBody(hyper::Error),
}

impl SendError {
    /// A request's failure for `error`: the client's own when its body failed or grew too
    /// long, the upstream's otherwise.
    fn from_broken(error: UpstreamError) -> SendError {
        match error {
            UpstreamError::RequestBodyTooLarge(max) => SendError::BodyTooLarge(max),
            UpstreamError::RequestBody(error) => SendError::ClientBody(error),
            error => SendError::Upstream(error),
        }
    }
}

/// A request as the upstream receives it, not yet sent.
pub(crate) struct Written {
    head: Vec<u8>,
    outgoing: Option<Outgoing>,
    /// The request is `HEAD`: its response has no body.
    to_head: bool,
    /// The client's side of a switch to WebSocket (its `101` sent), when the request asks
    /// for one and the client's connection can make it.
    client_switch: Option<OnUpgrade>,
    /// Its method is idempotent: it may be sent again.
    idempotent: bool,
}

impl Written {
    /// What the request asks of its response.
    fn asked(&self) -> Asked {
        if self.client_switch.is_some() {
            Asked::WebSocket
        } else if self.to_head {
            Asked::HeadOnly
        } else {
            Asked::Response
        }
    }

    /// Reads the body from the client before anything is sent, when it is short, each wait
    /// for the next piece bounded by `client_body` (then [`SendError::ClientBodyTimeout`]):
    /// one whose announced length is at most `buffer_size` whole, one of unknown length up to
    /// `buffer_size` ([`request::finish_head`] then frames it). A client that sends a short
    /// body slowly holds no upstream connection while it does (nginx's
    /// `proxy_request_buffering`), a short body is kept, so that the request can be sent
    /// again, and goes with its length, so that an upstream that takes no chunked request
    /// takes it.
    async fn read_first(
        &mut self,
        buffer_size: u64,
        client_body: Option<Duration>,
    ) -> Result<(), SendError> {
        let Some(body) = self.outgoing.as_mut() else {
            return Ok(());
        };
        let limit = if body.is_framing_open() {
            buffer_size
        } else {
            match body.announced_length() {
                Some(length) if length > 0 && length <= buffer_size => length,
                _ => return Ok(()),
            }
        };
        let read = read_up_to(body, limit, client_body).await?;
        self.outgoing = self
            .outgoing
            .take()
            .and_then(|body| request::finish_head(&mut self.head, body, read));
        Ok(())
    }
}

/// Reads `body` until it ends ([`ReadFirst::Whole`]) or more than `limit` bytes of it came
/// ([`ReadFirst::Start`]), each wait for the next piece bounded by `client_body`.
async fn read_up_to(
    body: &mut Outgoing,
    limit: u64,
    client_body: Option<Duration>,
) -> Result<ReadFirst, SendError> {
    // The body is most often one piece, kept as it is; more are gathered, in room reserved
    // once a second piece comes, and no more than 64 KiB of it ahead of the bytes.
    let mut one_piece: Option<Bytes> = None;
    let mut gathered = BytesMut::new();
    loop {
        let next = std::future::poll_fn(|cx| body.poll_next_data(cx));
        let data = match client_body {
            Some(wait) => tokio::time::timeout(wait, next)
                .await
                .map_err(|_| SendError::ClientBodyTimeout)?,
            None => next.await,
        }
        .map_err(SendError::from_broken)?;
        match data {
            Some(data) if one_piece.is_none() && gathered.is_empty() => one_piece = Some(data),
            Some(data) => {
                if let Some(first) = one_piece.take() {
                    gathered.reserve(usize::try_from(limit).map_or(1 << 16, |n| n.min(1 << 16)));
                    gathered.extend_from_slice(&first);
                }
                gathered.extend_from_slice(&data);
            }
            None => {
                return Ok(ReadFirst::Whole(
                    one_piece.unwrap_or_else(|| gathered.freeze()),
                ));
            }
        }
        let read = one_piece.as_ref().map_or(gathered.len(), Bytes::len);
        if read as u64 > limit {
            return Ok(ReadFirst::Start(
                one_piece.unwrap_or_else(|| gathered.freeze()),
            ));
        }
    }
}

/// The pools of one upstream: one per worker thread, and one for threads of no worker.
pub(crate) struct Pools {
    pools: Vec<Arc<Pool>>,
    /// `host:port`.
    address: String,
    /// The upstream's authority as the URL gave it: the `Host` of a request that names none.
    host: String,
    connect_timeout: Duration,
    /// How request bodies are taken.
    bodies: BodyBounds,
    /// The forwarding fields the client is appended to.
    forwarding: ForwardingFields,
    /// The WebSocket tunnels open.
    pub(crate) tunnels: Tunnels,
}

impl Pools {
    pub(crate) fn new(
        authority: &Authority,
        workers: usize,
        connect_timeout: Duration,
        idle_timeout: Duration,
        bodies: BodyBounds,
        tunnels_open: Arc<AtomicU64>,
    ) -> Pools {
        Pools {
            pools: (0..=workers)
                .map(|_| Arc::new(Pool::new(idle_timeout)))
                .collect(),
            address: format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            host: authority.as_str().to_owned(),
            connect_timeout,
            bodies,
            forwarding: ForwardingFields::default(),
            tunnels: Tunnels::new(tunnels_open),
        }
    }

    /// These pools, appending the client to the `forwarding` fields of every request.
    pub(crate) fn appending_to(self, forwarding: ForwardingFields) -> Pools {
        Pools { forwarding, ..self }
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

    /// The bound on request bodies, if `body` announces more bytes than it
    /// (`Content-Length`, in h2 as in HTTP/1.1): such a request is refused before anything
    /// else, as nginx's `client_max_body_size` does, spending no budget and sending nothing
    /// to the upstream.
    pub(crate) fn refuses(&self, body: &Incoming) -> Option<u64> {
        self.bodies
            .max_size
            .filter(|&max| http_body::Body::size_hint(body).lower() > max)
    }

    /// Writes `request`'s head as the upstream receives it ([`request::write_head`]), for
    /// [`Pools::send`]: done at once, so that the future that sends it keeps (and copies
    /// wherever it is moved) only what sending needs, not the request.
    pub(crate) fn write(&self, request: Request<ClientBody>) -> Written {
        let (mut parts, ClientBody { body, client }) = request.into_parts();
        let mut head = Vec::with_capacity(256 + 64 * parts.headers.len());
        let forwarding = (&client, self.forwarding);
        let (outgoing, websocket) =
            request::write_head(&mut head, &parts, body, forwarding, &self.host, self.bodies);
        // Without the client's side of a switch, a 101 is refused (502): the switch is asked
        // only of a connection that can make it.
        let client_switch = websocket
            .then(|| parts.extensions.remove::<OnUpgrade>())
            .flatten();
        Written {
            head,
            outgoing,
            to_head: parts.method == Method::HEAD,
            client_switch,
            idempotent: parts.method.is_idempotent(),
        }
    }

    /// Sends a request [`Pools::write`] wrote on an idle connection of the current thread's
    /// pool, or a new one, and reads the response head (its hop-by-hop fields left out). Each
    /// wait is bounded by `timeouts`: connecting and the head together by the upstream
    /// timeout, and then the waits between two pieces of the request body and for the answer
    /// after it ([`SendWait`]).
    ///
    /// A request an idle connection turned out to be closed for (the upstream closed it as the
    /// request was written) is sent again, once, on another when that cannot do what it did
    /// not: its method is idempotent (RFC 9110 section 9.2.2), no byte of a response came, and
    /// its body can be sent again from its start ([`Outgoing::rewind`]).
    ///
    /// A short body is first read from the client ([`Written::read_first`]), and the waits
    /// above begin after it.
    pub(crate) async fn send(
        &self,
        mut written: Written,
        timeouts: Timeouts,
    ) -> Result<Response<PooledBody>, SendError> {
        written
            .read_first(self.bodies.buffer_size, timeouts.client_body)
            .await?;
        let began = Instant::now();
        let deadline = began + timeouts.upstream;
        let mut wait = SendWait::new(timeouts, began);
        let pool = self.pool();
        // One more connection at most: an upstream that fails every request on arrival gets it
        // twice, not once per pooled connection.
        let mut retried = false;
        loop {
            let (mut conn, reused) = match pool.checkout() {
                Some(conn) => (conn, true),
                // Boxed: a future that is rarely awaited would otherwise make every request's
                // larger.
                None => (Box::pin(self.connect(pool, deadline)).await?, false),
            };
            conn.timer.as_mut().reset(deadline);
            let asked = written.asked();
            let exchanged = conn
                .io
                .exchange(
                    &written.head,
                    &mut written.outgoing,
                    asked,
                    &mut conn.timer,
                    &mut wait,
                )
                .await;
            match exchanged {
                // A switch is read only when the request asked one (`Asked::WebSocket`), which
                // it did only with the client's side of it at hand.
                Ok(head) if head.switched => {
                    let Some(client) = written.client_switch.take() else {
                        return Err(SendError::Upstream(UpstreamError::SwitchingProtocols));
                    };
                    // The route's `concurrency` permits go with the tunnel, not the empty body.
                    let held = HoldPermits::new();
                    self.tunnels
                        .open(client, conn.io, timeouts.upstream, held.clone());
                    let mut response = head.response.map(|()| PooledBody::empty(timeouts.upstream));
                    response.extensions_mut().insert(held);
                    return Ok(response);
                }
                Ok(head) => {
                    let (response_parts, ()) = head.response.into_parts();
                    // An upstream that answered before the whole body was written may not read
                    // the rest as this request's: the connection ends with this response.
                    let sent = written.outgoing.as_ref().is_none_or(Outgoing::is_sent);
                    let body = match written.outgoing.take().filter(|body| !body.is_done()) {
                        None => {
                            let keep_alive = head.keep_alive && sent;
                            let pool = Arc::clone(pool);
                            PooledBody::pooled(
                                head.framing,
                                conn,
                                pool,
                                keep_alive,
                                timeouts.upstream,
                            )
                        }
                        Some(rest) => PooledBody::uploading(head.framing, conn, rest, timeouts),
                    };
                    return Ok(Response::from_parts(response_parts, body));
                }
                // The connection is dropped with the request on it: the upstream sees it close.
                Err(Failed::Stalled(Stall::Upstream)) => {
                    let taking = written
                        .outgoing
                        .as_ref()
                        .is_some_and(|body| !body.is_done());
                    return Err(if taking {
                        SendError::BodyNotTaken
                    } else {
                        SendError::Timeout
                    });
                }
                Err(Failed::Stalled(Stall::Client)) => return Err(SendError::ClientBodyTimeout),
                Err(Failed::Broken { error, answered }) => {
                    let again = reused
                        && !retried
                        && !answered
                        && written.idempotent
                        && error.is_closed_before_response()
                        && written.outgoing.as_mut().is_none_or(Outgoing::rewind);
                    if !again {
                        return Err(SendError::from_broken(error));
                    }
                    retried = true;
                }
            }
        }
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
        pool.start_sweeping();
        Ok(Conn::new(stream, deadline))
    }
}
