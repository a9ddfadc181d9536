//! A small reverse proxy with an adaptive concurrency limit in front of one upstream: every
//! request is forwarded (method, path, headers, body) and its permit held until the answer's
//! body has been sent on. For overload runs (scripts/bench-adaptive-proxy.sh) until
//! `sluicegate proxy` takes an `adaptive:` setting.
//!
//! ```text
//! cargo run -p sluicegate-http --example adaptive_proxy -- --upstream 127.0.0.1:8080
//! ```
//!
//! Options: `--listen ADDR` (default 127.0.0.1:0; the address is printed), `--upstream ADDR`
//! (required), `--controller gradient2|vegas|aimd|none` (default gradient2; `none` forwards
//! without a limit), `--queue-timeout-ms MS` (default 0: refuse at once) and
//! `--queue-capacity N` (default 100), `--aimd-timeout-ms MS` (AIMD counts a slower answer as
//! a loss; default 500, half the bench's client timeout: AIMD sees no latency otherwise),
//! `--threads N` (runtime threads, default 1). Every
//! second it prints the limit, in flight, queued and rejected to stderr.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluicegate::adaptive::{AdaptiveLimiter, Aimd, Gradient2, Vegas};
use sluicegate_http::adaptive::AdaptiveLimitLayer;

struct Options {
    listen: String,
    upstream: String,
    controller: String,
    queue_timeout: Duration,
    queue_capacity: usize,
    aimd_timeout: Duration,
    threads: usize,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        listen: "127.0.0.1:0".into(),
        upstream: String::new(),
        controller: "gradient2".into(),
        queue_timeout: Duration::ZERO,
        queue_capacity: 100,
        aimd_timeout: Duration::from_millis(500),
        threads: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: `{value}` is not a whole number"))
        };
        match flag.as_str() {
            "--listen" => options.listen = value.clone(),
            "--upstream" => options.upstream = value.clone(),
            "--controller" => options.controller = value.clone(),
            "--queue-timeout-ms" => options.queue_timeout = Duration::from_millis(number()?),
            "--queue-capacity" => {
                options.queue_capacity = usize::try_from(number()?).map_err(|e| e.to_string())?
            }
            "--aimd-timeout-ms" => options.aimd_timeout = Duration::from_millis(number()?),
            "--threads" => {
                options.threads = usize::try_from(number()?).map_err(|e| e.to_string())?
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if options.upstream.is_empty() {
        return Err("--upstream ADDR is required".into());
    }
    if options.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    Ok(options)
}

/// The layer for `--controller`, or `None` for no limit.
fn layer(options: &Options) -> Result<Option<AdaptiveLimitLayer>, Box<dyn std::error::Error>> {
    fn build<C: sluicegate::adaptive::Controller + 'static>(
        controller: C,
        options: &Options,
    ) -> Result<AdaptiveLimitLayer, Box<dyn std::error::Error>> {
        let limiter = AdaptiveLimiter::builder(controller)
            .queue_capacity(options.queue_capacity)
            .build()?;
        let mut builder = AdaptiveLimitLayer::builder(limiter);
        if !options.queue_timeout.is_zero() {
            builder = builder.queue_timeout(options.queue_timeout);
        }
        Ok(builder.build())
    }
    Ok(Some(match options.controller.as_str() {
        "none" => return Ok(None),
        "gradient2" => build(Gradient2::default(), options)?,
        "vegas" => build(Vegas::default(), options)?,
        "aimd" => {
            let aimd = Aimd::builder().timeout(options.aimd_timeout).build()?;
            build(aimd, options)?
        }
        other => return Err(format!("unknown controller `{other}`").into()),
    }))
}

type HttpClient = Client<HttpConnector, Body>;

/// Forwards `request` to the upstream; 502 when it cannot be reached.
async fn forward(
    State((client, upstream)): State<(HttpClient, String)>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = match format!("http://{upstream}{path}").parse() {
        Ok(uri) => uri,
        Err(error) => {
            return (StatusCode::BAD_REQUEST, format!("bad path: {error}\n")).into_response();
        }
    };
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => response.map(Body::new),
        Err(error) => (StatusCode::BAD_GATEWAY, format!("upstream: {error}\n")).into_response(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse().map_err(|message| format!("adaptive_proxy: {message}"))?;
    let layer = layer(&options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(connector);
        let mut app = Router::new()
            .fallback(forward)
            .with_state((client, options.upstream.clone()));
        if let Some(layer) = layer.clone() {
            app = app.layer(layer);
        }
        let listener = tokio::net::TcpListener::bind(&options.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        if let Some(layer) = layer {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let m = layer.metrics();
                    eprintln!(
                        "limit {} in_flight {} queued {} rejected {}",
                        m.limit, m.in_flight, m.queued, m.rejected
                    );
                }
            });
        }
        axum::serve(listener, app).await?;
        Ok(())
    })
}
