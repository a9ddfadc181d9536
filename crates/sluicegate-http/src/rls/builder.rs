//! Building an [`RlsBackend`]: where the service is, the descriptor, the timeout and the
//! failure policy.

use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate::{AnyAlgorithm, ConfigError, SystemClock};
use tonic::transport::Endpoint;

use crate::rate_limit::{DEFAULT_MAX_KEYS, IntoLimit, MemoryBackend};
use crate::rls::backend::{Part, Remote, RlsBackend, RlsFailure};

/// How long a call may take unless set: a rate limit check sits on every request's path.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// A remote backend could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RlsBuildError {
    /// The service's address is not a URI tonic can connect to.
    #[error("rate limit service address `{endpoint}`: {reason}")]
    BadEndpoint {
        /// As given.
        endpoint: String,
        /// Why not.
        reason: String,
    },
    /// The descriptor has no entry: the service would have nothing to match its rules on.
    #[error("the descriptor needs at least one entry (entry_from_key or entry)")]
    NoEntries,
    /// A local limit's spec or parameters are wrong.
    #[error("local limit `{spec}`: {source}")]
    LocalLimit {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        source: ConfigError,
    },
    /// The failure policy is `Local` but no local limit was given.
    #[error("failure policy `local` needs at least one local_limit")]
    NoLocalLimit,
    /// Built outside a tokio runtime, which the gRPC channel needs.
    #[error("an RLS backend must be built inside a tokio runtime")]
    NoRuntime,
}

/// A local limit as given: its name, and its algorithm or the spec and why it is wrong (told
/// at `build`).
type LocalLimit = (String, Result<AnyAlgorithm, (String, ConfigError)>);

/// Builds an [`RlsBackend`].
#[must_use]
pub struct RlsBuilder<K> {
    endpoint: String,
    domain: String,
    parts: Vec<Part<K>>,
    timeout: Duration,
    failure: RlsFailure,
    local: Vec<LocalLimit>,
    max_keys: usize,
}

impl<K> RlsBackend<K> {
    /// A builder for the service at `endpoint` (`http://host:port`), asking in `domain`.
    pub fn builder(endpoint: impl Into<String>, domain: impl Into<String>) -> RlsBuilder<K> {
        RlsBuilder {
            endpoint: endpoint.into(),
            domain: domain.into(),
            parts: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            failure: RlsFailure::default(),
            local: Vec::new(),
            max_keys: DEFAULT_MAX_KEYS,
        }
    }
}

impl<K: Display> RlsBuilder<K> {
    /// Adds the entry `(name, key)`: the request's key, as text, under `name`.
    pub fn entry_from_key(mut self, name: impl Into<String>) -> Self {
        self.parts
            .push(Part::Key(name.into(), |key: &K| key.to_string()));
        self
    }
}

impl<K> RlsBuilder<K> {
    /// Adds a fixed entry `(name, value)` (`("path", "/api")`, `("generic_key", "edge")`).
    pub fn entry(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.parts.push(Part::Constant(name.into(), value.into()));
        self
    }

    /// Adds the entry `(name, text(key))`, for keys without `Display` or another spelling.
    pub fn entry_with(mut self, name: impl Into<String>, text: fn(&K) -> String) -> Self {
        self.parts.push(Part::Key(name.into(), text));
        self
    }

    /// The longest a call may take (connecting included) before the failure policy answers
    /// (100 ms unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What a request gets when the service cannot answer ([`RlsFailure::Open`] unless set).
    pub fn on_failure(mut self, failure: RlsFailure) -> Self {
        self.failure = failure;
        self
    }

    /// Adds a limit decided in this process while the service cannot answer (with
    /// [`RlsFailure::Local`]), named `name` in the response fields.
    pub fn local_limit(mut self, name: impl Into<String>, limit: impl IntoLimit) -> Self {
        self.local.push((name.into(), limit.into_limit()));
        self
    }

    /// The most keys the local limits hold ([`DEFAULT_MAX_KEYS`] unless set).
    pub fn local_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }
}

impl<K> RlsBuilder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The backend. Connects lazily: a service not yet up is no error here, only a failure
    /// of the calls made while it is down.
    pub fn build(self) -> Result<RlsBackend<K>, RlsBuildError> {
        if self.parts.is_empty() {
            return Err(RlsBuildError::NoEntries);
        }
        let bad = |reason: String| RlsBuildError::BadEndpoint {
            endpoint: self.endpoint.clone(),
            reason,
        };
        let endpoint = Endpoint::from_shared(self.endpoint.clone())
            .map_err(|e| bad(e.to_string()))?
            .timeout(self.timeout)
            .connect_timeout(self.timeout);
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RlsBuildError::NoRuntime);
        }
        let client = RateLimitServiceClient::new(endpoint.connect_lazy());
        let mut limits = Vec::with_capacity(self.local.len());
        for (name, limit) in self.local {
            let algorithm =
                limit.map_err(|(spec, source)| RlsBuildError::LocalLimit { spec, source })?;
            limits.push((name, algorithm));
        }
        let local = (!limits.is_empty()).then(|| {
            // Each key takes a state in every limit.
            let states = self.max_keys.saturating_mul(limits.len());
            MemoryBackend::new(limits, SystemClock::new(), Some(states))
        });
        if self.failure == RlsFailure::Local && local.is_none() {
            return Err(RlsBuildError::NoLocalLimit);
        }
        Ok(RlsBackend {
            remote: Arc::new(Remote {
                client,
                endpoint: self.endpoint,
                domain: self.domain,
                parts: self.parts,
                timeout: self.timeout,
                failure: self.failure,
                local,
            }),
            limits: Arc::new([]),
        })
    }
}
