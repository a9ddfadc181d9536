//! The running proxy: the listener (HTTP/1.1 and h2c on one port), the admin listener
//! (plumbing's: `/metrics`, the live page, the manual switch), the rule file watcher, and
//! graceful shutdown.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::header::HeaderValue;
use parking_lot::Mutex;
use sluicegate::SystemClock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::plumbing::{
    ClientTimeouts, Modes, RuleWatcher, accept_next, admin_address_allowed, admin_router,
    serve_admin,
};
use crate::plumbing::{Loads, TlsFiles, WorkerServer as _, Workers, start_workers, tls_acceptor};
use crate::proxy::admin::ProxyAdmin;
use crate::proxy::connection::{ConnectionServer, State};
use crate::proxy::error::ProxyError;
use crate::proxy::forward::{Forwarder, Target};
use crate::proxy::limit_counters::LimitCounters;
use crate::proxy::lingering::Lingering;
use crate::proxy::live::{RouteSeries, sample_every_second};
use crate::proxy::metrics::Metrics;
use crate::proxy::request_body::BodyBounds;
use crate::proxy::rewrite::ForwardingFields;
use crate::proxy::rules::Rules;
use crate::proxy::table::Table;
use crate::proxy::upstream::{Reach, Tls, UpstreamClient, UpstreamProtocol};

