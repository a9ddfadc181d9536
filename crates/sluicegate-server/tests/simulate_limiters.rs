//! Several `--limiter`s: one line per limiter per event, each with its index.

mod common;

use common::{TestResult, lines};
use serde_json::json;

#[test]
fn each_event_gets_one_line_per_limiter_in_order() -> TestResult {
    let answers = lines(
        &[
            "--limiter",
            "gcra:rate=1/s,burst=1",
            "--limiter",
            "concurrency:limit=2",
            "--limiter",
            "token-bucket:rate=10/s,burst=2",
            "--trace",
            "-",
        ],
        "0,a\n0,a\n0.5,a,1,release\nnot-a-time,a\n",
    )?;
    assert_eq!(answers.len(), 12);
    let indices: Vec<u64> = answers
        .iter()
        .map(|a| a["limiter"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(indices, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]);
    let allowed: Vec<&serde_json::Value> = answers.iter().map(|a| &a["allowed"]).collect();
    // Second request at t=0: the GCRA of burst 1 says no, the other two say yes.
    assert_eq!(allowed[3..6], [&json!(false), &json!(true), &json!(true)]);
    // Release: only the concurrency limit takes it.
    assert_eq!(answers[6]["error"], json!("gcra does not support release"));
    assert_eq!(answers[7]["remaining"], json!(1));
    assert_eq!(
        answers[8]["error"],
        json!("token-bucket does not support release")
    );
    // A bad line: an error line for every limiter, without a time.
    for answer in &answers[9..] {
        assert_eq!(answer["t"], json!(null));
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("bad t"))
        );
    }
    Ok(())
}

#[test]
fn a_single_limiter_carries_no_index() -> TestResult {
    let answers = lines(&["--limiter", "concurrency:limit=1"], "0,a\n")?;
    assert_eq!(answers.len(), 1);
    assert!(answers[0].get("limiter").is_none());
    Ok(())
}
