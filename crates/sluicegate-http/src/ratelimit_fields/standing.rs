//! Which of several limits an answer's fields describe: the one rule for the tightest limit.

use std::cmp::Reverse;
use std::time::Duration;

/// A limit's standing in one answer: what the fields say of it, and what makes it the
/// tightest of several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Whether the limit denied the request.
    pub denied: bool,
    /// Requests left.
    pub remaining: u64,
    /// Microseconds until the limit is back to full; `None` for a concurrency limit, which
    /// frees a permit only when a holder ends.
    pub reset_micros: Option<u64>,
    /// When denied: microseconds until the same request could pass, if known.
    pub retry_micros: Option<u64>,
}

impl Standing {
    /// The order of tightness, least first: a denying limit before an allowing one, among
    /// denials the longest wait, then the fewest requests left.
    fn tightness(&self) -> (bool, Reverse<u64>, u64) {
        let wait = if self.denied { self.wait_micros() } else { 0 };
        (!self.denied, Reverse(wait), self.remaining)
    }

    /// Whether this limit describes an answer better than `other` does.
    pub fn is_tighter_than(&self, other: &Standing) -> bool {
        self.tightness() < other.tightness()
    }

    /// Whole seconds until the limit is back to full, rounded up; `None` for a concurrency
    /// limit.
    pub fn reset_seconds(&self) -> Option<u64> {
        self.reset_micros.map(whole_seconds)
    }

    /// `Retry-After`'s seconds: until the request could pass, else until the reset.
    pub fn retry_after_seconds(&self) -> u64 {
        retry_after_seconds(Duration::from_micros(self.wait_micros()))
    }

    fn wait_micros(&self) -> u64 {
        self.retry_micros.or(self.reset_micros).unwrap_or(0)
    }
}

/// The tightest of `items` by the [standing](Standing) `standing_of` reads from each, with
/// that standing; `None` if there are none.
pub fn tightest<T>(
    items: impl IntoIterator<Item = T>,
    standing_of: impl Fn(&T) -> Standing,
) -> Option<(T, Standing)> {
    items
        .into_iter()
        .map(|item| {
            let standing = standing_of(&item);
            (item, standing)
        })
        .min_by_key(|(_, standing)| standing.tightness())
}

/// `Retry-After`'s seconds for a wait of `wait`: rounded up so a client never comes back too
/// early, and at least 1 (0 would tell it to retry at once, into the same denial).
pub fn retry_after_seconds(wait: Duration) -> u64 {
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    whole.max(1)
}

fn whole_seconds(micros: u64) -> u64 {
    micros.div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(denied: bool, remaining: u64, reset_ms: u64, retry_ms: Option<u64>) -> Standing {
        Standing {
            denied,
            remaining,
            reset_micros: Some(reset_ms * 1000),
            retry_micros: retry_ms.map(|ms| ms * 1000),
        }
    }

    #[test]
    fn a_denial_beats_any_allowance() {
        let allowed = standing(false, 0, 1_000, None);
        let denied = standing(true, 5, 1_000, Some(10));
        assert!(denied.is_tighter_than(&allowed));
        assert!(!allowed.is_tighter_than(&denied));
    }

    #[test]
    fn among_denials_the_longest_wait_then_the_fewest_left() {
        let short = standing(true, 0, 60_000, Some(1_000));
        let long = standing(true, 3, 1_000, Some(5_000));
        let picked = tightest([short, long], |s| *s).map(|(s, _)| s);
        assert_eq!(picked, Some(long));
        // Without a retry time the reset is the wait.
        let by_reset = standing(true, 3, 9_000, None);
        assert!(by_reset.is_tighter_than(&long));
    }

    #[test]
    fn among_allowances_the_fewest_left() {
        let picked = tightest(
            [
                standing(false, 5, 1_000, None),
                standing(false, 2, 30_500, None),
            ],
            |s| *s,
        );
        assert_eq!(picked.map(|(s, _)| s.remaining), Some(2));
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(
            standing(true, 0, 9_000, Some(1_200)).retry_after_seconds(),
            2
        );
        assert_eq!(standing(true, 0, 9_000, None).retry_after_seconds(), 9);
        assert_eq!(standing(true, 0, 0, None).retry_after_seconds(), 1);
        assert_eq!(standing(false, 0, 30_500, None).reset_seconds(), Some(31));
        assert_eq!(retry_after_seconds(Duration::from_millis(2001)), 3);
        assert_eq!(retry_after_seconds(Duration::from_secs(2)), 2);
    }
}
