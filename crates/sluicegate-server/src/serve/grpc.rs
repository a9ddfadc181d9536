//! Envoy's `envoy.service.ratelimit.v3.RateLimitService` over gRPC.

use std::sync::Arc;

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
use crate::serve::protocol::{
    CallError, CallVerdict, DescriptorCall, EnvoyUnit, LimitOverride, RateLimitCall,
};
use crate::serve::request_timer::Transport;

/// The gRPC service, answering from an [`Engine`].
#[derive(Debug, Clone)]
pub struct GrpcService {
    engine: Arc<Engine>,
}

impl GrpcService {
    /// A service answering from `engine`, wrapped for tonic's router.
    pub fn server(engine: Arc<Engine>) -> RateLimitServiceServer<GrpcService> {
        RateLimitServiceServer::new(GrpcService::new(engine))
    }

    /// A service answering from `engine`, unwrapped (to call it in process).
    pub fn new(engine: Arc<Engine>) -> GrpcService {
        GrpcService { engine }
    }
}

#[tonic::async_trait]
impl RateLimitService for GrpcService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let recorder = self.engine.recorder();
        let started = recorder.start_request();
        let call = call_from_proto(request.into_inner())
            .and_then(|call| self.engine.check_call_size(&call).map(|()| call))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let verdict = self.engine.should_rate_limit(&call).await;
        let response = verdict_to_proto(verdict);
        recorder.finish_request(Transport::Grpc, started);
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
pub fn verdict_to_proto(verdict: CallVerdict) -> RateLimitResponse {
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
