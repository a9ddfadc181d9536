//! [`ControllerSpec`]: the `CONTROLLER:key=value,...` text form of an adaptive controller.

use std::fmt;
use std::str::FromStr;

use crate::adaptive::spec::any::AnyController;
use crate::adaptive::spec::kinds::{Kind, kind_named};
use crate::adaptive::spec::values::Values;
use crate::error::ConfigError;
use crate::spec::values;

/// An adaptive controller and its parameters, checked when read: a spec that was read builds,
/// with any seed. See the [module docs](super) for the controllers and what they take.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ControllerSpec {
    controller: &'static str,
    params: Vec<(&'static str, String)>,
}

impl ControllerSpec {
    /// A spec for `controller` with `params` as (name, value) pairs.
    pub fn new<N, V>(
        controller: &str,
        params: impl IntoIterator<Item = (N, V)>,
    ) -> Result<ControllerSpec, ConfigError>
    where
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let kind = kind_named(controller)?;
        let spec = ControllerSpec {
            controller: kind.name,
            params: Vec::new(),
        };
        spec.with_params(params)
    }

    /// This spec with `params` added; one it already gives is an error.
    pub fn with_params<N, V>(
        &self,
        params: impl IntoIterator<Item = (N, V)>,
    ) -> Result<ControllerSpec, ConfigError>
    where
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let kind = kind_named(self.controller)?;
        let mut spec = self.clone();
        for (name, value) in params {
            spec.add(kind, name.as_ref(), Some(value.as_ref()))?;
        }
        spec.check()
    }

    /// This spec with the bounds given here wherever it gives none of its own (`fixed` and
    /// `none` take no bounds: they stay as they are).
    pub fn with_default_bounds(
        &self,
        min: Option<u32>,
        initial: Option<u32>,
        max: Option<u32>,
    ) -> Result<ControllerSpec, ConfigError> {
        if !kind_named(self.controller)?.bounded {
            return Ok(self.clone());
        }
        let missing = [("min", min), ("initial", initial), ("max", max)]
            .into_iter()
            .filter(|(key, _)| self.get(key).is_none())
            .filter_map(|(key, value)| Some((key, value?.to_string())));
        self.with_params(missing)
    }

    /// The controller's name as specs write it (`aimd`, `envoy-gradient`, ...).
    pub fn controller(&self) -> &'static str {
        self.controller
    }

    /// The value given for parameter `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        values::given(&self.params, key)
    }

    /// The parameters as given, under their canonical names.
    pub fn params(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.params.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// Whether this spec sets no limit at all (`none`).
    pub fn is_unlimited(&self) -> bool {
        self.controller == "none"
    }

    /// The controller, seeded (Vegas' probe jitter, the reservoirs' sampling) from `seed`.
    ///
    /// A spec was built once when it was read, so this fails only if a builder's checks
    /// came to depend on the seed.
    pub fn build(&self, seed: u64) -> Result<AnyController, ConfigError> {
        let kind = kind_named(self.controller)?;
        (kind.build)(&Values::new(&self.params), seed).map_err(|error| self.explain(kind, error))
    }

    /// Builds it once, so that a bad combination (`min` above `max`) fails when read, not in
    /// use; the seed plays no part in what is valid.
    fn check(self) -> Result<ControllerSpec, ConfigError> {
        self.build(0)?;
        Ok(self)
    }

    /// Adds one parameter; `value` is `None` when the text had no `=`.
    fn add(&mut self, kind: &Kind, name: &str, value: Option<&str>) -> Result<(), ConfigError> {
        let param = kind
            .param(name)
            .ok_or_else(|| ConfigError::UnknownParameter {
                algorithm: kind.name,
                name: name.trim().to_owned(),
                expected: kind.expected,
            })?;
        let key = param.key;
        let in_spec = |problem| ConfigError::Controller {
            controller: kind.name,
            problem: Box::new(problem),
        };
        let value = value.map(str::trim).filter(|v| !v.is_empty());
        let value = value.ok_or_else(|| {
            in_spec(ConfigError::Syntax {
                what: "parameter",
                text: name.trim().to_owned(),
                reason: format!("expected {key}=VALUE"),
            })
        })?;
        if self.get(key).is_some() {
            return Err(in_spec(ConfigError::Duplicate {
                what: "parameter",
                name: key.to_owned(),
            }));
        }
        param.value.check(key, value).map_err(in_spec)?;
        self.params.push((key, value.to_owned()));
        Ok(())
    }

    /// A builder's error in the spec's words: `min`, not `min_limit`; the value as written;
    /// a bound the spec does not give called the default it is.
    fn explain(&self, kind: &Kind, error: ConfigError) -> ConfigError {
        let name = |builder| {
            let key = kind.key_of(builder);
            if self.get(key).is_some() {
                key
            } else {
                default_name(key)
            }
        };
        let problem = match error {
            ConfigError::InvalidParameter {
                name: builder,
                value,
                reason,
            } => {
                let key = kind.key_of(builder);
                let value = self.get(key).map_or(value, str::to_owned);
                ConfigError::InvalidParameter {
                    name: key,
                    value,
                    reason,
                }
            }
            ConfigError::OutOfOrder {
                low_name,
                low,
                high_name,
                high,
            } => ConfigError::OutOfOrder {
                low_name: name(low_name),
                low,
                high_name: name(high_name),
                high,
            },
            named @ (ConfigError::MissingParameter { .. } | ConfigError::Controller { .. }) => {
                return named;
            }
            other => other,
        };
        ConfigError::Controller {
            controller: kind.name,
            problem: Box::new(problem),
        }
    }
}

/// A parameter in order with another that the spec did not give: its default was out of
/// order (`aimd:max=10` is below the default initial of 20).
fn default_name(key: &'static str) -> &'static str {
    match key {
        "min" => "default min",
        "initial" => "default initial",
        "max" => "default max",
        "alpha" => "default alpha",
        "beta" => "default beta",
        "pinned" => "default pinned",
        other => other,
    }
}

impl FromStr for ControllerSpec {
    type Err = ConfigError;

    /// `CONTROLLER[:key=value,...]`, for example `vegas` or `aimd:min=1,backoff=0.5`. Empty
    /// items (`aimd:`, a trailing comma) are skipped.
    fn from_str(text: &str) -> Result<ControllerSpec, ConfigError> {
        let (name, params) = text.split_once(':').unwrap_or((text, ""));
        let kind = kind_named(name)?;
        let mut spec = ControllerSpec {
            controller: kind.name,
            params: Vec::new(),
        };
        for item in params.split(',').filter(|item| !item.trim().is_empty()) {
            match item.split_once('=') {
                Some((name, value)) => spec.add(kind, name, Some(value))?,
                None => spec.add(kind, item, None)?,
            }
        }
        spec.check()
    }
}

impl fmt::Display for ControllerSpec {
    /// The spec as it reads back: `aimd:min=1,backoff=0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.controller)?;
        for (i, (key, value)) in self.params.iter().enumerate() {
            let separator = if i == 0 { ':' } else { ',' };
            write!(f, "{separator}{key}={value}")?;
        }
        Ok(())
    }
}
