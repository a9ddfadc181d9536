//! `serve --redis --redis-over-limit-cache N` on a real redis-server: a key over its limit is
//! answered in the service until its retry time, exactly as Redis answered it, and counted in
//! `/metrics` and `/admin/stats`; a reload that changes the limit, and the manual switch,
//! send the key back to Redis.

use std::time::Duration;

use sluicegate_redis::FailurePolicy;
use sluicegate_redis::testing::RedisServer;
use sluicegate_server::serve::{BackendOptions, EngineOptions, RedisSettings, RedisTarget};

mod loopback;

use loopback::{
    BoxError, OK, OVER_LIMIT, Service, TestResult, metric_value, wait_for_rules, write_atomically,
};

fn rules(per_hour: u32) -> String {
    format!(
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {per_hour}, algorithm: fixed-window}}\n"
    )
}

/// A sample of `/metrics`, if present.
async fn metric(service: &Service, series: &str) -> Result<Option<u64>, BoxError> {
    Ok(metric_value(&service.get("/metrics").await?, series))
}

async fn hits(service: &Service) -> Result<Option<u64>, BoxError> {
    metric(service, "sluicegate_redis_over_limit_cache_hits_total").await
}

async fn entries(service: &Service) -> Result<Option<u64>, BoxError> {
    metric(service, "sluicegate_redis_over_limit_cache_entries").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_keys_are_answered_in_the_service_until_the_limit_changes() -> TestResult {
    let redis = RedisServer::start()?;
    let engine = EngineOptions {
        backend: BackendOptions::Redis(
            RedisSettings::new(RedisTarget::Single(redis.url()))
                .timeout(Duration::from_secs(5))
                .failure_policy(FailurePolicy::Closed)
                .over_limit_cache(100),
        ),
        ..EngineOptions::default()
    };
    let mut service = Service::start(&rules(2), engine).await?;
    for _ in 0..2 {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
    }
    // The first denial comes from Redis; the next ones, at the same time, from the cache,
    // word for word the same.
    let from_redis = service.ask(&[&[("user", "ann")]], 0).await?;
    assert_eq!(from_redis.overall_code, OVER_LIMIT);
    assert_eq!(hits(&service).await?, Some(0));
    for _ in 0..4 {
        assert_eq!(service.ask(&[&[("user", "ann")]], 0).await?, from_redis);
    }
    assert_eq!(hits(&service).await?, Some(4));
    assert_eq!(entries(&service).await?, Some(1));
    let admin = reqwest::get(service.admin_url("/admin/stats")?)
        .await?
        .text()
        .await?;
    let stats: serde_json::Value = serde_json::from_str(&admin)?;
    let cache = &stats["backend"]["over_limit_cache"];
    assert_eq!(
        (&cache["capacity"], &cache["entries"], &cache["hits"]),
        (&100.into(), &1.into(), &4.into()),
        "{stats}"
    );
    // The entry is one of the service's keys (`--max-keys`).
    assert_eq!(stats["keys"]["live"], 1, "{stats}");
    // Another user is not over.
    assert_eq!(service.code(&[&[("user", "bob")]]).await?, OK);

    // A reload raising the limit: the old denial does not answer the new limit.
    let file = service.dir.path().join("rules.yaml");
    write_atomically(&file, &rules(3))?;
    wait_for_rules(&service, "requests_per_unit=3").await?;
    assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
    assert_eq!(hits(&service).await?, Some(4));
    // Over the new limit: cached again, and answered.
    for _ in 0..2 {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, OVER_LIMIT);
    }
    assert_eq!(hits(&service).await?, Some(5));
    assert_eq!(entries(&service).await?, Some(1));

    // The manual switch drops every entry: the next answer comes from Redis.
    let (status, _) = service.set_mode("*", "shadow").await?;
    assert_eq!(status, 200);
    assert_eq!(entries(&service).await?, Some(0));
    let (status, _) = service.set_mode("*", "enforce").await?;
    assert_eq!(status, 200);
    assert_eq!(service.code(&[&[("user", "ann")]]).await?, OVER_LIMIT);
    assert_eq!(hits(&service).await?, Some(5));

    // The window ends: Redis is asked again, and ann passes.
    service.clock.advance(Duration::from_secs(3600));
    assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_nothing_is_cached() -> TestResult {
    let redis = RedisServer::start()?;
    let engine = EngineOptions {
        backend: BackendOptions::Redis(
            RedisSettings::new(RedisTarget::Single(redis.url()))
                .timeout(Duration::from_secs(5))
                .failure_policy(FailurePolicy::Closed),
        ),
        ..EngineOptions::default()
    };
    let mut service = Service::start(&rules(1), engine).await?;
    for code in [OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT] {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, code);
    }
    assert_eq!(hits(&service).await?, Some(0));
    assert_eq!(entries(&service).await?, Some(0));
    service.server.shutdown().await?;
    Ok(())
}

/// With `--count-denied` every hit is charged, denied or not: only a full fixed window, which
/// denies everything until it ends whatever it is charged, is answered in the service; a GCRA
/// is asked every time (each charge pushes its next grant further).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_count_denied_only_a_full_fixed_window_is_answered() -> TestResult {
    const RULES: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: fixed-window}\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra}\n";
    let redis = RedisServer::start()?;
    let engine = EngineOptions {
        backend: BackendOptions::Redis(
            RedisSettings::new(RedisTarget::Single(redis.url()))
                .timeout(Duration::from_secs(5))
                .failure_policy(FailurePolicy::Closed)
                .over_limit_cache(100),
        ),
        count_denied: true,
        ..EngineOptions::default()
    };
    let mut service = Service::start(RULES, engine).await?;
    for code in [OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT] {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, code);
    }
    assert_eq!(hits(&service).await?, Some(2));
    for code in [OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT] {
        assert_eq!(service.code(&[&[("path", "/cart")]]).await?, code);
    }
    assert_eq!(
        hits(&service).await?,
        Some(2),
        "charges of a GCRA go to Redis"
    );
    service.server.shutdown().await?;
    Ok(())
}
