//! One limiter, a state per key (per user, per IP, per route), in a sharded table that forgets
//! keys once their state is back to fresh.

use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU64;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hashbrown::HashTable;
use parking_lot::Mutex;

use crate::clock::{Clock, Micros, SystemClock};
use crate::decision::{Admission, Decision};
use crate::error::CheckError;
use crate::limiter::budget::KeyBudget;
use crate::limiter::current::{CurrentAlgorithm, Held};
use crate::state_machine::{Algorithm, Answer, Op};

const SHARDS: usize = 64;
/// A shard is the top bits of the hash times this odd constant (2^64 / golden ratio):
/// every bit of the hash moves them. Bits taken from the hash itself spread badly: foldhash
/// hashes a small integer (a user id, an IPv4 address) with one multiply, whose bits 48 and
/// up vary with the key as a Weyl sequence, and for about one seed in a hundred consecutive
/// keys fell into a few shards (all of 10 000 into one, at worst), serialising them on one
/// lock and leaving the other tables unswept.
const SHARD_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
const SHARD_SHIFT: u32 = u64::BITS - SHARDS.trailing_zeros();

/// Only one shard in this many refused insertions pays for a sweep, so a stream of new keys at
/// the cap costs amortised constant time, not a scan per request.
const SWEEP_EVERY_FRACTION: usize = 16;

pub(crate) type Table<K, S> = HashTable<(K, S)>;

/// What a shard's lock guards: its keys, and its own reference to the algorithm, read under
/// the lock so that a decision costs no atomic beyond the lock itself, and replaced only with
/// every shard locked, so no decision meets a state carried over to other parameters. Derefs
/// to the keys.
pub(crate) struct ShardKeys<K, A: Algorithm> {
    pub(crate) keys: Table<K, A::State>,
    pub(crate) algorithm: Arc<A>,
}

impl<K, A: Algorithm> std::ops::Deref for ShardKeys<K, A> {
    type Target = Table<K, A::State>;

    fn deref(&self) -> &Self::Target {
        &self.keys
    }
}

impl<K, A: Algorithm> std::ops::DerefMut for ShardKeys<K, A> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.keys
    }
}

#[repr(align(64))]
struct Shard<K, A: Algorithm> {
    table: Mutex<ShardKeys<K, A>>,
    /// Refusals at the cap since the last unproductive sweep (`usize::MAX` after a productive
    /// one, so the next sweep runs at once).
    refused_since_sweep: Mutex<usize>,
}

/// A limiter keeping one state per key.
///
/// Memory stays bounded without anyone calling a cleanup method: when a shard's table is about
/// to grow, it first drops every key whose state is back to fresh (which is exactly as if the
/// key had never been seen). With [`with_max_keys`](Self::with_max_keys), a shard that is at
/// its share of the cap after that sweep refuses *new* keys with
/// [`CheckError::KeyCapacityReached`]: an attacker spraying unique keys can neither grow memory
/// nor evict (and so reset) a key that is still limited.
///
/// ```
/// use sluicegate::{Gcra, KeyedLimiter, ManualClock, Rate};
///
/// let limiter = KeyedLimiter::with_clock(Gcra::new(Rate::per_minute(1)?, 1)?, ManualClock::new(0));
/// assert!(limiter.check(&"alice")?.allowed());
/// assert!(!limiter.check(&"alice")?.allowed());
/// assert!(limiter.check(&"bob")?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedLimiter<K, A: Algorithm, C: Clock = SystemClock> {
    /// The algorithm for [`algorithm`](Self::algorithm); decisions read their shard's copy.
    algorithm: ArcSwap<A>,
    shards: Box<[Shard<K, A>]>,
    hasher: foldhash::fast::RandomState,
    clock: C,
    created_at: Micros,
    max_keys: Option<usize>,
    max_keys_per_shard: usize,
    budget: Option<Arc<KeyBudget>>,
}

