//! The server's own word on when to call again: `Retry-After` and the IETF `RateLimit`
//! fields of a 429 or 503, and the table of hosts held until then.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

/// Hosts held at once before expired holds are swept (a host is held for minutes at most, so
/// the table stays small; the sweep keeps a client calling many hosts bounded).
const SWEEP_AT: usize = 1024;

/// How long the server asks to be left alone, from a response: only for a 429 or 503, from
/// `Retry-After` (delay seconds, or an HTTP date, measured against `now`), else the IETF
/// `RateLimit` field's `t=` (the draft's current form, `"name";r=0;t=10`), else the older
/// `RateLimit-Reset` / `X-RateLimit-Reset` in seconds. `None` when it says nothing usable.
pub fn server_hold(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    if let Some(value) = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) {
        let value = value.trim();
        if let Ok(seconds) = value.parse::<u64>() {
            return Some(Duration::from_secs(seconds));
        }
        if let Ok(date) = httpdate::parse_http_date(value) {
            // A date already past means "now".
            return Some(date.duration_since(now).unwrap_or(Duration::ZERO));
        }
    }
    let ratelimit = headers
        .get_all("ratelimit")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(reset_of_ratelimit)
        .max();
    if ratelimit.is_some() {
        return ratelimit.map(Duration::from_secs);
    }
    ["ratelimit-reset", "x-ratelimit-reset"]
        .iter()
        .find_map(|name| {
            let value = headers
                .get(*name)?
                .to_str()
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()?;
            Some(Duration::from_secs(value))
        })
}

/// The longest `t=` of a `RateLimit` field value (one or more `"name";r=..;t=..` items).
fn reset_of_ratelimit(value: &str) -> Option<u64> {
    value
        .split(',')
        .filter_map(|item| {
            item.split(';')
                .skip(1)
                .filter_map(|param| param.trim().strip_prefix("t="))
                .find_map(|t| t.trim().parse::<u64>().ok())
        })
        .max()
}

/// Hosts the server asked to leave alone, each until an instant of tokio's clock.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    until: Mutex<HashMap<Box<str>, Instant>>,
}

impl Holds {
    /// How long `host` is still held, if it is.
    pub(crate) fn remaining(&self, host: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut table = self.until.lock().unwrap_or_else(|e| e.into_inner());
        match table.get(host) {
            Some(&until) if until > now => Some(until - now),
            Some(_) => {
                table.remove(host);
                None
            }
            None => None,
        }
    }

    /// Holds `host` for `hold` from now (never shortening a longer hold already set).
    pub(crate) fn hold(&self, host: &str, hold: Duration) {
        let now = Instant::now();
        let until = now + hold;
        let mut table = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() >= SWEEP_AT {
            table.retain(|_, until| *until > now);
        }
        let entry = table.entry(host.into()).or_insert(until);
        *entry = (*entry).max(until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hold(status: u16, name: &'static str, value: &'static str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        server_hold(StatusCode::from_u16(status).expect("status"), &headers, now)
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(
            hold(429, "retry-after", "120"),
            Some(Duration::from_secs(120))
        );
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        let date = "Sun, 06 Nov 1994 08:50:07 GMT";
        assert_eq!(
            hold(503, "retry-after", date),
            Some(Duration::from_secs(30))
        );
        let past = "Sun, 06 Nov 1994 08:00:00 GMT";
        assert_eq!(hold(429, "retry-after", past), Some(Duration::ZERO));
        assert_eq!(hold(429, "retry-after", "soon"), None);
    }

    #[test]
    fn ratelimit_fields() {
        let value = "\"hourly\";r=0;t=36, \"burst\";r=0;t=2";
        assert_eq!(hold(429, "ratelimit", value), Some(Duration::from_secs(36)));
        assert_eq!(
            hold(429, "ratelimit-reset", "7"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            hold(429, "x-ratelimit-reset", "9"),
            Some(Duration::from_secs(9))
        );
    }

    #[test]
    fn only_for_429_and_503() {
        assert_eq!(hold(200, "retry-after", "120"), None);
        assert_eq!(hold(500, "retry-after", "120"), None);
    }
}
