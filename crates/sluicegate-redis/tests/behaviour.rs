//! A real redis-server: server time, expiry, contention, several limits at once, bad input.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Algorithm, FixedWindow, Gcra, QueueDelay, Rate, TokenBucket};
use sluicegate_redis::{RedisLimit, RedisLimitError, RedisLimiter, RedisStore, StoreConfig};

use sluicegate_redis::testing::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn one() -> NonZeroU64 {
    NonZeroU64::MIN
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_time_decisions_replay_identically_in_memory() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let rate = Rate::per_second(3)?;
    let limit = RedisLimit::gcra(rate, 4)?;
    let redis = RedisLimiter::new(store.clone(), limit.clone(), "server-time");
    let gcra = Gcra::new(rate, 4)?;
    let mut state = gcra.initial_state(0);
    let mut allowed = 0;
    for _ in 0..10 {
        let multi = store
            .decide_all(&[redis.request(b"k")], Op::Check, Now::Store)
            .await?;
        // Redis's TIME is today's Unix time, not a small test number.
        assert!(multi.now > 1_600_000_000_000_000, "{}", multi.now);
        let expected = gcra.decide(&mut state, multi.now, one(), Op::Check)?;
        assert_eq!(multi.decisions, vec![expected]);
        allowed += usize::from(expected.allowed());
    }
    assert!(allowed >= 4, "a full bucket of 4 grants at least 4");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bucket_answers_as_in_memory_when_times_go_back() -> Result<(), BoxError> {
    // Explicit times out of order (clients passing their own clocks): Redis and memory keep
    // the same one-number state, so they agree on every answer, including the times behind.
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let rate = Rate::per_second(10)?;
    let redis = RedisLimiter::new(store, RedisLimit::token_bucket(rate, 3)?, "back");
    let bucket = TokenBucket::new(rate, 3)?;
    let mut state = bucket.initial_state(0);
    let base = 1_763_000_000_000_000u64;
    for (offset, op) in [
        (500_000, Op::Check),
        (500_000, Op::Check),
        (200_000, Op::Check),
        (0, Op::Peek),
        (600_000, Op::Check),
        (100_000, Op::Charge),
        (650_000, Op::Check),
        (300_000, Op::Reserve { max_wait: None }),
        (900_000, Op::Check),
    ] {
        let now = base + offset;
        let expected = bucket.decide(&mut state, now, one(), op)?;
        let got = redis.decide(b"k", one(), op, Now::At(now)).await?;
        assert_eq!(got, expected, "{op:?} at +{offset}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_when_fresh_and_carry_the_prefix() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let config = StoreConfig {
        prefix: "test:".into(),
        ..StoreConfig::default()
    };
    let store = server.store(config).await?;
    let limit = RedisLimit::gcra(Rate::per_second(10)?, 5)?;
    let redis = RedisLimiter::new(store.clone(), limit, "api");
    let now = 1_763_000_000_000_000;
    let _ = redis
        .decide(b"user", one(), Op::Check, Now::At(now))
        .await?;
    let keys: Vec<Vec<u8>> = store.command(redis::cmd("KEYS").arg("*")).await?;
    assert_eq!(keys, vec![b"test:{user}api".to_vec()]);
    // One permit at 10/s: fresh again after 100 ms.
    let ttl: i64 = store
        .command(redis::cmd("PTTL").arg("test:{user}api"))
        .await?;
    assert!((1..=100).contains(&ttl), "ttl {ttl}");
    // A denied request and a peek write nothing.
    let empty = RedisLimiter::new(store.clone(), redis.limit().clone(), "other");
    let _ = empty.decide(b"user", one(), Op::Peek, Now::At(now)).await?;
    let exists: i64 = store
        .command(redis::cmd("EXISTS").arg("test:{user}other"))
        .await?;
    assert_eq!(exists, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_on_one_key_get_exactly_the_burst() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(server.store(StoreConfig::default()).await?);
    }
    // One permit an hour: nothing refills while the test runs.
    let limit = RedisLimit::gcra(Rate::per_hour(1)?, 100)?;
    let limiters: Vec<Arc<RedisLimiter>> = stores
        .into_iter()
        .map(|s| Arc::new(RedisLimiter::new(s, limit.clone(), "hammer")))
        .collect();
    let mut tasks = Vec::new();
    for task in 0..64 {
        let limiter = limiters[task % limiters.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut granted = 0u32;
            for _ in 0..5 {
                let decision = limiter.check(b"shared").await?;
                granted += u32::from(decision.allowed());
            }
            Ok::<u32, RedisLimitError>(granted)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    assert_eq!(total, 100);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_charged_all_or_none_under_contention() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let wide = RedisLimiter::new(
        store.clone(),
        RedisLimit::gcra(Rate::per_hour(1)?, 40)?,
        "wide",
    );
    let narrow = RedisLimiter::new(
        store.clone(),
        RedisLimit::token_bucket(Rate::per_hour(1)?, 25)?,
        "narrow",
    );
    let (wide, narrow) = (Arc::new(wide), Arc::new(narrow));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (wide, narrow) = (wide.clone(), narrow.clone());
        tasks.push(tokio::spawn(async move {
            let requests = [wide.request(b"u"), narrow.request(b"u")];
            let multi = wide
                .store()
                .decide_all(&requests, Op::Check, Now::Store)
                .await?;
            assert_eq!(multi.allowed, multi.decisions.iter().all(|d| d.allowed()));
            Ok::<bool, RedisLimitError>(multi.allowed)
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += u32::from(task.await??);
    }
    assert_eq!(allowed, 25);
    // The 39 denied requests charged nothing to the wider limit: a peek reports its 15 left.
    let wide_now = wide.decide(b"u", one(), Op::Peek, Now::Store).await?;
    assert_eq!(wide_now.remaining(), 40 - 25);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_leases_expire_so_crashed_holders_do_not_leak() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let limit = RedisLimit::concurrency(2, Duration::from_secs(10))?;
    let redis = RedisLimiter::new(store, limit, "conn");
    let t0 = 1_763_000_000_000_000;
    let (first, lease_a) = redis.acquire_lease(b"k", one(), Now::At(t0)).await?;
    let (_, lease_b) = redis.acquire_lease(b"k", one(), Now::At(t0 + 1)).await?;
    assert!(first.allowed() && lease_a.is_some() && lease_b.is_some());
    let (full, none) = redis.acquire_lease(b"k", one(), Now::At(t0 + 2)).await?;
    assert!(!full.allowed() && none.is_none());
    assert_eq!(full.retry_after(), None);
    // The holder of lease A renews it; B's holder "crashed": its lease runs out.
    let lease_a = lease_a.ok_or("lease a")?;
    assert!(redis.renew(&lease_a, Now::At(t0 + 5_000_000)).await?);
    let later = Now::At(t0 + 10_000_002);
    let (after_expiry, lease_c) = redis.acquire_lease(b"k", one(), later).await?;
    assert!(after_expiry.allowed(), "B's lease expired");
    assert_eq!(
        after_expiry.remaining(),
        0,
        "A (renewed) and C hold both permits"
    );
    assert!(redis.release(&lease_a, later).await?);
    assert!(!redis.release(&lease_a, later).await?, "released twice");
    assert!(redis.release(&lease_c.ok_or("lease c")?, later).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_error_never_a_wrong_answer() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let limit = RedisLimit::gcra(Rate::per_second(5)?, 5)?;
    let redis = RedisLimiter::new(store.clone(), limit, "bad");
    let now = Now::At(1_763_000_000_000_000);

    // Keys with any bytes.
    let odd_key = [0u8, b'{', b'}', b':', 0xff, b'%'];
    assert!(
        redis
            .decide(&odd_key, one(), Op::Check, now)
            .await?
            .allowed()
    );

    // Enormous permits: can never pass.
    let huge = NonZeroU64::new(u64::MAX).ok_or("max")?;
    let err = redis.decide(b"k", huge, Op::Check, now).await.err();
    assert!(
        matches!(
            err,
            Some(RedisLimitError::InsufficientCapacity {
                requested: u64::MAX,
                capacity: 5
            })
        ),
        "{err:?}"
    );

    // Zero rates and bursts, a prefix that would break the hash tag.
    assert!(Rate::per_second(0).is_err());
    assert!(RedisLimit::gcra(Rate::per_second(1)?, 0).is_err());
    assert!(RedisLimit::concurrency(0, Duration::from_secs(1)).is_err());
    let bad_prefix = StoreConfig {
        prefix: "a{b".into(),
        ..StoreConfig::default()
    };
    assert!(matches!(
        RedisStore::connect(&server.url(), bad_prefix).await,
        Err(RedisLimitError::Config(_))
    ));

    // State another program overwrote: not the shape this crate writes, numbers out of range,
    // another type under the key (a hash, as older versions wrote).
    let _ = redis.decide(b"victim", one(), Op::Check, now).await?;
    for (key, bad) in [
        ("sluicegate:{victim}bad", "oops"),
        ("sluicegate:{victim}bad", "1763000000000000:0"),
        ("sluicegate:{victim}bad", "1763000000000000:5:2"),
        ("sluicegate:{victim}bad", "99999999999999999999:0:1"),
        ("sluicegate:{victim}bad", "99999999999999999999"),
        ("sluicegate:{victim}bad", "-5"),
        ("sluicegate:{victim}bad", "1.5"),
        ("sluicegate:{string}bad", "x"),
    ] {
        store
            .command::<()>(redis::cmd("SET").arg(key).arg(bad))
            .await?;
        let tag = if key.contains("victim") {
            "victim"
        } else {
            "string"
        };
        let err = redis
            .decide(tag.as_bytes(), one(), Op::Check, now)
            .await
            .err();
        assert!(
            matches!(err, Some(RedisLimitError::CorruptState(_))),
            "{bad}: {err:?}"
        );
        let kept: String = store.command(redis::cmd("GET").arg(key)).await?;
        assert_eq!(kept, bad, "corrupt state is left as found");
    }
    store
        .command::<()>(
            redis::cmd("HSET")
                .arg("sluicegate:{hash}bad")
                .arg("t")
                .arg("1"),
        )
        .await?;
    let err = redis.decide(b"hash", one(), Op::Check, now).await.err();
    assert!(
        matches!(err, Some(RedisLimitError::CorruptState(_))),
        "{err:?}"
    );
    // The same for the other string layouts (token bucket, fixed window) and the decide path.
    let others = [
        RedisLimit::token_bucket(Rate::per_second(5)?, 5)?,
        RedisLimit::fixed_window(5, Duration::from_secs(1))?,
        RedisLimit::leaky_bucket(Rate::per_second(5)?, 5)?,
        RedisLimit::leaky_queue(Rate::per_second(5)?, 5, QueueDelay::Shape)?,
    ];
    for (i, limit) in others.into_iter().enumerate() {
        let name = format!("other{i}");
        let limiter = RedisLimiter::new(store.clone(), limit, name.clone());
        assert!(limiter.decide(b"k", one(), Op::Check, now).await?.allowed());
        let key = format!("sluicegate:{{k}}{name}");
        let good: String = store.command(redis::cmd("GET").arg(&key)).await?;
        for bad in [
            format!("{good}:1"),
            format!("{good}x"),
            format!(":{good}"),
            String::new(),
        ] {
            store
                .command::<()>(redis::cmd("SET").arg(&key).arg(&bad))
                .await?;
            let err = limiter.decide(b"k", one(), Op::Check, now).await.err();
            assert!(
                matches!(err, Some(RedisLimitError::CorruptState(_))),
                "{name} {bad}: {err:?}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_lives_exactly_until_its_state_is_fresh() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let rate = Rate::per_second(3)?;
    let second = Duration::from_secs(1);
    let limits = [
        RedisLimit::gcra(rate, 5)?,
        RedisLimit::token_bucket(rate, 5)?,
        RedisLimit::leaky_bucket(rate, 5)?,
        RedisLimit::leaky_queue(rate, 4, QueueDelay::Shape)?,
        RedisLimit::fixed_window(5, second)?,
        RedisLimit::sliding_log(5, second)?,
        RedisLimit::sliding_window(5, second, Some(4))?,
        RedisLimit::sliding_window(5, second, None)?,
    ];
    let now = 1_763_000_000_250_000;
    let two = NonZeroU64::new(2).ok_or("2")?;
    for (i, limit) in limits.into_iter().enumerate() {
        let name = format!("ttl{i}");
        let limiter = RedisLimiter::new(store.clone(), limit, name.clone());
        let decision = limiter.decide(b"k", two, Op::Check, Now::At(now)).await?;
        assert!(decision.allowed());
        let key = format!("sluicegate:{{k}}{name}");
        let ttl: i64 = store.command(redis::cmd("PTTL").arg(&key)).await?;
        // reset_after in whole ms, rounded up; the key may have aged a little since.
        let reset_ms = i64::try_from(decision.reset_after().as_micros().div_ceil(1000))?;
        assert!(
            ttl > 0 && ttl <= reset_ms,
            "{name}: ttl {ttl}ms, reset {reset_ms}ms"
        );
        assert!(
            ttl > reset_ms - 1_000,
            "{name}: ttl {ttl}ms, reset {reset_ms}ms"
        );
    }
    let limiter = RedisLimiter::new(store.clone(), RedisLimit::concurrency(3, second)?, "c");
    let _ = limiter.acquire_lease(b"k", two, Now::Store).await?;
    for suffix in [":l", ":h"] {
        let ttl: i64 = store
            .command(redis::cmd("PTTL").arg(format!("sluicegate:{{k}}c{suffix}")))
            .await?;
        assert!((1..=1_000).contains(&ttl), "lease key ttl {ttl}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_disappear_by_themselves() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let limit = RedisLimit::gcra(Rate::new(1, Duration::from_millis(30))?, 1)?;
    let limiter = RedisLimiter::new(store.clone(), limit, "idle");
    assert!(limiter.check(b"k").await?.allowed());
    let key = "sluicegate:{k}idle";
    let mut exists: i64 = store.command(redis::cmd("EXISTS").arg(key)).await?;
    assert_eq!(exists, 1);
    // Bounded polling, not a timing assertion: the key goes once its 30ms are over.
    for _ in 0..200 {
        exists = store.command(redis::cmd("EXISTS").arg(key)).await?;
        if exists == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(exists, 0, "the key outlived its state");
    assert!(limiter.check(b"k").await?.allowed());
    Ok(())
}

/// Every limit the script runs, each holding 10 when fresh.
fn tens() -> Result<Vec<RedisLimit>, BoxError> {
    let rate = Rate::per_second(1)?;
    let second = Duration::from_secs(1);
    Ok(vec![
        RedisLimit::fixed_window(10, second)?,
        RedisLimit::sliding_log(10, second)?,
        RedisLimit::sliding_window(10, second, Some(4))?,
        RedisLimit::sliding_window(10, second, None)?,
        RedisLimit::token_bucket(rate, 10)?,
        RedisLimit::gcra(rate, 10)?,
        RedisLimit::leaky_bucket(rate, 10)?,
        RedisLimit::leaky_queue(rate, 9, QueueDelay::Shape)?,
        RedisLimit::leaky_queue(rate, 9, QueueDelay::NoDelay)?,
        RedisLimit::concurrency(10, Duration::from_secs(60))?,
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_of_n_with_m_left_reports_m() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let now = Now::At(1_763_000_000_000_000);
    let n = |permits| NonZeroU64::new(permits).ok_or("zero");
    for (i, limit) in tens()?.into_iter().enumerate() {
        let name = limit.name();
        let redis = RedisLimiter::new(store.clone(), limit, format!("peek-{i}"));
        let taken = redis.decide(b"k", n(3)?, Op::Check, now).await?;
        assert_eq!((taken.allowed(), taken.remaining()), (true, 7), "{name}");
        for permits in [1, 3, 7] {
            let peek = redis.decide(b"k", n(permits)?, Op::Peek, now).await?;
            assert_eq!((peek.allowed(), peek.remaining()), (true, 7), "{name}");
        }
        for op in [Op::Peek, Op::Check] {
            let denied = redis.decide(b"k", n(8)?, op, now).await?;
            assert_eq!((denied.allowed(), denied.remaining()), (false, 7), "{name}");
        }
        // Nothing was taken since: 3 more leave 4.
        let granted = redis.decide(b"k", n(3)?, Op::Check, now).await?;
        assert_eq!(
            (granted.allowed(), granted.remaining()),
            (true, 4),
            "{name}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_left_uncharged_reports_what_it_still_has() -> Result<(), BoxError> {
    // envoyproxy/ratelimit's example: 100 per minute per user, 5 used, and a spent global
    // limit denies the request; the user's limit reports its 95, not the 94 a charge leaves.
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let now = Now::At(1_763_000_000_000_000);
    let minute = Duration::from_secs(60);
    let global = RedisLimiter::new(store.clone(), RedisLimit::fixed_window(1, minute)?, "all");
    let _ = global.decide(b"u", one(), Op::Check, now).await?;
    for (i, limit) in [
        RedisLimit::fixed_window(100, minute)?,
        RedisLimit::gcra(Rate::per_minute(100)?, 100)?,
        RedisLimit::sliding_log(100, minute)?,
        RedisLimit::concurrency(100, minute)?,
    ]
    .into_iter()
    .enumerate()
    {
        let name = limit.name();
        let per_user = RedisLimiter::new(store.clone(), limit, format!("user-{i}"));
        let five = NonZeroU64::new(5).ok_or("five")?;
        let _ = per_user.decide(b"u", five, Op::Check, now).await?;
        let multi = store
            .decide_all(
                &[per_user.request(b"u"), global.request(b"u")],
                Op::Check,
                now,
            )
            .await?;
        assert!(!multi.allowed, "{name}");
        assert!(multi.decisions[0].allowed(), "{name}");
        assert_eq!(multi.decisions[0].remaining(), 95, "{name}");
        assert_eq!(multi.decisions[1].remaining(), 0, "{name}");
        let peek = per_user.decide(b"u", one(), Op::Peek, now).await?;
        assert_eq!(peek.remaining(), 95, "{name}");
    }
    Ok(())
}

/// A fixed window's state is text: its count written exactly on either side of 10^14, where
/// a check joins a count below it to the window's start and formats one at or above it. On
/// explicit times, against the same window in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_counts_exactly_past_fourteen_digits() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server
        .store(StoreConfig {
            expiry_grace: Duration::from_secs(3600),
            ..StoreConfig::default()
        })
        .await?;
    let (limit, window) = (1 << 50, Duration::from_secs(10));
    let core = FixedWindow::new(limit, window)?;
    let redis = RedisLimiter::new(store.clone(), RedisLimit::fixed_window(limit, window)?, "w");
    // 3e13 three times crosses 10^14; then more past it, and the next window starts empty.
    let asks: [(u64, u64); 6] = [
        (3 * 10_u64.pow(13), 1_000_000),
        (3 * 10_u64.pow(13), 2_000_000),
        (3 * 10_u64.pow(13), 3_000_000),
        (10_u64.pow(13) + 7, 4_000_000),
        (1, 5_000_000),
        (5, 12_000_000),
    ];
    // A check decides by its own code; a charge, and a call of two limits, by the general one.
    let other = RedisLimiter::new(store.clone(), RedisLimit::fixed_window(limit, window)?, "o");
    for (key, op, both) in [
        (&b"k"[..], Op::Check, false),
        (b"c", Op::Charge, false),
        (b"m", Op::Check, true),
    ] {
        let mut state = core.initial_state(0);
        for (permits, at) in asks {
            let permits = NonZeroU64::new(permits).ok_or("zero permits")?;
            let mut requests = vec![redis.request_n(key, permits)];
            if both {
                requests.push(other.request_n(key, permits));
            }
            let multi = store.decide_all(&requests, op, Now::At(at)).await?;
            let expected = core.decide(&mut state, at, permits, op)?;
            assert_eq!(multi.decisions[0], expected, "{op:?} {permits} at {at}");
        }
        let last = store
            .decide_all(&[redis.request(key)], Op::Peek, Now::At(12_000_001))
            .await?;
        assert_eq!(last.decisions[0].remaining(), limit - 5, "{op:?}");
    }
    Ok(())
}
