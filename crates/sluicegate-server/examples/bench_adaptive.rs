//! The adaptive-limit benchmark (`scripts/bench-adaptive.sh` runs it): every controller on
//! every scenario of `examples/adaptive/`, against no limit, against the best fixed limit
//! chosen in hindsight, and against the `congestion-limiter` crate's AIMD, Vegas and Gradient
//! on the same simulated clients and server. Prints a Markdown table and writes one plot per
//! scenario.
//!
//! ```text
//! cargo run --release -p sluicegate-server --example bench_adaptive -- \
//!     --plots docs/adaptive examples/adaptive/*.args
//! ```
//!
//! `congestion-limiter` is a dev-dependency only: its limiter measures latency on tokio's
//! clock, so it runs here on a current-thread runtime whose clock is paused and advanced to
//! each event's time, which keeps its runs as deterministic as ours.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Duration;

use congestion_limiter::limiter::{DefaultLimiter, Limiter, Outcome as TheirOutcome, Token};
use congestion_limiter::limits::{self, LimitAlgorithm};
use sluicegate::adaptive::Outcome;
use sluicegate::{Micros, micros_ceil, parse_duration};
use sluicegate_server::simulate::adaptive::{
    ControllerSpec, Gate, LimiterGate, Panel, Run, Scenario, ServerSpec, TrafficSpec, simulate,
    write_svg,
};

/// Our controllers, each at its defaults. The percentile controller has no default target:
/// 150 ms is about 1.6 times the unloaded p99 of the scenarios' 20 ms service. Vegas and
/// Gradient2 also run on windows (Netflix's `WindowedLimit`, the average latency per window):
/// with exponential service times the fastest request of thousands takes almost nothing, so
/// per-request Vegas sees a queue in nearly every sample.
const CONTROLLERS: [&str; 7] = [
    "aimd",
    "vegas",
    "gradient2",
    "envoy-gradient",
    "percentile:target=150ms",
    "vegas:window=100ms",
    "gradient2:window=1s",
];

/// The fixed limits swept to find the best in hindsight.
const FIXED: [u32; 24] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 18, 20, 24, 28, 32, 40, 50, 64, 100, 200,
];

/// congestion-limiter's initial limit: Netflix's usual 20, as ours start.
const THEIR_INITIAL: usize = 20;

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let mut plots: Option<PathBuf> = None;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--plots" => plots = Some(args.next().ok_or("--plots needs a directory")?.into()),
            _ => files.push(PathBuf::from(arg)),
        }
    }
    if files.is_empty() {
        return Err("usage: bench_adaptive [--plots DIR] SCENARIO.args...".into());
    }
    let mut results = Vec::new();
    for file in &files {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or("a scenario file needs a name")?
            .to_owned();
        let scenario = read_scenario(file)?;
        eprintln!("{name}: running");
        let result = bench(&name, &scenario)?;
        if let Some(dir) = &plots {
            std::fs::create_dir_all(dir)?;
            let panels: Vec<Panel<'_>> = result
                .rows
                .iter()
                .filter_map(|row| {
                    Some(Panel {
                        title: &row.name,
                        run: row.run.as_ref().ok()?,
                    })
                })
                .collect();
            write_svg(&dir.join(format!("{name}.svg")), &scenario.server, &panels)?;
        }
        results.push((name, scenario, result));
    }
    print_tables(&results);
    Ok(())
}

/// Reads a scenario file: `--flag value` lines as `sluicegate simulate` takes them, `#`
/// comments.
fn read_scenario(path: &Path) -> Result<Scenario, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let (mut server, mut traffic, mut timeout, mut seed) = (None, None, 1_000_000, 0);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (flag, value) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("{}: expected `--flag value`: {line}", path.display()))?;
        let value = value.trim();
        match flag {
            "--server" => server = Some(ServerSpec::parse(value)?),
            "--traffic" => traffic = Some(TrafficSpec::parse(value)?),
            "--client-timeout" => timeout = micros_ceil(parse_duration(value)?),
            "--seed" => seed = value.parse()?,
            _ => return Err(format!("{}: unknown flag {flag}", path.display()).into()),
        }
    }
    Ok(Scenario {
        server: server.ok_or("a scenario needs --server")?,
        traffic: traffic.ok_or("a scenario needs --traffic")?,
        client_timeout: timeout,
        seed,
    })
}

