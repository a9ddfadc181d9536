//! An [`AnyAlgorithm`] back to its spec: every parameter it holds, under its canonical name,
//! so that parsing the text builds an equal algorithm.

use std::fmt;
use std::time::Duration;

use crate::algorithm::QueueDelay;
use crate::rate::{Rate, format_duration_micros};
use crate::spec::any::AnyAlgorithm;
use crate::spec::parse::AlgorithmSpec;
use crate::state_machine::Algorithm;

impl AnyAlgorithm {
    /// The spec that builds this algorithm: its name and every parameter, defaults included
    /// (`gcra:rate=10/1s,burst=10`), except a bucket's `initial` when it is the burst and a
    /// leaky queue's delay when it shapes (the default). Parsing the text (or the rule file
    /// written from [`AlgorithmSpec::to_quota`]) gives back an equal algorithm. A leaky queue
    /// built with a delay above its burst (which passes every request at once) is written
    /// `nodelay`, which acts the same.
    ///
    /// ```
    /// use sluicegate::AnyAlgorithm;
    ///
    /// let algorithm: AnyAlgorithm = "Leaky_Queue:rate=10/s,burst=5,delay=2".parse()?;
    /// assert_eq!(algorithm.to_string(), "leaky-queue:rate=10/1s,burst=5,delay=2");
    /// assert_eq!(algorithm.to_string().parse::<AnyAlgorithm>()?, algorithm);
    /// # Ok::<(), sluicegate::ConfigError>(())
    /// ```
    pub fn to_spec(&self) -> AlgorithmSpec {
        let mut params: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: String| params.push((name, value));
        match self {
            AnyAlgorithm::TokenBucket(bucket) => {
                put("rate", rate(bucket.rate()));
                put("burst", bucket.burst().to_string());
                if bucket.initial() != bucket.burst() {
                    put("initial", bucket.initial().to_string());
                }
            }
            AnyAlgorithm::Gcra(gcra) => {
                put("rate", rate(gcra.rate()));
                put("burst", gcra.burst().to_string());
                if gcra.initial() != gcra.burst() {
                    put("initial", gcra.initial().to_string());
                }
            }
            AnyAlgorithm::FixedWindow(window) => {
                put("limit", window.limit().to_string());
                put("window", duration(window.window()));
            }
            AnyAlgorithm::SlidingLog(log) => {
                put("limit", log.limit().to_string());
                put("window", duration(log.window()));
            }
            AnyAlgorithm::SlidingWindow(window) => {
                put("limit", window.limit().to_string());
                put("window", duration(window.window()));
                if let Some(buckets) = window.buckets() {
                    put("buckets", buckets.to_string());
                }
            }
            AnyAlgorithm::LeakyBucket(bucket) => {
                put("rate", rate(bucket.rate()));
                put("capacity", bucket.bucket_capacity().to_string());
            }
            AnyAlgorithm::LeakyQueue(queue) => {
                put("rate", rate(queue.rate()));
                put("burst", queue.burst().to_string());
                match queue.delay() {
                    QueueDelay::Shape => {}
                    QueueDelay::After(d) if d <= queue.burst() => put("delay", d.to_string()),
                    QueueDelay::After(_) | QueueDelay::NoDelay => put("nodelay", String::new()),
                }
            }
            AnyAlgorithm::SmoothBursty(smooth) => {
                put("rate", number(smooth.permits_per_second()));
                put("burst_seconds", number(smooth.max_burst_seconds()));
            }
            AnyAlgorithm::SmoothWarmup(smooth) => {
                put("rate", number(smooth.permits_per_second()));
                put("warmup", duration(smooth.warmup()));
                put("cold_factor", number(smooth.cold_factor()));
            }
            AnyAlgorithm::Concurrency(concurrency) => {
                put("limit", concurrency.limit().to_string());
            }
        }
        AlgorithmSpec {
            algorithm: self.name(),
            params,
        }
    }
}

impl fmt::Display for AnyAlgorithm {
    /// The spec text of [`to_spec`](AnyAlgorithm::to_spec).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_spec().fmt(f)
    }
}

fn rate(rate: Rate) -> String {
    rate.to_string()
}

fn duration(length: Duration) -> String {
    format_duration_micros(u64::try_from(length.as_micros()).unwrap_or(u64::MAX))
}

/// Rust prints the shortest decimal that reads back as the same `f64`, never in exponent
/// form, which is what the spec's number reader takes.
fn number(value: f64) -> String {
    value.to_string()
}
