//! What `serve` and the proxy both need around their engines, written once: how Redis is
//! reached behind the failure policy, the admin listener (`/metrics`, the live page, the
//! manual switch) and the modes the switch sets, and the live page's statistics.

mod admin;
mod admin_page;
mod live;
mod modes;
mod redis;

pub use admin::admin_address_allowed;
pub(crate) use admin::{AdminApp, OPENMETRICS_TEXT, admin_router, serve_admin};
pub(crate) use live::{HeavyHitters, LatencyWindow, RuleSeries, RuleStats};
pub use modes::{EVERY_RULE, Mode, ModeError, ModeTable, Modes};
pub use redis::RedisSettings;
pub(crate) use redis::SafeRedis;
