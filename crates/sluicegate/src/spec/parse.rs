//! [`AlgorithmSpec`]: the `ALGORITHM:key=value,...` text form of a limiter.

use std::fmt;
use std::str::FromStr;

use crate::error::ConfigError;
use crate::spec::any::AnyAlgorithm;
use crate::spec::build::{Kind, Params, kind_named};
use crate::spec::values;

/// A limiter spec: an algorithm (see the README's table of algorithms) and its parameters, checked for unknown,
/// duplicate and malformed parameters but not yet built (values are read by
/// [`build`](AlgorithmSpec::build)).
///
/// | algorithm | parameters (optional in brackets) |
/// |---|---|
/// | `token-bucket`, `gcra` | `rate` (`10/s`), `[burst]` (default: the rate's permits; alias `capacity`), `[initial]` |
/// | `fixed-window`, `sliding-log` | `limit`, `window` (`60s`) |
/// | `sliding-window` | `limit`, `window`, `[buckets]` (none: Cloudflare's two-window estimate) |
/// | `leaky-bucket` | `rate`, `[capacity]` (default: the rate's permits; alias `burst`) |
/// | `leaky-queue` | `rate`, `[burst]` (default 0, as nginx), `[delay]` (requests, at most the burst) or `[nodelay]`; neither: every request beyond the first waits its turn |
/// | `smooth-bursty` | `rate` (permits per second: `5`, `0.5`), `[burst_seconds]` (default 1) |
/// | `smooth-warmup` | `rate` (permits per second), `warmup` (`4s`), `[cold_factor]` (default 3) |
/// | `concurrency` | `limit` |
///
/// Rates are `N/s`, `N/1m`, `N/30s`, `0.5/s`; durations `250ms`, `4s`, `1.5s`, `1m`, `1h`.
///
/// Names are case-insensitive; `_` and `-` are interchangeable in algorithm names. Rule files
/// read the same table (see [`AlgorithmSpec::from_quota`]), and [`AnyAlgorithm::to_spec`]
/// writes an algorithm back as a spec.
///
/// ```
/// use sluicegate::Algorithm;
/// use sluicegate::spec::AlgorithmSpec;
///
/// let spec: AlgorithmSpec = "token-bucket:rate=10/s,burst=20".parse()?;
/// assert_eq!(spec.algorithm(), "token-bucket");
/// assert_eq!(spec.get("burst"), Some("20"));
/// assert_eq!(spec.build()?.limit(), 20);
///
/// let err = "token-bucket:rate=10/s,brust=20".parse::<AlgorithmSpec>().unwrap_err();
/// assert!(err.to_string().contains("brust"));
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlgorithmSpec {
    pub(super) algorithm: &'static str,
    pub(super) params: Vec<(&'static str, String)>,
}

impl AlgorithmSpec {
    /// A spec for `algorithm` with `params` as (name, value) pairs; a flag such as `nodelay`
    /// takes the value `""` or `true` (`false` leaves it out).
    pub fn new<N, V>(
        algorithm: &str,
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
        for (name, value) in params {
            spec.add(kind, name.as_ref(), Some(value.as_ref()))?;
        }
        Ok(spec)
    }

    /// The algorithm's name as written in section 4 (`token-bucket`, `gcra`, ...).
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
    }

    /// The value given for parameter `name` (its canonical name), if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        values::given(&self.params, name)
    }

    /// The parameters as given, under their canonical names.
    pub fn params(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.params.iter().map(|(n, v)| (*n, v.as_str()))
    }

    /// Reads the values and builds the algorithm.
    pub fn build(&self) -> Result<AnyAlgorithm, ConfigError> {
        let kind = kind_named(self.algorithm)?;
        let params = Params::new(kind.name, &self.params);
        params.check_required(kind)?;
        (kind.build)(&params)
    }

    /// Adds one parameter; `value` is `None` when the text had no `=`.
    pub(super) fn add(
        &mut self,
        kind: &Kind,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), ConfigError> {
        let written = name.trim();
        let canonical = kind
            .canonical(written)
            .ok_or_else(|| ConfigError::UnknownParameter {
                algorithm: kind.name,
                name: written.to_owned(),
                expected: kind.expected,
            })?;
        let value = value.map(str::trim);
        let value = if kind.flags.contains(&canonical) {
            match value {
                None | Some("") | Some("true") => "",
                Some("false") => return Ok(()),
                Some(other) => {
                    return Err(ConfigError::invalid(
                        canonical,
                        other,
                        format!("`{canonical}` is a flag: write it alone"),
                    ));
                }
            }
        } else {
            // An empty value (`rate=`) is as missing as no `=` at all (and would print as the
            // flag `rate`, which does not read back).
            value.filter(|v| !v.is_empty()).ok_or_else(|| {
                ConfigError::invalid(canonical, "", format!("expected {canonical}=VALUE"))
            })?
        };
        if let Some(first) = self.get(canonical) {
            return Err(ConfigError::invalid(
                canonical,
                value,
                format!("given twice (first as `{first}`)"),
            ));
        }
        self.params.push((canonical, value.to_owned()));
        Ok(())
    }
}

impl FromStr for AlgorithmSpec {
    type Err = ConfigError;

    /// `ALGORITHM:key=value,...`, for example `gcra:rate=10/s,burst=5` or
    /// `leaky-queue:rate=10/s,burst=5,nodelay`.
    fn from_str(text: &str) -> Result<AlgorithmSpec, ConfigError> {
        let (name, params) = match text.split_once(':') {
            Some((name, params)) => (name, params),
            None => (text, ""),
        };
        let kind = kind_named(name)?;
        let mut spec = AlgorithmSpec {
            algorithm: kind.name,
            params: Vec::new(),
        };
        if params.trim().is_empty() {
            return Ok(spec);
        }
        for item in params.split(',') {
            if item.trim().is_empty() {
                return Err(ConfigError::Syntax {
                    what: "limiter spec",
                    text: text.to_owned(),
                    reason: format!(
                        "empty parameter: expected {}:key=value,... with keys among {}",
                        kind.name, kind.expected
                    ),
                });
            }
            match item.split_once('=') {
                Some((name, value)) => spec.add(kind, name, Some(value))?,
                None => spec.add(kind, item, None)?,
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for AlgorithmSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.algorithm)?;
        for (i, (name, value)) in self.params.iter().enumerate() {
            f.write_str(if i == 0 { ":" } else { "," })?;
            if value.is_empty() {
                f.write_str(name)?;
            } else {
                write!(f, "{name}={value}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for AnyAlgorithm {
    type Err = ConfigError;

    /// Parses an [`AlgorithmSpec`] and builds it.
    fn from_str(text: &str) -> Result<AnyAlgorithm, ConfigError> {
        text.parse::<AlgorithmSpec>()?.build()
    }
}
