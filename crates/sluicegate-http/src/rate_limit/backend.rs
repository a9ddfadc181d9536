//! Where the limits are decided: the layer's own seam, behind the public one (the core's
//! [`Store`](sluicegate::store::Store)).
//!
//! The layer reads a key and asks its [`Backend`] to decide the request; the backend answers
//! with a [`Verdict`]: each limit's [`Decision`] and what the response headers say about each
//! limit ([`LimitInfo`]). The backends are this workspace's: the memory one (with its fast
//! path, [`Backend::decide_at_once`]), the one over any store, the remote rate limit service,
//! and the proxy's routes (through [`internal`](crate::rate_limit::internal)).

use std::future::Future;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::Held;
use sluicegate::{Admission, CheckError, Decision};
use smallvec::SmallVec;

use crate::rate_limit::error::BackendError;
use crate::ratelimit_fields::{self, LimitInfo, Standing};

/// Decides requests for keys of type `K`, several limits together, all or nothing.
///
/// Internal: the public seam is the core's [`Store`](sluicegate::store::Store), which the
/// layer decides through (see
/// [`RateLimitBuilder::build_with_store`](super::RateLimitBuilder::build_with_store)).
/// This one exists for the fast path, and for deciders that are not stores (a remote service that
/// names its own limits, the proxy's routes); it may change in any release.
///
/// The future is polled once as soon as it is made, with a waker that does nothing: a backend
/// whose answer is ready at once (memory) costs the layer no allocation and no clone of the
/// inner service. A backend that must wait (a network round trip) returns `Pending` and is
/// polled again, properly woken, from a boxed future.
pub trait Backend<K>: Send + Sync + 'static {
    /// The answer to [`decide`](Backend::decide).
    type Future: Future<Output = Result<Verdict, BackendError>> + Send + Unpin + 'static;

    /// Applies `op` (the layer asks [`Op::Check`]) for `permits` to every limit of `key`,
    /// together: a request denied by one limit is charged to none.
    fn decide(&self, key: &K, permits: NonZeroU64, op: Op) -> Self::Future;

    /// Gives back the concurrency permits an allowed decision took for `key` (called once the
    /// response body has ended or been dropped, only for verdicts that
    /// [hold permits](Verdict::holds_permits)); `held` is what the verdict held under a
    /// store's ids (Redis's leases). Called from a destructor: a backend that must do I/O
    /// spawns it.
    fn release(&self, key: &K, permits: NonZeroU64, held: Vec<Held>);

    /// The limits this backend decides, in the order of every verdict's decisions, as the
    /// response fields describe them. A backend that learns them with each answer (a remote
    /// service) returns what it knows here and puts each answer's in its verdict
    /// ([`Verdict::with_limits`]).
    fn limits(&self) -> &Arc<[LimitInfo]>;

    /// Decides here and now if this backend can (memory), saying [`AtOnce::Pass`] for the
    /// usual answer (allowed, no wait, no permit held) so that the layer's fast path builds
    /// and moves no [`Verdict`]. The default answers [`AtOnce::Later`]: the layer then asks
    /// [`decide`](Backend::decide). Only asked when the layer adds no fields to allowed
    /// responses (which need the verdict).
    #[inline]
    fn decide_at_once(&self, key: &K, permits: NonZeroU64, op: Op) -> AtOnce {
        let _ = (key, permits, op);
        AtOnce::Later
    }
}

/// The answer of [`Backend::decide_at_once`].
#[derive(Debug)]
#[non_exhaustive]
pub enum AtOnce {
    /// Allowed (and charged), with no shaping wait and no permit held: passed on as it is.
    Pass,
    /// Decided: anything else, as [`Backend::decide`] would have answered.
    Decided(Result<Verdict, BackendError>),
    /// This backend cannot answer without waiting: ask [`Backend::decide`].
    Later,
}

impl AtOnce {
    /// One limit's answer: [`AtOnce::Pass`] if it passes at once, else its decision.
    #[inline]
    pub fn admitted(admission: Result<Admission, CheckError>) -> AtOnce {
        match admission {
            Ok(Admission::Passed) => AtOnce::Pass,
            Ok(Admission::Decided(decision))
                if decision.allowed() && decision.wait_micros() == 0 =>
            {
                AtOnce::Pass
            }
            Ok(Admission::Decided(decision)) => AtOnce::Decided(Ok(Verdict::single(decision))),
            Err(error) => AtOnce::Decided(Err(error.into())),
        }
    }
}

/// The answer to one request: whether it passes, and each limit's decision (what a
/// [`Rejection::Limited`](crate::rate_limit::Rejection::Limited) shows a rejection hook).
///
/// A clone describes the same decisions but holds nothing: the permits a store keeps under
/// its ids stay with the original, which alone gives them back.
#[derive(Debug)]
#[non_exhaustive]
pub struct Verdict {
    allowed: bool,
    holds_permits: bool,
    /// One limit's decision is kept inline: the common case allocates nothing.
    decisions: SmallVec<[Decision; 1]>,
    /// Set by a backend whose limits vary with each answer, and by the layer before it hands a
    /// verdict to a hook; otherwise the backend's (not copied on the fast path: even an `Arc`
    /// clone is two atomic operations per request).
    limits: Option<Arc<[LimitInfo]>>,
    /// The permits held under a store's ids, for [`Backend::release`].
    held: Vec<Held>,
    /// Renews the leases in `held` until dropped (a store's permits that expire).
    renewing: Option<Renewing>,
}