/// One gate's run on one scenario, or how it failed.
struct Row {
    name: String,
    run: Result<Run, String>,
}

/// Every gate's run on one scenario, and the best fixed limit's goodput.
struct Bench {
    rows: Vec<Row>,
    best_fixed: u64,
}

fn bench(name: &str, scenario: &Scenario) -> Result<Bench, Failure> {
    let ours = |spec: &str| -> Result<(String, Run), Failure> {
        let spec = ControllerSpec::parse(spec)?;
        let run = simulate(
            scenario,
            &mut LimiterGate::new(spec.controller(scenario.seed)),
        );
        Ok((spec.to_string(), run))
    };
    let row = |(name, run): (String, Run)| Row { name, run: Ok(run) };
    let mut rows = vec![row(ours("none")?)];
    // The best fixed limit: the most goodput, and of equals the lowest p99.
    let mut fixed = Vec::new();
    for limit in FIXED {
        fixed.push(ours(&format!("fixed:limit={limit}"))?);
    }
    let best = fixed
        .iter()
        .max_by_key(|(_, run)| (run.goodput(), std::cmp::Reverse(p99(run))))
        .ok_or("no fixed limit ran")?;
    let best_fixed = best.1.goodput();
    // Goodput is flat over a wide range of limits (anything from the workers to the queue
    // that reaches the client timeout), so the best by goodput alone may queue a lot: the
    // smallest limit within 1% of it shows what a fixed limit costs in latency.
    let lean = fixed
        .iter()
        .find(|(_, run)| run.goodput() as f64 >= 0.99 * best_fixed as f64)
        .ok_or("no fixed limit ran")?;
    rows.push(row((format!("best fixed ({})", best.0), best.1.clone())));
    rows.push(row((
        format!("smallest fixed within 1% ({})", lean.0),
        lean.1.clone(),
    )));
    for spec in CONTROLLERS {
        eprintln!("{name}: {spec}");
        rows.push(row(ours(spec)?));
    }
    eprintln!("{name}: congestion-limiter");
    rows.push(theirs(
        "congestion-limiter aimd",
        scenario,
        limits::Aimd::new_with_initial_limit(THEIR_INITIAL),
    )?);
    rows.push(theirs(
        "congestion-limiter vegas",
        scenario,
        limits::Vegas::new_with_initial_limit(THEIR_INITIAL),
    )?);
    rows.push(theirs(
        "congestion-limiter gradient",
        scenario,
        limits::Gradient::new_with_initial_limit(THEIR_INITIAL),
    )?);
    Ok(Bench { rows, best_fixed })
}

/// A run's p99 in whole microseconds, for comparisons (no answers at all is the worst).
fn p99(run: &Run) -> u64 {
    run.p99_ms.map_or(u64::MAX, |ms| (ms * 1e3) as u64)
}

fn theirs<L>(name: &str, scenario: &Scenario, algorithm: L) -> Result<Row, Failure>
where
    L: LimitAlgorithm + Sync + Debug + Send + 'static,
{
    let mut gate = TheirGate::new(algorithm)?;
    let started = std::time::Instant::now();
    // A panic inside their limiter is a result to report, not the end of the benchmark; the
    // default hook would print a backtrace in the middle of the table.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        simulate(scenario, &mut gate)
    }));
    std::panic::set_hook(hook);
    eprintln!("  {name}: {:.1} s", started.elapsed().as_secs_f64());
    let run = run.map_err(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("panicked: {message}")
    });
    Ok(Row {
        name: name.to_owned(),
        run,
    })
}

