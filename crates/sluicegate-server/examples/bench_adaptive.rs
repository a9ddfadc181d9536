//! The adaptive-limit benchmark (`scripts/bench-adaptive.sh` runs it): every controller on
//! every scenario of `examples/adaptive/`, each over a sweep of seeds, against no limit,
//! against the best fixed limit chosen in hindsight, and against the `congestion-limiter`
//! crate's AIMD, Vegas and Gradient on the same simulated clients and server. Prints Markdown
//! tables and the targets of issue 33, and writes one plot per scenario (its file's seed).
//!
//! ```text
//! cargo run --release -p sluicegate-server --example bench_adaptive -- \
//!     --seeds 1,2,3 --plots docs/adaptive examples/adaptive/*.args
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
use sluicegate::Micros;
use sluicegate::adaptive::Outcome;
use sluicegate::clock::micros_ceil;
use sluicegate::rate::parse_duration;
use sluicegate_server::simulate::adaptive::{
    ControllerSpec, Gate, LimitsSpec, Load, Panel, Run, Scenario, ServerSpec, TrafficSpec, run_one,
    simulate, write_svg,
};

/// Our controllers, each at its defaults (with the scenario's `--limits`). The windowed ones
/// hear one summary per window (Netflix's `WindowedLimit`, the average latency).
const CONTROLLERS: [&str; 8] = [
    "aimd",
    "vegas",
    "gradient2",
    "envoy-gradient",
    "percentile",
    "aimd:window=1s",
    "vegas:window=100ms",
    "gradient2:window=1s",
];

/// The controllers the docs recommend (docs/adaptive/README.md): the targets are theirs.
const RECOMMENDED: [&str; 2] = ["gradient2", "percentile"];

/// The fixed limits swept to find the best in hindsight.
const FIXED: [u32; 26] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 18, 20, 24, 28, 32, 40, 50, 64, 100, 150, 200,
    400,
];

/// congestion-limiter's initial limit when a scenario sets none: Netflix's usual 20.
const THEIR_INITIAL: usize = 20;

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let mut plots: Option<PathBuf> = None;
    let mut seeds: Vec<u64> = vec![1, 2, 3];
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--plots" => plots = Some(args.next().ok_or("--plots needs a directory")?.into()),
            "--seeds" => {
                seeds = args
                    .next()
                    .ok_or("--seeds needs a list, such as 1,2,3")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            _ => files.push(PathBuf::from(arg)),
        }
    }
    if files.is_empty() || seeds.is_empty() {
        return Err("usage: bench_adaptive [--seeds 1,2,3] [--plots DIR] SCENARIO.args...".into());
    }
    let mut results = Vec::new();
    for file in &files {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or("a scenario file needs a name")?
            .to_owned();
        let scenario = read_scenario(file)?;
        if let Some(dir) = &plots {
            eprintln!("{name}: plot (seed {})", scenario.seed);
            let bench = bench(&scenario)?;
            std::fs::create_dir_all(dir)?;
            let panels: Vec<Panel<'_>> = bench
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
        let mut runs = Vec::new();
        for &seed in &seeds {
            eprintln!("{name}: seed {seed}");
            let scenario = Scenario {
                seed,
                ..scenario.clone()
            };
            let bench = bench(&scenario)?;
            runs.push((scenario, bench));
        }
        results.push((name, runs));
    }
    print_tables(&results, &seeds);
    Ok(())
}

/// Reads a scenario file: `--flag value` lines as `sluicegate simulate` takes them, `#`
/// comments.
fn read_scenario(path: &Path) -> Result<Scenario, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let (mut server, mut traffic, mut timeout, mut seed) = (None, None, 1_000_000, 0);
    let (mut loads, mut limits, mut clients) = (Vec::new(), None, 0);
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
            "--extra-traffic" | "--client" => {
                let (generator, start) = match value.rsplit_once('@') {
                    Some((generator, start)) => (generator, micros_ceil(parse_duration(start)?)),
                    None => (value, 0),
                };
                if flag == "--client" {
                    clients += 1;
                }
                loads.push(Load {
                    client: if flag == "--client" { clients } else { 0 },
                    traffic: TrafficSpec::parse(generator)?,
                    start,
                });
            }
            "--limits" => limits = Some(LimitsSpec::parse(value)?),
            "--client-timeout" => timeout = micros_ceil(parse_duration(value)?),
            "--seed" => seed = value.parse()?,
            _ => return Err(format!("{}: unknown flag {flag}", path.display()).into()),
        }
    }
    Ok(Scenario {
        server: server.ok_or("a scenario needs --server")?,
        traffic: traffic.ok_or("a scenario needs --traffic")?,
        loads,
        client_timeout: timeout,
        seed,
        limits,
    })
}

