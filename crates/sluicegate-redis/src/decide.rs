//! The Redis store behind the backend seam ([`sluicegate::store::Store`]): a call's limits in
//! one `decide_all` script call, one round trip.
//!
//! - The same limit on the same key twice in one call (two identical descriptors) is asked
//!   once for the sum of their permits: one script call may name a key only once. Each gets
//!   the merged answer.
//! - Redis Cluster: a script can only touch keys of one slot, and a limit's keys are tagged by
//!   its key. The limits of a call are grouped by key, one script call per group; with several
//!   groups, all are peeked first and charged only if all allow. That keeps "all or nothing"
//!   except against a concurrent call that takes the last permit of one group between the
//!   peek and the charge (then the other groups are charged alone). A single server decides
//!   every call in one script call, exactly.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::Decision;
use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, Held, Now, Request, Store, StoreDecision, StoreError};

use crate::error::RedisLimitError;
use crate::lease::{Lease, LeaseOp};
use crate::limit::RedisLimit;
use crate::reply::LimitRequest;
use crate::store::RedisStore;

/// A limit in Redis: its parameters and the name that keeps it apart from the other limits on
/// the same key (a store's form of a limit, made once).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedLimit {
    /// The algorithm and its parameters.
    pub limit: RedisLimit,
    /// Part of every key of this limit (`PREFIX{KEY}NAME`).
    pub name: String,
}

impl NamedLimit {
    /// How long each permit is leased (concurrency limits only).
    pub(crate) fn lease(&self) -> Option<Duration> {
        self.limit.lease_us().map(Duration::from_micros)
    }
}

impl StoreError for RedisLimitError {
    fn kind(&self) -> FailureKind {
        match self {
            RedisLimitError::Timeout(_)
            | RedisLimitError::Connection(_)
            | RedisLimitError::Stopped => FailureKind::Outage,
            RedisLimitError::InsufficientCapacity { .. }
            | RedisLimitError::Unsupported(_)
            | RedisLimitError::Config(_) => FailureKind::Request,
            RedisLimitError::Script(_)
            | RedisLimitError::CorruptState(_)
            | RedisLimitError::NotConfigured(_)
            | RedisLimitError::UnexpectedReply(_) => FailureKind::Refused,
        }
    }
}

impl<K: AsRef<[u8]> + ?Sized + Sync + 'static> Store<K> for RedisStore {
    type Limit = Arc<NamedLimit>;
    type Error = RedisLimitError;

    fn capacity(&self, limit: &Arc<NamedLimit>) -> u64 {
        limit.limit.capacity()
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, RedisLimitError> {
        if let [only] = requests {
            let asked = [LimitRequest {
                limit: &only.limit.limit,
                name: &only.limit.name,
                key: only.key.as_ref(),
                permits: only.permits,
            }];
            let mut multi = self.decide_all(&asked, op, now).await?;
            let held = multi
                .leases
                .drain(..)
                .map(|lease| Held {
                    request: 0,
                    id: lease.id,
                })
                .collect();
            return multi
                .decisions
                .pop()
                .map(|decision| StoreDecision::one(decision).holding(held))
                .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()));
        }
        // Each request's slot among the limits asked (the same limit and key: one slot).
        let mut asked: Vec<LimitRequest<'a>> = Vec::with_capacity(requests.len());
        let mut slot_of = Vec::with_capacity(requests.len());
        for request in requests {
            let key = request.key.as_ref();
            let same = asked
                .iter()
                .position(|a| a.name == request.limit.name && a.key == key);
            let slot = match same {
                Some(slot) => {
                    let sum = asked[slot].permits.saturating_add(request.permits.get());
                    asked[slot].permits = sum;
                    slot
                }
                None => {
                    asked.push(LimitRequest {
                        limit: &request.limit.limit,
                        name: &request.limit.name,
                        key,
                        permits: request.permits,
                    });
                    asked.len() - 1
                }
            };
            slot_of.push(slot);
        }
        let (decisions, leased) = decide_requests(self, &asked, op, now).await?;
        let mut outcome = Vec::with_capacity(requests.len());
        for &slot in &slot_of {
            let decision = decisions
                .get(slot)
                .copied()
                .ok_or_else(|| RedisLimitError::UnexpectedReply("missing decision".into()))?;
            outcome.push(decision);
        }
        // A slot's lease is held under the first request asking it (merged requests share it).
        let held = leased
            .into_iter()
            .filter_map(|(slot, id)| {
                let request = slot_of.iter().position(|&s| s == slot)?;
                Some(Held { request, id })
            })
            .collect();
        Ok(StoreDecision::many(outcome).holding(held))
    }

    async fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        held: &'a [Held],
    ) -> Result<(), RedisLimitError> {
        // Whether each was still held matters not: a lease that ran out is given back too.
        self.on_leases(requests, held, LeaseOp::Release, Now::Store)
            .await
            .map(drop)
    }

    fn lease(&self, limit: &Arc<NamedLimit>) -> Option<Duration> {
        limit.lease()
    }

    async fn renew<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        held: &'a [Held],
        now: Now,
    ) -> Result<bool, RedisLimitError> {
        self.on_leases(requests, held, LeaseOp::Renew, now).await
    }

    async fn ping(&self) -> Result<(), RedisLimitError> {
        RedisStore::ping(self).await
    }
}

