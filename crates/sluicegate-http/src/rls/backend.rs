//! The backend: one gRPC call per request, the failure policy when it cannot be answered.

use std::future::Future;
use std::hash::Hash;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate::state_machine::Op;
use sluicegate::store::Held;
use tonic::transport::Channel;

use crate::rate_limit::internal::Backend;
use crate::rate_limit::{BackendError, LimitInfo, MemoryBackend, Verdict};
use crate::rls::answer;

/// What a request gets when the service cannot answer (down, slower than the timeout, or an
/// answer that is not one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RlsFailure {
    /// Passed, uncounted (Envoy's default, `failure_mode_deny: false`).
    #[default]
    Open,
    /// A [`BackendError::Unavailable`]: the layer answers 503 (or passes it, with
    /// [`OnBackendError::Allow`](crate::rate_limit::OnBackendError::Allow)).
    Closed,
    /// Decided in this process by the builder's
    /// [`local_limit`](crate::rls::RlsBuilder::local_limit)s.
    Local,
}

/// The answer of an [`RlsBackend`]: boxed, as it waits on the network.
pub(crate) type RlsFuture = Pin<Box<dyn Future<Output = Result<Verdict, BackendError>> + Send>>;

/// One entry of the descriptor a key becomes.
pub(crate) enum Part<K> {
    /// The key's text under this name.
    Key(String, fn(&K) -> String),
    /// A fixed entry.
    Constant(String, String),
}

/// What every clone of the backend's futures shares.
pub(crate) struct Remote<K> {
    pub(crate) client: RateLimitServiceClient<Channel>,
    pub(crate) endpoint: String,
    pub(crate) domain: String,
    pub(crate) parts: Vec<Part<K>>,
    pub(crate) timeout: Duration,
    pub(crate) failure: RlsFailure,
    pub(crate) local: Option<MemoryBackend<K>>,
}

/// What a layer asking a remote rate limit service decides with (see [the module](crate::rls)),
/// given to [`RateLimitBuilder::build_with`](crate::rate_limit::RateLimitBuilder::build_with).
pub struct RlsBackend<K> {
    pub(crate) remote: Arc<Remote<K>>,
    /// The limits known before any answer: none (each verdict carries the service's).
    pub(crate) limits: Arc<[LimitInfo]>,
}

impl<K> std::fmt::Debug for RlsBackend<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlsBackend")
            .field("endpoint", &self.remote.endpoint)
            .field("domain", &self.remote.domain)
            .field("timeout", &self.remote.timeout)
            .field("failure", &self.remote.failure)
            .finish_non_exhaustive()
    }
}

impl<K> Remote<K> {
    fn request(&self, key: &K, permits: NonZeroU64) -> RateLimitRequest {
        let entries = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Key(name, text) => Entry {
                    key: name.clone(),
                    value: text(key),
                },
                Part::Constant(name, value) => Entry {
                    key: name.clone(),
                    value: value.clone(),
                },
            })
            .collect();
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries,
                ..Default::default()
            }],
            hits_addend: u32::try_from(permits.get()).unwrap_or(u32::MAX),
        }
    }
}

impl<K> Remote<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The failure policy's answer, after the service failed with `error`.
    fn fallback(
        &self,
        key: &K,
        permits: NonZeroU64,
        op: Op,
        error: String,
    ) -> Result<Verdict, BackendError> {
        tracing::warn!(endpoint = %self.endpoint, %error, policy = ?self.failure,
            "rate limit service unavailable");
        match (self.failure, &self.local) {
            (RlsFailure::Open, _) => Ok(Verdict::new(true, Vec::new())),
            // The fallback's verdict describes the local limits, not the service's.
            (RlsFailure::Local, Some(local)) => local
                .decide_now(key, permits, op)
                .map(|verdict| verdict.with_limits(Arc::clone(local.limits()))),
            _ => Err(BackendError::Unavailable(
                format!("rate limit service at {}: {error}", self.endpoint).into(),
            )),
        }
    }
}

impl<K> Backend<K> for RlsBackend<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Future = RlsFuture;

    fn decide(&self, key: &K, permits: NonZeroU64, op: Op) -> RlsFuture {
        let remote = Arc::clone(&self.remote);
        let request = remote.request(key, permits);
        let key = key.clone();
        Box::pin(async move {
            let mut client = remote.client.clone();
            let call = tokio::time::timeout(remote.timeout, client.should_rate_limit(request));
            let error = match call.await {
                Ok(Ok(answer)) => match answer::verdict(answer.get_ref(), &remote.domain) {
                    Some(verdict) => return Ok(verdict),
                    None => "an answer with overall code UNKNOWN".to_owned(),
                },
                Ok(Err(status)) => format!("{}: {}", status.code(), status.message()),
                Err(_) => format!("no answer within {:?}", remote.timeout),
            };
            remote.fallback(&key, permits, op, error)
        })
    }

    fn release(&self, key: &K, permits: NonZeroU64, _held: Vec<Held>) {
        // Only the local fallback hands out permits held until a response ends.
        if let Some(local) = &self.remote.local {
            local.release(key, permits, Vec::new());
        }
    }

    fn limits(&self) -> &Arc<[LimitInfo]> {
        &self.limits
    }
}
