//! The cap on live counter keys across the whole service (`--max-keys`): every in-memory
//! limiter, per-request overrides included, takes its keys from one [`KeyBudget`].
//!
//! At the cap a request that needs a new key is decided without charging anything: the
//! limits it names are peeked (a key already limited still denies it), and if they would all
//! allow it, `open` and `local` let it pass while `closed` denies it. A key that exists is
//! never evicted to make room, so nobody's budget is ever reset by a flood of new keys. Keys
//! come back to the budget as their state turns fresh: each limiter sweeps its own when it
//! meets the cap, and the engine sweeps all of them at most once a second while refusals last.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use sluicegate::Micros;
use sluicegate::limiter::KeyBudget;
use sluicegate_redis::{FailurePolicy, LogThrottle};

use crate::serve::metrics::Metrics;

/// The default `--max-keys`: about 150 MB of counters with typical descriptors (a user id or
/// an address, a few short entries), and bounded by the descriptor size cap at worst (see
/// BENCHMARKS.md, `scripts/abuse.sh`).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The engine sweeps every limiter at most this often (engine time) while keys are refused.
const SWEEP_EVERY: Micros = 1_000_000;

/// The service-wide key budget and what happens at its cap.
#[derive(Debug)]
pub(crate) struct KeyCap {
    budget: Arc<KeyBudget>,
    /// The answer at the cap: `closed` denies, `open` and `local` allow uncharged.
    policy: FailurePolicy,
    refusals: Counter,
    log: LogThrottle,
    /// Set by a refusal; the engine sweeps every limiter when it is due.
    sweep_wanted: AtomicBool,
    last_sweep: AtomicU64,
}

impl KeyCap {
    pub(crate) fn new(max_keys: usize, policy: FailurePolicy, metrics: &Metrics) -> KeyCap {
        KeyCap {
            budget: Arc::new(KeyBudget::new(max_keys)),
            policy,
            refusals: metrics.key_cap_refusals.clone(),
            log: LogThrottle::new(Duration::from_secs(5)),
            sweep_wanted: AtomicBool::new(false),
            last_sweep: AtomicU64::new(0),
        }
    }

    /// The budget every in-memory limiter takes its keys from.
    pub(crate) fn budget(&self) -> &Arc<KeyBudget> {
        &self.budget
    }

    /// Whether a request refused at the cap is denied (`closed`) rather than let through.
    pub(crate) fn denies(&self) -> bool {
        self.policy == FailurePolicy::Closed
    }

    /// Counts and logs a request refused a new key.
    pub(crate) fn refused(&self) {
        self.refusals.inc();
        self.sweep_wanted.store(true, Ordering::Relaxed);
        self.log.write(|left_out| {
            tracing::warn!(
                max_keys = self.budget.max_keys(),
                policy = ?self.policy,
                refused_since_last_warning = left_out,
                "counter key cap reached: requests needing a new key are answered by the failure policy, uncharged"
            );
        });
    }

    /// The cap as one call meets it (see [`CallCap`]).
    pub(crate) fn for_call(&self) -> CallCap<'_> {
        CallCap {
            keys: self,
            met: AtomicBool::new(false),
        }
    }

    /// Whether the engine should sweep every limiter now (refusals since the last sweep, and
    /// at least a second since it); claims the sweep if so.
    pub(crate) fn claim_sweep(&self, now: impl FnOnce() -> Micros) -> bool {
        if !self.sweep_wanted.load(Ordering::Relaxed) {
            return false;
        }
        let now = now();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SWEEP_EVERY {
            return false;
        }
        let claimed = self
            .last_sweep
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if claimed {
            self.sweep_wanted.store(false, Ordering::Relaxed);
        }
        claimed
    }
}

/// The key cap as one call meets it: a call whose limits meet the cap several times (its
/// enforcing limits, then a shadow-mode one) is one refused request, counted when the call
/// is done.
#[derive(Debug)]
pub(crate) struct CallCap<'k> {
    keys: &'k KeyCap,
    met: AtomicBool,
}

impl CallCap<'_> {
    /// Notes that a new key was refused for this call.
    pub(crate) fn refused(&self) {
        self.met.store(true, Ordering::Relaxed);
    }

    /// Whether a request refused at the cap is denied (`closed`) rather than let through.
    pub(crate) fn denies(&self) -> bool {
        self.keys.denies()
    }
}

impl Drop for CallCap<'_> {
    fn drop(&mut self) {
        if *self.met.get_mut() {
            self.keys.refused();
        }
    }
}
