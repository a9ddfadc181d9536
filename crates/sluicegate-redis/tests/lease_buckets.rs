//! A bucket's leases on a real `redis-server` admit about what the plain path admits: a lease
//! is charged as at its end, and ends soon enough that the charge stays within the bucket's
//! tolerance, so a small bucket under a long lease life is not shut to every other request
//! for the lease's whole life.

use std::num::NonZeroU64;

use sluicegate::lease::LeaseSizing;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{AnyAlgorithm, Micros};
use sluicegate_redis::testing::RedisServer;
use sluicegate_redis::{LeaseConfig, LimitRequest, RedisLimit, RedisStore, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Unix time in µs well past 2^50, as real ones are.
const BASE: Micros = 1_763_000_000_000_000;

/// Requests every 150 µs (two thirds of the rate) for 300 ms on one key of the limit `name`:
/// the grants.
async fn grants(store: &RedisStore, limit: &RedisLimit, name: &str) -> Result<u64, BoxError> {
    let request = [LimitRequest {
        limit,
        name,
        key: b"k",
        permits: NonZeroU64::MIN,
    }];
    let mut granted = 0;
    for step in 0..2_000 {
        let at = Now::At(BASE + step * 150);
        if store.decide_all(&request, Op::Check, at).await?.allowed {
            granted += 1;
        }
    }
    Ok(granted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_bucket_admits_about_as_much_with_leases() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let config = StoreConfig {
        expiry_grace: std::time::Duration::from_secs(3600),
        ..StoreConfig::default()
    };
    let plain = server.store(config.clone()).await?;
    let leasing = server
        .store(config.with_leasing(LeaseConfig {
            sizing: LeaseSizing {
                life: 20_000,
                ..LeaseSizing::default()
            },
            ..LeaseConfig::default()
        }))
        .await?;
    for spec in [
        "gcra:rate=10000/s,burst=20",
        "token-bucket:rate=10000/s,burst=20",
        "leaky-bucket:rate=10000/s,capacity=20",
    ] {
        let algorithm: AnyAlgorithm = spec.parse()?;
        let limit = RedisLimit::from_algorithm(&algorithm, std::time::Duration::from_secs(1))?;
        let expected = grants(&plain, &limit, &format!("plain {spec}")).await?;
        let leased = grants(&leasing, &limit, &format!("leased {spec}")).await?;
        // Under the rate, the plain path passes every request; a lease may leave up to its
        // size unused each time, no more.
        assert_eq!(expected, 2_000, "{spec}");
        assert!(
            leased * 10 >= expected * 9,
            "{spec}: leased {leased}, plain {expected}"
        );
        assert!(leasing.lease_stats().local_grants > 0, "{spec}");
    }
    Ok(())
}
