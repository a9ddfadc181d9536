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
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

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
    /// thread's pool, or a new one. A request an idle connection turned out to be closed for
    /// (the upstream closed it as the request was handed over) is sent on another.
    pub(crate) async fn send(
        &self,
        mut request: Request<Incoming>,
    ) -> Result<Response<PooledBody>, SendError> {
        let pool = self.pool();
        loop {
            let (mut sender, reused) = match pool.checkout().await {
                Some(sender) => (sender, true),
                None => (self.connect(pool).await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = PooledBody {
                        inner: body,
                        conn: Some((sender, Arc::clone(pool))),
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

    async fn connect(&self, pool: &Arc<Pool>) -> Result<SendRequest<Incoming>, SendError> {
        let connect = TcpStream::connect(self.address.as_str());
        let stream = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                return Err(SendError::Connect(format!("tcp connect error: {error}")));
            }
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
        Ok(sender)
    }
}

#[derive(Default)]
struct Pool {
    /// Idle connections, the one idle longest first.
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    connections: Vec<(SendRequest<Incoming>, Instant)>,
    sweeping: bool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection idle the shortest time that is still open and ready for a request.
    async fn checkout(&self) -> Option<SendRequest<Incoming>> {
        loop {
            let (mut sender, since) = self.lock().connections.pop()?;
            if sender.is_closed() || since.elapsed() > IDLE_TIMEOUT {
                continue;
            }
            // Not waiting for a request yet (its response ended before its request did, as an
            // upstream may answer before reading the whole body): dropped, the connection
            // closes once that request is sent, rather than this one waiting for it.
            let ready = std::future::poll_fn(|cx| Poll::Ready(sender.poll_ready(cx))).await;
            if let Poll::Ready(Ok(())) = ready {
                return Some(sender);
            }
        }
    }

    fn put(&self, sender: SendRequest<Incoming>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        if idle.connections.len() < MAX_IDLE {
            idle.connections.push((sender, Instant::now()));
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
                idle.connections.retain(|(sender, since)| {
                    !sender.is_closed() && since.elapsed() <= IDLE_TIMEOUT
                });
            }
        });
    }
}

/// The upstream's response body, streamed; its connection goes back to the pool when the body
/// has been read to its end (a body dropped before its end closes the connection).
pub struct PooledBody {
    inner: Incoming,
    conn: Option<(SendRequest<Incoming>, Arc<Pool>)>,
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
        if let Some((sender, pool)) = self.conn.take() {
            pool.put(sender);
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
