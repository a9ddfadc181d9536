//! Bad command lines stop with a message naming what is wrong; bad events get an error line
//! and the run goes on.

mod common;

use common::{TestResult, lines, simulate};
use serde_json::json;

fn stderr_of(args: &[&str]) -> Result<(Option<i32>, String), Box<dyn std::error::Error>> {
    let output = simulate(args, "0,a\n")?;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn a_bad_spec_is_a_usage_error_naming_the_parameter() -> TestResult {
    for (spec, needle) in [
        ("gcra:rate=10/s,brust=5", "brust"),
        ("gcra:burst=5", "rate"),
        ("gcra:rate=ten/s", "rate"),
        ("gcra:rate=10/s,burst=0", "burst"),
        ("concurrency:limit=1,limit=2", "limit"),
        ("leaky-bukket:rate=1/s", "leaky-bukket"),
    ] {
        let (code, stderr) = stderr_of(&["--limiter", spec])?;
        assert_eq!(code, Some(2), "{spec}: {stderr}");
        assert!(stderr.contains(needle), "{spec}: {stderr}");
    }
    Ok(())
}

#[test]
fn other_bad_command_lines_fail_clearly() -> TestResult {
    let (code, stderr) = stderr_of(&[])?;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--limiter"), "{stderr}");

    let (code, stderr) = stderr_of(&["--limiter", "gcra:rate=1/s", "--traffic", "zipf:rate=1/s"])?;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("zipf"), "{stderr}");

    let (code, stderr) = stderr_of(&[
        "--limiter",
        "gcra:rate=1/s",
        "--trace",
        "-",
        "--traffic",
        "uniform:rate=1/s,duration=1s",
    ])?;
    assert_eq!(code, Some(2), "{stderr}");

    let (code, stderr) = stderr_of(&[
        "--limiter",
        "gcra:rate=1/s",
        "--trace",
        "/no/such/trace.csv",
    ])?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("/no/such/trace.csv"), "{stderr}");
    Ok(())
}

#[test]
fn bad_events_give_error_lines_and_the_run_goes_on() -> TestResult {
    let trace = "\
1,a,0
1,a,lots
1,a,1,fly
1,a,1,try
1,a,1,set_rate:fast
1,\"a
1.0000001,a
2,a,1,check,extra
3,a
2,a
3,a,1,peek
";
    let answers = lines(
        &["--limiter", "gcra:rate=1/s,burst=2", "--trace", "-"],
        trace,
    )?;
    let errors: Vec<String> = answers
        .iter()
        .filter_map(|a| a["error"].as_str().map(str::to_owned))
        .collect();
    let expected_errors = [
        "at least 1",
        "bad permits",
        "unknown op `fly`",
        "try:SECONDS",
        "invalid rate `fast`",
        "unterminated",
        "finer than a microsecond",
        "at most 4",
        "before the previous event",
    ];
    assert_eq!(errors.len(), expected_errors.len(), "{errors:?}");
    for (error, needle) in errors.iter().zip(expected_errors) {
        assert!(error.contains(needle), "{error} should say {needle}");
    }
    assert_eq!(answers.len(), 11);
    assert_eq!(answers[8]["allowed"], json!(true));
    assert_eq!(answers[9]["t"], json!(2.0));
    // The out-of-order event was not applied: the peek sees one permit left.
    assert_eq!(answers[10]["remaining"], json!(1));
    assert_eq!(answers[10]["allowed"], json!(true));
    Ok(())
}
