//! Resolved, validated rules: what a descriptor's limit means.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use sluicegate::rate::format_duration_micros;
use sluicegate::{AnyAlgorithm, QueueDelay, Rate};

use crate::yaml::Position;

/// A rate limit unit of envoyproxy/ratelimit's `RateLimitResponse.RateLimit.Unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86 400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days (a fixed length, not a calendar month).
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Reads a unit name in any case, as envoyproxy/ratelimit does (`strings.ToUpper`).
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The window length.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// The name as Envoy's protocol spells it (`SECOND`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

/// The time window of a limit: an Envoy unit, or any period (a Sluicegate extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// `unit: minute`.
    Unit(Unit),
    /// `period: 30s`.
    Period(#[serde(serialize_with = "serialize_duration")] Duration),
}

impl Window {
    /// The window length.
    pub fn duration(self) -> Duration {
        match self {
            Window::Unit(unit) => unit.duration(),
            Window::Period(period) => period,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Unit(unit) => write!(f, "unit={}", unit.name()),
            Window::Period(period) => write!(f, "period={}", duration_text(*period)),
        }
    }
}

/// One limit: so many requests per window, enforced by an algorithm.
///
/// The algorithm is the core's one limit type, [`AnyAlgorithm`], read from the rule file
/// through the same table as a spec string (`requests_per_unit` per `unit` is its rate, or
/// its limit and window); `requests_per_unit` and the window are kept beside it for what
/// only the service needs (Envoy's `current_limit`, the `RateLimit-Policy` header).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// Requests per window (`0` blocks every request).
    pub requests_per_unit: u32,
    /// The window.
    pub window: Window,
    /// How the limit is enforced: the algorithm with its parameters, or `None` when
    /// `requests_per_unit` is 0 (nothing passes, and no algorithm takes a rate of zero).
    /// Written as its name, parameters and spec in the JSON form.
    #[serde(serialize_with = "serialize_algorithm")]
    pub algorithm: Option<AnyAlgorithm>,
    /// The algorithm's name (`fixed-window`, `gcra`, ...), also for a limit of zero, whose
    /// window still resets as its algorithm's would.
    #[serde(skip)]
    pub algorithm_name: &'static str,
    /// The limit's `name`, which other limits' `replaces` refer to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Names of limits this one replaces when both apply to one request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
}

impl Limit {
    /// The limit as an exact rate, or `None` when it can never pass (`requests_per_unit: 0`).
    pub fn rate(&self) -> Option<Rate> {
        Rate::new(u64::from(self.requests_per_unit), self.window.duration()).ok()
    }

    /// Whether the algorithm holds some admitted requests for a wait (a leaky queue without
    /// `nodelay`, or with a `delay` below its `burst`): a caller that can only answer yes or
    /// no, as the rate limit service, cannot honour it (see [`RuleSet::shaping_limits`]).
    ///
    /// [`RuleSet::shaping_limits`]: crate::RuleSet::shaping_limits
    pub fn shapes(&self) -> bool {
        match &self.algorithm {
            Some(AnyAlgorithm::LeakyQueue(queue)) => match queue.delay() {
                QueueDelay::NoDelay => false,
                QueueDelay::After(d) => d < queue.burst(),
                QueueDelay::Shape => true,
            },
            Some(
                AnyAlgorithm::TokenBucket(_)
                | AnyAlgorithm::Gcra(_)
                | AnyAlgorithm::FixedWindow(_)
                | AnyAlgorithm::SlidingLog(_)
                | AnyAlgorithm::SlidingWindow(_)
                | AnyAlgorithm::LeakyBucket(_)
                | AnyAlgorithm::SmoothBursty(_)
                | AnyAlgorithm::SmoothWarmup(_)
                | AnyAlgorithm::Concurrency(_),
            )
            | None => false,
        }
    }

    /// The limit as a rule file writes it, one `key: value` a line (`requests_per_unit`,
    /// `unit` or `period`, `algorithm` and its other parameters, `name`): loading it gives
    /// back an equal limit. `replaces` is left out (it names other limits).
    pub fn to_rule_yaml(&self) -> String {
        let mut out = format!("requests_per_unit: {}\n{}\n", self.requests_per_unit, {
            match self.window {
                Window::Unit(unit) => format!("unit: {}", unit.name().to_ascii_lowercase()),
                Window::Period(period) => format!("period: {}", duration_text(period)),
            }
        });
        if let Some(algorithm) = &self.algorithm {
            let spec = algorithm.to_spec();
            out.push_str(&format!("algorithm: {}\n", spec.algorithm()));
            if let Ok(quota) = spec.to_quota() {
                for (name, value) in quota.params {
                    out.push_str(&format!("{name}: {value}\n"));
                }
            }
        }
        if let Some(name) = &self.name {
            out.push_str(&format!("name: {name}\n"));
        }
        out
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests_per_unit={}",
            self.window, self.requests_per_unit
        )?;
        match &self.algorithm {
            Some(AnyAlgorithm::FixedWindow(_)) | None => {}
            // The name, then the parameters the rule file gave beside the quota.
            Some(algorithm) => {
                let spec = algorithm.to_spec();
                write!(f, " algorithm={}", spec.algorithm())?;
                for (name, value) in spec.to_quota().map(|q| q.params).unwrap_or_default() {
                    match value.is_empty() {
                        true => write!(f, " {name}")?,
                        false => write!(f, " {name}={value}")?,
                    }
                }
            }
        }
        if let Some(name) = &self.name {
            write!(f, " name={name}")?;
        }
        if !self.replaces.is_empty() {
            write!(f, " replaces={}", self.replaces.join(","))?;
        }
        Ok(())
    }
}

