//! The limits clients send in place of the configured ones (`RateLimitDescriptor.limit`), in
//! one bounded table: at most [`MAX_OVERRIDES`] distinct overrides at a time, each with its
//! keys counted in the service's key budget, and an override whose keys have all gone fresh
//! dropped to make room for a new one (which is exactly as if it had never been seen).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sluicegate::{Clock as _, Micros};

use crate::serve::clock::ServiceClock;
use crate::serve::key_cap::KeyCap;
use crate::serve::limiter_table::{Enforcer, Limiter, enforcer_for};
use crate::serve::protocol::LimitOverride;
use crate::serve::redis_table::{RedisEnforcer, redis_limit_for};
use sluicegate_rules::{Limit, Window};

/// Distinct overrides held at once, in memory and in the Redis parameter table alike.
pub(crate) const MAX_OVERRIDES: usize = 1024;

/// At the cap, idle overrides are looked for at most this often (engine time): a scan visits
/// every shard of every override's limiter.
const SCAN_EVERY: Micros = 1_000_000;

/// Every override in use, in memory and (with Redis) as Redis parameters.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    memory: Mutex<HashMap<LimitOverride, Arc<Limiter>>>,
    redis: Mutex<HashMap<LimitOverride, Arc<RedisEnforcer>>>,
    last_scan: AtomicU64,
}

impl Overrides {
    /// The in-memory enforcer of `limit_override`; at the cap with no idle override to drop,
    /// `None` (the caller answers as at the key cap).
    pub(crate) fn memory(
        &self,
        limit_override: LimitOverride,
        clock: &ServiceClock,
        keys: &KeyCap,
    ) -> Option<Enforcer> {
        if limit_override.requests_per_unit == 0 {
            return Some(Enforcer::Never);
        }
        let mut table = self.memory.lock();
        if let Some(limiter) = table.get(&limit_override) {
            return Some(Enforcer::Limiter(Arc::clone(limiter)));
        }
        if table.len() >= MAX_OVERRIDES && !self.drop_idle(&mut table, clock.now()) {
            return None;
        }
        let limit = override_limit(limit_override)?;
        let Enforcer::Limiter(limiter) = enforcer_for(&limit, clock, keys) else {
            return None;
        };
        table.insert(limit_override, Arc::clone(&limiter));
        Some(Enforcer::Limiter(limiter))
    }

    /// The Redis parameters of `limit_override` (`None` for zero requests: nothing passes).
    /// They hold no state (that is in Redis, under a name made from the override alone), so
    /// at the cap the table simply starts over.
    pub(crate) fn redis(&self, limit_override: LimitOverride) -> Option<Arc<RedisEnforcer>> {
        let mut table = self.redis.lock();
        if let Some(enforcer) = table.get(&limit_override) {
            return Some(Arc::clone(enforcer));
        }
        let limit = override_limit(limit_override)?;
        let redis = redis_limit_for(&limit).ok()??;
        let enforcer = Arc::new(RedisEnforcer {
            limit: redis,
            name: format!(
                "override#{}#{:?}",
                limit_override.requests_per_unit, limit_override.unit
            ),
        });
        if table.len() >= MAX_OVERRIDES {
            table.clear();
        }
        table.insert(limit_override, Arc::clone(&enforcer));
        Some(enforcer)
    }

    /// Drops the fresh keys of every override (the engine's sweep at the key cap).
    pub(crate) fn retain_recent(&self) {
        let limiters: Vec<Arc<Limiter>> = self.memory.lock().values().cloned().collect();
        for limiter in limiters {
            limiter.retain_recent();
        }
    }

    /// Distinct overrides held in memory.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.memory.lock().len()
    }

    /// Drops every override that holds no key and is not in use by a call in flight, at most
    /// once per [`SCAN_EVERY`]; says whether there is room now.
    fn drop_idle(&self, table: &mut HashMap<LimitOverride, Arc<Limiter>>, now: Micros) -> bool {
        let last = self.last_scan.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SCAN_EVERY && last != 0 {
            return false;
        }
        self.last_scan.store(now.max(1), Ordering::Relaxed);
        table.retain(|_, limiter| {
            limiter.retain_recent();
            Arc::strong_count(limiter) > 1 || !limiter.is_empty()
        });
        table.len() < MAX_OVERRIDES
    }
}

/// The limit an override sets: a fixed window, as envoyproxy/ratelimit counts.
fn override_limit(limit_override: LimitOverride) -> Option<Limit> {
    Some(Limit {
        requests_per_unit: limit_override.requests_per_unit,
        window: Window::Period(limit_override.unit.duration()?),
        // A limit of zero has no algorithm: nothing passes.
        algorithm: sluicegate::FixedWindow::new(
            u64::from(limit_override.requests_per_unit),
            limit_override.unit.duration()?,
        )
        .ok()
        .map(Into::into),
        algorithm_name: "fixed-window",
        name: None,
        replaces: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::Metrics;
    use crate::serve::protocol::EnvoyUnit;
    use sluicegate::state_machine::Op;
    use sluicegate_redis::FailurePolicy;
    use std::num::NonZeroU64;
    use std::time::Duration;

    fn per_day(requests_per_unit: u32) -> LimitOverride {
        LimitOverride {
            requests_per_unit,
            unit: EnvoyUnit::Day,
        }
    }

    #[test]
    fn the_table_stays_at_its_cap_and_frees_overrides_whose_keys_went_fresh()
    -> Result<(), Box<dyn std::error::Error>> {
        let (clock, manual) = ServiceClock::manual(86_400_000_000);
        let keys = KeyCap::new(1_000_000, FailurePolicy::Local, &Metrics::new());
        let overrides = Overrides::default();
        let charge = |o: LimitOverride| -> Result<bool, Box<dyn std::error::Error>> {
            let Some(Enforcer::Limiter(limiter)) = overrides.memory(o, &clock, &keys) else {
                return Ok(false);
            };
            let _ = limiter.decide(&"k".to_owned(), NonZeroU64::MIN, Op::Check)?;
            Ok(true)
        };
        for n in 1..=u32::try_from(MAX_OVERRIDES)? {
            assert!(charge(per_day(n))?);
        }
        assert!(
            !charge(per_day(5000))?,
            "full, every override holding a key"
        );
        assert_eq!(overrides.len(), MAX_OVERRIDES);
        // A day on, every key is fresh: the next new override finds room.
        manual.advance(Duration::from_secs(86_400));
        assert!(charge(per_day(5000))?);
        assert_eq!(overrides.len(), 1);
        assert!(
            overrides.redis(per_day(0)).is_none(),
            "zero: nothing passes"
        );
        Ok(())
    }
}
