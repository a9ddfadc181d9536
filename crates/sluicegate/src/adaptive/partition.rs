//! Named shares of an adaptive limit: each partition is guaranteed a fraction of the limit and
//! may borrow what the others leave idle.

use crate::error::ConfigError;

/// A partition of an [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter), found by name with
/// [`AdaptiveLimiter::partition`](crate::adaptive::AdaptiveLimiter::partition).
///
/// [`PartitionId::UNPARTITIONED`] is the group of requests that name no partition: it has no
/// guaranteed share and only borrows. An id is an index into the limiter that gave it; used
/// with another limiter it names that limiter's partition at the same index, if any, and the
/// unpartitioned group otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionId(pub(crate) usize);

impl PartitionId {
    /// Requests that name no partition.
    pub const UNPARTITIONED: PartitionId = PartitionId(0);
}

/// One partition's share and use, for metrics.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PartitionMetrics {
    /// The partition's name.
    pub name: String,
    /// The fraction of the limit it is guaranteed.
    pub fraction: f64,
    /// Its guaranteed share of the current limit: `ceil(limit * fraction)`, at least 1 for a
    /// fraction above 0.
    pub guaranteed: u32,
    /// Its permits in flight.
    pub in_flight: u32,
}

/// The partitions of one limiter and their permits in flight. Index 0 is the unpartitioned
/// group (fraction 0).
#[derive(Debug, Clone)]
pub(crate) struct Partitions {
    names: Vec<String>,
    fractions: Vec<f64>,
    guaranteed: Vec<u32>,
    in_flight: Vec<u32>,
}

/// How far the fractions may sum above 1: `0.7 + 0.2 + 0.1` is not exactly 1 in floating point.
const SUM_SLACK: f64 = 1e-9;

impl Partitions {
    /// Partitions from `(name, fraction)` pairs: names distinct and not empty, fractions in
    /// `[0, 1]` summing to at most 1.
    pub(crate) fn new(specs: Vec<(String, f64)>, limit: u32) -> Result<Partitions, ConfigError> {
        let mut names = vec![String::new()];
        let mut fractions = vec![0.0];
        let mut sum = 0.0;
        for (name, fraction) in specs {
            if name.is_empty() {
                return Err(ConfigError::invalid(
                    "partition",
                    "\"\"",
                    "a partition needs a name",
                ));
            }
            if names.contains(&name) {
                return Err(ConfigError::Duplicate {
                    what: "partition",
                    name,
                });
            }
            if !(fraction.is_finite() && (0.0..=1.0).contains(&fraction)) {
                return Err(ConfigError::invalid(
                    "partition fraction",
                    fraction,
                    format!("partition `{name}`: must be in [0, 1]"),
                ));
            }
            sum += fraction;
            names.push(name);
            fractions.push(fraction);
        }
        if sum > 1.0 + SUM_SLACK {
            return Err(ConfigError::invalid(
                "partition fractions",
                sum,
                "must sum to at most 1",
            ));
        }
        let count = names.len();
        let mut partitions = Partitions {
            names,
            fractions,
            guaranteed: vec![0; count],
            in_flight: vec![0; count],
        };
        partitions.set_limit(limit);
        Ok(partitions)
    }

    /// The unpartitioned group alone.
    pub(crate) fn unpartitioned(limit: u32) -> Partitions {
        let mut partitions = Partitions {
            names: vec![String::new()],
            fractions: vec![0.0],
            guaranteed: vec![0],
            in_flight: vec![0],
        };
        partitions.set_limit(limit);
        partitions
    }

    pub(crate) fn find(&self, name: &str) -> Option<PartitionId> {
        // Index 0's empty name is not a partition's.
        self.names
            .iter()
            .skip(1)
            .position(|n| n == name)
            .map(|i| PartitionId(i + 1))
    }

