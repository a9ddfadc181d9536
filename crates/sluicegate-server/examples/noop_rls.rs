//! The benchmark's ceiling: a `ShouldRateLimit` server on the same stack as
//! `sluicegate serve --grpc-server tonic` (tonic, envoy-types, the same runtime and gRPC
//! settings) that answers OK without deciding. `serve`'s default gRPC server, the lean one, is
//! not on tonic and can pass it.
//!
//! `cargo run --release -p sluicegate-server --example noop_rls -- --grpc-addr 127.0.0.1:9081`
//! serves until killed; it prints `listening on ADDR` once bound.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;

#[path = "shared/always_ok.rs"]
mod always_ok;
use always_ok::AlwaysOk;

/// A no-op rate limit service, the ceiling of what the stack can answer.
#[derive(Debug, Parser)]
struct Args {
    /// Where to listen for gRPC.
    #[arg(long, default_value = "127.0.0.1:9081")]
    grpc_addr: SocketAddr,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = sluicegate_server::serve::runtime()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.grpc_addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.grpc_addr))?;
        println!("listening on {}", listener.local_addr()?);
        sluicegate_server::serve::grpc_server()
            .add_service(RateLimitServiceServer::new(AlwaysOk))
            .serve_with_incoming(sluicegate_server::serve::grpc_incoming(listener))
            .await
            .context("gRPC server failed")
    })
}
