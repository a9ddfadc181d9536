//! Fuzzing `simulate`'s inputs through the whole simulation: traces as arbitrary bytes and as
//! CSV lines from their grammar (times, keys quoted or not, permits, every op, faults of each
//! kind, headers and comments), replayed through limiters of every algorithm, the plot drawn;
//! and `--traffic` specs, parsed and generated.
//!
//! Never a panic, never a hang. Every output line is a decision (or a `set_rate`'s new limit)
//! or `{"t":...,"error":"..."}` whose message names the problem; each line of the trace gets
//! one line per limiter, in order, with the event's own time, key, permits and op.
//!
//! `PROPTEST_CASES` sets the number of inputs per target (256 by default; `scripts/fuzz.sh`
//! runs millions in release mode).

use std::io::Cursor;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;
use sluicegate::spec::AlgorithmSpec;
use sluicegate::{Algorithm as _, Micros};

use super::Simulation;
use crate::simulate::args::LimiterArg;
use crate::simulate::fuzz_harness::{accepted, check, fuzz};
use crate::simulate::output::LineWriter;
use crate::simulate::plot::render;
use crate::simulate::trace::TraceLine;
use crate::simulate::traffic::TrafficSpec;

/// Limiters of every algorithm, some at the edges of what their parameters allow.
const SPECS: &[&str] = &[
    "token-bucket:rate=10/s,burst=5",
    "gcra:rate=2/s,burst=3",
    "gcra:rate=1000000000/s,burst=1000000",
    "fixed-window:limit=3,window=1s",
    "fixed-window:limit=18446744073709551615,window=1us",
    "sliding-log:limit=3,window=2s",
    "sliding-window:limit=5,window=1s,buckets=4",
    "sliding-window:limit=5,window=1s",
    "leaky-bucket:rate=5/s,capacity=3",
    "leaky-queue:rate=5/s,burst=3,delay=1",
    "leaky-queue:rate=5/s,burst=3,nodelay",
    "leaky-queue:rate=1/106751d",
    "smooth-bursty:rate=2.5",
    "smooth-bursty:rate=0.000001,burst_seconds=1000000",
    "smooth-warmup:rate=2,warmup=4s",
    "concurrency:limit=2",
    "token-bucket:rate=1024/1us,burst=1",
];

fn limiter(text: &str) -> LimiterArg {
    let spec: AlgorithmSpec = text.parse().expect("a valid spec");
    let algorithm = spec.build().expect("a spec that builds");
    LimiterArg { spec, algorithm }
}

fn limiters() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop::sample::select(SPECS), 1..4)
}

/// Runs a trace through the limiters; the output lines, and the plot when drawn.
fn simulate(
    specs: &[&str],
    input: &[u8],
    plot: bool,
) -> Result<(Vec<Value>, Option<String>), TestCaseError> {
    let limiters: Vec<LimiterArg> = specs.iter().map(|s| limiter(s)).collect();
    let mut simulation = Simulation::new(&limiters, plot);
    let mut out = Vec::new();
    simulation
        .replay(Cursor::new(input), &mut LineWriter::new(&mut out))
        .map_err(|e| TestCaseError::fail(format!("replay failed: {e}")))?;
    let svg = simulation.panels.as_deref().map(render);
    let lines = output_lines(&out, specs.len())?;
    Ok((lines, svg))
}

