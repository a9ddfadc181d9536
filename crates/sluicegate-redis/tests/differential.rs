//! Random traces through the in-memory pure state machines and through Redis with an explicit
//! `now` give identical decisions, for every algorithm the script runs: alone, batched, and
//! several limits decided together. Peeks and denials are compared like every decision, and
//! both sides are held to the rule that they report what is available now.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluicegate::limiter::{LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{
    Algorithm, AnyAlgorithm, CheckError, Clock, Concurrency, Decision, FixedWindow, Gcra,
    KeyedLimiter, LeakyBucket, LeakyQueue, ManualClock, Micros, QueueDelay, Rate, SlidingLog,
    SlidingWindow, TokenBucket,
};
use sluicegate_redis::{
    RedisLimit, RedisLimitError, RedisLimiter, RedisStore, ScriptMode, StoreConfig,
};

use sluicegate_redis::testing::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Today's Unix time in µs is about 1.76e15: far beyond 2^53 once multiplied by a tick rate.
const BASES: [u64; 4] = [0, 1_000_000, 1_763_000_000_123_457, 1_800_000_000_000_000];

fn rates() -> impl Strategy<Value = Rate> {
    prop::sample::select(vec![
        (3, 1_000_000),
        (7, 60_000_000),
        (10, 1_000_000),
        (1, 1_000_000),
        (5, 30_000_000),
        (1_000_003, 1_000_000), // an interval rounded up to 1/1024 µs
        (1_000, 1_000),
        (9, 7),
        (1, 3_600_000_000),
    ])
    .prop_map(|(permits, us)| {
        Rate::new(permits, Duration::from_micros(us)).expect("rates in the list are valid")
    })
}

#[derive(Debug, Clone)]
struct Event {
    dt: u64,
    permits: u64,
    op: Op,
}

