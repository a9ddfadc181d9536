//! The store: a shared handle on Redis (single server or Cluster) and every call made of it:
//! several limits decided at once (`decide_all`), one limit alone (batched when it can be),
//! and the leases of concurrency limits. Calls go through the link (`connection.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use sluicegate::limiter::KeyBudget;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{ConfigError, Decision, Micros};

use crate::batch::{Batcher, OneCall};
use crate::connection::{Connection, Link, bounded};
use crate::error::RedisLimitError;
use crate::keys::KeyScheme;
use crate::lease::{Lease, LeaseOp, new_lease_id};
use crate::leasing::{LeaseConfig, LeaseStats, Leasing, Plan};
use crate::limit::{Joined, RedisLimit};
use crate::over_limit::{OverLimitCache, OverLimitStats};
use crate::reply::{
    LimitRequest, RedisMultiDecision, check_request, now_arg, parse_one_reply, parse_reply,
};
use crate::scripts::{Entry, OneEntry};

/// How a [`RedisStore`] connects and names its keys.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Prepended to every key (default `sluicegate:`); must not contain braces.
    pub prefix: String,
    /// The longest any call may take, connection attempts included (default 1 s). A call that
    /// takes longer fails with [`RedisLimitError::Timeout`].
    pub timeout: Duration,
    /// Added to every key's time to live, beyond the time until its state is fresh (default
    /// zero). Useful when callers pass their own `now` from clocks that may run behind Redis's.
    pub expiry_grace: Duration,
    /// How calls run the Lua code (default [`ScriptMode::Auto`]).
    pub scripts: ScriptMode,
    /// The most one-limit decisions (a GCRA, token bucket or fixed window checked alone) sent
    /// to a single Redis server in one call (default 64). Decisions that arrive while earlier
    /// calls are in flight wait for the next call and go out together, each decided and
    /// charged exactly as alone: under load this nearly halves Redis's time per decision,
    /// while a lone call still leaves at once. The price: with three calls out, a fourth
    /// caller waits for one of them to come back, and that wait counts in its `timeout`.
    /// 0 or 1 sends every decision in a call of its own, pipelined without limit. Redis
    /// Cluster connections never batch.
    pub max_batch: usize,
    /// The most denials the over-limit cache keeps (default 0: no cache). With it, a limit
    /// and key Redis denied until a retry time are answered in the process until then, with
    /// the decision Redis would give, for the algorithms and ops where that is exact (see
    /// [`sluicegate::over_limit`]): a hot key over its limit costs Redis one call per retry
    /// time instead of one per request, and nothing extra is ever admitted. Each entry takes
    /// a few hundred bytes plus its key. Hits and entries: [`RedisStore::over_limit_stats`].
    pub over_limit_cache: usize,
    /// A cap on keys the over-limit cache's entries are also taken from (a service's cap on
    /// counter keys across its limiters), if any: at the cap, a denial is not kept.
    pub over_limit_budget: Option<Arc<KeyBudget>>,
    /// Permit leasing (default `None`: off). With it, a hot call shape of leasing limits
    /// (fixed and sliding windows, GCRA, token and leaky buckets) takes a batch of permits
    /// from Redis in one call and grants them in the process, never beyond the limit (see
    /// [`sluicegate::lease`]): a hot key costs Redis one call per lease instead of one per
    /// request. The price: permits leased but unused are spent for a lease's life (at most
    /// `max_per_key` per process and key); a local grant's `remaining` is this process's
    /// view. Counts: [`RedisStore::lease_stats`].
    pub leasing: Option<LeaseConfig>,
}

/// How a [`RedisStore`] runs its Lua code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScriptMode {
    /// Redis Functions (`FCALL`; Redis 7 and later), the library loaded on first use and
    /// again on any node that lost it (a restart, `FUNCTION FLUSH`); `EVALSHA` scripts from
    /// the first sign that the server has no Functions.
    #[default]
    Auto,
    /// `EVALSHA` scripts only, as on Redis 6, each loaded on first use and after a
    /// `SCRIPT FLUSH` or restart. Redis runs a script's whole body on every call, so this
    /// costs more server time per decision.
    Eval,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            prefix: "sluicegate:".into(),
            timeout: Duration::from_secs(1),
            expiry_grace: Duration::ZERO,
            scripts: ScriptMode::Auto,
            max_batch: 64,
            over_limit_cache: 0,
            over_limit_budget: None,
            leasing: None,
        }
    }
}

