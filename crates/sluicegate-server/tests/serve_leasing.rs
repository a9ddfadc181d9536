//! `serve --redis --redis-lease N` on a real redis-server: a hot key's checks are granted from
//! leases, never beyond its limit, counted in `/metrics`; at shutdown the unused permits go
//! back to Redis.

use std::time::Duration;

use sluicegate::lease::LeaseSizing;
use sluicegate_redis::testing::RedisServer;
use sluicegate_redis::{FailurePolicy, LeaseConfig};
use sluicegate_server::serve::{BackendOptions, EngineOptions, RedisSettings, RedisTarget};

mod loopback;

use loopback::{BoxError, OK, OVER_LIMIT, Service, TestResult, metric_value};

const RULES: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: fixed-window}\n";

/// The service on `redis` (a call waits up to 5 s, the closed policy), leasing as given.
fn on_redis(redis: &RedisServer, leasing: Option<LeaseConfig>) -> EngineOptions {
    let settings = RedisSettings::new(RedisTarget::Single(redis.url()))
        .timeout(Duration::from_secs(5))
        .failure_policy(FailurePolicy::Closed)
        .leasing(leasing);
    EngineOptions {
        backend: BackendOptions::Redis(settings),
        ..EngineOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_is_granted_from_leases_and_never_beyond_its_limit() -> TestResult {
    let redis = RedisServer::start()?;
    let leasing = LeaseConfig {
        sizing: LeaseSizing {
            // Long enough that a slow test machine's calls still find the lease.
            life: 2_000_000,
            horizon: 1_000_000,
            max_per_key: 8,
            max_per_process: 100,
        },
        ..LeaseConfig::default()
    };
    let engine = on_redis(&redis, Some(leasing));
    let mut service = Service::start(RULES, engine).await?;
    let mut granted = 0;
    for _ in 0..80 {
        match service.code(&[&[("user", "ann")]]).await? {
            OK => granted += 1,
            OVER_LIMIT => {}
            other => return Err(format!("answered {other}").into()),
        }
    }
    assert_eq!(granted, 50);
    let text = service.get("/metrics").await?;
    let leases = metric_value(&text, "sluicegate_redis_leases_total").unwrap_or(0);
    let local = metric_value(&text, "sluicegate_redis_lease_local_grants_total").unwrap_or(0);
    assert!(leases > 0 && local > 0, "{text}");
    // Each lease was taken by a granted call, and each local grant is one of the 50.
    assert!(local + leases <= 50, "{text}");
    let admin = reqwest::get(service.admin_url("/admin/stats")?)
        .await?
        .text()
        .await?;
    let stats: serde_json::Value = serde_json::from_str(&admin)?;
    let lease = &stats["backend"]["leasing"];
    assert_eq!(
        (&lease["on"], &lease["leases"], &lease["local_grants"]),
        (&true.into(), &leases.into(), &local.into()),
        "{stats}"
    );

    // A new key: a lease is taken for it, and given back at shutdown.
    for _ in 0..20 {
        assert_eq!(service.code(&[&[("user", "bob")]]).await?, OK);
    }
    let engine = std::sync::Arc::clone(&service.server.engine);
    service.server.shutdown().await?;
    let text = engine.render_metrics();
    assert_eq!(
        metric_value(&text, "sluicegate_redis_lease_permits_held"),
        Some(0),
        "{text}"
    );
    let returned =
        metric_value(&text, "sluicegate_redis_lease_permits_returned_total").unwrap_or(0);
    assert!(returned > 0, "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_nothing_is_leased() -> Result<(), BoxError> {
    let redis = RedisServer::start()?;
    let engine = on_redis(&redis, None);
    let mut service = Service::start(RULES, engine).await?;
    for _ in 0..20 {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
    }
    let text = service.get("/metrics").await?;
    assert_eq!(
        metric_value(&text, "sluicegate_redis_leases_total"),
        Some(0)
    );
    service.server.shutdown().await?;
    Ok(())
}