/// One gate's run on one scenario and seed, or how it failed, and its lowest limit.
struct Row {
    name: String,
    run: Result<Run, String>,
    min_limit: Option<u32>,
}

/// Every gate's run on one scenario and seed, and the best fixed limit's goodput (over the
/// run, and from 10 s after a drop of the workers).
struct Bench {
    rows: Vec<Row>,
    best_fixed: u64,
    best_fixed_settled: Option<u64>,
}

fn bench(scenario: &Scenario) -> Result<Bench, Failure> {
    let ours = |text: &str| -> Result<Row, Failure> {
        let spec: ControllerSpec = text.parse()?;
        let spec = match &scenario.limits {
            Some(limits) => limits.apply(&spec)?,
            None => spec,
        };
        Ok(Row {
            name: text.to_owned(),
            run: Ok(run_one(&spec, scenario)?),
            min_limit: spec.build(0)?.bounds().map(|bounds| bounds.min()),
        })
    };
    let mut rows = vec![ours("none")?];
    // The best fixed limit: the most goodput, and of equals the lowest p99.
    let mut fixed = Vec::new();
    for limit in FIXED {
        fixed.push(ours(&format!("fixed:limit={limit}"))?);
    }
    let goodput = |row: &Row| row.run.as_ref().map_or(0, Run::goodput);
    let best = fixed
        .iter()
        .max_by_key(|row| (goodput(row), std::cmp::Reverse(p99(row))))
        .ok_or("no fixed limit ran")?;
    let best_fixed = goodput(best);
    let best_fixed_settled = best
        .run
        .as_ref()
        .ok()
        .and_then(|run| settled_goodput(&scenario.server, run));
    rows.push(Row {
        name: format!("best fixed ({})", best.name),
        run: best.run.clone(),
        min_limit: None,
    });
    for spec in CONTROLLERS {
        rows.push(ours(spec)?);
    }
    let initial = scenario
        .limits
        .and_then(|l| l.initial())
        .map_or(THEIR_INITIAL, |n| n as usize);
    rows.push(theirs("congestion-limiter aimd", scenario, || {
        limits::Aimd::new_with_initial_limit(initial)
    })?);
    rows.push(theirs("congestion-limiter vegas", scenario, || {
        limits::Vegas::new_with_initial_limit(initial)
    })?);
    rows.push(theirs("congestion-limiter gradient", scenario, || {
        limits::Gradient::new_with_initial_limit(initial)
    })?);
    Ok(Bench {
        rows,
        best_fixed,
        best_fixed_settled,
    })
}

/// A run's p99 in whole microseconds, for comparisons (no answers at all is the worst).
fn p99(row: &Row) -> u64 {
    row.run
        .as_ref()
        .ok()
        .and_then(|run| run.p99_ms)
        .map_or(u64::MAX, |ms| (ms * 1e3) as u64)
}

