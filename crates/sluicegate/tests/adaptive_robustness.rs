//! No controller has a trap it cannot leave: from any state that samples can lead to, sustained
//! fast answers with the limit in use take it to its maximum, and sustained drops (with
//! nothing in flight, so the "application-limited" rule is no excuse) take it to its minimum.
//! And the time origin does not matter: the same samples shifted by any offset give the same
//! limits.

use std::time::Duration;

use proptest::prelude::*;
use sluicegate::Micros;
use sluicegate::adaptive::{
    Aimd, Controller, EnvoyGradient, Gradient2, Outcome, Percentile, QueueHeadroom, Sample, Vegas,
    WindowAggregate, Windowed,
};

/// The latency of a "fast" answer: at or under every latency threshold the builders below
/// are given (AIMD's timeout, a fixed percentile target), above every `min_rtt_threshold`.
const FAST: Micros = 1_000;
/// The largest maximum limit tried: AIMD climbs by one per answer, windowed by one per
/// window, so a higher one only makes the cases slower.
const MAX_LIMIT: u32 = 120;

/// One controller's parameters, drawn at random within their valid ranges.
#[derive(Debug, Clone)]
struct Params {
    kind: u8,
    windowed: Option<(u64, u32, bool)>,
    bounds: (u32, u32, u32),
    seed: u64,
    f1: f64,
    f2: f64,
    /// A duration at or above `FAST` (a timeout or target), and one of any length.
    slow: Duration,
    any: Duration,
}

fn params() -> impl Strategy<Value = Params> {
    let bounds = (1..=MAX_LIMIT)
        .prop_flat_map(|max| (1..=max, Just(max)))
        .prop_flat_map(|(min, max)| (Just(min), min..=max, Just(max)));
    let windowed = prop::option::of((1_000..2_000_000u64, 1..6u32, any::<bool>()));
    (
        0..6u8,
        windowed,
        bounds,
        any::<u64>(),
        0.05..=1.0f64,
        0.05..=1.0f64,
        FAST..2_000_000u64,
        1..1_000_000u64,
    )
        .prop_map(|(kind, windowed, bounds, seed, f1, f2, slow, any)| Params {
            kind,
            windowed,
            bounds,
            seed,
            f1,
            f2,
            slow: Duration::from_micros(slow),
            any: Duration::from_micros(any),
        })
}

fn build(p: &Params) -> Result<Box<dyn Controller>, sluicegate::ConfigError> {
    let (min, initial, max) = p.bounds;
    let (seed, f1, f2) = (p.seed, p.f1, p.f2);
    let inner: Box<dyn Controller> = match p.kind {
        0 => Box::new(
            Aimd::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .backoff_ratio(0.5 + f1 * 0.49)
                .timeout(p.slow)
                .build()?,
        ),
        1 => Box::new(
            Vegas::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .smoothing(f1)
                .probe_multiplier((seed % 40) as u32 + 1)
                .seed(seed)
                .build()?,
        ),
        2 => Box::new(
            Gradient2::builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .smoothing(f1)
                .rtt_tolerance(1.0 + f2 * 3.0)
                .long_window((seed % 700) as u32 + 1)
                .short_window((seed % 30) as u32 + 1)
                .backoff_ratio(0.5 + f2 * 0.49)
                .queue_headroom(if seed % 2 == 0 {
                    QueueHeadroom::Fixed((seed % 10) as u32)
                } else {
                    QueueHeadroom::SquareRoot {
                        at_least: (seed % 10) as u32,
                    }
                })
                .build()?,
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
                .min_rtt_interval(p.any)
                .update_interval(Duration::from_micros(
                    p.any.as_micros() as u64 % 200_000 + 1,
                ))
                .backoff_ratio(0.5 + f1 * 0.49)
                .reservoir((seed % 50) as usize + 1)
                .seed(seed)
                .build()?,
        ),
        4 => Box::new(
            Percentile::builder(p.slow)
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .percentile(f1)
                .window(Duration::from_micros(
                    p.any.as_micros() as u64 % 500_000 + 1,
                ))
                .min_samples((seed % 5) as u32 + 1)
                .reservoir((seed % 50) as usize + 1)
                .seed(seed)
                .build()?,
        ),
        _ => Box::new(
            Percentile::relative_builder()
                .min_limit(min)
                .initial_limit(initial)
                .max_limit(max)
                .target_multiple(1.1 + f2 * 4.0)
                .percentile(f1)
                .window(Duration::from_micros(
                    p.any.as_micros() as u64 % 500_000 + 1,
                ))
                .min_samples((seed % 5) as u32 + 1)
                .seed(seed)
                .build()?,
        ),
    };
    Ok(match p.windowed {
        None => inner,
        Some((window, min_samples, percentile)) => {
            let window = Duration::from_micros(window);
            let aggregate = if percentile {
                WindowAggregate::Percentile(f1)
            } else {
                WindowAggregate::Average
            };
            Box::new(
                Windowed::builder(inner)
                    .min_window(window / 2)
                    .max_window(window)
                    .max_collect(window * 3)
                    .min_samples(min_samples)
                    .aggregate(aggregate)
                    .min_rtt_threshold(Duration::from_micros(FAST / 2))
                    .build()?,
            )
        }
    })
}

