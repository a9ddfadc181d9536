//! From a call to a verdict: match the descriptors against the rules, decide every limit they
//! name together (all charged or none; with `--count-denied`, every one charged), in memory or
//! in Redis, and describe the outcome.

use std::borrow::Cow;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sluicegate::Decision;
use sluicegate_redis::RedisLimitError;
use sluicegate_rules::{Limit, Match, RuleSet, Window};
use smallvec::SmallVec;

use crate::serve::backend::{BackendOptions, RedisBackend};
use crate::serve::decision_counters::{CounterCache, RuleCounters};
use crate::serve::engine_error::EngineError;
use crate::serve::headers::{HeaderOptions, PolicyHeader, headers_for};
use crate::serve::limiter_table::{
    Enforcer, Limiter, LimiterTable, build_limiter_table, enforcer_for,
};
use crate::serve::memory_decide::decide_in_memory;
use crate::serve::metrics::Metrics;
use crate::serve::protocol::{
    Code, CurrentLimit, DescriptorCall, DescriptorVerdict, LimitOverride, RateLimitCall, Statuses,
    Verdict,
};
use crate::serve::redis_decide::decide_on_redis;
use crate::serve::redis_table::{RedisEnforcer, RedisTable, build_redis_table, redis_limit_for};

/// How the engine answers, beyond what the rules say.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Headers to add to answers.
    pub headers: HeaderOptions,
    /// Global shadow mode: decide and count as usual, but answer OK.
    pub shadow_mode: bool,
    /// Where counters live.
    pub backend: BackendOptions,
    /// Count every hit, allowed or denied, in every limit the call names, as
    /// envoyproxy/ratelimit does (in memory only, for now).
    pub count_denied: bool,
}

/// The rules in force and the limiters that enforce them, swapped as one on reload.
#[derive(Debug)]
pub struct LoadedRules {
    /// The rules.
    pub rules: RuleSet,
    /// In memory: the only state without Redis, and the `local` failure policy's with it.
    limiters: LimiterTable,
    /// With Redis: each limit's Redis parameters and key name.
    redis: Option<RedisTable>,
    /// Each rule's counters under its id, by rule index: a match whose stats key is its
    /// rule's id (most) counts through these without looking its stats key up.
    counters: Vec<Option<Arc<RuleCounters>>>,
}

/// Answers rate limit calls from the rules in force, keeping state in memory or in Redis.
#[derive(Debug)]
pub struct Engine {
    loaded: ArcSwap<LoadedRules>,
    overrides: Mutex<HashMap<LimitOverride, Arc<Limiter>>>,
    redis_overrides: Mutex<HashMap<LimitOverride, Arc<RedisEnforcer>>>,
    redis: Option<RedisBackend>,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    /// The counters of each domain and stats key, found in `metrics` once.
    counters: CounterCache,
}

/// What metrics record of a descriptor: the counters of its domain and its rule's stats key
/// (empty when no rule matched), and whether the rule is in shadow mode.
struct DescriptorStats {
    counters: Arc<RuleCounters>,
    shadow: bool,
}

/// What a call is checked against; inline for the usual call of one or two descriptors of one
/// limit each, so that planning one allocates nothing.
struct Plan {
    checks: SmallVec<[Check; 2]>,
    stats: SmallVec<[DescriptorStats; 2]>,
}

/// One limit a call is checked against.
pub(crate) struct Check {
    descriptor: usize,
    report: CurrentLimit,
    /// The limit in memory.
    pub(crate) enforcer: Enforcer,
    /// The limit in Redis, with Redis (`None` there: nothing ever passes).
    pub(crate) redis: Option<Arc<RedisEnforcer>>,
    /// The counter key.
    pub(crate) key: String,
    pub(crate) permits: NonZeroU64,
    /// Decided on its own, after the enforcing limits.
    pub(crate) shadow: bool,
}

/// Each check of a call with its decision (`None`: can never pass); inline for a few.
pub(crate) type Decided<'a> = SmallVec<[(&'a Check, Option<Decision>); 2]>;