fn theirs<L>(name: &str, scenario: &Scenario, algorithm: impl Fn() -> L) -> Result<Row, Failure>
where
    L: LimitAlgorithm + Sync + Debug + Send + 'static,
{
    let mut gates = (0..scenario.clients())
        .map(|_| TheirGate::new(algorithm()))
        .collect::<Result<Vec<_>, _>>()?;
    // A panic inside their limiter is a result to report, not the end of the benchmark; the
    // default hook would print a backtrace in the middle of the table.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        simulate(scenario, &mut gates)
    }));
    std::panic::set_hook(hook);
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
        // Their limits' floor is 1.
        min_limit: Some(1),
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
        // Their outcomes are success or overload; a late answer or an error is the overload
        // they mean.
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
#[derive(Debug, Clone, Copy)]
struct Measures {
    /// Goodput over the best fixed limit's.
    vs_best_fixed: f64,
    p99_ms: Option<f64>,
    /// The p99 from 10 s after the first drop of the workers to the next change or the end.
    settled_p99_ms: Option<f64>,
    /// Goodput over the same span, over the best fixed limit's.
    settled_vs_best_fixed: Option<f64>,
    /// Twice the unloaded p99, in milliseconds.
    twice_unloaded_ms: f64,
    /// After the first drop of the workers to half or less: seconds until p99 stays under
    /// twice the unloaded p99 up to the next change or the end; `None` if it never does.
    recovery_s: Option<Option<u64>>,
    /// Ends the run at its minimum (a client's limit, the last 10 s) while the server could
    /// have answered more: under 90% of its capacity, with requests turned away.
    stuck: bool,
}

fn measure(scenario: &Scenario, bench: &Bench, row: &Row, run: &Run) -> Measures {
    Measures {
        vs_best_fixed: run.goodput() as f64 / bench.best_fixed.max(1) as f64,
        p99_ms: run.p99_ms,
        settled_p99_ms: run.settled_p99_ms,
        settled_vs_best_fixed: settled_goodput(&scenario.server, run)
            .zip(bench.best_fixed_settled)
            .map(|(ours, best)| ours as f64 / best.max(1) as f64),
        twice_unloaded_ms: 2.0 * scenario.server.unloaded_p99() / 1e3,
        recovery_s: recovery(&scenario.server, run),
        stuck: stuck(scenario, row.min_limit, run),
    }
}

fn stuck(scenario: &Scenario, min_limit: Option<u32>, run: &Run) -> bool {
    let Some(min) = min_limit else {
        return false;
    };
    let tail: Vec<_> = run.seconds.iter().rev().take(10).collect();
    if tail.is_empty() {
        return false;
    }
    // Some client at its minimum through the last 10 s.
    let at_min = tail.iter().all(|s| {
        if s.limits.is_empty() {
            s.limit == Some(min)
        } else {
            s.limits.contains(&Some(min))
        }
    });
    let served: f64 = tail
        .iter()
        .map(|s| (s.goodput + s.timed_out + s.errors.unwrap_or(0)) as f64)
        .sum();
    let capacity: f64 = tail
        .iter()
        .map(|s| scenario.server.capacity_at((s.t - 1) * 1_000_000))
        .sum();
    let turned_away: u64 = tail.iter().map(|s| s.rejected).sum();
    at_min && served < 0.9 * capacity && turned_away > 0
}

/// The first drop of the workers to half or less, and the next change (`u64::MAX` if none),
/// in whole seconds.
fn drop_span(server: &ServerSpec) -> Option<(u64, u64)> {
    let mut workers = server.workers();
    let changes = server.changes();
    let (index, (dropped_at, _)) = changes.iter().enumerate().find(|(_, (_, w))| {
        let dropped = *w * 2 <= workers;
        workers = *w;
        dropped
    })?;
    let until_s = changes
        .get(index + 1)
        .map_or(u64::MAX, |(t, _)| t / 1_000_000);
    Some((dropped_at.div_ceil(1_000_000), until_s))
}

/// Goodput from 10 s after the first drop of the workers to the next change or the end: the
/// span of `Run::settled_p99_ms`, so that a p99 bought by turning callers away shows.
fn settled_goodput(server: &ServerSpec, run: &Run) -> Option<u64> {
    let (dropped_s, until_s) = drop_span(server)?;
    Some(
        run.seconds
            .iter()
            .filter(|s| s.t > dropped_s + 10 && s.t <= until_s)
            .map(|s| s.goodput)
            .sum(),
    )
}

