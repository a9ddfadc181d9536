//! The service over real loopback sockets, with a real gRPC client and a real HTTP client, on
//! its in-memory store.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluicegate_server::serve::EngineOptions;

mod loopback;

use loopback::{
    OK, OVER_LIMIT, Service, TestResult, descriptor, wait_for_metric, wait_for_rules,
    write_atomically,
};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /checkout
    rate_limit: {unit: second, requests_per_unit: 2, name: checkout}
  - key: path
    value: /blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /free
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 2}
"#;

#[tokio::test]
async fn a_limit_allows_its_requests_then_denies_with_statuses() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    for remaining in [2, 1, 0] {
        let answer = service.ask(&[&[("user", "alice")]], 0).await?;
        assert_eq!(answer.overall_code, OK);
        let status = &answer.statuses[0];
        assert_eq!(status.limit_remaining, remaining);
        let limit = status.current_limit.as_ref().ok_or("current_limit")?;
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 2 /* MINUTE */));
        let reset = status.duration_until_reset.as_ref().ok_or("reset")?;
        assert!(reset.seconds <= 60);
    }
    let answer = service.ask(&[&[("user", "alice")]], 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(answer.statuses[0].code, OVER_LIMIT);
    let headers: Vec<(&str, &str)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert!(
        headers.contains(&("RateLimit-Policy", "\"default\";q=3;w=60")),
        "{headers:?}"
    );
    assert!(
        headers.iter().any(|(k, _)| *k == "Retry-After"),
        "{headers:?}"
    );
    // Each user has a budget of their own.
    assert_eq!(
        service.ask(&[&[("user", "bob")]], 0).await?.overall_code,
        OK
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn json_and_grpc_share_one_budget_and_agree() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    let body =
        r#"{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/checkout"}]}]}"#;
    assert_eq!(
        service.ask(&[&[("path", "/checkout")]], 0).await?.statuses[0].limit_remaining,
        1
    );
    let (status, headers, text) = service.post_json(body).await?;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&text)?;
    assert_eq!(json["overallCode"], "OK");
    assert_eq!(json["statuses"][0]["currentLimit"]["name"], "checkout");
    assert_eq!(json["statuses"][0]["currentLimit"]["unit"], "SECOND");
    assert!(
        json["statuses"][0].get("limitRemaining").is_none(),
        "zero is omitted, as protobuf's JSON does"
    );
    assert_eq!(
        headers.get("ratelimit").map(|v| v.to_str().ok()),
        Some(Some("\"checkout\";r=0;t=1"))
    );
    let (status, headers, text) = service.post_json(body).await?;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after"));
    let json: serde_json::Value = serde_json::from_str(&text)?;
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    assert_eq!(
        service
            .ask(&[&[("path", "/checkout")]], 0)
            .await?
            .overall_code,
        OVER_LIMIT
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn what_no_rule_names_passes_and_blocked_keys_never_do() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    // A descriptor no rule matches, an unlimited one, an unknown domain: all allowed.
    assert_eq!(
        service
            .ask(&[&[("nothing", "here")]], 0)
            .await?
            .overall_code,
        OK
    );
    assert_eq!(
        service
            .ask(&[&[("path", "/free")]], 1000)
            .await?
            .overall_code,
        OK
    );
    let request = RateLimitRequest {
        domain: "elsewhere".into(),
        descriptors: vec![descriptor(&[("user", "x")])],
        hits_addend: 0,
    };
    assert_eq!(
        service
            .grpc
            .should_rate_limit(request)
            .await?
            .into_inner()
            .overall_code,
        OK
    );
    // requests_per_unit 0 blocks; more hits than a limit holds can never pass.
    assert_eq!(
        service
            .ask(&[&[("path", "/blocked")]], 0)
            .await?
            .overall_code,
        OVER_LIMIT
    );
    let answer = service.ask(&[&[("user", "carol")]], 4).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    // ... and charged nothing: carol still has all three.
    assert_eq!(
        service.ask(&[&[("user", "carol")]], 3).await?.overall_code,
        OK
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn descriptors_of_one_request_are_charged_all_or_none() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    assert_eq!(
        service
            .ask(&[&[("path", "/checkout")]], 2)
            .await?
            .overall_code,
        OK
    );
    // The checkout limit is spent, so dave's own limit is not charged either.
    let answer = service
        .ask(&[&[("user", "dave")], &[("path", "/checkout")]], 0)
        .await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[1].code),
        (OK, OVER_LIMIT)
    );
    // Nothing was taken: dave's status reports all three of his requests still there ...
    assert_eq!(answer.statuses[0].limit_remaining, 3);
    // ... and they are.
    assert_eq!(
        service.ask(&[&[("user", "dave")]], 3).await?.overall_code,
        OK
    );
    // Several limits on one descriptor: the hourly one binds.
    assert_eq!(service.ask(&[&[("api", "k")]], 2).await?.overall_code, OK);
    let answer = service.ask(&[&[("api", "k")]], 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    let limit = answer.statuses[0].current_limit.as_ref().ok_or("limit")?;
    assert_eq!((limit.requests_per_unit, limit.unit), (2, 3 /* HOUR */));
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn shadow_mode_rules_report_but_never_deny() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    assert_eq!(
        service
            .ask(&[&[("path", "/shadow")]], 0)
            .await?
            .overall_code,
        OK
    );
    assert_eq!(
        service
            .ask(&[&[("path", "/shadow")]], 0)
            .await?
            .overall_code,
        OK
    );
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("sluicegate_shadow_mode_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("outcome=\"shadow_over_limit\""),
        "{metrics}"
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn hits_addend_and_limit_override_per_descriptor() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    let mut with_override = descriptor(&[("client", "x")]);
    with_override.limit = Some(RateLimitOverride {
        requests_per_unit: 4,
        unit: 1, /* SECOND */
    });
    with_override.hits_addend = Some(UInt64Value { value: 3 });
    let request = RateLimitRequest {
        domain: "shop".into(),
        descriptors: vec![with_override],
        hits_addend: 1,
    };
    let answer = service
        .grpc
        .should_rate_limit(request.clone())
        .await?
        .into_inner();
    assert_eq!(
        (answer.overall_code, answer.statuses[0].limit_remaining),
        (OK, 1)
    );
    let answer = service.grpc.should_rate_limit(request).await?.into_inner();
    assert_eq!(answer.overall_code, OVER_LIMIT);
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn bad_requests_get_clear_errors() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    let status = service
        .grpc
        .should_rate_limit(RateLimitRequest {
            domain: String::new(),
            descriptors: vec![descriptor(&[("a", "b")])],
            hits_addend: 0,
        })
        .await
        .expect_err("empty domain");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("domain"), "{}", status.message());
    for (body, expected) in [
        ("{not json", "malformed"),
        (r#"{"domain":"shop","descriptors":[],"extra":1}"#, "extra"),
        (
            r#"{"domain":"shop","descriptors":[]}"#,
            "descriptor list must not be empty",
        ),
    ] {
        let (status, _, text) = service.post_json(body).await?;
        assert_eq!(status, 400, "{body}");
        assert!(text.contains(expected), "{body}: {text}");
    }
    let huge = format!(r#"{{"domain":"{}","descriptors":[]}}"#, "x".repeat(100_000));
    assert_eq!(service.post_json(&huge).await?.0, 413);
    assert_eq!(service.get("/healthcheck").await?, "OK");
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn hot_reload_applies_good_rules_and_keeps_the_old_on_bad_ones() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, RULES)?;
    let mut service = Service::start_in(dir, EngineOptions::default()).await?;
    assert_eq!(
        service.ask(&[&[("user", "erin")]], 3).await?.overall_code,
        OK
    );

    // A good change: a new rule appears, and unchanged limits keep their counters.
    write_atomically(
        &file,
        &format!("{RULES}  - key: team\n    rate_limit: {{unit: day, requests_per_unit: 9}}\n"),
    )?;
    wait_for_rules(&service, "shop.team").await?;
    assert_eq!(
        service.ask(&[&[("team", "t")]], 0).await?.statuses[0].limit_remaining,
        8
    );
    assert_eq!(
        service.ask(&[&[("user", "erin")]], 0).await?.overall_code,
        OVER_LIMIT
    );

    // A bad change: reported, and the rules in force stay.
    write_atomically(
        &file,
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )?;
    wait_for_metric(
        &service,
        "sluicegate_config_loads_total{kind=\"failure\"} 1",
    )
    .await?;
    let config = service.get("/rlconfig").await?;
    assert!(config.contains("shop.team"), "{config}");
    assert_eq!(
        service.ask(&[&[("team", "t")]], 0).await?.statuses[0].limit_remaining,
        7
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_but_counts() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("rules.yaml"), RULES)?;
    let options = EngineOptions {
        shadow_mode: true,
        ..EngineOptions::default()
    };
    let mut service = Service::start_in(dir, options).await?;
    let answer = service.ask(&[&[("path", "/blocked")]], 0).await?;
    assert_eq!(answer.overall_code, OK);
    assert_eq!(answer.statuses[0].code, OVER_LIMIT);
    service.server.shutdown().await?;
    Ok(())
}
