//! The least a reverse proxy on hyper does, for scripts/bench-proxy.sh's `floor` pair: how many
//! requests per second hyper's HTTP/1 server and client allow on this machine before any
//! rate limiting, forwarding field, route, timeout or metric is added. Measured against nginx
//! as a plain proxy, it tells how much of `sluicegate proxy`'s distance to nginx is hyper's
//! and how much is Sluicegate's.
//!
//! ```text
//! cargo run --release -p sluicegate-http --example hyper_floor_proxy -- LISTEN UPSTREAM [WORKERS]
//! ```
//!
//! `LISTEN` and `UPSTREAM` are `host:port`; `WORKERS` (default 2) threads each run a
//! single-threaded runtime with its own `SO_REUSEPORT` listening socket and its own stack of
//! keep-alive upstream connections. A request is passed on as it came (origin-form URI), its
//! response streamed back. Not a proxy to deploy: no hop-by-hop handling, no timeouts, no
//! error bodies. It uses the `sluicegate` binary's allocator (mimalloc), so that the two differ
//! only in what the proxy does.

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;

use http::{Request, Response, StatusCode};
use http_body_util::Either;
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[path = "shared/floor_workers.rs"]
mod floor_workers;
use floor_workers::{Arguments, Error, run_workers};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Body = Either<Incoming, Empty<Bytes>>;

thread_local! {
    /// This worker's idle upstream connections, the most recently used last.
    static IDLE: RefCell<Vec<SendRequest<Incoming>>> = const { RefCell::new(Vec::new()) };
}

fn main() -> Result<(), Error> {
    let arguments = Arguments::parse("hyper_floor_proxy")?;
    let upstream = arguments.upstream;
    run_workers(
        arguments.listen,
        arguments.workers,
        move |stream, _peer| async move {
            let service = service_fn(move |request| async move {
                Ok::<_, Infallible>(forward(request, upstream).await)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        },
    )
}

async fn forward(mut request: Request<Incoming>, upstream: SocketAddr) -> Response<Body> {
    if let Some(path) = request.uri().path_and_query().cloned() {
        *request.uri_mut() = path.into();
    }
    let mut sender = match checkout(upstream).await {
        Ok(sender) => sender,
        Err(_) => return bad_gateway(),
    };
    match sender.send_request(request).await {
        Ok(response) => {
            // Ready again once this response has been read: the next checkout skips it until
            // then.
            IDLE.with(|idle| idle.borrow_mut().push(sender));
            response.map(Either::Left)
        }
        Err(_) => bad_gateway(),
    }
}

/// The most recently used idle connection that can take a request, or a new one.
async fn checkout(upstream: SocketAddr) -> Result<SendRequest<Incoming>, Error> {
    let found = IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        idle.retain(|sender| !sender.is_closed());
        let ready = idle.iter().rposition(SendRequest::is_ready)?;
        Some(idle.remove(ready))
    });
    if let Some(sender) = found {
        return Ok(sender);
    }
    let stream = TcpStream::connect(upstream).await?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn bad_gateway() -> Response<Body> {
    let mut response = Response::new(Either::Right(Empty::new()));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}
