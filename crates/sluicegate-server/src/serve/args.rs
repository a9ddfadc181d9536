//! `sluicegate serve` flags, each also read from a `SLUICEGATE_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sluicegate_rules::LoadOptions;

use crate::serve::engine::EngineOptions;
use crate::serve::headers::{HeaderOptions, LegacyHeaderNames};
use crate::serve::server::ServerConfig;

/// Serve the rate limit service (Envoy gRPC and HTTP JSON).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Rule file, or directory of rule files, in envoyproxy/ratelimit's YAML format.
    #[arg(long, env = "SLUICEGATE_CONFIG")]
    pub config: PathBuf,
    /// Where to listen for gRPC (`envoy.service.ratelimit.v3.RateLimitService`).
    #[arg(long, env = "SLUICEGATE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_addr: SocketAddr,
    /// Where to listen for HTTP (`/json`, `/healthcheck`, `/rlconfig`, `/metrics`).
    #[arg(long, env = "SLUICEGATE_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Merge rule files that name the same domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "SLUICEGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// Answer OK to everything while still deciding and counting (a dry run).
    #[arg(long, env = "SLUICEGATE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Add the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` headers.
    #[arg(long, env = "SLUICEGATE_LEGACY_HEADERS")]
    pub legacy_headers: bool,
    /// Leave out the IETF `RateLimit-Policy` and `RateLimit` headers.
    #[arg(long, env = "SLUICEGATE_NO_IETF_HEADERS")]
    pub no_ietf_headers: bool,
    /// Write logs as JSON lines (for log collectors) instead of text.
    #[arg(long, env = "SLUICEGATE_LOG_JSON")]
    pub log_json: bool,
    /// How often to check the rules for changes, in milliseconds.
    #[arg(long, env = "SLUICEGATE_RELOAD_INTERVAL_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..))]
    pub reload_interval_ms: u64,
}

impl ServeArgs {
    /// The resolved configuration (the second phase after reading flags).
    pub fn to_config(&self) -> ServerConfig {
        ServerConfig {
            rules: self.config.clone(),
            load_options: LoadOptions::default().merge_domains(self.merge_domains),
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            engine: EngineOptions {
                headers: HeaderOptions {
                    ietf: !self.no_ietf_headers,
                    legacy: self.legacy_headers.then(LegacyHeaderNames::default),
                    retry_after: true,
                },
                shadow_mode: self.shadow_mode,
            },
            reload_interval: Duration::from_millis(self.reload_interval_ms),
        }
    }
}
