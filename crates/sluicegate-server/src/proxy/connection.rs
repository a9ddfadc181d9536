//! Serving client connections: HTTP/1.1 and h2c on each, every request through the rules in
//! force, and the connections' graceful end.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::plumbing::Modes;
use crate::plumbing::{
    Builders, Counted, Ended, OpenBody, Protocol, Requests, Stalls, WorkerServer, bounded,
    finish_within, protocol_told, serve_until_ended, unless_stopped,
};
use crate::proxy::client_body::ClientBody;
use crate::proxy::cpu_yield;
use crate::proxy::forward::Forwarder;
use crate::proxy::guards;
use crate::proxy::limit_counters::LimitCounters;
use crate::proxy::lingering::{HandedBack, Lingering};
use crate::proxy::metrics::Metrics;
use crate::proxy::rewrite::ForwardedClient;
use crate::proxy::rules::Rules;
use crate::proxy::send_deadline::SendDeadline;
use crate::proxy::table::{self, Table};

/// What every connection and the rule file watcher share.
pub(crate) struct State {
    /// The routes in force (replaced whole by a reload or a mode change).
    pub(crate) table: ArcSwap<Table>,
    /// The rules the table is built from; locked while it is rebuilt (`switch.rs`).
    pub(crate) rules: parking_lot::Mutex<Rules>,
    /// The switch's modes, by route name.
    pub(crate) modes: Modes,
    /// Where the counters are (fixed at start).
    pub(crate) limit_counters: LimitCounters,
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) metrics: Arc<Metrics>,
    /// How long a client connection may have no request open: the time to send a request
    /// head, idle wait included.
    pub(crate) client_header_timeout: Duration,
    /// How long a write to a client may wait for it to read.
    pub(crate) client_send_timeout: Duration,
    /// How an HTTP/1.1 connection the proxy ends goes on taking its client's bytes (none:
    /// closed at once).
    pub(crate) lingering: Option<Lingering>,
    /// After how many requests a thread offers its CPU to others (`cpu_yield`; none: never).
    pub(crate) yield_every: Option<NonZeroU32>,
    /// Whether fields whose names hold an underscore are kept (nginx's
    /// `underscores_in_headers`); by default they are dropped as the request enters.
    pub(crate) underscores_in_headers: bool,
    /// The most bytes of a request head (HTTP/1.1), or of its header list as h2 counts it.
    pub(crate) client_max_header_size: usize,
    /// TLS on the listener (`--tls-cert`), if any.
    pub(crate) tls: Option<TlsAcceptor>,
}

/// hyper's default cap on an HTTP/1.1 connection's read buffer (`http1::Builder::max_buf_size`),
/// which a head must fit in too.
const HYPER_MAX_BUF_SIZE: usize = 8192 + 4096 * 100;

/// Serves client connections, each on a task of the current runtime, and lets them finish on
/// shutdown.
pub(crate) struct ConnectionServer {
    state: Arc<State>,
    /// The connections are told HTTP/1.1 from h2 here ([`protocol_told`]), so each is served
    /// by its own protocol's builder (hyper-util's `auto` would tell them again, and wrap
    /// every read of the connection to give back what it read to tell).
    builders: Arc<Builders>,
    /// Told once, on shutdown; every connection holds a receiver until it has ended.
    stopping: watch::Sender<()>,
}

impl ConnectionServer {
    pub(crate) fn new(state: Arc<State>) -> ConnectionServer {
        let max_header = state.client_max_header_size;
        let mut http1 = http1::Builder::new();
        // A head past the bound is answered 431 and its connection closed, whether it came
        // whole or is still coming: the connection's buffer goes with it, instead of growing
        // up to the read buffer's cap and being held there.
        http1.max_header_size(max_header);
        if max_header > HYPER_MAX_BUF_SIZE {
            // The read buffer's cap would refuse a head first.
            http1.max_buf_size(max_header);
        }
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        // h2 answers a header list past it 431 and resets the stream, the connection left open.
        http2.max_header_list_size(u32::try_from(max_header).unwrap_or(u32::MAX));
        ConnectionServer {
            state,
            builders: Arc::new(Builders { http1, http2 }),
            stopping: watch::Sender::new(()),
        }
    }
}

impl WorkerServer for ConnectionServer {
    /// Serves `stream` from `peer` until it closes; `counted` is dropped with it, or when it
    /// starts lingering.
    fn serve(&self, stream: TcpStream, peer: SocketAddr, counted: Counted) {
        let state = Arc::clone(&self.state);
        let tls = state.tls.clone();
        let one = OneConnection {
            client: ForwardedClient::new(peer.ip().to_canonical(), tls.is_some()),
            state,
            // Opened now: the wait for the first bytes counts towards the first head.
            requests: Requests::new(),
            builders: Arc::clone(&self.builders),
            stopping: self.stopping.subscribe(),
        };
        tokio::spawn(async move {
            match tls {
                None => one.serve_plain(stream, counted).await,
                Some(acceptor) => one.serve_tls(stream, &acceptor).await,
            }
        });
    }

