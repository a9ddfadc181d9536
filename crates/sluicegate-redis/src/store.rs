//! The connection to Redis (single server or Cluster), the per-call timeout, and the
//! decision scripts.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Script, Value};
use sluicegate::ConfigError;

use crate::error::RedisLimitError;
use crate::keys::KeyScheme;
use crate::limit::LimitKind;

/// The decision script of any set of limits: loaded once per server, then run by its SHA1
/// (`EVALSHA`); after a `NOSCRIPT` (a restarted or flushed server) it is loaded again and the
/// call repeated. One script, kept in several files to be read one concern at a time.
static DECIDE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prelude.lua"),
        include_str!("../lua/bucket_prelude.lua"),
        include_str!("../lua/gcra.lua"),
        include_str!("../lua/token_bucket.lua"),
        include_str!("../lua/leaky.lua"),
        include_str!("../lua/concurrency.lua"),
        include_str!("../lua/fixed_window.lua"),
        include_str!("../lua/windows.lua"),
        include_str!("../lua/decide.lua"),
    ))
});

/// The same decision for one GCRA limit alone, in a script holding only GCRA: Redis builds a
/// closure for every function a script defines on every call, which made the full script
/// cost about twice as much per call as the decision itself.
static ONE_GCRA_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prelude.lua"),
        include_str!("../lua/bucket_prelude.lua"),
        include_str!("../lua/gcra.lua"),
        include_str!("../lua/one_gcra.lua"),
    ))
});

/// One token bucket alone, as [`ONE_GCRA_SCRIPT`].
static ONE_TOKEN_BUCKET_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prelude.lua"),
        include_str!("../lua/bucket_prelude.lua"),
        include_str!("../lua/token_bucket.lua"),
        include_str!("../lua/one_token_bucket.lua"),
    ))
});

/// One fixed window alone, as [`ONE_GCRA_SCRIPT`].
static ONE_FIXED_WINDOW_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prelude.lua"),
        include_str!("../lua/fixed_window.lua"),
        include_str!("../lua/one_fixed_window.lua"),
    ))
});

/// The configuration script of Redisson-style limiters.
static CONFIG_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/config.lua")));

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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            prefix: "sluicegate:".into(),
            timeout: Duration::from_secs(1),
            expiry_grace: Duration::ZERO,
        }
    }
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A shared, cloneable handle on Redis: one multiplexed connection (per node, for Cluster)
/// that pipelines concurrent calls and reconnects by itself after Redis restarts.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    pub(crate) keys: KeyScheme,
    timeout: Duration,
    pub(crate) grace_ms: u64,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("keys", &self.keys)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port/db`).
    pub async fn connect(url: &str, config: StoreConfig) -> Result<RedisStore, RedisLimitError> {
        let keys = KeyScheme::new(&config.prefix)?;
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
        Ok(Self::with_connection(
            Connection::Single(manager),
            keys,
            &config,
        ))
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port`).
    pub async fn connect_cluster(
        nodes: &[&str],
        config: StoreConfig,
    ) -> Result<RedisStore, RedisLimitError> {
        let keys = KeyScheme::new(&config.prefix)?;
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
            connection,
            keys,
            timeout: config.timeout,
            grace_ms,
        }
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs the decision script, within the timeout: the script of `single`'s algorithm alone
    /// when the call decides that one limit (same arguments, same reply), else the full one.
    pub(crate) async fn run_script(
        &self,
        single: Option<&LimitKind>,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Vec<Value>, RedisLimitError> {
        let script: &Script = match single {
            Some(LimitKind::Gcra(_)) => &ONE_GCRA_SCRIPT,
            Some(LimitKind::TokenBucket(_)) => &ONE_TOKEN_BUCKET_SCRIPT,
            Some(LimitKind::FixedWindow { .. }) => &ONE_FIXED_WINDOW_SCRIPT,
            _ => &DECIDE_SCRIPT,
        };
        self.run(script, keys, args).await
    }

    /// Runs the configuration script of Redisson-style limiters, within the timeout.
    pub(crate) async fn run_config_script(
        &self,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Vec<Value>, RedisLimitError> {
        self.run(&CONFIG_SCRIPT, keys, args).await
    }

    async fn run(
        &self,
        script: &Script,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Vec<Value>, RedisLimitError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key.as_slice());
        }
        for arg in args {
            invocation.arg(arg.as_slice());
        }
        let reply: Value = match &self.connection {
            Connection::Single(manager) => {
                let mut manager = manager.clone();
                bounded(self.timeout, invocation.invoke_async(&mut manager)).await?
            }
            Connection::Cluster(cluster) => {
                let mut cluster = cluster.clone();
                bounded(self.timeout, invocation.invoke_async(&mut cluster)).await?
            }
        };
        match reply {
            Value::Array(items) => Ok(items),
            Value::Int(n) => Ok(vec![Value::Int(n)]),
            other => Err(RedisLimitError::UnexpectedReply(format!("{other:?}"))),
        }
    }

    /// Runs an arbitrary command (tests and tools: `FLUSHALL`, `TIME`, inspecting keys).
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisLimitError> {
        match &self.connection {
            Connection::Single(manager) => {
                let mut manager = manager.clone();
                bounded(self.timeout, cmd.query_async(&mut manager)).await
            }
            Connection::Cluster(cluster) => {
                let mut cluster = cluster.clone();
                bounded(self.timeout, cmd.query_async(&mut cluster)).await
            }
        }
    }
}

/// Awaits `call` for at most `timeout`.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisLimitError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|e| RedisLimitError::from_redis(e, timeout)),
        Err(_) => Err(RedisLimitError::Timeout(timeout)),
    }
}

fn invalid_url(url: &str, error: &redis::RedisError) -> RedisLimitError {
    RedisLimitError::Config(ConfigError::InvalidParameter {
        name: "redis",
        value: url.to_owned(),
        reason: error.to_string(),
    })
}
