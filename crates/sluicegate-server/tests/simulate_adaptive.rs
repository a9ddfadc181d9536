//! `simulate --adaptive`: a limit in front of a simulated M/M/c server, one JSON line per
//! simulated second.

mod common;

use common::{TestResult, lines, simulate};
use serde_json::Value;

/// 10 workers at a mean of 20 ms: 500 requests a second.
const SERVER: &str = "mmc:workers=10,service=20ms";
const CAPACITY: f64 = 500.0;

fn run(
    controller: &str,
    server: &str,
    traffic: &str,
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    lines(
        &[
            "--adaptive",
            controller,
            "--server",
            server,
            "--traffic",
            traffic,
            "--seed",
            "7",
        ],
        "",
    )
}

fn field(second: &Value, name: &str) -> f64 {
    second[name].as_f64().unwrap_or(f64::NAN)
}

/// Goodput per second over seconds `from..to` (1-based ends, as `t` counts them).
fn goodput(seconds: &[Value], from: u64, to: u64) -> f64 {
    let chosen: Vec<&Value> = seconds
        .iter()
        .filter(|s| (from..to).contains(&s["t"].as_u64().unwrap_or(0)))
        .collect();
    chosen.iter().map(|s| field(s, "goodput")).sum::<f64>() / chosen.len().max(1) as f64
}

#[test]
fn the_same_seed_gives_the_same_bytes() -> TestResult {
    let args = |seed: &'static str| {
        [
            "--adaptive",
            "gradient2",
            "--adaptive",
            "vegas",
            "--adaptive",
            "envoy-gradient",
            "--adaptive",
            "percentile:target=100ms",
            "--server",
            "mmc:workers=10,service=20ms,change=10s:5",
            "--traffic",
            "poisson:rate=800/s,duration=20s",
            "--seed",
            seed,
        ]
    };
    let first = simulate(&args("3"), "")?;
    let again = simulate(&args("3"), "")?;
    let other = simulate(&args("4"), "")?;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(first.stdout, again.stdout);
    assert_ne!(first.stdout, other.stdout);
    let seconds = common::parse_lines(&first.stdout)?;
    // Four controllers, twenty seconds, interleaved second by second.
    assert_eq!(seconds.len(), 4 * 20);
    assert_eq!(seconds[0]["controller"], 0);
    assert_eq!(seconds[3]["controller"], 3);
    assert_eq!(seconds[4]["t"], 2);
    Ok(())
}

#[test]
fn no_limit_collapses_under_overload_where_a_fixed_limit_holds() -> TestResult {
    let traffic = "poisson:rate=1500/s,duration=30s";
    let none = run("none", SERVER, traffic)?;
    let fixed = run("fixed:limit=20", SERVER, traffic)?;
    assert_eq!(none.len(), 30);
    // Without a limit the queue grows by 1000 a second: after a few seconds every answer
    // comes after its client's second is up, so the server works flat out for nobody.
    let collapsed = goodput(&none, 5, 31);
    assert!(collapsed < 0.05 * CAPACITY, "no limit: {collapsed}/s");
    assert!(none.iter().all(|s| s["limit"].is_null()));
    assert!(field(&none[29], "in_flight") > 20_000.0);
    assert!(field(&none[29], "timed_out") > 1000.0);
    // A limit of twice the workers keeps the queue short: nearly all of the capacity is
    // goodput, and two thirds of the arrivals are rejected.
    let held = goodput(&fixed, 2, 31);
    assert!(held > 0.9 * CAPACITY, "fixed: {held}/s");
    for second in &fixed {
        assert_eq!(second["limit"], 20);
        assert!(field(second, "in_flight") <= 20.0);
        assert_eq!(second["timed_out"], 0);
        assert!(field(second, "p99_ms") < 400.0, "{second}");
    }
    let rejected: f64 = fixed.iter().map(|s| field(s, "rejected")).sum();
    let arrivals: f64 = fixed.iter().map(|s| field(s, "arrivals")).sum();
    assert!(
        (0.6..0.72).contains(&(rejected / arrivals)),
        "{rejected} / {arrivals}"
    );
    Ok(())
}

#[test]
fn worker_changes_take_effect_at_their_time() -> TestResult {
    // Overloaded throughout, with a limit high enough never to bind the workers: goodput is
    // the workers' rate, 500/s, then 100/s from t = 10 s, then 500/s again from t = 20 s.
    let seconds = run(
        "fixed:limit=60",
        "mmc:workers=10,service=20ms,change=10s:2,change=20s:10",
        "poisson:rate=1500/s,duration=30s",
    )?;
    let before = goodput(&seconds, 2, 11);
    let during = goodput(&seconds, 12, 21);
    let after = goodput(&seconds, 22, 31);
    assert!((450.0..550.0).contains(&before), "{before}");
    assert!((80.0..120.0).contains(&during), "{during}");
    assert!((450.0..550.0).contains(&after), "{after}");
    // The second just before the change is at full rate, the one just after it not.
    assert!(field(&seconds[9], "goodput") > 400.0, "{}", seconds[9]);
    assert!(field(&seconds[10], "goodput") < 250.0, "{}", seconds[10]);
    assert!(field(&seconds[20], "goodput") > 400.0, "{}", seconds[20]);
    Ok(())
}

