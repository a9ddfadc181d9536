//! A limit as the IETF `RateLimit-Policy` field describes it, its value written once per limit.

use std::time::Duration;

use http::HeaderValue;
use sluicegate::{Algorithm, AnyAlgorithm, Rate};

/// One limit as the IETF `RateLimit-Policy` field describes it: a name, a quota `q` and a
/// window `w` in whole seconds (none for a concurrency limit, whose quota unit is
/// `concurrent-requests`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitInfo {
    name: Box<str>,
    quota: u64,
    window: Option<u64>,
    policy: HeaderValue,
}

impl LimitInfo {
    /// A limit of `quota` requests per `window` (whole seconds, rounded up, at least 1).
    pub fn rate(name: &str, quota: u64, window: Duration) -> LimitInfo {
        let window = window.as_micros().div_ceil(1_000_000).max(1);
        LimitInfo::make(name, quota, Some(u64::try_from(window).unwrap_or(u64::MAX)))
    }

    /// A limit of `limit` requests in flight at once.
    pub fn concurrency(name: &str, limit: u64) -> LimitInfo {
        LimitInfo::make(name, limit, None)
    }

    /// How `algorithm` is described: windows by their count and length; buckets and other
    /// rates by the burst and the whole seconds it takes to refill it (`rate=10/s,burst=20` is
    /// `q=20;w=2`; `rate=10/s,burst=1` is `q=10;w=1`: a window never shorter than a second,
    /// holding what the rate admits in it).
    pub fn of(name: &str, algorithm: &AnyAlgorithm) -> LimitInfo {
        let rate =
            |rate: Rate, burst: u64| rate_policy(rate.permits(), rate.period_micros(), burst);
        let (quota, window) = match algorithm {
            AnyAlgorithm::Concurrency(c) => return LimitInfo::concurrency(name, c.limit()),
            AnyAlgorithm::TokenBucket(a) => rate(a.rate(), a.burst()),
            AnyAlgorithm::Gcra(a) => rate(a.rate(), a.burst()),
            AnyAlgorithm::LeakyBucket(a) => rate(a.rate(), a.bucket_capacity()),
            AnyAlgorithm::LeakyQueue(a) => rate(a.rate(), a.limit()),
            AnyAlgorithm::FixedWindow(a) => window_policy(a.limit(), a.window()),
            AnyAlgorithm::SlidingLog(a) => window_policy(a.limit(), a.window()),
            AnyAlgorithm::SlidingWindow(a) => window_policy(a.limit(), a.window()),
            AnyAlgorithm::SmoothBursty(a) => smooth_policy(a.permits_per_second(), a.max_permits()),
            AnyAlgorithm::SmoothWarmup(a) => smooth_policy(a.permits_per_second(), a.max_permits()),
        };
        LimitInfo::make(name, quota, Some(window))
    }

    fn make(name: &str, quota: u64, window: Option<u64>) -> LimitInfo {
        let name = if name.is_empty() { "default" } else { name };
        // A structured-field string: printable ASCII, without `"` and `\`.
        let clean: String = name
            .chars()
            .map(|c| match c {
                '"' | '\\' => '_',
                ' '..='~' => c,
                _ => '_',
            })
            .collect();
        let value = match window {
            Some(w) => format!("\"{clean}\";q={quota};w={w}"),
            None => format!("\"{clean}\";q={quota};qu=\"concurrent-requests\""),
        };
        let policy = HeaderValue::try_from(value)
            .unwrap_or_else(|_| HeaderValue::from_static("\"default\""));
        LimitInfo {
            name: clean.into(),
            quota,
            window,
            policy,
        }
    }

    /// The name, as the headers quote it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota `q`.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window `w` in seconds; `None` for a concurrency limit.
    pub fn window_seconds(&self) -> Option<u64> {
        self.window
    }

    /// Whether this is a concurrency limit, whose permits are held until the response ends.
    pub fn is_concurrency(&self) -> bool {
        self.window.is_none()
    }

    /// The `RateLimit-Policy` value.
    pub fn policy_header(&self) -> &HeaderValue {
        &self.policy
    }
}

/// `permits` per `period_us`, bursts of `burst`: the whole seconds a burst takes to refill
/// (at least one), and what the rate admits in them.
fn rate_policy(permits: u64, period_us: u64, burst: u64) -> (u64, u64) {
    let (permits, period_us) = (u128::from(permits.max(1)), u128::from(period_us.max(1)));
    let burst_us = (u128::from(burst) * period_us).div_ceil(permits);
    let window = burst_us.div_ceil(1_000_000).max(1);
    let quota = (permits * window * 1_000_000 / period_us).max(1);
    let clamp = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
    (clamp(quota), clamp(window))
}

fn window_policy(limit: u64, window: Duration) -> (u64, u64) {
    let window_us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    rate_policy(limit, window_us, limit)
}

fn smooth_policy(per_second: f64, max_permits: f64) -> (u64, u64) {
    let per_second = per_second.max(f64::MIN_POSITIVE);
    let window = (max_permits / per_second).ceil().max(1.0);
    // Saturating float-to-integer casts: finite positive values well within range.
    let quota = (per_second * window).floor().max(1.0) as u64;
    (quota, window as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> String {
        let algorithm: AnyAlgorithm = spec.parse().expect("spec");
        let info = LimitInfo::of("n", &algorithm);
        info.policy_header().to_str().expect("ascii").to_owned()
    }

    #[test]
    fn policies_of_each_kind() {
        assert_eq!(policy("token-bucket:rate=10/s,burst=20"), "\"n\";q=20;w=2");
        assert_eq!(policy("gcra:rate=10/s,burst=1"), "\"n\";q=10;w=1");
        assert_eq!(policy("gcra:rate=1/m,burst=1"), "\"n\";q=1;w=60");
        assert_eq!(
            policy("fixed-window:limit=100,window=1h"),
            "\"n\";q=100;w=3600"
        );
        assert_eq!(policy("sliding-log:limit=5,window=500ms"), "\"n\";q=10;w=1");
        assert_eq!(policy("leaky-queue:rate=10/s,burst=5"), "\"n\";q=10;w=1");
        assert_eq!(
            policy("concurrency:limit=3"),
            "\"n\";q=3;qu=\"concurrent-requests\""
        );
    }

    #[test]
    fn names_are_made_printable() {
        let info = LimitInfo::rate("a\"b\\c\u{e9}", 5, Duration::from_millis(1500));
        assert_eq!(info.policy_header(), "\"a_b_c_\";q=5;w=2");
        assert_eq!(LimitInfo::rate("", 1, Duration::ZERO).name(), "default");
    }
}
