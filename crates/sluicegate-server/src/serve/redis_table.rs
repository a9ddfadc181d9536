//! The Redis limits behind the rules: one [`RedisLimit`] and key name per configured limit,
//! kept across reloads while the limit is unchanged, like the in-memory table.
//!
//! A limit's Redis keys are `PREFIX{COUNTER_KEY}NAME`, where the counter key is the rule
//! match's (`domain_key_value_...`) and the name is `RULE_ID#INDEX#ALGORITHM`: every replica
//! derives the same keys from the same rules, so they share one budget. The algorithm is part
//! of the name so that a rule whose algorithm changes starts afresh instead of reading another
//! algorithm's state; other parameter changes keep the stored state (the script adapts it).

use std::sync::Arc;

use sluicegate::Algorithm as _;
use sluicegate_redis::RedisLimit;
use sluicegate_rules::{Limit, RuleSet};

use crate::serve::engine_error::EngineError;
use crate::serve::per_limit::PerLimit;

/// A configured limit in Redis: its parameters and the name that keeps it apart from the
/// other limits on the same counter key (the Redis store's form of a limit).
pub(crate) use sluicegate_redis::NamedLimit as RedisEnforcer;

/// The Redis limits of one rule set, by rule id and limit index (`None`: nothing ever
/// passes, answered without asking Redis).
pub(crate) type RedisTable = PerLimit<Option<Arc<RedisEnforcer>>>;

/// Redis limits for every limit in `rules`, reusing `previous`'s where unchanged. A limit
/// Redis cannot run (Guava's smooth limiters) is refused at its place in the rule file.
pub(crate) fn build_redis_table(
    rules: &RuleSet,
    previous: Option<&RedisTable>,
) -> Result<RedisTable, EngineError> {
    rules
        .refuse_limits(|limit| {
            redis_limit_for(limit)
                .err()
                .map(|e| format!("with Redis: {e}"))
        })
        .map_err(EngineError::Refused)?;
    PerLimit::build(rules, previous, |rule, index, limit, _| {
        Ok(redis_limit_for(limit)?.map(|redis| {
            Arc::new(RedisEnforcer {
                name: format!("{}#{index}#{}", rule.id, redis.algorithm().name()),
                limit: redis,
            })
        }))
    })
}

/// The Redis limit enforcing `limit` as the in-memory table does, or `None` for a limit of
/// zero (nothing ever passes).
pub(crate) fn redis_limit_for(
    limit: &Limit,
) -> Result<Option<RedisLimit>, sluicegate::ConfigError> {
    limit
        .algorithm
        .as_ref()
        .map(RedisLimit::try_from)
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate::AnyAlgorithm;
    use sluicegate_rules::Window;
    use std::time::Duration;

    fn limit(requests_per_unit: u32, spec: &str) -> Result<Limit, sluicegate::ConfigError> {
        Ok(Limit {
            requests_per_unit,
            window: Window::Period(Duration::from_secs(60)),
            algorithm: match requests_per_unit {
                0 => None,
                _ => Some(spec.parse::<AnyAlgorithm>()?),
            },
            algorithm_name: "fixed-window",
            name: None,
            replaces: Vec::new(),
        })
    }

    #[test]
    fn every_rule_algorithm_maps_to_the_same_redis_algorithm()
    -> Result<(), Box<dyn std::error::Error>> {
        let cases = [
            ("fixed-window:limit=10,window=1m", "fixed-window", 10),
            ("sliding-log:limit=10,window=1m", "sliding-log", 10),
            (
                "sliding-window:limit=10,window=1m,buckets=6",
                "sliding-window",
                10,
            ),
            ("sliding-window:limit=10,window=1m", "sliding-window", 10),
            ("token-bucket:rate=10/1m,burst=4", "token-bucket", 4),
            ("gcra:rate=10/1m,burst=3", "gcra", 3),
            ("leaky-bucket:rate=10/1m,burst=5", "leaky-bucket", 5),
            ("leaky-queue:rate=10/1m,burst=2,nodelay", "leaky-queue", 3),
        ];
        for (spec, name, capacity) in cases {
            let redis = redis_limit_for(&limit(10, spec)?)?.ok_or("a limit of 10")?;
            assert_eq!((redis.name(), redis.capacity()), (name, capacity));
            assert_eq!(redis.algorithm(), &spec.parse::<AnyAlgorithm>()?);
        }
        assert!(redis_limit_for(&limit(0, "")?)?.is_none());
        let smooth = redis_limit_for(&limit(10, "smooth-bursty:rate=2")?);
        assert!(smooth.is_err_and(|e| e.to_string().contains("no Redis script")));
        Ok(())
    }

    #[test]
    fn a_limit_redis_cannot_run_is_refused_where_it_is_written() {
        let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 2\n      algorithm: smooth-bursty\n";
        let rules = RuleSet::from_sources(
            &[("rules.yaml".into(), yaml.to_owned())],
            &sluicegate_rules::LoadOptions::default(),
        );
        let error = rules
            .map_err(EngineError::Refused)
            .and_then(|rules| build_redis_table(&rules, None))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with("rules.yaml:7:18: with Redis: invalid algorithm `smooth-bursty`"),
            "{error}"
        );
    }
}
