//! A route's `adaptive:` setting: an adaptive concurrency limit in front of the upstream, as
//! the HTTP layer's [`AdaptiveLimitLayer`](sluicegate_http::adaptive::AdaptiveLimitLayer) holds it.
//!
//! ```yaml
//! adaptive:
//!   controller: vegas      # aimd, vegas, gradient2, envoy-gradient, percentile
//!   min: 1                 # the limit's bounds (the controller's defaults otherwise)
//!   initial: 20
//!   max: 1000
//!   target: 150ms          # percentile only: the p99 to hold (default: twice the lowest
//!                          # window p99 it measures)
//!   timeout: 500ms         # aimd only: a slower answer counts as a loss
//!   queue_timeout: 250ms   # wait this long for a place (default: refuse at once)
//!   queue_capacity: 100    # requests waiting at most
//!   retry_after: 1s        # the refusal's Retry-After
//! ```

use std::time::Duration;

use sluicegate::adaptive::{
    AdaptiveLimiter, Aimd, Controller, EnvoyGradient, Gradient2, Percentile, Vegas,
};
use sluicegate::{ConfigError, parse_duration};
use sluicegate_rules::yaml::{Node, Scalar, Value};

use super::Reader;
use sluicegate_http::adaptive::AdaptiveLimitLayer;

/// Which rule sets the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControllerKind {
    /// Additive increase, multiplicative decrease on drops and timeouts.
    Aimd,
    /// TCP Vegas' queue estimate from the minimum latency.
    Vegas,
    /// Netflix's Gradient2: short-term against long-term latency.
    Gradient2,
    /// Envoy's gradient controller, its minimum latency measured in pinned windows.
    EnvoyGradient,
    /// A window's p99 held under `target`.
    Percentile,
}

/// A route's adaptive concurrency limit, validated.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveDef {
    /// The controller.
    pub controller: ControllerKind,
    /// The limit's lowest, first and highest values, where given.
    pub min: Option<u32>,
    /// See `min`.
    pub initial: Option<u32>,
    /// See `min`.
    pub max: Option<u32>,
    /// The percentile controller's target latency.
    pub target: Option<Duration>,
    /// AIMD's latency timeout: a slower answer counts as a loss.
    pub timeout: Option<Duration>,
    /// How long a request may wait for a place; `None`: refused at once.
    pub queue_timeout: Option<Duration>,
    /// Requests waiting at most.
    pub queue_capacity: usize,
    /// The refusal's `Retry-After`.
    pub retry_after: Duration,
}

const KNOWN: [&str; 9] = [
    "controller",
    "min",
    "initial",
    "max",
    "target",
    "timeout",
    "queue_timeout",
    "queue_capacity",
    "retry_after",
];

const CONTROLLERS: &str = "aimd, vegas, gradient2, envoy-gradient, percentile";

impl AdaptiveDef {
    /// The layer this setting describes (a fresh limiter).
    pub(crate) fn layer(&self) -> Result<AdaptiveLimitLayer, ConfigError> {
        let controller = self.controller()?;
        let limiter = AdaptiveLimiter::builder(controller)
            .queue_capacity(self.queue_capacity)
            .build()?;
        let mut builder = AdaptiveLimitLayer::builder(limiter).retry_after(self.retry_after);
        if let Some(timeout) = self.queue_timeout {
            builder = builder.queue_timeout(timeout);
        }
        Ok(builder.build())
    }

    fn controller(&self) -> Result<Box<dyn Controller>, ConfigError> {
        macro_rules! bounded {
            ($builder:expr) => {{
                let mut builder = $builder;
                if let Some(min) = self.min {
                    builder = builder.min_limit(min);
                }
                if let Some(initial) = self.initial {
                    builder = builder.initial_limit(initial);
                }
                if let Some(max) = self.max {
                    builder = builder.max_limit(max);
                }
                builder
            }};
        }
        Ok(match self.controller {
            ControllerKind::Aimd => {
                let mut builder = bounded!(Aimd::builder());
                if let Some(timeout) = self.timeout {
                    builder = builder.timeout(timeout);
                }
                Box::new(builder.build()?)
            }
            ControllerKind::Vegas => Box::new(bounded!(Vegas::builder()).build()?),
            ControllerKind::Gradient2 => Box::new(bounded!(Gradient2::builder()).build()?),
            ControllerKind::EnvoyGradient => Box::new(bounded!(EnvoyGradient::builder()).build()?),
            ControllerKind::Percentile => {
                // Without a target, the controller's own: a multiple of the lowest window
                // latency it measures.
                let builder = match self.target {
                    Some(target) => Percentile::builder(target),
                    None => Percentile::relative_builder(),
                };
                Box::new(bounded!(builder).build()?)
            }
        })
    }
}

