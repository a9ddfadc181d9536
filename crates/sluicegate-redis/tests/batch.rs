//! Batched one-limit decisions (`StoreConfig::max_batch`): the decisions that queue up while
//! a call is in flight go to Redis together, and each answers exactly as it would alone, in
//! the order it was asked; one decision's error stays its own.

use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Decision, Rate};
use sluicegate_redis::testing::{RedisServer, calls_of, command_calls};
use sluicegate_redis::{
    RedisLimit, RedisLimitError, RedisLimiter, RedisStore, ScriptMode, StoreConfig,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One decision to ask: which limiter, key, permits, op and time.
#[derive(Debug, Clone, Copy)]
struct Ask {
    limiter: usize,
    key: &'static [u8],
    permits: u64,
    op: Op,
    at: u64,
}

/// The one-limit entry points: GCRA in whole microseconds, a token bucket (GCRA's code) whose
/// interval (7/3 ms) needs a sub-microsecond tick, a fixed window, a token bucket in whole
/// microseconds.
fn limiters(store: &RedisStore) -> Result<Vec<RedisLimiter>, BoxError> {
    Ok(vec![
        RedisLimiter::new(
            store.clone(),
            RedisLimit::gcra(Rate::per_second(4)?, 3)?,
            "g",
        ),
        RedisLimiter::new(
            store.clone(),
            RedisLimit::token_bucket(Rate::new(3, Duration::from_millis(7))?, 2)?,
            "t",
        ),
        RedisLimiter::new(
            store.clone(),
            RedisLimit::fixed_window(3, Duration::from_secs(1))?,
            "f",
        ),
        RedisLimiter::new(
            store.clone(),
            RedisLimit::token_bucket(Rate::per_second(5)?, 2)?,
            "b",
        ),
    ])
}

/// Rounds of asks, each round asked all at once: runs of the same limiter, op and time on
/// several keys (one run in the batch), the same key again within a round (its decisions must
/// follow one another), and ops the fixed window refuses (answered before Redis is asked: the
/// batch closes around the gap).
fn rounds() -> Vec<Vec<Ask>> {
    let keys: [&'static [u8]; 3] = [b"a", b"b", b"c"];
    let ops = [
        Op::Check,
        Op::Check,
        Op::Peek,
        Op::Charge,
        Op::Reserve {
            max_wait: Some(400_000),
        },
    ];
    let mut seed = 7_u64;
    let mut next = |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    (0..8_u64)
        .map(|round| {
            let mut asks = Vec::new();
            for run in 0..12_u64 {
                let limiter = usize::try_from(next(4)).unwrap_or(0);
                let op = ops[usize::try_from(next(5)).unwrap_or(0)];
                let permits = 1 + next(2);
                let at = 1_000_000 + round * 300_000 + run * next(3) * 10_000;
                for _ in 0..=next(3) {
                    let key = keys[usize::try_from(next(3)).unwrap_or(0)];
                    asks.push(Ask {
                        limiter,
                        key,
                        permits,
                        op,
                        at,
                    });
                }
            }
            asks
        })
        .collect()
}

/// A current-thread runtime: the tasks it spawns queue in the order they were spawned.
fn one_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A decision and the time it was made at, or the error.
type Answer = Result<(u64, Decision), String>;

async fn ask_one(limiter: &RedisLimiter, ask: Ask) -> Answer {
    let permits = NonZeroU64::new(ask.permits).unwrap_or(NonZeroU64::MIN);
    let request = limiter.request_n(ask.key, permits);
    let mut multi = limiter
        .store()
        .decide_all(&[request], ask.op, Now::At(ask.at))
        .await
        .map_err(|e| e.to_string())?;
    let decision = multi.decisions.pop().ok_or("no decision")?;
    Ok((multi.now, decision))
}

/// Each ask, in order, on `limiters`, one after another: no two in flight, so none batched.
async fn ask_one_by_one(
    limiters: &[RedisLimiter],
    asks: impl IntoIterator<Item = Ask>,
) -> Vec<Answer> {
    let mut answers = Vec::new();
    for ask in asks {
        answers.push(ask_one(&limiters[ask.limiter], ask).await);
    }
    answers
}

/// Every ask of a round started at once, in order, on a current-thread runtime: they queue
/// in that order, so the batch holds them in that order.
async fn ask_together(limiters: &[RedisLimiter], round: &[Ask]) -> Result<Vec<Answer>, BoxError> {
    let tasks: Vec<_> = round
        .iter()
        .map(|&ask| {
            let limiter = limiters[ask.limiter].clone();
            tokio::spawn(async move { ask_one(&limiter, ask).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await?);
    }
    Ok(answers)
}

#[test]
fn batched_decisions_answer_as_asked_one_by_one() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = one_thread()?;
    runtime.block_on(async {
        for scripts in [ScriptMode::Auto, ScriptMode::Eval] {
            let prefix = format!("{scripts:?}:");
            let batched = server
                .store(StoreConfig {
                    prefix: format!("{prefix}batched:"),
                    scripts,
                    // Times go back within a round: no key may expire, in real time, before
                    // a decision at an earlier explicit time has read it.
                    expiry_grace: Duration::from_secs(3600),
                    ..StoreConfig::default()
                })
                .await?;
            let alone = server
                .store(StoreConfig {
                    prefix: format!("{prefix}alone:"),
                    scripts,
                    expiry_grace: Duration::from_secs(3600),
                    max_batch: 1,
                    ..StoreConfig::default()
                })
                .await?;
            let (batched_limiters, alone_limiters) = (limiters(&batched)?, limiters(&alone)?);
            // Loads the code (both entry points: one call alone, then two together), so that
            // the counts below are of decisions only, and no call is sent again after a load
            // while a later one goes ahead of it (concurrent calls have no order).
            let _ = batched_limiters[0].check(b"warm-up").await?;
            let warm_up = [Ask {
                limiter: 0,
                key: b"warm-up",
                permits: 1,
                op: Op::Peek,
                at: 1,
            }; 2];
            ask_together(&batched_limiters, &warm_up).await?;
            let mut asked = 0;
            let before = command_calls(&batched).await?;
            let mut together = Vec::new();
            for round in rounds() {
                asked += round.len();
                together.extend(ask_together(&batched_limiters, &round).await?);
            }
            let after = command_calls(&batched).await?;
            let one_by_one = ask_one_by_one(&alone_limiters, rounds().into_iter().flatten()).await;
            assert_eq!(together, one_by_one, "{scripts:?}");
            assert!(
                together.iter().any(Result::is_err) && together.iter().any(Result::is_ok),
                "the trace exercises errors and decisions alike"
            );
            // A check's reply is one value on GCRA or a token bucket in whole microseconds,
            // or a fixed window (the rest worked out from it, in a batch and alone alike:
            // tests/differential.rs holds that against the core), else three, its verdict
            // telling allowed and denied apart (the first token bucket's tick is below a
            // microsecond: all its checks take three; a request no limit can hold is refused
            // before Redis is asked): the trace has an allowed and a denied check of each.
            let checks = |limiter: usize, allowed: bool, retry: bool| {
                rounds()
                    .into_iter()
                    .flatten()
                    .zip(&together)
                    .any(|(ask, answer)| {
                        ask.op == Op::Check
                            && ask.limiter == limiter
                            && answer.as_ref().is_ok_and(|(_, d)| {
                                d.allowed() == allowed && d.retry_after_micros().is_some() == retry
                            })
                    })
            };
            for limiter in 0..4 {
                assert!(
                    checks(limiter, true, false),
                    "an allowed check of {limiter}"
                );
                assert!(checks(limiter, false, true), "a denied check of {limiter}");
            }
            let command = if scripts == ScriptMode::Auto {
                "fcall"
            } else {
                "evalsha"
            };
            let calls = calls_of(&after, command) - calls_of(&before, command);
            // Refused ops never reach Redis; the rest went in about one call per round.
            assert!(
                calls <= 9 && asked > 8 * 8,
                "{calls} calls for {asked} decisions ({scripts:?})"
            );
        }
        Ok(())
    })
}

/// The limiters on a store batching up to `max_batch` decisions, its code loaded, and on one
/// that sends each decision alone; keys never expire before a decision at an earlier explicit
/// time has read them.
async fn batched_and_alone(
    server: &RedisServer,
    max_batch: usize,
) -> Result<(Vec<RedisLimiter>, Vec<RedisLimiter>), BoxError> {
    let config = |prefix: &str, max_batch: usize| StoreConfig {
        prefix: prefix.into(),
        expiry_grace: Duration::from_secs(3600),
        max_batch,
        ..StoreConfig::default()
    };
    let batched = limiters(&server.store(config("batched:", max_batch)).await?)?;
    let alone = limiters(&server.store(config("alone:", 1)).await?)?;
    let _ = batched[0].check(b"warm-up").await?;
    Ok((batched, alone))
}

/// A batch far longer than the rounds above: 120 decisions asked one op after another, a run
/// each, whose reply holds 720 values, in one or a few calls.
#[test]
fn a_batch_of_many_runs_answers_as_asked_one_by_one() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = one_thread()?;
    runtime.block_on(async {
        let (batched, alone) = batched_and_alone(&server, 200).await?;
        let keys: [&'static [u8]; 3] = [b"a", b"b", b"c"];
        let asks: Vec<Ask> = (0..120_u64)
            .map(|i| Ask {
                limiter: usize::try_from(i % 3).unwrap_or(0),
                key: keys[usize::try_from(i / 3 % 3).unwrap_or(0)],
                permits: 1,
                op: if i % 2 == 0 { Op::Charge } else { Op::Peek },
                at: 1_000_000 + i * 1_000,
            })
            .collect();
        let before = command_calls(batched[0].store()).await?;
        let together = ask_together(&batched, &asks).await?;
        let after = command_calls(batched[0].store()).await?;
        let one_by_one = ask_one_by_one(&alone, asks.iter().copied()).await;
        assert_eq!(together, one_by_one);
        assert!(together.iter().all(Result::is_ok), "{together:?}");
        let calls = calls_of(&after, "fcall") - calls_of(&before, "fcall");
        assert!(calls <= 3, "{calls} calls for 120 decisions");
        Ok(())
    })
}

/// A fixed-window check at a time behind its key's window (another process's clock ahead of
/// this one's) counts into the window the key holds, so its reset (and a denial's retry) is
/// that window's and not the one its own time falls in: a batch answers it in full, as its
/// entry point does alone.
#[test]
fn a_check_behind_its_keys_window_answers_in_a_batch_as_alone() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = one_thread()?;
    runtime.block_on(async {
        let (batched, alone) = batched_and_alone(&server, 64).await?;
        let ask = |key: &'static [u8], at: u64| Ask {
            limiter: 2,
            key,
            permits: 1,
            op: Op::Check,
            at,
        };
        // The key counted at 2.1 s, in the window [2 s, 3 s); then checks at 1.5 s: the first
        // ones go alone while call slots are free, the rest (the key's among them) together.
        let ahead = [ask(b"k", 2_100_000)];
        let keys: [&'static [u8]; 8] = [b"a", b"b", b"c", b"d", b"e", b"k", b"k", b"k"];
        let behind: Vec<Ask> = keys.iter().map(|&key| ask(key, 1_500_000)).collect();
        let mut together = ask_together(&batched, &ahead).await?;
        together.extend(ask_together(&batched, &behind).await?);
        let one_by_one = ask_one_by_one(&alone, ahead.iter().chain(&behind).copied()).await;
        assert_eq!(together, one_by_one);
        let behind_k: Vec<&Decision> = together[together.len() - 3..]
            .iter()
            .filter_map(|answer| answer.as_ref().ok().map(|(_, d)| d))
            .collect();
        let [first, second, third] = behind_k[..] else {
            return Err(format!("{together:?}").into());
        };
        assert!(first.allowed() && second.allowed() && !third.allowed());
        assert_eq!(first.remaining(), 1, "counted in the key's window");
        for decision in [first, second, third] {
            assert_eq!(
                decision.reset_after_micros(),
                1_500_000,
                "that window's end"
            );
        }
        assert_eq!(third.retry_after_micros(), Some(1_500_000));
        Ok(())
    })
}

#[test]
fn a_corrupt_key_fails_alone_in_its_batch() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = one_thread()?;
    runtime.block_on(async {
        let store = server
            .store(StoreConfig {
                prefix: "p:".into(),
                ..StoreConfig::default()
            })
            .await?;
        let limiters = limiters(&store)?;
        // Loads the code, so that the count below is of the batch alone.
        let _ = limiters[0].check(b"warm-up").await?;
        store
            .command::<()>(redis::cmd("SET").arg("p:{k2}g").arg("not a time"))
            .await?;
        store
            .command::<()>(redis::cmd("RPUSH").arg("p:{k4}f").arg("a list"))
            .await?;
        let before = command_calls(&store).await?;
        // On Redis's clock: the batch reads it once, so every decision in it has one time.
        let keys: [&'static [u8]; 5] = [b"k1", b"k2", b"k3", b"k4", b"k5"];
        let tasks: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, &key)| {
                let limiter = limiters[if i == 3 { 2 } else { 0 }].clone();
                tokio::spawn(async move {
                    let request = limiter.request(key);
                    limiter
                        .store()
                        .decide_all(&[request], Op::Check, Now::Store)
                        .await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await?);
        }
        let after = command_calls(&store).await?;
        assert_eq!(
            calls_of(&after, "fcall") - calls_of(&before, "fcall"),
            1,
            "one batch"
        );
        let mut times = Vec::new();
        for (key, answer) in keys.iter().zip(&answers) {
            match (*key, answer) {
                (b"k2", Err(RedisLimitError::CorruptState(detail))) => {
                    assert!(detail.contains("p:{k2}g"), "{detail}");
                }
                (b"k4", Err(RedisLimitError::CorruptState(detail))) => {
                    assert!(detail.contains("p:{k4}f"), "{detail}");
                }
                (b"k1" | b"k3" | b"k5", Ok(multi)) => {
                    assert!(multi.allowed);
                    times.push(multi.now);
                }
                (key, answer) => panic!("{}: {answer:?}", String::from_utf8_lossy(key)),
            }
        }
        assert!(times.windows(2).all(|w| w[0] == w[1]), "{times:?}");
        Ok(())
    })
}

#[test]
fn a_store_outlives_the_runtime_it_connected_on() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = first.block_on(server.store(StoreConfig::default()))?;
    let limiter = RedisLimiter::new(store, RedisLimit::gcra(Rate::per_second(2)?, 2)?, "g");
    let _ = first.block_on(limiter.check(b"k"))?;
    // Takes the batching task and the connection's tasks with it.
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    second.block_on(async {
        // The connection may need a failed call to notice it is gone and connect again.
        let mut last = None;
        for _ in 0..50 {
            match limiter.check(b"k").await {
                Ok(decision) => {
                    last = None;
                    assert!(decision.allowed(), "the second of two permits");
                    break;
                }
                Err(RedisLimitError::Stopped) => panic!("the call was not sent alone"),
                Err(error) => last = Some(error),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(last.is_none(), "never served again: {last:?}");
        Ok(())
    })
}
