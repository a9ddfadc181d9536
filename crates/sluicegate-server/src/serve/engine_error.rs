//! Why the engine refuses to start, or to put new rules in force.

use std::path::PathBuf;

use sluicegate::ConfigError;
use sluicegate_rules::{LoadErrors, Position};

/// Rules or options the engine cannot serve. On reload, the rules in force stay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A limit's parameters cannot be enforced.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The modes file cannot be read.
    #[error(transparent)]
    Modes(#[from] crate::plumbing::ModeError),
    /// Limits the service cannot honour (a leaky queue that shapes; with Redis, an algorithm
    /// Redis does not run), each reported with its file, line and column.
    #[error("{0}")]
    Refused(LoadErrors),
    /// `--count-denied` with a rule whose algorithm cannot count denied requests.
    #[error(
        "{}:{position}: {rule}: algorithm {algorithm} cannot count denied requests, which \
         --count-denied asks of every limit",
        file.display()
    )]
    CannotCountDenied {
        /// The rule file.
        file: PathBuf,
        /// Where the rule's descriptor starts.
        position: Position,
        /// The rule's id (`domain.key_value...`).
        rule: String,
        /// The algorithm's name.
        algorithm: &'static str,
    },
}
