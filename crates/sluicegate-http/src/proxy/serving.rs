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
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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
    /// How long a client may take to send a request head, idle wait included.
    pub(crate) client_header_timeout: Duration,
}

/// What every h2 connection opens with (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Waits until the first bytes tell HTTP/1.1 from h2 (they are left unread for hyper);
/// `false`: the client closed first.
async fn protocol_told(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0u8; H2_PREFACE.len()];
    loop {
        let seen = stream.peek(&mut first).await?;
        if seen == 0 {
            return Ok(false);
        }
        if seen == first.len() || first[..seen] != H2_PREFACE[..seen] {
            return Ok(true);
        }
        // Part of h2's preface: a peek would return at once until more comes.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // Without a timer hyper reads a head for as long as the client takes: a client that
        // sends nothing, or a byte a minute, would hold its connection forever.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(
                Some(state.client_header_timeout).filter(|timeout| !timeout.is_zero()),
            );
        ConnectionServer {
            state,
            builder,
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
        let builder = self.builder.clone();
        let watcher = self.graceful.watcher();
        let timeout = self.state.client_header_timeout;
        tokio::spawn(async move {
            // Hyper's timer starts once the protocol is told, and telling it waits for the
            // first bytes: those are bounded here.
            let opened = timeout.is_zero()
                || matches!(
                    tokio::time::timeout(timeout, protocol_told(&stream)).await,
                    Ok(Ok(true))
                );
            if opened {
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                // A client that goes away mid-request is no error of the proxy's.
                let _ = watcher.watch(connection.into_owned()).await;
            }
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
