//! The layer over any store of the core's backend seam ([`sluicegate::store::Store`]): Redis,
//! Redis behind its failure policy (`sluicegate_redis::FailSafe`), or a store of one's own.
//! [`StoreBackend`] decides for keys of any type that prints (`Debug`: an IP address, a tuple
//! of header values), each made a `String` key of the store.

use std::fmt::Debug;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, Held, Now, Request, Store, StoreError as _};
use tokio::time::{Instant, MissedTickBehavior};

use crate::rate_limit::backend::{Backend, Renewing, Verdict};
use crate::rate_limit::error::BackendError;
use crate::ratelimit_fields::LimitInfo;

/// The answer of a [`StoreBackend`]: boxed, as a store's answer may wait on the network.
pub(crate) type StoreFuture = Pin<Box<dyn Future<Output = Result<Verdict, BackendError>> + Send>>;

/// What a layer built with
/// [`RateLimitBuilder::build_with_store`](super::RateLimitBuilder::build_with_store)
/// decides with: every request's limits together, in a store of the backend seam.
///
/// A `concurrency` limit's permits are given back when the response ends ([`Store::release`]):
/// in Redis, the request's leases (which also expire, so a process that dies holding one
/// cannot leak it); behind a failure policy, in the store that answered. Until then the
/// leases are renewed every third of the shortest [lease](Store::lease), so a response (a
/// download, a WebSocket) that lasts longer than a lease keeps its place; choose a lease of
/// several times the store's timeout, or one slow renewal loses it.
pub struct StoreBackend<S: Store<String>> {
    store: Arc<S>,
    limits: Arc<[S::Limit]>,
    infos: Arc<[LimitInfo]>,
    /// Whether a limit is a concurrency limit, whose permits are given back when the
    /// response ends.
    concurrency: bool,
    /// How often a request's leases are renewed while it holds them (none if they never
    /// expire).
    renew_every: Option<Duration>,
}

impl<S: Store<String>> StoreBackend<S> {
    /// Decides in `store` the `limits`, each in the store's form with what the response
    /// headers say of it (see [`LimitInfo::of`]); what
    /// [`RateLimitBuilder::build_with_store`](super::RateLimitBuilder::build_with_store) makes, for
    /// [`RateLimitBuilder::build_with`](super::RateLimitBuilder::build_with).
    pub fn new(store: Arc<S>, limits: impl IntoIterator<Item = (LimitInfo, S::Limit)>) -> Self {
        let (infos, limits): (Vec<LimitInfo>, Vec<S::Limit>) = limits.into_iter().unzip();
        StoreBackend {
            concurrency: infos.iter().any(LimitInfo::is_concurrency),
            renew_every: renew_every(&*store, &limits),
            store,
            limits: limits.into(),
            infos: infos.into(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }
}

impl<S: Store<String>> Debug for StoreBackend<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBackend")
            .field("limits", &self.infos)
            .finish_non_exhaustive()
    }
}

/// A store's key for a layer's key.
fn store_key<K: Debug>(key: &K) -> String {
    format!("{key:?}")
}

/// Every limit of `limits` asked for `key`.
fn requests<'a, L>(
    limits: &'a [L],
    key: &'a String,
    permits: NonZeroU64,
) -> Vec<Request<'a, L, String>> {
    limits
        .iter()
        .map(|limit| Request {
            limit,
            key,
            permits,
        })
        .collect()
}

/// Applies `op` to `limits` for `key`, together.
async fn decide_in<S: Store<String>>(
    store: &S,
    limits: &[S::Limit],
    key: &String,
    permits: NonZeroU64,
    op: Op,
) -> Result<Verdict, BackendError> {
    let requests = requests(limits, key, permits);
    match store.decide(&requests, op, Now::Store).await {
        Ok(outcome) => Ok(
            Verdict::new(outcome.allowed, outcome.decisions.into_iter().collect())
                .with_held(outcome.held),
        ),
        Err(error) => Err(match error.kind() {
            FailureKind::KeyCapacity => BackendError::KeyCapacity { max_keys: 0 },
            _ => BackendError::Unavailable(error.to_string().into()),
        }),
    }
}

/// The shortest wait between two renewals of one request's leases: a lease far shorter than
/// a network round trip cannot be held anyway, and a shorter wait would only load the store.
const RENEW_AT_MOST_EVERY: Duration = Duration::from_millis(10);

/// How often a holder renews the permits of `limits`: every third of the shortest lease, so
/// that a renewal late by most of a lease still comes in time; `None` if none expire.
fn renew_every<S: Store<String>>(store: &S, limits: &[S::Limit]) -> Option<Duration> {
    let shortest = limits.iter().filter_map(|limit| store.lease(limit)).min()?;
    Some((shortest / 3).max(RENEW_AT_MOST_EVERY))
}

/// Renews `held` every `every`, from a task of the current runtime, until dropped or a lease
/// is found gone (`None` outside a runtime: the leases then run out, as a release they miss
/// would).
fn renew_while_held<S>(
    store: Arc<S>,
    limits: Arc<[S::Limit]>,
    key: String,
    permits: NonZeroU64,
    held: Vec<Held>,
    every: Duration,
) -> Option<Renewing>
where
    S: Store<String> + 'static,
    S::Limit: 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "concurrency leases taken outside a tokio runtime are not renewed: they run out \
             after their lease even while their responses last"
        );
        return None;
    };
    let task = runtime.spawn(async move {
        let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let requests = requests(&limits, &key, permits);
            match store.renew(&requests, &held, Now::Store).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        "a concurrency lease ran out before it was renewed (the store was \
                         unreachable for a lease?): the response no longer holds its permit"
                    );
                    return;
                }
                Err(error) => tracing::debug!(%error, "a concurrency lease was not renewed"),
            }
        }
    });
    Some(Renewing::new(task.abort_handle()))
}

