//! Where connections come in: the accept loop every listener shares ([`accept_next`]), and
//! the axum listeners of both applications ([`serve_router`]: `serve`'s HTTP JSON API, and the
//! admin listener both serve) on hyper's server, each connection ended as the proxy's are
//! ([`serve_until_ended`]): closed once it has had no request open for the header timeout, over h2
//! as over HTTP/1.1 (nginx's `client_header_timeout` and `keepalive_timeout`). `axum::serve`
//! bounds neither: a client that sent its head a byte at a time, or opened connections and
//! sent nothing, held each connection and its task for as long as it liked.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service as _;

use crate::plumbing::{
    BodyWithTimeout, Builders, Ended, OpenBody, Requests, protocol_told, serve_until_ended,
};

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

/// How long a client of an axum listener may take to send what it sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientTimeouts {
    /// A connection with no request open for this long (its client slow to send a head, or
    /// idle since its last answer) is closed (nginx's `client_header_timeout` and
    /// `keepalive_timeout`); zero: never.
    pub(crate) header: Duration,
    /// A request body whose next bytes take longer than this fails (nginx's
    /// `client_body_timeout`); zero: never.
    pub(crate) body: Duration,
}

/// Serves `router` on `listener` (`name`d in the log) until `stopped` turns true, then waits
/// for the requests in flight (the caller bounds that wait). Each request carries its
/// caller's address as [`ConnectInfo`]. A connection that has had no request open for the
/// header timeout is closed, over h2 as over HTTP/1.1, as the proxy's are
/// ([`serve_until_ended`]); a body that stops coming for the body timeout fails to be read
/// ([`BodyWithTimeout`]: the route that reads it answers 400 naming the timeout).
pub(crate) async fn serve_router(
    name: &str,
    listener: TcpListener,
    router: Router,
    timeouts: ClientTimeouts,
    mut stopped: watch::Receiver<bool>,
) {
    let builders = Arc::new(Builders {
        http1: http1::Builder::new(),
        http2: http2::Builder::new(TokioExecutor::new()),
    });
    // Told once, on shutdown; every connection holds a receiver until it has ended.
    let stopping = watch::Sender::new(());
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
        let connection = RouterConnection {
            router: router.clone(),
            caller,
            // Opened now: the wait for the first bytes counts towards the first head.
            requests: Requests::new(),
            timeouts,
            stopping: stopping.subscribe(),
        };
        let builders = Arc::clone(&builders);
        tokio::spawn(async move {
            let ended = connection.serve(stream, &builders).await;
            tracing::debug!(?ended, %caller, "connection ended");
        });
    }
    drop(listener);
    stopping.send_replace(());
    stopping.closed().await;
}

/// One connection of [`serve_router`]'s.
struct RouterConnection {
    router: Router,
    caller: SocketAddr,
    requests: Arc<Requests>,
    timeouts: ClientTimeouts,
    stopping: watch::Receiver<()>,
}

impl RouterConnection {
    /// Serves `stream` by the protocol its first bytes tell, until it ends; `None`: it ended
    /// before telling.
    async fn serve(self, stream: TcpStream, builders: &Builders) -> Option<Ended> {
        let RouterConnection {
            router,
            caller,
            requests,
            timeouts,
            mut stopping,
        } = self;
        let header_timeout = timeouts.header;
        let protocol = protocol_told(&stream, header_timeout, &mut stopping).await?;
        let idle = (!header_timeout.is_zero()).then(|| (Arc::clone(&requests), header_timeout));
        let service = service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(caller));
            let open = requests.open();
            // A router is always ready: it is called without asking.
            let request = if timeouts.body.is_zero() {
                request.map(Body::new)
            } else {
                request.map(|body| Body::new(BodyWithTimeout::new(body, Some(timeouts.body))))
            };
            let answer = router.clone().call(request);
            async move {
                let response = answer.await.unwrap_or_else(|never| match never {});
                Ok::<_, Infallible>(response.map(|body| OpenBody::new(body, open, None)))
            }
        });
        let io = TokioIo::new(stream);
        Some(serve_until_ended(io, service, protocol, builders, stopping, idle, None).await)
    }
}
