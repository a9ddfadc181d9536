//! Two threads checking one state at once (a direct limiter, and one key of a keyed limiter),
//! ours against governor, in the same run. The time reported per iteration is the wall time
//! for *each* of the two threads to make one check, so a perfectly parallel limiter would
//! report the single-thread time, and a fully serialised one twice that.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use sluicegate::{DirectLimiter, Gcra, KeyedLimiter, Rate, TokenBucket};

const THREADS: usize = 2;
const PER_SECOND: u32 = 1_000_000;
const BURST: u32 = 1_000_000_000;

/// Runs `check` `iters` times on each of two threads released together; the longer of the two
/// threads' times (each thread times itself, so a main thread scheduled late adds nothing).
fn two_threads(iters: u64, check: impl Fn() + Sync) -> Duration {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        check();
                    }
                    start.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

fn contended(c: &mut Criterion) {
    let rate = Rate::per_second(u64::from(PER_SECOND)).expect("rate");
    let gcra = Gcra::new(rate, u64::from(BURST)).expect("gcra");
    let bucket = TokenBucket::new(rate, u64::from(BURST)).expect("bucket");
    let quota = Quota::per_second(NonZeroU32::new(PER_SECOND).expect("rate"))
        .allow_burst(NonZeroU32::new(BURST).expect("burst"));

    let ours = DirectLimiter::new(gcra.clone());
    let ours_bucket = DirectLimiter::new(bucket);
    let ours_keyed = KeyedLimiter::<u64, Gcra>::new(gcra);
    let governor = RateLimiter::direct(quota);
    let governor_keyed = RateLimiter::<u64, _, _>::dashmap(quota);

    let mut group = c.benchmark_group("two_threads_direct");
    group.bench_function("gcra", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(black_box(&ours).check());
            })
        })
    });
    group.bench_function("token_bucket", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(black_box(&ours_bucket).check());
            })
        })
    });
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(black_box(&governor).check());
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("two_threads_one_key");
    group.bench_function("gcra", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(black_box(&ours_keyed).check(&black_box(7)));
            })
        })
    });
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(black_box(&governor_keyed).check_key(&black_box(7)));
            })
        })
    });
    group.finish();
    assert!(ours.check().map(|d| d.allowed()).unwrap_or(false));
    assert!(governor.check().is_ok());
}

criterion_group!(benches, contended);
criterion_main!(benches);