impl Reader {
    /// A route's `adaptive:` map.
    pub(super) fn adaptive(&mut self, node: &Node) -> Option<AdaptiveDef> {
        let entries = self.entries(node, "`adaptive`", &KNOWN)?;
        let mut def = AdaptiveDef {
            controller: ControllerKind::Gradient2,
            min: None,
            initial: None,
            max: None,
            target: None,
            timeout: None,
            queue_timeout: None,
            queue_capacity: 100,
            retry_after: Duration::from_secs(1),
        };
        let mut named = false;
        for (field, value) in entries {
            match field {
                "controller" => {
                    named = true;
                    let text = self.string(value, "`controller`")?;
                    def.controller = match text.as_str() {
                        "aimd" => ControllerKind::Aimd,
                        "vegas" => ControllerKind::Vegas,
                        "gradient2" => ControllerKind::Gradient2,
                        "envoy-gradient" => ControllerKind::EnvoyGradient,
                        "percentile" => ControllerKind::Percentile,
                        _ => {
                            self.fail(
                                value.pos,
                                format!("unknown controller `{text}` (known: {CONTROLLERS})"),
                            );
                            return None;
                        }
                    };
                }
                "min" => def.min = self.count(value, "`min`"),
                "initial" => def.initial = self.count(value, "`initial`"),
                "max" => def.max = self.count(value, "`max`"),
                "queue_capacity" => {
                    def.queue_capacity = self
                        .count(value, "`queue_capacity`")
                        .map_or(def.queue_capacity, |n| n as usize);
                }
                "target" => def.target = self.duration(value, "`target`"),
                "timeout" => def.timeout = self.duration(value, "`timeout`"),
                "queue_timeout" => def.queue_timeout = self.duration(value, "`queue_timeout`"),
                "retry_after" => {
                    def.retry_after = self
                        .duration(value, "`retry_after`")
                        .unwrap_or(def.retry_after);
                }
                _ => {}
            }
        }
        if !named {
            self.fail(
                node.pos,
                format!("`adaptive` needs a `controller` ({CONTROLLERS})"),
            );
            return None;
        }
        if def.timeout.is_some() && def.controller != ControllerKind::Aimd {
            self.fail(node.pos, "`timeout` is AIMD's only (controller: aimd)");
        }
        if def.target.is_some() && def.controller != ControllerKind::Percentile {
            self.fail(node.pos, "`target` is the percentile controller's only");
        }
        // Built once here, so that a bad combination (min above max) is reported with its
        // place, not when the rules are served.
        if let Err(error) = def.layer() {
            self.fail(node.pos, format!("`adaptive`: {error}"));
            return None;
        }
        Some(def)
    }

    fn count(&mut self, node: &Node, what: &str) -> Option<u32> {
        match node.value {
            Value::Scalar(Scalar::Int(n)) if n >= 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => {
                self.fail(
                    node.pos,
                    format!("{what} must be a whole number, not {}", node.describe()),
                );
                None
            }
        }
    }

    fn duration(&mut self, node: &Node, what: &str) -> Option<Duration> {
        let text = self.string(node, what)?;
        match parse_duration(&text) {
            Ok(duration) => Some(duration),
            Err(error) => {
                self.fail(node.pos, format!("{what} `{text}`: {error}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::proxy::rules::Rules;

    use super::*;

    #[test]
    fn a_route_reads_its_adaptive_setting() {
        let text = "routes:\n  - prefix: /api/\n    adaptive:\n      controller: percentile\n      target: 150ms\n      max: 64\n      queue_timeout: 250ms\n      queue_capacity: 10\n      retry_after: 3s\n  - prefix: /\n";
        let rules = Rules::parse(Path::new("r.yaml"), text).expect("valid");
        let def = rules.routes[0].adaptive.clone().expect("adaptive");
        assert_eq!(def.controller, ControllerKind::Percentile);
        assert_eq!(def.target, Some(Duration::from_millis(150)));
        assert_eq!((def.min, def.initial, def.max), (None, None, Some(64)));
        assert_eq!(def.queue_timeout, Some(Duration::from_millis(250)));
        assert_eq!(def.queue_capacity, 10);
        assert_eq!(def.retry_after, Duration::from_secs(3));
        assert_eq!(rules.routes[1].adaptive, None);
    }

    #[test]
    fn bad_settings_are_named_with_their_place() {
        let problems = |text: &str| match Rules::parse(Path::new("r.yaml"), text) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string(),
        };
        let text = problems(
            "routes:\n  - prefix: /\n    adaptive: { controller: percentile, queue_timeout: soon, size: 3 }\n",
        );
        for expected in [
            "r.yaml:3:62: unknown key `size` in `adaptive`",
            "r.yaml:3:56: `queue_timeout` `soon`",
        ] {
            assert!(text.contains(expected), "{expected} not in:\n{text}");
        }
        // Without a target, percentile holds one it derives from what it measures.
        assert_eq!(
            problems("routes:\n  - prefix: /\n    adaptive: { controller: percentile }\n"),
            "ok"
        );
        assert!(
            problems("routes:\n  - prefix: /\n    adaptive: {}\n").contains("needs a `controller`")
        );
        assert!(
            problems("routes:\n  - prefix: /\n    adaptive: { controller: aimd, min: 0 }\n")
                .contains("`adaptive`: ")
        );
    }
}
