//! Envoy's `envoy.service.ratelimit.v3.RateLimitService` over gRPC.

use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tonic::{Request, Response, Status};

use crate::serve::engine::Engine;
use crate::serve::metrics::KindLabel;
use crate::serve::protocol::{
    CallError, DescriptorCall, EnvoyUnit, LimitOverride, RateLimitCall, Verdict,
};

/// The gRPC service, answering from an [`Engine`].
#[derive(Debug, Clone)]
pub struct GrpcService {
    engine: Arc<Engine>,
    // Looked up once: a family lookup per call costs a lock and a hash.
    request_seconds: Histogram,
    /// Times each call: the time-stamp counter, read in about a third of an `Instant::now`
    /// (the same counter the limiters' `SystemClock` reads).
    timer: quanta::Clock,
}

impl GrpcService {
    /// A service answering from `engine`, wrapped for tonic's router.
    pub fn server(engine: Arc<Engine>) -> RateLimitServiceServer<GrpcService> {
        RateLimitServiceServer::new(GrpcService::new(engine))
    }

    /// A service answering from `engine`, unwrapped (to call it in process).
    pub fn new(engine: Arc<Engine>) -> GrpcService {
        let request_seconds = engine
            .metrics()
            .request_seconds
            .get_or_create(&KindLabel { kind: "grpc" })
            .clone();
        GrpcService {
            engine,
            request_seconds,
            timer: quanta::Clock::new(),
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for GrpcService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = self.timer.raw();
        let call = call_from_proto(request.into_inner())
            .and_then(|call| self.engine.check_call_size(&call).map(|()| call))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let verdict = self.engine.should_rate_limit(&call).await;
        let response = verdict_to_proto(verdict);
        let elapsed = self.timer.delta(started, self.timer.raw());
        self.request_seconds.observe(elapsed.as_secs_f64());
        self.engine.record_latency(elapsed);
        Ok(Response::new(response))
    }
}

/// Reads a protobuf request into a call (validated).
pub fn call_from_proto(request: RateLimitRequest) -> Result<RateLimitCall, CallError> {
    let request_hits = Some(u64::from(request.hits_addend));
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (index, descriptor) in request.descriptors.into_iter().enumerate() {
        let limit_override = match descriptor.limit {
            None => None,
            Some(o) => Some(LimitOverride {
                requests_per_unit: o.requests_per_unit,
                unit: EnvoyUnit::from_proto_number(o.unit).ok_or_else(|| {
                    CallError::Malformed(format!(
                        "descriptor {index}: unknown limit unit {}",
                        o.unit
                    ))
                })?,
            }),
        };
        let entries = descriptor
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        let own_hits = descriptor.hits_addend.map(|h| h.value);
        descriptors.push(DescriptorCall::new(
            entries,
            own_hits,
            request_hits,
            limit_override,
        ));
    }
    RateLimitCall::new(request.domain, descriptors)
}

/// Writes a verdict as a protobuf response (moving its strings, not copying them).
pub fn verdict_to_proto(verdict: Verdict) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: verdict.overall.proto_number(),
        statuses: verdict
            .statuses
            .into_iter()
            .map(|s| DescriptorStatus {
                code: s.code.proto_number(),
                current_limit: s.current_limit.map(|l| RateLimit {
                    name: l.name,
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit.proto_number(),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.map(|d| ProtoDuration {
                    seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
                }),
                quota: None,
            })
            .collect(),
        response_headers_to_add: verdict
            .headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}