fn events(max_permits: u64) -> impl Strategy<Value = Vec<Event>> {
    let dt = prop_oneof![
        3 => Just(0u64),
        4 => 0u64..2_000,
        4 => 0u64..2_000_000,
        1 => 0u64..100_000_000_000,
    ];
    let op = prop_oneof![
        6 => Just(Op::Check),
        2 => Just(Op::Peek),
        2 => Just(Op::Charge),
        1 => Just(Op::Reserve { max_wait: None }),
        1 => (0u64..3_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
    ];
    prop::collection::vec(
        (dt, 1..=max_permits, op).prop_map(|(dt, permits, op)| Event { dt, permits, op }),
        1..60,
    )
}

fn config() -> StoreConfig {
    StoreConfig {
        // Traces move `now` far faster than the test runs: keep keys well past "fresh".
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    }
}

/// The most permits a check could be granted on `state` at `now` (at most the capacity): what
/// a peek or a denial reports as remaining.
fn available<A: Algorithm>(algorithm: &A, state: &A::State, now: Micros) -> u64 {
    (1..=algorithm.capacity())
        .take_while(|&k| {
            let mut probe = state.clone();
            let permits = NonZeroU64::new(k).expect("k starts at 1");
            algorithm
                .decide(&mut probe, now, permits, Op::Peek)
                .is_ok_and(|d| d.allowed())
        })
        .last()
        .unwrap_or(0)
}

/// The core's one limit type and the Redis limit made from it in the one place that makes
/// them (`RedisLimit::from_algorithm`): every test below compares the two, so the memory
/// and Redis sides enforce the same value by construction.
fn unified(algorithm: impl Into<AnyAlgorithm>) -> (AnyAlgorithm, RedisLimit) {
    let algorithm = algorithm.into();
    // Leases outlive any trace here.
    let limit = RedisLimit::from_algorithm(&algorithm, Duration::from_secs(3600))
        .expect("every generated limit runs in Redis");
    assert_eq!(limit.algorithm(), &algorithm);
    (algorithm, limit)
}

#[test]
fn the_smooth_limiters_are_refused_by_name_not_run_differently() -> Result<(), BoxError> {
    for spec in ["smooth-bursty:rate=5", "smooth-warmup:rate=2,warmup=4s"] {
        let algorithm: AnyAlgorithm = spec.parse()?;
        let error = RedisLimit::try_from(&algorithm).err().ok_or(spec)?;
        assert!(error.to_string().contains("no Redis script"), "{error}");
    }
    Ok(())
}

fn same<A: Algorithm>(
    runtime: &tokio::runtime::Runtime,
    algorithm: &A,
    redis: &RedisLimiter,
    base: u64,
    trace: &[Event],
) -> Result<(), TestCaseError> {
    let mut state = algorithm.initial_state(0);
    let mut now = base;
    for (i, event) in trace.iter().enumerate() {
        now += event.dt;
        let permits = NonZeroU64::new(event.permits).expect("permits start at 1");
        let expected = algorithm.decide(&mut state, now, permits, event.op);
        let got = runtime.block_on(redis.decide(b"k", permits, event.op, Now::At(now)));
        compare(i, event, now, expected.clone(), got)?;
        if let Ok(e) = expected
            && !event.op.changes_state(e.allowed())
        {
            // A peek or a denial takes nothing: it reports what is there now.
            prop_assert_eq!(e.remaining(), available(algorithm, &state, now));
        }
    }
    Ok(())
}

/// Like [`same`], but the events go to Redis `chunk` at a time, all asked at once, so that
/// the ones queued behind a call in flight are decided by the batch entry point.
fn same_batched<A: Algorithm>(
    runtime: &tokio::runtime::Runtime,
    algorithm: &A,
    redis: &RedisLimiter,
    base: u64,
    trace: &[Event],
    chunk: usize,
) -> Result<(), TestCaseError> {
    let mut state = algorithm.initial_state(0);
    let mut now = base;
    let mut i = 0;
    for events in trace.chunks(chunk) {
        let mut asked = Vec::new();
        for event in events {
            now += event.dt;
            let permits = NonZeroU64::new(event.permits).expect("permits start at 1");
            let expected = algorithm.decide(&mut state, now, permits, event.op);
            let redis = redis.clone();
            let op = event.op;
            // Spawned in order on a current-thread runtime: they queue in that order.
            let task =
                runtime.spawn(async move { redis.decide(b"k", permits, op, Now::At(now)).await });
            asked.push((event, now, expected, task));
        }
        for (event, at, expected, task) in asked {
            let got = runtime
                .block_on(task)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            compare(i, event, at, expected, got)?;
            i += 1;
        }
    }
    Ok(())
}

/// A memory decision and Redis's for the same event agree: the same decision, or the same
/// kind of error.
fn compare(
    i: usize,
    event: &Event,
    now: u64,
    expected: Result<Decision, CheckError>,
    got: Result<Decision, RedisLimitError>,
) -> Result<(), TestCaseError> {
    match (expected, got) {
        (Ok(e), Ok(g)) => prop_assert_eq!(e, g, "event {} {:?} at {}", i, event, now),
        (
            Err(e),
            Err(RedisLimitError::InsufficientCapacity {
                requested,
                capacity,
            }),
        ) => {
            prop_assert_eq!(
                e,
                CheckError::InsufficientCapacity {
                    requested,
                    capacity
                }
            );
        }
        (Err(CheckError::Unsupported { .. }), Err(RedisLimitError::Unsupported(_))) => {}
        (e, g) => prop_assert!(false, "event {i} {event:?}: memory {e:?}, redis {g:?}"),
    }
    Ok(())
}

/// Cases alternate between Redis Functions and EVALSHA scripts, which run the same Lua.
struct Harness {
    _server: RedisServer,
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    eval_store: RedisStore,
    cases: std::sync::atomic::AtomicU64,
}

impl Harness {
    fn new() -> Result<Harness, BoxError> {
        let server = RedisServer::start()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let store = runtime.block_on(server.store(config()))?;
        let eval_store = runtime.block_on(server.store(StoreConfig {
            scripts: ScriptMode::Eval,
            ..config()
        }))?;
        Ok(Harness {
            _server: server,
            runtime,
            store,
            eval_store,
            cases: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A limiter under a name no earlier case used, so cases start from fresh keys; on
    /// Functions in even cases, on EVALSHA in odd ones.
    fn limiter(&self, limit: RedisLimit) -> RedisLimiter {
        let case = self
            .cases
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store = if case % 2 == 0 {
            &self.store
        } else {
            &self.eval_store
        };
        RedisLimiter::new(store.clone(), limit, format!("case-{case}"))
    }
}

/// A bucket's rate, burst, initial permits and base time, with a trace for it.
fn bucket_cases() -> impl Strategy<Value = ((Rate, u64, u64, u64), Vec<Event>)> {
    (
        rates(),
        1u64..12,
        0u64..12,
        prop::sample::select(BASES.to_vec()),
    )
        .prop_flat_map(|(rate, burst, initial, base)| {
            (
                Just((rate, burst, initial.min(burst), base)),
                events(burst + 1),
            )
        })
}

#[test]
fn gcra_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&bucket_cases(), |((rate, burst, initial, base), trace)| {
        let (algorithm, limit) =
            unified(Gcra::with_initial(rate, burst, initial).expect("valid gcra"));
        let redis = h.limiter(limit);
        same(&h.runtime, &algorithm, &redis, base, &trace)
    })?;
    Ok(())
}

#[test]
fn token_bucket_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&bucket_cases(), |((rate, burst, initial, base), trace)| {
        let (algorithm, limit) =
            unified(TokenBucket::with_initial(rate, burst, initial).expect("valid bucket"));
        let redis = h.limiter(limit);
        same(&h.runtime, &algorithm, &redis, base, &trace)
    })?;
    Ok(())
}