impl Engine {
    /// An engine enforcing `rules`.
    pub fn new(
        rules: RuleSet,
        options: EngineOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, EngineError> {
        let limiters = build_limiter_table(&rules, None, options.count_denied)?;
        let redis = match &options.backend {
            BackendOptions::Memory => None,
            BackendOptions::Redis(redis) => Some(RedisBackend::new(redis.clone())),
        };
        let redis_limits = match redis {
            Some(_) => Some(build_redis_table(&rules, None)?),
            None => None,
        };
        metrics.rules_loaded.set(count_rules(&rules));
        let counters = CounterCache::default();
        Ok(Engine {
            loaded: ArcSwap::from_pointee(LoadedRules {
                counters: rule_counters(&counters, &rules),
                rules,
                limiters,
                redis: redis_limits,
            }),
            overrides: Mutex::new(HashMap::new()),
            redis_overrides: Mutex::new(HashMap::new()),
            redis,
            options,
            metrics,
            counters,
        })
    }

    /// With Redis, one attempt to connect: `Ok(true)` if connected or without Redis,
    /// `Ok(false)` if Redis did not answer (the failure policy answers meanwhile; see
    /// [`Engine::connect_until_up`]), an error if the Redis settings are invalid.
    pub async fn connect(&self) -> Result<bool, RedisLimitError> {
        let Some(redis) = &self.redis else {
            return Ok(true);
        };
        match redis.connect().await {
            Ok(()) => Ok(true),
            Err(error) if error.is_backend_failure() => {
                tracing::warn!(%error, policy = ?redis.options().failure_policy,
                    "redis unreachable at start; serving by the failure policy until it answers");
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// With Redis, retries connecting until it succeeds (the connection then reconnects by
    /// itself); returns at once without Redis.
    pub async fn connect_until_up(&self) {
        if let Some(redis) = &self.redis {
            redis.connect_until_up().await;
        }
    }

    /// Puts `rules` in force, keeping the state of every limit that did not change. Calls in
    /// flight finish on the rules they started with. Rules the engine cannot serve are
    /// refused, and the rules in force stay.
    pub fn replace_rules(&self, rules: RuleSet) -> Result<(), EngineError> {
        let previous = self.loaded.load();
        let limiters =
            build_limiter_table(&rules, Some(&previous.limiters), self.options.count_denied)?;
        let redis = match &previous.redis {
            Some(table) => Some(build_redis_table(&rules, Some(table))?),
            None => None,
        };
        self.metrics.rules_loaded.set(count_rules(&rules));
        self.loaded.store(Arc::new(LoadedRules {
            counters: rule_counters(&self.counters, &rules),
            rules,
            limiters,
            redis,
        }));
        Ok(())
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<LoadedRules> {
        self.loaded.load_full()
    }

    /// The metrics this engine records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Answers a (validated) call. With Redis, within the Redis timeout whatever Redis does.
    pub async fn should_rate_limit(&self, call: &RateLimitCall) -> Verdict {
        let Some(redis) = &self.redis else {
            let loaded = self.loaded.load();
            let Plan { checks, stats } = self.plan(call, &loaded);
            let decided = decide_in_memory(&checks, self.options.count_denied);
            return self.verdict(call.descriptors.len(), &stats, decided);
        };
        // Boxed: inline, the Redis call's state (about 2 KB) would make every caller's future,
        // in-memory calls included, that large, a big allocation and copy per call.
        Box::pin(self.should_rate_limit_on_redis(redis, call)).await
    }

    async fn should_rate_limit_on_redis(
        &self,
        redis: &RedisBackend,
        call: &RateLimitCall,
    ) -> Verdict {
        // Held across the Redis call: a reload meanwhile does not change this call's rules.
        let loaded = self.loaded.load_full();
        let Plan { checks, stats } = self.plan(call, &loaded);
        let decided =
            decide_on_redis(redis, &self.metrics, &checks, self.options.count_denied).await;
        self.verdict(call.descriptors.len(), &stats, decided)
    }

    fn verdict(
        &self,
        descriptors: usize,
        stats: &[DescriptorStats],
        decided: Decided<'_>,
    ) -> Verdict {
        let mut statuses = Statuses::from_elem(DescriptorVerdict::unlimited(), descriptors);
        for (check, decision) in decided {
            let status = verdict_for(check, decision);
            let slot = &mut statuses[check.descriptor];
            if tighter(&status, slot) {
                *slot = status;
            }
        }
        let mut overall = Code::Ok;
        let metrics = &*self.metrics;
        for (index, status) in statuses.iter_mut().enumerate() {
            let DescriptorStats { counters, shadow } = &stats[index];
            if status.current_limit.is_none() {
                counters.count_no_limit(metrics);
                continue;
            }
            if status.code == Code::OverLimit && *shadow {
                status.code = Code::Ok;
                counters.count_shadow_over_limit(metrics);
                continue;
            }
            if status.code == Code::OverLimit {
                overall = Code::OverLimit;
                counters.count_over_limit(metrics);
                continue;
            }
            if let Some(limit) = &status.current_limit {
                if u64::from(status.limit_remaining) * 5 < u64::from(limit.requests_per_unit) {
                    counters.count_near_limit(metrics);
                }
            }
            counters.count_ok(metrics);
        }
        if self.options.shadow_mode {
            overall = Code::Ok;
        }
        let headers = headers_for(&statuses, &self.options.headers);
        Verdict {
            overall,
            statuses,
            headers,
        }
    }

    /// The limits each descriptor names, and what metrics record of each descriptor.
    fn plan(&self, call: &RateLimitCall, loaded: &LoadedRules) -> Plan {
        let matches = find_all(&loaded.rules, call);
        let counters = |rule: &str| self.counters.get(&call.domain, rule);
        let mut checks = SmallVec::new();
        let mut stats = SmallVec::with_capacity(call.descriptors.len());
        for (index, (descriptor, found)) in call.descriptors.iter().zip(matches).enumerate() {
            let permits = NonZeroU64::new(descriptor.hits).unwrap_or(NonZeroU64::MIN);
            if let Some(limit_override) = descriptor.limit_override {
                let Some(enforcer) = self.override_enforcer(limit_override) else {
                    stats.push(DescriptorStats {
                        counters: counters(""),
                        shadow: false,
                    });
                    continue;
                };
                checks.push(Check {
                    descriptor: index,
                    report: override_report(limit_override),
                    enforcer,
                    redis: self.override_redis(limit_override),
                    key: override_key(&call.domain, &descriptor.entries),
                    permits,
                    shadow: false,
                });
                stats.push(DescriptorStats {
                    counters: counters("limit_override"),
                    shadow: false,
                });
                continue;
            }
            let Some(mut found) = found else {
                stats.push(DescriptorStats {
                    counters: counters(""),
                    shadow: false,
                });
                continue;
            };
            let shadow = found.rule.shadow_mode;
            let rule_counters = match found.stats_key {
                // Borrowed: the rule's id, whose counters were found when the rules loaded.
                Cow::Borrowed(_) => loaded.counters.get(found.rule.index()).cloned().flatten(),
                Cow::Owned(_) => None,
            };
            stats.push(DescriptorStats {
                counters: rule_counters.unwrap_or_else(|| counters(&found.stats_key)),
                shadow,
            });
            if found.rule.unlimited {
                continue;
            }
            let last = found.limits.len().saturating_sub(1);
            for (nth, limit) in found.limits.iter().enumerate() {
                // The last check takes the counter key; only earlier ones copy it.
                let key = if nth == last {
                    std::mem::take(&mut found.counter_key)
                } else {
                    found.counter_key.clone()
                };
                let Some(position) = found
                    .rule
                    .limits
                    .iter()
                    .position(|l| std::ptr::eq(l, *limit))
                else {
                    continue;
                };
                let Some(memory) = loaded.limiters.get(found.rule, position) else {
                    continue;
                };
                let redis = loaded
                    .redis
                    .as_ref()
                    .and_then(|table| table.get(found.rule, position))
                    .cloned()
                    .flatten();
                checks.push(Check {
                    descriptor: index,
                    report: memory.report.clone(),
                    enforcer: memory.enforcer.clone(),
                    redis,
                    key,
                    permits,
                    shadow,
                });
            }
        }
        Plan { checks, stats }
    }

    /// The Redis limit of a per-descriptor override (with Redis; `None` for zero requests).
    fn override_redis(&self, limit_override: LimitOverride) -> Option<Arc<RedisEnforcer>> {
        self.redis.as_ref()?;
        let mut overrides = self.redis_overrides.lock();
        if let Some(enforcer) = overrides.get(&limit_override) {
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
        overrides.insert(limit_override, Arc::clone(&enforcer));
        Some(enforcer)
    }

    fn override_enforcer(&self, limit_override: LimitOverride) -> Option<Enforcer> {
        if limit_override.requests_per_unit == 0 {
            return Some(Enforcer::Never);
        }
        let mut overrides = self.overrides.lock();
        if let Some(limiter) = overrides.get(&limit_override) {
            return Some(Enforcer::Limiter(Arc::clone(limiter)));
        }
        let limit = override_limit(limit_override)?;
        let Ok(Enforcer::Limiter(limiter)) = enforcer_for(&limit) else {
            return None;
        };
        overrides.insert(limit_override, Arc::clone(&limiter));
        Some(Enforcer::Limiter(limiter))
    }
}

/// The rule each descriptor of a call matched, in order.
enum Matches<'r> {
    One(std::iter::Once<Option<Match<'r>>>),
    Many(std::vec::IntoIter<Option<Match<'r>>>),
}

impl<'r> Iterator for Matches<'r> {
    type Item = Option<Match<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Matches::One(one) => one.next(),
            Matches::Many(many) => many.next(),
        }
    }
}

/// The rules matching each descriptor of `call`, as [`RuleSet::find_all`] finds them.
fn find_all<'r>(rules: &'r RuleSet, call: &RateLimitCall) -> Matches<'r> {
    // The common call names one descriptor: no vectors for it.
    if let [descriptor] = call.descriptors.as_slice() {
        let found = with_entries(descriptor, |entries| rules.find_one(&call.domain, entries));
        return Matches::One(std::iter::once(found));
    }
    let entries: Vec<Vec<(&str, &str)>> = call.descriptors.iter().map(entries_of).collect();
    let refs: Vec<&[(&str, &str)]> = entries.iter().map(Vec::as_slice).collect();
    Matches::Many(rules.find_all(&call.domain, &refs).into_iter())
}

/// Runs `f` on a descriptor's entries as `&str` pairs, kept on the stack when there are few.
fn with_entries<R>(descriptor: &DescriptorCall, f: impl FnOnce(&[(&str, &str)]) -> R) -> R {
    let mut inline = [("", ""); 8];
    if descriptor.entries.len() > inline.len() {
        return f(&entries_of(descriptor));
    }
    for (slot, (key, value)) in inline.iter_mut().zip(&descriptor.entries) {
        *slot = (key, value);
    }
    f(&inline[..descriptor.entries.len()])
}

fn entries_of(descriptor: &DescriptorCall) -> Vec<(&str, &str)> {
    descriptor
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The limit a per-descriptor override sets: fixed windows, as envoyproxy/ratelimit counts.
fn override_limit(limit_override: LimitOverride) -> Option<Limit> {
    Some(Limit {
        requests_per_unit: limit_override.requests_per_unit,
        window: Window::Period(limit_override.unit.duration()?),
        algorithm: sluicegate_rules::Algorithm::FixedWindow,
        name: None,
        replaces: Vec::new(),
    })
}

fn verdict_for(check: &Check, decision: Option<Decision>) -> DescriptorVerdict {
    match decision {
        Some(d) => DescriptorVerdict {
            code: if d.allowed() {
                Code::Ok
            } else {
                Code::OverLimit
            },
            limit_remaining: u32::try_from(d.remaining()).unwrap_or(u32::MAX),
            duration_until_reset: Some(d.reset_after()),
            retry_after: d.retry_after(),
            current_limit: Some(check.report.clone()),
        },
        // Can never pass: zero requests allowed, or more hits than the limit holds.
        None => DescriptorVerdict {
            code: Code::OverLimit,
            limit_remaining: 0,
            duration_until_reset: Some(check.report.window),
            retry_after: None,
            current_limit: Some(check.report.clone()),
        },
    }
}

/// Whether `candidate` describes a descriptor better than `current`: over the limit beats
/// under it; among equals, the fewest requests left.
fn tighter(candidate: &DescriptorVerdict, current: &DescriptorVerdict) -> bool {
    if current.current_limit.is_none() {
        return true;
    }
    match (candidate.code, current.code) {
        (Code::OverLimit, Code::Ok) => true,
        (Code::Ok, Code::OverLimit) => false,
        _ => candidate.limit_remaining < current.limit_remaining,
    }
}

fn override_report(limit_override: LimitOverride) -> CurrentLimit {
    let window = limit_override.unit.duration().unwrap_or(Duration::ZERO);
    CurrentLimit {
        name: String::new(),
        requests_per_unit: limit_override.requests_per_unit,
        unit: limit_override.unit,
        window,
        policy: PolicyHeader::new("", limit_override.requests_per_unit, window),
    }
}

/// envoyproxy/ratelimit's cache key for a descriptor: `domain_key_value_..._`.
fn override_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut key = format!("{domain}_");
    for (k, v) in entries {
        key.push_str(k);
        key.push('_');
        key.push_str(v);
        key.push('_');
    }
    key
}

/// Each rule's counters under its id (its stats key unless the request's values name it), by
/// rule index.
fn rule_counters(cache: &CounterCache, rules: &RuleSet) -> Vec<Option<Arc<RuleCounters>>> {
    let mut by_index = vec![None; rules.rule_count()];
    for domain in rules.domains() {
        for rule in rules.rules(domain) {
            if let Some(slot) = by_index.get_mut(rule.index()) {
                *slot = Some(cache.get(domain, &rule.id));
            }
        }
    }
    by_index
}

fn count_rules(rules: &RuleSet) -> i64 {
    let count: usize = rules.domains().map(|d| rules.rules(d).len()).sum();
    i64::try_from(count).unwrap_or(i64::MAX)
}
