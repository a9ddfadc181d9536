//! The over-limit cache of a [`RedisStore`](crate::RedisStore) (off unless
//! [`StoreConfig::over_limit_cache`](crate::StoreConfig::over_limit_cache) says how many
//! entries): the denials Redis gave, kept per limit and key, answer that key's later requests
//! in the process until their retry time, by the core's rules
//! ([`sluicegate::over_limit`]), so a hot key over its limit costs Redis one call per retry
//! time instead of one per request. Only denials are kept, so nothing extra is ever admitted.
//!
//! - An entry is keyed by the limit's Redis key (its name and key) and holds the limit it was
//!   made for: a limit whose parameters changed (a rule reload) finds no entry.
//! - A call that goes to Redis first drops its limits' entries (a call that fails, or is
//!   cancelled by its caller's timeout, may have charged them), then keeps the denials of
//!   Redis's answer that the rules keep.
//! - Concurrent calls on one key may learn their answers out of order, and other processes
//!   charge the same keys: an entry may then be older than Redis's state. It still denies
//!   rightly, since for these algorithms only time frees budget, and time is what it counts;
//!   only its `remaining` may be more, and its `retry_after` less, than Redis would say.
//!   A clear (a manual switch, counters rewritten behind the store's back) is different: a
//!   call on its way to Redis then keeps none of its answer's denials.
//! - A call is answered in the process only if every one of its limits is (each then reports
//!   its own denial, exactly as Redis would for the call); otherwise Redis decides all of it.
//! - Times: a call given its `now` ([`Now::At`]) is answered on that clock. A call on Redis's
//!   clock ([`Now::Store`]) is answered on this process's monotonic clock, each entry timed
//!   from when the call that brought it was sent: Redis decided no sooner, so the entry runs
//!   out no later than Redis's retry time (at most one round trip sooner), and the times it
//!   reports are Redis's minus at most that round trip. A store switching between the two
//!   clocks drops every entry at the switch.
//! - Bounded: at most `capacity` entries, each also taken from a [`KeyBudget`] if one is
//!   given (a service's cap on keys). Each answer from Redis first drops the expired entries,
//!   if one may have expired and the last scan is a second old (a scan reads them all); a
//!   cache still full then simply does not keep the new denial.
//! - An answer from the cache is ready when first polled, as the memory store's: a caller
//!   that loops on decisions with nothing else to await (a benchmark) should yield now and
//!   then (`tokio::task::consume_budget`), or its runtime's timers and I/O wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sluicegate::limiter::KeyBudget;
use sluicegate::over_limit::OverLimit;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Decision, Micros};

use crate::limit::RedisLimit;
use crate::reply::LimitRequest;
use crate::stamp::{Stamp, Stamper, Timeline};

/// What a store's over-limit cache holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverLimitStats {
    /// Calls answered in the process without asking Redis (each a round trip saved), since
    /// the store was made.
    pub hits: u64,
    /// Denials held now (some may have run out, until swept).
    pub entries: usize,
    /// The most entries it holds (0: the cache is off).
    pub capacity: usize,
}

/// How often, at most, a full cache scans its entries for expired ones.
const SWEEP_EVERY: Micros = 1_000_000;

/// The cache a store shares among its clones.
#[derive(Debug)]
pub(crate) struct OverLimitCache {
    capacity: usize,
    budget: Option<Arc<KeyBudget>>,
    /// The clocks its entries are on.
    stamper: Stamper,
    hits: AtomicU64,
    entries: Mutex<Entries>,
}

#[derive(Debug)]
struct Entries {
    timeline: Timeline,
    by_key: HashMap<Vec<u8>, Entry>,
    /// No entry runs out before this: a full cache does not scan before then.
    next_expiry: Micros,
    last_sweep: Option<Micros>,
    /// Redis's time minus the local clock's, as of the last call on Redis's clock (the `now`
    /// a local answer reports).
    server_offset: Micros,
    /// How many times the cache was cleared: a call sent before a clear keeps no denial.
    clears: u64,
}

