//! A limit's `RateLimit-Policy` value, made once per limit. A leaf: the limit tables and the
//! wire types hold it, and the header writer (`headers.rs`) reads it.

use std::sync::Arc;
use std::time::Duration;

/// A limit's `RateLimit-Policy` value, `"name";q=requests;w=seconds`: it depends on the limit
/// alone, so it is written once per limit, not for every answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyHeader {
    value: Arc<str>,
    /// The length of the quoted name the value starts with (the `RateLimit` value's start).
    quoted_name_len: usize,
}

impl PolicyHeader {
    /// The header of a limit named `name` (`default` if empty; `"` and `\` become `_`) of
    /// `requests_per_unit` requests per `window` (whole seconds, rounded up, at least 1).
    pub fn new(name: &str, requests_per_unit: u32, window: Duration) -> PolicyHeader {
        let name = if name.is_empty() { "default" } else { name };
        let mut value = String::with_capacity(name.len() + 32);
        value.push('"');
        value.push_str(&name.replace(['"', '\\'], "_"));
        value.push('"');
        let quoted_name_len = value.len();
        value.push_str(";q=");
        push_number(&mut value, u64::from(requests_per_unit));
        value.push_str(";w=");
        push_number(&mut value, whole_seconds(Some(window)).max(1));
        PolicyHeader {
            value: value.into(),
            quoted_name_len,
        }
    }

    /// The header's value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// `"name"`, as both IETF headers start.
    pub(crate) fn quoted_name(&self) -> &str {
        self.value.get(..self.quoted_name_len).unwrap_or_default()
    }
}

/// Appends `n` in decimal, without the formatting machinery (this runs for every answer).
pub(crate) fn push_number(out: &mut String, mut n: u64) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // A digit: n % 10 < 10 fits in a byte.
        digits[start] += (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Pushed as chars: no UTF-8 validation of the digits, which cost as much as making them.
    out.reserve(digits.len() - start);
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

/// Whole seconds, rounded up, so a client never comes back too early.
pub(crate) fn whole_seconds(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| d.as_micros().div_ceil(1_000_000) as u64)
}
