//! Properties of the adaptive controllers on arbitrary samples: whatever the latencies (zero,
//! huge), in-flight counts, outcomes and times (backwards included), the limit each returns is
//! the one it reports and stays within its bounds, and nothing overflows (these tests run with
//! overflow checks).

use std::time::Duration;

use proptest::prelude::*;
use sluicegate::Micros;
use sluicegate::adaptive::{
    Aimd, Controller, EnvoyGradient, Gradient2, LimitBounds, Outcome, Percentile, QueueHeadroom,
    Sample, Vegas, WindowAggregate, Windowed,
};

/// A step: the time (either an absolute value, so it can go back, or a gap after the previous
/// step) and the sample.
#[derive(Debug, Clone, Copy)]
struct Step {
    time: Time,
    sample: Sample,
}

#[derive(Debug, Clone, Copy)]
enum Time {
    At(Micros),
    After(Micros),
}

/// A time or latency from a selector and a raw value: often an edge (0, 1, the largest
/// values), else small, medium or any. Plain integers rather than nested `prop_oneof!`s keep
/// generating hundreds of steps cheap.
fn micros(selector: u8, raw: u64) -> Micros {
    match selector % 8 {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::MAX - 1,
        4 => raw % 100,
        5 => raw % 100_000,
        6 => raw % 10_000_000,
        _ => raw,
    }
}

fn step() -> impl Strategy<Value = Step> {
    (any::<[u8; 5]>(), any::<[u64; 4]>()).prop_map(|(s, r)| {
        let time = match s[0] % 5 {
            0..=2 => Time::After(r[0] % 200_000),
            3 => Time::After(micros(s[1], r[0])),
            _ => Time::At(micros(s[1], r[0])),
        };
        let outcome = match s[2] % 6 {
            0 => Outcome::Dropped,
            1 => Outcome::Timeout,
            _ => Outcome::Ok,
        };
        let in_flight = match s[3] % 3 {
            0 => (r[3] % 50) as u32,
            1 => u32::MAX,
            _ => r[3] as u32,
        };
        Step {
            time,
            sample: Sample {
                start: micros(s[4], r[1]),
                rtt: micros(s[4] / 8, r[2]),
                in_flight,
                outcome,
            },
        }
    })
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..300)
}

/// `(min, initial, max)`, ordered.
fn bounds() -> impl Strategy<Value = (u32, u32, u32)> {
    let max = prop_oneof![1..50u32, 1..5_000u32, Just(u32::MAX)];
    max.prop_flat_map(|max| (1..=max, Just(max)))
        .prop_flat_map(|(min, max)| (Just(min), min..=max, Just(max)))
}

/// Runs `steps` through `controller`, checking the bounds after each.
fn check(
    mut controller: Box<dyn Controller>,
    bounds: LimitBounds,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut now: Micros = 0;
    prop_assert!((bounds.min()..=bounds.max()).contains(&controller.limit()));
    for (i, step) in steps.iter().enumerate() {
        now = match step.time {
            Time::At(t) => t,
            Time::After(gap) => now.saturating_add(gap),
        };
        let limit = controller.on_sample(now, step.sample);
        prop_assert_eq!(limit, controller.limit(), "step {}", i);
        prop_assert!(
            (bounds.min()..=bounds.max()).contains(&limit),
            "step {}: {} outside [{}, {}]",
            i,
            limit,
            bounds.min(),
            bounds.max()
        );
    }
    Ok(())
}

fn fraction() -> impl Strategy<Value = f64> {
    prop_oneof![Just(1.0), Just(0.5), 0.01..=1.0f64]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![1..1_000u64, 1..1_000_000u64].prop_map(Duration::from_micros)
}

/// The parameters of one controller: which, its bounds, and raw values each builder reads
/// as it needs (a seed, two fractions, two durations).
#[derive(Debug, Clone)]
struct Params {
    kind: u8,
    bounds: (u32, u32, u32),
    seed: u64,
    f1: f64,
    f2: f64,
    d1: Duration,
    d2: Duration,
}

