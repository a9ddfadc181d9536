//! Keyed checks at 1, 10 000 and 1 000 000 `u64` keys, ours against governor's keyed
//! (`DashMap`) limiter, in the same run. Every key is inserted before measuring, then checks
//! cycle through the keys in order (the hashes scatter them over the tables).
//!
//! The quota (one permit a second, a burst of 10^9) lets every check pass, and each key starts
//! 10 000 permits (seconds) short of full, so no key goes fresh and both tables hold all the
//! keys throughout. `gcra` and
//! `governor` use each library's default clock (both read quanta's TSC);
//! `governor_instant` is governor on its `Instant` clock.

use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroU64};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use sluicegate::{Gcra, KeyedLimiter, Rate};

const BURST: u32 = 1_000_000_000;
const HOLD: NonZeroU64 = NonZeroU64::new(10_000).expect("non-zero");
const HOLD32: NonZeroU32 = NonZeroU32::new(10_000).expect("non-zero");

fn keyed(c: &mut Criterion) {
    for keys in [1u64, 10_000, 1_000_000] {
        let mut group = c.benchmark_group(format!("keyed_{keys}"));
        let gcra = Gcra::new(Rate::per_second(1).expect("rate"), u64::from(BURST)).expect("gcra");
        let quota =
            Quota::per_second(NonZeroU32::MIN).allow_burst(NonZeroU32::new(BURST).expect("burst"));

        let ours = KeyedLimiter::<u64, Gcra>::new(gcra);
        let governor = RateLimiter::<u64, _, _>::dashmap(quota);
        let governor_instant =
            RateLimiter::<u64, _, MonotonicClock, _>::dashmap_with_clock(quota, MonotonicClock);
        // Each key starts HOLD seconds short of full, so none goes fresh (and is dropped)
        // while the others are being inserted or measured.
        for key in 0..keys {
            let allowed = ours.check_n(&key, HOLD).map(|d| d.allowed());
            assert_eq!(allowed.ok(), Some(true));
            assert!(matches!(governor.check_key_n(&key, HOLD32), Ok(Ok(()))));
            assert!(matches!(
                governor_instant.check_key_n(&key, HOLD32),
                Ok(Ok(()))
            ));
        }
        assert_eq!(ours.len() as u64, keys);

        let mut key = 0u64;
        let mut next = move || {
            key += 1;
            if key == keys {
                key = 0;
            }
            key
        };
        group.bench_function("gcra", |b| {
            b.iter(|| black_box(&ours).check(&black_box(next())))
        });
        group.bench_function("governor", |b| {
            b.iter(|| black_box(&governor).check_key(&black_box(next())))
        });
        group.bench_function("governor_instant", |b| {
            b.iter(|| black_box(&governor_instant).check_key(&black_box(next())))
        });
        group.finish();
        assert_eq!(ours.len() as u64, keys, "no key went fresh or was dropped");
    }
}

criterion_group!(benches, keyed);
criterion_main!(benches);
