//! Decisions per second on one Redis: `redis_bench URL SECONDS TASKS KEYS [ALGORITHM]`.
//! Prints one JSON line. Used by `bench/compare.sh`, next to rate-limiter-flexible and `limits`,
//! and by `bench/over_limit.sh` (`BENCH_OVER_LIMIT_CACHE=ENTRIES` turns the over-limit cache
//! on; the line then also counts the calls it answered without Redis; `BENCH_LEASE=PERMITS`
//! turns permit leasing on, at most PERMITS per lease, and counts the calls granted from
//! leases; `BENCH_RATE=N` allows N per second per key instead of 100).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate::Rate;
use sluicegate::lease::LeaseSizing;
use sluicegate_redis::{LeaseConfig, RedisLimit, RedisLimiter, RedisStore, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() -> Result<(), BoxError> {
    // BENCH_THREADS=1 runs every caller on one thread (as Node does), else one per core.
    let threads: usize = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if threads > 1 {
            builder.worker_threads(threads);
        }
        builder.enable_all().build()?
    };
    runtime.block_on(run())
}

async fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or("redis://127.0.0.1:6379".into());
    let seconds: u64 = arg(&args, 2, 5);
    let tasks: usize = arg(&args, 3, 64);
    let keys: u64 = arg(&args, 4, 1000);
    let algorithm = args.get(5).cloned().unwrap_or("gcra".into());
    // 100 per second per key, bursts of 100: the mix of grants and denials a busy API sees.
    let per_second: u64 = std::env::var("BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let rate = Rate::per_second(per_second)?;
    let limit = match algorithm.as_str() {
        "token-bucket" => RedisLimit::token_bucket(rate, per_second)?,
        "fixed-window" => RedisLimit::fixed_window(per_second, Duration::from_secs(1))?,
        "sliding-window" => RedisLimit::sliding_window(per_second, Duration::from_secs(1), None)?,
        _ => RedisLimit::gcra(rate, per_second)?,
    };
    // BENCH_MAX_BATCH=1 sends every decision in a call of its own (no batching).
    let max_batch = std::env::var("BENCH_MAX_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(StoreConfig::default().max_batch);
    let over_limit_cache = std::env::var("BENCH_OVER_LIMIT_CACHE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let lease: u64 = std::env::var("BENCH_LEASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut config = StoreConfig {
        prefix: "bench:sluicegate:".into(),
        max_batch,
        ..StoreConfig::default()
    }
    .with_over_limit_cache(over_limit_cache);
    if lease > 0 {
        let sizing = LeaseSizing {
            max_per_key: lease,
            ..LeaseSizing::default()
        };
        config = config.with_leasing(LeaseConfig {
            sizing,
            ..LeaseConfig::default()
        });
    }
    let store = RedisStore::connect(&url, config).await?;
    let limiter = Arc::new(RedisLimiter::new(store, limit, "bench"));
    let (done, allowed, total) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (limiter, done, allowed, total) = (
            limiter.clone(),
            done.clone(),
            allowed.clone(),
            total.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut i = task as u64;
            let mut key = String::new();
            while !done.load(Ordering::Relaxed) {
                key.clear();
                write!(key, "user-{}", i % keys)?;
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407)
                    >> 1;
                let decision = limiter.check(key.as_bytes()).await?;
                // An answer from the over-limit cache or a lease is ready at once: without this, tasks
                // looping on it would never give the runtime's timers and I/O a turn.
                tokio::task::consume_budget().await;
                total.fetch_add(1, Ordering::Relaxed);
                allowed.fetch_add(u64::from(decision.allowed()), Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    done.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    // BENCH_LABEL names another build in the same table (bench/compare.sh's BENCH_BASELINE).
    let label = std::env::var("BENCH_LABEL").unwrap_or("sluicegate-redis".into());
    let total = total.load(Ordering::Relaxed);
    let hits = limiter.store().over_limit_stats().hits;
    let leasing = limiter.store().lease_stats();
    let (local_grants, lease_calls) = (leasing.local_grants, leasing.lease_calls);
    println!(
        "{{\"impl\":\"{label}\",\"algorithm\":\"{algorithm}\",\"tasks\":{tasks},\"decisions\":{total},\"allowed\":{},\"seconds\":{secs:.3},\"per_second\":{:.0},\"over_limit_cache\":{over_limit_cache},\"cache_hits\":{hits},\"lease\":{lease},\"local_grants\":{local_grants},\"lease_calls\":{lease_calls}}}",
        allowed.load(Ordering::Relaxed),
        total as f64 / secs
    );
    Ok(())
}
