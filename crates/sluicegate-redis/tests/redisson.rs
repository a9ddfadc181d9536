//! Redisson-style rate limiter objects: stored configuration, OVERALL and PER_CLIENT, a hard
//! cap in every interval (Redisson issue 3639), available permits right after expiry
//! (Redisson issue 5751), corrupt configurations.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Algorithm, SlidingLog};
use sluicegate_redis::{
    RateConfig, RateLimiterObject, RateType, RedisLimitError, RedisStore, StoreConfig,
};

use sluicegate_redis::testing::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const T0: u64 = 1_763_000_000_000_000;

async fn setup() -> Result<(RedisServer, RedisStore), BoxError> {
    let server = RedisServer::start()?;
    let config = StoreConfig {
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    };
    let store = server.store(config).await?;
    Ok((server, store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_is_set_once_read_back_and_replaced() -> Result<(), BoxError> {
    let (_server, store) = setup().await?;
    let limiter = RateLimiterObject::new(store.clone(), "api");
    let err = limiter.try_acquire_at(1, Now::At(T0)).await.err();
    assert!(
        matches!(err, Some(RedisLimitError::NotConfigured(_))),
        "{err:?}"
    );
    assert!(matches!(
        limiter.get_config().await,
        Err(RedisLimitError::NotConfigured(_))
    ));

    let second = Duration::from_secs(1);
    assert!(limiter.try_set_rate(RateType::Overall, 3, second).await?);
    assert!(!limiter.try_set_rate(RateType::PerClient, 9, second).await?);
    let expected = RateConfig {
        rate_type: RateType::Overall,
        rate: 3,
        interval: second,
    };
    assert_eq!(limiter.get_config().await?, expected);
    // Another client sees the same configuration.
    let other = RateLimiterObject::new(store, "api");
    assert_eq!(other.get_config().await?, expected);

    for _ in 0..3 {
        assert!(limiter.try_acquire_at(1, Now::At(T0)).await?.allowed());
    }
    assert!(
        !other.try_acquire_at(1, Now::At(T0)).await?.allowed(),
        "OVERALL is shared"
    );
    // set_rate replaces the configuration and forgets the permits taken.
    limiter.set_rate(RateType::Overall, 5, second * 2).await?;
    assert_eq!(limiter.get_config().await?.rate, 5);
    assert_eq!(limiter.available_permits_at(Now::At(T0)).await?, 5);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_budgets_are_separate() -> Result<(), BoxError> {
    let (_server, store) = setup().await?;
    let a = RateLimiterObject::with_client_id(store.clone(), "pc", "client-a");
    let b = RateLimiterObject::with_client_id(store.clone(), "pc", "client-b");
    a.try_set_rate(RateType::PerClient, 2, Duration::from_secs(10))
        .await?;
    for limiter in [&a, &b] {
        assert!(limiter.try_acquire_at(2, Now::At(T0)).await?.allowed());
        assert!(!limiter.try_acquire_at(1, Now::At(T0)).await?.allowed());
    }
    // The same client id in another object shares that client's budget.
    let a_again = RateLimiterObject::with_client_id(store, "pc", "client-a");
    assert_eq!(a_again.available_permits_at(Now::At(T0)).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_permits_come_back_the_moment_they_expire() -> Result<(), BoxError> {
    // Redisson issue 5751: availablePermits stayed 0 after the interval until the next acquire.
    let (_server, store) = setup().await?;
    let limiter = RateLimiterObject::new(store, "expiry");
    limiter
        .try_set_rate(RateType::Overall, 4, Duration::from_secs(1))
        .await?;
    assert!(limiter.try_acquire_at(3, Now::At(T0)).await?.allowed());
    assert!(
        limiter
            .try_acquire_at(1, Now::At(T0 + 400_000))
            .await?
            .allowed()
    );
    assert_eq!(
        limiter.available_permits_at(Now::At(T0 + 999_999)).await?,
        0
    );
    assert_eq!(
        limiter
            .available_permits_at(Now::At(T0 + 1_000_000))
            .await?,
        3
    );
    assert_eq!(
        limiter
            .available_permits_at(Now::At(T0 + 1_400_000))
            .await?,
        4
    );
    Ok(())
}

#[test]
fn no_interval_ever_holds_more_than_the_rate() -> Result<(), BoxError> {
    // Redisson issue 3639: bursts at interval boundaries let through up to twice the rate.
    let server = RedisServer::start()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = runtime.block_on(server.store(StoreConfig {
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    }))?;
    let interval = Duration::from_millis(1_000);
    let strategy = (
        1u64..8,
        prop::collection::vec((0u64..400_000, 1u64..4), 1..80),
    );
    let cases = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner.run(&strategy, |(rate, trace)| {
        let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let limiter = RateLimiterObject::new(store.clone(), format!("cap-{case}"));
        runtime
            .block_on(limiter.try_set_rate(RateType::Overall, rate, interval))
            .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
        let log = SlidingLog::new(rate, interval).expect("valid log");
        let mut state = log.initial_state(0);
        let mut granted: Vec<(u64, u64)> = Vec::new();
        let mut now = T0;
        for (dt, permits) in trace {
            now += dt;
            let got = runtime.block_on(limiter.try_acquire_at(permits, Now::At(now)));
            let n = NonZeroU64::new(permits).expect("permits start at 1");
            match (log.decide(&mut state, now, n, Op::Check), got) {
                (Ok(expected), Ok(decision)) => {
                    prop_assert_eq!(expected, decision);
                    if decision.allowed() {
                        granted.push((now, permits));
                    }
                }
                (Err(_), Err(RedisLimitError::InsufficientCapacity { .. })) => {}
                (e, g) => prop_assert!(false, "memory {e:?}, redis {g:?}"),
            }
        }
        for &(t, _) in &granted {
            let in_window: u64 = granted
                .iter()
                .filter(|&&(s, _)| s <= t && s + 1_000_000 > t)
                .map(|&(_, p)| p)
                .sum();
            prop_assert!(
                in_window <= rate,
                "{in_window} permits in the interval ending {t}"
            );
        }
        Ok(())
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_and_corrupt_configurations_are_errors() -> Result<(), BoxError> {
    let (_server, store) = setup().await?;
    let limiter = RateLimiterObject::new(store.clone(), "bad");
    assert!(matches!(
        limiter
            .try_set_rate(RateType::Overall, 0, Duration::from_secs(1))
            .await,
        Err(RedisLimitError::Config(_))
    ));
    assert!(matches!(
        limiter
            .try_set_rate(RateType::Overall, 1, Duration::ZERO)
            .await,
        Err(RedisLimitError::Config(_))
    ));
    limiter
        .try_set_rate(RateType::Overall, 2, Duration::from_secs(1))
        .await?;
    let err = limiter.try_acquire_at(3, Now::At(T0)).await.err();
    assert!(
        matches!(
            err,
            Some(RedisLimitError::InsufficientCapacity {
                requested: 3,
                capacity: 2
            })
        ),
        "{err:?}"
    );
    assert!(matches!(
        limiter.try_acquire_at(0, Now::At(T0)).await,
        Err(RedisLimitError::Config(_))
    ));

    // Another program rewrites the configuration.
    let config_key = "sluicegate:{bad}rrl:config";
    store
        .command::<()>(redis::cmd("HSET").arg(config_key).arg("type").arg("bogus"))
        .await?;
    let err = limiter.get_config().await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    let err = limiter.try_acquire_at(1, Now::At(T0)).await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    store
        .command::<()>(
            redis::cmd("HSET")
                .arg(config_key)
                .arg("type")
                .arg("overall")
                .arg("rate")
                .arg("-5"),
        )
        .await?;
    let err = limiter.try_acquire_at(1, Now::At(T0)).await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    store
        .command::<()>(redis::cmd("DEL").arg(config_key))
        .await?;
    store
        .command::<()>(redis::cmd("SET").arg(config_key).arg("x"))
        .await?;
    let err = limiter.get_config().await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    let err = limiter.try_acquire_at(1, Now::At(T0)).await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_waits_for_permits_on_server_time() -> Result<(), BoxError> {
    let (_server, store) = setup().await?;
    let limiter = RateLimiterObject::new(store, "wait");
    limiter
        .try_set_rate(RateType::Overall, 1, Duration::from_millis(20))
        .await?;
    assert!(limiter.try_acquire(1).await?);
    // Waits out the interval instead of failing.
    limiter.acquire(1).await?;
    assert!(limiter.try_acquire_for(1, Duration::from_secs(5)).await?);
    // No time to wait at all: refused at once.
    assert!(!limiter.try_acquire_for(1, Duration::ZERO).await?);
    assert!(limiter.available_permits().await? <= 1);
    Ok(())
}
