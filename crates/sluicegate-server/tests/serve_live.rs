//! `GET /admin/stats`, the live page's JSON: per-second counts per rule, the most limited
//! keys, latency and health, over real gRPC traffic on a manual clock.

use std::time::Duration;

use sluicegate_server::serve::EngineOptions;

mod loopback;

use loopback::{BoxError, OK, OVER_LIMIT, Service, TestResult};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;

async fn stats(service: &Service) -> Result<serde_json::Value, BoxError> {
    let text = service
        .http
        .get(service.admin_url("/admin/stats")?)
        .send()
        .await?
        .text()
        .await?;
    Ok(serde_json::from_str(&text)?)
}

fn rule<'a>(stats: &'a serde_json::Value, id: &str) -> Result<&'a serde_json::Value, BoxError> {
    stats["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["id"] == id))
        .ok_or_else(|| format!("no rule {id} in {stats}").into())
}

/// The last `n` entries of a rule's series.
fn last(rule: &serde_json::Value, series: &str, n: usize) -> Result<Vec<u64>, BoxError> {
    let all: Vec<u64> = serde_json::from_value(rule[series].clone())?;
    Ok(all[all.len() - n..].to_vec())
}

#[tokio::test]
async fn the_page_data_counts_each_second_and_names_the_limited_keys() -> TestResult {
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    // Second 1: ann spends her 3 and is denied twice; bob once.
    for _ in 0..3 {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
    }
    for _ in 0..2 {
        assert_eq!(service.code(&[&[("user", "ann")]]).await?, OVER_LIMIT);
    }
    assert_eq!(service.code(&[&[("user", "bob")]]).await?, OK);
    // Second 2: ann denied once more; the shadow rule over its limit once.
    service.clock.advance(Duration::from_secs(1));
    assert_eq!(service.code(&[&[("user", "ann")]]).await?, OVER_LIMIT);
    for _ in 0..2 {
        assert_eq!(service.code(&[&[("path", "/")]]).await?, OK);
    }

    let stats = stats(&service).await?;
    assert_eq!(stats["window_seconds"], 300);
    let user = rule(&stats, "shop.user")?;
    assert_eq!(last(user, "allowed", 2)?, vec![4, 0], "{user}");
    assert_eq!(last(user, "denied", 2)?, vec![2, 1], "{user}");
    // Near the limit (less than a fifth of 3 left): ann's third, with none left.
    assert_eq!(last(user, "near_limit", 2)?, vec![1, 0], "{user}");
    assert_eq!(user["top_limited"][0]["key"], "shop_user_ann_", "{user}");
    assert_eq!(user["top_limited"][0]["count"], 3, "{user}");
    assert_eq!(
        user["file"].as_str().map(|f| f.ends_with("rules.yaml")),
        Some(true)
    );
    assert_eq!(user["line"], 4, "{user}");
    assert_eq!(user["mode"], "enforce");
    let path = rule(&stats, "shop.path")?;
    assert_eq!(last(path, "allowed", 1)?, vec![1], "{path}");
    assert_eq!(last(path, "shadow_denied", 1)?, vec![1], "{path}");
    assert_eq!(stats["backend"]["store"], "memory");
    assert_eq!(stats["keys"]["live"], 3, "{stats}");
    assert!(stats["latency_micros"]["p99"].as_u64() > Some(0), "{stats}");

    // A minute on, the keys list forgets; five minutes on, the counts too.
    service.clock.advance(Duration::from_secs(121));
    let stats = self::stats(&service).await?;
    let user = rule(&stats, "shop.user")?;
    assert_eq!(user["top_limited"], serde_json::json!([]), "{user}");
    service.clock.advance(Duration::from_secs(300));
    let stats = self::stats(&service).await?;
    let user = rule(&stats, "shop.user")?;
    let allowed: Vec<u64> = serde_json::from_value(user["allowed"].clone())?;
    assert_eq!(allowed.len(), 300);
    assert!(allowed.iter().all(|n| *n == 0), "{user}");
    service.server.shutdown().await?;
    Ok(())
}