impl<K: Hash + Eq + Clone, A: Algorithm> KeyedLimiter<K, A, SystemClock> {
    /// A keyed limiter on the system clock.
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, SystemClock::new())
    }
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// A keyed limiter on `clock`. Every key behaves as if its limiter had been created now.
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        let algorithm = Arc::new(algorithm);
        let shards = (0..SHARDS)
            .map(|_| Shard {
                table: Mutex::new(ShardKeys {
                    keys: HashTable::new(),
                    algorithm: Arc::clone(&algorithm),
                }),
                refused_since_sweep: Mutex::new(usize::MAX),
            })
            .collect();
        KeyedLimiter {
            created_at: clock.now(),
            algorithm: ArcSwap::new(algorithm),
            shards,
            hasher: foldhash::fast::RandomState::default(),
            clock,
            max_keys: None,
            max_keys_per_shard: usize::MAX,
            budget: None,
        }
    }

    /// Caps the number of keys held at about `max_keys`: each of the 64 shards holds at most
    /// `ceil(max_keys / 64)`, so an unlucky spread of keys meets the cap a little early. At the
    /// cap, fresh keys are dropped to make room; if none are, new keys are refused. A sweep
    /// scans its shard, so after one that found nothing to drop, a shard refuses a sixteenth
    /// of its share of newcomers before it sweeps again: under a flood of new keys the cap
    /// costs amortised constant time per request.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self.max_keys_per_shard = max_keys.div_ceil(SHARDS).max(1);
        self
    }

    /// Counts this limiter's keys in `budget`, a cap shared with other limiters (see
    /// [`KeyBudget`]); with [`with_max_keys`](Self::with_max_keys) too, both caps hold.
    pub fn with_key_budget(mut self, budget: Arc<KeyBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The algorithm and its parameters now (a later
    /// [`set_algorithm`](Self::set_algorithm) does not change the one returned).
    pub fn algorithm(&self) -> CurrentAlgorithm<'_, A> {
        CurrentAlgorithm(Held::Guarded(self.algorithm.load()))
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Asks for one permit for `key`.
    #[inline(always)]
    pub fn check(&self, key: &K) -> Result<Decision, CheckError> {
        self.decide(key, NonZeroU64::MIN, Op::Check)
    }

    /// Asks for `permits` for `key`, all or none.
    #[inline]
    pub fn check_n(&self, key: &K, permits: NonZeroU64) -> Result<Decision, CheckError> {
        self.decide(key, permits, Op::Check)
    }

    /// What [`check_n`](Self::check_n) would answer, consuming nothing.
    pub fn peek(&self, key: &K, permits: NonZeroU64) -> Result<Decision, CheckError> {
        self.decide(key, permits, Op::Peek)
    }

    /// Applies `op` for `key` at the clock's current time.
    #[inline(always)]
    pub fn decide(&self, key: &K, permits: NonZeroU64, op: Op) -> Result<Decision, CheckError> {
        self.decide_at(key, self.clock.now(), permits, op)
    }

    /// Applies `op` for `key` at `now` (a time from this limiter's clock). A `now` ahead of
    /// the clock is taken at its word: keys fresh at that time may be swept, and so start
    /// afresh, even though the clock has not reached it yet.
    #[inline]
    pub fn decide_at(
        &self,
        key: &K,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        self.answer_at(key, now, permits, op)
    }

    /// [`decide`](Self::decide) for a caller that only needs to know whether the request
    /// passes at once: the same state change, answered as [`Algorithm::admit`] does (a request
    /// passing at once may be told so without the decision's numbers).
    #[inline(always)]
    pub fn admit(&self, key: &K, permits: NonZeroU64, op: Op) -> Result<Admission, CheckError> {
        self.answer_at(key, self.clock.now(), permits, op)
    }

    #[inline(always)]
    fn answer_at<R: Answer>(
        &self,
        key: &K,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<R, CheckError> {
        match self.decide_in_shard(key, now, permits, op) {
            Err(CheckError::KeyCapacityReached { .. }) if self.sweep_for_budget(now) => {
                self.decide_in_shard(key, now, permits, op)
            }
            answer => answer,
        }
    }

    #[inline(always)]
    fn decide_in_shard<R: Answer>(
        &self,
        key: &K,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<R, CheckError> {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let mut guard = shard.table.lock();
        let table = &mut *guard;
        let algorithm = &*table.algorithm;
        if let Ok(mut entry) = table.keys.find_entry(hash, |(k, _)| k == key) {
            let decision = R::from_algorithm(algorithm, &mut entry.get_mut().1, now, permits, op)?;
            if op == Op::Release && algorithm.is_fresh(&entry.get().1, now) {
                entry.remove();
                self.gave_back(1);
            }
            return Ok(decision);
        }
        let mut state = algorithm.initial_state(self.created_at);
        let decision = R::from_algorithm(algorithm, &mut state, now, permits, op)?;
        if op.changes_state(decision.allowed()) {
            self.make_room(shard, table, now, 1)?;
            table
                .keys
                .insert_unique(hash, (key.clone(), state), |(k, _)| self.hasher.hash_one(k));
        }
        Ok(decision)
    }

    /// After a new key was refused for want of budget: drops this limiter's fresh keys, every
    /// shard, when a sweep is due (see [`KeyBudget`]), and says whether that freed any.
    #[cold]
    fn sweep_for_budget(&self, now: Micros) -> bool {
        let Some(budget) = &self.budget else {
            return false;
        };
        if !budget.sweep_due() {
            return false;
        }
        let freed: usize = self
            .shards
            .iter()
            .map(|shard| self.sweep(&mut shard.table.lock(), now))
            .sum();
        budget.swept(freed);
        freed > 0
    }

    /// The key's hash and its shard's index (multi-limit decisions lock shards in order).
    pub(crate) fn locate(&self, key: &K) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        (hash, Self::shard_index(hash))
    }

    /// The table of shard `index`, to be locked by a multi-limit decision.
    pub(crate) fn shard_table(&self, index: usize) -> &Mutex<ShardKeys<K, A>> {
        &self.shards[index].table
    }

    /// The state a key starts from, under the algorithm of a locked shard.
    pub(crate) fn new_key_state(&self, shard: &ShardKeys<K, A>) -> A::State {
        shard.algorithm.initial_state(self.created_at)
    }

    /// Makes room for `extra` new keys in shard `index`, whose table the caller holds locked.
    pub(crate) fn make_room_in(
        &self,
        index: usize,
        table: &mut ShardKeys<K, A>,
        now: Micros,
        extra: usize,
    ) -> Result<(), CheckError> {
        self.make_room(&self.shards[index], table, now, extra)
    }

    /// Inserts a key known to be absent into a locked table.
    pub(crate) fn insert_new(
        &self,
        table: &mut ShardKeys<K, A>,
        hash: u64,
        key: K,
        state: A::State,
    ) {
        table.insert_unique(hash, (key, state), |(k, _)| self.hasher.hash_one(k));
    }

    #[inline]
    fn shard_index(hash: u64) -> usize {
        (hash.wrapping_mul(SHARD_MULTIPLIER) >> SHARD_SHIFT) as usize
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, A> {
        &self.shards[Self::shard_index(hash)]
    }

    /// Makes room for `extra` more keys: drops fresh keys when the table would otherwise grow
    /// or is at its cap, and refuses if the cap still holds.
    ///
    /// At the cap a sweep costs a scan of the shard, so it runs only when the last one freed a
    /// good share of the shard (`len / SWEEP_EVERY_FRACTION` keys) or enough refusals have
    /// been paid since: a stream of new keys at the cap costs amortised constant time, and
    /// keys that have gone fresh are found again within that many refusals.
    fn make_room(
        &self,
        shard: &Shard<K, A>,
        table: &mut ShardKeys<K, A>,
        now: Micros,
        extra: usize,
    ) -> Result<(), CheckError> {
        let wanted = table.len() + extra;
        let at_cap = wanted > self.max_keys_per_shard;
        if !at_cap && wanted <= table.capacity() {
            return self.take_budget(extra);
        }
        if !at_cap {
            self.sweep(table, now);
            return self.take_budget(extra);
        }
        let mut refused = shard.refused_since_sweep.lock();
        let share = table.len() / SWEEP_EVERY_FRACTION;
        if *refused < share {
            *refused += 1;
            return Err(self.key_capacity_error());
        }
        let before = table.len();
        self.sweep(table, now);
        let freed = before - table.len();
        // A productive sweep lets the next one run at once; an unproductive one is paid for
        // by the refusals that follow it.
        *refused = if freed >= share.max(1) { usize::MAX } else { 0 };
        if table.len() + extra > self.max_keys_per_shard {
            return Err(self.key_capacity_error());
        }
        self.take_budget(extra)
    }

    /// Takes `extra` keys from the shared budget, if any.
    #[inline]
    fn take_budget(&self, extra: usize) -> Result<(), CheckError> {
        match &self.budget {
            Some(budget) if !budget.try_take(extra) => Err(CheckError::KeyCapacityReached {
                max_keys: budget.max_keys(),
            }),
            _ => Ok(()),
        }
    }

    /// Gives `keys` dropped keys back to the shared budget, if any.
    #[inline]
    fn gave_back(&self, keys: usize) {
        if let Some(budget) = &self.budget {
            budget.give_back(keys);
        }
    }

    /// Drops the fresh keys of one shard's table; returns how many.
    fn sweep(&self, shard: &mut ShardKeys<K, A>, now: Micros) -> usize {
        let ShardKeys {
            keys: table,
            algorithm,
        } = shard;
        let before = table.len();
        table.retain(|(_, state)| !algorithm.is_fresh(state, now));
        if table.capacity() > 64 && table.len() < table.capacity() / 4 {
            table.shrink_to(table.len() * 2, |(k, _)| self.hasher.hash_one(k));
        }
        let freed = before - table.len();
        self.gave_back(freed);
        freed
    }

    fn key_capacity_error(&self) -> CheckError {
        CheckError::KeyCapacityReached {
            max_keys: self.max_keys.unwrap_or(usize::MAX),
        }
    }

    /// Drops every key whose state is fresh now, and returns how many. Never needed for
    /// boundedness (tables sweep themselves before growing); useful to release memory after a
    /// traffic spike, or to make room in a [`KeyBudget`] shared with other limiters.
    pub fn retain_recent(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|shard| self.sweep(&mut shard.table.lock(), now))
            .sum()
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.table.lock().len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the algorithm's parameters while the limiter is in use (through `&self`, so an
    /// `Arc<KeyedLimiter>` shared by many tasks), carrying every key's state over at the
    /// current time (see [`DirectLimiter::set_algorithm`](crate::DirectLimiter::set_algorithm)):
    /// what each key has used counts against the new limit. Decisions wait while every shard
    /// is locked for the change, in the same order
    /// [`decide_together`](crate::limiter::decide_together) locks them.
    ///
    /// With an [`AnyAlgorithm`](crate::AnyAlgorithm), switching to another *kind* of algorithm
    /// starts every key afresh, as if first seen now: what each key spent under the old
    /// algorithm is forgotten.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use sluicegate::{FixedWindow, KeyedLimiter, ManualClock};
    ///
    /// let limiter = Arc::new(KeyedLimiter::with_clock(
    ///     FixedWindow::new(5, Duration::from_secs(60))?,
    ///     ManualClock::new(0),
    /// ));
    /// for _ in 0..3 {
    ///     assert!(limiter.check(&"alice")?.allowed());
    /// }
    /// let shared = Arc::clone(&limiter);
    /// shared.set_algorithm(FixedWindow::new(10, Duration::from_secs(60))?);
    /// assert_eq!(limiter.check(&"alice")?.remaining(), 6, "her 3 still count");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_algorithm(&self, new: A) {
        let mut locked: Vec<_> = self.shards.iter().map(|s| s.table.lock()).collect();
        let now = self.clock.now();
        let new = Arc::new(new);
        for shard in &mut locked {
            let ShardKeys { keys, algorithm } = &mut **shard;
            for (_, state) in keys.iter_mut() {
                algorithm.carry_over(&new, state, now);
            }
            *algorithm = Arc::clone(&new);
        }
        self.algorithm.store(new);
    }

    /// A copy of `key`'s state, if the key is held.
    pub fn state_of(&self, key: &K) -> Option<A::State> {
        let hash = self.hasher.hash_one(key);
        let table = self.shard(hash).table.lock();
        table.find(hash, |(k, _)| k == key).map(|(_, s)| s.clone())
    }
}

impl<K, A: Algorithm, C: Clock> Drop for KeyedLimiter<K, A, C> {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            let held: usize = self.shards.iter().map(|s| s.table.lock().len()).sum();
            budget.give_back(held);
        }
    }
}

