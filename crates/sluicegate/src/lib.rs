//! Sluicegate: exact, fast rate limiting algorithms.
//!
//! Every algorithm is a pure state machine ([`Algorithm`]): a function of its parameters, the
//! previous state, the current time and the permits asked for, returning a [`Decision`] and
//! the next state. Limiters ([`DirectLimiter`], [`KeyedLimiter`]) hold the state, read a
//! [`Clock`] and apply the algorithm atomically; the same algorithms run in Redis in the
//! `sluicegate-redis` crate, with the same answers.
//!
//! Times are integer microseconds ([`Micros`]); rates are exact fractions ([`Rate`]), so a limit
//! of 3 per second admits exactly 3 per second, forever, with no rounding drift.
//!
//! The root holds what a limiter's user needs: the limiters, the algorithms ([`AnyAlgorithm`]
//! is any of them, read from a spec such as `gcra:rate=10/s,burst=20`), [`Decision`],
//! [`Rate`], the errors and the clocks. The modules hold the rest: [`limiter`] (several limits
//! decided together, key budgets), [`rate`] (durations and ticks), [`spec`] (specs as text),
//! [`state_machine`] and [`state`] (for a store of one's own), [`store`] (the seam the HTTP
//! layer and the service decide through), [`adaptive`] (adaptive concurrency limits).
//!
//! ```
//! use sluicegate::{Gcra, KeyedLimiter, Rate};
//!
//! // 10 requests per second per user, in bursts of up to 20.
//! let limiter = KeyedLimiter::new(Gcra::new(Rate::per_second(10)?, 20)?);
//! let decision = limiter.check(&"user-42")?;
//! assert!(decision.allowed());
//! assert_eq!(decision.remaining(), 19);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod algorithm;
mod cell;
pub mod clock;
mod decision;
mod error;
pub mod lease;
pub mod limiter;
pub mod over_limit;
pub mod rate;
pub mod spec;
pub mod state_machine;
pub mod store;
#[cfg(feature = "stream")]
pub mod stream;

pub use algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, LeakyQueue, QueueDelay, SlidingLog, SlidingWindow,
    SmoothBursty, SmoothWarmup, TokenBucket,
};

/// What each algorithm keeps per key, and the cells limiters keep it in: for those who write
/// a store of their own around [`Algorithm::decide`]. Using a limiter needs none of it.
pub mod state {
    pub use crate::algorithm::{
        ConcurrencyState, FixedWindowState, LeakyBucketState, SlidingLogState, SlidingWindowState,
        SmoothState, Tat, TokenBucketState,
    };
    pub use crate::cell::{LockedCell, StateCell, WordCell};
    pub use crate::spec::any::AnyState;
}
pub use clock::{Clock, ManualClock, Micros, SystemClock};
pub use decision::{Admission, Decision};
pub use error::{CheckError, ConfigError};
pub use limiter::{
    ConcurrencyPermit, DirectLimiter, KeyedConcurrencyPermit, KeyedLimiter, OwnedConcurrencyPermit,
};
pub use rate::Rate;
pub use spec::AnyAlgorithm;
pub use state_machine::Algorithm;
