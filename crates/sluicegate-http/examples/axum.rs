//! An axum service limited per client address: 10 requests a second in bursts of 20, and at
//! most 2 requests in flight per client.
//!
//! ```text
//! cargo run -p sluicegate-http --example axum
//! for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code} ' localhost:3000/; done
//! ```

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::PeerIp;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limit = RateLimitLayer::builder(PeerIp)
        .limit_named("per-client", "token-bucket:rate=10/s,burst=20")
        .limit_named("in-flight", "concurrency:limit=2")
        .headers_on_allowed(true)
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);
    let address = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
