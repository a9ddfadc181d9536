//! Runs the service: gRPC (the lean server, or tonic's) and HTTP listeners over one engine,
//! the reload loop, and a graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sluicegate_rules::LoadOptions;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::transport::server::TcpIncoming;

use crate::plumbing::{
    ClientTimeouts, Loads, Workers, admin_address_allowed, finish_within, serve_admin,
    serve_router, start_workers_on,
};
use crate::serve::admin::admin_router;
use crate::serve::engine::{Engine, EngineOptions};
use crate::serve::grpc::GrpcService;
use crate::serve::grpc_lean::{self, LeanConnections};
use crate::serve::grpc_options::{GrpcOptions, GrpcServer};
use crate::serve::http::router;
use crate::serve::metrics::Metrics;
use crate::serve::reload::{load_rules, rules_in_force, watch as watch_rules};

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The rule file or directory.
    pub rules: PathBuf,
    /// How rule files are read.
    pub load_options: LoadOptions,
    /// The gRPC listen address.
    pub grpc_addr: SocketAddr,
    /// The HTTP listen address.
    pub http_addr: SocketAddr,
    /// How the engine answers.
    pub engine: EngineOptions,
    /// How often the rules are checked for changes.
    pub reload_interval: Duration,
    /// How long a shutdown waits for calls in flight and connections told to close; those
    /// left then are closed.
    pub shutdown_grace: Duration,
    /// How long a client of the HTTP and admin listeners may take to send a request head,
    /// the wait for the next one on an idle keep-alive connection included; the connection
    /// is closed when it runs out.
    pub client_header_timeout: Duration,
    /// How long a client of the HTTP and admin listeners may take to send the next bytes of
    /// a request body; a body that stops coming for this long is answered 400 (zero: never).
    pub client_body_timeout: Duration,
    /// Where the live page and the manual switch listen (none: not served).
    pub admin_addr: Option<SocketAddr>,
    /// The token every admin API call must carry; required off loopback.
    pub admin_token: Option<String>,
    /// How gRPC is served.
    pub grpc: GrpcOptions,
}

impl ServerConfig {
    /// The rules in `rules` served on free loopback ports (gRPC, HTTP and admin, each
    /// `127.0.0.1:0`: read the bound ones off [`RunningServer`]), with the command's other
    /// defaults: an embedder's or a test's starting point.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate_server::serve::ServerConfig;
    ///
    /// let config = ServerConfig {
    ///     shutdown_grace: Duration::from_secs(5),
    ///     ..ServerConfig::on_free_loopback_ports("examples/rules")
    /// };
    /// assert_eq!(config.http_addr.port(), 0);
    /// ```
    pub fn on_free_loopback_ports(rules: impl Into<PathBuf>) -> ServerConfig {
        let free = SocketAddr::from(([127, 0, 0, 1], 0));
        ServerConfig {
            rules: rules.into(),
            load_options: LoadOptions::default(),
            grpc_addr: free,
            http_addr: free,
            engine: EngineOptions::default(),
            reload_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            client_header_timeout: Duration::from_secs(60),
            client_body_timeout: Duration::from_secs(60),
            admin_addr: Some(free),
            admin_token: None,
            grpc: GrpcOptions::default(),
        }
    }
}

/// A service that is up: its bound addresses, and the handle to stop it.
#[derive(Debug)]
pub struct RunningServer {
    /// Where gRPC listens (useful with port 0).
    pub grpc_addr: SocketAddr,
    /// Where HTTP listens.
    pub http_addr: SocketAddr,
    /// Where the admin page and API listen, if served.
    pub admin_addr: Option<SocketAddr>,
    /// The engine, for inspection.
    pub engine: Arc<Engine>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<anyhow::Result<()>>,
    shutdown_grace: Duration,
}

impl RunningServer {
    /// Stops accepting, lets calls in flight finish, and waits for the listeners to close, up
    /// to the shutdown grace; leased permits then go back to Redis. Past the grace it stops
    /// waiting (a client that never began HTTP/2, or never answers the PING that GOAWAY
    /// sends, would otherwise hold the shutdown up for as long as it stays): the connections
    /// left still run on the runtime that serves them until it is dropped, as the binary does
    /// when it exits right after, and a call among them that takes a lease leaves it to
    /// expire.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let grace = self.shutdown_grace;
        let stopped = match finish_within(grace, self.join(), "connections").await {
            Some(stopped) => stopped,
            None => {
                self.tasks.shutdown().await;
                Ok(())
            }
        };
        self.engine.return_leases().await;
        stopped
    }

    /// Waits until a listener fails (or both stop).
    pub async fn join(&mut self) -> anyhow::Result<()> {
        while let Some(done) = self.tasks.join_next().await {
            done.context("server task panicked")??;
        }
        Ok(())
    }

    /// Signals a graceful stop without waiting.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// The tokio runtime `serve` runs on (shared with the benchmark's ceiling server, so both run
/// on the same settings).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// The tonic server settings `serve --grpc-server tonic` uses (shared with the benchmark's
/// ceiling server).
pub fn grpc_server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
}

