//! Decisions in Redis: one limit per key, or several limits on one request, all or nothing.

use std::num::NonZeroU64;

use redis::Value;
use sluicegate::{Decision, Micros, Op};

use crate::batch::OneCall;
use crate::error::RedisLimitError;
use crate::lease::{Lease, new_lease_id};
use crate::limit::{Joined, LimitKind, RedisLimit};
use crate::scripts::{Entry, OneEntry};
use crate::store::RedisStore;

/// Where the time of a decision comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Now {
    /// Redis's own clock (`TIME`), so clients whose clocks disagree still agree on the limit.
    #[default]
    Server,
    /// An explicit time in microseconds since the Unix epoch (deterministic tests, replays).
    At(Micros),
}

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
pub struct MultiDecision {
    /// Every limit allowed, and every limit was charged; otherwise none was.
    pub allowed: bool,
    /// Each limit's own decision, in request order.
    pub decisions: Vec<Decision>,
    /// The leases taken, one per concurrency limit, when allowed (and not a peek).
    pub leases: Vec<Lease>,
    /// The time the decision was made at (Redis's clock unless given).
    pub now: Micros,
}

impl RedisStore {
    /// Decides every request at once: allowed only if each limit allows, and then charged to
    /// all of them; if one denies, none is charged, and the limits that would have allowed
    /// report a peek: what they have now, uncharged (as [`sluicegate::decide_together`]
    /// does). One script call, one round trip. The same limit name and key may appear only
    /// once.
    pub async fn decide_all(
        &self,
        requests: &[LimitRequest<'_>],
        op: Op,
        now: Now,
    ) -> Result<MultiDecision, RedisLimitError> {
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
            return self
                .decide_one(entry, only, op, op_name, max_wait, now)
                .await;
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
            for suffix in request.limit.key_suffixes() {
                keys.push(self.keys.key(request.key, request.name.as_bytes(), suffix));
            }
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
        Ok(MultiDecision {
            allowed,
            decisions,
            leases,
            now,
        })
    }

    /// One limit with an entry point of its own: fewer arguments (its parameters in one),
    /// fewer reply values.
    async fn decide_one(
        &self,
        entry: OneEntry,
        request: &LimitRequest<'_>,
        op: Op,
        op_name: &'static str,
        max_wait: Option<Micros>,
        now: Now,
    ) -> Result<MultiDecision, RedisLimitError> {
        check_request(request, op)?;
        let key = self.keys.key(request.key, request.name.as_bytes(), "");
        let mut params = Joined::default();
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
        };
        let reply = match &self.batcher {
            Some(batcher) => match batcher.call(call, self.timeout()).await {
                Ok(answer) => answer?,
                // The batching task is gone with the runtime it ran on: the call goes alone.
                Err(call) => call.send_alone(self).await?,
            },
            None => call.send_alone(self).await?,
        };
        let (now, decision) = parse_one_reply(&reply, request.limit.capacity())?;
        Ok(MultiDecision {
            allowed: decision.allowed(),
            decisions: vec![decision],
            leases: Vec::new(),
            now,
        })
    }

    /// Gives back (`release`) or extends (`renew`) a concurrency lease. `Ok(false)` if the
    /// lease is no longer held (it expired, or was released already).
    pub(crate) async fn lease_op(
        &self,
        limit: &RedisLimit,
        lease: &Lease,
        op: &str,
        now: Now,
    ) -> Result<bool, RedisLimitError> {
        let mut args = vec![now_arg(now), op.into(), "1".into()];
        args.push(limit.name().into());
        args.push(lease.permits.to_string().into());
        limit.push_args(&mut args, None, &lease.id, self.grace_ms);
        let reply = self.call_with(Entry::Decide, &lease.keys, &args).await?;
        let (_, decisions) = parse_reply(&reply, 1)?;
        Ok(decisions.first().is_some_and(|d| d.allowed()))
    }
}

/// Refuses what no limit could grant, and ops the algorithm does not take.
fn check_request(request: &LimitRequest<'_>, op: Op) -> Result<(), RedisLimitError> {
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
        Now::Server => Vec::new(),
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
fn parse_one_reply(reply: &[Value], limit: u64) -> Result<(Micros, Decision), RedisLimitError> {
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

/// One limit, a state per key, in Redis: the distributed twin of
/// [`sluicegate::KeyedLimiter`].
#[derive(Debug, Clone)]
pub struct RedisLimiter {
    store: RedisStore,
    limit: RedisLimit,
    name: String,
}

impl RedisLimiter {
    /// `limit` kept in `store` under `name` (which keeps limits on the same keys apart).
    pub fn new(store: RedisStore, limit: RedisLimit, name: impl Into<String>) -> Self {
        RedisLimiter {
            store,
            limit,
            name: name.into(),
        }
    }

    /// The limit.
    pub fn limit(&self) -> &RedisLimit {
        &self.limit
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// This limiter's part of a multi-limit request for one permit on `key`.
    pub fn request<'a>(&'a self, key: &'a [u8]) -> LimitRequest<'a> {
        self.request_n(key, NonZeroU64::MIN)
    }

    /// This limiter's part of a multi-limit request for `permits` on `key`.
    pub fn request_n<'a>(&'a self, key: &'a [u8], permits: NonZeroU64) -> LimitRequest<'a> {
        LimitRequest {
            limit: &self.limit,
            name: &self.name,
            key,
            permits,
        }
    }

    /// Asks for one permit for `key` on Redis's clock.
    pub async fn check(&self, key: &[u8]) -> Result<Decision, RedisLimitError> {
        self.decide(key, NonZeroU64::MIN, Op::Check, Now::Server)
            .await
    }

    /// Applies `op` for `permits` on `key` at `now`. A concurrency permit taken this way is
    /// held until its lease expires; use [`acquire_lease`](Self::acquire_lease) to get the
    /// lease and release it.
    pub async fn decide(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        op: Op,
        now: Now,
    ) -> Result<Decision, RedisLimitError> {
        let mut multi = self
            .store
            .decide_all(&[self.request_n(key, permits)], op, now)
            .await?;
        multi
            .decisions
            .pop()
            .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()))
    }

    /// Takes `permits` of a concurrency limit for `key` as a lease, if they are free.
    pub async fn acquire_lease(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        now: Now,
    ) -> Result<(Decision, Option<Lease>), RedisLimitError> {
        if !matches!(self.limit.kind, LimitKind::Concurrency { .. }) {
            return Err(RedisLimitError::Unsupported(format!(
                "{} has no leases",
                self.limit.name()
            )));
        }
        let mut multi = self
            .store
            .decide_all(&[self.request_n(key, permits)], Op::Check, now)
            .await?;
        let decision = multi
            .decisions
            .pop()
            .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()))?;
        Ok((decision, multi.leases.pop()))
    }

    /// Gives a lease back. `Ok(false)` if it was no longer held (expired or released).
    pub async fn release(&self, lease: &Lease, now: Now) -> Result<bool, RedisLimitError> {
        self.store
            .lease_op(&self.limit, lease, "release", now)
            .await
    }

    /// Extends a lease by the limit's lease time from `now`. `Ok(false)` if it was no longer
    /// held.
    pub async fn renew(&self, lease: &Lease, now: Now) -> Result<bool, RedisLimitError> {
        self.store.lease_op(&self.limit, lease, "renew", now).await
    }
}