impl StoreConfig {
    /// With an over-limit cache of at most `entries` denials (0: none); see
    /// [`StoreConfig::over_limit_cache`].
    pub fn with_over_limit_cache(mut self, entries: usize) -> StoreConfig {
        self.over_limit_cache = entries;
        self
    }

    /// With the over-limit cache's entries also taken from `budget`; see
    /// [`StoreConfig::over_limit_budget`].
    pub fn with_over_limit_budget(mut self, budget: Arc<KeyBudget>) -> StoreConfig {
        self.over_limit_budget = Some(budget);
        self
    }

    /// With permit leasing; see [`StoreConfig::leasing`].
    pub fn with_leasing(mut self, leasing: LeaseConfig) -> StoreConfig {
        self.leasing = Some(leasing);
        self
    }
}

/// A shared, cloneable handle on Redis: one multiplexed connection (per node, for Cluster)
/// that pipelines concurrent calls and reconnects by itself after Redis restarts.
#[derive(Clone)]
pub struct RedisStore {
    link: Link,
    pub(crate) keys: KeyScheme,
    pub(crate) grace_ms: u64,
    /// Where one-limit decisions go, if they are batched (see [`StoreConfig::max_batch`]).
    batcher: Option<Batcher>,
    /// Denials answered in the process (see [`StoreConfig::over_limit_cache`]), shared by
    /// every clone.
    over_limit: Option<Arc<OverLimitCache>>,
    /// Permits leased (see [`StoreConfig::leasing`]), shared by every clone.
    pub(crate) leasing: Option<Arc<Leasing>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("keys", &self.keys)
            .field("timeout", &self.link.timeout())
            .field("functions", &self.link.uses_functions())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port/db`).
    pub async fn connect(url: &str, config: StoreConfig) -> Result<RedisStore, RedisLimitError> {
        let keys = KeyScheme::new(&config.prefix)?;
        validate_leasing(&config)?;
        let client = redis::Client::open(url).map_err(|e| invalid_url(url, &e))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(Some(config.timeout))
            // Reconnect quickly and keep trying: each call is bounded by `timeout` anyway.
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(config.timeout.min(Duration::from_millis(500)))
            .set_number_of_retries(3);
        let connect = ConnectionManager::new_with_config(client, manager_config);
        let manager = bounded(config.timeout, connect).await?;
        let mut store = Self::with_connection(Connection::Single(manager), keys, &config);
        if config.max_batch > 1 {
            store.batcher = Some(Batcher::start(store.link.clone(), config.max_batch));
        }
        Ok(store)
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port`).
    pub async fn connect_cluster(
        nodes: &[&str],
        config: StoreConfig,
    ) -> Result<RedisStore, RedisLimitError> {
        let keys = KeyScheme::new(&config.prefix)?;
        validate_leasing(&config)?;
        let client = ClusterClientBuilder::new(nodes.iter().copied())
            .connection_timeout(config.timeout)
            .response_timeout(config.timeout)
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .build()
            .map_err(|e| invalid_url(&nodes.join(","), &e))?;
        let connection = bounded(config.timeout, client.get_async_connection()).await?;
        Ok(Self::with_connection(
            Connection::Cluster(connection),
            keys,
            &config,
        ))
    }

    fn with_connection(connection: Connection, keys: KeyScheme, config: &StoreConfig) -> Self {
        let grace_ms = u64::try_from(config.expiry_grace.as_millis()).unwrap_or(u64::MAX);
        RedisStore {
            link: Link::new(
                connection,
                config.timeout,
                config.scripts == ScriptMode::Auto,
            ),
            keys,
            grace_ms,
            batcher: None,
            over_limit: (config.over_limit_cache > 0).then(|| {
                Arc::new(OverLimitCache::new(
                    config.over_limit_cache,
                    config.over_limit_budget.clone(),
                ))
            }),
            leasing: config.leasing.map(|c| Arc::new(Leasing::new(c))),
        }
    }

    /// What leasing has done and holds (all zero without it).
    pub fn lease_stats(&self) -> LeaseStats {
        self.leasing
            .as_ref()
            .map(|leasing| leasing.stats())
            .unwrap_or_default()
    }

    /// What the over-limit cache holds and has answered (all zero without one).
    pub fn over_limit_stats(&self) -> OverLimitStats {
        self.over_limit
            .as_ref()
            .map(|cache| cache.stats())
            .unwrap_or_default()
    }

    /// Drops every denial the over-limit cache holds: the next request of each key asks
    /// Redis. Needed after anything changes counters behind the store's back (`FLUSHALL`,
    /// another tool deleting keys); a service also clears it when an operator switches
    /// modes.
    pub fn clear_over_limit_cache(&self) {
        if let Some(cache) = &self.over_limit {
            cache.clear();
        }
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.link.timeout()
    }

    /// Whether calls currently go through Redis Functions (`FCALL`) rather than `EVALSHA`.
    pub fn uses_functions(&self) -> bool {
        self.link.uses_functions()
    }

    /// Whether this store talks to a Redis Cluster, where one script call may only touch
    /// keys of one hash tag.
    pub fn is_cluster(&self) -> bool {
        self.link.is_cluster()
    }

    /// Asks the server for a `PONG`, within the store's timeout: whether Redis answers now.
    pub async fn ping(&self) -> Result<(), RedisLimitError> {
        self.command::<String>(&redis::cmd("PING")).await.map(drop)
    }

    /// Runs an arbitrary command (tests and tools: `FLUSHALL`, `TIME`, inspecting keys).
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisLimitError> {
        self.link.command(cmd).await
    }

    /// Calls `entry` with these keys and arguments, within the timeout.
    pub(crate) async fn call_with(
        &self,
        entry: Entry,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Vec<Value>, RedisLimitError> {
        self.link.call_with(entry, keys, args).await
    }

    /// Decides every request at once: allowed only if each limit allows, and then charged to
    /// all of them; if one denies, none is charged, and the limits that would have allowed
    /// report a peek: what they have now, uncharged (as [`sluicegate::limiter::decide_together`]
    /// does). One script call, one round trip. The same limit name and key may appear only
    /// once.
    ///
    /// With an over-limit cache ([`StoreConfig::over_limit_cache`]), a call whose every
    /// limit is known over is answered without Redis, with the same decisions.
    pub async fn decide_all(
        &self,
        requests: &[LimitRequest<'_>],
        op: Op,
        now: Now,
    ) -> Result<RedisMultiDecision, RedisLimitError> {
        let leasing = self.leasing.as_deref().filter(|_| op == Op::Check);
        if self.over_limit.is_none() && leasing.is_none() {
            return self.decide_in_redis(requests, op, now).await;
        }
        let cache = self.over_limit.as_deref();
        let keys = cache.map(|_| self.request_keys(requests));
        let cache_stamp = cache.map(|cache| cache.stamp(now));
        if let (Some(cache), Some(stamp), Some(keys)) = (cache, cache_stamp, &keys)
            && let Some((decisions, at)) = cache.answer(requests, keys, op, stamp)
        {
            return Ok(RedisMultiDecision {
                allowed: false,
                decisions,
                leases: Vec::new(),
                now: at,
            });
        }
        let mut asking = None;
        let mut lease_stamp = None;
        if let Some(leasing) = leasing {
            if cache.is_none() && leasing.skips_cold_call() {
                return self.decide_in_redis(requests, op, now).await;
            }
            let stamp = leasing.stamp(now);
            lease_stamp = Some(stamp);
            match leasing.plan(requests, stamp) {
                Plan::Granted(decisions, at) => {
                    return Ok(RedisMultiDecision {
                        allowed: true,
                        decisions,
                        leases: Vec::new(),
                        now: at,
                    });
                }
                Plan::Ask(ask) => asking = Some(ask),
                // A cold call while no lease is held: nothing to give back or to learn, so
                // it costs what the plain path costs (the common case of a wide key space).
                Plan::Plain if cache.is_none() && !leasing.holds_any() => {
                    return self.decide_in_redis(requests, op, now).await;
                }
                Plan::Plain => {}
            }
        }
        if let (Some(leasing), Some(stamp)) = (leasing, lease_stamp) {
            self.return_ended_leases(leasing, stamp).await;
        }
        // Dropped before asking: a call that fails or is cancelled (a caller's timeout) may
        // have changed their state, and leaves no entry behind.
        let asked = cache
            .zip(cache_stamp)
            .zip(keys.as_deref())
            .map(|((cache, stamp), keys)| cache.forget(keys, stamp));
        let decided = match asking {
            Some(ask) => {
                let reply = self.lease_in_redis(requests, &ask, leasing, now).await?;
                match ask.learn(&reply) {
                    Some((decisions, at)) => RedisMultiDecision {
                        allowed: true,
                        decisions,
                        leases: Vec::new(),
                        now: at,
                    },
                    None => RedisMultiDecision {
                        allowed: reply.decisions.iter().all(Decision::allowed),
                        decisions: reply.decisions,
                        leases: Vec::new(),
                        now: reply.now,
                    },
                }
            }
            None => self.decide_in_redis(requests, op, now).await?,
        };
        if let (Some(cache), Some(asked), Some(keys)) = (cache, asked, &keys) {
            cache.learn(requests, keys, op, asked, &decided.decisions, decided.now);
        }
        Ok(decided)
    }

    /// The Redis key of each request's limit.
    pub(crate) fn request_keys(&self, requests: &[LimitRequest<'_>]) -> Vec<Vec<u8>> {
        requests
            .iter()
            .map(|r| self.state_key(r.name, r.key))
            .collect()
    }

    /// The key limit `name` keeps `key`'s state under (all but a concurrency limit's, see
    /// [`RedisStore::limit_keys`]).
    pub(crate) fn state_key(&self, name: &str, key: &[u8]) -> Vec<u8> {
        self.keys.key(key, name.as_bytes(), "")
    }

    /// [`RedisStore::decide_all`] in Redis.
    async fn decide_in_redis(
        &self,
        requests: &[LimitRequest<'_>],
        op: Op,
        now: Now,
    ) -> Result<RedisMultiDecision, RedisLimitError> {
        let (op_name, max_wait) = match op {
            Op::Check => ("check", None),
            Op::Peek => ("peek", None),
            Op::Reserve { max_wait } => ("reserve", max_wait),
            Op::Release => {
                return Err(RedisLimitError::Unsupported(
                    "release a concurrency permit with RedisLimiter::release(lease)".into(),
                ));
            }
            Op::Charge => ("charge", None),
        };
        if let [only] = requests
            && let Some(entry) = only.limit.one_entry()
        {
            check_request(only, op)?;
            return self.decide_one(entry, only, op_name, max_wait, now).await;
        }
        let mut keys = Vec::new();
        let mut args = vec![
            now_arg(now),
            op_name.into(),
            requests.len().to_string().into(),
        ];
        let mut lease_slots = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            if requests[..i]
                .iter()
                .any(|r| r.name == request.name && r.key == request.key)
            {
                return Err(RedisLimitError::Unsupported(format!(
                    "limit `{}` named twice for the same key in one request",
                    request.name
                )));
            }
            check_request(request, op)?;
            let permits = request.permits;
            let lease = match request.limit.lease_us() {
                Some(lease_us) => {
                    let id = new_lease_id();
                    lease_slots.push((keys.len(), id.clone(), lease_us, permits));
                    id
                }
                None => String::new(),
            };
            keys.extend(self.limit_keys(request.key, request.name, request.limit));
            args.push(request.limit.name().into());
            args.push(permits.to_string().into());
            request
                .limit
                .push_args(&mut args, max_wait, &lease, self.grace_ms);
        }
        let reply = self.call_with(Entry::Decide, &keys, &args).await?;
        let (now, decisions) = parse_reply(&reply, requests.len())?;
        let allowed = decisions.iter().all(|d| d.allowed());
        let leases = if allowed && op.consumes() {
            lease_slots
                .into_iter()
                .map(|(key_index, id, lease_us, permits)| Lease {
                    keys: [keys[key_index].clone(), keys[key_index + 1].clone()],
                    id,
                    permits: permits.get(),
                    expires_at: now.saturating_add(lease_us),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(RedisMultiDecision {
            allowed,
            decisions,
            leases,
            now,
        })
    }

    /// One limit with an entry point of its own: fewer arguments (its parameters in one),
    /// fewer reply values. The request is checked already.
    async fn decide_one(
        &self,
        entry: OneEntry,
        request: &LimitRequest<'_>,
        op_name: &'static str,
        max_wait: Option<Micros>,
        now: Now,
    ) -> Result<RedisMultiDecision, RedisLimitError> {
        let key = self.state_key(request.name, request.key);
        // Room for a bucket's nine numbers at their common sizes: grown from empty, the
        // parameters took three reallocations per decision (an eighth of the client's
        // instructions per decision, callgrind, 100k keys).
        let mut params = Joined(Vec::with_capacity(96));
        request
            .limit
            .push_args(&mut params, max_wait, "", self.grace_ms);
        let call = OneCall {
            entry,
            key,
            now,
            op: op_name,
            permits: request.permits.get(),
            params: params.0,
            compact: request.limit.compact(),
        };
        let reply = match &self.batcher {
            Some(batcher) => match batcher.call(call, self.timeout()).await {
                Ok(answer) => answer?,
                // The batching task is gone with the runtime it ran on: the call goes alone.
                Err(call) => call.send_alone(&self.link).await?,
            },
            None => call.send_alone(&self.link).await?,
        };
        let (now, decision) = parse_one_reply(&reply, request.limit.capacity())?;
        Ok(RedisMultiDecision {
            allowed: decision.allowed(),
            decisions: vec![decision],
            leases: Vec::new(),
            now,
        })
    }

    /// The keys `limit` keeps its state under for `key` (a concurrency limit: its lease ids by
    /// expiry, then the permits each lease holds), in the order its script reads them.
    pub(crate) fn limit_keys<'a>(
        &'a self,
        key: &'a [u8],
        name: &'a str,
        limit: &RedisLimit,
    ) -> impl Iterator<Item = Vec<u8>> + 'a {
        limit
            .key_suffixes()
            .iter()
            .map(move |suffix| self.keys.key(key, name.as_bytes(), suffix))
    }

    /// Gives back (`release`) or extends (`renew`) a concurrency lease. `Ok(false)` if the
    /// lease is no longer held (it expired, or was released already).
    pub(crate) async fn lease_op(
        &self,
        limit: &RedisLimit,
        lease: &Lease,
        op: LeaseOp,
        now: Now,
    ) -> Result<bool, RedisLimitError> {
        let mut args = vec![now_arg(now), op.name().into(), "1".into()];
        args.push(limit.name().into());
        args.push(lease.permits.to_string().into());
        limit.push_args(&mut args, None, &lease.id, self.grace_ms);
        let reply = self.call_with(Entry::Decide, &lease.keys, &args).await?;
        let (_, decisions) = parse_reply(&reply, 1)?;
        Ok(decisions.first().is_some_and(|d| d.allowed()))
    }
}

fn validate_leasing(config: &StoreConfig) -> Result<(), RedisLimitError> {
    if let Some(leasing) = config.leasing {
        leasing.validated()?;
    }
    Ok(())
}

fn invalid_url(url: &str, error: &redis::RedisError) -> RedisLimitError {
    RedisLimitError::Config(ConfigError::InvalidParameter {
        name: "redis",
        value: url.to_owned(),
        reason: error.to_string(),
    })
}
