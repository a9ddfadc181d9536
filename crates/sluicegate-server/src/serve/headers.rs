//! Response headers that tell a client its budget: the IETF `RateLimit-Policy` / `RateLimit`
//! fields, the legacy `X-RateLimit-*` trio, and `Retry-After` on denial.

use std::sync::Arc;
use std::time::Duration;

use crate::serve::protocol::{Code, DescriptorVerdict};

/// Which headers to add to answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderOptions {
    /// Add the IETF `RateLimit-Policy` and `RateLimit` fields.
    pub ietf: bool,
    /// Add the legacy trio under these names (limit, remaining, reset), if set.
    pub legacy: Option<LegacyHeaderNames>,
    /// Add `Retry-After` (whole seconds, rounded up) when over the limit.
    pub retry_after: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            ietf: true,
            legacy: None,
            retry_after: true,
        }
    }
}

/// Names for the legacy headers (envoyproxy/ratelimit lets operators rename them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyHeaderNames {
    /// The limit header, by default `X-RateLimit-Limit`.
    pub limit: String,
    /// The remaining header, by default `X-RateLimit-Remaining`.
    pub remaining: String,
    /// The reset header, by default `X-RateLimit-Reset`.
    pub reset: String,
}

impl Default for LegacyHeaderNames {
    fn default() -> Self {
        LegacyHeaderNames {
            limit: "X-RateLimit-Limit".into(),
            remaining: "X-RateLimit-Remaining".into(),
            reset: "X-RateLimit-Reset".into(),
        }
    }
}

/// The headers for an answer, describing its most restrictive descriptor: the one over the
/// limit with the longest wait, else the one with the fewest requests left.
pub fn headers_for(
    statuses: &[DescriptorVerdict],
    options: &HeaderOptions,
) -> Vec<(String, String)> {
    let Some(tightest) = statuses
        .iter()
        .filter(|s| s.current_limit.is_some())
        .min_by_key(|s| {
            let over = s.code == Code::OverLimit;
            (
                !over,
                if over {
                    u64::MAX - whole_seconds(s.retry_after)
                } else {
                    0
                },
                s.limit_remaining,
            )
        })
    else {
        return Vec::new();
    };
    let Some(limit) = &tightest.current_limit else {
        return Vec::new();
    };
    let reset = whole_seconds(tightest.duration_until_reset);
    let over = options.retry_after && tightest.code == Code::OverLimit;
    let count = 2 * usize::from(options.ietf)
        + 3 * usize::from(options.legacy.is_some())
        + usize::from(over);
    let mut headers = Vec::with_capacity(count);
    if options.ietf {
        let quoted_name = limit.policy.quoted_name();
        headers.push((
            "RateLimit-Policy".to_owned(),
            limit.policy.value().to_owned(),
        ));
        // Room for the quoted name and two numbers: one allocation.
        let mut value = String::with_capacity(quoted_name.len() + 48);
        value.push_str(quoted_name);
        value.push_str(";r=");
        push_number(&mut value, u64::from(tightest.limit_remaining));
        value.push_str(";t=");
        push_number(&mut value, reset);
        headers.push(("RateLimit".to_owned(), value));
    }
    if let Some(names) = &options.legacy {
        headers.push((names.limit.clone(), limit.requests_per_unit.to_string()));
        headers.push((
            names.remaining.clone(),
            tightest.limit_remaining.to_string(),
        ));
        headers.push((names.reset.clone(), reset.to_string()));
    }
    if over {
        let retry = whole_seconds(tightest.retry_after.or(tightest.duration_until_reset)).max(1);
        headers.push(("Retry-After".to_owned(), retry.to_string()));
    }
    headers
}

/// A limit's `RateLimit-Policy` value, `"name";q=requests;w=seconds`: it depends on the limit
/// alone, so it is written once per limit, not for every answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyHeader {
    value: Arc<str>,
    /// The length of the quoted name the value starts with (the `RateLimit` value's start).
    quoted_name_len: usize,
}