#[derive(Debug, Clone)]
enum ConcurrencyEvent {
    Take(u64),
    Peek(u64),
    /// Releases the outstanding lease at this index (modulo the count), if any.
    Release(usize),
}

#[test]
fn concurrency_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let event = prop_oneof![
        3 => (1u64..5).prop_map(ConcurrencyEvent::Take),
        1 => (1u64..5).prop_map(ConcurrencyEvent::Peek),
        2 => (0usize..8).prop_map(ConcurrencyEvent::Release),
    ];
    let strategy = (1u64..8, prop::collection::vec(event, 1..60));
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&strategy, |(limit, trace)| {
        let algorithm = Concurrency::new(limit).expect("valid limit");
        let (_, redis_limit) = unified(algorithm.clone());
        let redis = h.limiter(redis_limit);
        let mut held = algorithm.initial_state(0);
        let mut leases = Vec::new();
        let now = Now::At(1_763_000_000_000_000);
        for event in trace {
            match event {
                ConcurrencyEvent::Take(n) | ConcurrencyEvent::Peek(n) => {
                    let op = match event {
                        ConcurrencyEvent::Peek(_) => Op::Peek,
                        _ => Op::Check,
                    };
                    let permits = NonZeroU64::new(n).expect("n >= 1");
                    let expected = algorithm.decide(&mut held, 0, permits, op);
                    let got = if op == Op::Check {
                        h.runtime
                            .block_on(redis.acquire_lease(b"k", permits, now))
                            .map(|(decision, lease)| {
                                leases.extend(lease);
                                decision
                            })
                    } else {
                        h.runtime.block_on(redis.decide(b"k", permits, op, now))
                    };
                    match (expected, got) {
                        (Ok(e), Ok(g)) => {
                            prop_assert_eq!(e, g);
                            if op == Op::Peek || !e.allowed() {
                                // Nothing taken: what is free now.
                                prop_assert_eq!(g.remaining(), limit - held);
                            }
                        }
                        (Err(_), Err(RedisLimitError::InsufficientCapacity { .. })) => {}
                        (e, g) => prop_assert!(false, "memory {e:?}, redis {g:?}"),
                    }
                }
                ConcurrencyEvent::Release(i) if !leases.is_empty() => {
                    let lease = leases.remove(i % leases.len());
                    let permits = NonZeroU64::new(lease.permits).expect("leases hold permits");
                    let _ = algorithm
                        .decide(&mut held, 0, permits, Op::Release)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let released = h.runtime.block_on(redis.release(&lease, now));
                    prop_assert!(matches!(released, Ok(true)), "{released:?}");
                }
                ConcurrencyEvent::Release(_) => {}
            }
        }
        Ok(())
    })?;
    Ok(())
}