/// congestion-limiter's `DefaultLimiter` on a paused tokio clock that follows the
/// simulation's.
struct TheirGate<L> {
    runtime: tokio::runtime::Runtime,
    limiter: DefaultLimiter<L>,
    now: Micros,
}

impl<L: LimitAlgorithm + Sync + Debug + Send + 'static> TheirGate<L> {
    fn new(algorithm: L) -> Result<Self, Failure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        Ok(TheirGate {
            runtime,
            limiter: DefaultLimiter::new(algorithm),
            now: 0,
        })
    }

    /// Moves tokio's paused clock, by which the limiter times its tokens, to `now`.
    fn advance(&mut self, now: Micros) {
        if now > self.now {
            let step = Duration::from_micros(now - self.now);
            self.runtime.block_on(tokio::time::advance(step));
            self.now = now;
        }
    }
}

impl<L: LimitAlgorithm + Sync + Debug + Send + 'static> Gate for TheirGate<L> {
    type Ticket = Token;

    fn try_admit(&mut self, now: Micros) -> Option<Token> {
        self.advance(now);
        self.runtime.block_on(self.limiter.try_acquire())
    }

    fn finish(&mut self, now: Micros, token: Token, outcome: Outcome) {
        self.advance(now);
        // Their outcomes are success or overload; a late answer is the overload they mean.
        let outcome = match outcome {
            Outcome::Ok => TheirOutcome::Success,
            _ => TheirOutcome::Overload,
        };
        let limiter = &self.limiter;
        self.runtime.block_on(async {
            limiter.release(token, Some(outcome)).await;
            // A lower limit takes effect in a spawned task that takes the permits away:
            // yielding once lets it run now, before the next arrival, rather than whenever
            // the runtime next gets around to it.
            tokio::task::yield_now().await;
        });
    }

    fn limit(&self) -> Option<u32> {
        u32::try_from(self.limiter.state().limit()).ok()
    }
}

/// What the issue's targets look at, for one run.
struct Measures {
    /// Goodput over the capacity the server had, second by second.
    goodput_share: f64,
    /// Goodput over the best fixed limit's.
    vs_best_fixed: f64,
    p99_ms: Option<f64>,
    /// After the first halving of the workers: seconds until p99 stays under twice the
    /// unloaded p99 up to the next change; `None` if it never does.
    recovery_s: Option<Option<u64>>,
}

fn measure(scenario: &Scenario, bench: &Bench, run: &Run) -> Measures {
    let server = &scenario.server;
    let capacity: f64 = run
        .seconds
        .iter()
        .map(|s| server.capacity_at((s.t - 1) * 1_000_000))
        .sum();
    let goodput = run.goodput() as f64;
    Measures {
        goodput_share: goodput / capacity,
        vs_best_fixed: goodput / bench.best_fixed.max(1) as f64,
        p99_ms: run.p99_ms,
        recovery_s: recovery(server, run),
    }
}

fn recovery(server: &ServerSpec, run: &Run) -> Option<Option<u64>> {
    let mut workers = server.workers();
    let changes = server.changes();
    let (index, (halved_at, _)) = changes.iter().enumerate().find(|(_, (_, w))| {
        let halved = *w * 2 <= workers;
        workers = *w;
        halved
    })?;
    let halved_s = halved_at.div_ceil(1_000_000);
    let until_s = changes
        .get(index + 1)
        .map_or(u64::MAX, |(t, _)| t / 1_000_000);
    let limit_ms = 2.0 * server.unloaded_p99() / 1e3;
    // Seconds ending after the halving and before the next change; a second with no answer at
    // all counts as slow (nothing got through).
    let seconds: Vec<_> = run
        .seconds
        .iter()
        .filter(|s| s.t > halved_s && s.t <= until_s)
        .collect();
    let last_slow = seconds
        .iter()
        .rev()
        .find(|s| s.p99_ms.is_none_or(|p| p >= limit_ms));
    Some(match last_slow {
        None => Some(0),
        Some(s) if Some(s.t) == seconds.last().map(|l| l.t) => None,
        Some(s) => Some(s.t - halved_s),
    })
}

