//! Reporting a [`FailSafe`](crate::FailSafe)'s failures, the same way wherever it runs: a
//! label per kind for the metrics, and warnings through `tracing`, throttled, since a client
//! can trigger them (a Redis outage under load would otherwise write a line per request).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::RedisLimitError;
use crate::failure::{FailSafeEvent, Failure, FailurePolicy};
use crate::lazy::LazyStoreError;

/// At most one warning about failed calls this often; the rest are counted in the next.
const WARN_EVERY: Duration = Duration::from_secs(5);

/// An observer for [`FailSafe::with_observer`](crate::FailSafe::with_observer) over a
/// [`LazyStore`](crate::LazyStore): each failed call is counted by `count(label)` and warned
/// about (at most one line every 5 s, saying how many were left out); the breaker marking
/// Redis down is a warning, Redis answering again an info line. `who` starts every line
/// (`"proxy: "`, or `""`).
pub fn log_failures(
    who: &'static str,
    policy: FailurePolicy,
    count: impl Fn(&'static str) + Send + Sync + 'static,
) -> impl Fn(&FailSafeEvent<'_, LazyStoreError>) + Send + Sync + 'static {
    let warnings = LogThrottle::new(WARN_EVERY);
    move |event| match event {
        FailSafeEvent::Failed(failure) => {
            let kind = failure.label();
            count(kind);
            warnings.write(|left_out| {
                tracing::warn!(
                    error = %failure,
                    kind,
                    ?policy,
                    unreported_since_last_warning = left_out,
                    "{who}redis failed; the failure policy answers"
                );
            });
        }
        FailSafeEvent::MarkedDown { failures_in_a_row } => tracing::warn!(
            failures_in_a_row,
            ?policy,
            "{who}redis marked down: the failure policy answers at once while it is probed"
        ),
        FailSafeEvent::BackUp => {
            tracing::info!("{who}redis answers again: decisions go back to it")
        }
    }
}

/// Every label [`Failure::label`] returns, in the order metrics list them.
pub const FAILURE_LABELS: [&str; 5] = ["down", "timeout", "connection", "refused", "other"];

impl Failure<'_, LazyStoreError> {
    /// The failure's kind as a metric label: `down` (the breaker answered without asking),
    /// `timeout`, `connection` (none yet, or lost), `refused` (the script failed), `other`.
    pub fn label(&self) -> &'static str {
        match self {
            Failure::Down => "down",
            Failure::Timeout(_) => "timeout",
            Failure::Store(LazyStoreError::NotConnected) => "connection",
            Failure::Store(LazyStoreError::Redis(error)) => match error {
                RedisLimitError::Timeout(_) => "timeout",
                RedisLimitError::Connection(_) | RedisLimitError::Stopped => "connection",
                RedisLimitError::Script(_) => "refused",
                _ => "other",
            },
        }
    }
}

/// At most one log line per interval; the lines left out are counted and handed to the next
/// one written.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_redis::LogThrottle;
///
/// let warnings = LogThrottle::new(Duration::from_secs(5));
/// let mut written = Vec::new();
/// for _ in 0..3 {
///     warnings.write(|left_out| written.push(left_out));
/// }
/// assert_eq!(written, [0], "one line; the other two wait to be counted in the next");
/// ```
#[derive(Debug)]
pub struct LogThrottle {
    every: Duration,
    last: Mutex<Option<Instant>>,
    left_out: AtomicU64,
}

impl LogThrottle {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> LogThrottle {
        LogThrottle {
            every,
            last: Mutex::new(None),
            left_out: AtomicU64::new(0),
        }
    }

    /// Calls `write(left_out)` if a line is due (`left_out`: lines not written since the last
    /// one), and otherwise counts this one as left out.
    pub fn write(&self, write: impl FnOnce(u64)) {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < self.every) {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        drop(last);
        write(self.left_out.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_per_interval_and_counts_the_rest() {
        let log = LogThrottle::new(Duration::from_secs(3600));
        let mut written = Vec::new();
        for _ in 0..5 {
            log.write(|left_out| written.push(left_out));
        }
        assert_eq!(written, vec![0], "one line, the other four counted");
        assert_eq!(log.left_out.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_line_after_the_interval_says_how_many_were_left_out() {
        let log = LogThrottle::new(Duration::ZERO);
        log.left_out.store(7, Ordering::Relaxed);
        let mut written = Vec::new();
        log.write(|left_out| written.push(left_out));
        log.write(|left_out| written.push(left_out));
        assert_eq!(written, vec![7, 0]);
    }

    #[test]
    fn every_label_is_listed() {
        let timeout = RedisLimitError::Timeout(Duration::from_millis(5));
        let not_connected = LazyStoreError::NotConnected;
        let redis_timeout = LazyStoreError::Redis(timeout);
        let failures = [
            Failure::Down,
            Failure::Timeout(Duration::from_millis(5)),
            Failure::Store(&not_connected),
            Failure::Store(&redis_timeout),
        ];
        for failure in &failures {
            assert!(
                FAILURE_LABELS.contains(&failure.label()),
                "{}",
                failure.label()
            );
        }
        assert_eq!(failures[0].label(), "down");
        assert_eq!(failures[2].label(), "connection");
        assert_eq!(failures[3].label(), "timeout");
    }
}