/// How to run the proxy.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// The upstream, `http://host:port`.
    pub upstream: String,
    /// The rule file (re-read when it changes).
    pub rules: PathBuf,
    /// Where clients connect.
    pub listen: SocketAddr,
    /// Where `/metrics`, the live page and the manual switch are served (none: not served).
    pub admin: Option<SocketAddr>,
    /// The token every admin API call must carry; required off loopback.
    pub admin_token: Option<String>,
    /// How long the upstream may go without progress: to answer a request's head once it has
    /// the whole request, and to take the next bytes of a request body (then 504); to send
    /// the next bytes of a response body (then the body is cut off). Connecting and a request
    /// without body are bounded by it as a whole.
    pub upstream_timeout: Duration,
    /// How long connecting to the upstream may take (then 502).
    pub connect_timeout: Duration,
    /// How long an upstream connection may stay idle in its pool before it is closed (nginx's
    /// `keepalive_timeout` in an `upstream` block). Below the upstream's own keep-alive
    /// timeout, the proxy closes idle connections before the upstream can close one just as
    /// a request is sent on it.
    pub upstream_keepalive_timeout: Duration,
    /// How long a client connection may have no request open, counted from its opening or
    /// from the end of its last response: the time to send a request head, the wait for the
    /// next request on an idle keep-alive connection included (nginx's
    /// `client_header_timeout`, and `keepalive_timeout` for the wait between requests). An
    /// HTTP/1.1 connection is then closed, an h2 connection told to go away (`GOAWAY`) and
    /// closed. Zero: no bound.
    pub client_header_timeout: Duration,
    /// How long a write to a client may wait for the client to read (nginx's
    /// `send_timeout`): a client that reads nothing of its response for this long has its
    /// connection closed. Zero: no bound.
    pub client_send_timeout: Duration,
    /// How long a client may take to send the next bytes of a request body (nginx's
    /// `client_body_timeout`): a request whose body stops coming for this long is answered
    /// 408 if the upstream has not answered yet, and its upstream connection (if the body was
    /// being streamed) closed. The bound is on the wait between two pieces, never on the whole
    /// body, so a slow upload that keeps coming passes. Zero: no bound (a client that stops
    /// sending its body then holds its connection, and an upstream connection if the body is
    /// streamed, for as long as it stays).
    pub client_body_timeout: Duration,
    /// The most bytes of a request body the proxy passes on (nginx's
    /// `client_max_body_size`). A request whose `Content-Length` says more is answered 413
    /// before any limit sees it and before the upstream does; one whose body comes without a
    /// length and grows past it has its upstream connection closed (the upstream sees the body
    /// cut short) and is answered 413 if the upstream has not answered yet. None: no bound
    /// (no body is held whole beyond `client_body_buffer_size`, so none is needed for memory).
    pub client_max_body_size: Option<u64>,
    /// A request body whose announced length (`Content-Length`) is at most this many bytes is
    /// read whole from the client before the request goes to the upstream (nginx's
    /// `client_body_buffer_size` and `proxy_request_buffering on`): a client sending such a
    /// body slowly holds no upstream connection while it does, and an idempotent request can
    /// be sent again with its body. A body sent without a length (chunked, or h2 without
    /// `content-length`) is read up to this many bytes first: one that ends within them is
    /// sent with its `Content-Length`, as nginx sends it; one that goes on is sent chunked,
    /// what was read first. Longer bodies are streamed. 0: every body is streamed as it comes
    /// (nginx's `proxy_request_buffering off`), which a client streaming both ways over one
    /// request needs.
    pub client_body_buffer_size: u64,
    /// The most bytes of a request head, its request line included (nginx's
    /// `large_client_header_buffers`, whose default `4 8k` allows 32 KiB in all). An HTTP/1.1
    /// head past it is answered 431 and its connection closed, whether it came whole or is
    /// still coming, so that a client sending an endless head holds no more than this of the
    /// proxy's memory; an h2 request whose header list (as h2 counts it: each field's name
    /// and value and 32 bytes) is past it is answered 431 and its stream reset.
    pub client_max_header_size: usize,
    /// Keep the fields whose names hold an underscore (nginx's `underscores_in_headers on`).
    /// By default they are dropped as the request enters, before any limit reads it and
    /// before the upstream does, as nginx drops them (`ignore_invalid_headers on`): upstreams
    /// that read fields by CGI-style names (`HTTP_X_FORWARDED_FOR`) would take
    /// `X_Forwarded_For` for the `X-Forwarded-For` the limits read.
    pub underscores_in_headers: bool,
    /// How long an HTTP/1.1 connection the proxy closes (after a 413 on a request head, a 408,
    /// a denial whose body was not read, `Connection: close`) may go on taking what its client
    /// still sends, read and thrown away, so that a client sending its whole body before it
    /// reads gets the answer and not a reset (nginx's `lingering_time`). Zero: closed at once
    /// (nginx's `lingering_close off`).
    pub lingering_time: Duration,
    /// The longest wait for a client's next bytes while its connection lingers (nginx's
    /// `lingering_timeout`): one that sends nothing for this long is closed.
    pub lingering_timeout: Duration,
    /// How often the rule file is checked for changes.
    pub reload_interval: Duration,
    /// How long a shutdown waits for requests in flight and WebSockets open (which are then
    /// closed).
    pub shutdown_grace: Duration,
    /// Keep the counters in Redis, shared by every proxy started with the same (none: in
    /// this proxy).
    pub redis: Option<crate::plumbing::RedisSettings>,
    /// After how many requests a thread serving clients offers its CPU to the other threads
    /// waiting for one (`sched_yield`), so that on cores shared with the app or the clients a
    /// busy worker does not keep its CPU for a whole scheduler slice while those that would
    /// read its answers wait (the tail of the latency then counts timer ticks). None: never;
    /// by default every 64 requests, as the command line's `--yield-every`.
    pub yield_every: Option<NonZeroU32>,
    /// Which forwarding fields the client's address is appended to (nginx's
    /// `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for`); those it is not are
    /// passed on as they came.
    pub forwarding_fields: ForwardingFields,
    /// The certificates (PEM) an `https://` upstream's must chain to, instead of the
    /// system's (nginx's `proxy_ssl_trusted_certificate`, always verified here).
    pub upstream_ca: Option<PathBuf>,
    /// Which HTTP the proxy speaks to the upstream: by default HTTP/1.1, and h2 when an
    /// `https://` upstream offers it by ALPN.
    pub upstream_protocol: UpstreamProtocol,
    /// TLS on the listener (nginx's `listen 443 ssl`): h2 or HTTP/1.1 by ALPN, the files
    /// re-read when they change (checked every `reload_interval`). None: plain TCP.
    pub tls: Option<TlsFiles>,
    /// How many threads serve clients, each with its own single-threaded runtime and its own
    /// pool of upstream connections, as nginx's worker processes do. Each accepts on the one
    /// listening socket and hands a new connection to the worker serving fewest when that is
    /// not itself. 0: clients are served on the runtime [`start`] is called on.
    pub workers: usize,
}

