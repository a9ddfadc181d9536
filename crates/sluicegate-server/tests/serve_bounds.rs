//! Hostile input stays bounded (DESIGN section 6): the key cap and its answer, the size caps
//! of a call, metric labels that come only from the rules, and bounded overrides. Over real
//! loopback gRPC and HTTP, on a manual clock.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_redis::FailurePolicy;
use sluicegate_server::serve::{CallLimits, EngineOptions};

mod loopback;

use loopback::{BoxError, OK, OVER_LIMIT, Service, TestResult, descriptor};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
"#;

async fn start(max_keys: usize, at_key_cap: FailurePolicy) -> Result<Service, BoxError> {
    let engine = EngineOptions {
        max_keys,
        at_key_cap,
        call_limits: CallLimits {
            max_descriptors: 4,
            max_entries: 3,
            max_descriptor_bytes: 64,
        },
        ..EngineOptions::default()
    };
    Service::start(RULES, engine).await
}

async fn user(service: &mut Service, name: &str) -> Result<i32, BoxError> {
    Ok(service.code(&[&[("user", name)]]).await?)
}

#[tokio::test]
async fn a_call_refused_new_keys_by_several_limits_is_one_refusal() -> TestResult {
    let rules = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: ip
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;
    let engine = EngineOptions {
        max_keys: 64,
        at_key_cap: FailurePolicy::Local,
        ..EngineOptions::default()
    };
    let mut service = Service::start(rules, engine).await?;
    for n in 0..64 {
        assert_eq!(user(&mut service, &format!("u{n}")).await?, OK);
    }
    // An enforcing limit and a shadow-mode one each need a new key (the shadow one is
    // charged, as the enforcing one let the call through uncharged): one request refused.
    let code = service
        .code(&[&[("user", "newcomer")], &[("ip", "10.0.0.1")]])
        .await?;
    assert_eq!(code, OK);
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("sluicegate_key_cap_refusals_total 1\n"),
        "{metrics}"
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn at_the_key_cap_new_keys_are_answered_by_the_policy_and_no_budget_resets() -> TestResult {
    for (policy, new_key_code) in [
        (FailurePolicy::Local, OK),
        (FailurePolicy::Open, OK),
        (FailurePolicy::Closed, OVER_LIMIT),
    ] {
        // 64 keys: one per shard would be needed to spread them all; plenty for the test.
        let mut service = start(64, policy).await?;
        assert_eq!(user(&mut service, "limited").await?, OK);
        assert_eq!(user(&mut service, "limited").await?, OVER_LIMIT);
        for n in 0..63 {
            assert_eq!(
                user(&mut service, &format!("u{n}")).await?,
                OK,
                "{policy:?}"
            );
        }
        // The cap: a new key is answered by the policy, and charged nothing.
        for _ in 0..3 {
            assert_eq!(
                user(&mut service, "newcomer").await?,
                new_key_code,
                "{policy:?}"
            );
        }
        // A key that was limited before the flood is still limited.
        assert_eq!(
            user(&mut service, "limited").await?,
            OVER_LIMIT,
            "{policy:?}"
        );
        let metrics = service.get("/metrics").await?;
        assert!(metrics.contains("sluicegate_keys 64"), "{metrics}");
        assert!(
            metrics.contains("sluicegate_key_cap_refusals_total 3"),
            "{metrics}"
        );
        // An hour on, every key is fresh again. Room is made either at once (the newcomer's
        // shard sweeps itself if its table must grow, which depends on the hashes) or by the
        // engine's sweep after one more answer by the policy; either way the newcomer is
        // charged within two calls, once, and then limited.
        service.clock.advance(Duration::from_secs(3600));
        let mut codes = Vec::new();
        for _ in 0..3 {
            codes.push(user(&mut service, "newcomer").await?);
        }
        let first_charged = if codes[0] == OK && codes[1] == OVER_LIMIT {
            0
        } else {
            assert_eq!(codes[0], new_key_code, "{policy:?}: {codes:?}");
            1
        };
        assert_eq!(codes[first_charged], OK, "{policy:?}: {codes:?}");
        assert_eq!(codes[2], OVER_LIMIT, "{policy:?}: {codes:?}");
        service.server.shutdown().await?;
    }
    Ok(())
}

fn many(descriptors: usize, entries: usize, value: &str) -> RateLimitRequest {
    let entry = [("user", value)];
    let entries: Vec<(&str, &str)> = entry.iter().copied().cycle().take(entries).collect();
    RateLimitRequest {
        domain: "shop".into(),
        descriptors: (0..descriptors).map(|_| descriptor(&entries)).collect(),
        hits_addend: 0,
    }
}

#[tokio::test]
async fn calls_beyond_the_size_caps_are_refused_with_what_is_wrong() -> TestResult {
    let mut service = start(1000, FailurePolicy::Local).await?;
    let long = "x".repeat(80);
    for (request, needle) in [
        (many(5, 1, "a"), "5 descriptors in one request; at most 4"),
        (many(1, 4, "a"), "descriptor 0: 4 entries; at most 3"),
        (
            many(1, 1, &long),
            "descriptor 0: its keys and values take 84 bytes; at most 64",
        ),
    ] {
        let status = service.send(request.clone()).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(needle), "{}", status.message());
        let descriptors: Vec<serde_json::Value> = request
            .descriptors
            .iter()
            .map(|d| {
                let entries: Vec<serde_json::Value> = d
                    .entries
                    .iter()
                    .map(|e| serde_json::json!({"key": e.key, "value": e.value}))
                    .collect();
                serde_json::json!({ "entries": entries })
            })
            .collect();
        let body = serde_json::json!({"domain": "shop", "descriptors": descriptors});
        let (status, _, text) = service.post_json(&body.to_string()).await?;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(needle), "{text}");
    }
    // At the caps: answered.
    assert_eq!(service.send(many(4, 3, "a")).await?.overall_code, OK);
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("sluicegate_oversized_calls_total 6"),
        "{metrics}"
    );
    service.server.shutdown().await?;
    Ok(())
}

