//! Concurrency permits taken through the backend seam come back through it: the store names
//! the leases it took in the outcome, and `release` gives back exactly those.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::Rate;
use sluicegate::state_machine::Op;
use sluicegate::store::{Held, Now, Request, Store};
use sluicegate_redis::testing::{RedisCluster, RedisServer};
use sluicegate_redis::{NamedLimit, RedisLimit, RedisStore, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn named(limit: RedisLimit, name: &str) -> Arc<NamedLimit> {
    Arc::new(NamedLimit {
        limit,
        name: name.into(),
    })
}

/// Decides `requests` with `Op::Check` and returns whether they passed and what is held.
async fn check(
    store: &RedisStore,
    requests: &[Request<'_, Arc<NamedLimit>, str>],
) -> Result<(bool, Vec<Held>), BoxError> {
    let outcome = store.decide(requests, Op::Check, Now::Store).await?;
    Ok((outcome.allowed, outcome.held))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_holds_the_leases_of_its_concurrency_limits_until_released() -> Result<(), BoxError>
{
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let rate = named(RedisLimit::gcra(Rate::per_second(1000)?, 1000)?, "rate");
    // A lease far longer than the test: only a release frees a permit.
    let in_flight = named(
        RedisLimit::concurrency(2, Duration::from_secs(3600))?,
        "in_flight",
    );
    let one = NonZeroU64::MIN;
    let call = [
        Request {
            limit: &rate,
            key: "alice",
            permits: one,
        },
        Request {
            limit: &in_flight,
            key: "alice",
            permits: one,
        },
    ];
    let (allowed, first) = check(&store, &call).await?;
    assert!(allowed);
    // The rate limit holds nothing; the concurrency limit, one lease, under request 1.
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].request, 1);
    let (allowed, second) = check(&store, &call).await?;
    assert!(allowed);
    assert_ne!(first[0].id, second[0].id);
    assert!(
        !check(&store, &call).await?.0,
        "two in flight: the third waits"
    );

    store.release(&call, &first).await?;
    let (allowed, third) = check(&store, &call).await?;
    assert!(allowed, "the first lease was given back");
    // Given back once only: releasing it again frees nothing more.
    store.release(&call, &first).await?;
    assert!(!check(&store, &call).await?.0);
    store.release(&call, &second).await?;
    store.release(&call, &third).await?;

    // The same limit named twice for one key is asked once, for the sum, under one lease:
    // releasing it gives back both permits.
    let twice = [call[1], call[1]];
    let (allowed, held) = check(&store, &twice).await?;
    assert!(allowed);
    assert_eq!(held.len(), 1);
    assert!(!check(&store, &call[1..]).await?.0, "both permits taken");
    store.release(&twice, &held).await?;
    assert!(check(&store, &twice).await?.0, "both came back");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_cluster_each_keys_lease_is_held_and_released() -> Result<(), BoxError> {
    let cluster = RedisCluster::start()?;
    let store = cluster.store(StoreConfig::default()).await?;
    let in_flight = named(
        RedisLimit::concurrency(1, Duration::from_secs(3600))?,
        "in_flight",
    );
    let one = NonZeroU64::MIN;
    // Two keys: two slots, decided one group each (peeked first, then taken).
    let call = [
        Request {
            limit: &in_flight,
            key: "alice",
            permits: one,
        },
        Request {
            limit: &in_flight,
            key: "bob",
            permits: one,
        },
    ];
    let (allowed, held) = check(&store, &call).await?;
    assert!(allowed);
    let mut requests: Vec<usize> = held.iter().map(|h| h.request).collect();
    requests.sort_unstable();
    assert_eq!(requests, [0, 1]);
    assert!(
        !check(&store, &call[1..]).await?.0,
        "bob's one permit is held"
    );
    store.release(&call, &held).await?;
    assert!(check(&store, &call[..1]).await?.0, "alice's came back");
    assert!(check(&store, &call[1..]).await?.0, "bob's came back");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_is_held_for_another_lease_from_the_renewal() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let lease = Duration::from_secs(10);
    let in_flight = named(RedisLimit::concurrency(1, lease)?, "in_flight");
    assert_eq!(Store::<str>::lease(&store, &in_flight), Some(lease));
    let rate = named(RedisLimit::gcra(Rate::per_second(1000)?, 1000)?, "rate");
    assert_eq!(
        Store::<str>::lease(&store, &rate),
        None,
        "a rate limit leases nothing"
    );
    let call = [Request {
        limit: &in_flight,
        key: "alice",
        permits: NonZeroU64::MIN,
    }];
    // Times chosen by the test, from now on: `release` reads Redis's clock, and this way a
    // lease the test holds is one Redis's clock has not seen run out.
    let base = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros(),
    )?;
    let at = |seconds: u64| Now::At(base + seconds * 1_000_000);
    let taken = store.decide(&call, Op::Check, at(0)).await?;
    assert!(taken.allowed);
    // Renewed at 8 s: held until 18 s, past the 10 s it was taken for.
    assert!(
        store.renew(&call, &taken.held, at(8)).await?,
        "held when renewed"
    );
    let at_15 = store.decide(&call, Op::Check, at(15)).await?;
    assert!(
        !at_15.allowed,
        "the renewed lease still holds the one permit"
    );
    let at_19 = store.decide(&call, Op::Check, at(19)).await?;
    assert!(at_19.allowed, "the renewed lease ran out at 18 s");

    // A lease run out is not taken again by a renewal, which says it is gone.
    assert!(!store.renew(&call, &taken.held, at(20)).await?);
    // Nor is one released.
    let at_21 = store.decide(&call, Op::Check, at(21)).await?;
    assert!(!at_21.allowed, "19 s's lease holds the permit");
    store.release(&call, &at_19.held).await?;
    assert!(!store.renew(&call, &at_19.held, at(22)).await?);
    assert!(store.decide(&call, Op::Check, at(22)).await?.allowed);
    Ok(())
}