impl ProxyConfig {
    /// A configuration with the defaults: admin off, 60 s upstream timeout, 5 s connect
    /// timeout, upstream connections kept 60 s idle, 60 s for a client's request head, for
    /// a client to read and for the next piece of a request body, rule file checked every
    /// second, 30 s shutdown grace, no bound on request bodies, bodies of up to 16 KiB read
    /// whole before they are sent, request heads of up to 32 KiB, fields named with an
    /// underscore dropped, a closed connection lingering up to 30 s (5 s without a
    /// byte from its client), the CPU never offered to other threads, the client appended to
    /// `X-Forwarded-For` and `Forwarded`, clients served on the caller's runtime.
    pub fn new(upstream: impl Into<String>, rules: impl Into<PathBuf>, listen: SocketAddr) -> Self {
        ProxyConfig {
            upstream: upstream.into(),
            rules: rules.into(),
            listen,
            admin: None,
            admin_token: None,
            upstream_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            upstream_keepalive_timeout: Duration::from_secs(60),
            client_header_timeout: Duration::from_secs(60),
            client_send_timeout: Duration::from_secs(60),
            client_body_timeout: Duration::from_secs(60),
            client_max_body_size: None,
            client_body_buffer_size: 16 * 1024,
            client_max_header_size: 32 * 1024,
            underscores_in_headers: false,
            lingering_time: Duration::from_secs(30),
            lingering_timeout: Duration::from_secs(5),
            reload_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            redis: None,
            yield_every: NonZeroU32::new(64),
            forwarding_fields: ForwardingFields::Both,
            upstream_ca: None,
            upstream_protocol: UpstreamProtocol::Auto,
            tls: None,
            workers: 0,
        }
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    main: JoinHandle<()>,
    admin: Option<JoinHandle<()>>,
    watcher: JoinHandle<()>,
    /// Re-reads the listener's certificate files when they change.
    tls_reload: Option<JoinHandle<()>>,
    /// Where the counters are: leased permits go back to Redis at shutdown.
    limit_counters: LimitCounters,
}

/// Loads the rules, binds the listeners and starts serving (on the current tokio runtime).
pub async fn start(config: ProxyConfig) -> Result<Proxy, ProxyError> {
    if let Some(address) = config.admin {
        if !admin_address_allowed(address, config.admin_token.as_deref()) {
            return Err(ProxyError::AdminNeedsToken { address });
        }
    }
    let target = Target::parse(&config.upstream)?;
    let rules = Rules::load(&config.rules)?;
    let metrics = Arc::new(Metrics::default());
    let limit_counters = LimitCounters::new(config.redis.as_ref(), &metrics);
    limit_counters.check(&rules, &config.rules)?;
    limit_counters.connect().await?;
    let fallback_host =
        HeaderValue::from_str(target.authority.as_str()).map_err(|_| ProxyError::Upstream {
            url: config.upstream.clone(),
            reason: "the host is not a valid Host field".to_owned(),
        })?;
    let (tls, tls_reload) = match &config.tls {
        Some(files) => {
            let (acceptor, reloading) = tls_acceptor(files, config.reload_interval)?;
            (Some(acceptor), Some(reloading))
        }
        None => (None, None),
    };
    let forwarder = Arc::new(Forwarder {
        client: UpstreamClient::new(
            Reach {
                authority: target.authority.clone(),
                tls: target
                    .tls
                    .then(|| {
                        Tls::new(
                            target.authority.host(),
                            config.upstream_ca.as_deref(),
                            config.upstream_protocol,
                        )
                    })
                    .transpose()?,
                protocol: config.upstream_protocol,
            },
            config.workers,
            config.connect_timeout,
            config.upstream_keepalive_timeout,
            Arc::clone(&metrics.websockets_open),
        ),
        target,
        upstream_timeout: config.upstream_timeout,
        bodies: BodyBounds {
            max_size: config.client_max_body_size,
            buffer_size: config.client_body_buffer_size,
            client_timeout: Some(config.client_body_timeout).filter(|t| !t.is_zero()),
        },
        forwarding: config.forwarding_fields,
        fallback_host,
        metrics: Arc::clone(&metrics),
    });
    // Not persisted: a restarted proxy enforces its rule file.
    let modes = Modes::unpersisted();
    let table = Table::build(
        &rules,
        &limit_counters,
        &forwarder,
        &metrics,
        None,
        &modes.table(),
    )?;
    let state = Arc::new(State {
        table: ArcSwap::from_pointee(table),
        rules: Mutex::new(rules),
        modes,
        limit_counters: limit_counters.clone(),
        forwarder,
        metrics,
        client_header_timeout: config.client_header_timeout,
        client_send_timeout: config.client_send_timeout,
        lingering: (!config.lingering_time.is_zero() && !config.lingering_timeout.is_zero())
            .then_some(Lingering {
                time: config.lingering_time,
                timeout: config.lingering_timeout,
            }),
        yield_every: config.yield_every,
        underscores_in_headers: config.underscores_in_headers,
        client_max_header_size: config.client_max_header_size,
        tls,
    });
    let bind = |address: SocketAddr, flag| async move {
        TcpListener::bind(address)
            .await
            .map_err(|source| ProxyError::Bind {
                address,
                flag,
                source,
            })
    };
    let (stop, stopped) = watch::channel(false);
    let loads = Loads::new(config.workers);
    state.metrics.connections(Arc::clone(&loads));
    let (main, local_addr) = if config.workers == 0 {
        let listener = bind(config.listen, "--listen").await?;
        let local_addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            address: config.listen,
            flag: "--listen",
            source,
        })?;
        let main = tokio::spawn(serve(
            listener,
            Arc::clone(&state),
            loads,
            stopped.clone(),
            config.shutdown_grace,
        ));
        (main, local_addr)
    } else {
        let workers = Workers {
            count: config.workers,
            thread_name: "sluicegate-proxy",
            grace: config.shutdown_grace,
        };
        let worker_state = Arc::clone(&state);
        let server = move |worker| {
            UpstreamClient::enter_worker(worker);
            ConnectionServer::new(Arc::clone(&worker_state))
        };
        start_workers(config.listen, &workers, server, &loads, &stopped).map_err(|source| {
            ProxyError::Bind {
                address: config.listen,
                flag: "--listen",
                source,
            }
        })?
    };
    let (admin, admin_addr) = match config.admin {
        Some(address) => {
            let listener = bind(address, "--admin").await?;
            let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
                address,
                flag: "--admin",
                source,
            })?;
            let series = Arc::new(RouteSeries::default());
            let admin = ProxyAdmin {
                state: Arc::clone(&state),
                series: Arc::clone(&series),
                rules_path: config.rules.clone(),
                clock: SystemClock::new(),
            };
            let router = admin_router(Arc::new(admin), config.admin_token.clone());
            let admin_stopped = stopped.clone();
            let metrics = Arc::clone(&state.metrics);
            let timeouts = ClientTimeouts {
                header: config.client_header_timeout,
                body: config.client_body_timeout,
            };
            let task = tokio::spawn(async move {
                let sampling = sample_every_second(series, metrics, admin_stopped.clone());
                let served = serve_admin(listener, router, timeouts, admin_stopped);
                tokio::join!(served, sampling);
            });
            (Some(task), Some(addr))
        }
        None => (None, None),
    };
    let watcher = tokio::spawn(watch_rules(
        Arc::clone(&state),
        config.rules.clone(),
        config.reload_interval,
        stopped.clone(),
    ));
    tracing::info!(%local_addr, upstream = %config.upstream, workers = config.workers, "proxy: listening");
    Ok(Proxy {
        local_addr,
        admin_addr,
        stop,
        main,
        admin,
        watcher,
        tls_reload,
        limit_counters,
    })
}

