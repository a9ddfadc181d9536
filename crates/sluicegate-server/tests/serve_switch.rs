//! The manual switch (`PUT /admin/mode`): each mode over real gRPC and HTTP, in memory and on
//! a real redis-server; kept across reloads and restarts; and the admin token.

use sluicegate_server::serve::{EngineOptions, ServerConfig, start};

mod loopback;

use loopback::{
    BoxError, OK, OVER_LIMIT, Service, TestResult, in_memory_and_on_redis, wait_for_rules,
    write_atomically,
};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
"#;

/// The remaining count of `user`, checked without charging (`hits_addend` 0 on the descriptor).
async fn remaining(service: &mut Service, user: &str) -> Result<u32, BoxError> {
    let body = format!(
        r#"{{"domain":"shop","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}],"hits_addend":0}}]}}"#
    );
    let (_, _, text) = service.post_json(&body).await?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let left = json["statuses"][0]["limitRemaining"].as_u64().unwrap_or(0);
    Ok(u32::try_from(left)?)
}

async fn user(service: &mut Service, name: &str) -> Result<i32, BoxError> {
    Ok(service.code(&[&[("user", name)]]).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_answers_as_specified_in_memory_and_on_redis() -> TestResult {
    for (mut service, redis) in in_memory_and_on_redis(RULES).await? {
        let store = if redis.is_some() { "redis" } else { "memory" };
        // Spend ann's budget.
        for _ in 0..2 {
            assert_eq!(user(&mut service, "ann").await?, OK, "{store}");
        }
        assert_eq!(user(&mut service, "ann").await?, OVER_LIMIT, "{store}");

        // shadow: decided and counted, answered OK.
        assert_eq!(service.set_mode("shop.user", "shadow").await?.0, 200);
        assert_eq!(user(&mut service, "ann").await?, OK, "{store}");
        let metrics = service.get("/metrics").await?;
        assert!(
            metrics.contains(r#"sluicegate_shadow_mode_total{domain="shop",rule="shop.user"} 1"#),
            "{store}: {metrics}"
        );
        assert!(
            metrics.contains(r#"sluicegate_mode{rule="shop.user",mode="shadow"} 1"#),
            "{store}: {metrics}"
        );
        assert!(service.get("/rlconfig").await?.contains("mode: shadow"));
        // Shadow still charges what would be allowed: bob spends one.
        assert_eq!(user(&mut service, "bob").await?, OK);
        assert_eq!(remaining(&mut service, "bob").await?, 1, "{store}");

        // open: answered OK, nothing charged.
        assert_eq!(service.set_mode("shop.user", "open").await?.0, 200);
        for _ in 0..3 {
            assert_eq!(user(&mut service, "bob").await?, OK, "{store}");
        }
        assert_eq!(remaining(&mut service, "bob").await?, 1, "{store}");

        // closed: denied, even a fresh key, and nothing charged.
        assert_eq!(service.set_mode("shop.user", "closed").await?.0, 200);
        assert_eq!(user(&mut service, "carl").await?, OVER_LIMIT, "{store}");
        // Another rule is unaffected.
        assert_eq!(service.code(&[&[("path", "/")]]).await?, OK, "{store}");

        // enforce again: carl was never charged, ann is still spent.
        assert_eq!(service.set_mode("shop.user", "enforce").await?.0, 200);
        assert_eq!(remaining(&mut service, "carl").await?, 2, "{store}");
        assert_eq!(user(&mut service, "ann").await?, OVER_LIMIT, "{store}");

        // The whole service: closed denies every rule, then back.
        assert_eq!(service.set_mode("*", "closed").await?.0, 200);
        assert_eq!(
            service.code(&[&[("path", "/")]]).await?,
            OVER_LIMIT,
            "{store}"
        );
        let listed: serde_json::Value = serde_json::from_str(
            &service
                .http
                .get(service.admin_url("/admin/mode")?)
                .send()
                .await?
                .text()
                .await?,
        )?;
        assert_eq!(listed["*"], "closed", "{listed}");
        assert_eq!(service.set_mode("*", "enforce").await?.0, 200);
        assert_eq!(service.code(&[&[("path", "/")]]).await?, OK, "{store}");
        service.server.shutdown().await?;
    }
    Ok(())
}

#[tokio::test]
async fn bad_mode_calls_name_what_is_wrong() -> TestResult {
    let service = Service::start(RULES, EngineOptions::default()).await?;
    let (status, text) = service.set_mode("shop.nope", "shadow").await?;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("shop.nope"), "{text}");
    let (status, text) = service.set_mode("shop.user", "sometimes").await?;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("sometimes"), "{text}");
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_mode_survives_reloads_and_restarts() -> TestResult {
    let modes_dir = tempfile::tempdir()?;
    let modes_file = modes_dir.path().join("modes.json");
    let engine = EngineOptions {
        modes_file: Some(modes_file.clone()),
        ..EngineOptions::default()
    };
    let mut service = Service::start(RULES, engine.clone()).await?;
    assert_eq!(service.set_mode("shop.user", "closed").await?.0, 200);
    assert_eq!(user(&mut service, "dora").await?, OVER_LIMIT);

    // A reload that adds a rule keeps the switch.
    let rules_file = service.dir.path().join("rules.yaml");
    write_atomically(
        &rules_file,
        &format!("{RULES}  - key: team\n    rate_limit: {{unit: hour, requests_per_unit: 5}}\n"),
    )?;
    wait_for_rules(&service, "shop.team").await?;
    assert_eq!(user(&mut service, "dora").await?, OVER_LIMIT);
    service.server.shutdown().await?;

    // A restart reads it back from the file.
    let mut again = Service::start(RULES, engine).await?;
    assert!(again.get("/rlconfig").await?.contains("mode: closed"));
    assert_eq!(user(&mut again, "dora").await?, OVER_LIMIT);
    again.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn off_loopback_the_admin_api_needs_the_token() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("rules.yaml"), RULES)?;
    let config = |token: Option<&str>| -> Result<ServerConfig, BoxError> {
        Ok(ServerConfig {
            admin_addr: Some("0.0.0.0:0".parse()?),
            admin_token: token.map(str::to_owned),
            ..ServerConfig::on_free_loopback_ports(dir.path())
        })
    };
    // Without a token, an admin address off loopback does not start.
    let refused = start(config(None)?)
        .await
        .expect_err("no token off loopback");
    assert!(refused.to_string().contains("--admin-token"), "{refused}");

    let server = start(config(Some("s3cret"))?).await?;
    let port = server.admin_addr.ok_or("admin")?.port();
    let url = format!("http://127.0.0.1:{port}/admin/mode");
    let http = reqwest::Client::new();
    let body = r#"{"rule":"*","mode":"open"}"#;
    for token in [None, Some("Bearer wrong"), Some("s3cret")] {
        let mut put = http.put(&url).body(body);
        if let Some(token) = token {
            put = put.header("Authorization", token);
        }
        assert_eq!(put.send().await?.status().as_u16(), 401, "{token:?}");
    }
    assert_eq!(http.get(&url).send().await?.status().as_u16(), 401);
    let allowed = http
        .put(&url)
        .header("Authorization", "Bearer s3cret")
        .body(body)
        .send()
        .await?;
    assert_eq!(allowed.status().as_u16(), 200);
    // The page itself holds no data: served without the token, with a strict policy.
    let page = http.get(format!("http://127.0.0.1:{port}/")).send().await?;
    assert_eq!(page.status().as_u16(), 200);
    let policy = page
        .headers()
        .get("content-security-policy")
        .ok_or("no CSP")?
        .to_str()?
        .to_owned();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    server.shutdown().await?;
    Ok(())
}
