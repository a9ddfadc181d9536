//! Response headers that tell a client its budget: the IETF `RateLimit-Policy` / `RateLimit`
//! fields, the legacy `X-RateLimit-*` trio, and `Retry-After` on denial.

use std::time::Duration;

use sluicegate_http::ratelimit_fields::{Field, FieldChoice, Standing, tightest, write_fields};

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

/// The headers for an answer, describing its tightest descriptor by the
/// [one rule](sluicegate_http::ratelimit_fields::tightest) the proxy's answers follow too.
pub fn headers_for(
    statuses: &[DescriptorVerdict],
    options: &HeaderOptions,
) -> Vec<(String, String)> {
    let limited = statuses
        .iter()
        .filter_map(|s| s.current_limit.as_ref().map(|limit| (s, limit)));
    let Some(((_, limit), standing)) = tightest(limited, |(status, _)| standing(status)) else {
        return Vec::new();
    };
    let choice = FieldChoice {
        ietf: options.ietf,
        legacy: options.legacy.is_some(),
        retry_after: options.retry_after,
    };
    let mut headers = Vec::with_capacity(6);
    write_fields(&limit.policy, &standing, choice, |field, value| {
        headers.push((name(field, options), value.into_string()));
    });
    headers
}

/// What the fields say of a descriptor's answer.
pub(crate) fn standing(status: &DescriptorVerdict) -> Standing {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Standing {
        denied: status.code == Code::OverLimit,
        remaining: u64::from(status.limit_remaining),
        // Every limit of the service has a window: an unknown reset is said as `t=0`.
        reset_micros: Some(status.duration_until_reset.map_or(0, micros)),
        retry_micros: status.retry_after.map(micros),
    }
}

/// The name Envoy is told to write for `field` (the legacy ones as the operator named them).
fn name(field: Field, options: &HeaderOptions) -> String {
    let legacy = options.legacy.as_ref();
    let renamed = |pick: fn(&LegacyHeaderNames) -> &String| legacy.map(pick).cloned();
    match field {
        Field::Policy => Some("RateLimit-Policy".to_owned()),
        Field::RateLimit => Some("RateLimit".to_owned()),
        Field::LegacyLimit => renamed(|names| &names.limit),
        Field::LegacyRemaining => renamed(|names| &names.remaining),
        Field::LegacyReset => renamed(|names| &names.reset),
        Field::RetryAfter => Some("Retry-After".to_owned()),
    }
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::{CurrentLimit, EnvoyUnit};
    use sluicegate_http::rate_limit::LimitInfo;

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
                policy: LimitInfo::rate("", 10, Duration::from_secs(60)),
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
    fn legacy_headers_take_the_operators_names() {
        let options = HeaderOptions {
            ietf: false,
            legacy: Some(LegacyHeaderNames {
                limit: "L".into(),
                remaining: "R".into(),
                reset: "T".into(),
            }),
            retry_after: false,
        };
        let headers = headers_for(&[status(Code::OverLimit, 0, 2_000, Some(500))], &options);
        assert_eq!(
            headers,
            vec![
                ("L".into(), "10".into()),
                ("R".into(), "0".into()),
                ("T".into(), "2".into()),
            ]
        );
    }

    #[test]
    fn no_limit_no_headers() {
        assert!(
            headers_for(&[DescriptorVerdict::unlimited()], &HeaderOptions::default()).is_empty()
        );
    }
}