/// Where a rule was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// The rule file.
    pub file: PathBuf,
    /// The descriptor's first line and column.
    pub position: Position,
}

/// The rule of one configured descriptor: its limits and flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// envoyproxy/ratelimit's full key: `domain.key_value.subkey` (stable across reloads;
    /// also its stats prefix).
    pub id: String,
    /// The limits enforced together; empty when `unlimited`.
    pub limits: Vec<Limit>,
    /// `unlimited: true`: matched, counted in stats, never limited.
    pub unlimited: bool,
    /// Every limit name this rule's `replaces` lists (also for an unlimited rule, whose
    /// `replaces` still apply).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
    /// Report over-limit in stats and headers but allow the request.
    pub shadow_mode: bool,
    /// `quota_mode: true`, passed on to the service.
    pub quota_mode: bool,
    /// Stats keyed by the request's values instead of the configured ones.
    pub detailed_metric: bool,
    /// Stats keyed by the request's value where the rule matched a wildcard or a key only.
    pub value_to_metric: bool,
    /// The descriptor's `metadata`, free-form, for the service to hand back to the client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// Where the rule was written.
    pub source: Source,
    /// Where each limit's algorithm was written (its `algorithm` key, or its map), in the
    /// order of `limits`.
    #[serde(skip)]
    pub(crate) limit_positions: Vec<Position>,
    /// The rule's position in its rule set (see [`Rule::index`]).
    #[serde(skip)]
    pub(crate) index: usize,
}

impl Rule {
    /// The rule's position among its rule set's rules, from 0 to
    /// [`RuleSet::rule_count`](crate::RuleSet::rule_count), in the order
    /// [`RuleSet::rules`](crate::RuleSet::rules) lists them domain by domain: a dense handle
    /// for tables kept per rule of one rule set. Another rule set (a reload) numbers its rules
    /// afresh; [`Rule::id`] is what stays the same.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.id)?;
        if self.unlimited {
            write!(f, " unlimited")?;
        }
        for (i, limit) in self.limits.iter().enumerate() {
            if i > 0 {
                write!(f, ";")?;
            }
            write!(f, " {limit}")?;
        }
        write!(f, ", shadow_mode: {}", self.shadow_mode)?;
        for (flag, name) in [
            (self.quota_mode, "quota_mode"),
            (self.detailed_metric, "detailed_metric"),
            (self.value_to_metric, "value_to_metric"),
        ] {
            if flag {
                write!(f, ", {name}: true")?;
            }
        }
        Ok(())
    }
}

fn duration_text(period: Duration) -> String {
    format_duration_micros(u64::try_from(period.as_micros()).unwrap_or(u64::MAX))
}

fn serialize_duration<S: serde::Serializer>(period: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&duration_text(*period))
}

/// `{"name": "gcra", "burst": 3, "spec": "gcra:rate=7/30s,burst=3"}`: the name and the
/// parameters a rule file gives beside the quota (numbers as numbers, flags as `true`), and
/// the whole spec; `null` for a limit of zero.
fn serialize_algorithm<S: serde::Serializer>(
    algorithm: &Option<AnyAlgorithm>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let Some(algorithm) = algorithm else {
        return s.serialize_none();
    };
    let spec = algorithm.to_spec();
    let params = spec.to_quota().map(|q| q.params).unwrap_or_default();
    let mut map = s.serialize_map(Some(params.len() + 2))?;
    map.serialize_entry("name", spec.algorithm())?;
    for (name, value) in params {
        if value.is_empty() {
            map.serialize_entry(name, &true)?;
        } else if let Ok(n) = value.parse::<u64>() {
            map.serialize_entry(name, &n)?;
        } else if let Ok(x) = value.parse::<f64>() {
            map.serialize_entry(name, &x)?;
        } else {
            map.serialize_entry(name, value)?;
        }
    }
    map.serialize_entry("spec", &spec.to_string())?;
    map.end()
}
