//! Permit leasing on real `redis-server`s.
//!
//! - With a lease size of 1 (hot shapes decided through the lease script, nothing leased),
//!   every decision equals the plain path's on the same trace (every rate algorithm, one and
//!   two limits per call, a manual clock); the windows with real leases do too, through
//!   Redis Functions and through `EVALSHA` scripts.
//! - Several OS processes (this test binary run again as children) hammer one key on Redis's
//!   clock; the grants they log, replayed through the algorithm in time order, are every one
//!   allowed: the limit held in every window, for every leasing algorithm.
//! - A child killed (SIGKILL) holding a lease: its permits are back within the lease's life
//!   plus the algorithm's memory, on a manual clock.
//! - A two-limit call leases both together.
//! - Under the `local` failure policy, a lease in hand is spent while Redis is away, and Redis
//!   has counted every permit granted through it once when it is back.

use std::io::{BufRead, BufReader};
use std::num::NonZeroU64;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate::lease::LeaseSizing;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::store::{MemoryStore, Request, Store as _};
use sluicegate::{Algorithm as _, AnyAlgorithm, KeyedLimiter, ManualClock};
use sluicegate_redis::testing::RedisServer;
use sluicegate_redis::{
    FailSafe, FailSafeLimit, FailurePolicy, LeaseConfig, LimitRequest, NamedLimit, RedisLimit,
    RedisLimitError, RedisMultiDecision, RedisStore, ScriptMode, StoreConfig,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Unix time in µs well past 2^50, as real ones are; a whole second.
const BASE: u64 = 1_763_000_000_000_000;

/// Every leasing algorithm, at rates a hammering process runs into.
const LEASING: [&str; 6] = [
    "fixed-window:limit=300,window=100ms",
    "sliding-window:limit=300,window=100ms,buckets=4",
    "sliding-window:limit=300,window=100ms",
    "gcra:rate=3000/s,burst=60",
    "token-bucket:rate=3000/s,burst=60",
    "leaky-bucket:rate=3000/s,capacity=60",
];

fn limit(spec: &str) -> Result<RedisLimit, BoxError> {
    let algorithm: AnyAlgorithm = spec.parse()?;
    Ok(RedisLimit::from_algorithm(
        &algorithm,
        Duration::from_secs(3600),
    )?)
}

fn config(max_per_key: Option<u64>) -> StoreConfig {
    configured(max_per_key, ScriptMode::Auto)
}

fn configured(max_per_key: Option<u64>, scripts: ScriptMode) -> StoreConfig {
    let config = StoreConfig {
        scripts,
        // The trace's clock runs far ahead of the test's: keep keys past "fresh".
        expiry_grace: Duration::from_secs(3600),
        ..StoreConfig::default()
    };
    match max_per_key {
        None => config,
        Some(max_per_key) => config.with_leasing(LeaseConfig {
            sizing: LeaseSizing {
                max_per_key,
                ..LeaseSizing::default()
            },
            ..LeaseConfig::default()
        }),
    }
}

fn one() -> NonZeroU64 {
    NonZeroU64::MIN
}

/// A small deterministic generator (a linear congruence), the same trace on every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// A call of a trace: its time, op, and (limit index, key) per limit.
type Call = (u64, Op, Vec<(usize, &'static [u8])>);

/// Calls: bursts on one shape at µs steps (hot), the shape changing now and then, pauses of
/// up to 150 ms. `mixed`: also two-limit calls, peeks and charges; otherwise single-limit
/// checks, so that no key is in two shapes and no call looks behind a lease.
fn hot_trace(seed: u64, limits: usize, length: usize, mixed: bool) -> Vec<Call> {
    let mut draw = Draw(seed);
    let keys: [&'static [u8]; 2] = [b"ann", b"ben"];
    let limits = limits as u64;
    let mut at = BASE;
    let mut shape: Vec<(usize, &'static [u8])> = Vec::new();
    (0..length)
        .map(|_| {
            at += match draw.next(50) {
                0 => draw.next(150_000),
                1..=4 => draw.next(5_000),
                _ => draw.next(40),
            };
            if shape.is_empty() || draw.next(40) == 0 {
                let first = (draw.next(limits) as usize, keys[draw.next(2) as usize]);
                shape = vec![first];
                let second = (draw.next(limits) as usize, keys[draw.next(2) as usize]);
                if mixed && draw.next(3) == 0 && second != first {
                    shape.push(second);
                }
            }
            let op = match draw.next(30) {
                0 if mixed => Op::Peek,
                1 if mixed => Op::Charge,
                _ => Op::Check,
            };
            (at, op, shape.clone())
        })
        .collect()
}

/// Runs `trace` on a plain store and a leasing one; every answer must be the same.
async fn same_answers(
    specs: &[&str],
    max_per_key: u64,
    seed: u64,
    mixed: bool,
    scripts: ScriptMode,
) -> Result<sluicegate_redis::LeaseStats, BoxError> {
    let limits: Vec<RedisLimit> = specs.iter().map(|s| limit(s)).collect::<Result<_, _>>()?;
    let names: Vec<String> = (0..limits.len()).map(|i| format!("limit-{i}")).collect();
    let (plain_server, leasing_server) = (RedisServer::start()?, RedisServer::start()?);
    let plain = plain_server.store(config(None)).await?;
    let leasing = leasing_server
        .store(configured(Some(max_per_key), scripts))
        .await?;
    for (i, (at, op, shape)) in hot_trace(seed, limits.len(), 6_000, mixed)
        .into_iter()
        .enumerate()
    {
        let requests: Vec<LimitRequest<'_>> = shape
            .iter()
            .map(|&(l, key)| LimitRequest {
                limit: &limits[l],
                name: &names[l],
                key,
                permits: one(),
            })
            .collect();
        // Errors too (a charge of a limit that takes none) must be the same.
        let answer = |result: Result<RedisMultiDecision, RedisLimitError>| match result {
            Ok(d) => Ok((d.allowed, d.decisions, d.now)),
            Err(e) => Err(e.to_string()),
        };
        let expected = answer(plain.decide_all(&requests, op, Now::At(at)).await);
        let leased = answer(leasing.decide_all(&requests, op, Now::At(at)).await);
        assert_eq!(leased, expected, "call {i} at {at} ({op:?} on {shape:?})");
    }
    Ok(leasing.lease_stats())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lease_size_of_one_decisions_equal_the_plain_path() -> Result<(), BoxError> {
    let mut specs = LEASING.to_vec();
    // Not leased: always the plain path, alone or beside a leasing limit.
    specs.extend([
        "sliding-log:limit=40,window=50ms",
        "leaky-queue:rate=500/s,burst=5",
    ]);
    let stats = same_answers(&specs, 1, 7, true, ScriptMode::Auto).await?;
    assert_eq!(stats.leases_taken, 0);
    assert!(stats.lease_calls > 100, "{stats:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_leases_answer_exactly_as_the_plain_path() -> Result<(), BoxError> {
    // A window's lease counts its permits where the plain path would, and gives back the
    // unused ones exactly: a single process sees no difference at all.
    let specs = [
        "fixed-window:limit=300,window=100ms",
        "sliding-window:limit=300,window=100ms,buckets=4",
    ];
    for scripts in [ScriptMode::Auto, ScriptMode::Eval] {
        let stats = same_answers(&specs, 16, 11, false, scripts).await?;
        assert!(stats.local_grants > 1_000, "{stats:?}");
        assert!(stats.permits_returned > 0, "{stats:?}");
    }
    Ok(())
}

/// With Redis gone, a shutdown's return makes one call, not one per shape (each would wait
/// out the timeout); every lease's permits are counted spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_leases_to_a_redis_gone_stops_at_the_first_failure() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let store = server.store(config(Some(32))).await?;
    let window = limit("fixed-window:limit=1000000,window=1h")?;
    for key in [&b"a"[..], b"b", b"c"] {
        let request = [LimitRequest {
            limit: &window,
            name: "w",
            key,
            permits: one(),
        }];
        for _ in 0..100 {
            store.decide_all(&request, Op::Check, Now::At(BASE)).await?;
        }
    }
    let held = store.lease_stats();
    assert!(held.permits_held > 0 && held.leases_taken >= 3, "{held:?}");
    server.stop();
    assert!(store.return_leases().await.is_err());
    let after = store.lease_stats();
    assert_eq!(after.lease_calls - held.lease_calls, 1, "{after:?}");
    assert_eq!(after.permits_held, 0, "{after:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_two_limits_leases_both_or_neither() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config(Some(32))).await?;
    let (window, bucket) = (
        limit("fixed-window:limit=40,window=1s")?,
        limit("gcra:rate=1/s,burst=25")?,
    );
    let requests = [
        LimitRequest {
            limit: &window,
            name: "w",
            key: b"k",
            permits: one(),
        },
        LimitRequest {
            limit: &bucket,
            name: "b",
            key: b"k",
            permits: one(),
        },
    ];
    let mut granted = 0;
    for i in 0..200 {
        if store
            .decide_all(&requests, Op::Check, Now::At(BASE + i))
            .await?
            .allowed
        {
            granted += 1;
        }
    }
    // The bucket's 25 bound the pair, leases and all; the window counted exactly those.
    assert_eq!(granted, 25);
    let stats = store.lease_stats();
    assert!(
        stats.leases_taken > 0 && stats.local_grants > 0,
        "{stats:?}"
    );
    let peek = store
        .decide_all(&requests[..1], Op::Peek, Now::At(BASE + 200))
        .await?;
    assert_eq!(peek.decisions[0].remaining(), 15);
    Ok(())
}

/// This binary run again as a child, told what to do by the environment.
fn child(mode: &str, url: &str, spec: &str, extra: &[(&str, String)]) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap_or_default());
    command
        .args(["lease_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("LEASE_CHILD", mode)
        .env("LEASE_CHILD_URL", url)
        .env("LEASE_CHILD_SPEC", spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in extra {
        command.env(name, value);
    }
    command
}

/// The child's side: `hammer` checks one key at full speed on Redis's clock for
/// `LEASE_CHILD_MILLIS` and prints each grant's time (`G t`) and its lease counts (`S ...`);
/// `hold` checks on a given clock until it holds a lease, prints `LEASED held granted
/// last_at`,
/// and waits to be killed. Without `LEASE_CHILD`, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn lease_child() -> Result<(), BoxError> {
    let Ok(mode) = std::env::var("LEASE_CHILD") else {
        return Ok(());
    };
    let url = std::env::var("LEASE_CHILD_URL")?;
    let limit = limit(&std::env::var("LEASE_CHILD_SPEC")?)?;
    let store = RedisStore::connect(&url, config(Some(64))).await?;
    let request = [LimitRequest {
        limit: &limit,
        name: "hot",
        key: b"one-key",
        permits: one(),
    }];
    let mut out = String::new();
    if mode == "hammer" {
        let millis: u64 = std::env::var("LEASE_CHILD_MILLIS")?.parse()?;
        let started = Instant::now();
        let mut calls = 0u64;
        while started.elapsed() < Duration::from_millis(millis) {
            let decided = store.decide_all(&request, Op::Check, Now::Store).await?;
            if decided.allowed {
                out.push_str(&format!("G {}\n", decided.now));
            }
            calls += 1;
            if calls % 64 == 0 {
                tokio::task::consume_budget().await;
            }
        }
        store.return_leases().await?;
        let s = store.lease_stats();
        out.push_str(&format!(
            "S {} {} {}\n",
            s.leases_taken, s.local_grants, calls
        ));
        print!("{out}");
        return Ok(());
    }
    let base: u64 = std::env::var("LEASE_CHILD_AT")?.parse()?;
    let mut granted = 0;
    for i in 0..10_000 {
        if store
            .decide_all(&request, Op::Check, Now::At(base + i))
            .await?
            .allowed
        {
            granted += 1;
        }
        let held = store.lease_stats().permits_held;
        if held > 0 {
            println!("\nLEASED {held} {granted} {}", base + i);
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    }
    Err("never held a lease".into())
}

/// Grants that the algorithm, replaying them alone in time order, would deny.
fn excess(spec: &str, mut grants: Vec<u64>) -> Result<Vec<u64>, BoxError> {
    let algorithm: AnyAlgorithm = spec.parse()?;
    grants.sort_unstable();
    let mut state = algorithm.initial_state(0);
    let mut denied = Vec::new();
    for t in grants {
        if !algorithm.decide(&mut state, t, one(), Op::Check)?.allowed() {
            denied.push(t);
        }
    }
    Ok(denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_hammering_one_key_never_exceed_the_limit() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config(None)).await?;
    for spec in LEASING {
        store.command::<String>(&redis::cmd("FLUSHALL")).await?;
        let children = (0..3)
            .map(|_| {
                child(
                    "hammer",
                    &server.url(),
                    spec,
                    &[("LEASE_CHILD_MILLIS", "600".into())],
                )
                .spawn()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut grants = Vec::new();
        let mut leased = 0;
        for child in children {
            let output = child.wait_with_output()?;
            assert!(output.status.success(), "{spec}: a child failed");
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let mut words = line.split(' ');
                match words.next() {
                    Some("G") => grants.push(words.next().unwrap_or("").parse::<u64>()?),
                    Some("S") => leased += words.next().unwrap_or("").parse::<u64>()?,
                    _ => {}
                }
            }
        }
        assert!(leased > 0, "{spec}: no lease was taken");
        assert!(!grants.is_empty(), "{spec}: nothing granted");
        let over = excess(spec, grants.clone())?;
        assert!(
            over.is_empty(),
            "{spec}: {} of {} grants over the limit, first at {:?}",
            over.len(),
            grants.len(),
            over.first()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_permits_come_back_within_the_lease_life() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(config(None)).await?;
    let life = LeaseSizing::default().life;
    // Each with the time its state takes to forget everything (its memory).
    let cases = [
        ("fixed-window:limit=300,window=100ms", 100_000),
        ("sliding-window:limit=300,window=100ms,buckets=4", 100_000),
        ("sliding-window:limit=300,window=100ms", 200_000),
        ("gcra:rate=3000/s,burst=60", 20_000),
        ("token-bucket:rate=3000/s,burst=60", 20_000),
        ("leaky-bucket:rate=3000/s,capacity=60", 20_000),
    ];
    for (i, (spec, memory)) in cases.into_iter().enumerate() {
        let base = BASE + i as u64 * 10_000_000;
        store.command::<String>(&redis::cmd("FLUSHALL")).await?;
        let mut holder = child(
            "hold",
            &server.url(),
            spec,
            &[("LEASE_CHILD_AT", base.to_string())],
        )
        .spawn()?;
        // The test harness's own lines come first.
        let mut line = String::new();
        if let Some(stdout) = holder.stdout.take() {
            let mut lines = BufReader::new(stdout);
            while lines.read_line(&mut line)? > 0 && !line.starts_with("LEASED ") {
                line.clear();
            }
        }
        holder.kill()?;
        holder.wait()?;
        let numbers: Vec<u64> = line
            .trim()
            .strip_prefix("LEASED ")
            .ok_or_else(|| format!("{spec}: the child said {line:?}"))?
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let [held, granted, last_at] = numbers[..] else {
            return Err(format!("{spec}: {line:?}").into());
        };
        let limit = limit(spec)?;
        let request = [LimitRequest {
            limit: &limit,
            name: "hot",
            key: b"one-key",
            permits: one(),
        }];
        let capacity = limit.capacity();
        // Mid-lease, the dead process's permits are taken.
        let during = store
            .decide_all(&request, Op::Peek, Now::At(last_at))
            .await?;
        assert!(
            during.decisions[0].remaining() <= capacity.saturating_sub(granted + held),
            "{spec}: {held} held, {granted} granted, {:?}",
            during.decisions[0]
        );
        // Back within the lease's life and the algorithm's memory.
        let after = store
            .decide_all(&request, Op::Peek, Now::At(last_at + life + memory))
            .await?;
        assert_eq!(after.decisions[0].remaining(), capacity, "{spec}");
    }
    Ok(())
}

/// The failure policy over a leasing store, falling back to memory.
type Safe = FailSafe<RedisStore, MemoryStore<AnyAlgorithm, ManualClock>, String>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_in_hand_is_spent_while_redis_is_away_and_counted_once() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let timeout = Duration::from_millis(300);
    let store = server
        .store(StoreConfig {
            timeout,
            ..config(Some(32))
        })
        .await?;
    let safe: Safe = FailSafe::new(
        Arc::new(store.clone()),
        MemoryStore::new(),
        FailurePolicy::Local,
        timeout,
    );
    let spec = "fixed-window:limit=1000,window=1h";
    let local: AnyAlgorithm = spec.parse()?;
    let both = FailSafeLimit {
        primary: Arc::new(NamedLimit {
            limit: limit(spec)?,
            name: "w".to_owned(),
        }),
        local: Arc::new(KeyedLimiter::with_clock(local, ManualClock::new(0))),
    };
    let key = "k".to_owned();
    let request = [Request {
        limit: &both,
        key: &key,
        permits: one(),
    }];
    // Granted through Redis or its leases (counted there), and by the policy (not counted).
    let (mut counted, mut by_policy, mut at) = (0u64, 0u64, BASE);
    let mut check = async |safe: &Safe| -> Result<(), BoxError> {
        at += 1;
        let failures = safe.failures();
        let decided = safe.decide(&request, Op::Check, Now::At(at)).await?;
        assert!(decided.decisions[0].allowed());
        if safe.failures() > failures {
            by_policy += 1;
        } else {
            counted += 1;
        }
        Ok(())
    };
    while store.lease_stats().permits_held == 0 {
        check(&safe).await?;
    }
    let held = store.lease_stats().permits_held;
    let local_before = store.lease_stats().local_grants;
    server.pause()?;
    // Redis away: the lease in hand is spent, one permit per request (a request that asks
    // ahead fails, and the policy answers it); then the policy answers.
    for _ in 0..held + 3 {
        check(&safe).await?;
    }
    assert_eq!(store.lease_stats().local_grants - local_before, held);
    assert!(by_policy >= 3, "{by_policy} answered by the policy");
    server.resume()?;
    // Back: Redis counted every permit granted through it or its leases, once, and more
    // only by the call that timed out (Redis ran it when it woke: its request, which the
    // policy answered, and the lease nobody received, spent until the window ends).
    let peek = store
        .decide_all(
            &[LimitRequest {
                limit: &both.primary.limit,
                name: "w",
                key: b"k",
                permits: one(),
            }],
            Op::Peek,
            Now::At(at + 1),
        )
        .await?;
    let remaining = peek.decisions[0].remaining();
    assert!(
        remaining <= 1000 - counted,
        "{remaining} left, {counted} counted"
    );
    assert!(
        remaining + 33 >= 1000 - counted,
        "{remaining} left, {counted} counted"
    );
    Ok(())
}
