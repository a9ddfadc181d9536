//! Running the built `sluicegate` binary in tests.

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Runs `sluicegate simulate ARGS` with `stdin` as its standard input.
pub fn simulate(args: &[&str], stdin: &str) -> Result<Output, Box<dyn std::error::Error>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .arg("simulate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().ok_or("no stdin")?;
    // A run that stops early (a usage error) closes its end: not the test's failure.
    match input.write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    drop(input);
    Ok(child.wait_with_output()?)
}

/// The JSON lines of a successful run.
pub fn lines(args: &[&str], stdin: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let output = simulate(args, stdin)?;
    if !output.status.success() {
        return Err(format!(
            "exit {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    parse_lines(&output.stdout)
}

pub fn parse_lines(stdout: &[u8]) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let text = std::str::from_utf8(stdout)?;
    text.lines()
        .map(|line| serde_json::from_str(line).map_err(|e| format!("{e}: {line}").into()))
        .collect()
}

/// A decision line as DESIGN section 5 shows it.
#[allow(clippy::too_many_arguments)]
pub fn decision(
    t: f64,
    key: &str,
    permits: u64,
    op: &str,
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: f64,
    retry_after: Option<f64>,
    wait: f64,
) -> Value {
    serde_json::json!({
        "t": t, "key": key, "permits": permits, "op": op, "allowed": allowed, "limit": limit,
        "remaining": remaining, "reset_after": reset_after, "retry_after": retry_after,
        "wait": wait,
    })
}

/// `decision` for an allowed request with no wait.
pub fn allowed(t: f64, key: &str, limit: u64, remaining: u64, reset_after: f64) -> Value {
    decision(
        t,
        key,
        1,
        "check",
        true,
        limit,
        remaining,
        reset_after,
        None,
        0.0,
    )
}

/// `decision` for a denied check of one permit.
pub fn denied(t: f64, key: &str, limit: u64, reset_after: f64, retry_after: f64) -> Value {
    decision(
        t,
        key,
        1,
        "check",
        false,
        limit,
        0,
        reset_after,
        Some(retry_after),
        0.0,
    )
}
