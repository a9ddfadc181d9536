//! The clocks the process answers on between calls to Redis (the over-limit cache, leases):
//! the times callers give, or this process's monotonic clock for calls on Redis's clock.

use std::time::Instant;

use sluicegate::Micros;
use sluicegate::store::Now;

/// Which clock a time is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeline {
    /// The times callers give ([`Now::At`]).
    Given,
    /// This process's monotonic clock, for calls on Redis's clock ([`Now::Store`]).
    Local,
}

/// A call's time on those clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) timeline: Timeline,
    pub(crate) at: Micros,
}

/// Stamps calls: the local clock starts when it is made.
#[derive(Debug)]
pub(crate) struct Stamper {
    origin: Instant,
}

impl Stamper {
    pub(crate) fn new() -> Stamper {
        Stamper {
            origin: Instant::now(),
        }
    }

    /// A call's time: the one given, or now on the local clock.
    pub(crate) fn stamp(&self, now: Now) -> Stamp {
        match now {
            Now::At(at) => Stamp {
                timeline: Timeline::Given,
                at,
            },
            Now::Store => Stamp {
                timeline: Timeline::Local,
                at: u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(Micros::MAX),
            },
        }
    }
}
