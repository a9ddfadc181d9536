//! Response headers that tell a client its budget: the IETF `RateLimit-Policy` / `RateLimit`
//! fields, the legacy `X-RateLimit-*` trio, and `Retry-After` on denial.

use crate::serve::policy_header::{push_number, whole_seconds};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::policy_header::PolicyHeader;
    use crate::serve::protocol::{CurrentLimit, EnvoyUnit};
    use std::time::Duration;

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
