//! Where connections come in: the accept loop every listener shares ([`accept_next`]), and
//! the axum listeners of both applications ([`serve_router`]: `serve`'s HTTP JSON API, and the
//! admin listener both serve) on hyper's server with a bound on how long a client may take to
//! send a request head, the wait for the next one on an idle keep-alive connection included
//! (nginx's `client_header_timeout`). `axum::serve` leaves that bound unset: hyper's header
//! timeout needs a timer, which axum does not give it, so a client that sent its head a byte
//! at a time, or opened connections and sent nothing, held each connection and its task for
//! as long as it liked.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service as _;

/// How long an accept that failed (out of file descriptors, say) waits before the next: the
/// connections open meanwhile may end and give some back.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The next connection on `listener` (`name`d in the log), Nagle's algorithm off: every
/// listener here answers in small messages, sent at once rather than held back for more. An
/// accept that fails is logged and tried again after a short wait rather than in a spin.
pub(crate) async fn accept_next(listener: &TcpListener, name: &str) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, caller)) => {
                let _ = stream.set_nodelay(true);
                return (stream, caller);
            }
            Err(error) => {
                tracing::warn!(%error, listener = name, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Serves `router` on `listener` (`name`d in the log) until `stopped` turns true, then waits
/// for the requests in flight (the caller bounds that wait). Each request carries its
/// caller's address as [`ConnectInfo`]. A connection whose client takes longer than
/// `header_timeout` to send a request head, or to begin the next one, is closed.
pub(crate) async fn serve_router(
    name: &str,
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connections = GracefulShutdown::new();
    let stop = async move {
        // Err: every sender is gone, which only a shutdown does.
        let _ = stopped.wait_for(|s| *s).await;
    };
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, caller) = tokio::select! {
            accepted = accept_next(&listener, name) => accepted,
            () = &mut stop => break,
        };
        let router = router.clone();
        let service = service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(caller));
            // A router is always ready: it is called without asking.
            let answer = router.clone().call(request.map(Body::new));
            async move { Ok::<_, Infallible>(answer.await.unwrap_or_else(|never| match never {})) }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %caller, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
}
