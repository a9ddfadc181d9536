//! The in-memory limiters behind the rules: one keyed limiter per configured limit, kept across
//! reloads while the limit is unchanged, so a reload never resets anyone's budget.

use std::sync::Arc;

use sluicegate::{
    AnyAlgorithm, ConfigError, FixedWindow, Gcra, KeyedLimiter, LeakyBucket, LeakyQueue,
    QueueDelay, SlidingLog, SlidingWindow, SystemClock, TokenBucket,
};
use sluicegate_rules::{Algorithm, Limit, RuleSet};

use crate::serve::per_limit::PerLimit;

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

/// The in-memory limiters of one rule set, by rule id and limit index.
pub(crate) type LimiterTable = PerLimit<Enforcer>;

/// Limiters for every limit in `rules`, reusing `previous`'s where the limit is unchanged.
pub(crate) fn build_limiter_table(
    rules: &RuleSet,
    previous: Option<&LimiterTable>,
) -> Result<LimiterTable, ConfigError> {
    PerLimit::build(rules, previous, |_, _, limit| enforcer_for(limit))
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
    let window = limit.window.duration();
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
                known: Algorithm::NAMES,
            });
        }
    })
}