impl Proxy {
    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address `/metrics`, the live page and the manual switch are served on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Stops accepting connections, lets requests in flight and WebSockets open finish (up to
    /// the grace period; WebSockets still open then are closed), and returns when every
    /// connection is closed.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.main.await;
        if let Some(admin) = self.admin {
            let _ = admin.await;
        }
        let _ = self.watcher.await;
        if let Some(reloading) = self.tls_reload {
            reloading.abort();
        }
        self.limit_counters.return_leases().await;
    }
}

/// Accepts on `listener` (the caller's runtime, no workers).
async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    loads: Arc<Loads>,
    mut stopped: watch::Receiver<bool>,
    grace: Duration,
) {
    let server = ConnectionServer::new(state);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = accept_next(&listener, "proxy") => accepted,
            _ = stopped.changed() => break,
        };
        server.serve(stream, peer, loads.count(0));
    }
    drop(listener);
    server.finish(grace).await;
}

/// Reloads the rule file whenever it changes and settles ([`RuleWatcher`], polled every
/// `interval`): one that loads replaces the rules (keeping the state of every limit whose
/// definition is unchanged), one that does not is logged with its `file:line:column` errors
/// and the old rules stay.
async fn watch_rules(
    state: Arc<State>,
    path: PathBuf,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut file = RuleWatcher::new(path.clone(), interval);
    loop {
        tokio::select! {
            () = file.changed() => {}
            _ = stopped.changed() => return,
        }
        let loaded = Rules::load(&path)
            .map_err(|e| e.to_string())
            .and_then(|rules| {
                state
                    .limit_counters
                    .check(&rules, &path)
                    .map_err(|e| e.to_string())?;
                state.install(rules).map_err(|e| e.to_string())
            });
        match loaded {
            // Logged before counted: whoever sees the count (a test, an alert) finds the line.
            Ok(()) => {
                tracing::info!(path = %path.display(), "proxy: rules reloaded");
                Metrics::count(&state.metrics.reloads_ok);
            }
            Err(error) => {
                tracing::error!("proxy: the rule file was not reloaded, old rules kept:\n{error}");
                Metrics::count(&state.metrics.reloads_failed);
            }
        }
    }
}
