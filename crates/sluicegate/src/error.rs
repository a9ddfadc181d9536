//! What can go wrong: building a limiter with bad parameters, or asking one for something it can
//! never give. A plain "not now" is not an error: it is a [`Decision`](crate::Decision) with
//! `allowed == false` and a `retry_after`.

/// A limiter could not be built from the parameters given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A parameter is outside the range the algorithm accepts.
    #[error("invalid {name} `{value}`: {reason}")]
    InvalidParameter {
        /// The parameter's name, as written in a spec or rule file (`rate`, `burst`, ...).
        name: &'static str,
        /// The value that was given.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A parameter the algorithm needs was not given.
    #[error("missing parameter `{name}` for {algorithm}")]
    MissingParameter {
        /// The algorithm's (or adaptive controller's) name.
        algorithm: &'static str,
        /// The missing parameter.
        name: &'static str,
    },
    /// A parameter the algorithm does not take was given.
    #[error("unknown parameter `{name}` for {algorithm} (it takes: {expected})")]
    UnknownParameter {
        /// The algorithm's (or adaptive controller's) name.
        algorithm: &'static str,
        /// The parameter as written.
        name: String,
        /// The parameters the algorithm does take.
        expected: &'static str,
    },
    /// A limiter spec names no known algorithm.
    #[error("unknown algorithm `{name}` (known: {known})")]
    UnknownAlgorithm {
        /// The name as written.
        name: String,
        /// The known names.
        known: &'static str,
    },
    /// An adaptive controller spec names no known controller.
    #[error("unknown controller `{name}` (known: {known})")]
    UnknownController {
        /// The name as written.
        name: String,
        /// The known names.
        known: &'static str,
    },
    /// An adaptive controller spec's parameters do not make that controller: which
    /// controller, and what is wrong, in the spec's own parameter names (`min`, not
    /// `min_limit`).
    #[error("{controller}: {problem}")]
    Controller {
        /// The controller's name as specs write it (`aimd`, `envoy-gradient`, ...).
        controller: &'static str,
        /// What is wrong with its parameters.
        problem: Box<ConfigError>,
    },
    /// A rate, duration or number could not be read.
    #[error("cannot read {what} `{text}`: {reason}")]
    Syntax {
        /// What was being read (`rate`, `duration`, `number`).
        what: &'static str,
        /// The text as written.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two parameters that must be in order are not: a minimum above its maximum, or an
    /// initial value outside the range they set.
    #[error("{low_name} ({low}) must not exceed {high_name} ({high})")]
    OutOfOrder {
        /// The parameter that must be the smaller, as named by its builder method.
        low_name: &'static str,
        /// Its value.
        low: u64,
        /// The parameter that must be the larger.
        high_name: &'static str,
        /// Its value.
        high: u64,
    },
    /// A name given twice where names must be unique (an adaptive limiter's partitions).
    #[error("{what} `{name}` is given twice")]
    Duplicate {
        /// What is named (`partition`).
        what: &'static str,
        /// The name.
        name: String,
    },
}

impl ConfigError {
    pub(crate) fn invalid(
        name: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        ConfigError::InvalidParameter {
            name,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// A request that the limiter cannot answer with a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// More permits were asked for than the limiter can ever grant at once: waiting will not
    /// help, so this is not reported as a denial with a retry time.
    #[error("{requested} permits requested but at most {capacity} can ever be granted at once")]
    InsufficientCapacity {
        /// Permits asked for.
        requested: u64,
        /// The most this limiter grants to a single request.
        capacity: u64,
    },
    /// The algorithm does not support the operation (for example `acquire` on a fixed window,
    /// which has nothing to reserve, or `release` on anything but a concurrency limit).
    #[error("{algorithm} does not support {operation}")]
    Unsupported {
        /// The algorithm's name.
        algorithm: &'static str,
        /// The operation asked for.
        operation: &'static str,
    },
    /// A keyed limiter holds as many keys as it was allowed and none of them is fresh enough to
    /// forget, so a new key is refused rather than resetting another key's budget.
    #[error("key table is full ({max_keys} keys, none idle enough to drop)")]
    KeyCapacityReached {
        /// The configured cap.
        max_keys: usize,
    },
    /// A release of more permits than are held (concurrency limits).
    #[error("released {released} permits but only {held} are held")]
    ReleaseExceedsHeld {
        /// Permits released.
        released: u64,
        /// Permits held at the time.
        held: u64,
    },
}