/// The output's lines, each checked to be a decision, a rate change or an error, labelled
/// with its limiter when there are several, in the limiters' order.
fn output_lines(out: &[u8], limiters: usize) -> Result<Vec<Value>, TestCaseError> {
    let text = std::str::from_utf8(out).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut lines = Vec::new();
    let mut last_t = 0.0;
    for (i, line) in text.lines().enumerate() {
        let value: Value = serde_json::from_str(line)
            .map_err(|e| TestCaseError::fail(format!("not JSON: {line}: {e}")))?;
        let expected_limiter = (limiters > 1).then_some(i % limiters);
        check(
            value.get("limiter").and_then(Value::as_u64) == expected_limiter.map(|l| l as u64),
            || format!("line {i} of {limiters} limiters: {line}"),
        )?;
        if let Some(error) = value.get("error") {
            check(error.as_str().is_some_and(|e| !e.trim().is_empty()), || {
                format!("an empty error: {line}")
            })?;
            check(
                value["t"].is_null() || value["t"].as_f64().is_some_and(|t| t >= 0.0),
                || format!("an error's t: {line}"),
            )?;
        } else {
            let t = value["t"].as_f64().unwrap_or(-1.0);
            check(t >= last_t, || {
                format!("time went back to {t} from {last_t}: {line}")
            })?;
            last_t = t;
            check(
                value["key"].is_string() && value["permits"].as_u64().is_some_and(|p| p >= 1),
                || format!("a decision without key or permits: {line}"),
            )?;
            check(value["limit"].is_u64() && value["op"].is_string(), || {
                format!("no limit or op: {line}")
            })?;
            if value["op"]
                .as_str()
                .is_some_and(|op| op.starts_with("set_rate:"))
            {
                check(value.get("allowed").is_none(), || {
                    format!("a rate change with a decision: {line}")
                })?;
            } else {
                let allowed = value["allowed"].as_bool();
                check(allowed.is_some() && value["remaining"].is_u64(), || {
                    format!("not a decision: {line}")
                })?;
                check(
                    allowed == Some(false) || value["retry_after"].is_null(),
                    || format!("allowed with a retry_after: {line}"),
                )?;
                for field in ["reset_after", "wait"] {
                    check(value[field].as_f64().is_some_and(|s| s >= 0.0), || {
                        format!("{field}: {line}")
                    })?;
                }
            }
        }
        lines.push(value);
    }
    check(lines.len() % limiters == 0, || {
        format!("{} lines for {limiters} limiters", lines.len())
    })?;
    Ok(lines)
}

