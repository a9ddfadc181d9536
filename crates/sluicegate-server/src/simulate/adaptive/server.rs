//! `--server`: the simulated service, an M/M/c queue whose worker count may change.

use sluicegate::Micros;
use sluicegate::clock::micros_ceil;
use sluicegate::rate::{format_duration_micros, parse_duration};

/// An M/M/c server, as given to `--server`:
/// `mmc:workers=W,service=MEAN[,cv=X][,queue=N][,reject=DUR][,fail=P][,change=T:W2,...]`.
///
/// `workers` requests are served at once, each for a random time of mean `service`:
/// exponential, or with `cv` other than 1 lognormal with that coefficient of variation (the
/// standard deviation over the mean; 3 is a long tail). The others wait in one FIFO queue,
/// with no bound, or with `queue=N` at most N: a request that finds it full is rejected after
/// `reject` (default 1 ms), as a service that sheds load answers 503 at once. With `fail=P`
/// each answer is an error with probability P, whatever the load. Each `change=T:W2` sets
/// the worker count to `W2` at `T` (a duration since the start): a request already in
/// service when workers are taken away finishes first, as a real one would.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    workers: u32,
    service: Micros,
    cv: f64,
    queue: Option<u32>,
    reject: Micros,
    fail: f64,
    changes: Vec<(Micros, u32)>,
}

const SHAPE: &str = "mmc:workers=W,service=MEAN[,cv=X,queue=N,reject=DUR,fail=P,change=T:W2,...] \
     (e.g. mmc:workers=10,service=20ms,change=60s:5,change=120s:10)";

/// How long a full queue takes to reject a request unless told otherwise.
const DEFAULT_REJECT: Micros = 1_000;

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
        let mut cv = None;
        let mut queue = None;
        let mut reject = None;
        let mut fail = None;
        let mut changes = Vec::new();
        for item in params.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "workers" if workers.is_none() => workers = Some(parse_workers("workers", value)?),
                "service" if service.is_none() => service = Some(parse_service(key, value)?),
                "cv" if cv.is_none() => cv = Some(parse_fraction(key, value, 0.0, 100.0)?),
                "queue" if queue.is_none() => queue = Some(parse_queue(value)?),
                "reject" if reject.is_none() => reject = Some(parse_service(key, value)?),
                "fail" if fail.is_none() => fail = Some(parse_fraction(key, value, 0.0, 1.0)?),
                "workers" | "service" | "cv" | "queue" | "reject" | "fail" => {
                    return Err(format!("parameter `{key}` given twice"));
                }
                "change" => changes.push(parse_change(value)?),
                _ => {
                    return Err(format!(
                        "unknown parameter `{key}` for the mmc server (it takes: workers, \
                         service, cv, queue, reject, fail, change)"
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
            cv: cv.unwrap_or(1.0),
            queue,
            reject: reject.unwrap_or(DEFAULT_REJECT),
            fail: fail.unwrap_or(0.0),
            changes,
        })
    }

    /// The service times' coefficient of variation (1: exponential).
    pub fn cv(&self) -> f64 {
        self.cv
    }

    /// The most requests that may wait for a worker (`None`: no bound).
    pub fn queue(&self) -> Option<u32> {
        self.queue
    }

    /// How long a rejection by a full queue takes, in microseconds.
    pub fn reject(&self) -> Micros {
        self.reject
    }

    /// The chance that an answer is an error, whatever the load.
    pub fn fail(&self) -> f64 {
        self.fail
    }

    /// Whether the server ever answers with an error (a full queue, or random failures).
    pub fn can_fail(&self) -> bool {
        self.queue.is_some() || self.fail > 0.0
    }

    /// The lognormal's `(mu, sigma)` for a mean of `service` microseconds and this `cv`, or
    /// `None` for exponential service times (`cv` 1).
    pub(crate) fn lognormal(&self) -> Option<(f64, f64)> {
        if self.cv == 1.0 {
            return None;
        }
        let sigma2 = (1.0 + self.cv * self.cv).ln();
        Some(((self.service as f64).ln() - sigma2 / 2.0, sigma2.sqrt()))
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
    /// its mean, a lognormal's `exp(mu + 2.326 sigma)`. The reference for "back under twice
    /// the unloaded p99".
    pub fn unloaded_p99(&self) -> f64 {
        match self.lognormal() {
            None => self.service as f64 * 100f64.ln(),
            // The standard normal's 99th percentile.
            Some((mu, sigma)) => (mu + 2.326_347_874 * sigma).exp(),
        }
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

fn parse_service(key: &str, text: &str) -> Result<Micros, String> {
    let micros = parse_duration(text)
        .map(micros_ceil)
        .map_err(|e| format!("bad {key}: {e}"))?;
    if micros == 0 {
        return Err(format!(
            "bad {key} `{text}`: must be more than zero (e.g. 20ms)"
        ));
    }
    Ok(micros)
}

fn parse_fraction(key: &str, text: &str, low: f64, high: f64) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= low && x <= high && (key != "cv" || x > 0.0) => Ok(x),
        _ => Err(format!(
            "bad {key} `{text}`: expected a number from {low} to {high}{}",
            if key == "cv" { ", above 0" } else { "" }
        )),
    }
}

fn parse_queue(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n <= MAX_WORKERS)
        .ok_or_else(|| {
            format!("bad queue `{text}`: expected a whole number from 0 to {MAX_WORKERS}")
        })
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
        assert!(!spec.can_fail());
        assert_eq!((spec.cv(), spec.queue(), spec.fail()), (1.0, None, 0.0));
        Ok(())
    }

    #[test]
    fn reads_the_long_tail_the_queue_and_failures() -> Result<(), String> {
        let spec =
            ServerSpec::parse("mmc:workers=4,service=20ms,cv=3,queue=8,reject=2ms,fail=0.01")?;
        assert_eq!(
            (spec.cv(), spec.queue(), spec.reject()),
            (3.0, Some(8), 2_000)
        );
        assert_eq!(spec.fail(), 0.01);
        assert!(spec.can_fail());
        // Lognormal of mean 20 ms and cv 3: sigma^2 = ln 10, and the mean is exp(mu +
        // sigma^2 / 2).
        let (mu, sigma) = spec.lognormal().ok_or("lognormal")?;
        assert!(((mu + sigma * sigma / 2.0).exp() - 20_000.0).abs() < 1e-6);
        assert!((sigma * sigma - 10f64.ln()).abs() < 1e-12);
        // exp(mu + 2.326 sigma) = 20 ms / sqrt(10) * exp(2.326 * 1.517) = 215.8 ms.
        assert!(
            (spec.unloaded_p99() / 1e3 - 215.8).abs() < 0.1,
            "{}",
            spec.unloaded_p99()
        );
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
            ("mmc:workers=1,service=1ms,cv=0", "bad cv `0`"),
            ("mmc:workers=1,service=1ms,fail=2", "bad fail `2`"),
            ("mmc:workers=1,service=1ms,queue=-1", "bad queue `-1`"),
            ("mmc:workers=1,service=1ms,reject=0s", "bad reject `0s`"),
            ("mmc:workers=1,service=1ms,cv=2,cv=3", "`cv` given twice"),
        ] {
            let err = ServerSpec::parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
