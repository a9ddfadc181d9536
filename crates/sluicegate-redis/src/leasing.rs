//! Permit leasing of a [`RedisStore`](crate::RedisStore) (off unless
//! [`StoreConfig::leasing`](crate::StoreConfig::leasing) is set): a hot call shape (the limits
//! and keys a call names) takes a batch of permits from Redis in one script call (`lease.lua`)
//! and grants them in the process, one request at a time, by the core's rules
//! ([`sluicegate::lease`]).
//!
//! - One lease per call shape, the call's limits leased together: each local grant spends its
//!   permits of every limit of the lease at once, so multi-limit calls stay all or nothing.
//!   Only checks ([`Op::Check`](sluicegate::state_machine::Op::Check)) of calls whose limits
//!   all lease, and that ask the same permits of each, are leased; everything else takes the
//!   plain path.
//! - Sized by the shape's local rate ([`LeaseSizing`]): a cold shape asks Redis every time.
//!   Once a lease is below half its permits, the next request asks Redis for the next lease
//!   (taken ahead: granted from once the one in hand is done), while the others keep being
//!   granted from the one in hand. While one task asks Redis for a shape's lease, the shape's
//!   requests the lease in hand cannot serve take the plain path (no herd of leases). A shape
//!   whose request Redis denied takes the plain path until that request could pass again.
//! - A request that asks ahead is decided by Redis, which counts the lease in hand as spent:
//!   it is told this process's view (that lease's rest added to `remaining`), and if Redis
//!   denies it while that lease still serves it, it is granted from that lease.
//! - A lease ends at its end (Redis's time, on the caller's clock for given times, or on this
//!   process's monotonic clock from when the call was sent for Redis's clock: it ends no later
//!   than Redis's end), when its permits run out, or when the limits change (a rule reload).
//!   A window's unused permits are given back with the shape's next lease call (one call
//!   gives back any number of leases), by
//!   [`RedisStore::return_leases`](crate::RedisStore::return_leases) (shutdown), or, for a
//!   shape gone idle, by the next call of any shape that asks Redis (at most once per lease
//!   life: that call first sends the ended leases of windows back, one script call each, so
//!   it pays their round trips); Redis takes back what is exact to take back (see the core's
//!   docs), the rest is spent. A bucket's are spent at once: a bucket takes nothing back.
//! - What a local grant reports: `allowed`, the limit, `remaining` from this process's view
//!   (what Redis reported left when the lease was taken, less what the process granted from it
//!   since: an estimate, which other processes' grants make optimistic), and `reset_after`
//!   counting down from Redis's answer at the lease.
//! - A shape is followed from its second request on one thread within a lease life (a table
//!   of 4 096 slots by hash per thread, each holding the last shape's fingerprint and time,
//!   read before the shapes' lock: see [`crate::sightings`]): the keys of a wide key space,
//!   each seen once in a while, take the plain path without churning the shapes, and without
//!   the lock while the process holds no leased permits. A thread that sees only first
//!   sightings then sights one call in eight, the others taking the plain path unhashed.
//! - Bounded: at most `max_shapes` shapes are followed; at the cap, shapes unseen for a
//!   second whose leases have all ended are dropped (a scan at most once a second; what they
//!   held unused is spent), and new shapes take the plain path until there is room. Leases
//!   done but not yet given back count against `max_per_process` like those in hand.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sluicegate::lease::{LeaseKind, LeaseSizing, LeaseTerms, LocalRate, lease_kind};
use sluicegate::store::Now;
use sluicegate::{ConfigError, Decision, Micros};

use crate::limit::RedisLimit;
use crate::reply::LimitRequest;
use crate::sightings::Sightings;
use crate::stamp::{Stamp, Stamper, Timeline};

/// How a [`RedisStore`](crate::RedisStore) leases permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease life, size and caps.
    pub sizing: LeaseSizing,
    /// The most call shapes whose rate is followed (default 10 000): each takes a few
    /// hundred bytes plus its keys.
    pub max_shapes: usize,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            sizing: LeaseSizing::default(),
            max_shapes: 10_000,
        }
    }
}