fn check_plot(svg: Option<String>, limiters: usize) -> Result<(), TestCaseError> {
    if let Some(svg) = svg {
        check(
            svg.matches(r#"class="panel""#).count() == limiters && svg.ends_with("</svg>\n"),
            || format!("a plot of {limiters} limiters: {svg}"),
        )?;
    }
    Ok(())
}

#[test]
fn fuzz_trace_arbitrary_bytes() {
    let bytes = prop_oneof![
        any::<Vec<u8>>(),
        "[0-9.,:\" \\n\\r#a-zA-Z_/-]{0,160}".prop_map(String::into_bytes),
    ];
    fuzz(
        "trace_arbitrary_bytes",
        (limiters(), bytes, any::<bool>()),
        |(specs, bytes, plot)| {
            let (lines, svg) = simulate(&specs, &bytes, plot)?;
            if lines.iter().any(|l| l.get("error").is_none()) {
                accepted();
            }
            check_plot(svg, specs.len())
        },
    );
}

/// One line of a trace as the generator writes it, with what the simulation must make of it.
#[derive(Debug, Clone)]
enum Line {
    Blank(String),
    Comment(String),
    Header(String),
    /// An event: the gap to the previous event's time (going back when `back`), the key, the
    /// permits and op as written with what they mean, and how the time is written.
    Event {
        gap: u64,
        back: bool,
        key: String,
        permits: (String, Option<u64>),
        op: (String, Option<String>),
        t_style: u8,
    },
    /// A line with one fault, and a word its error must contain.
    Fault(Fault),
}

#[derive(Debug, Clone)]
enum Fault {
    BadT(String),
    BadPermits(String),
    BadOp(String, &'static str),
    TooManyFields,
    Unterminated,
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["a", "b", "user-1", "k"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["x,y", "say \"hi\"", "é", "#not a comment", ""]).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
}

fn permits() -> impl Strategy<Value = (String, Option<u64>)> {
    prop_oneof![
        6 => (1u64..4).prop_map(|n| (n.to_string(), Some(n))),
        2 => Just((String::new(), Some(1))),
        1 => Just((u64::MAX.to_string(), Some(u64::MAX))),
        1 => any::<u64>().prop_filter("at least 1", |n| *n > 0).prop_map(|n| (n.to_string(), Some(n))),
    ]
}

/// Ops as written, and as echoed in the output.
fn op() -> impl Strategy<Value = (String, Option<String>)> {
    let plain = prop::sample::select(vec![
        ("", "check"),
        ("check", "check"),
        ("peek", "peek"),
        ("charge", "charge"),
        ("acquire", "acquire"),
        ("release", "release"),
        (" CHECK ", "check"),
        ("Peek", "peek"),
    ])
    .prop_map(|(written, echo)| (written.to_owned(), Some(echo.to_owned())));
    let timed = prop::sample::select(vec![
        "0",
        "0.5",
        "250ms",
        "1us",
        "99999999999",
        "18446744073709.551615",
        "1h",
    ])
    .prop_map(|t| (format!("try:{t}"), Some(format!("try:{t}"))));
    let rate = prop::sample::select(vec![
        "10/s",
        "2.5",
        "50/30s",
        "0/s",
        "1/1us",
        "18446744073709551615/1us",
        "3",
        "0.000001",
        "x",
    ])
    .prop_map(|r| (format!("set_rate:{r}"), Some(format!("set_rate:{r}"))));
    prop_oneof![6 => plain, 2 => timed, 2 => rate]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        prop::sample::select(vec![
            "x",
            "-1",
            "1e3",
            "1.0000001",
            "99999999999999999999",
            "1..2",
            "0x10",
            "∞"
        ])
        .prop_map(|t| Fault::BadT(t.to_owned())),
        prop::sample::select(vec!["0", "two", "-1", "1.5", "18446744073709551616"])
            .prop_map(|p| Fault::BadPermits(p.to_owned())),
        prop::sample::select(vec![
            ("jump", "unknown op"),
            ("try", "timeout"),
            ("try:soon", "timeout"),
            ("try:--1", "timeout"),
            ("set_rate:", "rate"),
            ("peek:1", "no argument"),
            ("set-rate", "rate"),
        ])
        .prop_map(|(op, needle)| Fault::BadOp(op.to_owned(), needle)),
        Just(Fault::TooManyFields),
        Just(Fault::Unterminated),
    ]
}

fn line() -> impl Strategy<Value = Line> {
    let gap = prop_oneof![
        8 => 0u64..2_000_000,
        1 => any::<u64>(),
        1 => Just(0u64),
    ];
    let event = (
        gap,
        prop::bool::weighted(0.05),
        key(),
        permits(),
        op(),
        0u8..4,
    )
        .prop_map(|(gap, back, key, permits, op, t_style)| Line::Event {
            gap,
            back,
            key,
            permits,
            op,
            t_style,
        });
    prop_oneof![
        20 => event,
        1 => prop::sample::select(vec!["", "  ", "\t", "\r"]).prop_map(|b| Line::Blank(b.to_owned())),
        1 => prop::sample::select(vec!["# comment", "  # indented", "#,,,"]).prop_map(|c| Line::Comment(c.to_owned())),
        1 => prop::sample::select(vec!["t,key,permits,op", "T, key", " t "]).prop_map(|h| Line::Header(h.to_owned())),
        3 => fault().prop_map(Line::Fault),
    ]
}

/// A CSV field: quoted when it must be, `""` for a quote.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"']) || text.starts_with(' ') || text.starts_with('#') {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// Seconds as written in a trace, in one of several styles.
fn seconds_text(t: Micros, style: u8) -> String {
    let (whole, fraction) = (t / 1_000_000, t % 1_000_000);
    match style {
        0 => format!("{whole}.{fraction:06}"),
        1 if fraction == 0 => whole.to_string(),
        2 if whole == 0 && fraction > 0 => format!(".{fraction:06}"),
        _ => format!("{whole}.{fraction:06}000")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned(),
    }
}

/// What one line of output for an event must say.
struct Expected {
    t: Option<Micros>,
    /// An event's key, permits and op (echo), or the word its error must contain.
    event: Option<(String, u64, String)>,
    error_needle: Option<&'static str>,
}

#[test]
fn fuzz_trace_lines() {
    let case = (
        limiters(),
        prop::collection::vec(line(), 0..24),
        any::<bool>(),
        any::<bool>(),
    );
    fuzz("trace_lines", case, |(specs, lines, crlf, plot)| {
        let mut text = String::new();
        let mut expected: Vec<Expected> = Vec::new();
        let (mut now, mut last_event): (Micros, Micros) = (0, 0);
        let mut seen_content = false;
        for line in &lines {
            let first_content = !seen_content;
            let written = match line {
                Line::Blank(b) => b.clone(),
                Line::Comment(c) => c.clone(),
                Line::Header(h) => {
                    seen_content = true;
                    if !first_content {
                        expected.push(Expected {
                            t: None,
                            event: None,
                            error_needle: Some("bad t"),
                        });
                    }
                    h.clone()
                }
                Line::Event {
                    gap,
                    back,
                    key,
                    permits,
                    op,
                    t_style,
                } => {
                    seen_content = true;
                    now = if *back {
                        now.saturating_sub(*gap)
                    } else {
                        now.saturating_add(*gap)
                    };
                    let fields = [
                        seconds_text(now, *t_style),
                        csv_field(key),
                        permits.0.clone(),
                        op.0.clone(),
                    ];
                    // Trailing empty fields may be left out.
                    let keep = if op.0.is_empty() {
                        if permits.0.is_empty() { 2 } else { 3 }
                    } else {
                        4
                    };
                    let (permits, echo) =
                        (permits.1.unwrap_or(1), op.1.clone().unwrap_or_default());
                    if now < last_event {
                        expected.push(Expected {
                            t: Some(now),
                            event: None,
                            error_needle: Some("before"),
                        });
                    } else {
                        last_event = now;
                        expected.push(Expected {
                            t: Some(now),
                            event: Some((key.trim().to_owned(), permits, echo)),
                            error_needle: None,
                        });
                    }
                    fields[..keep].join(",")
                }
                Line::Fault(fault) => {
                    seen_content = true;
                    let t = seconds_text(now, 0);
                    let (written, t, needle) = match fault {
                        Fault::BadT(bad) => (format!("{bad},a"), None, "bad t"),
                        Fault::BadPermits(p) => (
                            format!("{t},a,{p}"),
                            Some(now),
                            if p == "0" { "at least 1" } else { "permits" },
                        ),
                        Fault::BadOp(op, needle) => (format!("{t},a,1,{op}"), Some(now), *needle),
                        Fault::TooManyFields => (format!("{t},a,1,check,x"), Some(now), "fields"),
                        Fault::Unterminated => (format!("{t},\"a"), None, "unterminated"),
                    };
                    expected.push(Expected {
                        t,
                        event: None,
                        error_needle: Some(needle),
                    });
                    written
                }
            };
            text.push_str(&written);
            text.push_str(if crlf { "\r\n" } else { "\n" });
        }
        let (output, svg) = simulate(&specs, text.as_bytes(), plot)?;
        let n = specs.len();
        let mut decided = false;
        check(output.len() == expected.len() * n, || {
            format!(
                "{} output lines for {} trace lines and {n} limiters:\n{text}\n{output:#?}",
                output.len(),
                expected.len()
            )
        })?;
        for (group, want) in output.chunks(n).zip(&expected) {
            for line in group {
                // Seconds as an f64, read back by serde_json (within a unit in the last place).
                let t = line["t"].as_f64();
                let same_t = match (t, want.t.map(|t| t as f64 / 1e6)) {
                    (Some(got), Some(want)) => (got - want).abs() <= want * 1e-15,
                    (got, want) => got.is_none() && want.is_none(),
                };
                check(same_t, || format!("t of {line}, expected {:?}", want.t))?;
                match (
                    &want.event,
                    want.error_needle,
                    line.get("error").and_then(Value::as_str),
                ) {
                    (_, Some(needle), Some(error)) => check(error.contains(needle), || {
                        format!("error {error:?} does not say {needle:?}")
                    })?,
                    (_, Some(needle), None) => {
                        return Err(TestCaseError::fail(format!(
                            "expected an error on {needle:?}, got {line}"
                        )));
                    }
                    // The limiter may refuse an event (an op it does not support, more
                    // permits than it ever grants, a rate it cannot take): that is an error
                    // line too, with a message.
                    (Some(_), None, Some(_)) => {}
                    (Some((key, permits, echo)), None, None) => {
                        decided = true;
                        check(
                            line["key"] == key.as_str()
                                && line["permits"] == *permits
                                && line["op"] == echo.as_str(),
                            || format!("{line} is not the event ({key:?}, {permits}, {echo:?})"),
                        )?;
                    }
                    (None, None, _) => {
                        return Err(TestCaseError::fail(format!("unexpected line {line}")));
                    }
                }
            }
        }
        if decided {
            accepted();
        }
        check_plot(svg, n)
    });
}

fn traffic_text() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "poisson",
        "uniform",
        "burst",
        "Burst",
        " poisson ",
        "x",
        "",
    ]);
    let key = prop::sample::select(vec![
        "rate", "duration", "keys", "permits", "size", "every", "?", "",
    ]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "20/s",
            "1/1us",
            "18446744073709551615/1us",
            "0/s",
            "0.5/s",
            "10s",
            "1us",
            "0s",
            "99999999999999d",
            "1",
            "0",
            "3",
            "18446744073709551615",
            "-1",
            "",
            "x",
        ])
        .prop_map(str::to_owned),
        "[0-9./a-z]{0,8}",
    ];
    let noisy = (name, prop::collection::vec((key, value), 0..6)).prop_map(|(name, items)| {
        let items: Vec<String> = items.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{name}:{}", items.join(","))
    });
    let pick = |values: &[&'static str]| prop::sample::select(values.to_vec());
    let optional = |key: &'static str, values: &[&'static str]| {
        prop::option::of(prop::sample::select(values.to_vec()))
            .prop_map(move |v| v.map(|v| format!(",{key}={v}")).unwrap_or_default())
    };
    let counts = ["1", "3", "18446744073709551615"];
    let durations = ["10s", "1us", "1", "99999999999999d", "1.5m"];
    let steady = (
        pick(&["poisson", "uniform"]),
        pick(&["20/s", "1/1us", "0.5/s", "1000000/s", "3/1w"]),
        pick(&durations),
        optional("keys", &counts),
        optional("permits", &counts),
    )
        .prop_map(|(name, rate, duration, keys, permits)| {
            format!("{name}:rate={rate},duration={duration}{keys}{permits}")
        });
    let bursts = (
        pick(&counts),
        pick(&["1us", "5s", "1"]),
        pick(&durations),
        optional("keys", &counts),
    )
        .prop_map(|(size, every, duration, keys)| {
            format!("burst:size={size},every={every},duration={duration}{keys}")
        });
    prop_oneof![2 => noisy, 2 => steady, 1 => bursts]
}

