//! The connection to Redis (single server or Cluster), the per-call timeout, and how calls
//! reach the Lua code: `FCALL` of the library, or `EVALSHA` where Redis has no Functions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Value};
use sluicegate::ConfigError;

use crate::batch::Batcher;
use crate::error::RedisLimitError;
use crate::keys::KeyScheme;
use crate::scripts::{Entry, LIBRARY};

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
    /// Whether calls go through `FCALL` (else `EVALSHA`); shared by the store's clones.
    functions: Arc<AtomicBool>,
    /// Where one-limit decisions go, if they are batched (see [`StoreConfig::max_batch`]).
    pub(crate) batcher: Option<Batcher>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("keys", &self.keys)
            .field("timeout", &self.timeout)
            .field("functions", &self.functions.load(Ordering::Relaxed))
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
        let mut store = Self::with_connection(Connection::Single(manager), keys, &config);
        if config.max_batch > 1 {
            store.batcher = Some(Batcher::start(store.clone(), config.max_batch));
        }
        Ok(store)
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
            functions: Arc::new(AtomicBool::new(config.scripts == ScriptMode::Auto)),
            batcher: None,
        }
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether calls currently go through Redis Functions (`FCALL`) rather than `EVALSHA`.
    pub fn uses_functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// Calls `entry` with the key count, keys and arguments `fill` appends, within the
    /// timeout. Loads the library (or script) the first time a server lacks it and repeats
    /// the call once.
    pub(crate) async fn call(
        &self,
        entry: Entry,
        fill: impl Fn(&mut Cmd) + Sync,
    ) -> Result<Vec<Value>, RedisLimitError> {
        let reply =
            match tokio::time::timeout(self.timeout, self.call_once_loaded(entry, &fill)).await {
                Ok(result) => result.map_err(|e| RedisLimitError::from_redis(e, self.timeout))?,
                Err(_) => return Err(RedisLimitError::Timeout(self.timeout)),
            };
        match reply {
            Value::Array(items) => Ok(items),
            Value::Int(n) => Ok(vec![Value::Int(n)]),
            other => Err(RedisLimitError::UnexpectedReply(format!("{other:?}"))),
        }
    }

    /// Calls `entry` with these keys and arguments, within the timeout.
    pub(crate) async fn call_with(
        &self,
        entry: Entry,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Vec<Value>, RedisLimitError> {
        self.call(entry, |cmd| {
            cmd.arg(keys.len()).arg(keys).arg(args);
        })
        .await
    }

    async fn call_once_loaded(
        &self,
        entry: Entry,
        fill: &(dyn Fn(&mut Cmd) + Sync),
    ) -> redis::RedisResult<Value> {
        let mut loaded = false;
        loop {
            let functions = self.functions.load(Ordering::Relaxed);
            // Room for a one-limit call's arguments, so that building it allocates once.
            let mut cmd = Cmd::with_capacity(8, 192);
            if functions {
                cmd.arg("FCALL").arg(entry.function());
            } else {
                cmd.arg("EVALSHA").arg(entry.script().get_hash());
            }
            fill(&mut cmd);
            let error = match self.query::<Value>(&cmd).await {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            if functions && unknown_command(&error) {
                // A Redis before 7 (or one that forbids FCALL): scripts from now on.
                self.functions.store(false, Ordering::Relaxed);
                continue;
            }
            if loaded {
                return Err(error);
            }
            if functions && is_error(&error, "ERR", "Function not found") {
                let mut load = redis::cmd("FUNCTION");
                load.arg("LOAD").arg("REPLACE").arg(&LIBRARY.code);
                if let Err(error) = self.query::<Value>(&load).await {
                    if !unknown_command(&error) {
                        return Err(error);
                    }
                    // FCALL but no FUNCTION LOAD: scripts, loaded as they are first needed.
                    self.functions.store(false, Ordering::Relaxed);
                    continue;
                }
            } else if !functions && error.code() == Some("NOSCRIPT") {
                match &self.connection {
                    Connection::Single(manager) => {
                        entry.script().load_async(&mut manager.clone()).await?
                    }
                    Connection::Cluster(cluster) => {
                        entry.script().load_async(&mut cluster.clone()).await?
                    }
                };
            } else {
                return Err(error);
            }
            loaded = true;
        }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        match &self.connection {
            Connection::Single(manager) => cmd.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => cmd.query_async(&mut cluster.clone()).await,
        }
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
        bounded(self.timeout, self.query(cmd)).await
    }
}

/// A server error with this code whose message starts with `detail`.
fn is_error(error: &redis::RedisError, code: &str, detail: &str) -> bool {
    error.code() == Some(code) && error.detail().is_some_and(|d| d.starts_with(detail))
}

/// The server does not know the command (`FCALL`, `FUNCTION` before Redis 7).
fn unknown_command(error: &redis::RedisError) -> bool {
    is_error(error, "ERR", "unknown command")
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