/// A call on its way to Redis, as the cache saw it go ([`OverLimitCache::forget`]), for
/// [`OverLimitCache::learn`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    /// The call's time.
    stamp: Stamp,
    /// The cache's clears when it went.
    clears: u64,
}

#[derive(Debug)]
struct Entry {
    limit: RedisLimit,
    over: OverLimit,
}

impl OverLimitCache {
    /// A cache of at most `capacity` entries, each also taken from `budget` if given.
    pub(crate) fn new(capacity: usize, budget: Option<Arc<KeyBudget>>) -> OverLimitCache {
        OverLimitCache {
            capacity,
            budget,
            stamper: Stamper::new(),
            hits: AtomicU64::new(0),
            entries: Mutex::new(Entries {
                timeline: Timeline::Given,
                by_key: HashMap::new(),
                next_expiry: Micros::MAX,
                last_sweep: None,
                server_offset: 0,
                clears: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // The entries stay consistent whatever panicked holding them: each change is whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call's time: the one given, or now on the local clock.
    pub(crate) fn stamp(&self, now: Now) -> Stamp {
        self.stamper.stamp(now)
    }

    /// Each request's denial, if every one is answered at `stamp` (`keys[i]` the Redis key of
    /// `requests[i]`), and the time to report it at; counts the hit.
    pub(crate) fn answer(
        &self,
        requests: &[LimitRequest<'_>],
        keys: &[Vec<u8>],
        op: Op,
        stamp: Stamp,
    ) -> Option<(Vec<Decision>, Micros)> {
        // A call naming one limit and key twice is Redis's to refuse.
        if keys
            .iter()
            .enumerate()
            .any(|(i, key)| keys[..i].contains(key))
        {
            return None;
        }
        let entries = self.lock();
        if entries.timeline != stamp.timeline || requests.is_empty() {
            return None;
        }
        let decisions = requests
            .iter()
            .zip(keys)
            .map(|(request, key)| {
                let entry = entries.by_key.get(key)?;
                if entry.limit != *request.limit {
                    return None;
                }
                entry.over.answer(op, request.permits.get(), stamp.at)
            })
            .collect::<Option<Vec<_>>>()?;
        let at = match stamp.timeline {
            Timeline::Given => stamp.at,
            Timeline::Local => stamp.at.saturating_add(entries.server_offset),
        };
        drop(entries);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some((decisions, at))
    }

    /// Redis's answer to a call `asked` as [`OverLimitCache::forget`] said: each request's entry replaced by its decision's, or dropped. `server_now` is the
    /// time Redis decided at. A call asked before the cache was last cleared keeps no denial:
    /// the clear may have been for a change of the counters behind the store's back (a
    /// manual switch, a `FLUSHALL`) that its answer predates.
    pub(crate) fn learn(
        &self,
        requests: &[LimitRequest<'_>],
        keys: &[Vec<u8>],
        op: Op,
        asked: Asked,
        decisions: &[Decision],
        server_now: Micros,
    ) {
        let mut entries = self.lock();
        let (stamp, stale) = (asked.stamp, entries.clears != asked.clears);
        if entries.timeline != stamp.timeline {
            self.drop_all(&mut entries);
            entries.timeline = stamp.timeline;
        }
        if stamp.timeline == Timeline::Local {
            entries.server_offset = server_now.saturating_sub(stamp.at);
        }
        // Expired entries leave within a second of the clock (while Redis is asked), so they
        // do not hold keys of a budget they no longer use.
        self.sweep(&mut entries, stamp.at);
        for ((request, key), decision) in requests.iter().zip(keys).zip(decisions) {
            let algorithm = request.limit.algorithm();
            let permits = request.permits.get();
            match OverLimit::from_denial(algorithm, op, permits, decision, stamp.at) {
                Some(over) if !stale => self.keep(&mut entries, key, request.limit, over),
                _ => self.remove(&mut entries, key),
            }
        }
    }

    /// Drops the entries of a call made at `stamp` about to be asked of Redis, and says how
    /// it found the cache (for [`OverLimitCache::learn`]).
    pub(crate) fn forget(&self, keys: &[Vec<u8>], stamp: Stamp) -> Asked {
        let mut entries = self.lock();
        for key in keys {
            self.remove(&mut entries, key);
        }
        Asked {
            stamp,
            clears: entries.clears,
        }
    }

    /// Drops every entry; calls already on their way to Redis keep none of their denials.
    pub(crate) fn clear(&self) {
        let mut entries = self.lock();
        self.drop_all(&mut entries);
        entries.clears += 1;
    }

    pub(crate) fn stats(&self) -> OverLimitStats {
        OverLimitStats {
            hits: self.hits.load(Ordering::Relaxed),
            entries: self.lock().by_key.len(),
            capacity: self.capacity,
        }
    }

    fn keep(&self, entries: &mut Entries, key: &[u8], limit: &RedisLimit, over: OverLimit) {
        if let Some(entry) = entries.by_key.get_mut(key) {
            *entry = Entry {
                limit: limit.clone(),
                over,
            };
            entries.next_expiry = entries.next_expiry.min(over.until());
            return;
        }
        if entries.by_key.len() >= self.capacity {
            return;
        }
        if let Some(budget) = &self.budget
            && !budget.try_take(1)
        {
            return;
        }
        entries.by_key.insert(
            key.to_vec(),
            Entry {
                limit: limit.clone(),
                over,
            },
        );
        entries.next_expiry = entries.next_expiry.min(over.until());
    }

    /// Drops the entries expired at `now`, if one may have and the last scan is a second old.
    fn sweep(&self, entries: &mut Entries, now: Micros) {
        let recent = entries
            .last_sweep
            // Either way: a caller's clock that goes back must not scan on every call.
            .is_some_and(|last| now.abs_diff(last) < SWEEP_EVERY);
        if now < entries.next_expiry || recent {
            return;
        }
        entries.last_sweep = Some(now);
        let before = entries.by_key.len();
        entries
            .by_key
            .retain(|_, entry| !entry.over.is_expired(now));
        self.give_back(before - entries.by_key.len());
        entries.next_expiry = entries
            .by_key
            .values()
            .map(|entry| entry.over.until())
            .min()
            .unwrap_or(Micros::MAX);
    }

    fn remove(&self, entries: &mut Entries, key: &[u8]) {
        if entries.by_key.remove(key).is_some() {
            self.give_back(1);
        }
    }

    fn drop_all(&self, entries: &mut Entries) {
        self.give_back(entries.by_key.len());
        entries.by_key.clear();
        entries.next_expiry = Micros::MAX;
        entries.last_sweep = None;
    }

    fn give_back(&self, keys: usize) {
        if let Some(budget) = &self.budget {
            budget.give_back(keys);
        }
    }
}

impl Drop for OverLimitCache {
    fn drop(&mut self) {
        let entries = self
            .entries
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let held = entries.by_key.len();
        self.give_back(held);
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;
    use std::time::Duration;

    use super::*;

    type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

    /// The entries a cache holds after a call that went to Redis at 4 s on a manual clock
    /// learns a fixed window's denial, the cache cleared or not while the call was out.
    fn entries_after_a_denial(cleared_meanwhile: bool) -> TestResult<usize> {
        let cache = OverLimitCache::new(16, None);
        let limit = RedisLimit::fixed_window(10, Duration::from_secs(10))?;
        let requests = [LimitRequest {
            limit: &limit,
            name: "per-10s",
            key: b"user",
            permits: NonZeroU64::MIN,
        }];
        let keys = [b"per-10s:user".to_vec()];
        let asked = cache.forget(&keys, cache.stamp(Now::At(4_000_000)));
        if cleared_meanwhile {
            cache.clear();
        }
        // 10 counted: denied until the window ends at 10 s.
        let denial = Decision::deny(10, 0, 6_000_000, Some(6_000_000));
        cache.learn(&requests, &keys, Op::Check, asked, &[denial], 4_000_000);
        Ok(cache.stats().entries)
    }

    #[test]
    fn a_call_out_while_the_cache_is_cleared_keeps_no_denial() -> TestResult {
        assert_eq!(entries_after_a_denial(false)?, 1);
        assert_eq!(entries_after_a_denial(true)?, 0);
        Ok(())
    }
}