    /// Waits for the connections being served, and the WebSocket tunnels open, to finish,
    /// up to `grace`; closes the tunnels left.
    async fn finish(self, grace: Duration) {
        tracing::info!("proxy: stopped accepting; finishing requests in flight");
        let began = tokio::time::Instant::now();
        self.stopping.send_replace(());
        finish_within(grace, self.stopping.closed(), "proxy: requests").await;
        let left = grace.saturating_sub(began.elapsed());
        self.state.forwarder.client.tunnels.finish(left).await;
    }
}

/// What serving one client connection needs, whatever it runs over.
struct OneConnection {
    state: Arc<State>,
    client: ForwardedClient,
    requests: Arc<Requests>,
    builders: Arc<Builders>,
    stopping: watch::Receiver<()>,
}

impl OneConnection {
    /// Serves a plain TCP connection: HTTP/1.1 or h2 told by its first bytes; an HTTP/1.1
    /// connection the proxy ends lingers (`counted` is dropped when it starts to).
    async fn serve_plain(mut self, stream: TcpStream, counted: Counted) {
        let header_timeout = self.state.client_header_timeout;
        let Some(protocol) = protocol_told(&stream, header_timeout, &mut self.stopping).await
        else {
            return;
        };
        // h2 ends its connections with `GOAWAY`, which clients wait for.
        let lingering = self.state.lingering.filter(|_| protocol == Protocol::Http1);
        let (stream, comes_back) = HandedBack::new(stream, lingering.is_some());
        let ended = self.serve(stream, protocol).await;
        // hyper has dropped the socket, unless the connection switched to a tunnel, which
        // keeps it.
        let back = comes_back.and_then(|mut back| back.try_recv().ok());
        if let (Ended::Closed, Some(stream), Some(lingering)) = (ended, back, lingering) {
            // A lingering connection only reads and discards: it no longer weighs in the
            // choice of the worker for the next connection.
            drop(counted);
            lingering.close(stream).await;
        }
    }

    /// Serves a connection over TLS: its handshake bounded by the header timeout, h2 or
    /// HTTP/1.1 as ALPN agreed (HTTP/1.1 when the client named neither). It does not linger:
    /// what a client still sends after the answer is read by rustls only to be dropped.
    async fn serve_tls(mut self, stream: TcpStream, acceptor: &TlsAcceptor) {
        let header_timeout = self.state.client_header_timeout;
        let handshake = bounded(header_timeout, acceptor.accept(stream));
        let Some(Some(Ok(stream))) = unless_stopped(&mut self.stopping, handshake).await else {
            return;
        };
        let protocol = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
            Protocol::H2
        } else {
            Protocol::Http1
        };
        self.serve(stream, protocol).await;
    }

    /// Serves `stream` by `protocol` until it ends, every request through the rules in force.
    async fn serve<IO>(self, stream: IO, protocol: Protocol) -> Ended
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let OneConnection {
            state,
            client,
            requests,
            builders,
            stopping,
        } = self;
        let header_timeout = state.client_header_timeout;
        let send_timeout = state.client_send_timeout;
        let io = TokioIo::new(SendDeadline::new(
            stream,
            send_timeout,
            Arc::clone(&requests),
        ));
        let idle = (!header_timeout.is_zero()).then(|| (Arc::clone(&requests), header_timeout));
        // HTTP/1.1's stalls are the socket's (`SendDeadline`): the watch is for h2 alone.
        let h2_stalls = (protocol == Protocol::H2 && !send_timeout.is_zero()).then(Stalls::new);
        let stalled = h2_stalls
            .as_ref()
            .map(|stalls| (Arc::clone(stalls), send_timeout));
        let service = service_fn(move |request: Request<Incoming>| {
            let stalls = h2_stalls.clone();
            let mut request = request.map(|body| ClientBody {
                body,
                client: client.clone(),
            });
            if !state.underscores_in_headers {
                guards::drop_underscored(request.headers_mut());
            }
            let open = requests.open();
            if let Some(every) = state.yield_every {
                cpu_yield::count_request(every);
            }
            // Routed and limited now: the future hyper keeps holds only what waits.
            let handling = table::handle(&state.table.load(), request);
            async move {
                let response = handling.await;
                // Watched from the response on: until then the upstream's timeout bounds
                // the wait.
                let asked = stalls.map(|stalls| stalls.watch());
                Ok::<_, Infallible>(response.map(|body| OpenBody::new(body, open, asked)))
            }
        });
        // Upgrades: a WebSocket handshake the upstream accepts turns the connection into a
        // tunnel (`upstream::tunnel`).
        serve_until_ended(io, service, protocol, &builders, stopping, idle, stalled).await
    }
}
