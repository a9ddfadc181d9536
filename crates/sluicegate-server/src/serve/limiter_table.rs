//! The in-memory limiters behind the rules: one keyed limiter per configured limit, kept across
//! reloads while the limit is unchanged, so a reload never resets anyone's budget.

use std::collections::HashMap;
use std::sync::Arc;

use sluicegate::{
    AnyAlgorithm, ConfigError, FixedWindow, Gcra, KeyedLimiter, LeakyBucket, LeakyQueue,
    QueueDelay, SlidingLog, SlidingWindow, SystemClock, TokenBucket,
};
use sluicegate_rules::{Algorithm, Limit, RuleSet};

/// A limiter for one configured limit, keyed by counter key.
pub(crate) type Limiter = KeyedLimiter<String, AnyAlgorithm, SystemClock>;

/// What a configured limit is enforced by.
#[derive(Debug, Clone)]
pub(crate) enum Enforcer {
    /// A limiter.
    Limiter(Arc<Limiter>),
    /// Nothing ever passes (`requests_per_unit: 0`, the usual way to block a key).
    Never,
}

/// The limiters of one rule set, by rule id and limit index.
#[derive(Debug, Default)]
pub(crate) struct LimiterTable {
    by_rule: HashMap<String, Vec<(Limit, Enforcer)>>,
}

impl LimiterTable {
    /// Limiters for every limit in `rules`, reusing `previous`'s where the limit is unchanged.
    pub(crate) fn build(
        rules: &RuleSet,
        previous: Option<&LimiterTable>,
    ) -> Result<LimiterTable, ConfigError> {
        let mut by_rule = HashMap::new();
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                let old = previous.and_then(|p| p.by_rule.get(&rule.id));
                let mut enforcers = Vec::with_capacity(rule.limits.len());
                for (index, limit) in rule.limits.iter().enumerate() {
                    let reused = old
                        .and_then(|limits| limits.get(index))
                        .filter(|(old_limit, _)| old_limit == limit)
                        .map(|(_, enforcer)| enforcer.clone());
                    let enforcer = match reused {
                        Some(enforcer) => enforcer,
                        None => enforcer_for(limit)?,
                    };
                    enforcers.push((limit.clone(), enforcer));
                }
                by_rule.insert(rule.id.clone(), enforcers);
            }
        }
        Ok(LimiterTable { by_rule })
    }

    /// The enforcer of limit `index` of rule `rule_id`.
    pub(crate) fn get(&self, rule_id: &str, index: usize) -> Option<&Enforcer> {
        let (_, enforcer) = self.by_rule.get(rule_id)?.get(index)?;
        Some(enforcer)
    }
}

/// The algorithm enforcing `limit`, or `Never` for a limit of zero.
pub(crate) fn enforcer_for(limit: &Limit) -> Result<Enforcer, ConfigError> {
    if limit.requests_per_unit == 0 {
        return Ok(Enforcer::Never);
    }
    let algorithm = algorithm_for(limit)?;
    Ok(Enforcer::Limiter(Arc::new(KeyedLimiter::new(algorithm))))
}

fn algorithm_for(limit: &Limit) -> Result<AnyAlgorithm, ConfigError> {
    let count = u64::from(limit.requests_per_unit);
    let window = limit
        .window
        .map(|w| w.duration())
        .ok_or(ConfigError::MissingParameter {
            algorithm: "rate limit",
            name: "unit",
        })?;
    let rate = || sluicegate::Rate::new(count, window);
    Ok(match limit.algorithm {
        Algorithm::FixedWindow => FixedWindow::new(count, window)?.into(),
        Algorithm::SlidingLog => SlidingLog::new(count, window)?.into(),
        Algorithm::SlidingWindow { buckets } => SlidingWindow::new(count, window, buckets)?.into(),
        Algorithm::TokenBucket { burst } => TokenBucket::new(rate()?, burst)?.into(),
        Algorithm::Gcra { burst } => Gcra::new(rate()?, burst)?.into(),
        Algorithm::LeakyBucket { burst } => LeakyBucket::new(rate()?, burst)?.into(),
        Algorithm::LeakyQueue { burst, delay } => {
            let delay = delay.map_or(QueueDelay::NoDelay, QueueDelay::After);
            LeakyQueue::new(rate()?, burst, delay)?.into()
        }
        _ => {
            return Err(ConfigError::UnknownAlgorithm {
                name: limit.algorithm.name().to_owned(),
                known: "fixed-window, sliding-log, sliding-window, token-bucket, gcra, leaky-bucket, leaky-queue",
            });
        }
    })
}
