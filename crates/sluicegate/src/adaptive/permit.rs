//! The permit an adaptive limiter grants: a place in flight that reports how its request went.

use std::fmt;
use std::sync::Arc;

use crate::adaptive::partition::PartitionId;
use crate::adaptive::sample::Outcome;
use crate::clock::Micros;

/// What a limiter needs back from a permit when it ends.
pub(crate) trait Release: Send + Sync {
    /// Gives the place back and, with an outcome, feeds the controller the permit's sample.
    fn release(self: Arc<Self>, held: &Held, outcome: Option<Outcome>);
}

/// What a permit knows about itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// When it was granted, on the limiter's clock.
    pub(crate) start: Micros,
    /// Permits in flight once it was granted, itself included.
    pub(crate) in_flight: u32,
    /// Its partition's index in the limiter.
    pub(crate) partition: usize,
}

/// A place in flight on an [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter).
///
/// Complete it with how its request went ([`success`](Self::success),
/// [`dropped`](Self::dropped), [`timeout`](Self::timeout)): the limiter measures its latency
/// on its clock and feeds the controller the sample. A permit dropped without being completed
/// counts as [`Outcome::Dropped`]: work that was abandoned half way (a cancelled future, a
/// panic) is as likely a sign of overload as a rejection. [`ignore`](Self::ignore) gives the
/// place back without a sample, for a request whose latency says nothing about the service.
///
/// It owns a share of its limiter, so it can move into a spawned task.
#[must_use = "a permit dropped at once counts as a dropped request"]
pub struct Permit {
    owner: Arc<dyn Release>,
    held: Held,
    armed: bool,
}

impl Permit {
    pub(crate) fn new(owner: Arc<dyn Release>, held: Held) -> Permit {
        Permit {
            owner,
            held,
            armed: true,
        }
    }

    /// The request was answered.
    pub fn success(self) {
        self.finish(Some(Outcome::Ok));
    }

    /// The request failed in a way that signals overload.
    pub fn dropped(self) {
        self.finish(Some(Outcome::Dropped));
    }

    /// The request took longer than its caller would wait.
    pub fn timeout(self) {
        self.finish(Some(Outcome::Timeout));
    }

    /// The request ended with `outcome`.
    pub fn complete(self, outcome: Outcome) {
        self.finish(Some(outcome));
    }

    /// Gives the place back without a sample (Netflix's `onIgnore`): for requests that did not
    /// test the service, such as one refused by validation before any work.
    pub fn ignore(self) {
        self.finish(None);
    }

    /// When the permit was granted, on the limiter's clock.
    pub fn start(&self) -> Micros {
        self.held.start
    }

    /// Permits in flight once this one was granted, itself included.
    pub fn in_flight_at_start(&self) -> u32 {
        self.held.in_flight
    }

    /// The partition the permit counts against.
    pub fn partition(&self) -> PartitionId {
        PartitionId(self.held.partition)
    }

    fn finish(mut self, outcome: Option<Outcome>) {
        self.armed = false;
        Arc::clone(&self.owner).release(&self.held, outcome);
    }

    /// Turns the permit back into what it held without releasing anything: for a grant that
    /// could not be delivered, undone by the limiter itself under its lock.
    #[cfg(feature = "tokio")]
    pub(crate) fn disarm(mut self) -> Held {
        self.armed = false;
        self.held
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            Arc::clone(&self.owner).release(&self.held, Some(Outcome::Dropped));
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("start", &self.held.start)
            .field("in_flight_at_start", &self.held.in_flight)
            .field("partition", &self.held.partition)
            .finish_non_exhaustive()
    }
}
