//! Rule files for Sluicegate's rate limit service: the YAML format of envoyproxy/ratelimit,
//! with Sluicegate's extensions (any `period`, an `algorithm` with its parameters, read by the
//! core's spec table into the core's one limit type, and several `rate_limits` on one
//! descriptor).
//!
//! Loading goes in two phases, each reporting every problem with file, line and column:
//! the YAML is read into raw descriptors that keep positions (unknown keys, wrong types), then
//! resolved into validated [`Rule`]s (units, duplicates, `replaces`, extension combinations).
//! [`RuleSet::find`] then matches a request's descriptor exactly as envoyproxy/ratelimit does.
//!
//! ```
//! use std::path::PathBuf;
//! use sluicegate_rules::{LoadOptions, RuleSet};
//!
//! let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n";
//! let rules = RuleSet::from_sources(&[(PathBuf::from("edge.yaml"), yaml.to_owned())], &LoadOptions::default())?;
//! let found = rules.find("edge", &[("remote_address", "10.0.0.1")]).ok_or("no match")?;
//! assert_eq!(found.rule.limits[0].requests_per_unit, 10);
//! assert_eq!(found.counter_key, "edge_remote_address_10.0.0.1_");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod fields;
mod limit;
mod matcher;
mod raw;
mod refuse;
mod resolve;
mod rule;
mod ruleset;
mod settled;
pub mod yaml;

pub use error::{LoadErrors, RuleError, RuleErrorKind};
pub use matcher::Match;
pub use refuse::LimitAt;
pub use rule::{Limit, Rule, Source, Unit, Window};
pub use ruleset::{LoadOptions, RuleSet};
pub use settled::Settled;
pub use yaml::Position;
