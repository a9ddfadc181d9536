use proptest::prelude::*;

use crate::adaptive::spec::kinds::KINDS;
use crate::adaptive::spec::{AnyController, ControllerSpec, PARAMETERS};
use crate::adaptive::{Controller, Sample};
use crate::clock::Micros;
use crate::error::ConfigError;

type TestResult = Result<(), ConfigError>;

fn spec(text: &str) -> Result<ControllerSpec, ConfigError> {
    text.parse()
}

/// A sample that found the limit full, at `rtt`.
fn busy(rtt: Micros, in_flight: u32) -> Sample {
    Sample::ok(0, rtt, in_flight)
}

#[test]
fn builds_each_controller_with_its_bounds() -> TestResult {
    for (text, initial) in [
        ("aimd", 20),
        ("aimd:min=2,initial=5,max=9,backoff=0.5,timeout=2s", 5),
        ("vegas:initial=7,alpha=2,beta=4,probe=10,smoothing=0.5", 7),
        (
            "gradient2:min=1,initial=3,tolerance=2,long_window=100,headroom=2",
            3,
        ),
        (
            "envoy-gradient:min=2,initial=4,pinned=2,update=50ms,interval=30s",
            4,
        ),
        ("percentile", 10),
        ("percentile:multiple=3,initial=6", 6),
        ("gradient2:short_window=5,backoff=0.8", 20),
        ("percentile:target=50ms,p=0.9,initial=8,window=500ms", 8),
        ("vegas:window=100ms,initial=4", 4),
        ("fixed:limit=13", 13),
    ] {
        let controller = spec(text)?.build(9)?;
        // Envoy's controller measures its first minimum RTT at the initial limit.
        assert_eq!(controller.limit(), initial, "{text}");
        assert_eq!(spec(text)?.to_string(), text);
    }
    let none = spec("none")?;
    assert!(none.is_unlimited());
    assert!(matches!(none.build(0)?, AnyController::Unlimited));
    assert_eq!(none.build(0)?.bounds(), None);
    Ok(())
}

#[test]
fn names_and_keys_are_read_loosely_and_written_canonically() -> TestResult {
    let read = spec(" Envoy_Gradient : Min = 2 , pinned=2,")?;
    assert_eq!(read.controller(), "envoy-gradient");
    assert_eq!(read.to_string(), "envoy-gradient:min=2,pinned=2");
    assert_eq!(spec(&read.to_string())?, read);
    assert_eq!(
        spec("gradient2:long-window=50")?.get("long_window"),
        Some("50")
    );
    Ok(())
}

#[test]
fn the_parameters_reach_the_controller() -> TestResult {
    // backoff=0.5 halves AIMD's limit on a timeout, where the default 0.9 would not.
    let mut aimd = spec("aimd:min=1,initial=10,backoff=0.5")?.build(0)?;
    assert_eq!(aimd.on_sample(0, Sample::timeout(0, 1_000, 10)), 5);
    // A fixed limit ignores every sample.
    let mut fixed = spec("fixed:limit=4")?.build(0)?;
    assert_eq!(fixed.on_sample(0, Sample::timeout(0, 1, 4)), 4);
    assert_eq!(fixed.bounds().map(|b| b.min()), Some(4));
    Ok(())
}

#[test]
fn a_window_feeds_one_sample_per_window() -> TestResult {
    // Per sample, AIMD grows by one for each busy answer; windowed, once per window.
    let mut plain = spec("aimd:min=1,initial=10")?.build(0)?;
    let mut windowed = spec("aimd:min=1,initial=10,window=1s")?.build(0)?;
    assert!(matches!(windowed, AnyController::Windowed(_)));
    for t in 1..=20 {
        plain.on_sample(t * 10_000, busy(5_000, 100));
        windowed.on_sample(t * 10_000, busy(5_000, 100));
    }
    assert_eq!(plain.limit(), 30);
    // The first window, opened by the first sample, is still open.
    assert_eq!(windowed.limit(), 10);
    assert_eq!(windowed.bounds().map(|b| b.min()), Some(1));
    // The percentile controller's `window` is its own, not a wrapper.
    assert!(matches!(
        spec("percentile:window=2s")?.build(0)?,
        AnyController::Percentile(_)
    ));
    Ok(())
}

#[test]
fn parameters_can_be_added_as_pairs() -> TestResult {
    let base = spec("gradient2:window=1s")?;
    let full = base.with_params([("min", "2"), ("tolerance", "2")])?;
    assert_eq!(full.to_string(), "gradient2:window=1s,min=2,tolerance=2");
    assert_eq!(
        ControllerSpec::new(
            "gradient2",
            [("window", "1s"), ("min", "2"), ("tolerance", "2")]
        )?,
        full
    );
    let err = base
        .with_params([("window", "2s")])
        .expect_err("window twice");
    assert_eq!(
        err.to_string(),
        "gradient2: parameter `window` is given twice"
    );
    Ok(())
}