impl PolicyHeader {
    /// The header of a limit named `name` (`default` if empty; `"` and `\` become `_`) of
    /// `requests_per_unit` requests per `window` (whole seconds, rounded up, at least 1).
    pub fn new(name: &str, requests_per_unit: u32, window: Duration) -> PolicyHeader {
        let name = if name.is_empty() { "default" } else { name };
        let mut value = String::with_capacity(name.len() + 32);
        value.push('"');
        value.push_str(&name.replace(['"', '\\'], "_"));
        value.push('"');
        let quoted_name_len = value.len();
        value.push_str(";q=");
        push_number(&mut value, u64::from(requests_per_unit));
        value.push_str(";w=");
        push_number(&mut value, whole_seconds(Some(window)).max(1));
        PolicyHeader {
            value: value.into(),
            quoted_name_len,
        }
    }

    /// The header's value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// `"name"`, as both IETF headers start.
    fn quoted_name(&self) -> &str {
        self.value.get(..self.quoted_name_len).unwrap_or_default()
    }
}

/// Appends `n` in decimal, without the formatting machinery (this runs for every answer).
fn push_number(out: &mut String, mut n: u64) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // A digit: n % 10 < 10 fits in a byte.
        digits[start] += (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Pushed as chars: no UTF-8 validation of the digits, which cost as much as making them.
    out.reserve(digits.len() - start);
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

/// Whole seconds, rounded up, so a client never comes back too early.
fn whole_seconds(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| d.as_micros().div_ceil(1_000_000) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::{CurrentLimit, EnvoyUnit};

    fn status(
        code: Code,
        remaining: u32,
        reset_ms: u64,
        retry_ms: Option<u64>,
    ) -> DescriptorVerdict {
        DescriptorVerdict {
            code,
            current_limit: Some(CurrentLimit {
                aligned: false,
                name: String::new(),
                requests_per_unit: 10,
                unit: EnvoyUnit::Minute,
                window: Duration::from_secs(60),
                policy: PolicyHeader::new("", 10, Duration::from_secs(60)),
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration::from_millis(reset_ms)),
            retry_after: retry_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn describes_the_tightest_descriptor() {
        let options = HeaderOptions {
            legacy: Some(LegacyHeaderNames::default()),
            ..HeaderOptions::default()
        };
        let headers = headers_for(
            &[
                status(Code::Ok, 5, 1000, None),
                status(Code::Ok, 2, 30_500, None),
            ],
            &options,
        );
        assert_eq!(
            headers,
            vec![
                ("RateLimit-Policy".into(), "\"default\";q=10;w=60".into()),
                ("RateLimit".into(), "\"default\";r=2;t=31".into()),
                ("X-RateLimit-Limit".into(), "10".into()),
                ("X-RateLimit-Remaining".into(), "2".into()),
                ("X-RateLimit-Reset".into(), "31".into()),
            ]
        );
    }

    #[test]
    fn over_limit_adds_retry_after_rounded_up() {
        let headers = headers_for(
            &[
                status(Code::Ok, 5, 1000, None),
                status(Code::OverLimit, 0, 9_000, Some(1_200)),
            ],
            &HeaderOptions::default(),
        );
        assert!(
            headers.contains(&("Retry-After".into(), "2".into())),
            "{headers:?}"
        );
        assert!(headers.contains(&("RateLimit".into(), "\"default\";r=0;t=9".into())));
    }

    #[test]
    fn policy_names_are_quoted_and_escaped() {
        let policy = PolicyHeader::new("a\"b\\c", 5, Duration::from_millis(1500));
        assert_eq!(policy.value(), "\"a_b_c\";q=5;w=2");
        assert_eq!(policy.quoted_name(), "\"a_b_c\"");
        let policy = PolicyHeader::new("", 7, Duration::from_millis(1));
        assert_eq!(policy.value(), "\"default\";q=7;w=1");
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 99, 1_000_000_000, u64::MAX] {
            let mut out = String::new();
            push_number(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn no_limit_no_headers() {
        assert!(
            headers_for(&[DescriptorVerdict::unlimited()], &HeaderOptions::default()).is_empty()
        );
    }
}
