//! HTTP middleware on Sluicegate's rate limiting algorithms.
//!
//! [`rate_limit::RateLimitLayer`] is a tower layer for axum, hyper and tonic.

pub mod rate_limit;

pub use rate_limit::{RateLimit, RateLimitLayer};
