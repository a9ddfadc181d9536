//! Parameter checks the window algorithms share.

use std::time::Duration;

use crate::clock::Micros;
use crate::error::ConfigError;

/// A window's length in whole microseconds: at least 1µs and at most `u64::MAX` µs.
pub(crate) fn window_micros(window: Duration) -> Result<Micros, ConfigError> {
    let micros = window.as_micros();
    if micros == 0 {
        return Err(ConfigError::invalid(
            "window",
            format!("{window:?}"),
            "must be at least 1µs",
        ));
    }
    if window.subsec_nanos() % 1_000 != 0 {
        return Err(ConfigError::invalid(
            "window",
            format!("{window:?}"),
            "must be a whole number of microseconds",
        ));
    }
    u64::try_from(micros).map_err(|_| {
        ConfigError::invalid(
            "window",
            format!("{window:?}"),
            "is too long to count in µs",
        )
    })
}

/// A window's limit: at least one permit.
pub(crate) fn positive_limit(limit: u64) -> Result<u64, ConfigError> {
    if limit == 0 {
        return Err(ConfigError::invalid("limit", limit, "must be at least 1"));
    }
    Ok(limit)
}
