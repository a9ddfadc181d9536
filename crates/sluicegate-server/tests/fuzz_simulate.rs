//! Fuzzing the `sluicegate simulate` command itself, a process per input: `--limiter` specs
//! (valid or not) and a trace of arbitrary lines on standard input. A bad spec is a usage error
//! naming it; with good ones the run succeeds, and every output line is a decision or
//! `{"t":...,"error":"..."}`, one per limiter for each line of the trace.
//!
//! The trace reader and the simulation are fuzzed in process, millions of inputs at a time, by
//! the binary's own tests (`src/simulate/fuzz_tests.rs`); a process per input is slow, so
//! `SLUICEGATE_FUZZ_SLOW_CASES` sets the number here (16 by default).

mod common;
#[path = "../../sluicegate/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;

use fuzz_harness::{accepted, check, fuzz_with};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::AnyAlgorithm;

fn slow_config() -> proptest::test_runner::Config {
    let cases = std::env::var("SLUICEGATE_FUZZ_SLOW_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(16);
    proptest::test_runner::Config {
        cases,
        ..fuzz_harness::config()
    }
}

fn spec() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "gcra:rate=2/s,burst=3",
            "token-bucket:rate=10/s",
            "fixed-window:limit=3,window=1s",
            "sliding-window:limit=5,window=1s,buckets=4",
            "leaky-queue:rate=5/s,burst=3,nodelay",
            "smooth-warmup:rate=2,warmup=4s",
            "concurrency:limit=2",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z:=,/0-9.-]{0,24}",
        1 => prop::sample::select(vec!["gcra:rate=", "gcra:rate=0/s", "x", "", "-=", "gcra:rate=1/s,burst=0"])
            .prop_map(str::to_owned),
    ]
}

fn trace() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        4 => ("[0-9]{1,3}(\\.[0-9]{1,7})?", "[a-z\",]{0,4}", "[0-9]{0,2}", "(check|peek|acquire|release|charge|try:0.5|set_rate:5/s|x)?")
            .prop_map(|(t, k, p, o)| format!("{t},{k},{p},{o}")),
        1 => "[^\\n]{0,24}",
    ];
    prop::collection::vec(line, 0..12).prop_map(|lines| lines.join("\n"))
}

#[test]
fn fuzz_simulate_command() {
    let case = (prop::collection::vec(spec(), 1..3), trace());
    fuzz_with("simulate_command", slow_config(), case, |(specs, trace)| {
        // `--limiter=SPEC`: a spec starting with `-` is still the option's value.
        let options: Vec<String> = specs.iter().map(|s| format!("--limiter={s}")).collect();
        let args: Vec<&str> = options.iter().map(String::as_str).collect();
        let output = common::simulate(&args, &trace)
            .map_err(|e| TestCaseError::fail(format!("cannot run sluicegate: {e}")))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first_bad = specs.iter().find_map(|s| s.parse::<AnyAlgorithm>().err());
        if let Some(err) = first_bad {
            return check(
                output.status.code() == Some(2)
                    && stderr.contains("--limiter")
                    && stderr.contains(&err.to_string()),
                || format!("a bad spec ({err}) gave {:?}: {stderr}", output.status),
            );
        }
        check(output.status.success(), || {
            format!("{:?}: {stderr}", output.status)
        })?;
        accepted();
        let lines =
            common::parse_lines(&output.stdout).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(lines.len() % specs.len() == 0, || {
            format!("{} lines for {} limiters", lines.len(), specs.len())
        })?;
        for line in &lines {
            let error = line.get("error").and_then(|e| e.as_str());
            check(
                error.is_some_and(|e| !e.trim().is_empty())
                    || line.get("limit").is_some_and(|l| l.is_u64()),
                || format!("neither a decision nor an error: {line}"),
            )?;
        }
        Ok(())
    });
}
