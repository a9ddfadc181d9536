//! What every clone of a layer and of its services shares: the limiter and the options.

use std::time::Duration;

use crate::adaptive::classify::Classify;
use crate::adaptive::erased::Limiter;

/// How the layer treats requests.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// How long a request may wait for a place; `None`: refused at once.
    pub(crate) queue_timeout: Option<Duration>,
    /// The delay a refusal tells clients to wait.
    pub(crate) retry_after: Duration,
    /// Answers slower than this count as timeouts.
    pub(crate) timeout_after: Option<Duration>,
    /// What a response says about the service.
    pub(crate) classify: Classify,
}

/// What every clone of a layer and of its services shares.
pub(crate) struct Shared {
    pub(crate) limiter: Box<dyn Limiter>,
    pub(crate) options: Options,
}
