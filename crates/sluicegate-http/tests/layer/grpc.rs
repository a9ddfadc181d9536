//! A tonic service behind the layer: a denied call is `RESOURCE_EXHAUSTED` with the fields as
//! metadata.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluicegate::ManualClock;
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::Global;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};

/// Any gRPC service will do: this one answers every call with an empty response.
struct Answering;

#[tonic::async_trait]
impl RateLimitService for Answering {
    async fn should_rate_limit(
        &self,
        _request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse::default()))
    }
}

#[tokio::test]
async fn a_denied_grpc_call_is_resource_exhausted_with_the_fields_as_metadata() {
    let layer = RateLimitLayer::builder(Global)
        .clock(ManualClock::new(0))
        .limit_named("calls", "fixed-window:limit=2,window=1m")
        .legacy_headers(true)
        .build()
        .expect("layer");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer.clone())
            .add_service(RateLimitServiceServer::new(Answering))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = RateLimitServiceClient::connect(format!("http://{address}"))
        .await
        .expect("connect");
    for _ in 0..2 {
        client
            .should_rate_limit(RateLimitRequest::default())
            .await
            .expect("allowed");
    }
    let status = client
        .should_rate_limit(RateLimitRequest::default())
        .await
        .expect_err("denied");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.message(),
        "too many requests: rate limit \"calls\" exceeded, retry in 60 s"
    );
    let metadata = status.metadata();
    let field = |name| metadata.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(field("ratelimit-policy"), Some("\"calls\";q=2;w=60"));
    assert_eq!(field("ratelimit"), Some("\"calls\";r=0;t=60"));
    assert_eq!(field("retry-after"), Some("60"));
    assert_eq!(field("x-ratelimit-remaining"), Some("0"));
    assert_eq!(layer.stats().denied, 1);
}
