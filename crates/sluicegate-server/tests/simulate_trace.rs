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
        decision(1.0, "a", 1, "try:0.5", false, 3, 0, 3.0, Some(0.5), 0.0),
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
fn charge_counts_denied_hits_and_sliding_log_refuses_it() -> TestResult {
    // 3 a second: the fourth and fifth charges are denied yet counted, so at 0.5 a check of
    // one more is still over (5 counted), where plain checks would have stopped at 3.
    let trace = "\
0,a,1,charge
0,a,2,charge
0,a,1,charge
0,a,1,charge
0.5,a,1,check
1.0,a,1,charge
";
    let expected = [
        decision(0.0, "a", 1, "charge", true, 3, 2, 1.0, None, 0.0),
        decision(0.0, "a", 2, "charge", true, 3, 0, 1.0, None, 0.0),
        decision(0.0, "a", 1, "charge", false, 3, 0, 1.0, Some(1.0), 0.0),
        decision(0.0, "a", 1, "charge", false, 3, 0, 1.0, Some(1.0), 0.0),
        decision(0.5, "a", 1, "check", false, 3, 0, 0.5, Some(0.5), 0.0),
        decision(1.0, "a", 1, "charge", true, 3, 2, 1.0, None, 0.0),
    ];
    assert_eq!(run("fixed-window:limit=3,window=1s", trace)?, expected);
    assert_eq!(
        run("sliding-log:limit=3,window=1s", "0,a,1,charge\n")?,
        [error(0.0, "sliding-log does not support charge")]
    );
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

/// Runs a trace read from standard input and compares the output text, byte for byte.
fn assert_output(args: &[&str], trace: &str, expected: &str) -> TestResult {
    let output = common::simulate(args, trace)?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8(output.stdout)?, expected.trim_start());
    Ok(())
}

// Exact outputs, each checked by hand against the algorithm's rule (see the comments).

