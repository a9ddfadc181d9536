//! What a Redis call is made of and what it answers: the shared types of a decision
//! (`LimitRequest`, `RedisMultiDecision`) and the reading of the scripts' replies. A leaf: the
//! connection, the batcher, the store and the limiters all read it; it reads none of them.

use std::num::NonZeroU64;

use redis::Value;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Decision, Micros};

use crate::error::RedisLimitError;
use crate::lease::Lease;
use crate::limit::RedisLimit;

/// One limit in a multi-limit request: `limit` named `name`, counted for `key`.
#[derive(Debug, Clone, Copy)]
pub struct LimitRequest<'a> {
    /// The limit.
    pub limit: &'a RedisLimit,
    /// The limit's name, which keeps two limits on the same key apart (`per-second`).
    pub name: &'a str,
    /// Whose budget is charged (a user, an IP). Under Redis Cluster, every request of one
    /// call must share the same key, which becomes the hash tag.
    pub key: &'a [u8],
    /// Permits asked of this limit.
    pub permits: NonZeroU64,
}

/// The answer to a multi-limit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisMultiDecision {
    /// Every limit allowed, and every limit was charged; otherwise none was.
    pub allowed: bool,
    /// Each limit's own decision, in request order.
    pub decisions: Vec<Decision>,
    /// The leases taken, one per concurrency limit, when allowed (and not a peek).
    pub leases: Vec<Lease>,
    /// The time the decision was made at (Redis's clock unless given).
    pub now: Micros,
}

/// Refuses what no limit could grant, and ops the algorithm does not take.
pub(crate) fn check_request(request: &LimitRequest<'_>, op: Op) -> Result<(), RedisLimitError> {
    let permits = request.permits.get();
    let capacity = request.limit.capacity();
    if permits > capacity {
        return Err(RedisLimitError::InsufficientCapacity {
            requested: permits,
            capacity,
        });
    }
    if !request.limit.supports(op) {
        return Err(RedisLimitError::Unsupported(format!(
            "{} does not support {}",
            request.limit.name(),
            op.name()
        )));
    }
    Ok(())
}

pub(crate) fn now_arg(now: Now) -> Vec<u8> {
    match now {
        Now::Store => Vec::new(),
        Now::At(micros) => micros.to_string().into_bytes(),
    }
}

fn int(value: &Value) -> Result<i64, RedisLimitError> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(RedisLimitError::UnexpectedReply(format!(
            "expected an integer, got {other:?}"
        ))),
    }
}

pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn micros(value: &Value) -> Result<u64, RedisLimitError> {
    let n = int(value)?;
    u64::try_from(n).map_err(|_| RedisLimitError::UnexpectedReply(format!("negative time {n}")))
}

/// The first value of an error reply (`{"ERR", kind, detail}`).
pub(crate) fn is_error_reply(value: &Value) -> bool {
    matches!(value, Value::BulkString(bytes) if bytes == b"ERR")
}

/// The error of an `{"ERR", kind, detail}` reply.
pub(crate) fn script_error(reply: &[Value]) -> RedisLimitError {
    let kind = reply.get(1).map(text).unwrap_or_default();
    let detail = reply.get(2).map(text).unwrap_or_default();
    match kind.as_str() {
        "corrupt" => RedisLimitError::CorruptState(detail),
        "unconfigured" => RedisLimitError::NotConfigured(detail),
        "capacity" => {
            let mut numbers = detail.split(' ').map(str::parse::<u64>);
            match (numbers.next(), numbers.next()) {
                (Some(Ok(requested)), Some(Ok(capacity))) => {
                    RedisLimitError::InsufficientCapacity {
                        requested,
                        capacity,
                    }
                }
                _ => RedisLimitError::UnexpectedReply(detail),
            }
        }
        "overflow" => RedisLimitError::Unsupported(detail),
        _ => RedisLimitError::Script(format!("{kind}: {detail}")),
    }
}

/// Reads a one-limit entry point's `{now, allowed, remaining, reset_us, retry_us, wait_us}`
/// or `{"ERR", kind, detail}`; the limit is the one asked.
pub(crate) fn parse_one_reply(
    reply: &[Value],
    limit: u64,
) -> Result<(Micros, Decision), RedisLimitError> {
    match reply {
        // First: a batch pads an error to a decision's length.
        [first, ..] if is_error_reply(first) => Err(script_error(reply)),
        [now, allowed, remaining, reset, retry, wait] => Ok((
            micros(now)?,
            decision(allowed, limit, remaining, reset, retry, wait)?,
        )),
        _ => Err(RedisLimitError::UnexpectedReply(format!("{reply:?}"))),
    }
}

/// A decision from the script's numbers: `allowed` is 1 or 0, times are µs, and a negative
/// `retry` means none.
fn decision(
    allowed: &Value,
    limit: u64,
    remaining: &Value,
    reset: &Value,
    retry: &Value,
    wait: &Value,
) -> Result<Decision, RedisLimitError> {
    let (remaining, reset) = (micros(remaining)?, micros(reset)?);
    let decision = if int(allowed)? == 1 {
        Decision::allow(limit, remaining, reset)
    } else {
        Decision::deny(limit, remaining, reset, u64::try_from(int(retry)?).ok())
    };
    Ok(decision.with_wait(micros(wait)?))
}

/// Reads `{"OK", now, 6 numbers per limit}` or `{"ERR", kind, detail}`.
pub(crate) fn parse_reply(
    reply: &[Value],
    count: usize,
) -> Result<(Micros, Vec<Decision>), RedisLimitError> {
    match reply.first().map(text).as_deref() {
        Some("OK") => {}
        Some("ERR") => return Err(script_error(reply)),
        _ => return Err(RedisLimitError::UnexpectedReply(format!("{reply:?}"))),
    }
    if reply.len() != 2 + 6 * count {
        return Err(RedisLimitError::UnexpectedReply(format!(
            "{} values for {count} limits",
            reply.len()
        )));
    }
    let now = micros(&reply[1])?;
    let decisions = reply[2..]
        .chunks_exact(6)
        .map(|d| decision(&d[0], micros(&d[1])?, &d[2], &d[3], &d[4], &d[5]))
        .collect::<Result<Vec<_>, RedisLimitError>>()?;
    Ok((now, decisions))
}
