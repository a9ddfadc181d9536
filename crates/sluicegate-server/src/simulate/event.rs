//! One event of a trace: at `t`, `key` asks for `permits` with `op`.

use sluicegate::Micros;
use sluicegate::state_machine::Op;

/// An event, read from a trace line or generated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// Microseconds since the start.
    pub(crate) t: Micros,
    pub(crate) key: String,
    pub(crate) permits: u64,
    pub(crate) op: EventOp,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EventOp {
    /// Asks the limiter (`check`, `peek`, `charge`, `acquire`, `try:SECONDS`, `release`); the
    /// text is the op as echoed in the output.
    Decide(Op, String),
    /// `set_rate:RATE`: the limiter (all keys) moves to a new rate.
    SetRate(String),
}

impl EventOp {
    /// The op as written in the output.
    pub(crate) fn text(&self) -> String {
        match self {
            EventOp::Decide(_, text) => text.clone(),
            EventOp::SetRate(rate) => format!("set_rate:{rate}"),
        }
    }

    /// Reads an op column; empty is `check`.
    pub(crate) fn parse(text: &str) -> Result<EventOp, String> {
        let text = text.trim();
        let (name, argument) = match text.split_once(':') {
            Some((name, argument)) => (name.trim(), Some(argument.trim())),
            None => (text, None),
        };
        let name = name.to_ascii_lowercase();
        let plain = |op: Op, echo: &str| match argument {
            None => Ok(EventOp::Decide(op, echo.to_owned())),
            Some(_) => Err(format!("op `{echo}` takes no argument")),
        };
        match (name.as_str(), argument) {
            ("" | "check", _) => plain(Op::Check, "check"),
            ("peek", _) => plain(Op::Peek, "peek"),
            ("charge", _) => plain(Op::Charge, "charge"),
            ("acquire", _) => plain(Op::Reserve { max_wait: None }, "acquire"),
            ("release", _) => plain(Op::Release, "release"),
            ("try", Some(timeout)) => {
                let max_wait = parse_timeout(timeout)?;
                Ok(EventOp::Decide(
                    Op::Reserve {
                        max_wait: Some(max_wait),
                    },
                    format!("try:{timeout}"),
                ))
            }
            ("set_rate" | "set-rate", Some(rate)) if !rate.is_empty() => {
                Ok(EventOp::SetRate(rate.to_owned()))
            }
            ("try", _) => Err("op `try` needs a timeout: try:SECONDS".into()),
            ("set_rate" | "set-rate", _) => Err("op `set_rate` needs a rate: set_rate:RATE".into()),
            _ => Err(format!(
                "unknown op `{text}` (ops: check, peek, charge, acquire, try:SECONDS, set_rate:RATE, release)"
            )),
        }
    }
}

/// A `try` timeout: seconds (`0.5`) or a duration with a unit (`500ms`). A negative one
/// (`-1`, `-250ms`) is no wait at all, as Guava's `tryAcquire` takes it (`max(timeout, 0)`).
fn parse_timeout(text: &str) -> Result<Micros, String> {
    match text.strip_prefix('-') {
        Some(magnitude) => parse_magnitude(magnitude.trim_start()).map(|_| 0),
        None => parse_magnitude(text),
    }
}

/// A `try` timeout without its sign.
fn parse_magnitude(text: &str) -> Result<Micros, String> {
    if text.ends_with(|c: char| c.is_ascii_alphabetic()) {
        return sluicegate::rate::parse_duration(text)
            .map(sluicegate::clock::micros_ceil)
            .map_err(|e| format!("bad timeout: {e}"));
    }
    parse_seconds(text).map_err(|e| format!("bad timeout `{text}`: {e}"))
}

/// Decimal seconds with at most microsecond precision (`1.5`, `0.000001`), as microseconds.
pub(crate) fn parse_seconds(text: &str) -> Result<Micros, String> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_only(whole) || !digits_only(fraction) {
        return Err("expected seconds as a non-negative decimal number, such as 1.25".into());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > 6 {
        return Err("finer than a microsecond".into());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "too large".to_string())?
    };
    let fraction_us: u64 = format!("{fraction:0<6}")
        .parse()
        .map_err(|_| "bad fraction".to_string())?;
    whole
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(fraction_us))
        .ok_or_else(|| "too large".to_string())
}

/// Microseconds as seconds, for the output (exact for any trace time).
pub(crate) fn seconds(micros: Micros) -> f64 {
    micros as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_seconds_to_the_microsecond() {
        assert_eq!(parse_seconds("0.2"), Ok(200_000));
        assert_eq!(parse_seconds("12"), Ok(12_000_000));
        assert_eq!(parse_seconds(".000001"), Ok(1));
        assert_eq!(parse_seconds("1.5000000"), Ok(1_500_000));
        assert!(parse_seconds("1.0000001").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("").is_err());
        assert!(parse_seconds("1e3").is_err());
        assert!(parse_seconds("99999999999999999999").is_err());
    }

    #[test]
    fn reads_ops() {
        assert_eq!(
            EventOp::parse(""),
            Ok(EventOp::Decide(Op::Check, "check".into()))
        );
        assert_eq!(
            EventOp::parse("try:0.5"),
            Ok(EventOp::Decide(
                Op::Reserve {
                    max_wait: Some(500_000)
                },
                "try:0.5".into()
            ))
        );
        assert_eq!(
            EventOp::parse("try:250ms").map(|op| op.text()),
            Ok("try:250ms".into())
        );
        assert_eq!(
            EventOp::parse("set_rate:2.5"),
            Ok(EventOp::SetRate("2.5".into()))
        );
        // A negative timeout waits for nothing, as Guava's tryAcquire.
        for negative in ["try:-1", "try:-0.5", "try:-250ms", "try:-0"] {
            assert_eq!(
                EventOp::parse(negative),
                Ok(EventOp::Decide(
                    Op::Reserve { max_wait: Some(0) },
                    negative.into()
                )),
                "{negative}"
            );
        }
        for bad in [
            "try",
            "set_rate:",
            "peek:1",
            "take",
            "try:soon",
            "try:-",
            "try:--1",
            "try:-x",
        ] {
            assert!(EventOp::parse(bad).is_err(), "{bad}");
        }
    }
}