/// The gRPC connections accepted on `listener`, with `TCP_NODELAY` set: answers are small, and
/// tonic ignores its own `tcp_nodelay` setting for a listener it did not bind.
pub fn grpc_incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Loads the rules, binds the listeners and starts serving.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    if let Some(address) = config.admin_addr {
        anyhow::ensure!(
            admin_address_allowed(address, config.admin_token.as_deref()),
            "--admin-addr {address} is not a loopback address: set --admin-token (or \
             SLUICEGATE_ADMIN_TOKEN) so that only holders of the token can switch limits"
        );
    }
    let metrics = Arc::new(Metrics::new());
    let rules = load_rules(&metrics, &config.rules, &config.load_options)
        .with_context(|| format!("cannot load rules from {}", config.rules.display()))?;
    let engine = Arc::new(Engine::new(rules, config.engine.clone(), metrics)?);
    rules_in_force(engine.metrics(), &config.rules);
    // Redis down at start is not fatal: the failure policy answers until it is up.
    let connected = engine.connect().await.context("invalid redis settings")?;

    let grpc_listener = TcpListener::bind(config.grpc_addr).await.with_context(|| {
        format!(
            "cannot listen for gRPC on {} (choose another with --grpc-addr)",
            config.grpc_addr
        )
    })?;
    let http_listener = TcpListener::bind(config.http_addr).await.with_context(|| {
        format!(
            "cannot listen for HTTP on {} (choose another with --http-addr)",
            config.http_addr
        )
    })?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    let admin_listener = match config.admin_addr {
        Some(address) => Some(TcpListener::bind(address).await.with_context(|| {
            format!(
                "cannot listen for the admin page on {address} (choose another with \
                         --admin-addr, or turn it off with --no-admin)"
            )
        })?),
        None => None,
    };
    let admin_addr = admin_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;

    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();

    let grpc_engine = Arc::clone(&engine);
    let mut grpc_stopped = stopped.clone();
    let grpc = config.grpc;
    let keepalive = grpc.keepalive;
    let grace = config.shutdown_grace;
    match grpc.server {
        GrpcServer::Lean => {
            if grpc.workers == 0 {
                tasks.spawn(async move {
                    grpc_lean::serve(grpc_listener, grpc_engine, grpc, grace, grpc_stopped).await;
                    Ok(())
                })
            } else {
                let listener = grpc_listener.into_std()?;
                let workers = Workers {
                    count: grpc.workers,
                    thread_name: "sluicegate-grpc",
                    grace,
                };
                let stopped = grpc_stopped.clone();
                let server =
                    move |_| LeanConnections::new(Arc::clone(&grpc_engine), grpc, stopped.clone());
                let loads = Loads::new(grpc.workers);
                let main = start_workers_on(&listener, &workers, server, &loads, &grpc_stopped)
                    .context("cannot start the gRPC workers")?;
                tasks.spawn(async move {
                    main.await.context("gRPC workers panicked")?;
                    Ok(())
                })
            }
        }
        GrpcServer::Tonic => tasks.spawn(async move {
            grpc_server()
                .http2_keepalive_interval(keepalive.map(|k| k.interval))
                .http2_keepalive_timeout(keepalive.map(|k| k.timeout))
                .add_service(GrpcService::server(grpc_engine))
                .serve_with_incoming_shutdown(grpc_incoming(grpc_listener), async move {
                    let _ = grpc_stopped.wait_for(|s| *s).await;
                })
                .await
                .context("gRPC server failed")
        }),
    };

    let http_engine = Arc::clone(&engine);
    let http_stopped = stopped.clone();
    let timeouts = ClientTimeouts {
        header: config.client_header_timeout,
        body: config.client_body_timeout,
    };
    tasks.spawn(async move {
        serve_router(
            "http",
            http_listener,
            router(http_engine),
            timeouts,
            http_stopped,
        )
        .await;
        Ok(())
    });

    if let Some(listener) = admin_listener {
        let admin = admin_router(Arc::clone(&engine), config.admin_token.clone());
        let admin_stopped = stopped.clone();
        tasks.spawn(async move {
            serve_admin(listener, admin, timeouts, admin_stopped).await;
            Ok(())
        });
    }

    let reload_engine = Arc::clone(&engine);
    let mut reload_stopped = stopped;
    let (path, options, interval) = (
        config.rules.clone(),
        config.load_options.clone(),
        config.reload_interval,
    );
    tasks.spawn(async move {
        tokio::select! {
            () = watch_rules(reload_engine, path, options, interval) => {}
            _ = reload_stopped.wait_for(|s| *s) => {}
        }
        Ok(())
    });

    if !connected {
        let connect_engine = Arc::clone(&engine);
        let mut connect_stopped = stop.subscribe();
        tasks.spawn(async move {
            tokio::select! {
                () = connect_engine.connect_until_up() => {}
                _ = connect_stopped.wait_for(|s| *s) => {}
            }
            Ok(())
        });
    }

    tracing::info!(%grpc_addr, %http_addr, ?admin_addr, "sluicegate serving");
    Ok(RunningServer {
        grpc_addr,
        http_addr,
        admin_addr,
        engine,
        stop,
        tasks,
        shutdown_grace: config.shutdown_grace,
    })
}