#[test]
fn default_bounds_fill_only_what_a_spec_leaves_out() -> TestResult {
    let filled = spec("aimd:max=50")?.with_default_bounds(Some(2), None, Some(900))?;
    assert_eq!(filled.to_string(), "aimd:max=50,min=2");
    let fixed = spec("fixed:limit=3")?;
    assert_eq!(fixed.with_default_bounds(Some(1), Some(1), Some(9))?, fixed);
    // The filled bounds are checked with the rest.
    assert!(
        spec("aimd:max=50")?
            .with_default_bounds(Some(60), None, None)
            .is_err()
    );
    Ok(())
}

#[test]
fn errors_use_the_spec_words() {
    for (text, expected) in [
        (
            "tcp",
            "unknown controller `tcp` (known: aimd, vegas, gradient2, envoy-gradient, \
             percentile, fixed, none)",
        ),
        ("aimd:min=5,max=4", "aimd: min (5) must not exceed max (4)"),
        (
            "aimd:max=10",
            "aimd: default initial (20) must not exceed max (10)",
        ),
        (
            "percentile:target=1s,multiple=2",
            "percentile: invalid multiple `2`: give a fixed `target` or a relative \
             `multiple`, not both",
        ),
        (
            "percentile:multiple=1",
            "percentile: invalid multiple `1`: must be more than 1",
        ),
        (
            // It once slowed an average the controller no longer reads.
            "gradient2:long_rise=2",
            "unknown parameter `long_rise` for gradient2 (it takes: smoothing, tolerance, \
             long_window, short_window, headroom, backoff, window, min, max, initial)",
        ),
        (
            "aimd:backoff=1",
            "aimd: invalid backoff `1`: must be in [0.5, 1)",
        ),
        (
            "aimd:timeout=0s",
            "aimd: invalid timeout `0s`: must be positive",
        ),
        (
            "aimd:min=0",
            "aimd: invalid min `0`: expected a whole number from 1 to 4294967295",
        ),
        (
            "aimd:min",
            "aimd: cannot read parameter `min`: expected min=VALUE",
        ),
        ("aimd:min=1,min=2", "aimd: parameter `min` is given twice"),
        ("vegas:smoothing=nan", "vegas: invalid smoothing `nan`"),
        (
            "vegas:alpha=7",
            "vegas: alpha (7) must not exceed default beta (6)",
        ),
        (
            "gradient2:window=0s",
            "gradient2: invalid window `0s`: must be positive",
        ),
        (
            "envoy-gradient:jitter=2",
            "envoy-gradient: invalid jitter `2`",
        ),
        (
            "envoy-gradient:min=5,initial=5,pinned=2",
            "envoy-gradient: min (5) must not exceed pinned (2)",
        ),
        (
            "envoy-gradient:window=1s",
            "unknown parameter `window` for envoy-gradient (it takes: pinned,",
        ),
        ("percentile:target=0ms", "percentile: invalid target `0ms`"),
        ("percentile:target=1s,p=0", "percentile: invalid p `0`"),
        (
            "fixed:limit=1,min=1",
            "unknown parameter `min` for fixed (it takes: limit)",
        ),
        ("fixed", "missing parameter `limit` for fixed"),
        (
            "none:limit=1",
            "unknown parameter `limit` for none (it takes: nothing)",
        ),
    ] {
        match spec(text) {
            Ok(read) => panic!("{text} read as {read}"),
            Err(err) => assert!(err.to_string().starts_with(expected), "{text}: {err}"),
        }
    }
}

#[test]
fn parameters_lists_every_key_of_every_controller() {
    let mut keys: Vec<&str> = KINDS
        .iter()
        .flat_map(|k| k.params().map(|p| p.key))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut listed = PARAMETERS.to_vec();
    listed.sort_unstable();
    assert_eq!(keys, listed);
    for kind in KINDS {
        let expected: Vec<&str> = kind.params().map(|p| p.key).collect();
        let expected = if expected.is_empty() {
            "nothing".to_owned()
        } else {
            expected.join(", ")
        };
        assert_eq!(kind.expected, expected, "{}", kind.name);
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,64}") {
        let _ = text.parse::<ControllerSpec>();
    }

    #[test]
    fn spec_shaped_text_reads_back_and_builds(
        name in prop::sample::select(vec![
            "aimd", "vegas", "gradient2", "envoy-gradient", "percentile", "fixed", "none", "x",
        ]),
        items in prop::collection::vec(
            (
                prop::sample::select(PARAMETERS.iter().copied().chain(["?"]).collect::<Vec<_>>()),
                "[0-9.a-z]{0,6}|[0-9]{1,4}(\\.[0-9])?(ms|s)?",
            ),
            0..5,
        ),
        seed in any::<u64>(),
    ) {
        let params: Vec<String> = items.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let text = format!("{name}:{}", params.join(","));
        if let Ok(read) = text.parse::<ControllerSpec>() {
            prop_assert_eq!(read.to_string().parse::<ControllerSpec>(), Ok(read.clone()));
            let controller = read.build(seed);
            prop_assert!(controller.is_ok(), "{} did not build: {:?}", text, controller);
        }
    }
}
