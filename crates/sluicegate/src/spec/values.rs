//! Reading a spec's names and one parameter's value, with errors that name the parameter;
//! shared by the algorithm specs and the adaptive controller specs.

use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;
use crate::rate::{Decimal, Rate, parse_duration};

/// The value given for parameter `name` among a spec's (name, value) pairs.
pub(crate) fn given<'a>(params: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
}

/// The entry of `kinds` whose `name` is `written`, read case-insensitively and with `_` for
/// `-`, as spec names are.
pub(crate) fn named<'k, K>(
    kinds: &'k [K],
    name: impl Fn(&K) -> &str,
    written: &str,
) -> Option<&'k K> {
    let wanted = written.trim().to_ascii_lowercase().replace('_', "-");
    kinds.iter().find(|kind| name(kind) == wanted)
}

/// The reason inside an error from a value reader, without the text it repeats.
fn reason_of(error: ConfigError) -> String {
    match error {
        ConfigError::Syntax { reason, .. } | ConfigError::InvalidParameter { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// A rate such as `10/s`, `100/1m`, `0.5/s`.
pub(super) fn rate(name: &'static str, text: &str) -> Result<Rate, ConfigError> {
    Rate::from_str(text).map_err(|e| {
        ConfigError::invalid(
            name,
            text,
            format!(
                "{} (expected a rate such as 10/s, 100/1m or 0.5/s)",
                reason_of(e)
            ),
        )
    })
}

/// A duration such as `250ms`, `4s`, `1.5s`, `1m`.
pub(crate) fn duration(name: &'static str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text).map_err(|e| {
        ConfigError::invalid(
            name,
            text,
            format!(
                "{} (expected a duration such as 250ms, 4s, 1.5s or 1m)",
                reason_of(e)
            ),
        )
    })
}

/// A whole number such as `20`.
pub(crate) fn count(name: &'static str, text: &str) -> Result<u64, ConfigError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::invalid(
            name,
            text,
            "expected a whole number such as 20",
        ));
    }
    trimmed
        .parse()
        .map_err(|_| ConfigError::invalid(name, text, "number too large"))
}

/// A plain non-negative decimal number such as `2`, `0.5` or `2.5`.
pub(crate) fn number(name: &'static str, text: &str) -> Result<f64, ConfigError> {
    let decimal = Decimal::parse(text.trim()).map_err(|reason| {
        ConfigError::invalid(
            name,
            text,
            format!("{reason} (expected a number such as 2 or 0.5)"),
        )
    })?;
    Ok(decimal.mantissa as f64 / 10f64.powi(decimal.scale as i32))
}

/// Permits per second for the smooth limiters: a plain number as Guava takes it (`5`, `0.5`),
/// or a rate (`300/1m`) converted to one.
pub(super) fn per_second(name: &'static str, text: &str) -> Result<f64, ConfigError> {
    if text.contains('/') {
        return rate(name, text).map(|r| r.per_second_f64());
    }
    number(name, text)
}