#[test]
fn an_adaptive_limit_keeps_overload_from_collapsing() -> TestResult {
    // Gradient2 at 3x capacity: it must find a limit, not collapse as no limit does.
    let seconds = run("gradient2", SERVER, "poisson:rate=1500/s,duration=30s")?;
    let held = goodput(&seconds, 5, 31);
    assert!(held > 0.8 * CAPACITY, "{held}/s");
    assert!(seconds.iter().all(|s| s["limit"].as_u64().is_some()));
    Ok(())
}

#[test]
fn the_plot_has_a_panel_per_controller() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("adaptive.svg");
    let output = simulate(
        &[
            "--adaptive",
            "none",
            "--adaptive",
            "fixed:limit=20",
            "--server",
            "mmc:workers=10,service=20ms,change=5s:5",
            "--traffic",
            "poisson:rate=600/s,duration=10s",
            "--plot",
            path.to_str().ok_or("path")?,
        ],
        "",
    )?;
    assert!(output.status.success());
    let svg = std::fs::read_to_string(&path)?;
    assert_eq!(svg.matches(r#"class="panel""#).count(), 2);
    assert!(svg.contains("fixed:limit=20"));
    assert!(svg.contains("<polyline"));
    // The worker change, in each of the three charts of both panels.
    assert_eq!(svg.matches(r#"class="change""#).count(), 6);
    Ok(())
}

#[test]
fn bad_flags_name_the_problem() -> TestResult {
    let server = ["--server", SERVER];
    let traffic = ["--traffic", "poisson:rate=10/s,duration=1s"];
    for (args, needle) in [
        (vec!["--adaptive", "bogus"], "unknown controller `bogus`"),
        (
            vec!["--adaptive", "aimd:min=5,max=4"],
            "min (5) must not exceed max (4)",
        ),
        (
            vec!["--adaptive", "aimd:max=10"],
            "default initial (20) must not exceed max (10)",
        ),
        (vec!["--adaptive", "aimd:backoff=2"], "invalid backoff `2`"),
        (vec!["--adaptive", "vegas:alpha=x"], "invalid alpha `x`"),
        (
            vec!["--adaptive", "vegas:speed=2"],
            "unknown parameter `speed` for vegas",
        ),
        (
            vec!["--adaptive", "percentile:target=1s,multiple=3"],
            "a fixed `target` or a relative `multiple`, not both",
        ),
        (
            vec!["--adaptive", "aimd", "--limits", "min=0"],
            "bad min `0`",
        ),
        (
            vec![
                "--adaptive",
                "aimd",
                "--client",
                "poisson:rate=1/s,duration=1s@soon",
            ],
            "bad start `soon`",
        ),
        (
            vec![
                "--adaptive",
                "aimd",
                "--server",
                "mmc:workers=1,service=1ms,fail=2",
            ],
            "bad fail `2`",
        ),
        (
            vec!["--adaptive", "percentile:target=50ms,p=2"],
            "invalid p `2`",
        ),
        (vec!["--adaptive", "fixed"], "missing parameter `limit`"),
        (vec!["--adaptive", "fixed:limit=0"], "invalid limit `0`"),
        (
            vec!["--adaptive", "none:min=1"],
            "unknown parameter `min` for none",
        ),
        (
            vec!["--adaptive", "envoy-gradient:min=5,initial=5,pinned=2"],
            "min (5) must not exceed pinned (2)",
        ),
        (
            vec![
                "--adaptive",
                "aimd",
                "--server",
                "mmc:workers=0,service=1ms",
            ],
            "bad workers `0`",
        ),
        (
            vec!["--adaptive", "aimd", "--server", "mmc:workers=1"],
            "missing parameter `service`",
        ),
        (
            vec!["--adaptive", "aimd", "--client-timeout", "0s"],
            "must be more than zero",
        ),
        (
            vec!["--adaptive", "aimd", "--limiter", "gcra:rate=1/s,burst=1"],
            "--limiter",
        ),
        (
            vec![
                "--client-timeout",
                "1s",
                "--limiter",
                "gcra:rate=1/s,burst=1",
            ],
            "--limiter",
        ),
        (
            vec!["--limiter", "gcra:rate=1/s,burst=1"],
            "cannot be used with '--server <SERVER>'",
        ),
    ] {
        let mut full: Vec<&str> = args.clone();
        if !args.contains(&"--server") {
            full.extend(server);
        }
        full.extend(traffic);
        let output = simulate(&full, "")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    // Without --server or --traffic there is nothing to simulate.
    for args in [
        vec![
            "--adaptive",
            "aimd",
            "--traffic",
            "poisson:rate=1/s,duration=1s",
        ],
        vec!["--adaptive", "aimd", "--server", SERVER],
    ] {
        let output = simulate(&args, "")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("required"), "{args:?}: {stderr}");
    }
    Ok(())
}
