//! Redis stopped and restarted mid-run: every call returns within its timeout with an error
//! the caller can act on, the failure policy answers meanwhile, and the same store works
//! again once Redis is back.

use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::{Op, Rate};
use sluicegate_redis::{
    FailSafeLimiter, FailSafeRequest, FailurePolicy, Now, RedisLimit, RedisLimitError,
    RedisLimiter, Source, StoreConfig, decide_all_fail_safe,
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
    let limit = RedisLimit::gcra(Rate::per_hour(1)?, 2)?;
    let policy = |p| FailSafeLimiter::new(RedisLimiter::new(store.clone(), limit.clone(), "p"), p);
    let open = policy(FailurePolicy::Open)?;
    let closed = policy(FailurePolicy::Closed)?;
    let local = policy(FailurePolicy::Local)?;
    let one = NonZeroU64::MIN;
    let now = Now::At(1_763_000_000_000_000);

    let up = open.decide(b"k", one, Op::Check, now).await?;
    assert_eq!(up.source, Source::Redis);

    server.stop();
    let open_answer = no_hang(open.decide(b"k", one, Op::Check, now)).await??;
    assert!(open_answer.decision.allowed());
    assert!(matches!(open_answer.source, Source::Fallback(_)));
    let closed_answer = no_hang(closed.decide(b"k", one, Op::Check, now)).await??;
    assert!(!closed_answer.decision.allowed());
    assert_eq!(closed_answer.decision.retry_after(), Some(TIMEOUT));
    // Local: the same rules in memory, two permits and then no more.
    let mut granted = Vec::new();
    for _ in 0..3 {
        let answer = no_hang(local.decide(b"k", one, Op::Check, now)).await??;
        assert!(matches!(answer.source, Source::Fallback(_)));
        granted.push(answer.decision.allowed());
    }
    assert_eq!(granted, [true, true, false]);
    // Request errors are still errors, whatever the policy.
    let too_many = NonZeroU64::new(3).ok_or("3")?;
    let err = no_hang(open.decide(b"k", too_many, Op::Check, now)).await?;
    assert!(
        matches!(err, Err(RedisLimitError::InsufficientCapacity { .. })),
        "{err:?}"
    );

    server.restart()?;
    until_back(open.redis()).await?;
    let back = open.decide(b"k", one, Op::Check, now).await?;
    assert_eq!(back.source, Source::Redis);
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
    let wide = FailSafeLimiter::new(
        RedisLimiter::new(store.clone(), RedisLimit::gcra(hour, 3)?, "wide"),
        FailurePolicy::Local,
    )?;
    let narrow = FailSafeLimiter::new(
        RedisLimiter::new(
            store.clone(),
            RedisLimit::fixed_window(2, Duration::from_secs(60))?,
            "narrow",
        ),
        FailurePolicy::Local,
    )?;
    let one = NonZeroU64::MIN;
    let request = [
        FailSafeRequest {
            limiter: &wide,
            key: b"u",
            permits: one,
        },
        FailSafeRequest {
            limiter: &narrow,
            key: b"u",
            permits: one,
        },
    ];
    let now = Now::At(1_763_000_000_000_000);
    let (up, source) = decide_all_fail_safe(&request, Op::Check, now).await?;
    assert!(up.allowed);
    assert_eq!(source, Source::Redis);

    server.stop();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (multi, source) = no_hang(decide_all_fail_safe(&request, Op::Check, now)).await??;
        assert!(matches!(source, Source::Fallback(_)));
        seen.push(multi.allowed);
    }
    // In memory from scratch: the narrow limit's two permits, then a denial that charges
    // nothing to the wide one (which still has one left).
    assert_eq!(seen, [true, true, false]);
    let (peek, _) = no_hang(decide_all_fail_safe(&request[..1], Op::Peek, now)).await??;
    assert_eq!(
        peek.decisions[0].remaining(),
        1,
        "one left, and a peek of it takes nothing"
    );
    assert!(peek.allowed);
    Ok(())
}
