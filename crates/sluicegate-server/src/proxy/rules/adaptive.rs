//! A route's `adaptive:` setting: an adaptive concurrency limit in front of the upstream, as
//! the HTTP layer's [`AdaptiveLimitLayer`](sluicegate_http::adaptive::AdaptiveLimitLayer) holds it.
//!
//! ```yaml
//! adaptive:
//!   controller: gradient2  # a controller spec, as `sluicegate simulate --adaptive` takes:
//!                          # aimd, vegas, gradient2, envoy-gradient, percentile, fixed, none,
//!                          # with or without parameters ("gradient2:min=1,window=1s")
//!   min: 1                 # any of the spec's parameters, as a key of its own
//!   max: 1000
//!   window: 1s
//!   queue_timeout: 250ms   # wait this long for a place (default: refuse at once)
//!   queue_capacity: 100    # requests waiting at most
//!   retry_after: 1s        # the refusal's Retry-After
//! ```
//!
//! The spec and the keys make one [`ControllerSpec`], read and checked by the core as
//! everywhere else ([`sluicegate::adaptive::spec`] lists each controller's parameters). A
//! parameter given both in the spec and as a key is an error; `none` is no limit, as if
//! `adaptive` were left out.

use std::time::Duration;

use sluicegate::ConfigError;
use sluicegate::adaptive::spec::PARAMETERS;
use sluicegate::adaptive::{AdaptiveLimiter, ControllerSpec};
use sluicegate::rate::parse_duration;
use sluicegate_rules::Position;
use sluicegate_rules::yaml::{Node, Scalar, Value};

use super::Reader;
use sluicegate_http::adaptive::AdaptiveLimitLayer;

/// A route's adaptive concurrency limit, validated.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveDef {
    /// The controller and its parameters: `controller`'s spec with the parameter keys added.
    pub controller: ControllerSpec,
    /// How long a request may wait for a place; `None`: refused at once.
    pub queue_timeout: Option<Duration>,
    /// Requests waiting at most.
    pub queue_capacity: usize,
    /// The refusal's `Retry-After`.
    pub retry_after: Duration,
}

/// The keys that are the proxy's own, not the controller's.
const OWN: [&str; 4] = [
    "controller",
    "queue_timeout",
    "queue_capacity",
    "retry_after",
];

const CONTROLLERS: &str = "aimd, vegas, gradient2, envoy-gradient, percentile, fixed, none";

impl AdaptiveDef {
    /// The layer this setting describes (a fresh limiter).
    pub(crate) fn layer(&self) -> Result<AdaptiveLimitLayer, ConfigError> {
        let limiter = AdaptiveLimiter::builder(self.controller.build(0)?)
            .queue_capacity(self.queue_capacity)
            .build()?;
        let mut builder = AdaptiveLimitLayer::builder(limiter).retry_after(self.retry_after);
        if let Some(timeout) = self.queue_timeout {
            builder = builder.queue_timeout(timeout);
        }
        Ok(builder.build())
    }
}

impl Reader {
    /// A route's `adaptive:` map; `None` for a problem, or for `controller: none`.
    pub(super) fn adaptive(&mut self, node: &Node) -> Option<AdaptiveDef> {
        let known: Vec<&str> = OWN.iter().chain(PARAMETERS).copied().collect();
        let entries = self.entries(node, "`adaptive`", &known)?;
        let mut controller = None;
        let mut params: Vec<(&str, &Node)> = Vec::new();
        let (mut queue_timeout, mut queue_capacity, mut retry_after) =
            (None, 100, Duration::from_secs(1));
        let mut queue_settings = false;
        for (field, value) in entries {
            queue_settings |= OWN[1..].contains(&field);
            match field {
                "controller" => controller = Some(value),
                "queue_capacity" => {
                    queue_capacity = self
                        .count(value, "`queue_capacity`")
                        .map_or(queue_capacity, |n| n as usize);
                }
                "queue_timeout" => queue_timeout = self.duration(value, "`queue_timeout`"),
                "retry_after" => {
                    retry_after = self.duration(value, "`retry_after`").unwrap_or(retry_after);
                }
                _ => params.push((field, value)),
            }
        }
        let Some(controller) = controller else {
            self.fail(
                node.pos,
                format!("`adaptive` needs a `controller` ({CONTROLLERS})"),
            );
            return None;
        };
        let controller = self.controller(node, controller, &params)?;
        if controller.is_unlimited() {
            if queue_settings {
                self.fail(
                    node.pos,
                    "`adaptive`: `none` sets no limit, so nothing waits or is refused",
                );
            }
            return None;
        }
        let def = AdaptiveDef {
            controller,
            queue_timeout,
            queue_capacity,
            retry_after,
        };
        // Built once here, so that a limiter that cannot be made is reported with its place,
        // not when the rules are served.
        if let Err(error) = def.layer() {
            self.fail(node.pos, format!("`adaptive`: {error}"));
            return None;
        }
        Some(def)
    }

    /// The `controller` spec with the parameters given as keys, or the problem where it is.
    fn controller(
        &mut self,
        block: &Node,
        controller: &Node,
        params: &[(&str, &Node)],
    ) -> Option<ControllerSpec> {
        let text = self.string(controller, "`controller`")?;
        let spec = match text.parse::<ControllerSpec>() {
            Ok(spec) => spec,
            Err(error) => {
                self.fail(controller.pos, error.to_string());
                return None;
            }
        };
        let mut values = Vec::new();
        for (key, value) in params {
            values.push((*key, self.string(value, &format!("`{key}`"))?));
        }
        spec.with_params(values)
            .map_err(|error| {
                let (pos, message) = place(&error, block, params);
                self.fail(pos, message);
            })
            .ok()
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

/// Where a spec's error is, and what to say: at the key's value when it names one given as a
/// key, else at the block (a combination of parameters, such as `min` above `max`).
fn place(error: &ConfigError, block: &Node, params: &[(&str, &Node)]) -> (Position, String) {
    let named = match error {
        ConfigError::UnknownParameter { name, .. } => Some(name.as_str()),
        ConfigError::Controller { problem, .. } => match problem.as_ref() {
            ConfigError::InvalidParameter { name, .. } => Some(*name),
            ConfigError::Duplicate { name, .. } => Some(name.as_str()),
            _ => None,
        },
        _ => None,
    };
    match named.and_then(|name| params.iter().find(|(key, _)| *key == name)) {
        Some((_, value)) => (value.pos, error.to_string()),
        None => (block.pos, format!("`adaptive`: {error}")),
    }
}

#[cfg(test)]
mod tests;
