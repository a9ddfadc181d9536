//! Durations the commands' flags take (`500ms`, `2s`, `1m`), parsed by the same rules for
//! `sluicegate serve` and `sluicegate proxy`.

use std::time::Duration;

/// A duration, zero included (a flag where zero turns something off).
pub fn duration_or_zero(text: &str) -> Result<Duration, String> {
    sluicegate::rate::parse_duration(text).map_err(|error| error.to_string())
}

/// A timeout, keepalive or grace: more than zero.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = duration_or_zero(text)?;
    if duration.is_zero() {
        return Err(format!("`{text}` must be more than zero"));
    }
    Ok(duration)
}

/// How often the rules are checked for changes: at least 10 ms (a shorter one would poll the
/// files in a busy loop).
pub fn reload_interval(text: &str) -> Result<Duration, String> {
    let interval = duration_or_zero(text)?;
    if interval < Duration::from_millis(10) {
        return Err(format!("`{text}` is shorter than 10ms"));
    }
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_say_what_is_wrong() {
        assert_eq!(positive_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration_or_zero("0s"), Ok(Duration::ZERO));
        assert!(positive_duration("0s").is_err_and(|e| e.contains("more than zero")));
        assert!(positive_duration("soon").is_err_and(|e| e.contains("soon")));
        assert_eq!(reload_interval("10ms"), Ok(Duration::from_millis(10)));
        assert!(reload_interval("1ms").is_err_and(|e| e.contains("shorter than 10ms")));
    }
}