fn print_tables(results: &[(String, Scenario, Bench)]) {
    println!(
        "Goodput is answers within the client timeout, as a share of the capacity the server \
         had; \"vs best\" divides it by the best fixed limit's. p99 is over every answered \
         request. Recovery: seconds after capacity halves until each second's p99 stays under \
         twice the unloaded p99 (ln(100) x the mean service time), up to the restore.\n"
    );
    for (name, scenario, bench) in results {
        println!(
            "### {name} (unloaded p99 {:.0} ms)\n",
            scenario.server.unloaded_p99() / 1e3
        );
        let halving = scenario
            .server
            .changes()
            .iter()
            .any(|(_, w)| *w < scenario.server.workers());
        print!("| limit | goodput | vs best fixed | p99 ms |");
        println!("{}", if halving { " recovery |" } else { "" });
        print!("|---|---:|---:|---:|");
        println!("{}", if halving { "---:|" } else { "" });
        for row in &bench.rows {
            let run = match &row.run {
                Ok(run) => run,
                Err(error) => {
                    println!("| {} | {error} |", row.name);
                    continue;
                }
            };
            let m = measure(scenario, bench, run);
            print!(
                "| {} | {:.1}% | {:.1}% | {} |",
                row.name,
                100.0 * m.goodput_share,
                100.0 * m.vs_best_fixed,
                m.p99_ms
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:.0}"))
            );
            match m.recovery_s {
                Some(Some(s)) => println!(" {s} s |"),
                Some(None) => println!(" never |"),
                None => println!(),
            }
        }
        println!();
    }
    targets(results);
}

/// The issue's three targets, per gate: goodput within 10% of the best fixed limit on every
/// scenario; p99 back under 2x the unloaded p99 within 10 s of the halving; at least 90% of
/// capacity at 3x overload.
fn targets(results: &[(String, Scenario, Bench)]) {
    println!("### Targets\n");
    println!(
        "| limit | within 10% of best fixed (worst) | recovery ≤ 10 s | ≥ 90% at 3x overload |"
    );
    println!("|---|---|---|---|");
    let Some((_, _, first)) = results.first() else {
        return;
    };
    for (index, row) in first.rows.iter().enumerate() {
        let mut worst: Option<f64> = None;
        let mut recovery = None;
        let mut overload = None;
        let mut failed = false;
        for (name, scenario, bench) in results {
            let Some(run) = bench.rows.get(index).and_then(|r| r.run.as_ref().ok()) else {
                failed = true;
                continue;
            };
            let m = measure(scenario, bench, run);
            worst = Some(worst.map_or(m.vs_best_fixed, |w| w.min(m.vs_best_fixed)));
            if let Some(r) = m.recovery_s {
                recovery = Some(r);
            }
            if name.contains("overload") {
                overload = Some(m.goodput_share);
            }
        }
        let yes = |ok: bool| if ok { "yes" } else { "**no**" };
        // The best fixed limit differs between scenarios: the row is named for what it is.
        let name = row.name.split(" (").next().unwrap_or(&row.name);
        if failed {
            println!("| {name} | **no** (failed to run) | | |");
            continue;
        }
        println!(
            "| {name} | {} | {} | {} |",
            worst.map_or("-".to_owned(), |w| format!(
                "{} ({:.1}%)",
                yes(w >= 0.9),
                100.0 * w
            )),
            match recovery {
                Some(Some(s)) => format!("{} ({s} s)", yes(s <= 10)),
                Some(None) => format!("{} (never)", yes(false)),
                None => "-".to_owned(),
            },
            overload.map_or("-".to_owned(), |g| format!(
                "{} ({:.1}%)",
                yes(g >= 0.9),
                100.0 * g
            )),
        );
    }
}