impl RedisStore {
    /// Applies `op` to each lease in `held`, taken by a call on `requests`; whether every one
    /// was still held.
    async fn on_leases<K: AsRef<[u8]> + ?Sized>(
        &self,
        requests: &[Request<'_, Arc<NamedLimit>, K>],
        held: &[Held],
        op: LeaseOp,
        now: Now,
    ) -> Result<bool, RedisLimitError> {
        let mut all_held = true;
        for Held { request, id } in held {
            let Some(asked) = requests.get(*request) else {
                return Err(RedisLimitError::Unsupported(format!(
                    "a held lease names request {request} of a call of {}",
                    requests.len()
                )));
            };
            let key = asked.key.as_ref();
            // Requests for the same limit and key were asked as one, for their sum.
            let permits = requests
                .iter()
                .filter(|r| r.limit.name == asked.limit.name && r.key.as_ref() == key)
                .map(|r| r.permits.get())
                .fold(0u64, u64::saturating_add);
            let mut keys = self.limit_keys(key, &asked.limit.name, &asked.limit.limit);
            let (Some(by_expiry), Some(permits_held), None) =
                (keys.next(), keys.next(), keys.next())
            else {
                return Err(RedisLimitError::Unsupported(format!(
                    "a lease is held under request {request}, whose limit `{}` leases nothing",
                    asked.limit.name
                )));
            };
            let lease = Lease {
                keys: [by_expiry, permits_held],
                id: id.clone(),
                permits,
                expires_at: 0,
            };
            // `false`: the lease had run out already (or was released), which is no error.
            all_held &= self.lease_op(&asked.limit.limit, &lease, op, now).await?;
        }
        Ok(all_held)
    }
}

/// Each request's decision, and the leases taken (their request's index and id).
type Decided = (Vec<Decision>, Vec<(usize, String)>);

/// Decides `requests` together: one `decide_all` on a single server; under Cluster, one per
/// key, peeked first when there are several (see the module docs), except charges, which
/// every group takes whatever the others answer.
///
/// Also returns the leases taken (concurrency limits of an allowed call), by request index.
async fn decide_requests(
    store: &RedisStore,
    requests: &[LimitRequest<'_>],
    op: Op,
    now: Now,
) -> Result<Decided, RedisLimitError> {
    let Some(first) = requests.first() else {
        return Ok((Vec::new(), Vec::new()));
    };
    if !store.is_cluster() || requests.iter().all(|r| r.key == first.key) {
        let multi = store.decide_all(requests, op, now).await?;
        let leased = leased_by(requests, 0..requests.len(), multi.leases);
        return Ok((multi.decisions, leased));
    }
    let mut groups: Vec<(&[u8], Vec<usize>)> = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        match groups.iter_mut().find(|(key, _)| *key == request.key) {
            Some((_, members)) => members.push(index),
            None => groups.push((request.key, vec![index])),
        }
    }
    let run = async |op| -> Result<Decided, RedisLimitError> {
        let mut decisions: Vec<Option<Decision>> = vec![None; requests.len()];
        let mut leased = Vec::new();
        for (_, members) in &groups {
            let group: Vec<LimitRequest<'_>> = members.iter().map(|&i| requests[i]).collect();
            let multi = store.decide_all(&group, op, now).await?;
            leased.extend(leased_by(requests, members.iter().copied(), multi.leases));
            for (&i, decision) in members.iter().zip(multi.decisions) {
                decisions[i] = Some(decision);
            }
        }
        let decisions = decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| RedisLimitError::UnexpectedReply("missing decision".into())))
            .collect::<Result<_, _>>()?;
        Ok((decisions, leased))
    };
    if op == Op::Charge {
        // Charged whatever the answer: nothing to peek first.
        return run(op).await;
    }
    let (peeked, _) = run(Op::Peek).await?;
    if !op.consumes() || !peeked.iter().all(Decision::allowed) {
        return Ok((peeked, Vec::new()));
    }
    run(op).await
}

/// Which of `members` (indices into `requests`, in the order a `decide_all` call asked them)
/// each of its `leases` belongs to: the leases come one per leased (concurrency) limit, in
/// request order.
fn leased_by(
    requests: &[LimitRequest<'_>],
    members: impl Iterator<Item = usize>,
    leases: Vec<Lease>,
) -> Vec<(usize, String)> {
    members
        .filter(|&i| requests[i].limit.lease_us().is_some())
        .zip(leases)
        .map(|(i, lease)| (i, lease.id))
        .collect()
}
