//! A Redis store that is connected when Redis first answers: a service or a proxy that starts
//! while Redis is down still starts (its failure policy answers until then) instead of
//! refusing to run. Once made, the connection reconnects by itself after Redis restarts.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, Held, Now, Request, Store, StoreDecision, StoreError};

use crate::decide::NamedLimit;
use crate::error::RedisLimitError;
use crate::leasing::LeaseStats;
use crate::over_limit::OverLimitStats;
use crate::store::{RedisStore, StoreConfig};

/// A Redis server or cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`redis://host:port/db`).
    Single(String),
    /// Any nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

/// Why a [`LazyStore`] did not decide a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LazyStoreError {
    /// No connection has been made yet (Redis has not answered since start).
    #[error("not connected to redis yet")]
    NotConnected,
    /// The connected store failed.
    #[error(transparent)]
    Redis(#[from] RedisLimitError),
}

impl StoreError for LazyStoreError {
    fn kind(&self) -> FailureKind {
        match self {
            // Not an outage: there is nothing to probe until a connection is made.
            LazyStoreError::NotConnected => FailureKind::Refused,
            LazyStoreError::Redis(error) => error.kind(),
        }
    }
}

/// A [`RedisStore`] made by the first [`connect`](LazyStore::connect) that succeeds; until
/// then every call fails with [`LazyStoreError::NotConnected`].
#[derive(Debug)]
pub struct LazyStore {
    target: RedisTarget,
    config: StoreConfig,
    store: OnceLock<RedisStore>,
}

impl LazyStore {
    /// A store for `target`, not connected yet.
    pub fn new(target: RedisTarget, config: StoreConfig) -> LazyStore {
        LazyStore {
            target,
            config,
            store: OnceLock::new(),
        }
    }

    /// Where it connects.
    pub fn target(&self) -> &RedisTarget {
        &self.target
    }

    /// Whether a connection has been made.
    pub fn is_connected(&self) -> bool {
        self.store.get().is_some()
    }

    /// One attempt to connect (if not connected yet), bounded by the configured timeout. An
    /// unreachable Redis is an outage error ([`FailureKind::Outage`]); a bad URL or prefix is
    /// a configuration error, which no retry mends.
    pub async fn connect(&self) -> Result<(), RedisLimitError> {
        if self.is_connected() {
            return Ok(());
        }
        let store = match &self.target {
            RedisTarget::Single(url) => RedisStore::connect(url, self.config.clone()).await?,
            RedisTarget::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                RedisStore::connect_cluster(&nodes, self.config.clone()).await?
            }
        };
        // Two concurrent attempts: the first kept, the other dropped.
        let _ = self.store.set(store);
        Ok(())
    }

    /// Tries to connect every `every` until it succeeds (spawn it for a process that
    /// started while Redis was down).
    pub async fn connect_until_up(self: Arc<Self>, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if self.connect().await.is_ok() {
                return;
            }
        }
    }

    /// The connected store's over-limit cache: what it holds and has answered (all zero
    /// before a connection, or without a cache).
    pub fn over_limit_stats(&self) -> OverLimitStats {
        self.store
            .get()
            .map(RedisStore::over_limit_stats)
            .unwrap_or_default()
    }

    /// The connected store's leasing counts (all zero before a connection, or without
    /// leasing).
    pub fn lease_stats(&self) -> LeaseStats {
        self.store
            .get()
            .map(RedisStore::lease_stats)
            .unwrap_or_default()
    }

    /// Gives back the connected store's leased permits (see [`RedisStore::return_leases`]);
    /// 0 before a connection.
    pub async fn return_leases(&self) -> Result<u64, RedisLimitError> {
        match self.store.get() {
            Some(store) => store.return_leases().await,
            None => Ok(0),
        }
    }

    /// Drops every denial the connected store's over-limit cache holds (see
    /// [`RedisStore::clear_over_limit_cache`]).
    pub fn clear_over_limit_cache(&self) {
        if let Some(store) = self.store.get() {
            store.clear_over_limit_cache();
        }
    }

    fn connected(&self) -> Result<&RedisStore, LazyStoreError> {
        self.store.get().ok_or(LazyStoreError::NotConnected)
    }
}

impl<K: AsRef<[u8]> + ?Sized + Sync + 'static> Store<K> for LazyStore {
    type Limit = Arc<NamedLimit>;
    type Error = LazyStoreError;

    fn capacity(&self, limit: &Arc<NamedLimit>) -> u64 {
        limit.limit.capacity()
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, LazyStoreError> {
        let store = self.connected()?;
        Ok(Store::<K>::decide(store, requests, op, now).await?)
    }

    async fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        held: &'a [Held],
    ) -> Result<(), LazyStoreError> {
        if held.is_empty() {
            return Ok(());
        }
        let store = self.connected()?;
        Ok(Store::<K>::release(store, requests, held).await?)
    }

    fn lease(&self, limit: &Arc<NamedLimit>) -> Option<Duration> {
        limit.lease()
    }

    async fn renew<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, K>],
        held: &'a [Held],
        now: Now,
    ) -> Result<bool, LazyStoreError> {
        if held.is_empty() {
            return Ok(true);
        }
        let store = self.connected()?;
        Ok(Store::<K>::renew(store, requests, held, now).await?)
    }

    async fn ping(&self) -> Result<(), LazyStoreError> {
        Ok(self.connected()?.ping().await?)
    }
}