fn recovery(server: &ServerSpec, run: &Run) -> Option<Option<u64>> {
    let (dropped_s, until_s) = drop_span(server)?;
    let limit_ms = 2.0 * server.unloaded_p99() / 1e3;
    // Seconds ending after the drop and before the next change; a second with no answer at
    // all counts as slow (nothing got through).
    let seconds: Vec<_> = run
        .seconds
        .iter()
        .filter(|s| s.t > dropped_s && s.t <= until_s)
        .collect();
    let last_slow = seconds
        .iter()
        .rev()
        .find(|s| s.p99_ms.is_none_or(|p| p >= limit_ms));
    Some(match last_slow {
        None => Some(0),
        Some(s) if Some(s.t) == seconds.last().map(|l| l.t) => None,
        Some(s) => Some(s.t - dropped_s),
    })
}

/// `min–max` of some numbers, or the one number when they agree.
fn span(values: &[f64], format: impl Fn(f64) -> String) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (low, high) = (format(min), format(max));
    if low == high {
        low
    } else {
        format!("{low}–{high}")
    }
}

type Results = [(String, Vec<(Scenario, Bench)>)];

fn print_tables(results: &Results, seeds: &[u64]) {
    let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
    println!(
        "Seeds {} per scenario; each cell is the min–max over them. Goodput: answers without \
         error within the client timeout, over the best fixed limit's for the same seed. p99: \
         over every answered request. Recovery: seconds after the workers drop until each \
         second's p99 stays under twice the unloaded p99, to the next change or the end. \
         Goodput then: from 10 s after the drop, over the best fixed limit's (by the whole \
         run) over the same span. \
         Stuck: seeds that end at the minimum limit while the server had capacity to spare.\n",
        seeds.join(", ")
    );
    for (name, runs) in results {
        let Some((first, first_bench)) = runs.first() else {
            continue;
        };
        let dropping = first
            .server
            .changes()
            .iter()
            .scan(first.server.workers(), |w, c| {
                let dropped = c.1 * 2 <= *w;
                *w = c.1;
                Some(dropped)
            })
            .any(|d| d);
        println!(
            "#### {name} (unloaded p99 {:.0} ms)\n",
            first.server.unloaded_p99() / 1e3
        );
        print!("| limit | goodput vs best fixed | p99 ms | stuck |");
        let extra = " p99 ms from 10 s after the drop | goodput then vs best fixed | every second under 2x unloaded p99 |";
        println!("{}", if dropping { extra } else { "" });
        print!("|---|---:|---:|---:|");
        println!("{}", if dropping { "---:|---:|---:|" } else { "" });
        for (index, row) in first_bench.rows.iter().enumerate() {
            let mut measures = Vec::new();
            let mut failure = None;
            let mut names = Vec::new();
            for (scenario, bench) in runs {
                let Some(row) = bench.rows.get(index) else {
                    continue;
                };
                names.push(row.name.clone());
                match &row.run {
                    Ok(run) => measures.push(measure(scenario, bench, row, run)),
                    Err(error) => failure = Some(error.clone()),
                }
            }
            let label = if row.name.starts_with("best fixed") {
                let limits: Vec<String> = names
                    .iter()
                    .map(|n| {
                        n.trim_start_matches("best fixed (fixed:limit=")
                            .trim_end_matches(')')
                            .to_owned()
                    })
                    .collect();
                format!("best fixed (limit {})", limits.join(", "))
            } else {
                row.name.clone()
            };
            if let Some(error) = failure {
                println!("| {label} | {error} |");
                continue;
            }
            let vs: Vec<f64> = measures.iter().map(|m| 100.0 * m.vs_best_fixed).collect();
            let p: Vec<f64> = measures.iter().filter_map(|m| m.p99_ms).collect();
            let stuck = measures.iter().filter(|m| m.stuck).count();
            print!(
                "| {label} | {}% | {} | {} |",
                span(&vs, |x| format!("{x:.1}")),
                if p.is_empty() {
                    "-".to_owned()
                } else {
                    span(&p, |x| format!("{x:.0}"))
                },
                stuck
            );
            if dropping {
                let settled: Vec<f64> = measures.iter().filter_map(|m| m.settled_p99_ms).collect();
                let settled = if settled.is_empty() {
                    "-".to_owned()
                } else {
                    span(&settled, |x| format!("{x:.0}"))
                };
                print!(" {settled} |");
                let then: Vec<f64> = measures
                    .iter()
                    .filter_map(|m| m.settled_vs_best_fixed)
                    .map(|v| 100.0 * v)
                    .collect();
                if then.is_empty() {
                    print!(" - |");
                } else {
                    print!(" {}% |", span(&then, |x| format!("{x:.1}")));
                }
                let never = measures.iter().any(|m| matches!(m.recovery_s, Some(None)));
                let secs: Vec<f64> = measures
                    .iter()
                    .filter_map(|m| m.recovery_s.flatten())
                    .map(|s| s as f64)
                    .collect();
                let text = match (never, secs.is_empty()) {
                    (true, true) => "never".to_owned(),
                    (true, false) => {
                        format!("after {} s, never", span(&secs, |x| format!("{x:.0}")))
                    }
                    _ => format!("after {} s", span(&secs, |x| format!("{x:.0}"))),
                };
                println!(" {text} |");
            } else {
                println!();
            }
        }
        println!();
    }
    targets(results);
}