/// The number of metric series (sample lines) on `/metrics`.
async fn series(service: &Service) -> Result<usize, BoxError> {
    let text = service.get("/metrics").await?;
    Ok(text.lines().filter(|l| !l.starts_with('#')).count())
}

#[tokio::test]
async fn unknown_domains_and_rules_add_no_metric_series() -> TestResult {
    let mut service = start(100_000, FailurePolicy::Local).await?;
    let ask = |domain: String, key: &str| RateLimitRequest {
        domain,
        descriptors: vec![descriptor(&[(key, "v")])],
        hits_addend: 0,
    };
    service.send(ask("nowhere-0".into(), "user")).await?;
    service.send(ask("shop".into(), "nokey-0")).await?;
    let before = series(&service).await?;
    for n in 1..200 {
        service.send(ask(format!("nowhere-{n}"), "user")).await?;
        service
            .send(ask("shop".into(), &format!("nokey-{n}")))
            .await?;
    }
    assert_eq!(series(&service).await?, before);
    let text = service.get("/metrics").await?;
    assert!(
        text.contains(
            r#"sluicegate_decisions_total{domain="unknown",rule="",outcome="no_rule"} 200"#
        ),
        "{text}"
    );
    assert!(!text.contains("nowhere"), "{text}");
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn thousands_of_distinct_overrides_stay_bounded_and_keep_their_budgets() -> TestResult {
    let mut service = start(100_000, FailurePolicy::Local).await?;
    let with_override = |user: &str, requests_per_unit: u32| {
        let mut one = descriptor(&[("user", user)]);
        one.limit = Some(RateLimitOverride {
            requests_per_unit,
            unit: 4, /* DAY */
        });
        RateLimitRequest {
            domain: "shop".into(),
            descriptors: vec![one],
            hits_addend: 0,
        }
    };
    // One override spent before the spray.
    assert_eq!(
        service.send(with_override("held", 1)).await?.overall_code,
        OK
    );
    assert_eq!(
        service.send(with_override("held", 1)).await?.overall_code,
        OVER_LIMIT
    );
    for n in 2..3000 {
        service.send(with_override("sprayed", n)).await?;
    }
    // Past the override cap, new overrides are not applied (answered OK by `local`), but the
    // one in use keeps its budget.
    assert_eq!(
        service.send(with_override("held", 1)).await?.overall_code,
        OVER_LIMIT
    );
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("sluicegate_key_cap_refusals_total"),
        "{metrics}"
    );
    service.server.shutdown().await?;
    Ok(())
}
