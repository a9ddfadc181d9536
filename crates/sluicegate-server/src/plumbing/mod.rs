//! What `serve` and the proxy both need around their engines, written once: how Redis is
//! reached behind the failure policy.

mod redis;

pub use redis::RedisSettings;
pub(crate) use redis::SafeRedis;