impl<K, A: Algorithm + std::fmt::Debug, C: Clock> std::fmt::Debug for KeyedLimiter<K, A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("algorithm", &**self.algorithm.load())
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use foldhash::SharedSeed;
    use foldhash::fast::SeedableRandomState;

    use super::{KeyedLimiter, SHARDS};
    use crate::{Gcra, SystemClock};

    type Limiter = KeyedLimiter<u64, Gcra, SystemClock>;

    /// The most of `keys` one shard gets, under foldhash with the given seeds.
    fn fullest_shard(seed: u64, shared: &'static SharedSeed, keys: std::ops::Range<u64>) -> usize {
        let hasher = SeedableRandomState::with_seed(seed, shared);
        let mut counts = [0usize; SHARDS];
        for key in keys {
            counts[Limiter::shard_index(hasher.hash_one(key))] += 1;
        }
        counts.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn consecutive_integer_keys_spread_over_every_shard_whatever_the_seed() {
        // 463: a seed under which the hash's own bits 48..54 put 1 429 of these keys in one
        // shard.
        static BAD: SharedSeed = SharedSeed::from_u64(463);
        assert!(fullest_shard(463, &BAD, 0..10_000) <= 2 * 10_000 / SHARDS);
        static SEEDS: [SharedSeed; 4] = [
            SharedSeed::from_u64(0),
            SharedSeed::from_u64(1),
            SharedSeed::from_u64(82),
            SharedSeed::from_u64(114),
        ];
        for shared in &SEEDS {
            for seed in 0..50 {
                let fullest = fullest_shard(seed, shared, 0..10_000);
                assert!(
                    fullest <= 2 * 10_000 / SHARDS,
                    "seed {seed}: {fullest} keys in one shard"
                );
            }
        }
    }
}
