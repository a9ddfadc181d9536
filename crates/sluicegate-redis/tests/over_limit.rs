//! The over-limit cache on real `redis-server`s: the same trace (several keys, mixed permits,
//! one and two limits per call, checks, peeks and charges, every rate algorithm, a manual
//! clock) through a store with the cache and one without gives identical answers, while the
//! cached one asks Redis exactly as many times fewer as it answered itself. Then: Redis's own
//! clock, the cap, the key budget, a changed limit and clearing.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::limiter::KeyBudget;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{
    Algorithm as _, AnyAlgorithm, FixedWindow, Gcra, LeakyBucket, LeakyQueue, QueueDelay, Rate,
    SlidingLog, SlidingWindow, TokenBucket,
};
use sluicegate_redis::testing::{RedisServer, calls_of, command_calls};
use sluicegate_redis::{LimitRequest, RedisLimit, RedisStore, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Unix time in µs well past 2^50, as real ones are.
const BASE: u64 = 1_763_000_000_123_457;

fn config(entries: usize) -> StoreConfig {
    StoreConfig {
        // The trace's clock runs far ahead of the test's: keep keys past "fresh".
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    }
    .with_over_limit_cache(entries)
}

/// Every rate algorithm the script runs (the ones the cache answers, and the leaky queue,
/// which it never does), named for the keys.
fn limits() -> Result<Vec<(String, RedisLimit)>, BoxError> {
    let second = Duration::from_secs(1);
    let algorithms: Vec<AnyAlgorithm> = vec![
        FixedWindow::new(4, second)?.into(),
        SlidingWindow::new(4, second, None)?.into(),
        SlidingWindow::new(5, second, Some(4))?.into(),
        SlidingLog::new(3, Duration::from_millis(500))?.into(),
        Gcra::new(Rate::per_second(4)?, 3)?.into(),
        TokenBucket::new(Rate::new(3, second)?, 3)?.into(),
        LeakyBucket::new(Rate::per_second(3)?, 3)?.into(),
        LeakyQueue::new(Rate::per_second(3)?, 2, QueueDelay::NoDelay)?.into(),
    ];
    algorithms
        .iter()
        .enumerate()
        .map(|(i, algorithm)| {
            let limit = RedisLimit::from_algorithm(algorithm, Duration::from_secs(3600))?;
            Ok((format!("{}-{i}", algorithm.name()), limit))
        })
        .collect()
}

/// A small deterministic generator (xorshift), so the trace is the same on every run.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One call of the trace: its time, its op, and (limit index, key, permits) per limit.
struct Call {
    at: u64,
    op: Op,
    asks: Vec<(usize, &'static [u8], u64)>,
}

/// Runs of calls on the same limits and keys (hot keys) close together, now and then a pause.
fn trace(seed: u64, length: usize, limits: u64) -> Vec<Call> {
    let mut dice = Dice(seed);
    let keys: [&'static [u8]; 3] = [b"alice", b"bob", b"carol"];
    let mut at = BASE;
    let mut previous: Vec<(usize, &'static [u8])> = Vec::new();
    (0..length)
        .map(|_| {
            at += match dice.below(10) {
                0..=4 => 0,
                5..=8 => dice.below(3_000),
                _ => dice.below(600_000),
            };
            let op = match dice.below(20) {
                0..=11 => Op::Check,
                12..=14 => Op::Peek,
                _ => Op::Charge,
            };
            if previous.is_empty() || dice.below(8) == 0 {
                let pick = |dice: &mut Dice| {
                    let limit = usize::try_from(dice.below(limits)).unwrap_or(0);
                    let key = keys[usize::try_from(dice.below(3)).unwrap_or(0)];
                    (limit, key)
                };
                let first = pick(&mut dice);
                previous = vec![first];
                if dice.below(4) == 0 {
                    let second = pick(&mut dice);
                    // One call may name a limit and key only once.
                    if second != first {
                        previous.push(second);
                    }
                }
            }
            let asks = previous
                .iter()
                .map(|&(limit, key)| {
                    let permits = match dice.below(8) {
                        0..=5 => 1,
                        6 => 2,
                        _ => 3,
                    };
                    (limit, key, permits)
                })
                .collect();
            Call { at, op, asks }
        })
        .collect()
}

/// Redis script calls a server ran so far.
async fn script_calls(store: &RedisStore) -> Result<u64, BoxError> {
    let calls = command_calls(store).await?;
    Ok(["fcall", "evalsha", "eval"]
        .iter()
        .map(|command| calls_of(&calls, command))
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_answers_as_redis_would_with_fewer_calls() -> Result<(), BoxError> {
    let limits = limits()?;
    let (plain_server, cached_server) = (RedisServer::start()?, RedisServer::start()?);
    let plain = plain_server.store(config(0)).await?;
    let cached = cached_server.store(config(1_000)).await?;
    // Loaded first: the very first call of a server fails once and loads the library.
    let warm_up = RedisLimit::fixed_window(1, Duration::from_secs(1))?;
    for store in [&plain, &cached] {
        store
            .decide_all(&one(&warm_up, "warm-up", b"x"), Op::Peek, Now::Store)
            .await?;
    }
    let (plain_before, cached_before) = (script_calls(&plain).await?, script_calls(&cached).await?);
    let mut answered_by_redis = 0u64;
    for seed in [1, 7, 2026] {
        let count = u64::try_from(limits.len())?;
        for (i, call) in trace(seed, 1_500, count).iter().enumerate() {
            let requests: Vec<LimitRequest<'_>> = call
                .asks
                .iter()
                .map(|&(limit, key, permits)| LimitRequest {
                    limit: &limits[limit].1,
                    name: &limits[limit].0,
                    key,
                    permits: NonZeroU64::new(permits).unwrap_or(NonZeroU64::MIN),
                })
                .collect();
            let now = Now::At(call.at + seed * 10_000_000_000);
            let expected = plain.decide_all(&requests, call.op, now).await;
            let got = cached.decide_all(&requests, call.op, now).await;
            match (&expected, &got) {
                (Ok(e), Ok(g)) => assert_eq!(e, g, "seed {seed} call {i} {:?}", call.op),
                (Err(e), Err(g)) => assert_eq!(e.to_string(), g.to_string()),
                _ => panic!("seed {seed} call {i}: {expected:?} against {got:?}"),
            }
            answered_by_redis += u64::from(expected.is_ok());
        }
    }
    let plain_calls = script_calls(&plain).await? - plain_before;
    let cached_calls = script_calls(&cached).await? - cached_before;
    let hits = cached.over_limit_stats().hits;
    // Errors are refused before any call: every other call of the plain store went to Redis.
    assert_eq!(plain_calls, answered_by_redis);
    assert_eq!(
        cached_calls + hits,
        plain_calls,
        "each hit is one call saved"
    );
    eprintln!("{hits} of {plain_calls} calls answered in the process");
    assert!(
        hits * 8 > plain_calls,
        "a hot trace: {hits} of {plain_calls} answered in the process"
    );
    Ok(())
}

fn one<'a>(limit: &'a RedisLimit, name: &'a str, key: &'a [u8]) -> [LimitRequest<'a>; 1] {
    [LimitRequest {
        limit,
        name,
        key,
        permits: NonZeroU64::MIN,
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_clock_a_hot_key_asks_once_per_retry_time() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config(10)).await?;
    let limit = RedisLimit::fixed_window(5, Duration::from_secs(3600))?;
    let request = one(&limit, "hour", b"hot");
    let mut first_denial = None;
    for _ in 0..200 {
        let multi = store.decide_all(&request, Op::Check, Now::Store).await?;
        let decision = multi.decisions[0];
        if !decision.allowed() {
            let retry = decision.retry_after_micros().ok_or("a retry time")?;
            let first = *first_denial.get_or_insert(retry);
            // Timed from when the first denial's call was sent: never later than Redis's.
            assert!(retry <= first, "{retry} after {first}");
            assert_eq!(decision.remaining(), 0);
        }
    }
    // 5 allowed, one denial from Redis; the hour's window may have turned once meanwhile.
    assert!(
        store.over_limit_stats().hits >= 188,
        "{:?}",
        store.over_limit_stats()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_capped_counted_in_a_budget_and_cleared() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let budget = Arc::new(KeyBudget::new(3));
    let store = server
        .store(config(2).with_over_limit_budget(Arc::clone(&budget)))
        .await?;
    let limit = RedisLimit::fixed_window(1, Duration::from_secs(3600))?;
    let at = Now::At(BASE);
    for key in [b"a", b"b", b"c"] {
        for _ in 0..2 {
            store
                .decide_all(&one(&limit, "l", key), Op::Check, at)
                .await?;
        }
    }
    // Three keys over their limit, two kept (the cap), each taken from the budget.
    assert_eq!(store.over_limit_stats().entries, 2);
    assert_eq!(budget.live(), 2);
    store.clear_over_limit_cache();
    assert_eq!(store.over_limit_stats().entries, 0);
    assert_eq!(budget.live(), 0);
    // A full budget keeps nothing.
    assert!(budget.try_take(3));
    store
        .decide_all(&one(&limit, "l", b"a"), Op::Check, at)
        .await?;
    assert_eq!(store.over_limit_stats().entries, 0);
    budget.give_back(3);
    // At the cap with every entry expired, the new one takes the place of the old.
    store
        .decide_all(&one(&limit, "l", b"a"), Op::Check, at)
        .await?;
    store
        .decide_all(&one(&limit, "l", b"b"), Op::Check, at)
        .await?;
    let next_hour = Now::At(BASE + 3_600_000_000);
    for _ in 0..2 {
        store
            .decide_all(&one(&limit, "l", b"c"), Op::Check, next_hour)
            .await?;
    }
    assert_eq!(store.over_limit_stats().entries, 1);
    assert_eq!(budget.live(), 1);
    // Not full: an expired entry still leaves at the next answer from Redis, and its key
    // goes back to the budget.
    let later = Now::At(BASE + 3 * 3_600_000_000);
    store
        .decide_all(&one(&limit, "l", b"d"), Op::Check, later)
        .await?;
    assert_eq!(store.over_limit_stats().entries, 0);
    assert_eq!(budget.live(), 0);
    store
        .decide_all(&one(&limit, "l", b"d"), Op::Check, later)
        .await?;
    drop(store);
    assert_eq!(budget.live(), 0, "a store dropped gives its entries back");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_limit_is_asked_of_redis() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config(10)).await?;
    let at = Now::At(BASE);
    let one_an_hour = RedisLimit::fixed_window(1, Duration::from_secs(3600))?;
    for _ in 0..3 {
        store
            .decide_all(&one(&one_an_hour, "l", b"k"), Op::Check, at)
            .await?;
    }
    assert_eq!(store.over_limit_stats().hits, 1);
    // Reloaded with a higher limit under the same name: the old denial does not answer it.
    let two_an_hour = RedisLimit::fixed_window(2, Duration::from_secs(3600))?;
    let multi = store
        .decide_all(&one(&two_an_hour, "l", b"k"), Op::Check, at)
        .await?;
    assert!(multi.allowed, "the second permit of the new limit");
    assert_eq!(store.over_limit_stats().hits, 1);
    Ok(())
}
