//! Sluicegate's limiters shared through Redis: the core crate's algorithms run atomically in
//! Redis in at most one Lua call per decision (a Redis Function, or a script on Redis 6; under
//! load, one call decides many), with the same decisions as in memory.
//!
//! - Times are integer microseconds, exactly as in the core crate; the script keeps every
//!   number an exact integer below 2^53 (see `lua/prelude.lua`), so a trace run in memory and
//!   in Redis gives identical [`Decision`](sluicegate::Decision)s.
//! - Time is Redis's own clock ([`Now::Store`](sluicegate::store::Now::Store)) by default, or
//!   given ([`Now::At`](sluicegate::store::Now::At)).
//! - Keys are `PREFIX{KEY}NAME`: the key is the Cluster hash tag, so several limits on one
//!   key are checked together in one call ([`RedisStore::decide_all`]), all or nothing. Every
//!   key expires when its state is fresh again.
//! - [`RateLimiterObject`] is a Redisson-style `RRateLimiter` (`try_set_rate`, `set_rate`,
//!   `try_acquire`, `acquire`, `available_permits`, `get_config`).
//! - [`RedisStore`] is a store of the core's backend seam ([`sluicegate::store::Store`]):
//!   a call's limits in one script call.
//! - Every call is bounded by a timeout; [`FailSafe`] wraps any store of the seam with a
//!   local fallback and applies a [`FailurePolicy`] (with a circuit breaker) when it fails.
//! - An over-limit cache ([`StoreConfig::over_limit_cache`], off by default) answers a key
//!   Redis denied until its retry time in the process, with Redis's own decision, where that
//!   is exact ([`sluicegate::over_limit`]): it only ever repeats denials.
//! - Permit leasing ([`StoreConfig::leasing`], off by default) takes a batch of a hot key's
//!   permits from Redis in one call and grants them in the process, never beyond the limit
//!   ([`sluicegate::lease`]).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod compact;
mod connection;
mod decide;
mod error;
mod failure;
mod keys;
mod lazy;
mod lease;
mod lease_calls;
mod leasing;
mod limit;
mod limiter;
mod over_limit;
mod redisson;
mod reply;
mod report;
mod scripts;
mod sightings;
mod stamp;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use decide::NamedLimit;
pub use error::RedisLimitError;
pub use failure::{
    FAILURES_TO_OPEN, FailSafe, FailSafeError, FailSafeEvent, FailSafeLimit, FailSafeWithDeadline,
    Failure, FailurePolicy,
};
pub use lazy::{LazyStore, LazyStoreError, RedisTarget};
pub use lease::Lease;
pub use leasing::{LeaseConfig, LeaseStats};
pub use limit::{MAX_REDIS_TOLERANCE, RedisLimit};
pub use limiter::RedisLimiter;
pub use over_limit::OverLimitStats;
pub use redisson::{RateConfig, RateLimiterObject, RateType};
pub use reply::{LimitRequest, RedisMultiDecision};
pub use report::{FAILURE_LABELS, LogThrottle, log_failures};
pub use store::{RedisStore, ScriptMode, StoreConfig};
