//! `--limits`: bounds for every adaptive controller that does not set its own.

use sluicegate::ConfigError;
use sluicegate::adaptive::ControllerSpec;

/// `--limits min=N,initial=N,max=N`: bounds for every adaptive controller that does not set
/// its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsSpec {
    min: Option<u32>,
    initial: Option<u32>,
    max: Option<u32>,
}

impl LimitsSpec {
    /// Reads `min=N,initial=N,max=N` (any of the three).
    pub fn parse(text: &str) -> Result<LimitsSpec, String> {
        let mut limits = LimitsSpec::default();
        for item in text.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let (key, value) = (key.trim(), value.trim());
            let n = match value.parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(format!(
                        "bad {key} `{value}`: expected a whole number, at least 1"
                    ));
                }
            };
            let slot = match key {
                "min" => &mut limits.min,
                "initial" => &mut limits.initial,
                "max" => &mut limits.max,
                _ => {
                    return Err(format!(
                        "unknown parameter `{key}` for --limits (it takes: min, initial, max)"
                    ));
                }
            };
            if slot.replace(n).is_some() {
                return Err(format!("parameter `{key}` given twice"));
            }
        }
        Ok(limits)
    }

    /// The initial limit, if set.
    pub fn initial(&self) -> Option<u32> {
        self.initial
    }

    /// `spec` with these bounds wherever it sets none of its own.
    pub fn apply(&self, spec: &ControllerSpec) -> Result<ControllerSpec, ConfigError> {
        spec.with_default_bounds(self.min, self.initial, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_fill_the_bounds_a_spec_leaves_out() -> Result<(), Box<dyn std::error::Error>> {
        let limits = LimitsSpec::parse("min=2, max=50")?;
        let spec: ControllerSpec = "vegas:max=90".parse()?;
        assert_eq!(limits.apply(&spec)?.to_string(), "vegas:max=90,min=2");
        for (text, needle) in [
            ("min=0", "bad min `0`"),
            ("speed=1", "unknown parameter `speed` for --limits"),
            ("min=1,min=2", "parameter `min` given twice"),
            ("min", "expected key=value in `min`"),
        ] {
            let err = LimitsSpec::parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
        Ok(())
    }
}
