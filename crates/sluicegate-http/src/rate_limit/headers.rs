//! The fields that tell a client its budget: the IETF `RateLimit-Policy` / `RateLimit` fields
//! (draft-ietf-httpapi-ratelimit-headers), the legacy `X-RateLimit-*` trio, and `Retry-After`
//! on denial. The same format as `sluicegate serve`: the tightest limit is described.

use std::fmt::Write;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::rate_limit::backend::Verdict;

/// Which fields answers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderOptions {
    /// `RateLimit-Policy` and `RateLimit`.
    pub(crate) ietf: bool,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    pub(crate) legacy: bool,
    /// `Retry-After` on denials.
    pub(crate) retry_after: bool,
    /// The fields on allowed responses too.
    pub(crate) on_allowed: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            ietf: true,
            legacy: false,
            retry_after: true,
            on_allowed: false,
        }
    }
}

/// Fields to add to a response (a `Vec`: empty, the usual case, it is three words and no
/// allocation, where an inline array would be moved with every future).
pub(crate) type Fields = Vec<(HeaderName, HeaderValue)>;

/// The fields describing `verdict`'s tightest limit; `Retry-After` if `denied` (and wanted).
pub(crate) fn fields(verdict: &Verdict, options: &HeaderOptions, denied: bool) -> Fields {
    let mut fields = Fields::with_capacity(6);
    let Some((decision, limit)) = verdict.tightest() else {
        return fields;
    };
    let reset = (!limit.is_concurrency()).then(|| whole_seconds(decision.reset_after_micros()));
    if options.ietf {
        fields.push((
            HeaderName::from_static("ratelimit-policy"),
            limit.policy_header().clone(),
        ));
        let mut value = String::with_capacity(limit.name().len() + 32);
        // Writing to a String cannot fail.
        let _ = write!(value, "\"{}\";r={}", limit.name(), decision.remaining());
        if let Some(reset) = reset {
            let _ = write!(value, ";t={reset}");
        }
        if let Ok(value) = HeaderValue::try_from(value) {
            fields.push((HeaderName::from_static("ratelimit"), value));
        }
    }
    if options.legacy {
        fields.push((
            HeaderName::from_static("x-ratelimit-limit"),
            HeaderValue::from(limit.quota()),
        ));
        fields.push((
            HeaderName::from_static("x-ratelimit-remaining"),
            HeaderValue::from(decision.remaining()),
        ));
        if let Some(reset) = reset {
            fields.push((
                HeaderName::from_static("x-ratelimit-reset"),
                HeaderValue::from(reset),
            ));
        }
    }
    if denied && options.retry_after {
        fields.push((
            http::header::RETRY_AFTER,
            HeaderValue::from(retry_after(verdict)),
        ));
    }
    fields
}

/// Whole seconds until the request could pass, rounded up and at least 1 (a concurrency limit,
/// which frees a permit only when a holder ends, says 1).
pub(crate) fn retry_after(verdict: &Verdict) -> u64 {
    verdict.tightest().map_or(1, |(decision, _)| {
        let micros = decision
            .retry_after_micros()
            .unwrap_or(decision.reset_after_micros());
        whole_seconds(micros).max(1)
    })
}

/// Adds `fields` to `headers`.
pub(crate) fn extend(headers: &mut HeaderMap, fields: Fields) {
    for (name, value) in fields {
        headers.append(name, value);
    }
}

/// Microseconds as whole seconds, rounded up, so a client never comes back too early.
fn whole_seconds(micros: u64) -> u64 {
    micros.div_ceil(1_000_000)
}