fn params() -> impl Strategy<Value = Params> {
    (
        bounds(),
        0..5u8,
        any::<u64>(),
        fraction(),
        fraction(),
        duration(),
        duration(),
    )
        .prop_map(|(bounds, kind, seed, f1, f2, d1, d2)| Params {
            kind,
            bounds,
            seed,
            f1,
            f2,
            d1,
            d2,
        })
}

/// The controller `p` describes, and its bounds; `None` if the builder refuses them (it
/// should not: the strategies keep to valid ranges).
fn build(p: &Params) -> Option<(Box<dyn Controller>, LimitBounds)> {
    let (min, initial, max) = p.bounds;
    let (seed, f1, f2, d1, d2) = (p.seed, p.f1, p.f2, p.d1, p.d2);
    let bounds = LimitBounds::new(min, initial, max).ok()?;
    let controller: Box<dyn Controller> = match p.kind {
        0 => Box::new(
            Aimd::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .backoff_ratio(0.5 + f1 * 0.49)
                .timeout(d1)
                .build()
                .ok()?,
        ),
        1 => Box::new(
            Vegas::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .smoothing(f1)
                .probe_multiplier((seed % 40) as u32 + 1)
                .seed(seed)
                .build()
                .ok()?,
        ),
        2 => Box::new(
            Gradient2::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .smoothing(f1)
                .rtt_tolerance(1.0 + f2 * 3.0)
                .long_window((seed % 700) as u32 + 1)
                .queue_headroom(if seed % 2 == 0 {
                    QueueHeadroom::Fixed((seed % 10) as u32)
                } else {
                    QueueHeadroom::SquareRoot {
                        at_least: (seed % 10) as u32,
                    }
                })
                .build()
                .ok()?,
        ),
        3 => Box::new(
            EnvoyGradient::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .pinned_concurrency(min.saturating_add((seed % 3) as u32).min(max))
                .percentile(f1)
                .min_rtt_buffer(f2)
                .jitter(f2)
                .min_rtt_request_count((seed % 20) as u32 + 1)
                .min_rtt_interval(d1)
                .update_interval(d2)
                .reservoir((seed % 50) as usize + 1)
                .seed(seed)
                .build()
                .ok()?,
        ),
        _ => Box::new(
            Percentile::builder(d1)
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .percentile(f1)
                .window(d2)
                .min_samples((seed % 5) as u32 + 1)
                .reservoir((seed % 50) as usize + 1)
                .seed(seed)
                .build()
                .ok()?,
        ),
    };
    Some((controller, bounds))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn limits_stay_within_bounds(params in params(), steps in steps()) {
        let built = build(&params);
        prop_assert!(built.is_some(), "refused: {:?}", params);
        if let Some((controller, bounds)) = built {
            check(controller, bounds, &steps)?;
        }
    }

    #[test]
    fn windowed_limits_stay_within_bounds(
        params in params(),
        steps in steps(),
        min_window in duration(),
        extra in 0..1_000_000u64,
        min_samples in 1..5u32,
        percentile in prop::option::of(fraction()),
        threshold in 0..200u64,
    ) {
        let Some((controller, bounds)) = build(&params) else {
            return Err(TestCaseError::fail(format!("refused: {params:?}")));
        };
        let aggregate = percentile.map_or(WindowAggregate::Average, WindowAggregate::Percentile);
        let windowed = Windowed::builder(controller)
            .min_window(min_window)
            .max_window(min_window + Duration::from_micros(extra))
            .min_samples(min_samples)
            .aggregate(aggregate)
            .min_rtt_threshold(Duration::from_micros(threshold))
            .build();
        prop_assert!(windowed.is_ok());
        if let Ok(windowed) = windowed {
            check(Box::new(windowed), bounds, &steps)?;
        }
    }
}

#[test]
fn defaults_start_at_their_initial_limits() {
    assert_eq!(Aimd::default().limit(), 20);
    assert_eq!(Vegas::default().limit(), 20);
    assert_eq!(Gradient2::default().limit(), 20);
    // Envoy's controller starts pinned for its first minRTT measurement.
    assert_eq!(EnvoyGradient::default().limit(), 3);
}