impl Clone for Verdict {
    fn clone(&self) -> Verdict {
        Verdict {
            allowed: self.allowed,
            holds_permits: false,
            decisions: self.decisions.clone(),
            limits: self.limits.clone(),
            held: Vec::new(),
            renewing: None,
        }
    }
}

/// Renews a request's leases in its store (a task of the runtime) until dropped, which
/// happens when its permits are given back or the verdict holding them is dropped unused.
#[derive(Debug)]
pub(crate) struct Renewing(tokio::task::AbortHandle);

impl Renewing {
    pub(crate) fn new(task: tokio::task::AbortHandle) -> Renewing {
        Renewing(task)
    }
}

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a request holds in a store until its response ends: the store's ids for its permits,
/// and what renews them meanwhile.
#[derive(Debug, Default)]
pub(crate) struct HeldInStore {
    pub(crate) held: Vec<Held>,
    pub(crate) renewing: Option<Renewing>,
}

impl Verdict {
    /// A verdict; `decisions` in the order of the backend's limits.
    #[doc(hidden)]
    pub fn new(allowed: bool, decisions: Vec<Decision>) -> Verdict {
        Verdict {
            allowed,
            holds_permits: false,
            decisions: SmallVec::from_vec(decisions),
            limits: None,
            held: Vec::new(),
            renewing: None,
        }
    }

    /// The verdict of a single limit.
    #[inline]
    pub(crate) fn single(decision: Decision) -> Verdict {
        Verdict {
            allowed: decision.allowed(),
            holds_permits: false,
            decisions: smallvec::smallvec![decision],
            limits: None,
            held: Vec::new(),
            renewing: None,
        }
    }

    /// The same verdict saying the request holds concurrency permits (if it was allowed), to
    /// be [released](Backend::release) when its response ends.
    #[doc(hidden)]
    #[inline]
    pub fn holding_permits(mut self, holds: bool) -> Verdict {
        self.holds_permits = holds && self.allowed;
        self
    }

    /// The same verdict holding `held`: permits a store keeps under its own ids (Redis's
    /// leases), handed back to [`Backend::release`].
    pub(crate) fn with_held(mut self, held: Vec<Held>) -> Verdict {
        self.held = held;
        self
    }

    /// The permits held under a store's ids.
    pub(crate) fn held(&self) -> &[Held] {
        &self.held
    }

    /// The same verdict with its leases renewed by `renewing` while it (or what
    /// [takes](Self::take_held) them) lives.
    pub(crate) fn renewed_by(mut self, renewing: Renewing) -> Verdict {
        self.renewing = Some(renewing);
        self
    }

    /// Takes the permits held under a store's ids, to release later, with what renews them.
    pub(crate) fn take_held(&mut self) -> HeldInStore {
        HeldInStore {
            held: std::mem::take(&mut self.held),
            renewing: self.renewing.take(),
        }
    }

    /// The same verdict describing its own limits rather than the backend's.
    #[doc(hidden)]
    pub fn with_limits(mut self, limits: Arc<[LimitInfo]>) -> Verdict {
        self.limits = Some(limits);
        self
    }

    /// Every limit allowed the request (and each was charged).
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Each limit's decision, in the order of [`limits`](Self::limits).
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// What each limit is (empty if neither the backend nor the layer has said yet).
    pub fn limits(&self) -> &[LimitInfo] {
        self.limits.as_deref().unwrap_or_default()
    }

    /// Whether the request passes at once with nothing added to its response: allowed,
    /// holding no permit, with no shaping wait (the layer's fast path).
    #[doc(hidden)]
    #[inline]
    pub fn passes_plainly(&self) -> bool {
        self.allowed && !self.holds_permits && self.decisions.iter().all(|d| d.wait_micros() == 0)
    }

    /// Describes the limits with the backend's, unless the verdict has its own.
    pub(crate) fn describe_with(&mut self, limits: &Arc<[LimitInfo]>) {
        if self.limits.is_none() {
            self.limits = Some(Arc::clone(limits));
        }
    }

    /// How long an allowed request waits before it is passed on: the longest shaping wait of
    /// its limits (a `leaky-queue` without `nodelay`), as nginx waits for the longest delay of
    /// several `limit_req`.
    #[inline]
    pub fn wait(&self) -> Duration {
        // One limit, the usual case: no iterator.
        if let [only] = &*self.decisions {
            return Duration::from_micros(only.wait_micros());
        }
        let longest = self.decisions.iter().map(Decision::wait_micros).max();
        Duration::from_micros(longest.unwrap_or(0))
    }

    /// Whether the request took concurrency permits that must be given back when its response
    /// ends.
    #[inline]
    pub fn holds_permits(&self) -> bool {
        self.holds_permits
    }

    /// The limit the fields describe, by [the one rule](crate::ratelimit_fields::tightest).
    pub fn tightest(&self) -> Option<(&Decision, &LimitInfo)> {
        self.tightest_standing()
            .map(|((decision, limit), _)| (decision, limit))
    }

    /// The limit the fields describe, with its standing.
    pub(crate) fn tightest_standing(&self) -> Option<((&Decision, &LimitInfo), Standing)> {
        ratelimit_fields::tightest(self.decisions.iter().zip(self.limits()), |(d, l)| {
            standing(d, l)
        })
    }
}

/// What the fields say of `limit` after `decision`.
fn standing(decision: &Decision, limit: &LimitInfo) -> Standing {
    Standing {
        denied: !decision.allowed(),
        remaining: decision.remaining(),
        reset_micros: (!limit.is_concurrency()).then(|| decision.reset_after_micros()),
        retry_micros: decision.retry_after_micros(),
    }
}
