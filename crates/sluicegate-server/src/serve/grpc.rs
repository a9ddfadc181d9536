//! Envoy's `envoy.service.ratelimit.v3.RateLimitService` over gRPC: the protobuf conversions
//! and the one answer both gRPC servers give ([`answer_request`]), and tonic's service (the
//! `--grpc-server tonic` path; the lean server is `grpc_lean.rs`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use futures_util::future::{Either, FutureExt as _, Map, Ready, ready};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::serve::engine::Engine;
use crate::serve::grpc_codec::{Refusal, is_grpc_content_type};
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
    pub fn server(engine: Arc<Engine>) -> SpecAnswers<RateLimitServiceServer<GrpcService>> {
        SpecAnswers {
            inner: RateLimitServiceServer::new(GrpcService::new(engine)),
        }
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
        answer_request(&self.engine, request.into_inner())
            .await
            .map(Response::new)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

/// Answers one decoded `ShouldRateLimit` request from `engine`: the one seam both gRPC servers
/// (tonic's and the lean one) answer through. A request the service cannot decide is the
/// error (INVALID_ARGUMENT on the wire).
pub(crate) async fn answer_request(
    engine: &Engine,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, CallError> {
    let recorder = engine.recorder();
    let started = recorder.start_request();
    let call = call_from_proto(request)?;
    engine.check_call_size(&call)?;
    let verdict = engine.should_rate_limit(&call).await;
    let response = verdict_to_proto(verdict);
    recorder.finish_request(Transport::Grpc, started);
    Ok(response)
}

/// A gRPC service as tonic generates it, with two answers put right that the gRPC spec gives
/// otherwise (tests/grpc_conformance.rs holds the service to both):
/// - a request whose `content-type` is not `application/grpc` is refused with HTTP 415 (tonic
///   would decode it as gRPC and answer 200), so that no plain HTTP client takes a gRPC error
///   for a success;
/// - a request over the message size limit is `RESOURCE_EXHAUSTED`, not tonic's
///   `OUT_OF_RANGE`. The rate limit service itself never answers `OUT_OF_RANGE`, so every such
///   status here is the decoder's size limit.
#[derive(Debug, Clone)]
pub struct SpecAnswers<S> {
    inner: S,
}

/// A response of the wrapped service.
type HttpResponse = http::Response<tonic::body::Body>;

impl<S: NamedService> NamedService for SpecAnswers<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower_service::Service<http::Request<B>> for SpecAnswers<S>
where
    S: tower_service::Service<http::Request<B>, Response = HttpResponse, Error = Infallible>,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Either<
        Ready<Result<HttpResponse, Infallible>>,
        Map<S::Future, fn(Result<HttpResponse, Infallible>) -> Result<HttpResponse, Infallible>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if !is_grpc_content_type(request.headers().get(http::header::CONTENT_TYPE)) {
            return Either::Left(ready(Ok(unsupported_media_type())));
        }
        let size_limit: fn(Result<HttpResponse, Infallible>) -> Result<HttpResponse, Infallible> =
            |answer| answer.map(size_limit_as_resource_exhausted);
        Either::Right(self.inner.call(request).map(size_limit))
    }
}

/// HTTP 415, trailers-only, with the gRPC status a gRPC client would also understand (the
/// lean server's answer, as `grpc_codec` writes it).
fn unsupported_media_type() -> HttpResponse {
    Refusal::not_grpc()
        .response()
        .map(|()| tonic::body::Body::empty())
}

/// Tonic's answer to a message over the size limit, `OUT_OF_RANGE` (trailers-only, in the
/// headers), as the gRPC spec has it: `RESOURCE_EXHAUSTED`.
fn size_limit_as_resource_exhausted(mut response: HttpResponse) -> HttpResponse {
    let out_of_range = http::HeaderValue::from(tonic::Code::OutOfRange as i32);
    let headers = response.headers_mut();
    if headers.get("grpc-status") == Some(&out_of_range) {
        headers.insert(
            "grpc-status",
            http::HeaderValue::from(tonic::Code::ResourceExhausted as i32),
        );
    }
    response
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_size_limit_status_is_rewritten() {
        let answer = |status: tonic::Code| {
            let mut response = http::Response::new(tonic::body::Body::empty());
            response
                .headers_mut()
                .insert("grpc-status", http::HeaderValue::from(status as i32));
            size_limit_as_resource_exhausted(response)
        };
        let status = |response: &HttpResponse| response.headers()["grpc-status"].clone();
        assert_eq!(status(&answer(tonic::Code::OutOfRange)), "8");
        assert_eq!(status(&answer(tonic::Code::InvalidArgument)), "3");
        assert_eq!(status(&answer(tonic::Code::Ok)), "0");
    }
}