/// Guava RateLimiterTest: create(1.0): acquire(1) acquire(1); setRate(2.0); acquire(1)
/// acquire(2) acquire(4) acquire(1) -> R0.00 R1.00 R1.00 R0.50 R1.00 R2.00; each event at the
/// time the caller wakes from the previous wait.
#[test]
fn guava_set_rate_vector() -> TestResult {
    let trace = "0,a,1,acquire\n0,a,1,acquire\n1,a,1,set_rate:2\n1,a,1,acquire\n2,a,2,acquire\n2.5,a,4,acquire\n3.5,a,1,acquire";
    let expected = r#"
{"t":0.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":2.0,"retry_after":null,"wait":0.0}
{"t":0.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":3.0,"retry_after":null,"wait":1.0}
{"t":1.0,"key":"a","permits":1,"op":"set_rate:2","limit":3}
{"t":1.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":3,"remaining":0,"reset_after":2.5,"retry_after":null,"wait":1.0}
{"t":2.0,"key":"a","permits":2,"op":"acquire","allowed":true,"limit":3,"remaining":0,"reset_after":2.5,"retry_after":null,"wait":0.5}
{"t":2.5,"key":"a","permits":4,"op":"acquire","allowed":true,"limit":3,"remaining":0,"reset_after":4.0,"retry_after":null,"wait":1.0}
{"t":3.5,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":3,"remaining":0,"reset_after":3.5,"retry_after":null,"wait":2.0}
"#;
    assert_output(&["--limiter", "smooth-bursty:rate=1"], trace, expected)
}

/// Guava: create(5.0); sleep 1000ms x2; acquire(1) acquire(1) acquire(3) acquire(1) acquire(1)
/// -> R0.00 R0.00 R0.00 R0.00 R0.20: a limiter exists from t = 0, so at t = 2 it has saved
/// a second of permits. Then tryAcquire with and without a long enough timeout.
#[test]
fn guava_stored_permits_vector() -> TestResult {
    let trace = "2,a,1,acquire\n2,a,1,acquire\n2,a,3,acquire\n2,a,1,acquire\n2,a,1,acquire\n2,a,1,check\n2.2,a,1,try:0.1\n2.2,a,1,try:0.2";
    let expected = r#"
{"t":2.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":6,"remaining":5,"reset_after":0.2,"retry_after":null,"wait":0.0}
{"t":2.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":6,"remaining":4,"reset_after":0.4,"retry_after":null,"wait":0.0}
{"t":2.0,"key":"a","permits":3,"op":"acquire","allowed":true,"limit":6,"remaining":1,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":2.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":6,"remaining":0,"reset_after":1.2,"retry_after":null,"wait":0.0}
{"t":2.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":6,"remaining":0,"reset_after":1.4,"retry_after":null,"wait":0.2}
{"t":2.0,"key":"a","permits":1,"op":"check","allowed":false,"limit":6,"remaining":0,"reset_after":1.4,"retry_after":0.4,"wait":0.0}
{"t":2.2,"key":"a","permits":1,"op":"try:0.1","allowed":false,"limit":6,"remaining":0,"reset_after":1.2,"retry_after":0.1,"wait":0.0}
{"t":2.2,"key":"a","permits":1,"op":"try:0.2","allowed":true,"limit":6,"remaining":0,"reset_after":1.4,"retry_after":null,"wait":0.2}
"#;
    assert_output(&["--limiter", "smooth-bursty:rate=5"], trace, expected)
}

/// Guava: warm-up create(2.0, 4s, cold 3): 8 x acquire -> 0, 1.375, 1.125, 0.875, 0.625, 0.5,
/// 0.5, 0.5.
#[test]
fn guava_warmup_vector() -> TestResult {
    let trace = "0,a,1,acquire\n0,a,1,acquire\n1.375,a,1,acquire\n2.5,a,1,acquire\n3.375,a,1,acquire\n4,a,1,acquire\n4.5,a,1,acquire\n5,a,1,acquire";
    let expected = r#"
{"t":0.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":1.875,"retry_after":null,"wait":0.0}
{"t":0.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":3.5,"retry_after":null,"wait":1.375}
{"t":1.375,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":3.5,"retry_after":null,"wait":1.125}
{"t":2.5,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":3.5,"retry_after":null,"wait":0.875}
{"t":3.375,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":3.625,"retry_after":null,"wait":0.625}
{"t":4.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":4.0,"retry_after":null,"wait":0.5}
{"t":4.5,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":4.5,"retry_after":null,"wait":0.5}
{"t":5.0,"key":"a","permits":1,"op":"acquire","allowed":true,"limit":2,"remaining":0,"reset_after":5.0,"retry_after":null,"wait":0.5}
"#;
    assert_output(
        &["--limiter", "smooth-warmup:rate=2,warmup=4s,cold_factor=3"],
        trace,
        expected,
    )
}

/// Windows aligned to whole seconds: three per window, then wait for the next one.
#[test]
fn fixed_window_counts_per_aligned_window() -> TestResult {
    let trace =
        "0.1,a\n0.1,a\n0.1,a\n0.1,a\n0.9,a,1,peek\n1.0,a\n1.5,a,3,peek\n1.5,a,4\n1.5,a,1,acquire";
    let expected = r#"
{"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":2,"reset_after":0.9,"retry_after":null,"wait":0.0}
{"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":1,"reset_after":0.9,"retry_after":null,"wait":0.0}
{"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.9,"retry_after":null,"wait":0.0}
{"t":0.1,"key":"a","permits":1,"op":"check","allowed":false,"limit":3,"remaining":0,"reset_after":0.9,"retry_after":0.9,"wait":0.0}
{"t":0.9,"key":"a","permits":1,"op":"peek","allowed":false,"limit":3,"remaining":0,"reset_after":0.1,"retry_after":0.1,"wait":0.0}
{"t":1.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":2,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":1.5,"key":"a","permits":3,"op":"peek","allowed":false,"limit":3,"remaining":2,"reset_after":0.5,"retry_after":0.5,"wait":0.0}
{"t":1.5,"error":"4 permits requested but at most 3 can ever be granted at once"}
{"t":1.5,"error":"fixed-window does not support acquire"}
"#;
    assert_output(
        &["--limiter", "fixed-window:limit=3,window=1s"],
        trace,
        expected,
    )
}

/// Grants in (now - 1s, now]: the one at 0 stops counting at 1.0, so 0.7 waits 0.3.
#[test]
fn sliding_log_is_exact() -> TestResult {
    let trace = "0,a\n0.5,a\n0.7,a\n1.0,a\n1.0,a,2,peek";
    let expected = r#"
{"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":1,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":0.5,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":0.7,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":0.8,"retry_after":0.3,"wait":0.0}
{"t":1.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":1.0,"key":"a","permits":2,"op":"peek","allowed":false,"limit":2,"remaining":0,"reset_after":1.0,"retry_after":1.0,"wait":0.0}
"#;
    assert_output(
        &["--limiter", "sliding-log:limit=2,window=1s"],
        trace,
        expected,
    )
}

/// Cloudflare's estimate (2 * 0.75 + 1 > 2 at 1.25, passes from 1.5) beside four 250ms slots
/// (the slot of 0.5 stops counting at 1.5).
#[test]
fn sliding_window_weighted_and_slotted() -> TestResult {
    let trace = "0.5,a\n0.5,a\n1.25,a\n1.25,a\n1.6,a";
    let expected = r#"
{"limiter":0,"t":0.5,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":1,"reset_after":1.5,"retry_after":null,"wait":0.0}
{"limiter":1,"t":0.5,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":1,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"limiter":0,"t":0.5,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":1.5,"retry_after":null,"wait":0.0}
{"limiter":1,"t":0.5,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"limiter":0,"t":1.25,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":0.75,"retry_after":0.25,"wait":0.0}
{"limiter":1,"t":1.25,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":0.25,"retry_after":0.25,"wait":0.0}
{"limiter":0,"t":1.25,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":0.75,"retry_after":0.25,"wait":0.0}
{"limiter":1,"t":1.25,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":0.25,"retry_after":0.25,"wait":0.0}
{"limiter":0,"t":1.6,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":1.4,"retry_after":null,"wait":0.0}
{"limiter":1,"t":1.6,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":1,"reset_after":0.9,"retry_after":null,"wait":0.0}
"#;
    assert_output(
        &[
            "--limiter",
            "sliding-window:limit=2,window=1s",
            "--limiter",
            "sliding-window:limit=2,window=1s,buckets=4",
        ],
        trace,
        expected,
    )
}

/// nginx limit_req rate=10r/s burst=2: shaped (waits 0, 0.1, 0.2), nodelay, and delay=1;
/// the fourth request at once is over the burst in all three.
#[test]
fn leaky_queue_shapes_or_not() -> TestResult {
    let trace = "0,a\n0,a\n0,a\n0,a\n0.05,a,1,peek\n0.1,a";
    let expected = r#"
{"limiter":0,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":2,"reset_after":0.1,"retry_after":null,"wait":0.0}
{"limiter":1,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":2,"reset_after":0.1,"retry_after":null,"wait":0.0}
{"limiter":2,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":2,"reset_after":0.1,"retry_after":null,"wait":0.0}
{"limiter":0,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":1,"reset_after":0.2,"retry_after":null,"wait":0.1}
{"limiter":1,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":1,"reset_after":0.2,"retry_after":null,"wait":0.0}
{"limiter":2,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":1,"reset_after":0.2,"retry_after":null,"wait":0.0}
{"limiter":0,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.2}
{"limiter":1,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.0}
{"limiter":2,"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.1}
{"limiter":0,"t":0.0,"key":"a","permits":1,"op":"check","allowed":false,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":0.1,"wait":0.0}
{"limiter":1,"t":0.0,"key":"a","permits":1,"op":"check","allowed":false,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":0.1,"wait":0.0}
{"limiter":2,"t":0.0,"key":"a","permits":1,"op":"check","allowed":false,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":0.1,"wait":0.0}
{"limiter":0,"t":0.05,"key":"a","permits":1,"op":"peek","allowed":false,"limit":3,"remaining":0,"reset_after":0.25,"retry_after":0.05,"wait":0.0}
{"limiter":1,"t":0.05,"key":"a","permits":1,"op":"peek","allowed":false,"limit":3,"remaining":0,"reset_after":0.25,"retry_after":0.05,"wait":0.0}
{"limiter":2,"t":0.05,"key":"a","permits":1,"op":"peek","allowed":false,"limit":3,"remaining":0,"reset_after":0.25,"retry_after":0.05,"wait":0.0}
{"limiter":0,"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.2}
{"limiter":1,"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.0}
{"limiter":2,"t":0.1,"key":"a","permits":1,"op":"check","allowed":true,"limit":3,"remaining":0,"reset_after":0.3,"retry_after":null,"wait":0.1}
"#;
    assert_output(
        &[
            "--limiter",
            "leaky-queue:rate=10/s,burst=2",
            "--limiter",
            "leaky-queue:rate=10/s,burst=2,nodelay",
            "--limiter",
            "leaky-queue:rate=10/s,burst=2,delay=1",
        ],
        trace,
        expected,
    )
}

/// A meter: the level drains one per second from a capacity of two.
#[test]
fn leaky_bucket_meters() -> TestResult {
    let trace = "0,a\n0,a\n0,a\n1,a";
    let expected = r#"
{"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":1,"reset_after":1.0,"retry_after":null,"wait":0.0}
{"t":0.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":2.0,"retry_after":null,"wait":0.0}
{"t":0.0,"key":"a","permits":1,"op":"check","allowed":false,"limit":2,"remaining":0,"reset_after":2.0,"retry_after":1.0,"wait":0.0}
{"t":1.0,"key":"a","permits":1,"op":"check","allowed":true,"limit":2,"remaining":0,"reset_after":2.0,"retry_after":null,"wait":0.0}
"#;
    assert_output(
        &["--limiter", "leaky-bucket:rate=1/s,capacity=2"],
        trace,
        expected,
    )
}

/// A peek takes nothing, so it reports what is left now: a peek of 3 with 7 left says 7, in
/// every algorithm; a denial says the same; a check of 3 then leaves 4.
#[test]
fn a_peek_reports_what_is_left_now() -> TestResult {
    let specs = [
        "fixed-window:limit=10,window=1s",
        "sliding-log:limit=10,window=1s",
        "sliding-window:limit=10,window=1s,buckets=5",
        "sliding-window:limit=10,window=1s",
        "token-bucket:rate=1/s,burst=10",
        "gcra:rate=1/s,burst=10",
        "leaky-bucket:rate=1/s,capacity=10",
        "leaky-queue:rate=1/s,burst=9,nodelay",
        "concurrency:limit=10",
    ];
    let mut args = Vec::new();
    for spec in specs {
        args.extend(["--limiter", spec]);
    }
    args.extend(["--trace", "-"]);
    let answers = lines(&args, "0,a,3\n0,a,3,peek\n0,a,8,peek\n0,a,8\n0,a,3\n")?;
    assert_eq!(answers.len(), 5 * specs.len());
    for (index, spec) in specs.iter().enumerate() {
        let seen: Vec<(&str, bool, u64)> = answers
            .iter()
            .filter(|a| a["limiter"] == json!(index))
            .map(|a| {
                (
                    a["op"].as_str().unwrap_or_default(),
                    a["allowed"].as_bool().unwrap_or_default(),
                    a["remaining"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("check", true, 7),
                ("peek", true, 7),
                ("peek", false, 7),
                ("check", false, 7),
                ("check", true, 4),
            ],
            "{spec}"
        );
    }
    // The smooth limiters count single checks passing now: rested for 2s at 5 a second, 5
    // saved plus the one whose turn has come.
    let trace = "2,a,3,peek\n2,a,3\n2,a,1,peek\n";
    let expected = [
        decision(2.0, "a", 3, "peek", true, 6, 6, 0.6, None, 0.0),
        decision(2.0, "a", 3, "check", true, 6, 3, 0.6, None, 0.0),
        decision(2.0, "a", 1, "peek", true, 6, 3, 0.8, None, 0.0),
    ];
    assert_eq!(run("smooth-bursty:rate=5", trace)?, expected);
    Ok(())
}

/// A negative `try:` timeout waits for nothing, as Guava's `tryAcquire` takes it: the same
/// answer as `try:0`, never an error line.
#[test]
fn a_negative_try_timeout_is_no_wait() -> TestResult {
    let trace = "0,a,1,acquire\n0,a,1,try:-1\n0,a,1,try:0\n0.2,a,1,try:-0.5\n0.2,a,1,try:-250ms\n";
    let expected = [
        decision(0.0, "a", 1, "acquire", true, 6, 0, 1.2, None, 0.0),
        decision(0.0, "a", 1, "try:-1", false, 6, 0, 1.2, Some(0.2), 0.0),
        decision(0.0, "a", 1, "try:0", false, 6, 0, 1.2, Some(0.2), 0.0),
        decision(0.2, "a", 1, "try:-0.5", true, 6, 0, 1.2, None, 0.0),
        decision(0.2, "a", 1, "try:-250ms", false, 6, 0, 1.2, Some(0.2), 0.0),
    ];
    assert_eq!(run("smooth-bursty:rate=5", trace)?, expected);
    // Every algorithm that reserves takes it so.
    let trace = "0,a\n0,a,1,try:-1\n";
    for spec in [
        "gcra:rate=1/s,burst=1",
        "token-bucket:rate=1/s,burst=1",
        "smooth-warmup:rate=1,warmup=1s",
    ] {
        let answers = run(spec, trace)?;
        assert_eq!(answers[1]["allowed"], json!(false), "{spec}: {answers:?}");
        assert_eq!(answers[1]["wait"], json!(0.0), "{spec}: {answers:?}");
    }
    let answers = run("leaky-queue:rate=1/s,burst=1", trace)?;
    assert_eq!(answers[1]["allowed"], json!(false), "{answers:?}");
    Ok(())
}
