//! A spec written as a quota and the rest: a rule file gives an algorithm's rate (or limit and
//! window) as `requests_per_unit` per `unit`, and its other parameters under their own names.
//! Both directions go through the same table and the same checks as the spec text, so a name
//! or a value means the same in a spec and in a rule file.

use std::time::Duration;

use crate::error::ConfigError;
use crate::rate::format_duration_micros;
use crate::spec::build::{KINDS, Kind, QuotaParams, kind_named};
use crate::spec::parse::AlgorithmSpec;

/// The parameters a quota fills, by canonical name.
const QUOTA_NAMES: [&str; 3] = ["rate", "limit", "window"];

/// A spec read as a quota and its other parameters (see [`AlgorithmSpec::to_quota`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota<'a> {
    /// Permits per period: a rule file's `requests_per_unit`.
    pub permits: u64,
    /// The period: a rule file's `unit` or `period`.
    pub period: Duration,
    /// The other parameters, under their canonical names, as the spec gives them.
    pub params: Vec<(&'static str, &'a str)>,
}

impl AlgorithmSpec {
    /// The spec of `algorithm` enforcing `permits` per `period`, with `params` (name, value)
    /// for its other parameters: what a rule file's `requests_per_unit`, `unit` (or `period`),
    /// `algorithm` and further keys say. The quota fills `rate=PERMITS/PERIOD` (the buckets;
    /// the smooth limiters read it as permits per second), `limit` and `window` (the windows)
    /// or `limit` alone (concurrency, which has no period). Names, aliases and values are read
    /// as in the text form; giving a parameter the quota fills is an error naming it.
    ///
    /// ```
    /// use sluicegate::AnyAlgorithm;
    /// use sluicegate::spec::AlgorithmSpec;
    /// use std::time::Duration;
    ///
    /// let spec = AlgorithmSpec::from_quota("GCRA", 100, Duration::from_secs(60), [("burst", "20")])?;
    /// assert_eq!(spec.to_string(), "gcra:rate=100/1m,burst=20");
    /// assert_eq!(spec.build()?, "gcra:rate=100/1m,burst=20".parse::<AnyAlgorithm>()?);
    /// # Ok::<(), sluicegate::ConfigError>(())
    /// ```
    pub fn from_quota<N, V>(
        algorithm: &str,
        permits: u64,
        period: Duration,
        params: impl IntoIterator<Item = (N, V)>,
    ) -> Result<AlgorithmSpec, ConfigError>
    where
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let kind = kind_named(algorithm)?;
        let mut spec = AlgorithmSpec {
            algorithm: kind.name,
            params: Vec::new(),
        };
        let period_text =
            format_duration_micros(u64::try_from(period.as_micros()).unwrap_or(u64::MAX));
        let quota = match kind.quota {
            QuotaParams::Rate => vec![("rate", format!("{permits}/{period_text}"))],
            QuotaParams::LimitWindow => {
                vec![("limit", permits.to_string()), ("window", period_text)]
            }
            QuotaParams::Limit => vec![("limit", permits.to_string())],
        };
        for (name, value) in &quota {
            spec.add(kind, name, Some(value))?;
        }
        for (name, value) in params {
            let (name, value) = (name.as_ref(), value.as_ref());
            if let Some(filled) = kind.canonical(name).filter(|c| QUOTA_NAMES.contains(c)) {
                return Err(ConfigError::invalid(
                    filled,
                    value,
                    "is given by the quota (requests_per_unit and unit or period), not on its own",
                ));
            }
            spec.add(kind, name, Some(value))?;
        }
        Ok(spec)
    }

    /// The other way round: the quota this spec's rate (or limit and window) stands for, as
    /// permits and period, and its other parameters, which
    /// [`from_quota`](Self::from_quota) turns back into the same spec's algorithm. A smooth
    /// limiter's rate `2.5` is the quota 5 per 2s; concurrency, which has no period, gets one
    /// second. Fails on a value that does not read (as [`build`](Self::build) would) or a
    /// spec missing its rate or limit.
    pub fn to_quota(&self) -> Result<Quota<'_>, ConfigError> {
        let kind = kind_named(self.algorithm)?;
        let missing = |name| ConfigError::MissingParameter {
            algorithm: kind.name,
            name,
        };
        let (permits, period) = match kind.quota {
            QuotaParams::Rate => {
                let text = self.get("rate").ok_or_else(|| missing("rate"))?;
                let rate = if text.contains('/') {
                    super::values::rate("rate", text)?
                } else {
                    // A plain number of permits per second (the smooth limiters).
                    super::values::rate("rate", &format!("{}/s", text.trim()))?
                };
                (rate.permits(), rate.period())
            }
            QuotaParams::LimitWindow => {
                let limit = self.get("limit").ok_or_else(|| missing("limit"))?;
                let window = self.get("window").ok_or_else(|| missing("window"))?;
                (
                    super::values::count("limit", limit)?,
                    super::values::duration("window", window)?,
                )
            }
            QuotaParams::Limit => {
                let limit = self.get("limit").ok_or_else(|| missing("limit"))?;
                (
                    super::values::count("limit", limit)?,
                    Duration::from_secs(1),
                )
            }
        };
        let params = self
            .params()
            .filter(|(name, _)| !QUOTA_NAMES.contains(name))
            .collect();
        Ok(Quota {
            permits,
            period,
            params,
        })
    }

    /// Every parameter name (and alias) of every algorithm that a quota does not fill: the
    /// keys a rule file may add beside `requests_per_unit` and `unit` (`burst`, `initial`,
    /// `buckets`, `delay`, `nodelay`, `warmup`, ...).
    pub fn non_quota_parameters() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = KINDS
            .iter()
            .flat_map(|kind: &Kind| {
                let aliases = kind.aliases.iter().map(|(alias, _)| *alias);
                kind.params.iter().copied().chain(aliases)
            })
            .filter(|name| !QUOTA_NAMES.contains(name))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The canonical name of parameter `written` of `algorithm` (case-insensitive, aliases
    /// resolved), if it takes it: where an error naming a parameter points back to the key
    /// that was written.
    pub fn canonical_parameter(algorithm: &str, written: &str) -> Option<&'static str> {
        kind_named(algorithm).ok()?.canonical(written)
    }
}
