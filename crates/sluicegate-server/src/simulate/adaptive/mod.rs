//! `sluicegate simulate --adaptive`: an adaptive concurrency limit in front of a simulated
//! server (the README's "Adaptive limits against a simulated server" shows the command).
//!
//! Clients arrive by a `--traffic` generator, one request each (`--extra-traffic` adds
//! arrivals from a given time, a spike; `--client` adds a client with a limit of its own in
//! front of the same server). The limit admits a request while fewer than its limit are in
//! flight and rejects it otherwise (no queue). Behind it an M/M/c server ([`ServerSpec`])
//! serves admitted requests in FIFO order; it may shed load from a bounded queue, fail at
//! random, and have long-tailed service times. A client gives up
//! `client_timeout` after it arrived; the server does not know, so a request whose client gave
//! up still takes its turn and its work is wasted. The limit holds a request's permit until the
//! server answers it, as a limiter at the server's door or a proxy waiting for its upstream
//! does, and reports the sample then: [`Outcome::Ok`](sluicegate::adaptive::Outcome::Ok) if
//! the client still waited, `Dropped` for an error, else `Timeout`. Goodput is the requests
//! answered without error while their client still waited.
//!
//! Everything is public so that a benchmark can run other limiters on the same scenarios
//! through [`Gate`].

mod chart;
mod engine;
mod limits;
mod server;

use std::io::{self, BufWriter, Write};

use anyhow::Context;
use serde::Serialize;
use sluicegate::ConfigError;
use sluicegate::adaptive::Controller;

pub use chart::{Panel, write_svg};
pub use engine::{Gate, LimiterGate, Load, Run, Scenario, Second, simulate};
pub use limits::LimitsSpec;
pub use server::ServerSpec;
pub use sluicegate::adaptive::ControllerSpec;

pub use crate::simulate::traffic::TrafficSpec;

/// Runs the scenario once per controller and prints one JSON line per simulated second (per
/// controller, each line then carrying `"controller": INDEX`), then draws the plot.
pub(crate) fn run(
    controllers: &[ControllerSpec],
    scenario: &Scenario,
    plot: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let runs: Vec<Run> = controllers
        .iter()
        .map(|spec| run_one(spec, scenario))
        .collect::<Result<_, _>>()?;
    let mut out = BufWriter::new(io::stdout().lock());
    match write_lines(&mut out, &runs) {
        // The reader went away (`| head`): nobody is left to answer.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        other => other.context("writing the seconds")?,
    }
    if let Some(path) = plot {
        let titles: Vec<String> = controllers.iter().map(ToString::to_string).collect();
        let panels: Vec<Panel<'_>> = titles
            .iter()
            .zip(&runs)
            .map(|(title, run)| Panel { title, run })
            .collect();
        write_svg(path, &scenario.server, &panels)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `spec` on `scenario`: one limit per client, each seeded apart, with the scenario's bounds
/// where the spec sets none.
pub fn run_one(spec: &ControllerSpec, scenario: &Scenario) -> Result<Run, ConfigError> {
    let spec = match &scenario.limits {
        Some(limits) => limits.apply(spec)?,
        None => spec.clone(),
    };
    let mut gates = Vec::new();
    for client in 0..scenario.clients() {
        let seed = scenario.seed.wrapping_add(client as u64);
        // No limit is no limiter at all, so that the seconds print no limit.
        let controller: Option<Box<dyn Controller>> = if spec.is_unlimited() {
            None
        } else {
            Some(Box::new(spec.build(seed)?))
        };
        gates.push(LimiterGate::new(controller));
    }
    Ok(simulate(scenario, &mut gates))
}

/// A second as printed, with the controller's index when several run.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    controller: Option<usize>,
    #[serde(flatten)]
    second: &'a Second,
}

/// Every run's seconds, second by second.
fn write_lines(out: &mut impl Write, runs: &[Run]) -> io::Result<()> {
    let seconds = runs.iter().map(|r| r.seconds.len()).max().unwrap_or(0);
    for index in 0..seconds {
        for (controller, run) in runs.iter().enumerate() {
            let Some(second) = run.seconds.get(index) else {
                continue;
            };
            let line = Line {
                controller: (runs.len() > 1).then_some(controller),
                second,
            };
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_documented_shape() -> Result<(), Box<dyn std::error::Error>> {
        let second = Second {
            t: 3,
            limit: None,
            limits: Vec::new(),
            in_flight: 7,
            p50_ms: Some(21.5),
            p99_ms: None,
            goodput: 480,
            rejected: 0,
            timed_out: 2,
            errors: None,
            arrivals: 490,
        };
        let run = Run {
            seconds: vec![second],
            p50_ms: None,
            p99_ms: None,
            settled_p99_ms: None,
        };
        let mut one = Vec::new();
        write_lines(&mut one, std::slice::from_ref(&run))?;
        assert_eq!(
            String::from_utf8(one)?,
            concat!(
                r#"{"t":3,"limit":null,"in_flight":7,"p50_ms":21.5,"p99_ms":null,"goodput":480,"#,
                r#""rejected":0,"timed_out":2,"arrivals":490}"#,
                "\n"
            )
        );
        let mut two = Vec::new();
        write_lines(&mut two, &[run.clone(), run])?;
        let text = String::from_utf8(two)?;
        assert!(text.starts_with(r#"{"controller":0,"t":3,"#), "{text}");
        assert!(text.contains("\n{\"controller\":1,\"t\":3,"), "{text}");
        Ok(())
    }
}
