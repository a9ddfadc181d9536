//! Concurrency permits that give themselves back when dropped.

use std::hash::Hash;
use std::num::NonZeroU64;
use std::sync::Arc;

use crate::algorithm::Concurrency;
use crate::clock::Clock;
use crate::error::CheckError;
use crate::limiter::{DirectLimiter, KeyedLimiter};
use crate::state_machine::Op;

/// Permits held on a direct concurrency limit; released when dropped.
#[must_use = "the permits are released as soon as this is dropped"]
#[derive(Debug)]
pub struct ConcurrencyPermit<'a, C: Clock> {
    limiter: &'a DirectLimiter<Concurrency, C>,
    permits: NonZeroU64,
}

impl<C: Clock> Drop for ConcurrencyPermit<'_, C> {
    fn drop(&mut self) {
        // Cannot fail: these permits were taken and not yet given back.
        let _ = self.limiter.decide(self.permits, Op::Release);
    }
}

/// Permits held on one key of a keyed concurrency limit; released when dropped.
#[must_use = "the permits are released as soon as this is dropped"]
#[derive(Debug)]
pub struct KeyedConcurrencyPermit<'a, K: Hash + Eq + Clone, C: Clock> {
    limiter: &'a KeyedLimiter<K, Concurrency, C>,
    key: K,
    permits: NonZeroU64,
}

impl<K: Hash + Eq + Clone, C: Clock> Drop for KeyedConcurrencyPermit<'_, K, C> {
    fn drop(&mut self) {
        let _ = self.limiter.decide(&self.key, self.permits, Op::Release);
    }
}

/// Like [`KeyedConcurrencyPermit`], but owning a share of the limiter, to be moved into a task.
#[must_use = "the permits are released as soon as this is dropped"]
#[derive(Debug)]
pub struct OwnedConcurrencyPermit<K: Hash + Eq + Clone, C: Clock> {
    limiter: Arc<KeyedLimiter<K, Concurrency, C>>,
    key: K,
    permits: NonZeroU64,
}

impl<K: Hash + Eq + Clone, C: Clock> Drop for OwnedConcurrencyPermit<K, C> {
    fn drop(&mut self) {
        let _ = self.limiter.decide(&self.key, self.permits, Op::Release);
    }
}

impl<C: Clock> DirectLimiter<Concurrency, C> {
    /// Takes `permits` if that many are free, returning a guard that gives them back on drop;
    /// `None` if the limit is reached.
    ///
    /// ```
    /// use sluicegate::{Concurrency, DirectLimiter};
    /// use std::num::NonZeroU64;
    ///
    /// let limiter = DirectLimiter::new(Concurrency::new(1)?);
    /// let held = limiter.try_hold(NonZeroU64::MIN)?.expect("one is free");
    /// assert!(limiter.try_hold(NonZeroU64::MIN)?.is_none());
    /// drop(held);
    /// assert!(limiter.try_hold(NonZeroU64::MIN)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_hold(
        &self,
        permits: NonZeroU64,
    ) -> Result<Option<ConcurrencyPermit<'_, C>>, CheckError> {
        let decision = self.decide(permits, Op::Check)?;
        Ok(decision.allowed().then_some(ConcurrencyPermit {
            limiter: self,
            permits,
        }))
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, Concurrency, C> {
    /// Takes `permits` for `key` if free, returning a guard that gives them back on drop.
    pub fn try_hold(
        &self,
        key: &K,
        permits: NonZeroU64,
    ) -> Result<Option<KeyedConcurrencyPermit<'_, K, C>>, CheckError> {
        let decision = self.decide(key, permits, Op::Check)?;
        Ok(decision.allowed().then(|| KeyedConcurrencyPermit {
            limiter: self,
            key: key.clone(),
            permits,
        }))
    }

    /// Like [`try_hold`](Self::try_hold), with a guard that owns a share of the limiter.
    pub fn try_hold_owned(
        self: &Arc<Self>,
        key: &K,
        permits: NonZeroU64,
    ) -> Result<Option<OwnedConcurrencyPermit<K, C>>, CheckError> {
        let decision = self.decide(key, permits, Op::Check)?;
        Ok(decision.allowed().then(|| OwnedConcurrencyPermit {
            limiter: Arc::clone(self),
            key: key.clone(),
            permits,
        }))
    }
}
