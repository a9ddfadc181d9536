//! The link to Redis (one server or a Cluster) and how a call reaches the Lua code: `FCALL`
//! of the library, or `EVALSHA` where Redis has no Functions, each bounded by the timeout.
//! Below the batcher and the store, which both call through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Value};

use crate::error::RedisLimitError;
use crate::scripts::{Entry, LIBRARY};

#[derive(Clone)]
pub(crate) enum Connection {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

/// A connection with its timeout and how it runs scripts; cheap to clone (shared state).
#[derive(Clone)]
pub(crate) struct Link {
    connection: Connection,
    timeout: Duration,
    /// Whether calls go through `FCALL` (else `EVALSHA`); shared by the store's clones.
    functions: Arc<AtomicBool>,
}

impl Link {
    pub(crate) fn new(connection: Connection, timeout: Duration, functions: bool) -> Link {
        Link {
            connection,
            timeout,
            functions: Arc::new(AtomicBool::new(functions)),
        }
    }

    /// The per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether calls currently go through Redis Functions.
    pub(crate) fn uses_functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.connection, Connection::Cluster(_))
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

    /// Runs an arbitrary command (tests and tools: `FLUSHALL`, `TIME`, inspecting keys).
    pub(crate) async fn command<T: redis::FromRedisValue>(
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
pub(crate) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisLimitError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|e| RedisLimitError::from_redis(e, timeout)),
        Err(_) => Err(RedisLimitError::Timeout(timeout)),
    }
}
