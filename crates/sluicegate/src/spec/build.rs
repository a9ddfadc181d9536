//! What each algorithm of a spec takes, and how it is built; `set_rate` on a built algorithm.

use crate::algorithm::{Concurrency, Gcra, TokenBucket};
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::spec::any::AnyAlgorithm;
use crate::spec::values;
use crate::state_machine::Algorithm;

/// One algorithm's spec grammar.
pub(super) struct Kind {
    /// The name of DESIGN section 4.
    pub(super) name: &'static str,
    /// Every parameter it takes, canonical names.
    pub(super) params: &'static [&'static str],
    /// The parameters it cannot do without.
    pub(super) required: &'static [&'static str],
    /// Parameters written alone (`nodelay`).
    pub(super) flags: &'static [&'static str],
    /// Other names accepted for a parameter: (alias, canonical).
    pub(super) aliases: &'static [(&'static str, &'static str)],
    /// The parameters as listed in error messages.
    pub(super) expected: &'static str,
    /// Reads the values and builds the algorithm.
    pub(super) build: fn(&Params<'_>) -> Result<AnyAlgorithm, ConfigError>,
}

impl Kind {
    /// The canonical name of parameter `written`, if this algorithm takes it.
    pub(super) fn canonical(&self, written: &str) -> Option<&'static str> {
        let lower = written.to_ascii_lowercase().replace('-', "_");
        let alias = self.aliases.iter().find(|(a, _)| *a == lower);
        alias
            .map(|(_, canonical)| *canonical)
            .or_else(|| self.params.iter().copied().find(|p| *p == lower))
    }
}

const KINDS: &[Kind] = &[
    Kind {
        name: "token-bucket",
        params: &["rate", "burst", "initial"],
        required: &["rate"],
        flags: &[],
        aliases: &[("capacity", "burst")],
        expected: "rate, burst, initial",
        build: build_token_bucket,
    },
    Kind {
        name: "gcra",
        params: &["rate", "burst", "initial"],
        required: &["rate"],
        flags: &[],
        aliases: &[("capacity", "burst")],
        expected: "rate, burst, initial",
        build: build_gcra,
    },
    Kind {
        name: "concurrency",
        params: &["limit"],
        required: &["limit"],
        flags: &[],
        aliases: &[],
        expected: "limit",
        build: build_concurrency,
    },
];

/// Every algorithm name, as listed in error messages.
const KNOWN: &str = "token-bucket, gcra, concurrency";

/// The grammar of the algorithm named `written` (case-insensitive, `_` for `-`).
pub(super) fn kind_named(written: &str) -> Result<&'static Kind, ConfigError> {
    let name = written.trim().to_ascii_lowercase().replace('_', "-");
    KINDS
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| ConfigError::UnknownAlgorithm {
            name: written.trim().to_owned(),
            known: KNOWN,
        })
}

/// A spec's parameters, read one by one.
pub(super) struct Params<'a> {
    algorithm: &'static str,
    items: &'a [(&'static str, String)],
}

impl<'a> Params<'a> {
    pub(super) fn new(algorithm: &'static str, items: &'a [(&'static str, String)]) -> Self {
        Params { algorithm, items }
    }

    pub(super) fn check_required(&self, kind: &Kind) -> Result<(), ConfigError> {
        match kind.required.iter().find(|name| self.get(name).is_none()) {
            Some(name) => Err(ConfigError::MissingParameter {
                algorithm: self.algorithm,
                name,
            }),
            None => Ok(()),
        }
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        self.items
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &'static str) -> Result<&'a str, ConfigError> {
        self.get(name).ok_or(ConfigError::MissingParameter {
            algorithm: self.algorithm,
            name,
        })
    }

    fn rate(&self, name: &'static str) -> Result<Rate, ConfigError> {
        values::rate(name, self.required(name)?)
    }

    fn count(&self, name: &'static str) -> Result<u64, ConfigError> {
        values::count(name, self.required(name)?)
    }

    fn optional_count(&self, name: &'static str) -> Result<Option<u64>, ConfigError> {
        self.get(name).map(|v| values::count(name, v)).transpose()
    }
}

/// A bucket's rate and burst; the burst defaults to the rate's permits (`100/1m` holds 100).
fn rate_and_burst(params: &Params<'_>) -> Result<(Rate, u64, Option<u64>), ConfigError> {
    let rate = params.rate("rate")?;
    let burst = params.optional_count("burst")?.unwrap_or(rate.permits());
    Ok((rate, burst, params.optional_count("initial")?))
}

fn build_token_bucket(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let (rate, burst, initial) = rate_and_burst(params)?;
    let bucket = match initial {
        Some(initial) => TokenBucket::with_initial(rate, burst, initial)?,
        None => TokenBucket::new(rate, burst)?,
    };
    Ok(bucket.into())
}

fn build_gcra(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let (rate, burst, initial) = rate_and_burst(params)?;
    let gcra = match initial {
        Some(initial) => Gcra::with_initial(rate, burst, initial)?,
        None => Gcra::new(rate, burst)?,
    };
    Ok(gcra.into())
}

fn build_concurrency(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    Ok(Concurrency::new(params.count("limit")?)?.into())
}

impl AnyAlgorithm {
    /// The same algorithm at another rate (the trace op `set_rate:RATE`), every other
    /// parameter kept: buckets take a rate (`20/s`), the smooth limiters a plain number of
    /// permits per second (`2.5`), windows a new limit (`50`) or a limit per window
    /// (`50/30s`), concurrency a new limit.
    ///
    /// Carry a limiter's state over with [`Algorithm::carry_over`] (or
    /// [`KeyedLimiter::set_algorithm`](crate::KeyedLimiter::set_algorithm)).
    pub fn with_rate(&self, text: &str) -> Result<AnyAlgorithm, ConfigError> {
        Ok(match self {
            AnyAlgorithm::TokenBucket(bucket) => {
                TokenBucket::new(values::rate("rate", text)?, bucket.limit())?.into()
            }
            AnyAlgorithm::Gcra(gcra) => {
                Gcra::new(values::rate("rate", text)?, gcra.burst())?.into()
            }
            AnyAlgorithm::Concurrency(_) => Concurrency::new(values::count("limit", text)?)?.into(),
        })
    }
}
