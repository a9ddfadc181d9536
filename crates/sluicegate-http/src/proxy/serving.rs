//! Serving client connections: HTTP/1.1 (the proxy's own server) or h2c (hyper's) on each, every request through the rules in
//! force, and the connections' graceful end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::BytesMut;
use http::Request;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::proxy::backing::Backing;
use crate::proxy::client_body::ClientBody;
use crate::proxy::forward::Forwarder;
use crate::proxy::forwarding::ForwardedClient;
use crate::proxy::loads::Counted;
use crate::proxy::metrics::Metrics;
use crate::proxy::table::{self, Table};
use crate::proxy::{h1, h2};

/// What every connection and the rule file watcher share.
pub(crate) struct State {
    /// The rules in force (replaced whole by a reload).
    pub(crate) table: ArcSwap<Table>,
    /// Where the counters are (fixed at start).
    pub(crate) backing: Backing,
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) metrics: Arc<Metrics>,
}

/// How long a client connection may wait for its next request head, or take to send one: as
/// nginx's `keepalive_timeout` (75 s) and `client_header_timeout` (60 s) together.
const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// Serves client connections, each on a task of the current runtime, and lets them finish on
/// shutdown.
pub(crate) struct ConnectionServer {
    state: Arc<State>,
    closing: CancellationToken,
    connections: TaskTracker,
}

impl ConnectionServer {
    pub(crate) fn new(state: Arc<State>) -> ConnectionServer {
        ConnectionServer {
            state,
            closing: CancellationToken::new(),
            connections: TaskTracker::new(),
        }
    }

    /// Serves `stream` from `peer` until it closes; `counted` is dropped with it.
    pub(crate) fn serve(&self, mut stream: TcpStream, peer: SocketAddr, counted: Counted) {
        let state = Arc::clone(&self.state);
        let client = ForwardedClient::new(peer.ip().to_canonical());
        let handle = move |mut request: Request<ClientBody>| {
            let extensions = request.extensions_mut();
            extensions.insert(peer);
            extensions.insert(client.clone());
            table::handle(state.table.load_full(), request)
        };
        let closing = self.closing.clone();
        self.connections.spawn(async move {
            let mut read = BytesMut::new();
            let opened = tokio::select! {
                opened = tokio::time::timeout(
                    CLIENT_IDLE_TIMEOUT,
                    h2::opens_with_preface(&mut stream, &mut read),
                ) => opened,
                () = closing.cancelled() => return,
            };
            match opened {
                Ok(Ok(true)) => h2::serve(stream, read, handle, closing).await,
                Ok(Ok(false)) => {
                    h1::serve(stream, read, handle, closing, CLIENT_IDLE_TIMEOUT).await;
                }
                // Closed, failed or silent before its first request: no error of the proxy's.
                Ok(Err(_)) | Err(_) => {}
            }
            drop(counted);
        });
    }

    /// Waits for the connections being served to finish, up to `grace`.
    pub(crate) async fn finish(self, grace: Duration) {
        tracing::info!("proxy: stopped accepting; finishing requests in flight");
        self.closing.cancel();
        self.connections.close();
        if tokio::time::timeout(grace, self.connections.wait())
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