fn windows() -> impl Strategy<Value = Duration> {
    prop::sample::select(vec![
        1,
        7,
        1_000,
        333_333,
        1_000_000,
        10_000_000,
        60_000_000,
        3_600_000_000,
    ])
    .prop_map(Duration::from_micros)
}

/// Runs `trace` through `algorithm` and `limit` for random limits, windows and bases.
fn window_case<A: Algorithm>(
    build: impl Fn(u64, Duration, Option<u32>) -> Option<(A, RedisLimit)>,
    buckets: impl Strategy<Value = Option<u32>>,
) -> Result<(), BoxError> {
    let h = Harness::new()?;
    let strategy = (
        1u64..12,
        windows(),
        buckets,
        prop::sample::select(BASES.to_vec()),
    )
        .prop_flat_map(|(limit, window, buckets, base)| {
            (Just((limit, window, buckets, base)), events(limit + 1))
        });
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&strategy, |((limit, window, buckets, base), trace)| {
        let Some((algorithm, redis_limit)) = build(limit, window, buckets) else {
            // Parameters both sides reject (more buckets than microseconds): nothing to run.
            return Ok(());
        };
        let redis = h.limiter(redis_limit);
        same(&h.runtime, &algorithm, &redis, base, &trace)
    })?;
    Ok(())
}

#[test]
fn fixed_window_matches_memory() -> Result<(), BoxError> {
    window_case(
        |limit, window, _| Some(unified(FixedWindow::new(limit, window).ok()?)),
        Just(None),
    )
}

#[test]
fn sliding_log_matches_memory() -> Result<(), BoxError> {
    window_case(
        |limit, window, _| Some(unified(SlidingLog::new(limit, window).ok()?)),
        Just(None),
    )
}

#[test]
fn sliding_window_matches_memory() -> Result<(), BoxError> {
    window_case(
        |limit, window, buckets| {
            let memory = SlidingWindow::new(limit, window, buckets);
            let redis = RedisLimit::sliding_window(limit, window, buckets);
            assert_eq!(
                memory.is_ok(),
                redis.is_ok(),
                "{limit} {window:?} {buckets:?}"
            );
            let (algorithm, limit) = unified(memory.ok()?);
            assert_eq!(Some(&limit), redis.ok().as_ref());
            Some((algorithm, limit))
        },
        prop_oneof![Just(None), (1u32..10).prop_map(Some)],
    )
}

#[test]
fn leaky_bucket_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let strategy = (rates(), 1u64..12, prop::sample::select(BASES.to_vec())).prop_flat_map(
        |(rate, capacity, base)| (Just((rate, capacity, base)), events(capacity + 1)),
    );
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&strategy, |((rate, capacity, base), trace)| {
        let (algorithm, limit) = unified(LeakyBucket::new(rate, capacity).expect("valid bucket"));
        let redis = h.limiter(limit);
        same(&h.runtime, &algorithm, &redis, base, &trace)
    })?;
    Ok(())
}

#[test]
fn leaky_queue_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let delay = prop_oneof![
        Just(QueueDelay::Shape),
        Just(QueueDelay::NoDelay),
        (0u64..10).prop_map(QueueDelay::After),
    ];
    let strategy = (
        rates(),
        0u64..10,
        delay,
        prop::sample::select(BASES.to_vec()),
    )
        .prop_flat_map(|(rate, burst, delay, base)| {
            (Just((rate, burst, delay, base)), events(burst + 2))
        });
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&strategy, |((rate, burst, delay, base), trace)| {
        let (algorithm, limit) = unified(LeakyQueue::new(rate, burst, delay).expect("valid queue"));
        let redis = h.limiter(limit);
        same(&h.runtime, &algorithm, &redis, base, &trace)
    })?;
    Ok(())
}

