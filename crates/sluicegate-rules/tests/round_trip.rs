//! A limit means the same in a spec string and in a rule file: every algorithm name and every
//! parameter goes spec string -> limit -> rule-file form -> limit and comes back identical,
//! for hand-written cases (names in any case, aliases, flags) and for generated limits.

mod common;

use std::time::Duration;

use common::rules;
use proptest::prelude::*;
use sluicegate::AnyAlgorithm;
use sluicegate::spec::AlgorithmSpec;
use sluicegate_rules::{Limit, Window};

/// The rule file holding `limit` alone, as [`Limit::to_rule_yaml`] writes it.
fn rule_file(limit: &Limit) -> String {
    let body: String = limit
        .to_rule_yaml()
        .lines()
        .map(|line| format!("      {line}\n"))
        .collect();
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n{body}")
}

/// spec -> limit -> rule-file form -> limit; both limits, or the rule file's error.
fn through_a_rule_file(spec: &str) -> Result<(AnyAlgorithm, Limit, Limit), String> {
    let algorithm: AnyAlgorithm = spec.parse().map_err(|e| format!("{spec}: {e}"))?;
    // The text form reads back as the same limit.
    let again: AnyAlgorithm = algorithm.to_string().parse().map_err(|e| format!("{e}"))?;
    assert_eq!(again, algorithm, "{spec} -> {algorithm}");
    let spec = algorithm.to_spec();
    let quota = spec.to_quota().map_err(|e| e.to_string())?;
    let limit = Limit {
        requests_per_unit: u32::try_from(quota.permits).map_err(|e| e.to_string())?,
        window: Window::Period(quota.period),
        algorithm: Some(algorithm.clone()),
        algorithm_name: sluicegate::Algorithm::name(&algorithm),
        name: None,
        replaces: Vec::new(),
    };
    let yaml = rule_file(&limit);
    let set = rules(&yaml).map_err(|e| format!("{yaml}\n{e}"))?;
    let found = set.find("d", &[("k", "v")]).ok_or("no match")?;
    Ok((algorithm, limit, found.limits[0].clone()))
}

#[test]
fn every_algorithm_and_parameter_round_trips() -> Result<(), String> {
    let cases = [
        "token-bucket:rate=10/s",
        "Token-Bucket:rate=10/s,capacity=20,initial=5",
        "gcra:rate=100/1m,burst=20",
        "GCRA:rate=0.5/s,burst=1,initial=0",
        "fixed-window:limit=100,window=60s",
        "sliding-log:limit=7,window=1.5s",
        "sliding-window:limit=100,window=60s,buckets=6",
        "sliding_window:limit=100,window=1h",
        "leaky-bucket:rate=10/s,capacity=5",
        "leaky-bucket:rate=10/s,burst=5",
        "leaky-bucket:rate=3/s",
        "leaky-queue:rate=10/s,burst=5,delay=2",
        "leaky-queue:rate=10/s,burst=5,nodelay",
        "leaky-queue:rate=10/s,burst=5",
        "LEAKY_QUEUE:rate=10/s",
        "smooth-bursty:rate=5",
        "smooth-bursty:rate=0.5,burst_seconds=2.5",
        "smooth-bursty:rate=300/1m,max_burst_seconds=0",
        "smooth-warmup:rate=2,warmup=4s,cold_factor=3",
        "smooth-warmup:rate=2.5,warmup=250ms",
    ];
    for spec in cases {
        let (algorithm, written, read) = through_a_rule_file(spec)?;
        assert_eq!(read, written, "{spec}");
        assert_eq!(read.algorithm.as_ref(), Some(&algorithm), "{spec}");
    }
    Ok(())
}

#[test]
fn names_and_parameters_read_alike_in_any_case() -> Result<(), Box<dyn std::error::Error>> {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: Leaky_Queue, burst: 5, nodelay: true}\n",
    )?;
    let found = set.find("d", &[("k", "v")]).ok_or("no match")?;
    let expected: AnyAlgorithm = "leaky-queue:rate=10/s,burst=5,nodelay".parse()?;
    assert_eq!(found.limits[0].algorithm, Some(expected));
    Ok(())
}

#[test]
fn concurrency_has_a_rule_file_form_that_the_rule_file_refuses() -> Result<(), String> {
    let errors = match through_a_rule_file("concurrency:limit=3") {
        Ok(_) => return Err("a concurrency limit in a rule file must be refused".into()),
        Err(errors) => errors,
    };
    assert!(
        errors.contains("concurrency limits need a release"),
        "{errors}"
    );
    Ok(())
}

