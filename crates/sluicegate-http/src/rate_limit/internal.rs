//! The layer's own seam, for this workspace's deciders that are not stores (the `sluicegate`
//! binary's proxy routes, which decide each limit on a key of its own).
//!
//! Not part of the public API: it may change in any release. To decide in storage of your
//! own, implement the core's [`Store`](sluicegate::store::Store) and build the layer with
//! [`RateLimitBuilder::build_with_store`](super::RateLimitBuilder::build_with_store).

use crate::rate_limit::KeyError;
use crate::rate_limit::key::normal::PathError;

pub use crate::rate_limit::backend::{AtOnce, Backend};

/// The error of `path`, which has no normal form (the path cut to 64 characters), for an
/// extractor that reads the path itself.
pub fn bad_path(path: &str, reason: PathError) -> KeyError {
    KeyError::bad_path(path, reason)
}