/// Loads the Lua code of both stores (a lone call, then two together), so that no call of a
/// batch test is sent again after a load while a later one goes ahead of it.
fn warm_up(h: &Harness) -> Result<(), BoxError> {
    for store in [&h.store, &h.eval_store] {
        let limiter = RedisLimiter::new(
            store.clone(),
            RedisLimit::gcra(Rate::per_second(1)?, 1)?,
            "warm-up",
        );
        let _ = h
            .runtime
            .block_on(limiter.decide(b"k", NonZeroU64::MIN, Op::Peek, Now::At(1)))?;
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                h.runtime.spawn(async move {
                    limiter
                        .decide(b"k", NonZeroU64::MIN, Op::Peek, Now::At(1))
                        .await
                })
            })
            .collect();
        for task in tasks {
            let _ = h.runtime.block_on(task)??;
        }
    }
    Ok(())
}

#[test]
fn batched_gcra_and_token_bucket_match_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    warm_up(&h)?;
    let strategy = (bucket_cases(), 2usize..9, any::<bool>());
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner.run(
        &strategy,
        |(((rate, burst, initial, base), trace), chunk, token_bucket)| {
            let (algorithm, limit) = if token_bucket {
                unified(TokenBucket::with_initial(rate, burst, initial).expect("valid"))
            } else {
                unified(Gcra::with_initial(rate, burst, initial).expect("valid gcra"))
            };
            same_batched(
                &h.runtime,
                &algorithm,
                &h.limiter(limit),
                base,
                &trace,
                chunk,
            )
        },
    )?;
    Ok(())
}

#[test]
fn batched_fixed_window_matches_memory() -> Result<(), BoxError> {
    let h = Harness::new()?;
    warm_up(&h)?;
    let strategy = (
        1u64..12,
        windows(),
        prop::sample::select(BASES.to_vec()),
        2usize..9,
    )
        .prop_flat_map(|(limit, window, base, chunk)| {
            (Just((limit, window, base, chunk)), events(limit + 1))
        });
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner.run(&strategy, |((limit, window, base, chunk), trace)| {
        let algorithm = FixedWindow::new(limit, window).expect("valid window");
        let redis = h.limiter(RedisLimit::fixed_window(limit, window).expect("valid limit"));
        same_batched(&h.runtime, &algorithm, &redis, base, &trace, chunk)
    })?;
    Ok(())
}

/// Limit number `kind` of a small menu, sized `size`, in memory and in Redis.
fn menu(kind: u8, size: u64) -> Result<(AnyAlgorithm, RedisLimit), BoxError> {
    let (s3, m7, s10, s5) = (
        Rate::per_second(3)?,
        Rate::per_minute(7)?,
        Rate::per_second(10)?,
        Rate::per_second(5)?,
    );
    let sec = Duration::from_secs(1);
    let delay = QueueDelay::After(1);
    let algorithm: AnyAlgorithm = match kind {
        0 => Gcra::new(s3, size)?.into(),
        1 => TokenBucket::new(m7, size)?.into(),
        2 => FixedWindow::new(size, sec)?.into(),
        3 => SlidingLog::new(size, sec * 10)?.into(),
        4 => SlidingWindow::new(size, sec, Some(4))?.into(),
        5 => SlidingWindow::new(size, sec * 60, None)?.into(),
        6 => LeakyBucket::new(s10, size)?.into(),
        7 => LeakyQueue::new(s5, size, delay)?.into(),
        // The memory limit's permits are never released here.
        _ => Concurrency::new(size)?.into(),
    };
    Ok(unified(algorithm))
}

#[derive(Debug, Clone)]
struct MultiEvent {
    dt: u64,
    key: &'static str,
    permits: Vec<u64>,
    op: Op,
}

