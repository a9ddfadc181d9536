//! Redis stopped and restarted mid-run: every call returns within its timeout with an error
//! the caller can act on, the failure policy answers meanwhile, and the same store works
//! again once Redis is back.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::{MemoryStore, Now as At, Request, Store, StoreDecision};
use sluicegate::{AnyAlgorithm, FixedWindow, Gcra, KeyedLimiter, ManualClock, Rate};
use sluicegate_redis::{
    FailSafe, FailSafeError, FailSafeLimit, FailurePolicy, NamedLimit, RedisLimit, RedisLimitError,
    RedisLimiter, RedisStore, StoreConfig,
};

use sluicegate_redis::testing::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TIMEOUT: Duration = Duration::from_millis(300);

fn config() -> StoreConfig {
    StoreConfig {
        timeout: TIMEOUT,
        ..StoreConfig::default()
    }
}

/// Guards against a hang only (generous bound, not a timing measurement).
async fn no_hang<T>(call: impl Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(TIMEOUT * 20, call)
        .await
        .map_err(|_| "the call hung past its timeout".into())
}

/// The failure policy over Redis, falling back to memory (created at time 0, told the time).
type Safe = FailSafe<RedisStore, MemoryStore<AnyAlgorithm, ManualClock>, String>;

/// A limit in Redis and the same limit in memory.
type Limit = FailSafeLimit<Arc<NamedLimit>, Arc<KeyedLimiter<String, AnyAlgorithm, ManualClock>>>;

fn both(redis: RedisLimit, name: &str, local: AnyAlgorithm) -> Limit {
    FailSafeLimit {
        primary: Arc::new(NamedLimit {
            limit: redis,
            name: name.to_owned(),
        }),
        local: Arc::new(KeyedLimiter::with_clock(local, ManualClock::new(0))),
    }
}

fn safe(store: &RedisStore, policy: FailurePolicy) -> Safe {
    FailSafe::new(Arc::new(store.clone()), MemoryStore::new(), policy, TIMEOUT)
}

/// One limit's answer, and whether the policy gave it (a failure counted during the call).
async fn decide_one(
    safe: &Safe,
    limit: &Limit,
    permits: NonZeroU64,
    now: At,
) -> Result<(sluicegate::Decision, bool), FailSafeError<RedisLimitError, sluicegate::CheckError>> {
    let key = "k".to_owned();
    let before = safe.failures();
    let request = [Request {
        limit,
        key: &key,
        permits,
    }];
    let outcome: StoreDecision = safe.decide(&request, Op::Check, now).await?;
    let decision = outcome.decisions[0];
    Ok((decision, safe.failures() > before))
}

