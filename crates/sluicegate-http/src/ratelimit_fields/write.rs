//! The fields written for one limit: `RateLimit-Policy`, `RateLimit`, the legacy
//! `X-RateLimit-*` trio and `Retry-After`.

use http::{HeaderName, HeaderValue};

use crate::ratelimit_fields::{LimitInfo, Standing};

/// Which fields an answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldChoice {
    /// The IETF `RateLimit-Policy` and `RateLimit` fields.
    pub ietf: bool,
    /// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` fields.
    pub legacy: bool,
    /// `Retry-After` when the limit denied the request.
    pub retry_after: bool,
}

/// One of the fields an answer can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `RateLimit-Policy`: the limit's name, quota and window.
    Policy,
    /// `RateLimit`: the limit's name, requests left and seconds to the reset.
    RateLimit,
    /// `X-RateLimit-Limit`: the quota.
    LegacyLimit,
    /// `X-RateLimit-Remaining`: requests left.
    LegacyRemaining,
    /// `X-RateLimit-Reset`: seconds to the reset.
    LegacyReset,
    /// `Retry-After`: whole seconds until the request could pass.
    RetryAfter,
}

impl Field {
    /// The field's name as HTTP/2 writes it (lowercase).
    pub fn header_name(self) -> HeaderName {
        match self {
            Field::Policy => HeaderName::from_static("ratelimit-policy"),
            Field::RateLimit => HeaderName::from_static("ratelimit"),
            Field::LegacyLimit => HeaderName::from_static("x-ratelimit-limit"),
            Field::LegacyRemaining => HeaderName::from_static("x-ratelimit-remaining"),
            Field::LegacyReset => HeaderName::from_static("x-ratelimit-reset"),
            Field::RetryAfter => http::header::RETRY_AFTER,
        }
    }
}

/// A field's value, in the form it is made in, so that neither a header map nor a list of
/// strings pays for converting the other's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// The limit's `RateLimit-Policy` value, made once per limit.
    Policy(&'a HeaderValue),
    /// `RateLimit`'s value.
    Text(String),
    /// A count of requests or seconds.
    Number(u64),
}

impl FieldValue<'_> {
    /// The value as a header value.
    pub fn into_header_value(self) -> HeaderValue {
        match self {
            FieldValue::Policy(value) => value.clone(),
            // Made of a cleaned name and digits: always a valid value.
            FieldValue::Text(text) => {
                HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
            }
            FieldValue::Number(n) => HeaderValue::from(n),
        }
    }

    /// The value as text.
    pub fn into_string(self) -> String {
        match self {
            FieldValue::Policy(value) => value.to_str().unwrap_or_default().to_owned(),
            FieldValue::Text(text) => text,
            FieldValue::Number(n) => itoa::Buffer::new().format(n).to_owned(),
        }
    }
}

/// Passes `push` the fields `choice` names describing `limit` at `standing`, in the order
/// `RateLimit-Policy`, `RateLimit`, the legacy trio, `Retry-After` (only if the limit denied).
/// A concurrency limit, which has no reset, says no `t=` and no `X-RateLimit-Reset`.
pub fn write_fields(
    limit: &LimitInfo,
    standing: &Standing,
    choice: FieldChoice,
    mut push: impl FnMut(Field, FieldValue<'_>),
) {
    let reset = standing.reset_seconds();
    if choice.ietf {
        push(Field::Policy, FieldValue::Policy(limit.policy_header()));
        push(
            Field::RateLimit,
            FieldValue::Text(budget(limit, standing, reset)),
        );
    }
    if choice.legacy {
        push(Field::LegacyLimit, FieldValue::Number(limit.quota()));
        push(
            Field::LegacyRemaining,
            FieldValue::Number(standing.remaining),
        );
        if let Some(reset) = reset {
            push(Field::LegacyReset, FieldValue::Number(reset));
        }
    }
    if choice.retry_after && standing.denied {
        push(
            Field::RetryAfter,
            FieldValue::Number(standing.retry_after_seconds()),
        );
    }
}

/// `RateLimit`'s value, `"name";r=remaining;t=reset`.
fn budget(limit: &LimitInfo, standing: &Standing, reset: Option<u64>) -> String {
    let mut digits = itoa::Buffer::new();
    // Room for the quoted name and two numbers: one allocation.
    let mut value = String::with_capacity(limit.name().len() + 48);
    value.push('"');
    value.push_str(limit.name());
    value.push_str("\";r=");
    value.push_str(digits.format(standing.remaining));
    if let Some(reset) = reset {
        value.push_str(";t=");
        value.push_str(digits.format(reset));
    }
    value
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const ALL: FieldChoice = FieldChoice {
        ietf: true,
        legacy: true,
        retry_after: true,
    };

    fn written(
        limit: &LimitInfo,
        standing: &Standing,
        choice: FieldChoice,
    ) -> Vec<(Field, String)> {
        let mut fields = Vec::new();
        write_fields(limit, standing, choice, |field, value| {
            fields.push((field, value.into_string()));
        });
        fields
    }

    #[test]
    fn a_denied_rate_limit_says_everything() {
        let limit = LimitInfo::rate("hourly", 10, Duration::from_secs(3600));
        let standing = Standing {
            denied: true,
            remaining: 0,
            reset_micros: Some(9_000_000),
            retry_micros: Some(1_200_000),
        };
        assert_eq!(
            written(&limit, &standing, ALL),
            [
                (Field::Policy, "\"hourly\";q=10;w=3600".to_owned()),
                (Field::RateLimit, "\"hourly\";r=0;t=9".to_owned()),
                (Field::LegacyLimit, "10".to_owned()),
                (Field::LegacyRemaining, "0".to_owned()),
                (Field::LegacyReset, "9".to_owned()),
                (Field::RetryAfter, "2".to_owned()),
            ]
        );
    }

    #[test]
    fn a_concurrency_limit_has_no_reset_and_an_allowance_no_retry() {
        let limit = LimitInfo::concurrency("in-flight", 2);
        let standing = Standing {
            denied: false,
            remaining: 1,
            reset_micros: None,
            retry_micros: None,
        };
        let fields = written(&limit, &standing, ALL);
        assert_eq!(
            fields,
            [
                (
                    Field::Policy,
                    "\"in-flight\";q=2;qu=\"concurrent-requests\"".to_owned()
                ),
                (Field::RateLimit, "\"in-flight\";r=1".to_owned()),
                (Field::LegacyLimit, "2".to_owned()),
                (Field::LegacyRemaining, "1".to_owned()),
            ]
        );
    }

    #[test]
    fn values_become_header_values_unchanged() {
        let limit = LimitInfo::rate("a", u64::MAX, Duration::from_secs(1));
        let standing = Standing {
            denied: true,
            remaining: u64::MAX,
            reset_micros: Some(0),
            retry_micros: None,
        };
        let mut values = Vec::new();
        write_fields(&limit, &standing, ALL, |field, value| {
            values.push((field.header_name(), value.into_header_value()));
        });
        let remaining = values
            .iter()
            .find(|(name, _)| name == "x-ratelimit-remaining")
            .map(|(_, value)| value.clone());
        assert_eq!(remaining, Some(HeaderValue::from(u64::MAX)));
        let budget = values.iter().find(|(name, _)| name == "ratelimit");
        assert_eq!(
            budget.map(|(_, value)| value.as_bytes()),
            Some(format!("\"a\";r={};t=0", u64::MAX).as_bytes())
        );
    }
}
