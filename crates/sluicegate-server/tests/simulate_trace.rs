//! Traces through each algorithm, with every field of every answer spelled out.

mod common;

use common::{TestResult, allowed, decision, denied, lines};
use serde_json::{Value, json};

fn run(spec: &str, trace: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    lines(&["--limiter", spec, "--trace", "-"], trace)
}

fn error(t: f64, message: &str) -> Value {
    json!({"t": t, "error": message})
}

#[test]
fn token_bucket_checks_peeks_reserves_and_tries() -> TestResult {
    let trace = "\
t,key,permits,op
0,a,1,check
0,a,2,check
0.5,a,1,peek
0.5,a,1,acquire
1.0,a,1,try:0.5
1.0,a,1,try:1
1.0,a,4
1.0,a,1,release
5.0,a
";
    let expected = [
        allowed(0.0, "a", 3, 2, 1.0),
        decision(0.0, "a", 2, "check", true, 3, 0, 3.0, None, 0.0),
        decision(0.5, "a", 1, "peek", false, 3, 0, 2.5, Some(0.5), 0.0),
        decision(0.5, "a", 1, "acquire", true, 3, 0, 3.5, None, 0.5),
        decision(1.0, "a", 1, "try:0.5", false, 3, 0, 3.0, Some(1.0), 0.0),
        decision(1.0, "a", 1, "try:1", true, 3, 0, 4.0, None, 1.0),
        error(
            1.0,
            "4 permits requested but at most 3 can ever be granted at once",
        ),
        error(1.0, "token-bucket does not support release"),
        allowed(5.0, "a", 3, 2, 1.0),
    ];
    assert_eq!(run("token-bucket:rate=1/s,burst=3", trace)?, expected);
    Ok(())
}

#[test]
fn gcra_set_rate_carries_every_key_over() -> TestResult {
    let trace = "\
0,a
0,a
0,x,1,set_rate:2/s
0,a
0.5,a
0.5,b
";
    let expected = [
        allowed(0.0, "a", 2, 1, 1.0),
        allowed(0.0, "a", 2, 0, 2.0),
        json!({"t": 0.0, "key": "x", "permits": 1, "op": "set_rate:2/s", "limit": 2}),
        // A full debt stays a full debt: the bucket was empty and still is, at the new rate.
        denied(0.0, "a", 2, 1.0, 0.5),
        allowed(0.5, "a", 2, 0, 1.0),
        allowed(0.5, "b", 2, 1, 0.5),
    ];
    assert_eq!(run("gcra:rate=1/s,burst=2", trace)?, expected);
    Ok(())
}

#[test]
fn gcra_and_token_bucket_agree() -> TestResult {
    let trace = "0,a\n0,a\n0,a\n0.1,a\n0.35,a,2\n0.9,a,1,peek\n2,a,3\n";
    let from_gcra = run("gcra:rate=5/s,burst=3", trace)?;
    assert_eq!(from_gcra, run("token-bucket:rate=5/s,burst=3", trace)?);
    assert_eq!(from_gcra.len(), 7);
    Ok(())
}

#[test]
fn concurrency_takes_and_releases() -> TestResult {
    let trace = "\
0,a
0,a
0,a
0,b
1,a,1,release
1,a,2,release
1,a,1,acquire
";
    let held = |t: f64, op: &str, allowed: bool, remaining: u64| {
        decision(t, "a", 1, op, allowed, 2, remaining, 0.0, None, 0.0)
    };
    let expected = [
        held(0.0, "check", true, 1),
        held(0.0, "check", true, 0),
        held(0.0, "check", false, 0),
        allowed(0.0, "b", 2, 1, 0.0),
        held(1.0, "release", true, 1),
        error(1.0, "released 2 permits but only 1 are held"),
        error(1.0, "concurrency does not support acquire"),
    ];
    assert_eq!(run("concurrency:limit=2", trace)?, expected);
    Ok(())
}

#[test]
fn the_example_trace_runs() -> TestResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/traces/bursty.csv"
    );
    let answers = lines(
        &[
            "--limiter",
            "token-bucket:rate=5/s,burst=5",
            "--trace",
            path,
        ],
        "",
    )?;
    let events = std::fs::read_to_string(path)?
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with("t,"))
        .count();
    assert_eq!(answers.len(), events);
    assert!(
        answers.iter().all(|a| a.get("error").is_none()),
        "{answers:?}"
    );
    let rejected = answers.iter().filter(|a| a["allowed"] == false).count();
    assert!(rejected > 0, "the bursts exceed the bucket");
    Ok(())
}
