//! The in-memory limiters behind the rules: one keyed limiter per configured limit, kept across
//! reloads while the limit is unchanged, so a reload never resets anyone's budget.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::{Algorithm as _, AnyAlgorithm, KeyedLimiter};
use sluicegate_rules::{Limit, RuleSet};

use crate::serve::protocol::{CurrentLimit, EnvoyUnit};

use crate::serve::clock::ServiceClock;
use crate::serve::engine_error::EngineError;
use crate::serve::key_cap::KeyCap;
use crate::serve::per_limit::PerLimit;
use sluicegate_http::rate_limit::LimitInfo;

/// A limiter for one configured limit, keyed by counter key.
pub(crate) type Limiter = KeyedLimiter<String, AnyAlgorithm, ServiceClock>;

/// What a configured limit is enforced by.
#[derive(Debug, Clone)]
pub(crate) enum Enforcer {
    /// A limiter.
    Limiter(Arc<Limiter>),
    /// Nothing ever passes (`requests_per_unit: 0`, the usual way to block a key).
    Never,
}

/// A configured limit in memory: what enforces it, and how answers report it (made once per
/// limit: the report's `RateLimit-Policy` header is not written anew for every answer).
#[derive(Debug, Clone)]
pub(crate) struct MemoryLimit {
    pub(crate) enforcer: Enforcer,
    pub(crate) report: CurrentLimit,
}

/// The in-memory limiters of one rule set, by rule id and limit index.
pub(crate) type LimiterTable = PerLimit<MemoryLimit>;

/// A limiter kept across a reload whose parameters changed: the new algorithm to put in it
/// with [`Limiter::set_algorithm`] once the whole new rule set has been accepted (so that
/// rules refused on reload change nothing).
pub(crate) type Rerate = (Arc<Limiter>, AnyAlgorithm);

/// Limiters for every limit in `rules`, reusing `previous`'s where the limit is unchanged and,
/// where only its parameters changed, its limiter too, with every key's state carried over
/// to the new parameters (returned to apply, see [`Rerate`]): a reload that changes a rate
/// keeps what each key has used. With `count_denied`, every limiter must be able to count
/// denied requests ([`Op::Charge`]).
pub(crate) fn build_limiter_table(
    rules: &RuleSet,
    previous: Option<&LimiterTable>,
    count_denied: bool,
    clock: &ServiceClock,
    keys: &KeyCap,
) -> Result<(LimiterTable, Vec<Rerate>), EngineError> {
    // What the rules mean is the same here as anywhere; what the service cannot do (hold a
    // request for a shaping wait) is refused at its place in the file.
    rules.check_for_service().map_err(EngineError::Refused)?;
    let mut rerates = Vec::new();
    let table = PerLimit::build(rules, previous, |rule, _, limit, before| {
        let algorithm = limit.algorithm.clone();
        if let Some(algorithm) = &algorithm {
            if count_denied && !algorithm.supports(Op::Charge) {
                return Err(EngineError::CannotCountDenied {
                    file: rule.source.file.clone(),
                    position: rule.source.position,
                    rule: rule.id.clone(),
                    algorithm: limit.algorithm_name,
                });
            }
        }
        let enforcer = match (before.map(|b| &b.enforcer), algorithm) {
            (Some(Enforcer::Limiter(kept)), Some(algorithm)) => {
                rerates.push((Arc::clone(kept), algorithm));
                Enforcer::Limiter(Arc::clone(kept))
            }
            (_, Some(algorithm)) => Enforcer::Limiter(new_limiter(algorithm, clock, keys)),
            (_, None) => Enforcer::Never,
        };
        Ok(MemoryLimit {
            enforcer,
            report: report_of(limit),
        })
    })?;
    Ok((table, rerates))
}

/// How answers report `limit`.
fn report_of(limit: &Limit) -> CurrentLimit {
    let window = limit.window.duration();
    CurrentLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit: unit_of(window),
        window,
        // Also a limit of zero, which has no algorithm to ask but resets as its window would.
        aligned: limit.algorithm_name == "fixed-window",
        policy: LimitInfo::rate(
            limit.name.as_deref().unwrap_or_default(),
            u64::from(limit.requests_per_unit),
            window,
        ),
    }
}

/// The Envoy unit a window is, or `Unknown` for other periods.
fn unit_of(window: Duration) -> EnvoyUnit {
    (1..=7)
        .filter_map(EnvoyUnit::from_proto_number)
        .find(|unit| unit.duration() == Some(window))
        .unwrap_or(EnvoyUnit::Unknown)
}

/// The algorithm enforcing `limit` on `clock`, its keys counted in `keys`, or `Never` for a
/// limit of zero.
pub(crate) fn enforcer_for(limit: &Limit, clock: &ServiceClock, keys: &KeyCap) -> Enforcer {
    match &limit.algorithm {
        Some(algorithm) => Enforcer::Limiter(new_limiter(algorithm.clone(), clock, keys)),
        None => Enforcer::Never,
    }
}

/// A limiter of `algorithm` on `clock`, its keys counted in `keys`.
fn new_limiter(algorithm: AnyAlgorithm, clock: &ServiceClock, keys: &KeyCap) -> Arc<Limiter> {
    let limiter = KeyedLimiter::with_clock(algorithm, clock.clone())
        .with_key_budget(Arc::clone(keys.budget()));
    Arc::new(limiter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::Metrics;
    use sluicegate_redis::FailurePolicy;
    use sluicegate_rules::LoadOptions;

    fn table_of(yaml: &str) -> Result<LimiterTable, EngineError> {
        let rules = RuleSet::from_sources(
            &[("rules.yaml".into(), yaml.to_owned())],
            &LoadOptions::default(),
        )
        .map_err(EngineError::Refused)?;
        let keys = KeyCap::new(1000, FailurePolicy::Closed, &Metrics::default());
        let (clock, _) = ServiceClock::manual(0);
        build_limiter_table(&rules, None, false, &clock, &keys).map(|(table, _)| table)
    }

    #[test]
    fn the_service_refuses_a_shaping_limit_where_it_is_written() {
        let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky-queue, burst: 5}\n";
        let error = table_of(yaml)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with("rules.yaml:4:66: leaky-queue shapes"),
            "{error}"
        );
        let nodelay = yaml.replace("burst: 5}", "burst: 5, nodelay: true}");
        assert!(table_of(&nodelay).is_ok());
    }
}
