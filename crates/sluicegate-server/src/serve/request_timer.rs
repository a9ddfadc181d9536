//! How long a call took to answer: one reading of the real clock when it arrives and one when
//! its answer is ready, the second also dating the call for the live page.

use sluicegate::{Clock, ManualClock, Micros, SystemClock};

use crate::serve::clock::ServiceClock;

/// The transport a call came by, as `sluicegate_request_duration_seconds{kind}` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Grpc,
    Http,
}

impl Transport {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// When a call arrived, on the real clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestStart(Micros);

/// Times calls on the real clock, and dates them on the service's.
#[derive(Debug, Clone)]
pub(crate) struct RequestTimer {
    real: SystemClock,
    /// The service's time when it is a manual clock (tests), which a call is dated by while
    /// its duration stays real; `None`: the real clock's end reading is the date too.
    manual: Option<ManualClock>,
}

impl RequestTimer {
    /// A timer for a service on `clock`.
    pub(crate) fn new(clock: &ServiceClock) -> RequestTimer {
        match clock {
            ServiceClock::System(real) => RequestTimer {
                real: *real,
                manual: None,
            },
            ServiceClock::Manual(manual) => RequestTimer {
                real: SystemClock::new(),
                manual: Some(manual.clone()),
            },
        }
    }

    /// A call arrives.
    #[inline]
    pub(crate) fn start(&self) -> RequestStart {
        RequestStart(self.real.now())
    }

    /// A call's answer is ready: how long it took (microseconds), and when on the service's
    /// clock it ended.
    #[inline]
    pub(crate) fn finish(&self, start: RequestStart) -> (Micros, Micros) {
        let end = self.real.now();
        let ended = match &self.manual {
            Some(manual) => manual.now(),
            None => end,
        };
        (end.saturating_sub(start.0), ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_manual_service_clock_dates_the_call_while_its_duration_stays_real() {
        let (clock, manual) = ServiceClock::manual(5_000_000);
        let timer = RequestTimer::new(&clock);
        let start = timer.start();
        manual.advance(Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(2));
        let (took, ended) = timer.finish(start);
        assert_eq!(ended, 3_605_000_000);
        // Real time passed (at least the sleep), not the hour the manual clock moved.
        assert!((2_000..3_600_000_000).contains(&took), "{took}");
    }

    #[test]
    fn on_the_real_clock_the_end_reading_dates_the_call() {
        let clock = ServiceClock::system();
        let timer = RequestTimer::new(&clock);
        let before = clock.now();
        let (_, ended) = timer.finish(timer.start());
        assert!(ended >= before, "{ended} < {before}");
    }
}
