//! The simulation: every limiter on one manual clock that follows the trace's `t`.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::num::NonZeroU64;
use std::path::Path;

use anyhow::Context;
use sluicegate::{Algorithm, AnyAlgorithm, KeyedLimiter, ManualClock, Micros};

use crate::simulate::adaptive;
use crate::simulate::args::{DEFAULT_CLIENT_TIMEOUT, LimiterArg, SimulateArgs};
use crate::simulate::event::{Event, EventOp, seconds};
use crate::simulate::output::LineWriter;
use crate::simulate::plot::{Mark, Panel, write_svg};
use crate::simulate::trace::{TraceLine, TraceReader};

/// Runs `sluicegate simulate`.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    if !args.adaptive.is_empty() {
        return run_adaptive(&args);
    }
    let mut simulation = Simulation::new(&args.limiters, args.plot.is_some());
    let mut writer = LineWriter::new(BufWriter::new(io::stdout().lock()));
    let outcome = match &args.traffic {
        Some(traffic) => traffic
            .events(args.seed)
            .try_for_each(|event| simulation.apply(TraceLine::Event(event), &mut writer)),
        None => {
            let path = args.trace.as_deref().unwrap_or(Path::new("-"));
            let input = open_trace(path)?;
            simulation.replay(input, &mut writer)
        }
    };
    match outcome {
        // The reader went away: nobody is left to answer, which is how a piped run ends.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        other => other.context("writing the decisions")?,
    }
    if let (Some(path), Some(panels)) = (&args.plot, simulation.panels) {
        write_svg(path, &panels).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `--adaptive`: clap has checked that `--server` and `--traffic` are given.
fn run_adaptive(args: &SimulateArgs) -> anyhow::Result<()> {
    let (Some(server), Some(traffic)) = (&args.server, &args.traffic) else {
        anyhow::bail!("--adaptive needs --server and --traffic");
    };
    let scenario = adaptive::Scenario {
        server: server.clone(),
        traffic: traffic.clone(),
        loads: args.loads(),
        client_timeout: args.client_timeout.unwrap_or(DEFAULT_CLIENT_TIMEOUT),
        seed: args.seed,
        limits: args.limits,
    };
    adaptive::run(&args.adaptive, &scenario, args.plot.as_deref())
}

fn open_trace(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    if path == Path::new("-") {
        return Ok(Box::new(io::stdin().lock()));
    }
    let file = File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
    Ok(Box::new(BufReader::new(file)))
}

/// The limiters, their shared clock, and what the plot needs.
struct Simulation {
    clock: ManualClock,
    limiters: Vec<KeyedLimiter<String, AnyAlgorithm, ManualClock>>,
    last_t: Micros,
    panels: Option<Vec<Panel>>,
}

impl Simulation {
    fn new(limiters: &[LimiterArg], plot: bool) -> Self {
        // Every limiter exists from t = 0: a smooth limiter first used at t = 2 has stored
        // permits, as a Guava limiter created at the start would.
        let clock = ManualClock::new(0);
        Simulation {
            limiters: limiters
                .iter()
                .map(|l| KeyedLimiter::with_clock(l.algorithm.clone(), clock.clone()))
                .collect(),
            clock,
            last_t: 0,
            panels: plot.then(|| limiters.iter().map(|l| Panel::new(&l.spec)).collect()),
        }
    }

    /// Reads a trace one line at a time and answers each before reading the next, so a
    /// program feeding a pipe gets every answer as soon as it sends the event.
    fn replay(
        &mut self,
        mut input: impl BufRead,
        writer: &mut LineWriter<impl Write>,
    ) -> io::Result<()> {
        let mut reader = TraceReader::default();
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            if input.read_until(b'\n', &mut buffer)? == 0 {
                return Ok(());
            }
            let line = match std::str::from_utf8(&buffer) {
                Ok(text) => reader.read(text),
                Err(_) => TraceLine::Bad {
                    t: None,
                    error: "line is not valid UTF-8".into(),
                },
            };
            self.apply(line, writer)?;
        }
    }

    /// Answers one trace line: one output line per limiter, then a flush.
    fn apply(&mut self, line: TraceLine, writer: &mut LineWriter<impl Write>) -> io::Result<()> {
        match line {
            TraceLine::Skip => return Ok(()),
            TraceLine::Bad { t, error } => {
                for index in 0..self.limiters.len() {
                    writer.error(self.label(index), t, &error)?;
                }
            }
            TraceLine::Event(event) if event.t < self.last_t => {
                let error = format!(
                    "t {} is before the previous event's t {}: times never decrease",
                    seconds(event.t),
                    seconds(self.last_t)
                );
                for index in 0..self.limiters.len() {
                    writer.error(self.label(index), Some(event.t), &error)?;
                }
            }
            TraceLine::Event(event) => {
                self.last_t = event.t;
                self.clock.set(event.t);
                for index in 0..self.limiters.len() {
                    self.answer(index, &event, writer)?;
                }
            }
        }
        writer.flush()
    }

    fn answer(
        &mut self,
        index: usize,
        event: &Event,
        writer: &mut LineWriter<impl Write>,
    ) -> io::Result<()> {
        let label = self.label(index);
        let limiter = &mut self.limiters[index];
        match &event.op {
            EventOp::Decide(op, _) => {
                let outcome = NonZeroU64::new(event.permits)
                    .ok_or_else(|| "permits must be at least 1".to_owned())
                    .and_then(|permits| {
                        limiter
                            .decide(&event.key, permits, *op)
                            .map_err(|e| e.to_string())
                    });
                match outcome {
                    Ok(decision) => {
                        if op.consumes() && *op != sluicegate::state_machine::Op::Release {
                            self.mark(
                                index,
                                event.t,
                                if decision.allowed() {
                                    Mark::Allowed
                                } else {
                                    Mark::Rejected
                                },
                            );
                        }
                        writer.decision(label, event, &decision)
                    }
                    Err(error) => writer.error(label, Some(event.t), &error),
                }
            }
            EventOp::SetRate(rate) => match limiter.algorithm().with_rate(rate) {
                Ok(new) => {
                    let limit = new.limit();
                    limiter.set_algorithm(new);
                    self.mark(index, event.t, Mark::RateChange);
                    writer.rate_set(label, event, limit)
                }
                Err(error) => writer.error(label, Some(event.t), &format!("set_rate: {error}")),
            },
        }
    }

    fn mark(&mut self, index: usize, t: Micros, mark: Mark) {
        if let Some(panel) = self.panels.as_mut().and_then(|p| p.get_mut(index)) {
            panel.record(t, mark);
        }
    }

    /// The `limiter` field: the index, printed only when several limiters run.
    fn label(&self, index: usize) -> Option<usize> {
        (self.limiters.len() > 1).then_some(index)
    }
}

/// Fuzzing traces through the whole simulation (a child module, to drive `Simulation`).
#[cfg(test)]
#[path = "fuzz_tests.rs"]
mod fuzz_tests;