/// A prefix of arbitrary samples at times under 2^40 µs (about 12 days), to reach any state.
fn prefix() -> impl Strategy<Value = Vec<(Micros, Sample)>> {
    let step = (
        0..(1u64 << 40),
        0..(1u64 << 40),
        prop_oneof![Just(0u64), Just(1), 0..100_000u64, 0..10_000_000u64],
        0..200u32,
        0..4u8,
    )
        .prop_map(|(now, start, rtt, in_flight, outcome)| {
            let outcome = match outcome {
                0 => Outcome::Dropped,
                1 => Outcome::Timeout,
                _ => Outcome::Ok,
            };
            (
                now,
                Sample {
                    start,
                    rtt,
                    in_flight,
                    outcome,
                },
            )
        });
    prop::collection::vec(step, 0..200)
}

/// Feeds `sample(now, limit)` every `gap` from 2^41 µs on until the limit is `target`, or
/// `steps` samples have gone by; the samples it took.
fn drive(
    controller: &mut dyn Controller,
    target: u32,
    gap: Micros,
    steps: u64,
    sample: impl Fn(Micros, u32) -> Sample,
) -> Option<u64> {
    let mut now: Micros = 1 << 41;
    for step in 0..steps {
        if controller.limit() == target {
            return Some(step);
        }
        now += gap;
        let limit = controller.limit();
        controller.on_sample(now, sample(now, limit));
    }
    (controller.limit() == target).then_some(steps)
}

fn run_prefix(controller: &mut dyn Controller, prefix: &[(Micros, Sample)]) {
    for (now, sample) in prefix {
        controller.on_sample(*now, *sample);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_answers_with_the_limit_in_use_reach_the_maximum(
        params in params(),
        prefix in prefix(),
    ) {
        let mut controller = build(&params).map_err(|e| TestCaseError::fail(e.to_string()))?;
        run_prefix(controller.as_mut(), &prefix);
        let max = params.bounds.2;
        // 10 ms apart, each answered in 1 ms with the whole limit in flight.
        let took = drive(controller.as_mut(), max, 10_000, 400_000, |now, limit| {
            Sample::ok(now - FAST, FAST, limit)
        });
        prop_assert!(took.is_some(), "stuck at {} of {}", controller.limit(), max);
    }

    #[test]
    fn drops_with_nothing_in_flight_reach_the_minimum(
        params in params(),
        prefix in prefix(),
    ) {
        let mut controller = build(&params).map_err(|e| TestCaseError::fail(e.to_string()))?;
        run_prefix(controller.as_mut(), &prefix);
        let min = params.bounds.0;
        // Fast rejections: 1 ms, and the in-flight count says the limit is not in use.
        let took = drive(controller.as_mut(), min, 10_000, 400_000, |now, _| {
            Sample::dropped(now - FAST, FAST, 0)
        });
        prop_assert!(took.is_some(), "stuck at {} above {}", controller.limit(), min);
    }

    #[test]
    fn the_time_origin_does_not_matter(
        params in params(),
        steps in prefix(),
        offset in 0..(1u64 << 50),
    ) {
        let mut a = build(&params).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut b = build(&params).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut steps = steps;
        // Times that only go forward, as on a monotonic clock.
        steps.sort_by_key(|(now, _)| *now);
        for (now, sample) in steps {
            let shifted = Sample { start: sample.start + offset, ..sample };
            prop_assert_eq!(a.on_sample(now, sample), b.on_sample(now + offset, shifted));
        }
    }
}

#[test]
fn a_fast_rejecting_downstream_brings_every_limit_down() -> Result<(), sluicegate::ConfigError> {
    // From a limit of 100, answers 40 at a time, every one rejected in 1 ms: each controller
    // must come down, though the rejections look fast and 40 is under half the limit.
    let controllers: Vec<(&str, Box<dyn Controller>)> = vec![
        (
            "aimd",
            Box::new(Aimd::builder().initial_limit(100).build()?),
        ),
        (
            "vegas",
            Box::new(Vegas::builder().initial_limit(100).build()?),
        ),
        (
            "gradient2",
            Box::new(Gradient2::builder().initial_limit(100).build()?),
        ),
        (
            "envoy",
            Box::new(
                EnvoyGradient::builder()
                    .min_limit(1)
                    .initial_limit(100)
                    .build()?,
            ),
        ),
        (
            "percentile",
            Box::new(Percentile::relative_builder().initial_limit(100).build()?),
        ),
        (
            "windowed gradient2",
            Box::new(Windowed::builder(Gradient2::builder().initial_limit(100).build()?).build()?),
        ),
    ];
    for (name, mut controller) in controllers {
        let mut now: Micros = 5_000_000;
        for _ in 0..20_000 {
            now += 2_000;
            controller.on_sample(now, Sample::dropped(now - 1_000, 1_000, 40));
        }
        assert!(controller.limit() < 40, "{name}: {}", controller.limit());
    }
    Ok(())
}
