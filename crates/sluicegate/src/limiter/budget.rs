//! One cap on the keys of several keyed limiters together: a service with a limiter per rule
//! bounds its memory by the keys of all of them, not rule by rule.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A number of keys shared by the keyed limiters given it with
/// [`KeyedLimiter::with_key_budget`](crate::KeyedLimiter::with_key_budget): each new key takes
/// one, each key dropped (fresh again, or its limiter dropped) gives it back. When none is
/// left, a limiter first drops its own fresh keys; if that frees nothing, the new key is
/// refused with [`CheckError::KeyCapacityReached`](crate::CheckError::KeyCapacityReached), and
/// no key that is still limited is ever evicted to make room.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate::{CheckError, FixedWindow, KeyedLimiter, ManualClock};
/// use sluicegate::limiter::KeyBudget;
/// use std::time::Duration;
///
/// let budget = Arc::new(KeyBudget::new(2));
/// let clock = ManualClock::new(0);
/// let per_user = KeyedLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(60))?, clock.clone())
///     .with_key_budget(Arc::clone(&budget));
/// let per_path = KeyedLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(60))?, clock.clone())
///     .with_key_budget(Arc::clone(&budget));
/// assert!(per_user.check(&"alice")?.allowed());
/// assert!(per_path.check(&"/cart")?.allowed());
/// assert!(matches!(per_user.check(&"bob"), Err(CheckError::KeyCapacityReached { max_keys: 2 })));
/// assert!(per_user.check(&"alice")?.allowed(), "a held key is never refused");
/// clock.advance(Duration::from_secs(60));
/// assert!(per_user.check(&"bob")?.allowed(), "alice's window ended: her key made room");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyBudget {
    max_keys: usize,
    live: AtomicUsize,
    /// Refusals since the last sweep that freed nothing; [`SWEEP_NOW`] after one that did.
    refused_since_sweep: AtomicUsize,
}

/// `refused_since_sweep` after a productive sweep: the next refusal sweeps at once.
const SWEEP_NOW: usize = usize::MAX / 2;

/// A sweep scans every key of a limiter, so after one that freed nothing, this fraction of the
/// keys held are refused before the next: a flood of new keys at the cap costs amortised
/// constant time per request.
const SWEEP_EVERY_FRACTION: usize = 16;

impl KeyBudget {
    /// A budget of `max_keys` keys.
    pub fn new(max_keys: usize) -> KeyBudget {
        KeyBudget {
            max_keys,
            live: AtomicUsize::new(0),
            refused_since_sweep: AtomicUsize::new(SWEEP_NOW),
        }
    }

    /// The cap.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys held now by every limiter sharing the budget.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Takes `keys` if that many are left.
    pub(crate) fn try_take(&self, keys: usize) -> bool {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                live.checked_add(keys)
                    .filter(|&after| after <= self.max_keys)
            })
            .is_ok()
    }

    /// Counts a refusal, and says whether it is time to sweep for fresh keys.
    pub(crate) fn sweep_due(&self) -> bool {
        let refused = self.refused_since_sweep.fetch_add(1, Ordering::Relaxed);
        refused >= self.live() / SWEEP_EVERY_FRACTION
    }

    /// Records a sweep that freed `freed` keys.
    pub(crate) fn swept(&self, freed: usize) {
        let next = if freed > 0 { SWEEP_NOW } else { 0 };
        self.refused_since_sweep.store(next, Ordering::Relaxed);
    }

    /// Gives back `keys` that were dropped.
    pub(crate) fn give_back(&self, keys: usize) {
        if keys > 0 {
            let _ = self
                .live
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                    Some(live.saturating_sub(keys))
                });
        }
    }
}
