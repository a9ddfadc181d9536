//! Serving client connections: HTTP/1.1 and h2c on each, every request through the rules in
//! force, and the connections' graceful end.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpStream;

use crate::proxy::backing::Backing;
use crate::proxy::forward::Forwarder;
use crate::proxy::forwarding::ForwardedClient;
use crate::proxy::loads::Counted;
use crate::proxy::metrics::Metrics;
use crate::proxy::table::{self, Table};

/// What every connection and the rule file watcher share.
pub(crate) struct State {
    /// The rules in force (replaced whole by a reload).
    pub(crate) table: ArcSwap<Table>,
    /// Where the counters are (fixed at start).
    pub(crate) backing: Backing,
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Serves client connections, each on a task of the current runtime, and lets them finish on
/// shutdown.
pub(crate) struct ConnectionServer {
    state: Arc<State>,
    builder: auto::Builder<TokioExecutor>,
    graceful: GracefulShutdown,
}

impl ConnectionServer {
    pub(crate) fn new(state: Arc<State>) -> ConnectionServer {
        ConnectionServer {
            state,
            builder: auto::Builder::new(TokioExecutor::new()),
            graceful: GracefulShutdown::new(),
        }
    }

    /// Serves `stream` from `peer` until it closes; `counted` is dropped with it.
    pub(crate) fn serve(&self, stream: TcpStream, peer: SocketAddr, counted: Counted) {
        let state = Arc::clone(&self.state);
        let client = ForwardedClient::new(peer.ip().to_canonical());
        let service = service_fn(move |mut request: Request<Incoming>| {
            let extensions = request.extensions_mut();
            extensions.insert(peer);
            extensions.insert(client.clone());
            let table = state.table.load_full();
            async move { Ok::<_, Infallible>(table::handle(table, request).await) }
        });
        let connection = self.builder.serve_connection(TokioIo::new(stream), service);
        let connection = self.graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            // A client that goes away mid-request is no error of the proxy's.
            let _ = connection.await;
            drop(counted);
        });
    }

    /// Waits for the connections being served to finish, up to `grace`.
    pub(crate) async fn finish(self, grace: Duration) {
        tracing::info!("proxy: stopped accepting; finishing requests in flight");
        if tokio::time::timeout(grace, self.graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?grace,
                "proxy: requests still in flight after the grace period"
            );
        }
    }
}
