//! The layer over any store of the core's backend seam ([`sluicegate::store::Store`]): Redis,
//! Redis behind its failure policy (`sluicegate_redis::FailSafe`), or a store of one's own.
//! [`StoreBackend`] is a [`Backend`] for keys of any type that prints (`Debug`: an IP address,
//! a tuple of header values), each made a `String` key of the store.

use std::fmt::Debug;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::Op;
use sluicegate::store::{FailureKind, Held, Now, Request, Store, StoreError as _};
use tokio::time::{Instant, MissedTickBehavior};

use crate::rate_limit::backend::{Backend, LimitInfo, Verdict};
use crate::rate_limit::error::BackendError;

/// The answer of a [`StoreBackend`]: boxed, as a store's answer may wait on the network.
pub type StoreFuture = Pin<Box<dyn Future<Output = Result<Verdict, BackendError>> + Send>>;

/// A [`Backend`] deciding every request's limits together in a store of the backend seam.
///
/// A `concurrency` limit's permits are given back when the response ends ([`Store::release`]):
/// in Redis, the request's leases (which also expire, so a process that dies holding one
/// cannot leak it); behind a failure policy, in the store that answered. Until then the
/// leases are renewed every third of the shortest [lease](Store::lease), so a response (a
/// download, a WebSocket) that lasts longer than a lease keeps its place.
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
    /// headers say of it (see [`LimitInfo::of`]).
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

/// Renews a request's leases in its store until dropped, which happens when its permits are
/// given back (or the verdict holding them is dropped unused).
#[derive(Debug)]
pub(crate) struct Renewing(tokio::task::AbortHandle);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often a holder renews the permits of `limits`: every third of the shortest lease, so
/// that a renewal late by most of a lease still comes in time; `None` if none expire.
fn renew_every<S: Store<String>>(store: &S, limits: &[S::Limit]) -> Option<Duration> {
    let shortest = limits.iter().filter_map(|limit| store.lease(limit)).min()?;
    Some((shortest / 3).max(Duration::from_millis(1)))
}

/// Renews `held` every `every`, from a task of the current runtime (`None` outside one: the
/// leases then simply run out, as a release they miss would).
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
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let task = runtime.spawn(async move {
        let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let requests = requests(&limits, &key, permits);
            if let Err(error) = store.renew(&requests, &held, Now::Store).await {
                tracing::debug!(%error, "a concurrency lease was not renewed");
            }
        }
    });
    Some(Renewing(task.abort_handle()))
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
