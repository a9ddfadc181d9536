//! The Redis limits behind the rules: one [`RedisLimit`] and key name per configured limit,
//! kept across reloads while the limit is unchanged, like the in-memory table.
//!
//! A limit's Redis keys are `PREFIX{COUNTER_KEY}NAME`, where the counter key is the rule
//! match's (`domain_key_value_...`) and the name is `RULE_ID#INDEX#ALGORITHM`: every replica
//! derives the same keys from the same rules, so they share one budget. The algorithm is part
//! of the name so that a rule whose algorithm changes starts afresh instead of reading another
//! algorithm's state; other parameter changes keep the stored state (the script adapts it).

use std::sync::Arc;

use sluicegate::{ConfigError, QueueDelay, Rate};
use sluicegate_redis::RedisLimit;
use sluicegate_rules::{Algorithm, Limit, RuleSet};

use crate::serve::per_limit::PerLimit;

/// A configured limit in Redis: its parameters and the name that keeps it apart from the
/// other limits on the same counter key (the Redis store's form of a limit).
pub(crate) use sluicegate_redis::NamedLimit as RedisEnforcer;

/// The Redis limits of one rule set, by rule id and limit index (`None`: nothing ever
/// passes, answered without asking Redis).
pub(crate) type RedisTable = PerLimit<Option<Arc<RedisEnforcer>>>;

/// Redis limits for every limit in `rules`, reusing `previous`'s where unchanged.
pub(crate) fn build_redis_table(
    rules: &RuleSet,
    previous: Option<&RedisTable>,
) -> Result<RedisTable, ConfigError> {
    PerLimit::build(rules, previous, |rule, index, limit, _| {
        Ok(redis_limit_for(limit)?.map(|redis| {
            Arc::new(RedisEnforcer {
                name: format!("{}#{index}#{}", rule.id, limit.algorithm.name()),
                limit: redis,
            })
        }))
    })
}

/// The Redis limit enforcing `limit` as the in-memory table does, or `None` for a limit of
/// zero (nothing ever passes).
pub(crate) fn redis_limit_for(limit: &Limit) -> Result<Option<RedisLimit>, ConfigError> {
    if limit.requests_per_unit == 0 {
        return Ok(None);
    }
    let count = u64::from(limit.requests_per_unit);
    let window = limit.window.duration();
    let rate = || Rate::new(count, window);
    Ok(Some(match limit.algorithm {
        Algorithm::FixedWindow => RedisLimit::fixed_window(count, window)?,
        Algorithm::SlidingLog => RedisLimit::sliding_log(count, window)?,
        Algorithm::SlidingWindow { buckets } => RedisLimit::sliding_window(count, window, buckets)?,
        Algorithm::TokenBucket { burst } => RedisLimit::token_bucket(rate()?, burst)?,
        Algorithm::Gcra { burst } => RedisLimit::gcra(rate()?, burst)?,
        Algorithm::LeakyBucket { burst } => RedisLimit::leaky_bucket(rate()?, burst)?,
        Algorithm::LeakyQueue { burst, delay } => {
            let delay = delay.map_or(QueueDelay::NoDelay, QueueDelay::After);
            RedisLimit::leaky_queue(rate()?, burst, delay)?
        }
        _ => {
            return Err(ConfigError::UnknownAlgorithm {
                name: limit.algorithm.name().to_owned(),
                known: Algorithm::NAMES,
            });
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_rules::Window;
    use std::time::Duration;

    fn limit(requests_per_unit: u32, algorithm: Algorithm) -> Limit {
        Limit {
            requests_per_unit,
            window: Window::Period(Duration::from_secs(60)),
            algorithm,
            name: None,
            replaces: Vec::new(),
        }
    }

    #[test]
    fn every_rule_algorithm_maps_to_the_same_redis_algorithm()
    -> Result<(), Box<dyn std::error::Error>> {
        let cases = [
            (Algorithm::FixedWindow, "fixed-window", 10),
            (Algorithm::SlidingLog, "sliding-log", 10),
            (
                Algorithm::SlidingWindow { buckets: Some(6) },
                "sliding-window",
                10,
            ),
            (
                Algorithm::SlidingWindow { buckets: None },
                "sliding-window",
                10,
            ),
            (Algorithm::TokenBucket { burst: 4 }, "token-bucket", 4),
            (Algorithm::Gcra { burst: 3 }, "gcra", 3),
            (Algorithm::LeakyBucket { burst: 5 }, "leaky-bucket", 5),
            (
                Algorithm::LeakyQueue {
                    burst: 2,
                    delay: None,
                },
                "leaky-queue",
                3,
            ),
        ];
        for (algorithm, name, capacity) in cases {
            let redis = redis_limit_for(&limit(10, algorithm))?.ok_or("a limit of 10")?;
            assert_eq!((redis.name(), redis.capacity()), (name, capacity));
        }
        assert!(redis_limit_for(&limit(0, Algorithm::FixedWindow))?.is_none());
        Ok(())
    }
}
