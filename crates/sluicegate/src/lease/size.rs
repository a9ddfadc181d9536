//! How many permits a process leases for a key: by the key's recent local rate.

use crate::clock::Micros;
use crate::error::ConfigError;

/// The rule sizing leases: a key's requests per second in this process, decayed
/// ([`LocalRate`]), times `horizon`, capped per key and by the permits the process may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSizing {
    /// How long a lease lasts at most (microseconds): its permits unused by then are spent, or
    /// given back where exact.
    pub life: Micros,
    /// How much of the key's rate a lease holds (microseconds' worth); at most `life`.
    pub horizon: Micros,
    /// The most permits one lease holds, the request that takes it included: 1 leases
    /// nothing.
    pub max_per_key: u64,
    /// The most leased permits the process holds at once, over every key.
    pub max_per_process: u64,
}

impl Default for LeaseSizing {
    /// A 20 ms life, 10 ms of the key's rate, at most 64 permits per lease and 4096 held.
    fn default() -> Self {
        LeaseSizing {
            life: 20_000,
            horizon: 10_000,
            max_per_key: 64,
            max_per_process: 4096,
        }
    }
}

impl LeaseSizing {
    /// Checks the parameters: a life and horizon of at least 1 µs, a horizon no longer than
    /// the life, a cap per key of at least 1.
    pub fn validated(self) -> Result<LeaseSizing, ConfigError> {
        if self.life == 0 {
            return Err(ConfigError::invalid(
                "life",
                self.life,
                "must be at least 1µs",
            ));
        }
        if self.horizon == 0 || self.horizon > self.life {
            return Err(ConfigError::invalid(
                "horizon",
                self.horizon,
                format!("must be between 1µs and the life of {}µs", self.life),
            ));
        }
        if self.max_per_key == 0 {
            return Err(ConfigError::invalid(
                "max_per_key",
                self.max_per_key,
                "must be at least 1",
            ));
        }
        Ok(self)
    }

    /// The permits to lease beyond a request of `permits`, for a key whose local rate is
    /// `rate` per second, with `free` permits left of the process's cap; `None` for a cold key,
    /// one expected to see fewer than 2 requests in a lease's life (the plain path).
    pub fn extra(&self, rate: f64, permits: u64, free: u64) -> Option<u64> {
        let per_life = rate * micros_as_seconds(self.life);
        if per_life.is_nan() || per_life < 2.0 {
            return None;
        }
        let wanted = (rate * micros_as_seconds(self.horizon)).ceil();
        // A float beyond u64 saturates: the caps below bound it anyway.
        let wanted = if wanted >= u64::MAX as f64 {
            u64::MAX
        } else {
            wanted as u64
        };
        Some(
            wanted
                .min(self.max_per_key)
                .saturating_sub(permits)
                .min(free),
        )
    }
}

fn micros_as_seconds(micros: Micros) -> f64 {
    micros as f64 / 1_000_000.0
}

/// A key's request rate in this process: requests decayed exponentially with a time constant
/// of [`LocalRate::TIME_CONSTANT`], so a burst on a new key raises it gradually.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LocalRate {
    /// Requests seen, each weighted `exp(-age / TIME_CONSTANT)`.
    weight: f64,
    /// When `weight` was last brought up to date.
    at: Micros,
}

impl LocalRate {
    /// How long the rate remembers: a request's weight falls by `e` in this time (100 ms).
    pub const TIME_CONSTANT: Micros = 100_000;

    /// Counts `permits` requested at `now` (a `now` before the last is counted as then).
    pub fn record(&mut self, now: Micros, permits: u64) {
        self.decay_to(now);
        self.weight += permits as f64;
    }

    /// Requests per second at `now`.
    pub fn per_second(&self, now: Micros) -> f64 {
        let mut at_now = *self;
        at_now.decay_to(now);
        at_now.weight / micros_as_seconds(Self::TIME_CONSTANT)
    }

    fn decay_to(&mut self, now: Micros) {
        if now > self.at {
            let age = (now - self.at) as f64 / Self::TIME_CONSTANT as f64;
            self.weight *= (-age).exp();
            self.at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_key_leases_nothing_and_a_hot_one_its_horizon() {
        let sizing = LeaseSizing::default();
        // 50/s: one request per 20 ms life: cold.
        assert_eq!(sizing.extra(50.0, 1, 4096), None);
        // 2 000/s: 20 ms' worth is 40; 10 ms' is 20, the request's own included.
        assert_eq!(sizing.extra(2_000.0, 1, 4096), Some(19));
        // Capped per key, then by what the process may still hold.
        assert_eq!(sizing.extra(1e9, 1, 4096), Some(63));
        assert_eq!(sizing.extra(1e9, 1, 5), Some(5));
        assert_eq!(sizing.extra(f64::NAN, 1, 5), None);
        let one = LeaseSizing {
            max_per_key: 1,
            ..sizing
        };
        assert_eq!(one.extra(1e9, 1, 4096), Some(0));
    }

    #[test]
    fn the_rate_follows_requests_and_decays() {
        let mut rate = LocalRate::default();
        for i in 0..1_000 {
            rate.record(i * 1_000, 1);
        }
        // 1 000/s for a second: steady at 1 000/s (within the decay's discreteness).
        let r = rate.per_second(1_000_000);
        assert!((900.0..1_100.0).contains(&r), "{r}");
        assert!(rate.per_second(2_000_000) < 1.0);
        // A clock gone back counts as now.
        let before = rate.per_second(999_000);
        rate.record(0, 1);
        assert!(rate.per_second(999_000) > before);
    }

    #[test]
    fn bad_sizing_is_refused() {
        let ok = LeaseSizing::default();
        assert!(ok.validated().is_ok());
        assert!(LeaseSizing { life: 0, ..ok }.validated().is_err());
        assert!(
            LeaseSizing {
                horizon: 30_000,
                ..ok
            }
            .validated()
            .is_err()
        );
        assert!(
            LeaseSizing {
                max_per_key: 0,
                ..ok
            }
            .validated()
            .is_err()
        );
    }
}
