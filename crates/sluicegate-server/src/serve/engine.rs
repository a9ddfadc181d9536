//! From a call to a verdict: match the descriptors against the rules, decide every limit they
//! name together (all charged or none; with `--count-denied`, every one charged), in memory or
//! in Redis, and describe the outcome.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluicegate::store::{MemoryStore, Now};
use sluicegate::{AnyAlgorithm, Clock as _};
use sluicegate_redis::{FailSafeLimit, FailurePolicy, RedisLimitError};
use sluicegate_rules::{Match, RuleSet};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::plumbing::{EVERY_RULE, Mode, ModeError, ModeTable, Modes};
use crate::serve::check::{Check, Decided, Role};
use crate::serve::clock::ServiceClock;
use crate::serve::counters::{BackendOptions, RedisBackend, RedisLimits, redis_backend};
use crate::serve::decide::decide_call;
use crate::serve::decision_totals::DecisionTotals;
use crate::serve::engine_error::EngineError;
use crate::serve::headers::HeaderOptions;
use crate::serve::key_cap::{DEFAULT_MAX_KEYS, KeyCap};
use crate::serve::limiter_table::{Enforcer, LimiterTable, build_limiter_table};
use crate::serve::metrics::{Metrics, ModeLabels};
use crate::serve::overrides::Overrides;
use crate::serve::protocol::{
    CallError, CallLimits, CallVerdict, CurrentLimit, DescriptorCall, LimitOverride, RateLimitCall,
};
use crate::serve::recorder::{Recorder, RuleRecords};
use crate::serve::redis_table::{RedisEnforcer, RedisTable, build_redis_table};
use crate::serve::verdict::{DescriptorStats, verdict};
use sluicegate_http::rate_limit::LimitInfo;

/// How the engine answers, beyond what the rules say.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Headers to add to answers.
    pub headers: HeaderOptions,
    /// Global shadow mode: decide and count as usual, but answer OK.
    pub shadow_mode: bool,
    /// Where counters live.
    pub backend: BackendOptions,
    /// Count every hit, allowed or denied, in every limit the call names, as
    /// envoyproxy/ratelimit does.
    pub count_denied: bool,
    /// Where "now" comes from: the system clock, or a manual clock in tests.
    pub clock: ServiceClock,
    /// Live counter keys in memory, across every limit (see `key_cap`).
    pub max_keys: usize,
    /// The answer to a request that needs a new key at the cap: `closed` denies, `open` and
    /// `local` let it pass uncharged.
    pub at_key_cap: FailurePolicy,
    /// The largest call decided.
    pub call_limits: CallLimits,
    /// Where the manual switch's modes are kept across restarts (none: in memory only).
    pub modes_file: Option<PathBuf>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            headers: HeaderOptions::default(),
            shadow_mode: false,
            backend: BackendOptions::default(),
            count_denied: false,
            clock: ServiceClock::default(),
            max_keys: DEFAULT_MAX_KEYS,
            at_key_cap: FailurePolicy::Local,
            call_limits: CallLimits::default(),
            modes_file: None,
        }
    }
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
    /// Where each rule's decisions are recorded, by rule index: a match whose stats key is
    /// its rule's id (most) counts there without looking its stats key up.
    pub(crate) records: RuleRecords,
}

/// Answers rate limit calls from the rules in force, keeping state in memory or in Redis.
#[derive(Debug)]
pub struct Engine {
    loaded: ArcSwap<LoadedRules>,
    overrides: Overrides,
    redis: Option<RedisBackend>,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    keys: KeyCap,
    modes: Modes,
}

/// What a call is checked against, each limit in its store's form `L`; inline for the usual
/// call of one or two descriptors of one limit each, so that planning one allocates nothing.
struct Plan<L> {
    checks: SmallVec<[Check<L>; 2]>,
    stats: SmallVec<[DescriptorStats; 2]>,
}

/// The domain label of calls in a domain no rule names: one series for all of them.
const UNKNOWN_DOMAIN: &str = "unknown";

