//! What can go wrong talking to Redis, told apart so a caller can act: retry or fall back on
//! the backend failures, fix the request or the data on the others.

use std::time::Duration;

use sluicegate::{CheckError, ConfigError};

/// An error from a Redis-backed limiter. A plain "not now" is not an error: it is a
/// [`Decision`](sluicegate::Decision) with `allowed == false`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// Redis did not answer within the configured per-call timeout (down, slow, or
    /// unreachable); nothing is known about whether the permits were taken.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection to Redis could not be made or broke during the call.
    #[error("cannot reach redis: {0}")]
    Connection(#[source] redis::RedisError),
    /// The task that sends a store's batched calls stopped before it answered (the tokio
    /// runtime the store was connected on shut down, or the task panicked): nothing is known
    /// about whether the permits were taken. Once that runtime is gone, calls go alone.
    #[error("the redis store's batching task stopped before answering")]
    Stopped,
    /// Redis answered the script call with an error (busy, loading, cluster down, a key in the
    /// wrong slot, ...).
    #[error("redis refused the limiter script: {0}")]
    Script(String),
    /// State stored under a limiter's key is not what this crate writes: another program
    /// changed it. The state is left as found; delete the key to reset it.
    #[error("corrupt limiter state in redis: {0}")]
    CorruptState(String),
    /// More permits were asked for than the limit can ever grant at once.
    #[error("{requested} permits requested but at most {capacity} can ever be granted at once")]
    InsufficientCapacity {
        /// Permits asked for.
        requested: u64,
        /// The most the limit grants to one request.
        capacity: u64,
    },
    /// The request cannot be answered by this algorithm (for example `acquire` on a
    /// concurrency limit), or a reservation would run too far ahead to count exactly.
    #[error("{0}")]
    Unsupported(String),
    /// A limiter whose configuration lives in Redis (a Redisson-style rate limiter) has none:
    /// call `try_set_rate` or `set_rate` first.
    #[error("limiter not configured: {0}")]
    NotConfigured(String),
    /// Invalid limiter parameters.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Redis replied with something this crate did not send for (a different script under the
    /// same hash, or a Redis without Lua).
    #[error("unexpected reply from redis: {0}")]
    UnexpectedReply(String),
}

impl RedisLimitError {
    /// Whether the error says the backend is unavailable (timeout, connection, a Redis that
    /// refuses work): the cases a [`FailurePolicy`](crate::FailurePolicy) covers. Errors in the
    /// request or in stored data are not backend failures: falling back would hide them.
    pub fn is_backend_failure(&self) -> bool {
        matches!(
            self,
            RedisLimitError::Timeout(_)
                | RedisLimitError::Connection(_)
                | RedisLimitError::Stopped
                | RedisLimitError::Script(_)
        )
    }

    /// Sorts a client error; `timeout` is the per-call bound, which the client's own response
    /// timeout enforces too.
    pub(crate) fn from_redis(error: redis::RedisError, timeout: Duration) -> Self {
        if error.is_timeout() {
            RedisLimitError::Timeout(timeout)
        } else if error.is_io_error()
            || error.is_connection_refusal()
            || error.is_connection_dropped()
        {
            RedisLimitError::Connection(error)
        } else if error.code() == Some("CROSSSLOT") {
            RedisLimitError::Unsupported(
                "under Redis Cluster, the limits of one request must share one key (hash tag)"
                    .into(),
            )
        } else {
            RedisLimitError::Script(error.to_string())
        }
    }
}

impl From<CheckError> for RedisLimitError {
    fn from(error: CheckError) -> Self {
        match error {
            CheckError::InsufficientCapacity {
                requested,
                capacity,
            } => RedisLimitError::InsufficientCapacity {
                requested,
                capacity,
            },
            other => RedisLimitError::Unsupported(other.to_string()),
        }
    }
}
