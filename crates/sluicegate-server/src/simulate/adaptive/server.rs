//! `--server`: the simulated service, an M/M/c queue whose worker count may change.

use sluicegate::{Micros, format_duration_micros, micros_ceil, parse_duration};

/// An M/M/c server, as given to `--server`: `mmc:workers=W,service=MEAN[,change=T:W2,...]`.
///
/// `workers` requests are served at once, each for an exponentially distributed time of mean
/// `service`; the others wait in one FIFO queue with no bound. Each `change=T:W2` sets the
/// worker count to `W2` at `T` (a duration since the start): a request already in service
/// when workers are taken away finishes first, as a real one would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    workers: u32,
    service: Micros,
    changes: Vec<(Micros, u32)>,
}

const SHAPE: &str = "mmc:workers=W,service=MEAN[,change=T:W2,...] (e.g. \
     mmc:workers=10,service=20ms,change=60s:5,change=120s:10)";

/// The most workers: far more than any simulation here needs, and small enough that every
/// count of requests in service fits a `u32` with room to spare.
const MAX_WORKERS: u32 = 1_000_000;

impl ServerSpec {
    /// Reads `mmc:key=value,...`; every error names the parameter at fault.
    pub fn parse(text: &str) -> Result<ServerSpec, String> {
        let (name, params) = text.split_once(':').unwrap_or((text, ""));
        let name = name.trim().to_ascii_lowercase();
        if name != "mmc" {
            return Err(format!("unknown server `{name}` (use {SHAPE})"));
        }
        let mut workers = None;
        let mut service = None;
        let mut changes = Vec::new();
        for item in params.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "workers" if workers.is_none() => workers = Some(parse_workers("workers", value)?),
                "service" if service.is_none() => service = Some(parse_service(value)?),
                "workers" | "service" => return Err(format!("parameter `{key}` given twice")),
                "change" => changes.push(parse_change(value)?),
                _ => {
                    return Err(format!(
                        "unknown parameter `{key}` for the mmc server (it takes: workers, \
                         service, change)"
                    ));
                }
            }
        }
        let workers =
            workers.ok_or_else(|| format!("missing parameter `workers` (use {SHAPE})"))?;
        let service =
            service.ok_or_else(|| format!("missing parameter `service` (use {SHAPE})"))?;
        if let Some(pair) = changes.windows(2).find(|pair| pair[0].0 >= pair[1].0) {
            return Err(format!(
                "bad change: times must increase, but {} comes after {}",
                format_duration_micros(pair[1].0),
                format_duration_micros(pair[0].0)
            ));
        }
        Ok(ServerSpec {
            workers,
            service,
            changes,
        })
    }

    /// The workers at the start.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The mean service time, in microseconds.
    pub fn service(&self) -> Micros {
        self.service
    }

    /// The worker count changes: `(when, workers)`, in time order.
    pub fn changes(&self) -> &[(Micros, u32)] {
        &self.changes
    }

    /// The workers at `t` (a change at `t` already applies).
    pub fn workers_at(&self, t: Micros) -> u32 {
        self.changes
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(self.workers, |(_, workers)| *workers)
    }

    /// Requests per second the server completes at `t` when never idle: `workers / service`.
    pub fn capacity_at(&self, t: Micros) -> f64 {
        f64::from(self.workers_at(t)) * 1e6 / self.service as f64
    }

    /// The p99 latency of a request that never waits: an exponential's p99 is `ln(100)` times
    /// its mean. The reference for "back under twice the unloaded p99".
    pub fn unloaded_p99(&self) -> f64 {
        self.service as f64 * 100f64.ln()
    }
}

fn parse_workers(key: &str, text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(n),
        _ => Err(format!(
            "bad {key} `{text}`: expected a whole number from 1 to {MAX_WORKERS}"
        )),
    }
}

fn parse_service(text: &str) -> Result<Micros, String> {
    let micros = parse_duration(text)
        .map(micros_ceil)
        .map_err(|e| format!("bad service: {e}"))?;
    if micros == 0 {
        return Err(format!(
            "bad service `{text}`: must be more than zero (e.g. 20ms)"
        ));
    }
    Ok(micros)
}

fn parse_change(text: &str) -> Result<(Micros, u32), String> {
    let (at, workers) = text
        .split_once(':')
        .ok_or_else(|| format!("bad change `{text}`: expected TIME:WORKERS, such as 60s:5"))?;
    let at = parse_duration(at.trim())
        .map(micros_ceil)
        .map_err(|e| format!("bad change `{text}`: {e}"))?;
    let workers = parse_workers("change", workers.trim())?;
    Ok((at, workers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_workers_service_and_changes() -> Result<(), String> {
        let spec = ServerSpec::parse("mmc:workers=10,service=20ms,change=60s:5,change=2m:10")?;
        assert_eq!(spec.workers(), 10);
        assert_eq!(spec.service(), 20_000);
        assert_eq!(spec.changes(), [(60_000_000, 5), (120_000_000, 10)]);
        assert_eq!(spec.workers_at(59_999_999), 10);
        assert_eq!(spec.workers_at(60_000_000), 5);
        assert_eq!(spec.workers_at(200_000_000), 10);
        assert!((spec.capacity_at(0) - 500.0).abs() < 1e-9);
        assert!((spec.capacity_at(60_000_000) - 250.0).abs() < 1e-9);
        // ln(100) * 20 ms.
        assert!((spec.unloaded_p99() - 92_103.4).abs() < 0.1);
        Ok(())
    }

    #[test]
    fn bad_servers_name_the_parameter() {
        for (text, needle) in [
            ("mg1:workers=1,service=1ms", "unknown server"),
            ("mmc:service=1ms", "missing parameter `workers`"),
            ("mmc:workers=1", "missing parameter `service`"),
            ("mmc:workers=0,service=1ms", "bad workers `0`"),
            ("mmc:workers=x,service=1ms", "bad workers `x`"),
            ("mmc:workers=1,service=0ms", "bad service `0ms`"),
            ("mmc:workers=1,service=fast", "bad service"),
            (
                "mmc:workers=1,service=1ms,speed=2",
                "unknown parameter `speed`",
            ),
            (
                "mmc:workers=1,workers=2,service=1ms",
                "`workers` given twice",
            ),
            ("mmc:workers=1,service=1ms,change=5", "bad change `5`"),
            ("mmc:workers=1,service=1ms,change=5s:0", "bad change `0`"),
            (
                "mmc:workers=1,service=1ms,change=5s:2,change=4s:1",
                "times must increase",
            ),
            ("mmc:workers=1,service=1ms,oops", "expected key=value"),
        ] {
            let err = ServerSpec::parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