impl<K, S> Backend<K> for StoreBackend<S>
where
    K: Debug + Send + Sync + 'static,
    S: Store<String> + 'static,
    S::Limit: 'static,
{
    type Future = StoreFuture;

    fn decide(&self, key: &K, permits: NonZeroU64, op: Op) -> StoreFuture {
        let store = Arc::clone(&self.store);
        let limits = Arc::clone(&self.limits);
        let key = store_key(key);
        let (concurrency, renew_every) = (self.concurrency, self.renew_every);
        Box::pin(async move {
            let verdict = decide_in(&*store, &limits, &key, permits, op).await?;
            let holds = concurrency && op.consumes() && verdict.allowed();
            let verdict = match renew_every {
                Some(every) if holds && !verdict.held().is_empty() => {
                    let held = verdict.held().to_vec();
                    match renew_while_held(store, limits, key, permits, held, every) {
                        Some(renewing) => verdict.renewed_by(renewing),
                        None => verdict,
                    }
                }
                _ => verdict,
            };
            Ok(verdict.holding_permits(holds))
        })
    }

    fn release(&self, key: &K, permits: NonZeroU64, held: Vec<Held>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = Arc::clone(&self.store);
        let limits = Arc::clone(&self.limits);
        let key = store_key(key);
        // Called from a destructor: the release is a call of its own, left to run. A lease it
        // fails to give back still runs out.
        drop(runtime.spawn(async move {
            let requests = requests(&limits, &key, permits);
            if let Err(error) = store.release(&requests, &held).await {
                tracing::debug!(%error, "a concurrency permit was not given back");
            }
        }));
    }

    fn limits(&self) -> &Arc<[LimitInfo]> {
        &self.infos
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use sluicegate::store::StoreDecision;
    use sluicegate::{CheckError, Decision};

    use super::*;

    /// A store of one limit that leases its one permit for three seconds, counting renewals;
    /// `held` says whether a renewal finds the lease still held.
    struct Leasing {
        renewals: AtomicUsize,
        held: AtomicBool,
    }

    impl Leasing {
        fn new(held: bool) -> Arc<Leasing> {
            Arc::new(Leasing {
                renewals: AtomicUsize::new(0),
                held: AtomicBool::new(held),
            })
        }

        fn renewals(&self) -> usize {
            self.renewals.load(Ordering::Relaxed)
        }
    }

    impl Store<String> for Leasing {
        type Limit = ();
        type Error = CheckError;

        fn capacity(&self, _limit: &()) -> u64 {
            1
        }

        async fn decide<'a>(
            &'a self,
            _requests: &'a [Request<'a, (), String>],
            _op: Op,
            _now: Now,
        ) -> Result<sluicegate::store::StoreDecision, CheckError> {
            let lease = Held {
                request: 0,
                id: "lease".into(),
            };
            Ok(StoreDecision::one(Decision::allow(1, 0, 0)).holding(vec![lease]))
        }

        async fn release<'a>(
            &'a self,
            _requests: &'a [Request<'a, (), String>],
            _held: &'a [Held],
        ) -> Result<(), CheckError> {
            Ok(())
        }

        fn lease(&self, _limit: &()) -> Option<Duration> {
            Some(Duration::from_secs(3))
        }

        async fn renew<'a>(
            &'a self,
            _requests: &'a [Request<'a, (), String>],
            _held: &'a [Held],
            _now: Now,
        ) -> Result<bool, CheckError> {
            self.renewals.fetch_add(1, Ordering::Relaxed);
            Ok(self.held.load(Ordering::Relaxed))
        }
    }

    async fn holding_verdict(store: &Arc<Leasing>) -> Result<Verdict, BackendError> {
        let info = LimitInfo::concurrency("in_flight", 1);
        let backend = StoreBackend::new(Arc::clone(store), [(info, ())]);
        Backend::<()>::decide(&backend, &(), NonZeroU64::MIN, Op::Check).await
    }

    #[tokio::test(start_paused = true)]
    async fn leases_are_renewed_while_held_and_not_after() -> Result<(), BackendError> {
        let store = Leasing::new(true);
        let mut verdict = holding_verdict(&store).await?;
        assert!(verdict.holds_permits());
        // Every second, a third of the lease.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(store.renewals(), 3);
        // A clone holds nothing, so it keeps nothing renewed.
        let clone = verdict.clone();
        assert!(clone.held().is_empty() && !clone.holds_permits());
        // Taken to be given back, and dropped (the response ended): no renewal after that.
        drop(verdict.take_held());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(store.renewals(), 3);
        drop(clone);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_found_gone_is_not_renewed_again() -> Result<(), BackendError> {
        let store = Leasing::new(false);
        let verdict = holding_verdict(&store).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(store.renewals(), 1);
        drop(verdict);
        Ok(())
    }
}
