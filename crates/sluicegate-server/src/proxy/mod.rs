//! `sluicegate proxy`: a reverse proxy that rate limits requests before they reach any HTTP
//! upstream, as nginx's `limit_req` and `limit_conn` do, on Sluicegate's algorithms.
//!
//! Clients connect over HTTP/1.1 or h2 (prior knowledge); requests are passed to the upstream
//! over pooled keep-alive HTTP/1.1 connections with their bodies streamed both ways,
//! hop-by-hop fields dropped, and the peer's address appended to `X-Forwarded-For` and
//! `Forwarded` (or those of them [`ProxyConfig::forwarding_fields`] names). An upstream that
//! refuses the connection is answered 502, one that does not answer in time 504, each with a
//! text body saying so.
//!
//! The [rule file](Rules) names limits (each a key made of parts, as Envoy's `rate_limits`
//! actions make descriptors, and a spec of the core: `leaky-queue:rate=10/s,burst=20,nodelay`,
//! `concurrency:limit=10`) and routes (an exact path or a prefix, the limits applied, the
//! denial status, dry run). A route's limits are decided together, all or nothing, each on its
//! own key, through the [`RateLimitLayer`](sluicegate_http::rate_limit::RateLimitLayer). The file is
//! re-read when it changes; one that does not load is logged with its `file:line:column`
//! errors and the rules in force stay. docs/proxy.md has the format and the table of nginx
//! directives and their equivalents.
//!
//! Metrics (`/metrics` on the admin address): `sluicegate_proxy_requests_total{route,outcome}`
//! (outcome `allowed`, `delayed`, `limited`, `dry_run`),
//! `sluicegate_proxy_upstream_errors_total{kind}`, `sluicegate_proxy_reloads_total{result}`,
//! `sluicegate_proxy_connections{worker}` (client connections served, lingering ones left out).

mod admin;
pub(crate) mod client_body;
mod connection;
mod cpu_yield;
mod error;
mod forward;
mod guards;
mod hop_by_hop;
mod key;
mod limit_counters;
mod limiter;
mod lingering;
mod live;
mod metrics;
mod redis_counters;
mod redis_route;
mod request_body;
pub(crate) mod rewrite;
mod route_decider;
mod rules;
mod send_deadline;
mod server;
mod switch;
mod table;
mod upstream;

pub use crate::plumbing::{RedisSettings, TlsError, TlsFiles};
pub use error::{ProxyError, RuleFileError, RuleProblem};
pub use forward::UpstreamBody;
pub use key::{KeyBytes, KeyPart, OnMissingKey, RouteKeys};
pub use limit_counters::check_rule_file;
pub use rewrite::ForwardingFields;
pub use rules::{
    AdaptiveDef, BackendChoice, DEFAULT_LIMIT_KEYS, LimitDef, PathMatch, PathRules, RouteDef, Rules,
};
pub use server::{Proxy, ProxyConfig, start};
pub use table::{ProxyBody, RouteBody};
pub use upstream::{
    PooledBody, UnknownUpstreamProtocol, UpstreamError, UpstreamProtocol, UpstreamTlsError,
};
