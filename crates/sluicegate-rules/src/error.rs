//! What can be wrong with a rule file. Every message that envoyproxy/ratelimit gives for the
//! same mistake is kept word for word (after our `file:line:column:` prefix), so that people
//! moving from it can search for the text they know.

use std::fmt;
use std::path::PathBuf;

use crate::yaml::Position;

/// One problem in one rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The file, as it was given or found in the directory.
    pub file: PathBuf,
    /// Where in the file, when the problem has a place (an unreadable file has none).
    pub position: Option<Position>,
    /// What is wrong.
    pub kind: RuleErrorKind,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some(pos) => write!(f, "{}:{pos}: {}", self.file.display(), self.kind),
            None => write!(f, "{}: {}", self.file.display(), self.kind),
        }
    }
}

impl std::error::Error for RuleError {}

/// The kinds of problem a rule file can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleErrorKind {
    /// The file or directory could not be read.
    #[error("cannot read: {message}")]
    Io {
        /// The operating system's message.
        message: String,
    },
    /// The text is not valid YAML.
    #[error("error loading config file: {message}")]
    Syntax {
        /// The YAML parser's message.
        message: String,
    },
    /// The document (or a part of it) is not of the shape the format needs.
    #[error("{what} must be {expected}, found {found}")]
    WrongType {
        /// What was being read (`the file`, `requests_per_unit`, ...).
        what: String,
        /// What it must be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// A map key that is not a string.
    #[error("config error, key is not of type string: {key}")]
    NonStringKey {
        /// The key as written.
        key: String,
    },
    /// A key that the format does not know at this place.
    #[error("config error, unknown key '{key}' (expected one of: {expected})")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The keys allowed here.
        expected: &'static str,
    },
    /// The same key twice in one map.
    #[error("duplicate key '{key}' in the same map")]
    RepeatedKey {
        /// The key as written.
        key: String,
    },
    /// A list (of descriptors, limits or replaces) holds something that is not a map.
    #[error("config error, yaml file contains list of type other than map: {item}")]
    NonMapListItem {
        /// The item as written.
        item: String,
    },
    /// A floating-point number where ratelimit accepts only strings, integers and booleans.
    #[error("error checking config: floating-point value {value} is not allowed")]
    FloatValue {
        /// The number as written.
        value: String,
    },
    /// No `domain`, or an empty one.
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    /// The domain is already defined by another file, and domains are not merged.
    #[error("duplicate domain '{domain}' in config file (first defined in {first})")]
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The file that defined it first.
        first: String,
    },
    /// A descriptor without `key`, or with an empty one.
    #[error("descriptor has empty key")]
    EmptyKey,
    /// Two descriptors with the same key and value at the same level.
    #[error("duplicate descriptor composite key '{composite}'")]
    DuplicateDescriptor {
        /// The full key (`domain.key_value.subkey`).
        composite: String,
    },
    /// A `unit` that is not second, minute, hour, day, week, month or year (any case).
    #[error("invalid rate limit unit '{unit}'")]
    InvalidUnit {
        /// The unit as written (empty when missing).
        unit: String,
    },
    /// `unlimited: true` together with a valid `unit`.
    #[error("should not specify rate limit unit when unlimited")]
    UnitWhenUnlimited,
    /// A `replaces` entry without a name.
    #[error("should not have an empty replaces entry")]
    EmptyReplaces,
    /// A limit that replaces itself.
    #[error("replaces should not contain name of same descriptor")]
    ReplacesSelf,
    /// `share_threshold: true` on a descriptor whose value has no `*`.
    #[error(
        "share_threshold can only be used with wildcard values (containing '*'), but found key '{key}'"
    )]
    ShareThresholdWithoutWildcard {
        /// The descriptor's `key_value`.
        key: String,
    },
    /// A Sluicegate extension (`period`, `algorithm`, `burst`, `buckets`, `delay`,
    /// `rate_limits`) used wrongly.
    #[error("{message}")]
    Extension {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A parameter rejected by the core library (a zero period, a bad duration).
    #[error(transparent)]
    Config(#[from] sluicegate::ConfigError),
}

/// Every problem found while loading rule files (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadErrors {
    errors: Vec<RuleError>,
}

impl LoadErrors {
    pub(crate) fn new(errors: Vec<RuleError>) -> LoadErrors {
        LoadErrors { errors }
    }

    /// The problems, in file order and, within a file, in the order they were found.
    pub fn errors(&self) -> &[RuleError] {
        &self.errors
    }
}

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadErrors {}

/// Collects errors and warnings for one file while it is read.
pub(crate) struct Report {
    pub(crate) file: PathBuf,
    pub(crate) errors: Vec<RuleError>,
    pub(crate) warnings: Vec<RuleError>,
}

impl Report {
    pub(crate) fn new(file: PathBuf) -> Report {
        Report {
            file,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(crate) fn error(&mut self, position: Option<Position>, kind: RuleErrorKind) {
        self.errors.push(RuleError {
            file: self.file.clone(),
            position,
            kind,
        });
    }

    pub(crate) fn at(&mut self, position: Position, kind: RuleErrorKind) {
        self.error(Some(position), kind);
    }

    pub(crate) fn extension(&mut self, position: Position, message: impl Into<String>) {
        self.at(
            position,
            RuleErrorKind::Extension {
                message: message.into(),
            },
        );
    }

    pub(crate) fn warn(&mut self, position: Position, message: String) {
        self.warnings.push(RuleError {
            file: self.file.clone(),
            position: Some(position),
            kind: RuleErrorKind::Extension { message },
        });
    }
}