impl Engine {
    /// An engine enforcing `rules`.
    pub fn new(
        rules: RuleSet,
        options: EngineOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, EngineError> {
        let keys = KeyCap::new(options.max_keys, options.at_key_cap, &metrics);
        let modes = Modes::load(options.modes_file.clone())?;
        mode_gauges(&metrics, &ModeTable::default(), &modes.table());
        let (limiters, _) =
            build_limiter_table(&rules, None, options.count_denied, &options.clock, &keys)?;
        let redis = match &options.backend {
            BackendOptions::Memory => None,
            // The over-limit cache's entries count against the same cap as the keys.
            BackendOptions::Redis(redis) => Some(redis_backend(
                redis.clone().over_limit_budget(Arc::clone(keys.budget())),
                &metrics,
            )),
        };
        let redis_limits = match redis {
            Some(_) => Some(build_redis_table(&rules, None)?),
            None => None,
        };
        metrics.rules_loaded.set(count_rules(&rules));
        let recorder = Recorder::new(&metrics, &options.clock);
        Ok(Engine {
            loaded: ArcSwap::from_pointee(LoadedRules {
                records: recorder.for_rules(&rules),
                rules,
                limiters,
                redis: redis_limits,
            }),
            overrides: Overrides::default(),
            redis,
            options,
            metrics,
            recorder,
            keys,
            modes,
        })
    }

    /// With Redis, one attempt to connect: `Ok(true)` if connected or without Redis,
    /// `Ok(false)` if Redis did not answer (the failure policy answers meanwhile; see
    /// [`Engine::connect_until_up`]), an error if the Redis settings are invalid.
    pub async fn connect(&self) -> Result<bool, RedisLimitError> {
        let Some(redis) = &self.redis else {
            return Ok(true);
        };
        redis.connect().await
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
        let (limiters, rerates) = build_limiter_table(
            &rules,
            Some(&previous.limiters),
            self.options.count_denied,
            &self.options.clock,
            &self.keys,
        )?;
        let redis = match &previous.redis {
            Some(table) => Some(build_redis_table(&rules, Some(table))?),
            None => None,
        };
        // Accepted: the limits whose rate changed keep their keys, carried over.
        for (limiter, algorithm) in rerates {
            limiter.set_algorithm(algorithm);
        }
        self.metrics.rules_loaded.set(count_rules(&rules));
        self.loaded.store(Arc::new(LoadedRules {
            records: self.recorder.for_rules(&rules),
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

    /// With Redis, gives back the permits leased and not used (at shutdown).
    pub async fn return_leases(&self) {
        if let Some(redis) = &self.redis {
            redis.return_leases().await;
        }
    }

    /// The metrics in Prometheus' text format, gauges brought up to date.
    pub fn render_metrics(&self) -> String {
        let live = i64::try_from(self.keys.budget().live()).unwrap_or(i64::MAX);
        self.metrics.keys.set(live);
        if let Some(redis) = &self.redis {
            self.metrics.over_limit.update(redis.over_limit_stats());
            self.metrics.lease.update(redis.lease_stats());
        }
        self.metrics.render()
    }

    /// The manual switch's modes.
    pub fn modes(&self) -> &Modes {
        &self.modes
    }

    /// Sets `rule`'s mode (`*`: the whole service) from the next call on, for `caller`;
    /// returns the previous mode. Logged and counted.
    pub fn set_mode(&self, rule: &str, mode: Mode, caller: SocketAddr) -> Result<Mode, ModeError> {
        let loaded = self.loaded.load();
        let known = |id: &str| {
            loaded
                .rules
                .domains()
                .any(|domain| loaded.rules.rules(domain).iter().any(|r| r.id == id))
        };
        let previous = self.modes.set(rule, mode, known, |before, after| {
            mode_gauges(&self.metrics, before, after);
        })?;
        self.metrics.mode_changes.inc();
        // What was denied under the old mode is asked again: an operator switching modes
        // expects every key's next answer to come from Redis.
        if let Some(redis) = &self.redis {
            redis.clear_over_limit_cache();
        }
        tracing::warn!(
            rule,
            mode = mode.name(),
            previous = previous.name(),
            %caller,
            "mode changed by the manual switch"
        );
        Ok(previous)
    }

    /// Where decisions and call durations are recorded.
    pub(crate) fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The service's clock.
    pub(crate) fn clock(&self) -> &ServiceClock {
        &self.options.clock
    }

    /// The Redis backend, if counters live there.
    pub(crate) fn redis(&self) -> Option<&RedisBackend> {
        self.redis.as_ref()
    }

    /// The in-memory key budget.
    pub(crate) fn keys(&self) -> &KeyCap {
        &self.keys
    }

    /// Checks a call's size against the configured caps (the transports call this before
    /// [`Engine::should_rate_limit`]), counting the calls refused.
    pub fn check_call_size(&self, call: &RateLimitCall) -> Result<(), CallError> {
        let checked = call.check_size(&self.options.call_limits);
        if checked.is_err() {
            self.metrics.oversized_calls.inc();
        }
        checked
    }

    /// Answers a (validated) call. With Redis, within the Redis timeout whatever Redis does.
    pub async fn should_rate_limit(&self, call: &RateLimitCall) -> CallVerdict {
        let Some(redis) = &self.redis else {
            let loaded = self.loaded.load();
            let Plan { checks, stats } = self.plan(call, &loaded, |memory, _| match memory {
                Enforcer::Limiter(limiter) => Some(Arc::clone(limiter)),
                Enforcer::Never => None,
            });
            let store = MemoryStore::<AnyAlgorithm, ServiceClock>::new();
            let decide = decide_call(
                &store,
                &checks,
                self.options.count_denied,
                &self.keys,
                Now::Store,
            );
            let decided = decide.await;
            let verdict = self.verdict(call.descriptors.len(), &stats, decided, &loaded);
            self.sweep_if_at_key_cap(&loaded);
            return verdict;
        };
        // Boxed: inline, the Redis call's state (about 2 KB) would make every caller's future,
        // in-memory calls included, that large, a big allocation and copy per call.
        Box::pin(self.should_rate_limit_on_redis(redis, call)).await
    }

    async fn should_rate_limit_on_redis(
        &self,
        redis: &RedisBackend,
        call: &RateLimitCall,
    ) -> CallVerdict {
        // Held across the Redis call: a reload meanwhile does not change this call's rules.
        let loaded = self.loaded.load_full();
        let Plan { checks, stats } = self.plan(call, &loaded, both_limits);
        // One timeout for the whole call, however many times it asks Redis.
        let store = redis
            .store()
            .until(Instant::now() + redis.settings().timeout);
        let now = self.options.clock.store_now();
        let decided =
            decide_call(&store, &checks, self.options.count_denied, &self.keys, now).await;
        let verdict = self.verdict(call.descriptors.len(), &stats, decided, &loaded);
        self.sweep_if_at_key_cap(&loaded);
        verdict
    }

    /// After refusals at the key cap, drops the fresh keys of every limiter (at most once a
    /// second): the keys that went fresh in one limit make room for new keys in another.
    fn sweep_if_at_key_cap(&self, loaded: &LoadedRules) {
        if !self.keys.claim_sweep(|| self.options.clock.now()) {
            return;
        }
        for limiter in loaded.limiters.values() {
            if let Enforcer::Limiter(limiter) = &limiter.enforcer {
                limiter.retain_recent();
            }
        }
        self.overrides.retain_recent();
    }

    fn verdict<L>(
        &self,
        descriptors: usize,
        stats: &[DescriptorStats],
        decided: Decided<'_, L>,
        loaded: &LoadedRules,
    ) -> CallVerdict {
        // Read once, for the live page (and the fixed windows' resets).
        let now = self.options.clock.now();
        verdict(
            descriptors,
            stats,
            decided,
            &loaded.records,
            now,
            self.options.shadow_mode,
            &self.options.headers,
        )
    }

    /// The limits each descriptor names, each in the store's form (`limit_of` the limit in
    /// memory and in Redis; `None`: nothing passes), and what is recorded of each descriptor.
    fn plan<L>(
        &self,
        call: &RateLimitCall,
        loaded: &LoadedRules,
        limit_of: impl Fn(&Enforcer, Option<&Arc<RedisEnforcer>>) -> Option<L>,
    ) -> Plan<L> {
        let known_domain = loaded.rules.has_domain(&call.domain);
        let domain_label = if known_domain {
            call.domain.as_str()
        } else {
            UNKNOWN_DOMAIN
        };
        let totals = |rule: &str| self.recorder.totals().get(domain_label, rule);
        let modes = self.modes.table();
        let matches = find_all(&loaded.rules, call);
        let mut checks = SmallVec::new();
        let mut stats = SmallVec::with_capacity(call.descriptors.len());
        let no_limit = |totals: Arc<DecisionTotals>| DescriptorStats {
            totals,
            role: Role::Enforce,
            unlimited: false,
            rule: None,
        };
        for (index, (descriptor, found)) in call.descriptors.iter().zip(matches).enumerate() {
            // Zero hits: checked, never charged.
            let (permits, check_only) = match NonZeroU64::new(descriptor.hits) {
                Some(hits) => (hits, false),
                None => (NonZeroU64::MIN, true),
            };
            // The manual switch first, then the rule's own flags, then the hits.
            let role_of = |mode: Mode, rule_role: Role| match mode {
                Mode::Open => Role::CheckOnly,
                Mode::Closed => Role::Enforce,
                Mode::Shadow if !check_only => Role::Shadow,
                Mode::Enforce if !check_only => rule_role,
                Mode::Shadow | Mode::Enforce => Role::CheckOnly,
            };
            // An override counts only in a domain the rules name, as upstream.
            if let Some(limit_override) = descriptor.limit_override.filter(|_| known_domain) {
                let mode = modes.every_rule;
                let Some(enforcer) = self.override_enforcer(limit_override) else {
                    stats.push(no_limit(totals("limit_override")));
                    continue;
                };
                let limit = match mode {
                    Mode::Closed => None,
                    _ => {
                        let redis = self
                            .redis
                            .as_ref()
                            .and_then(|_| self.overrides.redis(limit_override));
                        limit_of(&enforcer, redis.as_ref())
                    }
                };
                checks.push(Check {
                    descriptor: index,
                    report: override_report(limit_override),
                    limit,
                    key: override_key(&call.domain, &descriptor.entries),
                    permits,
                    role: role_of(mode, Role::Enforce),
                });
                stats.push(DescriptorStats {
                    totals: totals("limit_override"),
                    role: role_of(mode, Role::Enforce),
                    unlimited: false,
                    rule: None,
                });
                continue;
            }
            let Some(mut found) = found else {
                stats.push(no_limit(totals("")));
                continue;
            };
            let mode = modes.of(&found.rule.id);
            let role = role_of(
                mode,
                if found.rule.shadow_mode {
                    Role::Shadow
                } else if found.rule.quota_mode {
                    Role::Quota
                } else {
                    Role::Enforce
                },
            );
            let rule_totals = loaded.records.totals_of(found.rule.index()).cloned();
            let descriptor_totals = match (&found.stats_key, rule_totals) {
                // Borrowed: the rule's id, whose totals were found when the rules loaded.
                (Cow::Borrowed(_), Some(by_rule)) => by_rule,
                // From the request's values: kept while there is room, else the rule's.
                (Cow::Owned(key), by_rule) => self
                    .recorder
                    .totals()
                    .get_if_room(domain_label, key)
                    .or(by_rule)
                    .unwrap_or_else(|| totals(&found.rule.id)),
                (Cow::Borrowed(key), None) => totals(key),
            };
            stats.push(DescriptorStats {
                totals: descriptor_totals,
                role,
                unlimited: found.rule.unlimited,
                rule: Some(found.rule.index()),
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
                let limit = match mode {
                    // Closed: nothing passes, and nothing is asked of any store.
                    Mode::Closed => None,
                    _ => {
                        let redis = loaded
                            .redis
                            .as_ref()
                            .and_then(|table| table.get(found.rule, position))
                            .and_then(Option::as_ref);
                        limit_of(&memory.enforcer, redis)
                    }
                };
                checks.push(Check {
                    descriptor: index,
                    report: memory.report.clone(),
                    limit,
                    key,
                    permits,
                    role,
                });
            }
        }
        Plan { checks, stats }
    }

    /// The in-memory enforcer of an override. With no room for a new override, the call is
    /// answered as at the key cap: `closed` denies it (nothing passes), otherwise the
    /// override is not applied.
    fn override_enforcer(&self, limit_override: LimitOverride) -> Option<Enforcer> {
        let found = self
            .overrides
            .memory(limit_override, &self.options.clock, &self.keys);
        if found.is_none() {
            self.keys.refused();
            if self.keys.denies() {
                return Some(Enforcer::Never);
            }
        }
        found
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

/// A limit in Redis with its in-memory twin (the `local` policy's), or `None` if either says
/// nothing passes.
fn both_limits(memory: &Enforcer, redis: Option<&Arc<RedisEnforcer>>) -> Option<RedisLimits> {
    match (memory, redis) {
        (Enforcer::Limiter(local), Some(primary)) => Some(FailSafeLimit {
            primary: Arc::clone(primary),
            local: Arc::clone(local),
        }),
        _ => None,
    }
}

fn override_report(limit_override: LimitOverride) -> CurrentLimit {
    let window = limit_override.unit.duration().unwrap_or(Duration::ZERO);
    CurrentLimit {
        name: String::new(),
        requests_per_unit: limit_override.requests_per_unit,
        unit: limit_override.unit,
        window,
        aligned: true,
        policy: LimitInfo::rate("", u64::from(limit_override.requests_per_unit), window),
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

fn count_rules(rules: &RuleSet) -> i64 {
    let count: usize = rules.domains().map(|d| rules.rules(d).len()).sum();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Brings the mode gauges from `before` to `after`: 1 for each rule (and `*`) in a mode other
/// than `enforce`, removed when it goes back.
fn mode_gauges(metrics: &Metrics, before: &ModeTable, after: &ModeTable) {
    let entries = |table: &ModeTable| -> Vec<(String, Mode)> {
        std::iter::once((EVERY_RULE.to_owned(), table.every_rule))
            .chain(table.rules.iter().map(|(rule, mode)| (rule.clone(), *mode)))
            .filter(|(_, mode)| *mode != Mode::Enforce)
            .collect()
    };
    for (rule, mode) in entries(before) {
        metrics.modes.remove(&ModeLabels {
            rule,
            mode: mode.name(),
        });
    }
    for (rule, mode) in entries(after) {
        metrics
            .modes
            .get_or_create(&ModeLabels {
                rule,
                mode: mode.name(),
            })
            .set(1);
    }
}