/// A decimal such as `2.5`, from a mantissa and a number of decimals.
fn decimal(mantissa: u64, scale: u32) -> String {
    let text = mantissa.to_string();
    if scale == 0 {
        return text;
    }
    let padded = format!("{text:0>width$}", width = scale as usize + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale as usize);
    format!("{whole}.{fraction}")
}

fn rate() -> impl Strategy<Value = String> {
    (1u64..2000, period()).prop_map(|(n, p)| format!("{n}/{p}"))
}

fn period() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["s", "1s", "30s", "1m", "250ms", "1h", "1.5s", "2d"])
}

/// Spec strings of every algorithm, with every optional parameter given or not.
fn spec() -> impl Strategy<Value = String> {
    let window = (1u64..100_000, period())
        .prop_map(|(n, p)| format!("limit={n},window={}", if p == "s" { "1s" } else { p }));
    let bucket = (
        prop::sample::select(vec!["token-bucket", "gcra"]),
        rate(),
        prop::option::of((1u64..1000, 0u64..1000)),
    )
        .prop_map(|(name, rate, burst)| match burst {
            None => format!("{name}:rate={rate}"),
            Some((burst, initial)) => {
                format!(
                    "{name}:rate={rate},burst={burst},initial={}",
                    initial % (burst + 1)
                )
            }
        });
    let windows = (
        prop::sample::select(vec!["fixed-window", "sliding-log", "sliding-window"]),
        window,
        prop::option::of(1u64..100),
    )
        .prop_map(|(name, window, buckets)| match (name, buckets) {
            ("sliding-window", Some(k)) => format!("{name}:{window},buckets={k}"),
            _ => format!("{name}:{window}"),
        });
    let leaky_bucket = (rate(), prop::option::of(1u64..1000)).prop_map(|(rate, c)| match c {
        None => format!("leaky-bucket:rate={rate}"),
        Some(c) => format!("leaky-bucket:rate={rate},capacity={c}"),
    });
    let leaky_queue = (rate(), 0u64..50, 0u8..3, 0u64..50).prop_map(|(rate, burst, how, d)| {
        let delay = match how {
            0 => String::new(),
            1 => ",nodelay".to_owned(),
            _ => format!(",delay={}", d % (burst + 1)),
        };
        format!("leaky-queue:rate={rate},burst={burst}{delay}")
    });
    let smooth_rate = (1u64..100_000, 0u32..4).prop_map(|(m, s)| decimal(m, s));
    let bursty =
        (smooth_rate.clone(), prop::option::of((0u64..1000, 0u32..3))).prop_map(|(rate, burst)| {
            match burst {
                None => format!("smooth-bursty:rate={rate}"),
                Some((m, s)) => {
                    format!("smooth-bursty:rate={rate},burst_seconds={}", decimal(m, s))
                }
            }
        });
    let warmup = (
        smooth_rate,
        period(),
        1u64..60,
        prop::option::of((100u64..1000, 0u32..3)),
    )
        .prop_map(|(rate, unit, n, cold)| {
            let unit = unit.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
            let cold = cold.map_or(String::new(), |(m, s)| {
                format!(",cold_factor={}", decimal(m.max(10u64.pow(s)), s))
            });
            format!("smooth-warmup:rate={rate},warmup={n}{unit}{cold}")
        });
    prop_oneof![bucket, windows, leaky_bucket, leaky_queue, bursty, warmup]
}

proptest! {
    #[test]
    fn generated_limits_round_trip(spec in spec()) {
        // Every generated spec is valid; one that were not would fail here, by name.
        let (algorithm, written, read) = through_a_rule_file(&spec)
            .map_err(TestCaseError::fail)?;
        prop_assert_eq!(&read, &written, "{}", spec);
        prop_assert_eq!(read.algorithm.as_ref(), Some(&algorithm), "{}", spec);
        // And the spec the rule file's limit writes is the one the spec string's wrote.
        let from_rule = read.algorithm.as_ref().map(AnyAlgorithm::to_spec);
        prop_assert_eq!(from_rule, Some(algorithm.to_spec()));
    }
}

#[test]
fn a_parameter_the_quota_gives_is_refused_by_name() {
    let error = AlgorithmSpec::from_quota("gcra", 10, Duration::from_secs(1), [("rate", "5/s")])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("rate"), "{error}");
}