/// Several limits of the menu, and a trace of requests naming all of them.
fn multi_cases() -> impl Strategy<Value = (Vec<(u8, u64)>, Vec<MultiEvent>)> {
    prop::collection::vec((0u8..9, 1u64..6), 2..4).prop_flat_map(|limits| {
        let count = limits.len();
        let op = prop_oneof![
            6 => Just(Op::Check),
            3 => Just(Op::Peek),
            1 => Just(Op::Charge),
            1 => (0u64..2_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
        ];
        let dt = prop_oneof![3 => Just(0u64), 3 => 0u64..500_000, 1 => 0u64..30_000_000];
        let key = prop::sample::select(vec!["alice", "bob"]);
        let event = (dt, key, prop::collection::vec(1u64..4, count), op).prop_map(
            |(dt, key, permits, op)| MultiEvent {
                dt,
                key,
                permits,
                op,
            },
        );
        (Just(limits), prop::collection::vec(event, 1..40))
    })
}

/// Several limits on one request: Redis's `decide_all` answers as
/// `sluicegate::limiter::decide_together` does, and when one limit denies, every limit reports what
/// it has now, uncharged.
#[test]
fn multi_limit_requests_match_decide_together() -> Result<(), BoxError> {
    let h = Harness::new()?;
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&multi_cases(), |(limits, trace)| {
        let base = 1_763_000_000_000_000u64;
        let clock = ManualClock::new(base);
        let mut memory = Vec::new();
        let mut redis = Vec::new();
        for &(kind, size) in &limits {
            let (algorithm, limit) =
                menu(kind, size).map_err(|e| TestCaseError::fail(e.to_string()))?;
            memory.push(KeyedLimiter::with_clock(algorithm, clock.clone()));
            redis.push(h.limiter(limit));
        }
        // Every limit of a call goes to the same store.
        let store = redis[0].store().clone();
        let redis: Vec<RedisLimiter> = redis
            .into_iter()
            .map(|l| RedisLimiter::new(store.clone(), l.limit().clone(), l.name()))
            .collect();
        for (i, event) in trace.iter().enumerate() {
            clock.set(clock.now() + event.dt);
            let now = clock.now();
            let key = event.key.to_owned();
            let permits: Vec<NonZeroU64> = event
                .permits
                .iter()
                .map(|&p| NonZeroU64::new(p).expect("permits start at 1"))
                .collect();
            let targets: Vec<_> = memory
                .iter()
                .zip(&permits)
                .map(|(limiter, &permits)| LimitTarget {
                    limiter,
                    key: &key,
                    permits,
                })
                .collect();
            let expected = decide_together(&targets, event.op);
            let requests: Vec<_> = redis
                .iter()
                .zip(&permits)
                .map(|(l, &n)| l.request_n(key.as_bytes(), n))
                .collect();
            let got = h
                .runtime
                .block_on(store.decide_all(&requests, event.op, Now::At(now)));
            match (expected, got) {
                (Ok(e), Ok(g)) => {
                    prop_assert_eq!(e.allowed, g.allowed, "event {} {:?}", i, event);
                    prop_assert_eq!(&e.decisions, &g.decisions, "event {} {:?}", i, event);
                    if !e.allowed && event.op != Op::Charge {
                        // Nothing charged: every limit reports what it has now.
                        for (limiter, decision) in memory.iter().zip(&g.decisions) {
                            let algorithm = limiter.algorithm();
                            let state = limiter
                                .state_of(&key)
                                .unwrap_or_else(|| algorithm.initial_state(now));
                            prop_assert_eq!(
                                decision.remaining(),
                                available(&*algorithm, &state, now),
                                "event {} {:?}",
                                i,
                                event
                            );
                        }
                    }
                }
                (
                    Err(CheckError::InsufficientCapacity { .. }),
                    Err(RedisLimitError::InsufficientCapacity { .. }),
                )
                | (Err(CheckError::Unsupported { .. }), Err(RedisLimitError::Unsupported(_))) => {}
                (e, g) => prop_assert!(false, "event {i} {event:?}: memory {e:?}, redis {g:?}"),
            }
        }
        Ok(())
    })?;
    Ok(())
}
