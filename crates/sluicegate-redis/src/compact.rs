//! What an allowed check's one value in a batch's reply stands for (`lua/batch.lua`): the
//! rest of its reply follows from it, the run's time and the limit's parameters.

use redis::Value;

/// What an allowed check's reply in a batch comes down to, when it is one value (the last
/// value `gcra_check_whole_us` and `fixed_window_check` return, in `lua/`): the rest follows
/// from it, the run's time and the limit's parameters, exactly as the script works it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compact {
    /// A fixed window this many µs long: the value is what is left; the reset is the time left
    /// in the window the run's time falls in.
    Window { window_us: u64 },
    /// GCRA or a token bucket in whole microseconds: the value is the reset (the debt after
    /// the check); what is left is `(tolerance - reset) / interval`.
    Bucket { interval: u64, tolerance: u64 },
    /// Never one value (a bucket counting in ticks below a microsecond).
    Never,
}

impl Compact {
    /// The reply `[now, allowed, remaining, reset, retry, wait]` the one value `value` of an
    /// allowed check at `now` stands for.
    pub(crate) fn widen(self, now: i64, value: i64) -> Option<Vec<Value>> {
        let (now, value) = (u64::try_from(now).ok()?, u64::try_from(value).ok()?);
        let (remaining, reset) = match self {
            Compact::Window { window_us } => (value, window_us - now.checked_rem(window_us)?),
            Compact::Bucket {
                interval,
                tolerance,
            } => (
                (tolerance.checked_sub(value)?).checked_div(interval)?,
                value,
            ),
            Compact::Never => return None,
        };
        let int = |v: u64| i64::try_from(v).ok().map(Value::Int);
        Some(vec![
            int(now)?,
            Value::Int(1),
            int(remaining)?,
            int(reset)?,
            Value::Int(-1),
            Value::Int(0),
        ])
    }
}
