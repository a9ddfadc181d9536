//! `sluicegate proxy`'s admin listener, real processes over loopback: the manual switch
//! (`PUT /admin/mode`) applied to a route's decisions (`closed`, `open`, `shadow`, back to
//! `enforce`), the live page's JSON naming the route and its mode, the page itself, and a
//! non-loopback admin address refused without a token.

mod proxy_support;

use proxy_support::{BoxError, ProxyProcess, Upstream, eventually, start_refused};

/// One request an hour on `/api/`; `/free/` unlimited.
const ONE_AN_HOUR: &str = "\
limits:
  hourly: { key: global, spec: \"gcra:rate=1/h,burst=1\" }
routes:
  - { name: api, prefix: /api/, limits: [hourly], status: 429 }
  - { name: free, prefix: /free/ }
";

async fn set_mode(proxy: &ProxyProcess, rule: &str, mode: &str) -> Result<u16, BoxError> {
    let response = reqwest::Client::new()
        .put(format!("http://{}/admin/mode", proxy.admin))
        .body(serde_json::json!({"rule": rule, "mode": mode}).to_string())
        .send()
        .await?;
    Ok(response.status().as_u16())
}

async fn stats(proxy: &ProxyProcess) -> Result<serde_json::Value, BoxError> {
    let url = format!("http://{}/admin/stats", proxy.admin);
    let body = reqwest::get(url).await?.bytes().await?;
    Ok(serde_json::from_slice(&body)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_closes_opens_and_shadows_a_route() -> Result<(), BoxError> {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), ONE_AN_HOUR, &[])?;
    let client = reqwest::Client::new();
    let status = |path: &str| {
        let request = client.get(proxy.url(path));
        async move { Ok::<u16, BoxError>(request.send().await?.status().as_u16()) }
    };

    assert_eq!(status("/api/").await?, 200);
    assert_eq!(status("/api/").await?, 429);

    assert_eq!(set_mode(&proxy, "api", "open").await?, 200);
    assert_eq!(status("/api/").await?, 200);
    assert_eq!(status("/api/").await?, 200);

    assert_eq!(set_mode(&proxy, "api", "shadow").await?, 200);
    assert_eq!(status("/api/").await?, 200);
    let dry_run = "sluicegate_proxy_requests_total{route=\"api\",outcome=\"dry_run\"}";
    assert_eq!(proxy.metric(dry_run).await?, 1);

    assert_eq!(set_mode(&proxy, "api", "closed").await?, 200);
    assert_eq!(status("/api/").await?, 429);
    // Other routes are untouched.
    assert_eq!(status("/free/").await?, 200);

    // Every route at once, then back: the limit still holds what it counted.
    assert_eq!(set_mode(&proxy, "*", "closed").await?, 200);
    assert_eq!(status("/free/").await?, 429);
    assert_eq!(set_mode(&proxy, "*", "enforce").await?, 200);
    assert_eq!(set_mode(&proxy, "api", "enforce").await?, 200);
    assert_eq!(status("/free/").await?, 200);
    assert_eq!(status("/api/").await?, 429);

    assert_eq!(set_mode(&proxy, "no-such-route", "open").await?, 404);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_shows_each_route_and_its_mode() -> Result<(), BoxError> {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), ONE_AN_HOUR, &[])?;
    let client = reqwest::Client::new();
    assert_eq!(client.get(proxy.url("/api/")).send().await?.status(), 200);
    assert_eq!(client.get(proxy.url("/api/")).send().await?.status(), 429);
    assert_eq!(set_mode(&proxy, "free", "shadow").await?, 200);

    eventually("the sampled counts on /admin/stats", || async {
        let stats = stats(&proxy).await?;
        let api = &stats["rules"][0];
        let sum = |series: &str| {
            let values = api[series].as_array().cloned().unwrap_or_default();
            values
                .iter()
                .filter_map(serde_json::Value::as_u64)
                .sum::<u64>()
        };
        Ok(sum("allowed") == 1 && sum("denied") == 1)
    })
    .await?;
    let stats = stats(&proxy).await?;
    assert_eq!(stats["rules"][0]["id"], "api");
    assert_eq!(stats["rules"][0]["mode"], "enforce");
    assert_eq!(stats["rules"][0]["line"], 4);
    assert_eq!(stats["rules"][1]["id"], "free");
    assert_eq!(stats["rules"][1]["mode"], "shadow");
    assert_eq!(stats["modes"]["free"], "shadow");
    assert_eq!(stats["backend"]["store"], "memory");

    let page = reqwest::get(format!("http://{}/", proxy.admin)).await?;
    assert_eq!(page.status(), 200);
    assert!(page.text().await?.contains("page.js"));
    Ok(())
}

#[test]
fn an_admin_address_off_loopback_needs_a_token() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let log = start_refused(dir.path(), ONE_AN_HOUR, &["--admin", "0.0.0.0:0"])?;
    assert!(log.contains("--admin-token"), "{log}");
    Ok(())
}