    /// The index of `id` here, or the unpartitioned group's for an id from elsewhere.
    pub(crate) fn index(&self, id: PartitionId) -> usize {
        if id.0 < self.names.len() { id.0 } else { 0 }
    }

    /// Recomputes the guaranteed shares for a new limit. Rounding up can make them sum above
    /// the limit (three partitions of a third of 10 are guaranteed 4 each), as in Netflix's
    /// partitioned limiter: a partition under its share only gets priority, never more than
    /// the limit.
    pub(crate) fn set_limit(&mut self, limit: u32) {
        for (share, &fraction) in self.guaranteed.iter_mut().zip(&self.fractions) {
            *share = if fraction > 0.0 {
                ((f64::from(limit) * fraction).ceil() as u32).max(1)
            } else {
                0
            };
        }
    }

    /// Whether the partition at `index` holds less than its guaranteed share (which only
    /// orders the wait queue).
    #[cfg(feature = "tokio")]
    pub(crate) fn below_share(&self, index: usize) -> bool {
        let held = self.in_flight.get(index).copied().unwrap_or(0);
        held < self.guaranteed.get(index).copied().unwrap_or(0)
    }

    pub(crate) fn take(&mut self, index: usize) {
        if let Some(n) = self.in_flight.get_mut(index) {
            *n += 1;
        }
    }

    pub(crate) fn give_back(&mut self, index: usize) {
        if let Some(n) = self.in_flight.get_mut(index) {
            *n = n.saturating_sub(1);
        }
    }

    pub(crate) fn metrics(&self) -> Vec<PartitionMetrics> {
        (1..self.names.len())
            .map(|i| PartitionMetrics {
                name: self.names[i].clone(),
                fraction: self.fractions[i],
                guaranteed: self.guaranteed[i],
                in_flight: self.in_flight[i],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(list: &[(&str, f64)]) -> Vec<(String, f64)> {
        list.iter().map(|&(n, f)| (n.to_string(), f)).collect()
    }

    #[test]
    fn shares_round_up() -> Result<(), ConfigError> {
        let mut p = Partitions::new(specs(&[("live", 0.9), ("batch", 0.1), ("none", 0.0)]), 10)?;
        let live = p
            .find("live")
            .ok_or(ConfigError::invalid("t", 0, "no live"))?;
        assert_eq!(live, PartitionId(1));
        assert_eq!(p.find(""), None);
        let shares: Vec<u32> = p.metrics().iter().map(|m| m.guaranteed).collect();
        assert_eq!(shares, [9, 1, 0]);
        p.set_limit(5);
        let shares: Vec<u32> = p.metrics().iter().map(|m| m.guaranteed).collect();
        // ceil(4.5) = 5, ceil(0.5) = 1: more than the limit together.
        assert_eq!(shares, [5, 1, 0]);
        #[cfg(feature = "tokio")]
        {
            p.set_limit(1);
            assert!(p.below_share(2));
            p.take(2);
            assert!(!p.below_share(2));
            assert!(!p.below_share(0));
            assert!(!p.below_share(3));
        }
        assert_eq!(p.index(PartitionId(99)), 0);
        Ok(())
    }

    #[test]
    fn rejects_bad_partitions() {
        let bad = [
            specs(&[("a", 0.6), ("b", 0.5)]),
            specs(&[("a", 0.5), ("a", 0.1)]),
            specs(&[("", 0.5)]),
            specs(&[("a", -0.1)]),
            specs(&[("a", f64::NAN)]),
        ];
        for s in bad {
            assert!(Partitions::new(s.clone(), 10).is_err(), "{s:?}");
        }
        assert!(matches!(
            Partitions::new(specs(&[("a", 0.5), ("a", 0.1)]), 10),
            Err(ConfigError::Duplicate { what: "partition", name }) if name == "a"
        ));
        assert!(Partitions::new(specs(&[("a", 0.7), ("b", 0.2), ("c", 0.1)]), 10).is_ok());
    }
}
