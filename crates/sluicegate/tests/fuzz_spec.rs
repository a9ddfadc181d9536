//! Fuzzing the `ALGORITHM:key=value,...` spec parser (`simulate --limiter`, rule files'
//! algorithms) with arbitrary text and with specs made from its grammar: never a panic, never
//! a hang; an error names what is wrong; a spec that parses prints back to itself; an
//! algorithm that builds answers decisions (and `set_rate`) without panicking.
//!
//! `PROPTEST_CASES` sets the number of inputs per target (256 by default; `scripts/fuzz.sh`
//! runs millions in release mode).

#[path = "fuzz_harness/mod.rs"]
mod fuzz_harness;

use std::num::NonZeroU64;

use fuzz_harness::{accepted, check, fuzz};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::rate::parse_duration;
use sluicegate::spec::AlgorithmSpec;
use sluicegate::state_machine::Op;
use sluicegate::{Algorithm, AnyAlgorithm, ConfigError, KeyedLimiter, ManualClock, Rate};

/// Every algorithm name, in some of the spellings the parser accepts, and a few it does not.
const NAMES: &[&str] = &[
    "token-bucket",
    "gcra",
    "fixed-window",
    "sliding-log",
    "sliding-window",
    "leaky-bucket",
    "leaky-queue",
    "smooth-bursty",
    "smooth-warmup",
    "concurrency",
    "Token_Bucket",
    " GCRA ",
    "leaky_queue",
    "",
    "x",
    "token--bucket",
];

/// Every parameter name of every algorithm, with aliases, other spellings and strangers.
const PARAMS: &[&str] = &[
    "rate",
    "burst",
    "initial",
    "limit",
    "capacity",
    "window",
    "buckets",
    "delay",
    "nodelay",
    "burst_seconds",
    "max_burst_seconds",
    "burst-seconds",
    "warmup",
    "cold_factor",
    " RATE ",
    "",
    "?",
    "rate=",
];

/// A value from the grammar of counts, decimals, rates and durations, valid or nearly so.
fn value() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        Just("0".to_owned()),
        Just("1".to_owned()),
        (0u64..2000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("99999999999999999999999".to_owned()),
        "[0-9]{0,6}\\.[0-9]{0,14}",
        Just(".".to_owned()),
        Just("-1".to_owned()),
        Just("1e3".to_owned()),
        Just("0x10".to_owned()),
        Just("NaN".to_owned()),
        Just("inf".to_owned()),
    ];
    let unit = prop::sample::select(vec![
        "",
        "s",
        "ms",
        "us",
        "µs",
        "m",
        "h",
        "d",
        "w",
        "1m",
        "30s",
        "0.5s",
        "0s",
        "1us",
        "sec",
        "Minutes",
        "fortnight",
        "1.5",
        "0",
        "99999999999999d",
    ]);
    prop_oneof![
        4 => number.clone(),
        4 => (number.clone(), unit.clone()).prop_map(|(n, u)| format!("{n}/{u}")),
        3 => (number, unit).prop_map(|(n, u)| format!("{n}{u}")),
        1 => Just("true".to_owned()),
        1 => Just("false".to_owned()),
        1 => Just(String::new()),
        1 => "\\PC{0,8}",
    ]
}

