//! What a check's one value in a reply stands for (a batch's, `lua/batch.lua`, or a one-limit
//! entry point's called alone, `compact_of` in `lua/prelude.lua`): the rest of its reply
//! follows from it, the run's time, its permits and the limit's parameters.

use redis::Value;

/// What a check's reply comes down to, when it is one value (the last value
/// `gcra_check_whole_us` and `fixed_window_check` return, in `lua/`): the rest follows from it,
/// the run's time, the check's permits and the limit's parameters, exactly as the script works
/// it out. The value comes doubled, plus one if the check was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compact {
    /// A fixed window this many µs long: the value is what is left; the reset, and a denial's
    /// retry, are the time left in the window the run's time falls in.
    Window { window_us: u64 },
    /// GCRA or a token bucket in whole microseconds: the value is the reset (the debt after an
    /// allowed check, before a denied one); what is left is `(tolerance - reset) / interval`
    /// (none below zero), a denial's retry `reset + permits * interval - tolerance`.
    Bucket { interval: u64, tolerance: u64 },
    /// Never one value (a bucket counting in ticks below a microsecond).
    Never,
}

impl Compact {
    /// The reply `[now, allowed, remaining, reset, retry, wait]` that the one value `value` of
    /// a check of `permits` at `now` stands for (a check never waits).
    pub(crate) fn widen(self, now: i64, value: i64, permits: u64) -> Option<Vec<Value>> {
        let (now, value) = (u64::try_from(now).ok()?, u64::try_from(value).ok()?);
        let (allowed, value) = (value % 2 == 0, value / 2);
        let (remaining, reset, retry) = match self {
            Compact::Window { window_us } => {
                let left = window_us - now.checked_rem(window_us)?;
                (value, left, left)
            }
            Compact::Bucket {
                interval,
                tolerance,
            } => {
                let left = tolerance.saturating_sub(value).checked_div(interval)?;
                let after = permits.checked_mul(interval)?.checked_add(value)?;
                (left, value, after.saturating_sub(tolerance))
            }
            Compact::Never => return None,
        };
        let int = |v: u64| i64::try_from(v).ok().map(Value::Int);
        let (allowed, retry) = if allowed {
            (1, Value::Int(-1))
        } else {
            (0, int(retry)?)
        };
        Some(vec![
            int(now)?,
            Value::Int(allowed),
            int(remaining)?,
            int(reset)?,
            retry,
            Value::Int(0),
        ])
    }
}
