//! The store's lease calls (`lease.lua`): a lease taken with a request, and ended leases given
//! back. What is leased and when is `leasing.rs`'s to say.

use redis::Value;
use sluicegate::Micros;
use sluicegate::lease::LeaseTerms;
use sluicegate::store::Now;

use crate::error::RedisLimitError;
use crate::leasing::{Asking, LeaseReply, Leasing, Returning, unused_of};
use crate::limit::RedisLimit;
use crate::reply::{LimitRequest, check_request, now_arg, parse_reply, text};
use crate::scripts::Entry;
use crate::stamp::{Stamp, Timeline};
use crate::store::RedisStore;

impl RedisStore {
    /// Decides `requests` (a check) in Redis and leases `ask.want` more permits of each with
    /// them, giving back `ask.give_back` first.
    pub(crate) async fn lease_in_redis(
        &self,
        requests: &[LimitRequest<'_>],
        ask: &Asking<'_>,
        leasing: Option<&Leasing>,
        now: Now,
    ) -> Result<LeaseReply, RedisLimitError> {
        let keys = self.request_keys(requests);
        for (i, request) in requests.iter().enumerate() {
            if keys[..i].contains(&keys[i]) {
                return Err(RedisLimitError::Unsupported(format!(
                    "limit `{}` named twice for the same key in one request",
                    request.name
                )));
            }
            check_request(request, sluicegate::state_machine::Op::Check)?;
        }
        let life = leasing.map_or(0, Leasing::life);
        let mut args = self.lease_args(now, "take", ask.want, life, &ask.give_back, requests.len());
        for request in requests {
            self.push_limit(&mut args, request.limit, request.permits.get());
        }
        if let Some(leasing) = leasing {
            leasing.count_call();
        }
        let reply = self.call_with(Entry::Lease, &keys, &args).await?;
        parse_lease_reply(&reply, requests.len())
    }

    /// Gives back the unused permits of every lease held (at shutdown: otherwise they are
    /// spent until their lease ends, then come back by time, as a dead process's do). The
    /// permits Redis took back; see [`StoreConfig::leasing`](crate::StoreConfig::leasing).
    pub async fn return_leases(&self) -> Result<u64, RedisLimitError> {
        let Some(leasing) = &self.leasing else {
            return Ok(0);
        };
        let (now, returning) = leasing.take_all();
        self.give_back_all(leasing, returning, now).await
    }

    /// Gives back the ended leases worth giving back (windows' leases; at most once per
    /// lease life), before a call that asks Redis anyway: a failure leaves them spent.
    pub(crate) async fn return_ended_leases(&self, leasing: &Leasing, stamp: Stamp) {
        let returning = leasing.to_return(stamp);
        if returning.is_empty() {
            return;
        }
        // Given times stay given: a return on Redis's clock would judge them by another.
        let now = match stamp.timeline {
            Timeline::Given => Now::At(stamp.at),
            Timeline::Local => Now::Store,
        };
        // A failed return leaves the permits spent: nothing more to do.
        let _ = self.give_back_all(leasing, returning, now).await;
    }

    async fn give_back_all(
        &self,
        leasing: &Leasing,
        returning: Vec<Returning>,
        now: Now,
    ) -> Result<u64, RedisLimitError> {
        let mut total = 0;
        let mut failure: Option<RedisLimitError> = None;
        for r in returning {
            let unused = unused_of(&r.leases);
            // Redis away: the other returns would each wait out the timeout for nothing (a
            // shutdown would hang on them); their permits come back by time.
            if failure
                .as_ref()
                .is_some_and(RedisLimitError::is_backend_failure)
            {
                leasing.count_return(unused, 0);
                continue;
            }
            let mut args = self.lease_args(now, "return", 0, 0, &r.leases, r.limits.len());
            for limit in &r.limits {
                self.push_limit(&mut args, limit, 1);
            }
            leasing.count_call();
            let keys: Vec<Vec<u8>> = r
                .ids
                .iter()
                .map(|(name, key)| self.state_key(name, key))
                .collect();
            let back = match self.call_with(Entry::Lease, &keys, &args).await {
                Ok(reply) => parse_return_reply(&reply),
                Err(e) => Err(e),
            };
            match back {
                Ok(back) => {
                    leasing.count_return(unused, back);
                    total += back.min(unused);
                }
                Err(e) => {
                    leasing.count_return(unused, 0);
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(total), Err)
    }

    fn lease_args(
        &self,
        now: Now,
        op: &str,
        want: u64,
        life: Micros,
        give_back: &[(LeaseTerms, u64)],
        limits: usize,
    ) -> Vec<Vec<u8>> {
        let mut args = vec![now_arg(now), op.as_bytes().to_vec()];
        for v in [want, life, give_back.len() as u64] {
            args.push(v.to_string().into_bytes());
        }
        for &(terms, unused) in give_back {
            for v in [terms.taken_at, terms.end, unused] {
                args.push(v.to_string().into_bytes());
            }
        }
        args.push(limits.to_string().into_bytes());
        args
    }

    /// One limit's arguments as `decide.lua` takes them, after the count (pushed first).
    fn push_limit(&self, args: &mut Vec<Vec<u8>>, limit: &RedisLimit, permits: u64) {
        args.push(limit.name().into());
        args.push(permits.to_string().into_bytes());
        limit.push_args(args, None, "", self.grace_ms);
    }
}

/// Reads `{"OK", now, leased, end, given_back, 6 numbers per limit}` or `{"ERR", ...}`.
fn parse_lease_reply(reply: &[Value], count: usize) -> Result<LeaseReply, RedisLimitError> {
    let number = |i: usize| match reply.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n)
            .map_err(|_| RedisLimitError::UnexpectedReply(format!("negative number {n}"))),
        other => Err(RedisLimitError::UnexpectedReply(format!(
            "expected a number, got {other:?}"
        ))),
    };
    if reply.first().map(text).as_deref() != Some("OK") {
        // The error, or an unexpected reply, as the decide script's reader words it.
        return parse_reply(reply, count)
            .and(Err(RedisLimitError::UnexpectedReply(format!("{reply:?}"))));
    }
    let (leased, end, given_back) = (number(2)?, number(3)?, number(4)?);
    let mut rest = Vec::with_capacity(reply.len().saturating_sub(3));
    rest.extend_from_slice(&reply[..2]);
    rest.extend_from_slice(reply.get(5..).unwrap_or_default());
    let (now, decisions) = parse_reply(&rest, count)?;
    Ok(LeaseReply {
        now,
        leased,
        end,
        given_back,
        decisions,
    })
}

/// Reads `{"OK", now, given_back}`.
fn parse_return_reply(reply: &[Value]) -> Result<u64, RedisLimitError> {
    match reply {
        [ok, _, Value::Int(back)] if text(ok) == "OK" => Ok(u64::try_from(*back).unwrap_or(0)),
        _ => parse_reply(reply, 0).and(Err(RedisLimitError::UnexpectedReply(format!("{reply:?}")))),
    }
}