/// Calls until Redis answers again (it restarts empty).
async fn until_back(limiter: &RedisLimiter) -> Result<(), BoxError> {
    let mut last = None;
    for _ in 0..100 {
        match no_hang(limiter.check(b"k")).await? {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("redis never came back: {last:?}").into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_fast_while_down_and_recovers_without_a_new_store() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let store = server.store(config()).await?;
    let limiter = RedisLimiter::new(store, RedisLimit::gcra(Rate::per_second(100)?, 10)?, "f");
    assert!(limiter.check(b"k").await?.allowed());

    server.stop();
    for _ in 0..5 {
        let result = no_hang(limiter.check(b"k")).await?;
        let err = result.err().ok_or("a call to a stopped redis succeeded")?;
        assert!(err.is_backend_failure(), "{err:?}");
        assert!(
            matches!(
                err,
                RedisLimitError::Timeout(_) | RedisLimitError::Connection(_)
            ),
            "{err:?}"
        );
    }

    server.restart()?;
    until_back(&limiter).await?;
    assert!(limiter.check(b"k").await?.allowed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_answer_while_redis_is_down() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let store = server.store(config()).await?;
    let redis = RedisLimit::gcra(Rate::per_hour(1)?, 2)?;
    let limit = both(redis.clone(), "p", Gcra::new(Rate::per_hour(1)?, 2)?.into());
    let open = safe(&store, FailurePolicy::Open);
    let closed = safe(&store, FailurePolicy::Closed);
    let local = safe(&store, FailurePolicy::Local);
    let one = NonZeroU64::MIN;
    let now = At::At(1_763_000_000_000_000);

    let (_, fell_back) = decide_one(&open, &limit, one, now).await?;
    assert!(!fell_back, "redis decided");

    server.stop();
    let (open_answer, fell_back) = no_hang(decide_one(&open, &limit, one, now)).await??;
    assert!(open_answer.allowed());
    assert!(fell_back);
    let (closed_answer, _) = no_hang(decide_one(&closed, &limit, one, now)).await??;
    assert!(!closed_answer.allowed());
    assert_eq!(closed_answer.retry_after(), Some(TIMEOUT));
    // Local: the same rules in memory, two permits and then no more.
    let mut granted = Vec::new();
    for _ in 0..3 {
        let (answer, fell_back) = no_hang(decide_one(&local, &limit, one, now)).await??;
        assert!(fell_back);
        granted.push(answer.allowed());
    }
    assert_eq!(granted, [true, true, false]);
    // Request errors are still errors, whatever the policy.
    let too_many = NonZeroU64::new(3).ok_or("3")?;
    let err = no_hang(decide_one(&open, &limit, too_many, now)).await?;
    assert!(
        matches!(
            err,
            Err(FailSafeError::Primary(
                RedisLimitError::InsufficientCapacity { .. }
            ))
        ),
        "{err:?}"
    );

    server.restart()?;
    until_back(&RedisLimiter::new(store.clone(), redis, "p")).await?;
    let (_, fell_back) = decide_one(&open, &limit, one, now).await?;
    assert!(!fell_back, "redis decided again");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_nothing_is_a_prompt_error() -> Result<(), BoxError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let result = no_hang(sluicegate_redis::RedisStore::connect(&url, config())).await?;
    let err = result.err().ok_or("connected to a closed port")?;
    assert!(err.is_backend_failure(), "{err:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_times_out_every_concurrent_call() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config()).await?;
    let admin = server.store(StoreConfig::default()).await?;
    let limiter = std::sync::Arc::new(RedisLimiter::new(
        store,
        RedisLimit::gcra(Rate::per_second(100)?, 10)?,
        "slow",
    ));
    assert!(limiter.check(b"k").await?.allowed());
    // Redis stops serving every client (as a stalled server would) for five timeouts.
    admin
        .command::<()>(redis::cmd("CLIENT").arg("PAUSE").arg(1_500).arg("ALL"))
        .await?;
    let mut calls = Vec::new();
    for _ in 0..50 {
        let limiter = limiter.clone();
        calls.push(tokio::spawn(async move { limiter.check(b"k").await }));
    }
    for call in calls {
        let result = no_hang(call).await??;
        assert!(
            matches!(result, Err(RedisLimitError::Timeout(t)) if t == TIMEOUT),
            "{result:?}"
        );
    }
    admin
        .command::<()>(redis::cmd("CLIENT").arg("UNPAUSE"))
        .await
        .or_else(|_| Ok::<(), RedisLimitError>(()))?;
    until_back(&limiter).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_limit_requests_fall_back_all_or_nothing() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let store = server.store(config()).await?;
    let hour = Rate::per_hour(1)?;
    let minute = Duration::from_secs(60);
    let wide = both(
        RedisLimit::gcra(hour, 3)?,
        "wide",
        Gcra::new(hour, 3)?.into(),
    );
    let narrow = both(
        RedisLimit::fixed_window(2, minute)?,
        "narrow",
        FixedWindow::new(2, minute)?.into(),
    );
    let local = safe(&store, FailurePolicy::Local);
    let one = NonZeroU64::MIN;
    let key = "u".to_owned();
    let request = [
        Request {
            limit: &wide,
            key: &key,
            permits: one,
        },
        Request {
            limit: &narrow,
            key: &key,
            permits: one,
        },
    ];
    let now = At::At(1_763_000_000_000_000);
    let up = local.decide(&request, Op::Check, now).await?;
    assert!(up.allowed);
    assert_eq!(local.failures(), 0, "redis decided");

    server.stop();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let before = local.failures();
        let multi = no_hang(local.decide(&request, Op::Check, now)).await??;
        assert!(local.failures() > before, "the policy answered");
        seen.push(multi.allowed);
    }
    // In memory from scratch: the narrow limit's two permits, then a denial that charges
    // nothing to the wide one (which still has one left).
    assert_eq!(seen, [true, true, false]);
    let peek = no_hang(local.decide(&request[..1], Op::Peek, now)).await??;
    assert_eq!(
        peek.decisions[0].remaining(),
        1,
        "one left, and a peek of it takes nothing"
    );
    assert!(peek.allowed);
    Ok(())
}
