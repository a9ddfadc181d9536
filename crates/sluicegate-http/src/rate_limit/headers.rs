//! The layer's answers carry the [shared fields](crate::ratelimit_fields) as header values.

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::rate_limit::backend::Verdict;
use crate::ratelimit_fields::{FieldChoice, write_fields};

/// Which fields answers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderOptions {
    /// The fields on denials.
    pub(crate) choice: FieldChoice,
    /// The fields on allowed responses too.
    pub(crate) on_allowed: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            choice: FieldChoice {
                ietf: true,
                legacy: false,
                retry_after: true,
            },
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
    let Some(((_, limit), standing)) = verdict.tightest_standing() else {
        return fields;
    };
    let choice = FieldChoice {
        retry_after: options.choice.retry_after && denied,
        ..options.choice
    };
    write_fields(limit, &standing, choice, |field, value| {
        fields.push((field.header_name(), value.into_header_value()));
    });
    fields
}

/// Whole seconds until the request could pass, rounded up and at least 1 (a concurrency limit,
/// which frees a permit only when a holder ends, says 1).
pub(crate) fn retry_after(verdict: &Verdict) -> u64 {
    verdict
        .tightest_standing()
        .map_or(1, |(_, standing)| standing.retry_after_seconds())
}

/// Adds `fields` to `headers`.
pub(crate) fn extend(headers: &mut HeaderMap, fields: Fields) {
    for (name, value) in fields {
        headers.append(name, value);
    }
}
