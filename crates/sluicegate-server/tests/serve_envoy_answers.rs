//! The numbers Envoy sees, as envoyproxy/ratelimit gives them (DESIGN section 6): `unlimited`,
//! a descriptor's `hits_addend` of 0, the reset of a fixed window nothing was charged in, an
//! override in an unknown domain, `quota_mode`, and what uncharged limits report. Over real
//! loopback gRPC and HTTP, in memory and on a real redis-server, on a manual clock.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;

mod loopback;

use loopback::{
    BoxError, OK, OVER_LIMIT, TestResult, descriptor, in_memory_and_on_redis, store_name,
};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: pool
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: global
    rate_limit: {unit: hour, requests_per_unit: 100}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlimited_rule_answers_the_largest_remaining() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let answer = service.ask(&[&[("free", "x")]], 0).await?;
        let status = &answer.statuses[0];
        assert_eq!(answer.overall_code, OK, "{}", store_name(&redis));
        assert_eq!(status.limit_remaining, u32::MAX, "{}", store_name(&redis));
        assert!(status.current_limit.is_none());
        // No rule at all: nothing to report.
        let answer = service.ask(&[&[("nothing", "x")]], 0).await?;
        assert_eq!(answer.statuses[0].limit_remaining, 0);
        service.server.shutdown().await?;
    }
    Ok(())
}

/// A `user` descriptor with its own `hits_addend`.
fn user_with_hits(user: &str, hits: Option<u64>) -> RateLimitRequest {
    let mut one = descriptor(&[("user", user)]);
    one.hits_addend = hits.map(|value| UInt64Value { value });
    RateLimitRequest {
        domain: "shop".into(),
        descriptors: vec![one],
        hits_addend: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_hits_addend_of_zero_checks_without_charging() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let name = store_name(&redis);
        // Set to 0: checked, nothing charged, over gRPC and over /json (number or string).
        for _ in 0..3 {
            let answer = service.send(user_with_hits("alice", Some(0))).await?;
            assert_eq!(answer.overall_code, OK, "{name}");
            assert_eq!(answer.statuses[0].limit_remaining, 3, "{name}");
        }
        for hits in ["0", "\"0\""] {
            let body = format!(
                r#"{{"domain":"shop","hitsAddend":2,"descriptors":[{{"entries":[{{"key":"user","value":"alice"}}],"hitsAddend":{hits}}}]}}"#
            );
            let (status, _, text) = service.post_json(&body).await?;
            assert_eq!(status, 200, "{name}: {text}");
            let json: serde_json::Value = serde_json::from_str(&text)?;
            assert_eq!(json["statuses"][0]["limitRemaining"], 3, "{name}: {text}");
        }
        // Unset: the request's 2.
        let answer = service.send(user_with_hits("alice", None)).await?;
        assert_eq!(answer.statuses[0].limit_remaining, 1, "{name}");
        // Set to 0 with one left and then none: never over, never charged.
        let answer = service.send(user_with_hits("alice", Some(1))).await?;
        assert_eq!(answer.statuses[0].limit_remaining, 0, "{name}");
        let answer = service.send(user_with_hits("alice", Some(0))).await?;
        assert_eq!(answer.overall_code, OK, "{name}");
        assert_eq!(answer.statuses[0].code, OK, "{name}");
        let answer = service.send(user_with_hits("alice", Some(1))).await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        service.server.shutdown().await?;
    }
    Ok(())
}

