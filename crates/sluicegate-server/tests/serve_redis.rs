//! The service on Redis (`--redis`, `--redis-cluster`), over real sockets, against real
//! `redis-server`s started by `sluicegate_redis::testing`: the rules as in memory, replicas
//! sharing one budget, all or nothing, and Redis stopped, restarted, or down at start under
//! each failure policy.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use sluicegate_redis::testing::{RedisCluster, RedisServer};
use sluicegate_redis::{FailurePolicy, StoreConfig};
use sluicegate_server::serve::{BackendOptions, EngineOptions, RedisSettings, RedisTarget};

mod loopback;

use loopback::{BoxError, OK, OVER_LIMIT, Service, TestResult, adds_header, descriptor};

/// Per-call bound on Redis: generous, so a loaded test machine does not trip it while Redis
/// is up; answers are asserted, never elapsed times.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Sliding logs and hour-long windows: no window boundary can reset a budget mid-test.
const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding-log}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding-log}
  - key: path
    value: /checkout
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra, name: checkout}
  - key: path
    value: /blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /free
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token-bucket}
"#;

fn on_redis(url: &str, policy: FailurePolicy) -> RedisSettings {
    RedisSettings::new(RedisTarget::Single(url.to_owned()))
        .prefix("sluicegate:")
        .timeout(TIMEOUT)
        .failure_policy(policy)
}

/// Serves the rules on Redis with `redis`'s settings.
async fn start_on(redis: RedisSettings) -> Result<Service, BoxError> {
    let engine = EngineOptions {
        backend: BackendOptions::Redis(redis),
        ..EngineOptions::default()
    };
    Service::start(RULES, engine).await
}

/// `POST /json` with `body`: the status and the answer.
async fn post_json(service: &Service, body: &str) -> Result<(u16, serde_json::Value), BoxError> {
    let (status, _, text) = service.post_json(body).await?;
    Ok((status, serde_json::from_str(&text)?))
}

/// The keys in Redis, sorted.
async fn keys(redis: &RedisServer) -> Result<Vec<String>, BoxError> {
    let store = redis.store(StoreConfig::default()).await?;
    let mut keys: Vec<String> = store.command(redis::cmd("KEYS").arg("*")).await?;
    keys.sort();
    Ok(keys)
}