/// The issue's targets, per gate over every scenario and seed: goodput at least 0.9x the best
/// fixed limit; never stuck at the minimum with capacity to spare; p99 back under twice the
/// unloaded p99 within 10 s of a capacity drop.
fn targets(results: &Results) {
    println!("#### Targets (every scenario, every seed)\n");
    println!(
        "| limit | recommended | goodput ≥ 0.9x best fixed (worst, where) | never stuck at min | p99 < 2x unloaded from 10 s after a drop (worst) |"
    );
    println!("|---|---|---|---|---|");
    let Some((_, runs)) = results.first() else {
        return;
    };
    let Some((_, bench)) = runs.first() else {
        return;
    };
    for (index, row) in bench.rows.iter().enumerate() {
        if row.name.starts_with("best fixed") || row.name == "none" {
            continue;
        }
        let mut worst: Option<(f64, String)> = None;
        let mut stuck = Vec::new();
        // The worst p99 after a drop, over twice the unloaded p99, and the p99 itself.
        let mut settled: Option<(f64, f64)> = None;
        let mut failed = false;
        for (name, runs) in results {
            for (scenario, bench) in runs {
                let Some(row) = bench.rows.get(index) else {
                    continue;
                };
                let Ok(run) = &row.run else {
                    failed = true;
                    continue;
                };
                let m = measure(scenario, bench, row, run);
                let at = format!("{name} seed {}", scenario.seed);
                if worst.as_ref().is_none_or(|(w, _)| m.vs_best_fixed < *w) {
                    worst = Some((m.vs_best_fixed, at.clone()));
                }
                if m.stuck {
                    stuck.push(at);
                }
                if m.recovery_s.is_some() {
                    // No answer at all after the drop counts as never back.
                    let p = m.settled_p99_ms.unwrap_or(f64::INFINITY);
                    let ratio = p / m.twice_unloaded_ms;
                    if settled.is_none_or(|(worst, _)| ratio > worst) {
                        settled = Some((ratio, p));
                    }
                }
            }
        }
        let yes = |ok: bool| if ok { "yes" } else { "**no**" };
        let recommended = if RECOMMENDED.contains(&row.name.as_str()) {
            "yes"
        } else {
            ""
        };
        if failed {
            println!(
                "| {} | {recommended} | **no** (failed to run) | | |",
                row.name
            );
            continue;
        }
        let goodput = worst.map_or("-".to_owned(), |(w, at)| {
            format!("{} ({:.1}%, {at})", yes(w >= 0.9), 100.0 * w)
        });
        let stuck = if stuck.is_empty() {
            "yes".to_owned()
        } else {
            format!("**no** ({})", stuck.join("; "))
        };
        let recovery = match settled {
            Some((ratio, p)) => format!("{} ({p:.0} ms, {ratio:.2}x)", yes(ratio < 1.0)),
            None => "-".to_owned(),
        };
        println!(
            "| {} | {recommended} | {goodput} | {stuck} | {recovery} |",
            row.name
        );
    }
}
