//! What `serve` and the proxy both need around their engines, written once: how Redis is
//! reached behind the failure policy, the admin listener (`/metrics`, the live page, the
//! manual switch) and the modes the switch sets, the live page's statistics and the typed
//! `/admin/stats` answer both fill, the axum listeners with a bound on a request head's
//! time, the rule-file watcher, TLS at a listener, and the worker threads that serve
//! connections each on a runtime of its own.

mod admin;
mod admin_page;
mod body_timeout;
mod branch_wakers;
mod client_idle;
mod connection_end;
mod h2_stall;
mod lease_metrics;
mod listener;
mod live;
mod loads;
mod modes;
mod over_limit_metrics;
mod redis;
mod rule_watcher;
mod stats;
mod tls;
mod workers;

pub use admin::admin_address_allowed;
pub(crate) use admin::{AdminApp, OPENMETRICS_TEXT, admin_router, serve_admin};
pub(crate) use body_timeout::{BodyWithTimeout, TimedBodyError};
pub(crate) use client_idle::{OpenBody, Requests};
pub(crate) use connection_end::{
    Builders, Ended, Protocol, bounded, protocol_told, serve_until_ended, unless_stopped,
};
pub(crate) use h2_stall::Stalls;
pub(crate) use lease_metrics::LeaseMetrics;
pub(crate) use listener::{ClientTimeouts, accept_next, serve_router};
pub(crate) use live::{HeavyHitters, LatencyWindow, RuleSeries, RuleStats};
pub(crate) use loads::{Counted, Loads};
pub use modes::{EVERY_RULE, Mode, ModeError, ModeTable, Modes};
pub(crate) use over_limit_metrics::OverLimitMetrics;
pub use redis::RedisSettings;
pub(crate) use redis::SafeRedis;
pub(crate) use rule_watcher::RuleWatcher;
pub(crate) use stats::{
    AdminStats, BackendStats, KeyCount, LATENCY_QUANTILES, LatencyPercentiles, LimitedKey,
    ModeChanged, Reloads, RuleEntry,
};
pub(crate) use tls::tls_acceptor;
pub use tls::{TlsError, TlsFiles};
pub(crate) use workers::{WorkerServer, Workers, finish_within, start_workers, start_workers_on};
