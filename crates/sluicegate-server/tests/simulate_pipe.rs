//! Another program drives `simulate --trace -` through a pipe, one event at a time: each answer
//! must arrive before the next event is written, which only works if every line is flushed as
//! its event is read.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{TestResult, allowed, denied};
use serde_json::Value;

/// Long enough for any machine; only there so a missing flush fails instead of hanging.
const HANG_GUARD: Duration = Duration::from_secs(60);

#[test]
fn answers_each_event_before_the_next_is_sent() -> TestResult {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args([
            "simulate",
            "--limiter",
            "gcra:rate=10/s,burst=2",
            "--trace",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (send, answers) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if send.send(line).is_err() {
                break;
            }
        }
    });

    let conversation = [
        ("t,key,permits,op", None),
        ("# a comment gets no answer either", None),
        ("0,a", Some(allowed(0.0, "a", 2, 1, 0.1))),
        ("0,a", Some(allowed(0.0, "a", 2, 0, 0.2))),
        ("0.05,a", Some(denied(0.05, "a", 2, 0.15, 0.05))),
        ("0.1,a", Some(allowed(0.1, "a", 2, 0, 0.2))),
        ("0.1,b", Some(allowed(0.1, "b", 2, 1, 0.1))),
        (
            "0.2,a,1,bogus",
            Some(
                serde_json::json!({"t": 0.2, "error": "unknown op `bogus` (ops: check, peek, charge, acquire, try:SECONDS, set_rate:RATE, release)"}),
            ),
        ),
        ("0.3,a", Some(allowed(0.3, "a", 2, 1, 0.1))),
    ];
    for (event, expected) in conversation {
        writeln!(stdin, "{event}")?;
        stdin.flush()?;
        let Some(expected) = expected else { continue };
        let line = answers.recv_timeout(HANG_GUARD)??;
        let answer: Value = serde_json::from_str(&line)?;
        assert_eq!(answer, expected, "answer to `{event}`");
    }
    drop(stdin);
    assert!(
        answers.recv_timeout(HANG_GUARD).is_err(),
        "no line beyond one per event"
    );
    assert!(child.wait()?.success());
    reader.join().map_err(|_| "reader thread panicked")?;
    Ok(())
}

/// The use the pipe is for: a driver that sends each `acquire` at the time the previous wait
/// ends, learning that time from the answer. Guava's warm-up vector, create(2.0, 4s, cold 3).
#[test]
fn a_driver_sleeps_the_waits_it_is_told() -> TestResult {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args([
            "simulate",
            "--limiter",
            "smooth-warmup:rate=2,warmup=4s,cold_factor=3",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (send, answers) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut now_us: u64 = 0;
    let mut waits_us = Vec::new();
    for _ in 0..8 {
        writeln!(
            stdin,
            "{}.{:06},a,1,acquire",
            now_us / 1_000_000,
            now_us % 1_000_000
        )?;
        stdin.flush()?;
        let answer: Value = serde_json::from_str(&answers.recv_timeout(HANG_GUARD)??)?;
        let wait = answer["wait"].as_f64().ok_or("no wait")?;
        let wait_us = (wait * 1e6).round() as u64;
        waits_us.push(wait_us);
        now_us += wait_us;
    }
    drop(stdin);
    assert_eq!(
        waits_us,
        [
            0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000, 500_000, 500_000
        ]
    );
    assert!(child.wait()?.success());
    reader.join().map_err(|_| "reader thread panicked")?;
    Ok(())
}
