//! `sluicegate proxy` with a route's `adaptive:` setting, real processes over loopback: the
//! limit holds requests in flight (503 + Retry-After when full), the permit comes back when
//! the body ends, other routes are untouched, and a bad setting stops the proxy with its place.

mod proxy_support;

use std::process::Command;

use proxy_support::{BoxError, ProxyProcess, Upstream, eventually};

/// One place at a time on `/stream` (AIMD pinned at 1), nothing on the rest.
const ONE_PLACE: &str = "\
routes:
  - prefix: /stream
    adaptive:
      controller: aimd
      min: 1
      initial: 1
      max: 1
      retry_after: 2s
  - prefix: /
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_an_adaptive_limit_refuses_with_503_when_full() -> Result<(), BoxError> {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), ONE_PLACE, &[])?;
    let client = reqwest::Client::new();

    let mut first = client.get(proxy.url("/stream")).send().await?;
    assert_eq!(first.status(), 200);
    assert_eq!(first.chunk().await?.as_deref(), Some(&b"first chunk\n"[..]));
    let refused = client.get(proxy.url("/stream")).send().await?;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "2");
    assert_eq!(
        refused.text().await?,
        "service overloaded: concurrency limit of 1 reached; retry in 2 s\n"
    );
    let route = "{route=\"/stream\"}";
    assert_eq!(
        proxy
            .metric(&format!("sluicegate_proxy_adaptive_rejected_total{route}"))
            .await?,
        1
    );
    assert_eq!(
        proxy
            .metric(&format!("sluicegate_proxy_adaptive_limit{route}"))
            .await?,
        1
    );
    assert_eq!(
        proxy
            .metric(&format!("sluicegate_proxy_adaptive_in_flight{route}"))
            .await?,
        1
    );
    // Another route has no adaptive limit.
    assert_eq!(client.get(proxy.url("/other")).send().await?.status(), 200);

    // The body ends: the place comes back.
    upstream.release();
    assert_eq!(first.text().await?, "last chunk\n");
    eventually("the place is back after the body ended", || async {
        let response = client.get(proxy.url("/stream")).send().await?;
        let passed = response.status() == 200;
        if passed {
            upstream.release();
            response.text().await?;
        }
        Ok(passed)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_an_adaptive_limit_still_applies_its_rate_limits() -> Result<(), BoxError> {
    // Two requests an hour per client behind a limit with room to spare: the third is the
    // rate limit's to refuse, with its own status, and the upstream saw two.
    let rules = "\
limits:
  two: { key: peer_ip, spec: \"gcra:rate=2/h,burst=2\" }
routes:
  - prefix: /
    limits: [two]
    adaptive:
      controller: aimd
      min: 1
      initial: 10
      max: 10
";
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let response = client.get(proxy.url("/count")).send().await?;
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await?, "0");
    }
    let refused = client.get(proxy.url("/count")).send().await?;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_adaptive_rejected_total{route=\"/\"}")
            .await?,
        0
    );
    Ok(())
}

#[test]
fn a_bad_adaptive_setting_stops_the_proxy_naming_its_place() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "routes:\n  - prefix: /\n    adaptive: { controller: nope }\n  - prefix: /x\n    adaptive: { controller: vegas, min: 10, max: 5 }\n",
    )?;
    let output = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--admin",
            "off",
        ])
        .arg("--config")
        .arg(&rules)
        .args(["--listen", "127.0.0.1:0"])
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("rules.yaml:3:29: unknown controller `nope` (known: aimd, vegas"),
        "{stderr}"
    );
    assert!(stderr.contains("rules.yaml:5:17: `adaptive`:"), "{stderr}");
    Ok(())
}