fn reset_secs(answer: &RateLimitResponse) -> Result<f64, BoxError> {
    let reset = answer.statuses[0]
        .duration_until_reset
        .as_ref()
        .ok_or("duration_until_reset")?;
    Ok(reset.seconds as f64 + f64::from(reset.nanos) / 1e9)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_resets_at_its_end_even_when_nothing_was_charged() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let name = store_name(&redis);
        // The clock is a quarter second into a minute; 10 seconds on.
        service.clock.advance(Duration::from_secs(10));
        // Zero requests per unit: can never pass, and resets with its window.
        let answer = service.ask(&[&[("blocked", "x")]], 0).await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        assert_eq!(reset_secs(&answer)?, 49.75, "{name}");
        // More hits than the limit on a fresh counter: the same.
        let answer = service.ask(&[&[("user", "bob")]], 4).await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        assert_eq!(reset_secs(&answer)?, 49.75, "{name}");
        // Checked without charging on a fresh counter: the same.
        let answer = service.send(user_with_hits("carol", Some(0))).await?;
        assert_eq!(reset_secs(&answer)?, 49.75, "{name}");
        // And charged: the same window end.
        let answer = service.ask(&[&[("user", "dave")]], 0).await?;
        assert_eq!(reset_secs(&answer)?, 49.75, "{name}");
        service.server.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_in_an_unknown_domain_is_ignored() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let name = store_name(&redis);
        let mut blocked = descriptor(&[("user", "erin")]);
        blocked.limit = Some(RateLimitOverride {
            requests_per_unit: 0,
            unit: 2,
        });
        let unknown = RateLimitRequest {
            domain: "elsewhere".into(),
            descriptors: vec![blocked.clone()],
            hits_addend: 0,
        };
        let answer = service.send(unknown).await?;
        assert_eq!(answer.overall_code, OK, "{name}");
        assert!(answer.statuses[0].current_limit.is_none(), "{name}");
        // In a known domain it applies.
        let known = RateLimitRequest {
            domain: "shop".into(),
            descriptors: vec![blocked],
            hits_addend: 0,
        };
        assert_eq!(
            service.send(known).await?.overall_code,
            OVER_LIMIT,
            "{name}"
        );
        service.server.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_fails_a_call_only_when_every_quota_is_spent() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let name = store_name(&redis);
        // Spend pool a.
        assert_eq!(service.code(&[&[("pool", "a")]]).await?, OK, "{name}");
        // a is over, b is not: reported over, yet the call passes, and b is charged.
        let answer = service
            .ask(&[&[("pool", "a")], &[("pool", "b")]], 0)
            .await?;
        assert_eq!(answer.overall_code, OK, "{name}");
        assert_eq!(answer.statuses[0].code, OVER_LIMIT, "{name}");
        assert_eq!(answer.statuses[1].code, OK, "{name}");
        assert!(
            !answer
                .response_headers_to_add
                .iter()
                .any(|h| h.key == "Retry-After"),
            "{name}"
        );
        // Now both are spent: over.
        let answer = service
            .ask(&[&[("pool", "a")], &[("pool", "b")]], 0)
            .await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        // A regular descriptor over its limit fails the call whatever the quotas say.
        let answer = service
            .ask(&[&[("blocked", "x")], &[("pool", "c")]], 0)
            .await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        // ... and c, left uncharged, still has its one.
        assert_eq!(service.code(&[&[("pool", "c")]]).await?, OK, "{name}");
        service.server.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_left_uncharged_by_a_denial_report_what_they_still_have() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let name = store_name(&redis);
        // `small` allows 2 an hour, `global` 100: the third call is denied by `small`, and
        // `global`, uncharged, still has 98, as envoyproxy/ratelimit would report it.
        for _ in 0..2 {
            let answer = service
                .ask(&[&[("small", "k")], &[("global", "g")]], 0)
                .await?;
            assert_eq!(answer.overall_code, OK, "{name}");
        }
        let answer = service
            .ask(&[&[("small", "k")], &[("global", "g")]], 0)
            .await?;
        assert_eq!(answer.overall_code, OVER_LIMIT, "{name}");
        assert_eq!(answer.statuses[1].code, OK, "{name}");
        assert_eq!(answer.statuses[1].limit_remaining, 98, "{name}");
        service.server.shutdown().await?;
    }
    Ok(())
}
