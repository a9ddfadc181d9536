//! The state a pacing layer's clones and services share, in a leaf module: the layer makes
//! it, the service reads it, and neither imports the other for it.

use std::time::Duration;

use sluicegate::{AnyAlgorithm, Clock, KeyedLimiter};

use crate::pace::hold::Holds;

/// What every clone of a pacing layer and of its services shares: one budget.
pub(crate) struct Pacer<C: Clock> {
    /// Keyed by host (`host:port`), or by the empty string for one budget over all hosts.
    pub(crate) limiter: KeyedLimiter<Box<str>, AnyAlgorithm, C>,
    pub(crate) per_host: bool,
    pub(crate) max_wait: Option<Duration>,
    pub(crate) holds: Holds,
}