/// Asks until `user` gets `want` (Redis coming back, the service reconnecting), at most 200
/// times; returns the last answer.
async fn until_code(
    service: &mut Service,
    user: &str,
    want: i32,
) -> Result<RateLimitResponse, BoxError> {
    let mut answer = service.ask(&[&[("user", user)]], 0).await?;
    for _ in 0..200 {
        if answer.overall_code == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer = service.ask(&[&[("user", user)]], 0).await?;
    }
    Ok(answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_apply_on_redis_over_grpc_and_json() -> TestResult {
    let redis = RedisServer::start()?;
    let mut service = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    for remaining in [2, 1, 0] {
        let answer = service.ask(&[&[("user", "alice")]], 0).await?;
        assert_eq!(answer.overall_code, OK);
        assert_eq!(answer.statuses[0].limit_remaining, remaining);
        let limit = answer.statuses[0].current_limit.as_ref().ok_or("limit")?;
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 3 /* HOUR */));
    }
    let answer = service.ask(&[&[("user", "alice")]], 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert!(
        adds_header(&answer, "Retry-After"),
        "{:?}",
        answer.response_headers_to_add
    );
    assert_eq!(service.code(&[&[("user", "bob")]]).await?, OK);

    // JSON and gRPC share the budget in Redis.
    assert_eq!(service.code(&[&[("path", "/checkout")]]).await?, OK);
    let body =
        r#"{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/checkout"}]}]}"#;
    let (status, json) = post_json(&service, body).await?;
    assert_eq!((status, &json["overallCode"]), (200, &"OK".into()));
    assert_eq!(json["statuses"][0]["currentLimit"]["name"], "checkout");
    let (status, json) = post_json(&service, body).await?;
    assert_eq!((status, &json["overallCode"]), (429, &"OVER_LIMIT".into()));

    // Zero requests never pass; a rule without a limit always does; shadow mode answers OK.
    assert_eq!(service.code(&[&[("path", "/blocked")]]).await?, OVER_LIMIT);
    assert_eq!(service.code(&[&[("path", "/free")]]).await?, OK);
    assert_eq!(service.code(&[&[("path", "/shadow")]]).await?, OK);
    assert_eq!(service.code(&[&[("path", "/shadow")]]).await?, OK);
    assert!(
        service
            .get("/metrics")
            .await?
            .contains("outcome=\"shadow_over_limit\"")
    );

    // The counters are in Redis, under the prefix and tagged by the rule's counter key.
    let keys = keys(&redis).await?;
    assert!(
        keys.iter()
            .any(|k| k.starts_with("sluicegate:{shop_user_alice_}")),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("sluicegate:{shop_path_/checkout_}")),
        "{keys:?}"
    );
    assert!(
        !service
            .get("/metrics")
            .await?
            .contains("backend_errors_total{")
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_budget() -> TestResult {
    let redis = RedisServer::start()?;
    let mut one = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let mut two = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let mut allowed = 0;
    for round in 0..5 {
        for service in [&mut one, &mut two] {
            if service.code(&[&[("user", "carol")]]).await? == OK {
                allowed += 1;
            }
        }
        // After the budget is spent, both replicas deny.
        if round >= 2 {
            assert_eq!(one.code(&[&[("user", "carol")]]).await?, OVER_LIMIT);
        }
    }
    assert_eq!(allowed, 3, "3 in total across both replicas, not 3 each");
    assert_eq!(two.code(&[&[("user", "dave")]]).await?, OK);

    // Racing: 24 concurrent calls through both replicas, still exactly 3 allowed.
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..24 {
        let mut client = if index % 2 == 0 {
            one.grpc.clone()
        } else {
            two.grpc.clone()
        };
        calls.spawn(async move {
            let request = RateLimitRequest {
                domain: "shop".into(),
                descriptors: vec![descriptor(&[("user", "olga")])],
                hits_addend: 0,
            };
            client
                .should_rate_limit(request)
                .await
                .map(|answer| answer.into_inner().overall_code)
        });
    }
    let mut allowed = 0;
    while let Some(code) = calls.join_next().await {
        if code?? == OK {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3);
    one.server.shutdown().await?;
    two.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_overrides_and_hits_are_shared_through_redis() -> TestResult {
    let redis = RedisServer::start()?;
    let mut one = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let mut two = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let request = |hits: u64| {
        let mut with_override = descriptor(&[("client", "x")]);
        with_override.limit = Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: 4, /* DAY */
        });
        with_override.hits_addend = Some(UInt64Value { value: hits });
        RateLimitRequest {
            domain: "shop".into(),
            descriptors: vec![with_override],
            hits_addend: 1,
        }
    };
    let answer = one.grpc.should_rate_limit(request(3)).await?.into_inner();
    assert_eq!(
        (answer.overall_code, answer.statuses[0].limit_remaining),
        (OK, 2)
    );
    // More hits than the override can ever grant: over the limit, nothing charged.
    let answer = two.grpc.should_rate_limit(request(6)).await?.into_inner();
    assert_eq!(answer.overall_code, OVER_LIMIT);
    let answer = two.grpc.should_rate_limit(request(2)).await?.into_inner();
    assert_eq!(
        (answer.overall_code, answer.statuses[0].limit_remaining),
        (OK, 0)
    );
    let answer = one.grpc.should_rate_limit(request(1)).await?.into_inner();
    assert_eq!(answer.overall_code, OVER_LIMIT);
    one.server.shutdown().await?;
    two.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptors_of_a_call_are_charged_all_or_none_on_redis() -> TestResult {
    let redis = RedisServer::start()?;
    let mut service = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let both: &[&[(&str, &str)]] = &[&[("user", "erin")], &[("tenant", "t1")]];
    let answer = service.ask(both, 0).await?;
    assert_eq!(answer.overall_code, OK);
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    // The tenant is spent: the call is denied and erin's budget is not charged.
    let answer = service.ask(both, 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[1].code),
        (OK, OVER_LIMIT)
    );
    // Uncharged: what erin has now (2 left, 1 asked).
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    // A limit that can never pass charges nothing either.
    let blocked: &[&[(&str, &str)]] = &[&[("user", "erin")], &[("path", "/blocked")]];
    assert_eq!(service.code(blocked).await?, OVER_LIMIT);
    for remaining in [1, 0] {
        let answer = service.ask(&[&[("user", "erin")]], 0).await?;
        assert_eq!(
            (answer.overall_code, answer.statuses[0].limit_remaining),
            (OK, remaining)
        );
    }
    assert_eq!(service.code(&[&[("user", "erin")]]).await?, OVER_LIMIT);
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_then_restarted_under_each_policy() -> TestResult {
    let mut redis = RedisServer::start()?;
    let mut open = start_on(on_redis(&redis.url(), FailurePolicy::Open)).await?;
    let mut closed = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let mut local = start_on(on_redis(&redis.url(), FailurePolicy::Local)).await?;
    // Frank's budget is spent in Redis.
    for _ in 0..3 {
        assert_eq!(open.code(&[&[("user", "frank")]]).await?, OK);
    }
    assert_eq!(closed.code(&[&[("user", "frank")]]).await?, OVER_LIMIT);
    assert_eq!(closed.code(&[&[("user", "gina")]]).await?, OK);

    redis.stop();
    // open allows even a spent budget; closed denies even a fresh one; local decides in
    // memory, from a fresh budget of its own.
    assert_eq!(open.code(&[&[("user", "frank")]]).await?, OK);
    assert_eq!(closed.code(&[&[("user", "hank")]]).await?, OVER_LIMIT);
    for remaining in [2, 1, 0] {
        let answer = local.ask(&[&[("user", "frank")]], 0).await?;
        assert_eq!(
            (answer.overall_code, answer.statuses[0].limit_remaining),
            (OK, remaining)
        );
    }
    assert_eq!(local.code(&[&[("user", "frank")]]).await?, OVER_LIMIT);
    // A limit that never passes still denies under open.
    assert_eq!(open.code(&[&[("path", "/blocked")]]).await?, OVER_LIMIT);
    // Three failures in a row mark Redis down: the next calls are answered by the policy
    // without asking it (and without waiting out the timeout), while it is probed.
    for _ in 0..4 {
        assert_eq!(open.code(&[&[("user", "frank")]]).await?, OK);
        assert_eq!(closed.code(&[&[("user", "hank")]]).await?, OVER_LIMIT);
    }
    assert_eq!(local.code(&[&[("user", "frank")]]).await?, OVER_LIMIT);
    for service in [&open, &closed, &local] {
        let metrics = service.get("/metrics").await?;
        assert!(
            metrics.contains(r#"sluicegate_backend_errors_total{kind="down"}"#),
            "{metrics}"
        );
    }

    // Redis is back (empty): the same services answer from it again, without a restart.
    redis.restart()?;
    let answer = until_code(&mut local, "frank", OK).await?;
    assert_eq!(
        answer.overall_code, OK,
        "local memory had frank spent: Redis answered"
    );
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    let answer = until_code(&mut closed, "hank", OK).await?;
    assert_eq!(answer.overall_code, OK);
    // Both count in Redis again: frank has one left, then none, whoever asks.
    assert_eq!(
        closed.ask(&[&[("user", "frank")]], 0).await?.statuses[0].limit_remaining,
        1
    );
    assert_eq!(local.code(&[&[("user", "frank")]]).await?, OK);
    assert_eq!(closed.code(&[&[("user", "frank")]]).await?, OVER_LIMIT);
    assert!(
        keys(&redis)
            .await?
            .iter()
            .any(|k| k.starts_with("sluicegate:{shop_user_frank_}"))
    );
    for service in [open, closed, local] {
        service.server.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_into_the_policy() -> TestResult {
    let redis = RedisServer::start()?;
    let mut closed = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    let mut open = start_on(on_redis(&redis.url(), FailurePolicy::Open)).await?;
    for _ in 0..3 {
        assert_eq!(closed.code(&[&[("user", "kim")]]).await?, OK);
    }
    assert_eq!(open.code(&[&[("user", "kim")]]).await?, OVER_LIMIT);

    // Connections stay open, nothing answers: each call ends at the timeout, by the policy.
    redis.pause()?;
    assert_eq!(closed.code(&[&[("user", "lee")]]).await?, OVER_LIMIT);
    assert_eq!(open.code(&[&[("user", "kim")]]).await?, OK);
    for service in [&closed, &open] {
        let metrics = service.get("/metrics").await?;
        assert!(
            metrics.contains("sluicegate_backend_errors_total{kind=\"timeout\"}"),
            "{metrics}"
        );
    }

    redis.resume()?;
    // Redis had received the timed-out call and may run it when it resumes: a timeout says
    // nothing about whether the permits were taken, so only the answer is asserted here.
    let answer = until_code(&mut closed, "lee", OK).await?;
    assert_eq!(answer.overall_code, OK);
    let answer = until_code(&mut open, "kim", OVER_LIMIT).await?;
    assert_eq!(
        answer.overall_code, OVER_LIMIT,
        "kim is still spent in Redis"
    );
    closed.server.shutdown().await?;
    open.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_started_while_redis_is_down_serves_and_connects_later() -> TestResult {
    let mut redis = RedisServer::start()?;
    redis.stop();
    let mut service = start_on(on_redis(&redis.url(), FailurePolicy::Closed)).await?;
    assert_eq!(service.code(&[&[("user", "ivan")]]).await?, OVER_LIMIT);
    assert!(
        service
            .get("/metrics")
            .await?
            .contains("sluicegate_backend_errors_total{kind=\"connection\"}")
    );
    redis.restart()?;
    let answer = until_code(&mut service, "ivan", OK).await?;
    assert_eq!(
        (answer.overall_code, answer.statuses[0].limit_remaining),
        (OK, 2)
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_redis_settings_stop_the_start() -> TestResult {
    let mut options = on_redis("not a url", FailurePolicy::Open);
    assert!(start_on(options.clone()).await.is_err());
    options.target = RedisTarget::Single("redis://127.0.0.1:1".into());
    options.prefix = "bad{".into();
    assert!(start_on(options).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shares_budgets_and_keeps_calls_all_or_none() -> TestResult {
    let cluster = RedisCluster::start()?;
    let options = RedisSettings::new(RedisTarget::Cluster(cluster.urls()))
        .prefix("sluicegate:")
        .timeout(TIMEOUT)
        .failure_policy(FailurePolicy::Closed);
    let mut one = start_on(options.clone()).await?;
    let mut two = start_on(options).await?;
    // Counter keys on different slots in one call: denied as a whole when one is spent.
    let both: &[&[(&str, &str)]] = &[&[("user", "judy")], &[("tenant", "t9")]];
    assert_eq!(one.code(both).await?, OK);
    let answer = two.ask(both, 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(
        answer.statuses[0].limit_remaining, 2,
        "a peek of judy's 2 left reports them"
    );
    let mut allowed = 0;
    for _ in 0..3 {
        for service in [&mut one, &mut two] {
            if service.code(&[&[("user", "judy")]]).await? == OK {
                allowed += 1;
            }
        }
    }
    assert_eq!(allowed, 2, "judy had 2 left across both replicas");
    assert!(!one.get("/metrics").await?.contains("backend_errors_total{"));
    one.server.shutdown().await?;
    two.server.shutdown().await?;
    Ok(())
}
