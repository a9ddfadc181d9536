//! The service as a tonic client sees it: each check takes the gRPC address of a running
//! service, so any serving path can be held to the same answers.

#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::{BoxError, TestResult};

/// Envoy's overall and per-descriptor codes.
pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;

/// A bound on one call against a hang, generous so a loaded machine never trips it.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// A request in `domain` of one-entry descriptors.
pub fn request(domain: &str, descriptors: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*key).into(),
                    value: (*value).into(),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// A tonic client on one HTTP/2 connection to `grpc`.
pub async fn client(grpc: SocketAddr) -> Result<RateLimitServiceClient<Channel>, BoxError> {
    Ok(RateLimitServiceClient::connect(format!("http://{grpc}")).await?)
}

/// One call, bounded against a hang.
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: impl tonic::IntoRequest<RateLimitRequest>,
) -> Result<Result<RateLimitResponse, Status>, BoxError> {
    let call = client.should_rate_limit(request);
    let answer = tokio::time::timeout(CALL_BOUND, call)
        .await
        .map_err(|_| "the call hung")?;
    Ok(answer.map(tonic::Response::into_inner))
}

/// The gRPC status of a call that must fail.
async fn refused(
    client: &mut RateLimitServiceClient<Channel>,
    request: impl tonic::IntoRequest<RateLimitRequest>,
) -> Result<Status, BoxError> {
    match ask(client, request).await? {
        Ok(answer) => Err(format!("answered {answer:?}, an error expected").into()),
        Err(status) => Ok(status),
    }
}

/// OK and OVER_LIMIT answers are both gRPC OK, with one status per descriptor.
pub async fn answers_ok_and_over_limit(grpc: SocketAddr) -> TestResult {
    let mut client = client(grpc).await?;
    let answer = ask(&mut client, request("conformance", &[("user", "ann")])).await??;
    assert_eq!(answer.overall_code, OK);
    let answer = ask(
        &mut client,
        request("conformance", &[("user", "ann"), ("blocked", "x")]),
    )
    .await??;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    let codes: Vec<i32> = answer.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [OK, OVER_LIMIT]);
    Ok(())
}

/// What the service cannot answer is INVALID_ARGUMENT with a message saying why; an entry
/// with an empty key is not refused (no rule matches it, so it is answered OK, as
/// envoyproxy/ratelimit does).
pub async fn bad_requests_are_invalid_argument(grpc: SocketAddr) -> TestResult {
    let mut client = client(grpc).await?;
    let empty_domain = request("", &[("user", "ann")]);
    let no_descriptors = request("conformance", &[]);
    let mut no_entries = request("conformance", &[("user", "ann")]);
    no_entries.descriptors[0].entries.clear();
    for (bad, says) in [
        (empty_domain, "domain"),
        (no_descriptors, "descriptor"),
        (no_entries, "entry"),
    ] {
        let status = refused(&mut client, bad).await?;
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(says), "{status:?}");
    }
    let answer = ask(&mut client, request("conformance", &[("", "x")])).await??;
    assert_eq!(answer.overall_code, OK);
    Ok(())
}

/// A request over the 4 MiB message limit is RESOURCE_EXHAUSTED, and the connection serves
/// on.
pub async fn an_oversized_request_is_resource_exhausted(grpc: SocketAddr) -> TestResult {
    let mut client = client(grpc).await?;
    let huge = "x".repeat(5 << 20);
    let status = refused(&mut client, request(&huge, &[("user", "ann")])).await?;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let answer = ask(&mut client, request("conformance", &[("user", "ann")])).await??;
    assert_eq!(answer.overall_code, OK);
    Ok(())
}

/// Many calls at once on one connection: every one answered, each with its own answer (the
/// number of statuses and the overall code tell which request an answer is for).
pub async fn concurrent_calls_on_one_connection_get_their_own_answers(
    grpc: SocketAddr,
) -> TestResult {
    let client = client(grpc).await?;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..400usize {
        let mut client = client.clone();
        let key = if i % 2 == 0 { "user" } else { "blocked" };
        let descriptors = vec![(key, "many"); i % 5 + 1];
        calls.spawn(async move {
            let answer = ask(&mut client, request("conformance", &descriptors)).await;
            (i, answer)
        });
    }
    let mut answered = 0;
    while let Some(done) = calls.join_next().await {
        let (i, answer) = done?;
        let answer = answer??;
        let expected = if i % 2 == 0 { OK } else { OVER_LIMIT };
        assert_eq!(answer.overall_code, expected, "call {i}");
        assert_eq!(answer.statuses.len(), i % 5 + 1, "call {i}");
        answered += 1;
    }
    assert_eq!(answered, 400);
    Ok(())
}

/// A method the service does not have, and a service it does not serve: UNIMPLEMENTED.
pub async fn unknown_methods_and_services_are_unimplemented(grpc: SocketAddr) -> TestResult {
    let channel = Channel::from_shared(format!("http://{grpc}"))?
        .connect()
        .await?;
    let mut grpc_client = tonic::client::Grpc::new(channel);
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod",
        "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
        "/no.such.Service/Call",
    ] {
        grpc_client.ready().await?;
        let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
        let call = grpc_client.unary(
            tonic::Request::new(request("conformance", &[("user", "ann")])),
            path.parse()?,
            codec,
        );
        let answer = tokio::time::timeout(CALL_BOUND, call)
            .await
            .map_err(|_| "the call hung")?;
        let status = answer.err().ok_or("an unknown method answered")?;
        assert_eq!(status.code(), Code::Unimplemented, "{path}: {status:?}");
    }
    Ok(())
}

/// With decisions held up (a frozen Redis behind a service), a call whose deadline passes
/// ends, and the service still answers what it can. tonic's client ends it by its own timer,
/// as CANCELLED ("Timeout expired"), where other clients say DEADLINE_EXCEEDED.
pub async fn a_call_past_its_deadline_ends_and_the_service_answers_on(
    grpc: SocketAddr,
) -> TestResult {
    let mut client = client(grpc).await?;
    let mut late = tonic::Request::new(request("conformance", &[("counted", "late")]));
    late.set_timeout(Duration::from_millis(200));
    let status = refused(&mut client, late).await?;
    assert!(
        [Code::DeadlineExceeded, Code::Cancelled].contains(&status.code()),
        "{status:?}"
    );
    // A domain without rules needs no counter: answered at once on the same connection.
    let answer = ask(&mut client, request("elsewhere", &[("user", "ann")])).await??;
    assert_eq!(answer.overall_code, OK);
    Ok(())
}
