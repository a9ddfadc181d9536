//! Log lines a client can trigger (a Redis outage under load, a flood of new keys at the cap),
//! written at most once per interval, with the count of those left out since the last one, so
//! that a client cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// At most one line per `every`; the rest are counted.
#[derive(Debug)]
pub(crate) struct RateLimitedLog {
    every: Duration,
    last: Mutex<Option<Instant>>,
    left_out: AtomicU64,
}

impl RateLimitedLog {
    /// At most one line per `every`.
    pub(crate) fn new(every: Duration) -> RateLimitedLog {
        RateLimitedLog {
            every,
            last: Mutex::new(None),
            left_out: AtomicU64::new(0),
        }
    }

    /// Calls `write(left_out)` if a line is due (`left_out`: lines not written since the last
    /// one), and otherwise counts this one as left out.
    pub(crate) fn write(&self, write: impl FnOnce(u64)) {
        let now = Instant::now();
        let mut last = self.last.lock();
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
        let log = RateLimitedLog::new(Duration::from_secs(3600));
        let mut written = Vec::new();
        for _ in 0..5 {
            log.write(|left_out| written.push(left_out));
        }
        assert_eq!(written, vec![0], "one line, the other four counted");
        assert_eq!(log.left_out.load(Ordering::Relaxed), 4);
    }
}