#[test]
fn fuzz_traffic_specs() {
    let text = prop_oneof![4 => traffic_text(), 1 => "\\PC{0,32}"];
    fuzz(
        "traffic_specs",
        (text, any::<u64>(), limiters()),
        |(text, seed, specs)| {
            let traffic = match TrafficSpec::parse(&text) {
                Ok(traffic) => traffic,
                Err(error) => {
                    let named = ["traffic", "parameter", "bad ", "key=value"]
                        .iter()
                        .any(|w| error.contains(w));
                    return check(named && !error.trim().is_empty(), || {
                        format!("{text:?}: unclear error {error:?}")
                    });
                }
            };
            accepted();
            // The first events, through the limiters as `simulate --traffic` runs them.
            let limiters: Vec<LimiterArg> = specs.iter().map(|s| limiter(s)).collect();
            let mut simulation = Simulation::new(&limiters, true);
            let mut out = Vec::new();
            let mut writer = LineWriter::new(&mut out);
            let mut last = 0;
            for event in traffic.events(seed).take(64) {
                check(event.t >= last, || format!("{text:?}: events out of order"))?;
                last = event.t;
                simulation
                    .apply(TraceLine::Event(event), &mut writer)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            output_lines(&out, specs.len())?;
            check_plot(simulation.panels.as_deref().map(render), specs.len())
        },
    );
}

#[test]
fn every_limiter_of_the_fuzz_builds() {
    for spec in SPECS {
        let limiter = limiter(spec);
        assert_eq!(limiter.spec.algorithm(), limiter.algorithm.name(), "{spec}");
    }
}

// Inputs the fuzzer found, kept as regular tests.

/// A trace at the end of time (`t` = 2^64 - 1 µs): the plot's axis spanned one bin more than
/// a u64 holds, which overflowed (a panic in debug builds; in release, a wrapped span and a
/// time axis stepping past the end forever).
#[test]
fn regression_a_plot_at_the_end_of_time() -> Result<(), TestCaseError> {
    let trace = "0,a\n18446744073709.551615,a\n";
    let (lines, svg) = simulate(&["gcra:rate=2/s,burst=3"], trace.as_bytes(), true)?;
    assert_eq!(lines.len(), 2);
    let svg = svg.ok_or_else(|| TestCaseError::fail("no plot"))?;
    assert_eq!(svg.matches(r#"class="allowed""#).count(), 2, "{svg}");
    assert!(svg.ends_with("</svg>\n"));
    Ok(())
}
