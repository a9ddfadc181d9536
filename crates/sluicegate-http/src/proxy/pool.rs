//! Keep-alive HTTP/1.1 connections to the upstream, one pool per worker thread.
//!
//! A request is sent on an idle connection of the pool of the thread serving it (or on a new
//! one), and the connection goes back to that pool when the response body has been read to its
//! end. A worker's connections are tasks of its own runtime, so a request, its upstream
//! connection and its response never wake a task of another thread; and the pool is a plain
//! stack behind a lock no other thread takes (hyper-util's pooled client keyed every checkout
//! by scheme and authority in a shared map, and spawned a task per request to put the
//! connection back).

use std::cell::Cell;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How long a connection may stay idle in a pool.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How many idle connections a pool keeps at most.
const MAX_IDLE: usize = 1024;
/// How often idle connections past [`IDLE_TIMEOUT`] are closed.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

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
    Upstream(hyper::Error),
    /// No response head came before the deadline.
    Timeout,
}

/// A keep-alive connection to the upstream, and the timer its requests wait on.
///
/// The timer lives as long as the connection and is moved to each request's deadline: moving a
/// registered timer later only updates it, where a timer per request is inserted into tokio's
/// timer wheel and removed from it again (about 1.5% of the proxy's instructions per request).
struct Conn {
    sender: SendRequest<Incoming>,
    timer: Pin<Box<Sleep>>,
}

/// The pools of one upstream: one per worker thread, and one for threads of no worker.
pub(crate) struct Pools {
    pools: Vec<Arc<Pool>>,
    /// `host:port`.
    address: String,
    connect_timeout: Duration,
}

impl Pools {
    pub(crate) fn new(authority: &Authority, workers: usize, connect_timeout: Duration) -> Pools {
        Pools {
            pools: (0..=workers).map(|_| Arc::new(Pool::default())).collect(),
            address: format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            connect_timeout,
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

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection of the current
    /// thread's pool, or a new one, and waits up to `timeout` for the response head. A request
    /// an idle connection turned out to be closed for (the upstream closed it as the request
    /// was handed over) is sent on another.
    pub(crate) async fn send(
        &self,
        mut request: Request<Incoming>,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        let deadline = Instant::now() + timeout;
        let pool = self.pool();
        loop {
            let (mut conn, reused) = match pool.checkout().await {
                Some(conn) => (conn, true),
                None => (self.connect(pool, deadline).await?, false),
            };
            conn.timer.as_mut().reset(deadline);
            let sent = tokio::select! {
                biased;
                sent = conn.sender.try_send_request(request) => sent,
                // The connection is dropped with the request on it: the upstream sees it close.
                () = conn.timer.as_mut() => return Err(SendError::Timeout),
            };
            match sent {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = PooledBody {
                        inner: body,
                        conn: Some((conn, Arc::clone(pool))),
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(SendError::Upstream(error.into_error())),
                },
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
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(SendError::Upstream)?;
        tokio::spawn(async move {
            // An upstream that goes away is noticed by the request on it, if any.
            let _ = connection.await;
        });
        pool.start_sweeping();
        Ok(Conn {
            sender,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
        })
    }
}

#[derive(Default)]
struct Pool {
    /// Idle connections, the one idle longest first.
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    connections: Vec<(Conn, Instant)>,
    sweeping: bool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection idle the shortest time that is still open and ready for a request.
    async fn checkout(&self) -> Option<Conn> {
        loop {
            let (mut conn, since) = self.lock().connections.pop()?;
            let sender = &mut conn.sender;
            if sender.is_closed() || since.elapsed() > IDLE_TIMEOUT {
                continue;
            }
            // Not waiting for a request yet (its response ended before its request did, as an
            // upstream may answer before reading the whole body): dropped, the connection
            // closes once that request is sent, rather than this one waiting for it.
            let ready = std::future::poll_fn(|cx| Poll::Ready(sender.poll_ready(cx))).await;
            if let Poll::Ready(Ok(())) = ready {
                return Some(conn);
            }
        }
    }

    fn put(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        if idle.connections.len() < MAX_IDLE {
            idle.connections.push((conn, Instant::now()));
        }
    }

    /// Starts the task that closes connections idle too long (once per pool, on the runtime of
    /// the thread the pool serves).
    fn start_sweeping(self: &Arc<Self>) {
        {
            let mut idle = self.lock();
            if idle.sweeping {
                return;
            }
            idle.sweeping = true;
        }
        let pool: Weak<Pool> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                let mut idle = pool.lock();
                idle.connections.retain(|(conn, since)| {
                    !conn.sender.is_closed() && since.elapsed() <= IDLE_TIMEOUT
                });
            }
        });
    }
}

/// The upstream's response body, streamed; its connection goes back to the pool when the body
/// has been read to its end (a body dropped before its end closes the connection).
pub struct PooledBody {
    inner: Incoming,
    conn: Option<(Conn, Arc<Pool>)>,
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl PooledBody {
    fn release(&mut self) {
        if let Some((conn, pool)) = self.conn.take() {
            pool.put(conn);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.release(),
            Poll::Ready(Some(Err(_))) => this.conn = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body with nothing to read (a `HEAD` response, a 204) is not polled at all.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}