/// A spec from the grammar: a name, then items `key=value`, a flag alone, or odd separators.
fn spec_text() -> impl Strategy<Value = String> {
    let item = prop_oneof![
        8 => (prop::sample::select(PARAMS), value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => prop::sample::select(PARAMS).prop_map(str::to_owned),
        1 => Just(String::new()),
        1 => (prop::sample::select(PARAMS), value(), value())
            .prop_map(|(k, v, w)| format!("{k}={v}={w}")),
    ];
    (
        prop::sample::select(NAMES),
        prop::collection::vec(item, 0..6),
        prop::sample::select(vec![":", ": ", "", "::"]),
    )
        .prop_map(|(name, items, colon)| {
            if items.is_empty() && colon.is_empty() {
                name.to_owned()
            } else {
                format!("{name}{colon}{}", items.join(","))
            }
        })
}

/// A spec of the right shape for its algorithm: its required parameters and some optional
/// ones, with values of the right kind (edges included), so that most build and run.
fn shaped_spec() -> impl Strategy<Value = String> {
    let pick = |values: &[&'static str]| prop::sample::select(values.to_vec());
    let rate = pick(&[
        "10/s",
        "1/s",
        "0.5/s",
        "100/1m",
        "3/1w",
        "1000000/s",
        "1024/1us",
        "7/30s",
        "1.5/s",
    ]);
    let count = pick(&["1", "2", "5", "100", "18446744073709551615", "0"]);
    let window = pick(&["1s", "60s", "1us", "1.5s", "7d", "250ms"]);
    let number = pick(&["1", "2.5", "0.5", "0.000001", "1000000", "3"]);
    let optional = |name: &'static str, values: BoxedStrategy<&'static str>| {
        prop::option::of(values)
            .prop_map(move |v| v.map(|v| format!(",{name}={v}")).unwrap_or_default())
    };
    let bucket = (
        pick(&["token-bucket", "gcra"]),
        rate.clone(),
        optional("burst", count.clone().boxed()),
        optional("initial", count.clone().boxed()),
    )
        .prop_map(|(name, rate, burst, initial)| format!("{name}:rate={rate}{burst}{initial}"));
    let windowed = (
        pick(&["fixed-window", "sliding-log", "sliding-window"]),
        count.clone(),
        window,
        optional("buckets", pick(&["1", "4", "60", "4294967296"]).boxed()),
    )
        .prop_map(|(name, limit, window, buckets)| {
            let buckets = if name == "sliding-window" {
                buckets
            } else {
                String::new()
            };
            format!("{name}:limit={limit},window={window}{buckets}")
        });
    let leaky = (rate.clone(), count.clone())
        .prop_map(|(r, c)| format!("leaky-bucket:rate={r},capacity={c}"));
    let queue = (
        rate.clone(),
        optional("burst", count.clone().boxed()),
        prop_oneof![
            Just(String::new()),
            Just(",nodelay".to_owned()),
            count.clone().prop_map(|d| format!(",delay={d}"))
        ],
    )
        .prop_map(|(r, burst, delay)| format!("leaky-queue:rate={r}{burst}{delay}"));
    let smooth = (
        prop_oneof![number.clone(), rate.clone()],
        optional("burst_seconds", number.clone().boxed()),
    )
        .prop_map(|(r, b)| format!("smooth-bursty:rate={r}{b}"));
    let warm = (
        number.clone(),
        pick(&["4s", "1us", "1h"]),
        optional("cold_factor", number.boxed()),
    )
        .prop_map(|(r, w, c)| format!("smooth-warmup:rate={r},warmup={w}{c}"));
    let concurrency = count.prop_map(|c| format!("concurrency:limit={c}"));
    prop_oneof![bucket, windowed, leaky, queue, smooth, warm, concurrency]
}

/// What a built algorithm is asked after it parses: (time step in µs, permits, op) triples.
fn uses() -> impl Strategy<Value = Vec<(u64, u64, u8)>> {
    let step = prop_oneof![
        3 => 0u64..2_000_000,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ];
    let permits = prop_oneof![
        4 => 1u64..4,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ];
    prop::collection::vec((step, permits, 0u8..7), 0..8)
}

/// The part of `input` an error is about appears in it, and the message is not empty.
fn names_what_is_wrong(err: &ConfigError, input: &str) -> Result<(), TestCaseError> {
    let message = err.to_string();
    check(!message.trim().is_empty(), || {
        format!("empty error for {input:?}")
    })?;
    let named = match err {
        ConfigError::UnknownAlgorithm { name, .. } => input.contains(name.as_str()),
        ConfigError::UnknownParameter { name, .. } => input.contains(name.as_str()),
        ConfigError::Syntax { text, .. } => input.contains(text.trim()),
        ConfigError::MissingParameter { name, .. } => message.contains(name),
        ConfigError::InvalidParameter { name, .. } => message.contains(name) && !name.is_empty(),
        _ => true,
    };
    check(named, || {
        format!("error {message:?} does not name what is wrong in {input:?}")
    })
}

/// Everything a spec text can go through: parse, print back, build, decide, set_rate.
fn exercise(text: &str, uses: &[(u64, u64, u8)], new_rate: &str) -> Result<(), TestCaseError> {
    let spec = match text.parse::<AlgorithmSpec>() {
        Ok(spec) => spec,
        Err(err) => return names_what_is_wrong(&err, text),
    };
    let printed = spec.to_string();
    let again = printed.parse::<AlgorithmSpec>();
    check(again.as_ref() == Ok(&spec), || {
        format!("{text:?} prints as {printed:?}, which reads back as {again:?}")
    })?;
    let algorithm = match spec.build() {
        Ok(algorithm) => algorithm,
        Err(err) => return names_what_is_wrong(&err, text),
    };
    check(algorithm.limit() > 0, || {
        format!("{text:?} built with limit 0")
    })?;
    check(algorithm.capacity() >= 1, || {
        format!("{text:?} built with capacity 0")
    })?;
    // The same spec through `AnyAlgorithm`'s own parser builds the same algorithm.
    let direct = text.parse::<AnyAlgorithm>();
    check(direct.as_ref() == Ok(&algorithm), || {
        format!("{text:?}: AnyAlgorithm::from_str gives {direct:?}")
    })?;
    accepted();
    decide_all(&algorithm, uses)?;
    match algorithm.with_rate(new_rate) {
        Ok(changed) => {
            check(changed.name() == algorithm.name(), || {
                format!(
                    "set_rate {new_rate:?} changed {text:?} into {}",
                    changed.name()
                )
            })?;
            decide_all(&changed, uses)?;
        }
        Err(err) => {
            check(!err.to_string().trim().is_empty(), || {
                format!("set_rate {new_rate:?} on {text:?}: empty error")
            })?;
        }
    }
    Ok(())
}

/// Runs the uses through a limiter on a manual clock: decisions or errors, never a panic.
fn decide_all(algorithm: &AnyAlgorithm, uses: &[(u64, u64, u8)]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(0);
    let limiter = KeyedLimiter::with_clock(algorithm.clone(), clock.clone());
    for &(step, permits, op) in uses {
        clock.advance_micros(step);
        let permits = NonZeroU64::new(permits).unwrap_or(NonZeroU64::MIN);
        let op = match op {
            0 => Op::Check,
            1 => Op::Peek,
            2 => Op::Charge,
            3 => Op::Reserve { max_wait: None },
            4 => Op::Reserve {
                max_wait: Some(step),
            },
            5 => Op::Release,
            _ => Op::Check,
        };
        match limiter.decide(&"k", permits, op) {
            Ok(decision) => {
                check(decision.limit() == algorithm.limit(), || {
                    format!(
                        "{algorithm:?}: decision limit {} is not the algorithm's {}",
                        decision.limit(),
                        algorithm.limit()
                    )
                })?;
                check(
                    !decision.allowed() || decision.retry_after().is_none(),
                    || format!("{algorithm:?}: allowed with a retry_after: {decision:?}"),
                )?;
            }
            Err(err) => check(!err.to_string().trim().is_empty(), || {
                format!("{algorithm:?} {op:?}: empty error")
            })?,
        }
    }
    Ok(())
}

#[test]
fn fuzz_spec_arbitrary_text() {
    let text = prop_oneof![
        "\\PC{0,48}",
        "[a-z_:=,./0-9 -]{0,48}",
        any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ];
    fuzz(
        "spec_arbitrary_text",
        (text, uses(), value()),
        |(text, uses, new_rate)| exercise(&text, &uses, &new_rate),
    );
}

#[test]
fn fuzz_spec_from_the_grammar() {
    fuzz(
        "spec_from_the_grammar",
        (prop_oneof![spec_text(), shaped_spec()], uses(), value()),
        |(text, uses, new_rate)| exercise(&text, &uses, &new_rate),
    );
}

#[test]
fn fuzz_rates_and_durations() {
    fuzz(
        "rates_and_durations",
        prop_oneof![value(), "\\PC{0,24}"],
        |text| {
            match text.parse::<Rate>() {
                Ok(rate) => {
                    accepted();
                    let printed = rate.to_string();
                    let again = printed.parse::<Rate>();
                    check(again.as_ref() == Ok(&rate), || {
                        format!("rate {text:?} prints as {printed:?}, read back as {again:?}")
                    })?;
                }
                Err(err) => names_what_is_wrong(&err, &text)?,
            }
            match parse_duration(&text) {
                Ok(_) => Ok(()),
                Err(err) => names_what_is_wrong(&err, &text),
            }
        },
    );
}

// Inputs the fuzzer found, kept as regular tests.

/// `rate=` parsed (an empty value) and printed as the flag `rate`, which does not read back;
/// an empty value is now the same error as a missing one.
#[test]
fn regression_an_empty_value_is_missing() {
    for text in [
        "token-bucket:rate=",
        "fixed-window:limit=,window=1s",
        "gcra:rate=1/s,burst= ",
    ] {
        let err = text.parse::<AlgorithmSpec>().expect_err(text);
        assert!(
            matches!(&err, ConfigError::InvalidParameter { reason, .. } if reason.contains("=VALUE")),
            "{text}: {err:?}"
        );
    }
    // A flag still takes an empty value.
    let spec: AlgorithmSpec = "leaky-queue:rate=1/s,nodelay=".parse().expect("a flag");
    assert_eq!(spec.to_string(), "leaky-queue:rate=1/s,nodelay");
}