impl LeaseConfig {
    /// Checks the sizing (see [`LeaseSizing::validated`]) and a cap of at least one shape.
    pub fn validated(self) -> Result<LeaseConfig, ConfigError> {
        if self.max_shapes == 0 {
            return Err(ConfigError::InvalidParameter {
                name: "max_shapes",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(LeaseConfig {
            sizing: self.sizing.validated()?,
            ..self
        })
    }
}

/// What a store's leasing has done since the store was made (all zero without leasing).
/// Reading them walks the shapes followed (at most `max_shapes`) under the leases' lock: for
/// metrics and pages, not for every request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Leases taken.
    pub leases_taken: u64,
    /// Permits leased, beyond the requests that took the leases.
    pub permits_leased: u64,
    /// Calls answered from a lease without asking Redis: round trips saved.
    pub local_grants: u64,
    /// Calls of the lease script (each takes a lease, or decides a hot shape's request
    /// without one at a cap, or gives leases back).
    pub lease_calls: u64,
    /// Unused permits Redis took back.
    pub permits_returned: u64,
    /// Unused permits not taken back (spent: they come back by time alone).
    pub permits_expired_unused: u64,
    /// Leased permits held unused now: in the leases in hand and in those done, waiting to
    /// go back.
    pub permits_held: u64,
    /// Call shapes followed now.
    pub shapes: usize,
}

/// A lease in hand.
#[derive(Debug, Clone)]
struct Held {
    /// As Redis counts it (Redis's times).
    terms: LeaseTerms,
    left: u64,
    /// Granted from on `[from, until)` of the shapes' timeline.
    from: Micros,
    until: Micros,
    /// Redis's time minus the timeline's, at the lease: a grant's time reported is then
    /// within the lease's, `[taken_at, end)`.
    offset: Micros,
}

impl Held {
    /// Whether it can grant `n` permits at `at`.
    fn serves(&self, at: Micros, n: u64) -> bool {
        self.from <= at && at < self.until && self.left >= n
    }

    /// Whether it can grant nothing more from `at` on: ended, or empty.
    fn is_done(&self, at: Micros) -> bool {
        at >= self.until || self.left == 0
    }
}

#[derive(Debug)]
struct Shape {
    /// Each limit's name and key, as the calls give them (the shapes are found by their hash).
    ids: Vec<LimitId>,
    limits: Vec<RedisLimit>,
    /// Names this shape with these limits, unique in the store (a new one when the limits
    /// change): a lease asked for under another is not kept.
    generation: u64,
    rate: LocalRate,
    last_seen: Micros,
    asking: bool,
    /// The lease granted from.
    lease: Option<Held>,
    /// The lease taken ahead, while `lease` ran low: granted from when `lease` is done.
    next: Option<Held>,
    /// Leases done with unused permits, to give back with the shape's next lease call.
    pending: Vec<(LeaseTerms, u64)>,
    /// No lease is asked for before this: a lease call failed (while Redis is away, the lease
    /// in hand serves every request it can), or Redis denied the shape's request (until it
    /// could pass again, the shape's requests take the plain path, whose calls are batched:
    /// a lease call per request would only cost Redis more).
    ahead_from: Micros,
    /// Per limit, as of Redis's last grant of a lease call, less the grants from leases since:
    /// the limit, what is left from this process's view (its leased permits included), when
    /// the state is fresh (on the timeline).
    views: Vec<(u64, u64, Micros)>,
    /// Requests granted from the shape's leases (counted here, under the lock, rather than in
    /// a counter every core writes).
    local_grants: u64,
}

impl Shape {
    /// Whether `requests` name this shape's limits and keys.
    fn is_of(&self, requests: &[LimitRequest<'_>]) -> bool {
        self.ids.len() == requests.len()
            && self
                .ids
                .iter()
                .zip(requests)
                .all(|((name, key), r)| **name == *r.name && **key == *r.key)
    }

    /// Leased permits the shape holds unused: in its leases in hand and in those done, to
    /// give back.
    fn unused(&self) -> u64 {
        let in_hand: u64 = [&self.lease, &self.next]
            .into_iter()
            .flatten()
            .map(|held| held.left)
            .sum();
        in_hand + unused_of(&self.pending)
    }
}

#[derive(Debug)]
struct Shapes {
    timeline: Timeline,
    /// By the hash of their keys ([`Leasing::hash_of`]); two shapes of one hash are rare
    /// enough that the second one takes the plain path.
    by_hash: HashMap<u64, Shape, foldhash::fast::RandomState>,
    last_sweep: Option<Micros>,
    /// When the ended leases were last handed out for return.
    last_return: Option<Micros>,
    /// The latest time a call was stamped with.
    latest: Micros,
    /// Local grants of the shapes no longer followed.
    dropped_local_grants: u64,
    /// The generations given out so far.
    generations: u64,
}

/// A limit's name and key, as a call gives them.
pub(crate) type LimitId = (Box<str>, Box<[u8]>);

/// What a call does with its shape's lease.
pub(crate) enum Plan<'a> {
    /// Granted from the lease: each limit's decision, and the time to report.
    Granted(Vec<Decision>, Micros),
    /// Ask Redis for a lease (and give back the last one's unused permits).
    Ask(Asking<'a>),
    /// The plain path.
    Plain,
}

/// A lease call in flight: the shape's `asking` flag is cleared when it is learned or
/// dropped (a call cancelled by its caller).
pub(crate) struct Asking<'a> {
    leasing: &'a Leasing,
    hash: u64,
    /// The shape's generation when asked.
    generation: u64,
    stamp: Stamp,
    /// Permits to lease beyond the request.
    pub(crate) want: u64,
    /// The request's permits (of each limit).
    permits: u64,
    /// The leases done to give back first, and their unused permits.
    pub(crate) give_back: Vec<(LeaseTerms, u64)>,
    learned: bool,
}

/// Redis's answer to a lease call.
#[derive(Debug, Clone)]
pub(crate) struct LeaseReply {
    pub(crate) now: Micros,
    pub(crate) leased: u64,
    pub(crate) end: Micros,
    pub(crate) given_back: u64,
    pub(crate) decisions: Vec<Decision>,
}

/// A shape's leases to give back, with its limits and keys.
#[derive(Debug, Clone)]
pub(crate) struct Returning {
    /// Each limit's name and key.
    pub(crate) ids: Vec<LimitId>,
    pub(crate) limits: Vec<RedisLimit>,
    /// Each lease and its unused permits.
    pub(crate) leases: Vec<(LeaseTerms, u64)>,
}

/// Whether Redis can take back a lease of `limits`: only if they are all windows (a bucket
/// takes nothing back, see the core's `lease::give_back`).
fn gives_back(limits: &[RedisLimit]) -> bool {
    limits.iter().all(|limit| {
        matches!(
            lease_kind(limit.algorithm()),
            Some(LeaseKind::FixedWindow | LeaseKind::SlidingWindow)
        )
    })
}

/// The lease taken ahead becomes the one granted from, if that one is gone.
fn promote_next(shape: &mut Shape) {
    if shape.lease.is_none() {
        shape.lease = shape.next.take();
    }
}

/// The unused permits of leases to give back.
pub(crate) fn unused_of(leases: &[(LeaseTerms, u64)]) -> u64 {
    leases.iter().map(|&(_, unused)| unused).sum()
}

/// How often, at most, the shapes are scanned for idle ones at the cap.
const SWEEP_EVERY: Micros = 1_000_000;

/// A store's leases, shared by its clones.
#[derive(Debug)]
pub(crate) struct Leasing {
    config: LeaseConfig,
    stamper: Stamper,
    /// Leased permits reserved: the whole of each lease in hand (what was granted from it is
    /// released when it is done, so that a local grant writes no counter every core shares),
    /// and the unused permits of those done, until they go back or are spent.
    held: AtomicU64,
    leases_taken: AtomicU64,
    permits_leased: AtomicU64,
    lease_calls: AtomicU64,
    permits_returned: AtomicU64,
    permits_expired: AtomicU64,
    /// Hashes the keys of a call's shape.
    hasher: foldhash::fast::RandomState,
    /// When shapes were last seen, by their hash.
    sightings: Sightings,
    shapes: Mutex<Shapes>,
}

impl Leasing {
    pub(crate) fn new(config: LeaseConfig) -> Leasing {
        Leasing {
            config,
            stamper: Stamper::new(),
            held: AtomicU64::new(0),
            leases_taken: AtomicU64::new(0),
            permits_leased: AtomicU64::new(0),
            lease_calls: AtomicU64::new(0),
            permits_returned: AtomicU64::new(0),
            permits_expired: AtomicU64::new(0),
            hasher: foldhash::fast::RandomState::default(),
            sightings: Sightings::new(config.sizing.life),
            shapes: Mutex::new(Shapes {
                timeline: Timeline::Given,
                by_hash: HashMap::default(),
                last_sweep: None,
                last_return: None,
                latest: 0,
                dropped_local_grants: 0,
                generations: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shapes> {
        // Each change to the shapes is whole: a panic elsewhere leaves them consistent.
        self.shapes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease's life.
    pub(crate) fn life(&self) -> Micros {
        self.config.sizing.life
    }

    pub(crate) fn stamp(&self, now: Now) -> Stamp {
        self.stamper.stamp(now)
    }

    /// `stamp` on the local clock read again now; a given time as it was given.
    fn restamp(&self, stamp: Stamp) -> Stamp {
        match stamp.timeline {
            Timeline::Given => stamp,
            Timeline::Local => self.stamper.stamp(Now::Store),
        }
    }

    /// Whether any leased permits are held (and so may be due back).
    pub(crate) fn holds_any(&self) -> bool {
        self.held.load(Ordering::Relaxed) != 0
    }

    /// Whether a call may take the plain path at once, neither stamped nor sighted: nothing
    /// is held, and this thread sees a cold key space ([`crate::sightings::skips_this_call`]).
    pub(crate) fn skips_cold_call(&self) -> bool {
        !self.holds_any() && crate::sightings::skips_this_call()
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        let shapes = self.lock();
        let followed = shapes.by_hash.values();
        LeaseStats {
            leases_taken: self.leases_taken.load(Ordering::Relaxed),
            permits_leased: self.permits_leased.load(Ordering::Relaxed),
            local_grants: shapes.dropped_local_grants
                + followed
                    .clone()
                    .map(|shape| shape.local_grants)
                    .sum::<u64>(),
            lease_calls: self.lease_calls.load(Ordering::Relaxed),
            permits_returned: self.permits_returned.load(Ordering::Relaxed),
            permits_expired_unused: self.permits_expired.load(Ordering::Relaxed),
            permits_held: followed.map(Shape::unused).sum(),
            shapes: shapes.by_hash.len(),
        }
    }

    /// The permits every limit of the call asks, if the call can lease at all.
    fn leasable(requests: &[LimitRequest<'_>]) -> Option<NonZeroU64> {
        let first = requests.first()?;
        requests
            .iter()
            .all(|r| r.permits == first.permits && lease_kind(r.limit.algorithm()).is_some())
            .then_some(first.permits)
    }

    /// What a check of `requests` does at `stamp`.
    pub(crate) fn plan<'a>(&'a self, requests: &[LimitRequest<'_>], stamp: Stamp) -> Plan<'a> {
        let Some(permits) = Self::leasable(requests) else {
            return Plan::Plain;
        };
        let n = permits.get();
        let hash = self.hash_of(requests);
        // A shape is followed from its second request on a thread within a lease life: most
        // keys of a wide key space are seen once in a while, and would only churn the table.
        // While the process holds no leased permits, such a shape takes the plain path without
        // the lock (a followed shape idle for a lease life holds none either, once its ended
        // leases have been handed out: see `to_return`).
        let seen_again = self.sightings.seen_again(hash, stamp.at);
        if !seen_again && self.held.load(Ordering::Relaxed) == 0 {
            return Plan::Plain;
        }
        let mut shapes = self.lock();
        // Read again under the lock: a grant is judged at the time it is made.
        let stamp = self.restamp(stamp);
        if shapes.timeline != stamp.timeline {
            self.drop_all(&mut shapes);
            shapes.timeline = stamp.timeline;
        }
        shapes.latest = shapes.latest.max(stamp.at);
        if !shapes.by_hash.contains_key(&hash) {
            if !seen_again {
                return Plan::Plain;
            }
            if shapes.by_hash.len() >= self.config.max_shapes {
                self.sweep(&mut shapes, stamp.at);
                if shapes.by_hash.len() >= self.config.max_shapes {
                    return Plan::Plain;
                }
            }
            shapes.generations += 1;
            let generation = shapes.generations;
            shapes.by_hash.insert(
                hash,
                Shape {
                    ids: requests
                        .iter()
                        .map(|r| (r.name.into(), r.key.into()))
                        .collect(),
                    limits: requests.iter().map(|r| r.limit.clone()).collect(),
                    generation,
                    rate: LocalRate::default(),
                    last_seen: stamp.at,
                    asking: false,
                    lease: None,
                    next: None,
                    pending: Vec::new(),
                    ahead_from: 0,
                    views: Vec::new(),
                    local_grants: 0,
                },
            );
        }
        let Shapes {
            by_hash,
            generations,
            ..
        } = &mut *shapes;
        let Some(shape) = by_hash.get_mut(&hash).filter(|shape| shape.is_of(requests)) else {
            return Plan::Plain;
        };
        if !shape.limits.iter().eq(requests.iter().map(|r| r.limit)) {
            // New parameters (a rule reload): the old leases are spent, the rate starts over,
            // and a lease call in flight is answered under the old ones (not kept).
            self.drop_leases(shape);
            shape.limits = requests.iter().map(|r| r.limit.clone()).collect();
            *generations += 1;
            shape.generation = *generations;
            shape.asking = false;
            shape.rate = LocalRate::default();
            shape.ahead_from = 0;
        }
        shape.rate.record(stamp.at, n);
        shape.last_seen = stamp.at;
        // A lease that is done, or that cannot grant this request when the one taken ahead
        // can, gives its place to that one; its unused permits wait to go back with the
        // shape's next lease call. One that is only short for this request (or stamped
        // before it began) stays for the requests it can serve.
        while shape.lease.as_ref().is_some_and(|held| {
            held.is_done(stamp.at)
                || (!held.serves(stamp.at, n)
                    && shape
                        .next
                        .as_ref()
                        .is_some_and(|next| next.serves(stamp.at, n)))
        }) {
            if let Some(done) = shape.lease.take() {
                self.retire(shape, done);
            }
            shape.lease = shape.next.take();
        }
        // Below half its permits, the lease is taken over ahead by this request, unless one
        // is on its way or taken already.
        let running_low = stamp.at >= shape.ahead_from
            && shape.lease.as_ref().is_some_and(|held| {
                held.left.saturating_sub(n).saturating_mul(2) < held.terms.permits
            });
        if shape.lease.is_some() && (!running_low || shape.asking || shape.next.is_some()) {
            return self.grant(shape, n, stamp);
        }
        // No lease asked for yet: the plain path, unless permits of the shape's leases wait to
        // go back (the plain path would find them spent), which go back with a call that
        // leases nothing.
        let no_lease_yet = shape.lease.is_none() && stamp.at < shape.ahead_from;
        if shape.asking || (no_lease_yet && shape.pending.is_empty()) {
            return Plan::Plain;
        }
        let held_now = self.held.load(Ordering::Relaxed);
        let free = self.config.sizing.max_per_process.saturating_sub(held_now);
        let want = if no_lease_yet {
            Some(0)
        } else {
            self.config
                .sizing
                .extra(shape.rate.per_second(stamp.at), n, free)
        };
        // A hot shape asks through the lease script even for no permits (at a cap): its
        // request is decided there exactly as on the plain path.
        let want = match (want, shape.lease.is_some(), !shape.pending.is_empty()) {
            (Some(want), false, _) => want,
            (Some(want), true, _) if want > 0 => want,
            (_, true, _) => return self.grant(shape, n, stamp),
            (None, false, true) => 0,
            (None, false, false) => return Plan::Plain,
        };
        let give_back = std::mem::take(&mut shape.pending);
        self.held
            .fetch_sub(unused_of(&give_back), Ordering::Relaxed);
        shape.asking = true;
        Plan::Ask(Asking {
            leasing: self,
            hash,
            generation: shape.generation,
            stamp,
            want,
            permits: n,
            give_back,
            learned: false,
        })
    }

    /// The hash the shape of `requests` is found by: of each limit's name and key.
    fn hash_of(&self, requests: &[LimitRequest<'_>]) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        for request in requests {
            request.name.hash(&mut hasher);
            request.key.hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Drops the shapes unseen for a second, not asking, whose leases have all ended; at most
    /// once a second. What they held unused is spent: a window's permits come back when it
    /// passes, a bucket's by time.
    fn sweep(&self, shapes: &mut Shapes, now: Micros) {
        if shapes
            .last_sweep
            .is_some_and(|last| now.abs_diff(last) < SWEEP_EVERY)
        {
            return;
        }
        shapes.last_sweep = Some(now);
        shapes.by_hash.retain(|_, shape| {
            let idle = !shape.asking
                && now.saturating_sub(shape.last_seen) >= SWEEP_EVERY
                && [&shape.lease, &shape.next]
                    .into_iter()
                    .flatten()
                    .all(|held| held.until <= now);
            if idle {
                self.drop_leases(shape);
                shapes.dropped_local_grants += shape.local_grants;
            }
            !idle
        });
    }

    fn drop_all(&self, shapes: &mut Shapes) {
        for shape in shapes.by_hash.values_mut() {
            self.drop_leases(shape);
            shapes.dropped_local_grants += shape.local_grants;
        }
        shapes.by_hash.clear();
        self.sightings.forget_all();
        shapes.last_sweep = None;
        shapes.last_return = None;
        shapes.latest = 0;
    }

    /// Takes out every lease held, to give back, and the time to give them back at: on given
    /// times, the latest given (a caller's clock, which Redis's would not match); otherwise
    /// Redis's own.
    pub(crate) fn take_all(&self) -> (Now, Vec<Returning>) {
        let mut shapes = self.lock();
        let now = match shapes.timeline {
            Timeline::Given => Now::At(shapes.latest),
            Timeline::Local => Now::Store,
        };
        let at = self.stamper.stamp(now).at;
        (now, self.take_out(&mut shapes, at, true))
    }

    /// Counts a call of the lease script.
    pub(crate) fn count_call(&self) {
        self.lease_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Grants `n` permits of `shape`'s lease (which serves them) at `stamp`.
    fn grant(&self, shape: &mut Shape, n: u64, stamp: Stamp) -> Plan<'_> {
        match self.grant_now(shape, n, stamp) {
            Some((decisions, at)) => Plan::Granted(decisions, at),
            None => Plan::Plain,
        }
    }

    /// Grants `n` permits of `shape`'s lease at `stamp`, if it serves them: each limit's
    /// decision and the time to report.
    fn grant_now(
        &self,
        shape: &mut Shape,
        n: u64,
        stamp: Stamp,
    ) -> Option<(Vec<Decision>, Micros)> {
        let held = shape
            .lease
            .as_mut()
            .filter(|held| held.serves(stamp.at, n))?;
        held.left -= n;
        shape.local_grants += 1;
        let decisions = shape
            .views
            .iter_mut()
            .map(|(limit, left, fresh_at)| {
                *left = left.saturating_sub(n);
                Decision::allow(*limit, *left, fresh_at.saturating_sub(stamp.at))
            })
            .collect();
        Some((decisions, stamp.at.saturating_add(held.offset)))
    }

    /// A lease done: what was granted from it is released; its unused permits (still held)
    /// wait to go back.
    fn retire(&self, shape: &mut Shape, done: Held) {
        let granted = done.terms.permits.saturating_sub(done.left);
        if done.left > 0 && gives_back(&shape.limits) {
            self.held.fetch_sub(granted, Ordering::Relaxed);
            shape.pending.push((done.terms, done.left));
        } else {
            self.held.fetch_sub(done.terms.permits, Ordering::Relaxed);
            self.expire(done.left);
        }
    }

    /// The leases of `shape` ended at `at` retired (see [`Leasing::retire`]).
    fn retire_ended(&self, shape: &mut Shape, at: Micros) {
        let ended = |slot: &mut Option<Held>| slot.take_if(|held| held.until <= at);
        let done = [ended(&mut shape.lease), ended(&mut shape.next)];
        for done in done.into_iter().flatten() {
            self.retire(shape, done);
        }
        promote_next(shape);
    }

    /// Every lease of `shape` spent, nothing given back.
    fn drop_leases(&self, shape: &mut Shape) {
        for held in [shape.lease.take(), shape.next.take()]
            .into_iter()
            .flatten()
        {
            self.held.fetch_sub(held.terms.permits, Ordering::Relaxed);
            self.expire(held.left);
        }
        for (_, unused) in shape.pending.drain(..) {
            self.held.fetch_sub(unused, Ordering::Relaxed);
            self.expire(unused);
        }
    }

    fn expire(&self, permits: u64) {
        self.permits_expired.fetch_add(permits, Ordering::Relaxed);
    }

    /// Counts a give-back of `unused` permits of which Redis took back `returned`.
    pub(crate) fn count_return(&self, unused: u64, returned: u64) {
        let returned = returned.min(unused);
        self.permits_returned.fetch_add(returned, Ordering::Relaxed);
        self.expire(unused - returned);
    }

    /// Takes out the leases ended at `stamp` whose limits are all windows (the only ones Redis
    /// takes back), to give back; at most once per lease life.
    pub(crate) fn to_return(&self, stamp: Stamp) -> Vec<Returning> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut shapes = self.lock();
        if shapes.timeline != stamp.timeline {
            return Vec::new();
        }
        let life = self.config.sizing.life;
        if shapes
            .last_return
            .is_some_and(|last| stamp.at.abs_diff(last) < life)
        {
            return Vec::new();
        }
        shapes.last_return = Some(stamp.at);
        self.take_out(&mut shapes, stamp.at, false)
    }

    /// Takes out the leases to give back, of the shapes whose limits are all windows: every
    /// one held (`all`: the others' are dropped as spent), or those ended at `at`.
    fn take_out(&self, shapes: &mut Shapes, at: Micros, all: bool) -> Vec<Returning> {
        let mut out = Vec::new();
        for shape in shapes.by_hash.values_mut() {
            if !gives_back(&shape.limits) {
                if all {
                    self.drop_leases(shape);
                } else {
                    // Nothing to give back, but an ended lease of a shape gone idle would
                    // hold its whole size against `max_per_process` until the shape is seen
                    // again.
                    self.retire_ended(shape, at);
                }
                continue;
            }
            if !all && shape.asking {
                continue;
            }
            let mut returning = Vec::new();
            let mut released = 0;
            for slot in [&mut shape.lease, &mut shape.next] {
                if slot.as_ref().is_some_and(|held| all || held.until <= at)
                    && let Some(held) = slot.take()
                {
                    released += held.terms.permits;
                    returning.push((held.terms, held.left));
                }
            }
            promote_next(shape);
            released += unused_of(&shape.pending);
            returning.append(&mut shape.pending);
            self.held.fetch_sub(released, Ordering::Relaxed);
            returning.retain(|&(_, unused)| unused > 0);
            if !returning.is_empty() {
                out.push(Returning {
                    ids: shape.ids.clone(),
                    limits: shape.limits.clone(),
                    leases: returning,
                });
            }
        }
        out
    }
}

impl Asking<'_> {
    /// Redis's answer: the lease kept, if one was taken; the give-back counted. The answer
    /// to report instead of Redis's, if any (its decisions and time): a request that asked
    /// ahead while a lease was in hand, which Redis counts as spent, is told this process's
    /// view (that lease's rest included), and if Redis denied it while that lease still
    /// serves it, it is granted from that lease.
    pub(crate) fn learn(mut self, reply: &LeaseReply) -> Option<(Vec<Decision>, Micros)> {
        self.learned = true;
        let leasing = self.leasing;
        leasing.count_return(unused_of(&self.give_back), reply.given_back);
        let mut shapes = leasing.lock();
        let timeline_kept = shapes.timeline == self.stamp.timeline;
        let Some(shape) = shapes
            .by_hash
            .get_mut(&self.hash)
            .filter(|shape| timeline_kept && shape.generation == self.generation)
        else {
            // The shape was dropped meanwhile, or its limits changed (a rule reload): a lease
            // asked for under others is not kept, so it is spent.
            leasing.expire(reply.leased);
            return None;
        };
        shape.asking = false;
        let sent = self.stamp.at;
        if !reply.decisions.iter().all(Decision::allowed) {
            // Until the request could pass (a lease life if that cannot be told), no lease.
            let retry = reply
                .decisions
                .iter()
                .filter(|d| !d.allowed())
                .map(|d| d.retry_after_micros().unwrap_or(leasing.config.sizing.life))
                .max()
                .unwrap_or(0);
            shape.ahead_from = shape.ahead_from.max(sent.saturating_add(retry));
            // Granted at the time it is granted, which may be past the lease's end by now.
            let now = leasing.restamp(self.stamp);
            return leasing.grant_now(shape, self.permits, now);
        }
        // Redis counts the lease in hand as spent; this process still holds its rest.
        let in_hand = shape.lease.as_ref().map_or(0, |held| held.left);
        let answer = (in_hand > 0).then(|| {
            let decisions = reply
                .decisions
                .iter()
                .map(|d| {
                    let remaining = d.remaining().saturating_add(in_hand);
                    Decision::allow(d.limit(), remaining, d.reset_after_micros())
                })
                .collect();
            (decisions, reply.now)
        });
        shape.views = reply
            .decisions
            .iter()
            .map(|d| {
                (
                    d.limit(),
                    d.remaining().saturating_add(in_hand),
                    sent.saturating_add(d.reset_after_micros()),
                )
            })
            .collect();
        let (offset, until) = match self.stamp.timeline {
            Timeline::Given => (0, reply.end),
            // Redis decided no sooner than the call was sent: on the local clock, the lease
            // ends no later than Redis's end.
            Timeline::Local => (
                reply.now.saturating_sub(sent),
                sent.saturating_add(reply.end.saturating_sub(reply.now)),
            ),
        };
        if reply.leased == 0 {
            return answer;
        }
        let taken = Held {
            terms: LeaseTerms {
                taken_at: reply.now,
                permits: reply.leased,
                end: reply.end,
            },
            left: reply.leased,
            from: sent,
            until,
            offset,
        };
        leasing.held.fetch_add(reply.leased, Ordering::Relaxed);
        leasing.leases_taken.fetch_add(1, Ordering::Relaxed);
        leasing
            .permits_leased
            .fetch_add(reply.leased, Ordering::Relaxed);
        // Taken ahead if a lease is still in hand (none was on its way: this call asked).
        let slot = if shape.lease.is_some() {
            &mut shape.next
        } else {
            &mut shape.lease
        };
        if let Some(old) = slot.replace(taken) {
            leasing.held.fetch_sub(old.terms.permits, Ordering::Relaxed);
            leasing.expire(old.left);
        }
        answer
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if self.learned {
            return;
        }
        // The call failed or was cancelled: whatever it gave back or leased is unknown, so
        // counted as spent (Redis's side comes back by time).
        for &(_, unused) in &self.give_back {
            self.leasing.expire(unused);
        }
        let mut shapes = self.leasing.lock();
        let life = self.leasing.config.sizing.life;
        if let Some(shape) = shapes
            .by_hash
            .get_mut(&self.hash)
            .filter(|shape| shape.generation == self.generation)
        {
            shape.asking = false;
            shape.ahead_from = self.stamp.at.saturating_add(life);
        }
    }
}

#[cfg(test)]
#[path = "leasing_tests.rs"]
mod tests;
