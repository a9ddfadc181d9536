//! A controller spec's values: what kind each parameter is, checked when the spec is read, and
//! read again as the builders take them.

use std::time::Duration;

use crate::error::ConfigError;
use crate::spec::values;

/// What a parameter's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueKind {
    /// A whole number, at least 1 (`20`).
    Count,
    /// A plain decimal number (`0.9`).
    Number,
    /// A duration (`250ms`, `1s`).
    Duration,
}

impl ValueKind {
    /// Whether `text` reads as this kind of value; the error names `key`.
    pub(super) fn check(self, key: &'static str, text: &str) -> Result<(), ConfigError> {
        match self {
            ValueKind::Count => count(key, text).map(drop),
            ValueKind::Number => values::number(key, text).map(drop),
            ValueKind::Duration => values::duration(key, text).map(drop),
        }
    }
}

/// A whole number, at least 1, that fits a limit.
fn count(key: &'static str, text: &str) -> Result<u32, ConfigError> {
    let n = values::count(key, text)?;
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        // Zero admits nothing and no parameter counted here means anything at zero.
        _ => Err(ConfigError::invalid(
            key,
            text,
            "expected a whole number from 1 to 4294967295",
        )),
    }
}

/// The parameters of one spec, by their canonical names.
pub(super) struct Values<'a> {
    params: &'a [(&'static str, String)],
}

impl<'a> Values<'a> {
    pub(super) fn new(params: &'a [(&'static str, String)]) -> Values<'a> {
        Values { params }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        values::given(self.params, key)
    }

    /// A whole number, if given.
    pub(super) fn count(&self, key: &'static str) -> Result<Option<u32>, ConfigError> {
        self.get(key).map(|text| count(key, text)).transpose()
    }

    /// A decimal number, if given.
    pub(super) fn number(&self, key: &'static str) -> Result<Option<f64>, ConfigError> {
        self.get(key)
            .map(|text| values::number(key, text))
            .transpose()
    }

    /// A duration, if given.
    pub(super) fn duration(&self, key: &'static str) -> Result<Option<Duration>, ConfigError> {
        self.get(key)
            .map(|text| values::duration(key, text))
            .transpose()
    }
}
