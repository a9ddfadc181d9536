//! Several limits of different algorithms on one request, in one script call: random traces
//! give the same decisions as deciding the pure state machines together, all or nothing.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{
    Algorithm, CheckError, Decision, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Micros,
    QueueDelay, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use sluicegate_redis::{RedisLimit, RedisLimitError, RedisLimiter, ScriptMode, StoreConfig};

use sluicegate_redis::testing::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One limit's in-memory reference: a pure algorithm and its state.
trait Reference {
    fn decide(
        &mut self,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
        commit: bool,
    ) -> Result<Decision, CheckError>;
}

struct Pure<A: Algorithm> {
    algorithm: A,
    state: A::State,
}

impl<A: Algorithm> Reference for Pure<A> {
    fn decide(
        &mut self,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
        commit: bool,
    ) -> Result<Decision, CheckError> {
        let mut state = self.state.clone();
        let decision = self.algorithm.decide(&mut state, now, permits, op)?;
        if commit {
            self.state = state;
        }
        Ok(decision)
    }
}

fn pure<A: Algorithm>(algorithm: A) -> Box<dyn Reference> {
    let state = algorithm.initial_state(0);
    Box::new(Pure { algorithm, state })
}

/// Limit number `kind` of a small menu, sized `size`, in memory and in Redis.
fn build(kind: u8, size: u64) -> Result<(Box<dyn Reference>, RedisLimit), BoxError> {
    let (s3, m7, s10, s5) = (
        Rate::per_second(3)?,
        Rate::per_minute(7)?,
        Rate::per_second(10)?,
        Rate::per_second(5)?,
    );
    let sec = Duration::from_secs(1);
    Ok(match kind {
        0 => (pure(Gcra::new(s3, size)?), RedisLimit::gcra(s3, size)?),
        1 => (
            pure(TokenBucket::new(m7, size)?),
            RedisLimit::token_bucket(m7, size)?,
        ),
        2 => (
            pure(FixedWindow::new(size, sec)?),
            RedisLimit::fixed_window(size, sec)?,
        ),
        3 => (
            pure(SlidingLog::new(size, sec * 10)?),
            RedisLimit::sliding_log(size, sec * 10)?,
        ),
        4 => (
            pure(SlidingWindow::new(size, sec, Some(4))?),
            RedisLimit::sliding_window(size, sec, Some(4))?,
        ),
        5 => (
            pure(SlidingWindow::new(size, sec * 60, None)?),
            RedisLimit::sliding_window(size, sec * 60, None)?,
        ),
        6 => (
            pure(LeakyBucket::new(s10, size)?),
            RedisLimit::leaky_bucket(s10, size)?,
        ),
        _ => {
            let delay = QueueDelay::After(1);
            (
                pure(LeakyQueue::new(s5, size, delay)?),
                RedisLimit::leaky_queue(s5, size, delay)?,
            )
        }
    })
}

#[derive(Debug, Clone)]
struct Event {
    dt: u64,
    permits: Vec<u64>,
    op: Op,
}

/// Limits drawn from `kinds` of the menu, with reservations `reserve` times in ten.
fn case(kinds: Vec<u8>, reserve: u32) -> impl Strategy<Value = (Vec<(u8, u64)>, Vec<Event>)> {
    let kind = prop::sample::select(kinds);
    prop::collection::vec((kind, 1u64..6), 2..4).prop_flat_map(move |limits| {
        let count = limits.len();
        let op = prop_oneof![
            (8 - reserve) => Just(Op::Check),
            2 => Just(Op::Peek),
            2 => Just(Op::Charge),
            reserve => (0u64..2_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
            reserve => Just(Op::Reserve { max_wait: None }),
        ];
        let dt = prop_oneof![2 => Just(0u64), 3 => 0u64..500_000, 1 => 0u64..30_000_000];
        let event = (dt, prop::collection::vec(1u64..4, count), op)
            .prop_map(|(dt, permits, op)| Event { dt, permits, op });
        (Just(limits), prop::collection::vec(event, 1..40))
    })
}

/// The reference rule: each limit decides on a copy; all allowed: all charged; otherwise the
/// ones that allowed report a peek. A charge is kept by every limit, allowed or not.
fn decide_together(
    refs: &mut [Box<dyn Reference>],
    now: Micros,
    permits: &[NonZeroU64],
    op: Op,
) -> Result<(bool, Vec<Decision>), CheckError> {
    let mut decisions = Vec::new();
    for (r, &n) in refs.iter_mut().zip(permits) {
        decisions.push(r.decide(now, n, op, false)?);
    }
    let allowed = decisions.iter().all(|d| d.allowed());
    if op == Op::Charge {
        // Every limit counts the request, allowed or not.
        for ((r, &n), decision) in refs.iter_mut().zip(permits).zip(decisions.iter_mut()) {
            *decision = r.decide(now, n, op, true)?;
        }
        return Ok((allowed, decisions));
    }
    for ((r, &n), decision) in refs.iter_mut().zip(permits).zip(decisions.iter_mut()) {
        if allowed {
            let _ = r.decide(now, n, op, op.consumes())?;
        } else if decision.allowed() {
            *decision = r.decide(now, n, Op::Peek, false)?;
        }
    }
    Ok((allowed, decisions))
}

#[test]
fn multi_limit_calls_match_deciding_the_pure_machines_together() -> Result<(), BoxError> {
    run_cases(case((0..8).collect(), 1))
}

#[test]
fn multi_limit_reservations_match_deciding_the_pure_machines_together() -> Result<(), BoxError> {
    // Only the algorithms that reserve, and many reservations.
    run_cases(case(vec![0, 1, 7], 3))
}

fn run_cases(
    strategy: impl Strategy<Value = (Vec<(u8, u64)>, Vec<Event>)>,
) -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let config = StoreConfig {
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    };
    // Cases alternate between Redis Functions and EVALSHA scripts.
    let eval_store = runtime.block_on(server.store(StoreConfig {
        scripts: ScriptMode::Eval,
        ..config.clone()
    }))?;
    let store = runtime.block_on(server.store(config))?;
    let cases = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner.run(&strategy, |(limits, trace)| {
        let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store = if case % 2 == 0 { &store } else { &eval_store };
        let mut refs = Vec::new();
        let mut redis = Vec::new();
        for (j, &(kind, size)) in limits.iter().enumerate() {
            let (reference, limit) =
                build(kind, size).map_err(|e| TestCaseError::fail(e.to_string()))?;
            refs.push(reference);
            redis.push(RedisLimiter::new(
                store.clone(),
                limit,
                format!("c{case}-{j}"),
            ));
        }
        let mut now = 1_763_000_000_000_000u64;
        for (i, event) in trace.iter().enumerate() {
            now += event.dt;
            let permits: Vec<NonZeroU64> = event
                .permits
                .iter()
                .map(|&p| NonZeroU64::new(p).expect("permits start at 1"))
                .collect();
            let expected = decide_together(&mut refs, now, &permits, event.op);
            let requests: Vec<_> = redis
                .iter()
                .zip(&permits)
                .map(|(l, &n)| l.request_n(b"user", n))
                .collect();
            let got = runtime.block_on(store.decide_all(&requests, event.op, Now::At(now)));
            match (expected, got) {
                (Ok((allowed, decisions)), Ok(multi)) => {
                    prop_assert_eq!(allowed, multi.allowed, "event {} {:?}", i, event);
                    prop_assert_eq!(decisions, multi.decisions, "event {} {:?}", i, event);
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
