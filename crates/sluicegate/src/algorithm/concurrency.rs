//! A semaphore per key (nginx `limit_conn`): at most `limit` permits held at once.

use std::num::NonZeroU64;

use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, Op, ensure_capacity, unsupported};

/// At most `limit` permits held at once; [`Op::Check`] takes, [`Op::Release`] gives back.
///
/// Time plays no part, so a denial carries no `retry_after` (`None`): the request can pass once
/// a holder releases. For the same reason `reset_after` is always zero: no amount of waiting
/// frees a permit, only a release does. Limiters' `try_hold` gives permits that release
/// themselves when dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency {
    limit: u64,
}

/// Permits currently held (shares `u64`'s lock-free cell with GCRA's arrival time).
pub type ConcurrencyState = u64;

impl Concurrency {
    /// At most `limit` (at least 1) held at once.
    pub fn new(limit: u64) -> Result<Concurrency, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::invalid("limit", limit, "must be at least 1"));
        }
        if limit >= 1 << 62 {
            return Err(ConfigError::invalid("limit", limit, "must be below 2^62"));
        }
        Ok(Concurrency { limit })
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    fn name(&self) -> &'static str {
        "concurrency"
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn initial_state(&self, _created_at: Micros) -> ConcurrencyState {
        0
    }

    fn decide(
        &self,
        held: &mut ConcurrencyState,
        _now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let n = ensure_capacity(permits, self.limit)?;
        // Nothing frees a permit but a release, so no time can be told for a retry.
        let decision = |allowed: bool, held: u64| {
            let remaining = self.limit.saturating_sub(held);
            if allowed {
                Decision::allow(self.limit, remaining, 0)
            } else {
                Decision::deny(self.limit, remaining, 0, None)
            }
        };
        match op {
            Op::Check | Op::Peek => {
                let after = *held + n;
                if after > self.limit {
                    return Ok(decision(false, *held));
                }
                // A peek takes nothing: it reports what is free now.
                if op == Op::Peek {
                    return Ok(decision(true, *held));
                }
                *held = after;
                Ok(decision(true, after))
            }
            Op::Release => {
                if n > *held {
                    return Err(CheckError::ReleaseExceedsHeld {
                        released: n,
                        held: *held,
                    });
                }
                *held -= n;
                Ok(decision(true, *held))
            }
            // A held permit is given back by its holder; a denied one was never held.
            Op::Reserve { .. } | Op::Charge => Err(unsupported(self.name(), op)),
        }
    }

    fn is_fresh(&self, held: &ConcurrencyState, _now: Micros) -> bool {
        *held == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_and_releases() -> Result<(), Box<dyn std::error::Error>> {
        let c = Concurrency::new(2)?;
        let mut held = c.initial_state(0);
        let one = NonZeroU64::MIN;
        assert!(c.decide(&mut held, 0, one, Op::Check)?.allowed());
        assert!(c.decide(&mut held, 0, one, Op::Check)?.allowed());
        let denied = c.decide(&mut held, 0, one, Op::Check)?;
        assert!(!denied.allowed());
        assert_eq!(denied.retry_after(), None);
        assert_eq!(held, 2);
        let _ = c.decide(&mut held, 0, one, Op::Release)?;
        assert_eq!(held, 1);
        let two = NonZeroU64::new(2).ok_or("2")?;
        assert!(matches!(
            c.decide(&mut held, 0, two, Op::Release),
            Err(CheckError::ReleaseExceedsHeld {
                released: 2,
                held: 1
            })
        ));
        Ok(())
    }
}
