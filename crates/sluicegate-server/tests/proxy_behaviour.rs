//! `sluicegate proxy` as a process over loopback, in front of a real axum upstream, driven by
//! reqwest: keys, answers, concurrency permits, several limits, dry run, reload, upstream
//! errors, streaming, h2, forwarding fields, graceful shutdown.

mod proxy_support;

use std::time::Duration;

use proxy_support::{BoxError, ProxyProcess, Upstream, eventually, start_refused};

type TestResult = Result<(), BoxError>;

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn status(request: reqwest::RequestBuilder) -> Result<u16, BoxError> {
    Ok(request.send().await?.status().as_u16())
}

/// Every key part, each on its own route with a budget of one request.
const KEYS: &str = r#"
client_ip:
  header: x-forwarded-for
  trusted_proxies: [127.0.0.1/32]
limits:
  client: { key: client_ip, spec: "gcra:rate=1/h,burst=1" }
  peer: { key: peer_ip, spec: "gcra:rate=1/h,burst=1" }
  api_key: { key: { header: x-api-key }, spec: "gcra:rate=1/h,burst=1" }
  method: { key: method, spec: "gcra:rate=1/h,burst=1" }
  path: { key: path, spec: "gcra:rate=1/h,burst=1" }
  route: { key: route, spec: "gcra:rate=1/h,burst=1" }
  global: { key: global, spec: "gcra:rate=1/h,burst=1" }
  tuple: { key: [{ header: x-api-key }, method], spec: "gcra:rate=1/h,burst=1" }
routes:
  - { prefix: /client/, limits: [client] }
  - { prefix: /peer/, limits: [peer] }
  - { prefix: /header/, limits: [api_key] }
  - { prefix: /method/, limits: [method] }
  - { prefix: /path/, limits: [path] }
  - { prefix: /route/, limits: [route] }
  - { prefix: /global/, limits: [global] }
  - { prefix: /tuple/, limits: [tuple] }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_part_keys_requests_apart() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), KEYS, &[])?;
    let c = client();
    let get = |path: &str| c.get(proxy.url(path));

    // The peer (127.0.0.1) is a trusted proxy: the address it reports is the key.
    let xff = |ip: &str| get("/client/").header("x-forwarded-for", ip);
    assert_eq!(status(xff("198.51.100.1")).await?, 200);
    assert_eq!(status(xff("198.51.100.1")).await?, 429);
    assert_eq!(status(xff("198.51.100.2")).await?, 200);
    // A forged left-most entry does not change the key: the right-most untrusted one counts.
    assert_eq!(status(xff("203.0.113.9, 198.51.100.1")).await?, 429);

    // The peer's address whatever the header says.
    assert_eq!(
        status(get("/peer/").header("x-forwarded-for", "10.0.0.1")).await?,
        200
    );
    assert_eq!(
        status(get("/peer/").header("x-forwarded-for", "10.0.0.2")).await?,
        429
    );

    // A header: each value its own budget; a request without it is not counted (nginx).
    let key = |k: &str| get("/header/").header("x-api-key", k);
    assert_eq!(status(key("a")).await?, 200);
    assert_eq!(status(key("a")).await?, 429);
    assert_eq!(status(key("b")).await?, 200);
    assert_eq!(status(get("/header/")).await?, 200);
    assert_eq!(status(get("/header/")).await?, 200);

    // The method.
    assert_eq!(status(get("/method/")).await?, 200);
    assert_eq!(status(get("/method/")).await?, 429);
    assert_eq!(status(c.post(proxy.url("/method/"))).await?, 200);

    // The path: each its own; the route: one for all its paths.
    assert_eq!(status(get("/path/a")).await?, 200);
    assert_eq!(status(get("/path/a")).await?, 429);
    assert_eq!(status(get("/path/b")).await?, 200);
    assert_eq!(status(get("/route/a")).await?, 200);
    assert_eq!(status(get("/route/b")).await?, 429);

    // Global: one budget for every client.
    assert_eq!(
        status(get("/global/").header("x-forwarded-for", "1.1.1.1")).await?,
        200
    );
    assert_eq!(
        status(get("/global/").header("x-forwarded-for", "2.2.2.2")).await?,
        429
    );

    // A tuple: (header, method).
    let tuple = |k: &str| get("/tuple/").header("x-api-key", k);
    assert_eq!(status(tuple("a")).await?, 200);
    assert_eq!(status(tuple("a")).await?, 429);
    assert_eq!(
        status(c.post(proxy.url("/tuple/")).header("x-api-key", "a")).await?,
        200
    );
    assert_eq!(status(tuple("b")).await?, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_forwarding_header_from_an_untrusted_peer_changes_nothing() -> TestResult {
    let upstream = Upstream::start().await?;
    // The proxies in front are in 10.0.0.0/8; the test's client (127.0.0.1) is not one.
    let rules = r#"
client_ip: { header: x-forwarded-for, trusted_proxies: [10.0.0.0/8] }
limits:
  client: { key: client_ip, spec: "gcra:rate=1/h,burst=1" }
routes:
  - { prefix: /, limits: [client] }
"#;
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let c = client();
    let forged = |ip: &str| c.get(proxy.url("/")).header("x-forwarded-for", ip);
    assert_eq!(status(forged("198.51.100.1")).await?, 200);
    assert_eq!(status(forged("198.51.100.2")).await?, 429);
    assert_eq!(status(forged("10.0.0.1")).await?, 429);
    assert_eq!(status(c.get(proxy.url("/"))).await?, 429);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_answer_with_the_status_and_fields() -> TestResult {
    let upstream = Upstream::start().await?;
    let rules = r#"
limits:
  hourly: { key: peer_ip, spec: "gcra:rate=1/h,burst=1" }
  nginx_like: { key: peer_ip, spec: "leaky-queue:rate=1/m" }
routes:
  - { prefix: /default/, limits: [hourly], headers_on_allowed: true }
  - { prefix: /nginx/, limits: [nginx_like], status: 503 }
"#;
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let c = client();
    let allowed = c.get(proxy.url("/default/")).send().await?;
    assert_eq!(allowed.status(), 200);
    assert_eq!(
        allowed.headers()["ratelimit-policy"],
        "\"hourly\";q=1;w=3600"
    );
    let denied = c.get(proxy.url("/default/")).send().await?;
    assert_eq!(denied.status(), 429);
    let retry: u64 = denied.headers()["retry-after"].to_str()?.parse()?;
    assert!((3500..=3600).contains(&retry), "retry-after {retry}");
    assert_eq!(
        denied.headers()["ratelimit-policy"],
        "\"hourly\";q=1;w=3600"
    );
    assert!(
        denied.headers()["ratelimit"]
            .to_str()?
            .starts_with("\"hourly\";r=0;t=")
    );
    assert!(denied.text().await?.contains("hourly"));

    assert_eq!(status(c.get(proxy.url("/nginx/"))).await?, 200);
    let denied = c.get(proxy.url("/nginx/")).send().await?;
    assert_eq!(denied.status(), 503);
    assert!(denied.headers().contains_key("retry-after"));
    Ok(())
}

const CONN: &str = r#"
limits:
  conn: { key: peer_ip, spec: "concurrency:limit=1" }
  rate: { key: peer_ip, spec: "gcra:rate=1000/s,burst=1000" }
routes:
  - { exact: /stream, limits: [conn, rate], status: 429, conn_status: 503 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_conn_is_held_until_the_body_ends_or_the_client_goes() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), CONN, &[])?;
    let c = client();

    // The first response streams: its permit is held, a second request is refused with
    // conn_status (nginx limit_conn_status).
    let mut first = c.get(proxy.url("/stream")).send().await?;
    assert_eq!(first.status(), 200);
    assert_eq!(first.chunk().await?.as_deref(), Some(&b"first chunk\n"[..]));
    let refused = c.get(proxy.url("/stream")).send().await?;
    assert_eq!(refused.status(), 503);
    assert!(
        refused.headers()["ratelimit-policy"]
            .to_str()?
            .contains("concurrent-requests")
    );
    // Its body ends: the permit comes back.
    upstream.release();
    assert_eq!(first.text().await?, "last chunk\n");
    eventually("the permit is back after the body ended", || async {
        let response = c.get(proxy.url("/stream")).send().await?;
        let passed = response.status() == 200;
        if passed {
            // This one holds it now, until it is dropped below.
            upstream.release();
            response.text().await?;
        }
        Ok(passed)
    })
    .await?;

    // A client that goes away mid-body: its connection closes, the permit comes back.
    let aborting = reqwest::Client::new();
    let held = aborting.get(proxy.url("/stream")).send().await?;
    assert_eq!(held.status(), 200);
    assert_eq!(status(c.get(proxy.url("/stream"))).await?, 503);
    drop(held);
    drop(aborting);
    eventually("the permit is back after the client went away", || async {
        let response = c.get(proxy.url("/stream")).send().await?;
        let passed = response.status() == 200;
        if passed {
            upstream.release();
            response.text().await?;
        }
        Ok(passed)
    })
    .await?;
    // The aborted upstream stream still waits on a release: let it end.
    upstream.release();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_all_or_nothing_and_dry_run_lets_all_through() -> TestResult {
    let upstream = Upstream::start().await?;
    let rules = r#"
limits:
  per_key: { key: { header: x-api-key }, spec: "gcra:rate=1/h,burst=1" }
  global: { key: global, spec: "gcra:rate=2/h,burst=2" }
  dry: { key: peer_ip, spec: "gcra:rate=1/h,burst=1" }
routes:
  - { prefix: /both/, limits: [per_key, global] }
  - { prefix: /dry/, limits: [dry], dry_run: true }
"#;
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let c = client();
    let key = |k: &str| c.get(proxy.url("/both/")).header("x-api-key", k);
    assert_eq!(status(key("a")).await?, 200);
    // Denied by per_key: global is not charged, so b still passes.
    assert_eq!(status(key("a")).await?, 429);
    assert_eq!(status(key("b")).await?, 200);
    // Now global denies: c's own limit is not charged either.
    assert_eq!(status(key("c")).await?, 429);

    for _ in 0..3 {
        assert_eq!(status(c.get(proxy.url("/dry/"))).await?, 200);
    }
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_requests_total{route=\"/dry/\",outcome=\"dry_run\"}")
            .await?,
        2
    );
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_requests_total{route=\"/both/\",outcome=\"limited\"}")
            .await?,
        2
    );
    assert_eq!(
        proxy
            .metric("sluicegate_proxy_requests_total{route=\"/both/\",outcome=\"allowed\"}")
            .await?,
        2
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_reload_and_a_bad_file_keeps_the_old_ones() -> TestResult {
    let upstream = Upstream::start().await?;
    let v1 = r#"
limits:
  one: { key: peer_ip, spec: "gcra:rate=1/h,burst=1" }
routes:
  - { prefix: /a/, limits: [one] }
"#;
    let proxy = ProxyProcess::start(&upstream.url(), v1, &[])?;
    let c = client();
    assert_eq!(status(c.get(proxy.url("/a/"))).await?, 200);
    assert_eq!(status(c.get(proxy.url("/a/"))).await?, 429);

    // v2 limits /b/ instead: /a/ is free.
    let v2 = v1.replace("/a/", "/b/");
    proxy.replace_rules(&v2)?;
    eventually("v2 in force", || async {
        Ok(status(c.get(proxy.url("/a/"))).await? == 200)
    })
    .await?;
    // The limit's state was kept (same definition): /b/ is at its budget already.
    assert_eq!(status(c.get(proxy.url("/b/"))).await?, 429);

    // A bad file: logged with file:line:column, v2 stays.
    proxy.replace_rules(&v2.replace("gcra:rate=1/h", "gcra:rate=fast"))?;
    eventually("the failed reload counted", || async {
        Ok(proxy
            .metric("sluicegate_proxy_reloads_total{result=\"failed\"}")
            .await?
            == 1)
    })
    .await?;
    assert_eq!(status(c.get(proxy.url("/a/"))).await?, 200);
    assert_eq!(status(c.get(proxy.url("/b/"))).await?, 429);
    let log = proxy.log_text();
    assert!(log.contains("rules.yaml:3:"), "log:\n{log}");
    assert!(log.contains("old rules kept"), "log:\n{log}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502_and_slow_is_504() -> TestResult {
    let rules = "routes:\n  - { prefix: / }\n";
    let port = proxy_support::free_port()?;
    let down = ProxyProcess::start(&format!("http://127.0.0.1:{port}"), rules, &[])?;
    let response = client().get(down.url("/x")).send().await?;
    assert_eq!(response.status(), 502);
    let body = response.text().await?;
    assert!(body.contains("cannot connect to the upstream"), "{body}");
    assert_eq!(
        down.metric("sluicegate_proxy_upstream_errors_total{kind=\"connect\"}")
            .await?,
        1
    );

    let upstream = Upstream::start().await?;
    // One worker: every request below goes through its one pool, so the slow request and
    // those around it share the upstream connection and the timer that lives with it.
    let slow = ProxyProcess::start(
        &upstream.url(),
        rules,
        &["--upstream-timeout", "300ms", "--workers", "1"],
    )?;
    let client = client();
    assert_eq!(status(client.get(slow.url("/x"))).await?, 200);
    // The connection idles past its last request's deadline: its timer fires unwatched, and
    // the next request on it must still get its own full wait.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(status(client.get(slow.url("/x"))).await?, 200);
    let response = client.get(slow.url("/x?hold_ms=3000")).send().await?;
    assert_eq!(response.status(), 504);
    assert!(response.text().await?.contains("did not answer within"));
    assert_eq!(status(client.get(slow.url("/x"))).await?, 200);
    assert_eq!(
        slow.metric("sluicegate_proxy_upstream_errors_total{kind=\"timeout\"}")
            .await?,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_fields_streaming_h2_and_bodies() -> TestResult {
    let upstream = Upstream::start().await?;
    let rules = "routes:\n  - { prefix: / }\n";
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let c = client();

    let echo = c
        .get(proxy.url("/echo"))
        .header("x-forwarded-for", "192.0.2.1")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "dropped")
        .header("keep-alive", "timeout=5")
        .header("x-custom", "kept")
        .send()
        .await?
        .text()
        .await?;
    let echo: serde_json::Value = serde_json::from_str(&echo)?;
    assert_eq!(echo["x-forwarded-for"], "192.0.2.1, 127.0.0.1");
    let host = format!("{}", proxy.address);
    assert_eq!(
        echo["forwarded"],
        format!("for=127.0.0.1;host=\"{host}\";proto=http")
    );
    assert_eq!(echo["x-hop"], serde_json::Value::Null);
    assert_eq!(echo["keep-alive"], serde_json::Value::Null);
    assert_eq!(echo["x-custom"], "kept");

    // The response streams: the first chunk arrives while the upstream is still sending.
    let mut streaming = c.get(proxy.url("/stream")).send().await?;
    assert_eq!(
        streaming.chunk().await?.as_deref(),
        Some(&b"first chunk\n"[..])
    );
    upstream.release();
    assert_eq!(
        streaming.chunk().await?.as_deref(),
        Some(&b"last chunk\n"[..])
    );

    // A request body of 8 MB passes whole.
    let body = vec![b'x'; 8 << 20];
    let counted = c
        .post(proxy.url("/count"))
        .body(body)
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(counted, (8 << 20).to_string());

    // h2 with prior knowledge.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build()?;
    let response = h2.get(proxy.url("/h2")).send().await?;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let echo: serde_json::Value = serde_json::from_str(&response.text().await?)?;
    assert_eq!(echo["path"], "/h2");
    assert_eq!(echo["host"], host);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_forwarding_fields_get_the_client() -> TestResult {
    let upstream = Upstream::start().await?;
    let rules = "routes:\n  - { prefix: / }\n";
    let echoed = |proxy: &ProxyProcess| {
        let request = client()
            .get(proxy.url("/echo"))
            .header("x-forwarded-for", "192.0.2.1")
            .header("forwarded", "for=192.0.2.1");
        async move {
            let text = request.send().await?.text().await?;
            Ok::<_, BoxError>(serde_json::from_str::<serde_json::Value>(&text)?)
        }
    };

    let xff_only = ProxyProcess::start(
        &upstream.url(),
        rules,
        &["--forwarding-fields", "x-forwarded-for"],
    )?;
    let echo = echoed(&xff_only).await?;
    assert_eq!(echo["x-forwarded-for"], "192.0.2.1, 127.0.0.1");
    assert_eq!(echo["forwarded"], "for=192.0.2.1");

    let neither = ProxyProcess::start(&upstream.url(), rules, &["--forwarding-fields", "none"])?;
    let echo = echoed(&neither).await?;
    assert_eq!(echo["x-forwarded-for"], "192.0.2.1");
    assert_eq!(echo["forwarded"], "for=192.0.2.1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_requests_in_flight_and_stops_accepting() -> TestResult {
    let upstream = Upstream::start().await?;
    let rules = "routes:\n  - { prefix: / }\n";
    let proxy = ProxyProcess::start(&upstream.url(), rules, &[])?;
    let url = proxy.url("/slow?hold_ms=1000");
    let in_flight = tokio::spawn(async move { client().get(url).send().await?.text().await });
    // The request reaches the upstream before the signal (it holds it for a second).
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.terminate()?;
    let body = in_flight.await??;
    assert!(body.contains("/slow"), "{body}");
    proxy
        .exits_cleanly(
            Duration::from_secs(60),
            "the proxy did not exit after its request",
        )
        .await?;
    Ok(())
}

#[test]
fn a_bad_rule_file_stops_the_start_with_file_line_column() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stderr = start_refused(
        dir.path(),
        "limits:\n  a: { key: nobody, spec: \"gcra:rate=1/s\" }\nroutes:\n  - { prefix: /, limits: [b] }\n",
        &[],
    )?;
    assert!(
        stderr.contains("rules.yaml:2:13: unknown key part"),
        "{stderr}"
    );
    assert!(!stderr.contains("has no `key`"), "{stderr}");
    assert!(
        stderr.contains("rules.yaml:4:27: route `/` names no limit `b`"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn a_second_proxy_on_the_same_address_is_refused_not_sharing_it() -> TestResult {
    let upstream = Upstream::start().await?;
    // Two workers each: with a SO_REUSEPORT socket per worker, the second proxy would bind
    // beside the first and take half of its connections.
    let first = ProxyProcess::passing(&upstream, &["--workers", "2"])?;
    let dir = tempfile::tempdir()?;
    let address = first.address.to_string();
    let stderr = start_refused(
        dir.path(),
        "routes:\n  - { prefix: / }\n",
        &["--workers", "2", "--listen", &address],
    )?;
    assert!(
        stderr.contains(&format!(
            "cannot listen on {address} (choose another with --listen)"
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("in use").count(),
        1,
        "the reason, once: {stderr}"
    );
    assert_eq!(reqwest::get(first.url("/")).await?.status(), 200);

    // A busy admin address names its own flag, not the listening one.
    let admin = first.admin.to_string();
    let stderr = start_refused(
        dir.path(),
        "routes:\n  - { prefix: / }\n",
        &["--listen", "127.0.0.1:0", "--admin", &admin],
    )?;
    assert!(
        stderr.contains(&format!(
            "cannot listen on {admin} (choose another with --admin)"
        )),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn new_connections_are_spread_evenly_over_the_workers() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--workers", "3"])?;
    // Twelve clients, each keeping its one connection open: connections opened one after the
    // other are all accepted by whichever worker is awake, and must still end up 4 / 4 / 4
    // (give or take one where two workers accept at once).
    let mut clients = Vec::new();
    for _ in 0..12 {
        let client = client();
        assert_eq!(status(client.get(proxy.url("/"))).await?, 200);
        clients.push(client);
    }
    let open = [
        proxy
            .metric("sluicegate_proxy_connections{worker=\"1\"}")
            .await?,
        proxy
            .metric("sluicegate_proxy_connections{worker=\"2\"}")
            .await?,
        proxy
            .metric("sluicegate_proxy_connections{worker=\"3\"}")
            .await?,
    ];
    assert_eq!(open.iter().sum::<u64>(), 12, "{open:?}");
    assert!(open.iter().all(|n| (3..=5).contains(n)), "{open:?}");
    drop(clients);
    eventually("every connection counted out when it closes", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 0)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_send_its_request_head_in_time_is_closed() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--client-header-timeout", "1s"])?;
    // Whether the proxy closes the connection (rather than the test giving up first).
    async fn closed_by_proxy(stream: &mut tokio::net::TcpStream) -> bool {
        let mut rest = Vec::new();
        matches!(
            tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await,
            Ok(Ok(_))
        )
    }
    // Silent from the start.
    let mut silent = tokio::net::TcpStream::connect(proxy.address).await?;
    assert!(closed_by_proxy(&mut silent).await);
    // A head begun and never finished.
    let mut partial = tokio::net::TcpStream::connect(proxy.address).await?;
    partial.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await?;
    assert!(closed_by_proxy(&mut partial).await);
    // Idle after a request answered: the wait for the next head counts.
    let mut idle = tokio::net::TcpStream::connect(proxy.address).await?;
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), idle.read_to_end(&mut answer)).await;
    assert!(matches!(read, Ok(Ok(_))), "the idle connection stayed open");
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{answer:?}"
    );
    // Requests in time are served as ever.
    assert_eq!(status(client().get(proxy.url("/"))).await?, 200);
    Ok(())
}

#[tokio::test]
async fn a_request_without_its_one_host_is_refused_before_any_limit() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(
        &upstream.url(),
        "limits:\n  one: { key: global, spec: \"gcra:rate=1/h,burst=1\" }\nroutes:\n  - { prefix: /, limits: [one] }\n",
        &[],
    )?;
    let two = proxy
        .raw_exchange(&[b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"])
        .await?;
    assert!(two.starts_with("HTTP/1.1 400"), "{two}");
    assert!(two.contains("more than one Host field"), "{two}");
    let none = proxy
        .raw_exchange(&[b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"])
        .await?;
    assert!(none.starts_with("HTTP/1.1 400"), "{none}");
    assert!(none.contains("needs a Host field"), "{none}");
    // Neither spent the one request of the budget; HTTP/1.0 may name no host.
    let old = proxy.raw_exchange(&[b"GET / HTTP/1.0\r\n\r\n"]).await?;
    assert!(
        old.starts_with("HTTP/1.") && old[8..].starts_with(" 200"),
        "{old}"
    );
    assert_eq!(status(client().get(proxy.url("/"))).await?, 429);
    Ok(())
}

#[tokio::test]
async fn on_shutdown_a_head_never_finished_does_not_hold_the_proxy_for_its_grace() -> TestResult {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(
        &upstream,
        &["--client-header-timeout", "20s", "--shutdown-grace", "300s"],
    )?;
    let mut partial = tokio::net::TcpStream::connect(proxy.address).await?;
    partial.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await?;
    eventually("the connection counted", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 1)
    })
    .await?;
    // Told to finish, a connection in the middle of its first head has begun nothing: it is
    // dropped a header timeout later, not waited for until the grace runs out.
    exits_on_sigterm(proxy, "the proxy waited for the unfinished head").await?;
    drop(partial);
    Ok(())
}

/// Sends `proxy` SIGTERM and waits for it to exit, well within the grace the tests give it
/// (`waited`: what it waited for if it does not).
async fn exits_on_sigterm(proxy: ProxyProcess, waited: &'static str) -> TestResult {
    proxy.terminate()?;
    proxy.exits_cleanly(Duration::from_secs(60), waited).await?;
    Ok(())
}

#[tokio::test]
async fn on_shutdown_connections_that_sent_nothing_are_not_waited_for() -> TestResult {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start().await?;
    // Both far past the wait below: reaching either means the proxy waited for them.
    let proxy = ProxyProcess::passing(
        &upstream,
        &[
            "--client-header-timeout",
            "300s",
            "--shutdown-grace",
            "300s",
        ],
    )?;
    let silent = tokio::net::TcpStream::connect(proxy.address).await?;
    // Partway into h2's preface: told neither protocol yet.
    let mut partial = tokio::net::TcpStream::connect(proxy.address).await?;
    partial.write_all(b"PRI * HTTP/2.0\r\n").await?;
    eventually("both connections counted", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 2)
    })
    .await?;
    exits_on_sigterm(proxy, "the proxy waited for connections that sent nothing").await?;
    drop((silent, partial));
    Ok(())
}

#[tokio::test]
async fn an_h2_connection_with_no_request_open_is_closed_and_one_with_a_request_open_is_not()
-> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--client-header-timeout", "1s"])?;
    let open_connections = || proxy.metric_sum("sluicegate_proxy_connections");
    // A request held open for three timeouts keeps its connection.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build()?;
    let mut response = h2.get(proxy.url("/stream")).send().await?;
    assert_eq!(
        response.chunk().await?.as_deref(),
        Some(&b"first chunk\n"[..])
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(open_connections().await?, 1);
    upstream.release();
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"last chunk\n");
    // Then, with none open, the proxy closes it while the client still holds it.
    eventually("the idle h2 connection closed", || async {
        Ok(open_connections().await? == 0)
    })
    .await?;
    assert_eq!(status(h2.get(proxy.url("/"))).await?, 200);
    drop(h2);
    // A client that opens h2 and says nothing more, nor answers the closing ping.
    let mut mute = tokio::net::TcpStream::connect(proxy.address).await?;
    // The preface and an empty SETTINGS frame (RFC 9113 sections 3.4 and 6.5).
    mute.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await?;
    let mut heard = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), mute.read_to_end(&mut heard)).await;
    assert!(
        matches!(closed, Ok(Ok(_))),
        "the mute h2 connection stayed open"
    );
    // It was told: a GOAWAY frame (type 7, no flags, stream 0) came before the close.
    assert!(
        heard.windows(6).any(|w| w == [7, 0, 0, 0, 0, 0]),
        "{heard:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_h2_response_its_client_takes_nothing_of_ends_the_connection() -> TestResult {
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--client-send-timeout", "1s"])?;
    // A response whose upstream says nothing for three timeouts is no stall of the client's.
    let h2_client = || reqwest::Client::builder().http2_prior_knowledge().build();
    let mut slow = h2_client()?.get(proxy.url("/stream")).send().await?;
    assert_eq!(slow.chunk().await?.as_deref(), Some(&b"first chunk\n"[..]));
    tokio::time::sleep(Duration::from_secs(3)).await;
    upstream.release();
    let mut rest = Vec::new();
    while let Some(chunk) = slow.chunk().await? {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"last chunk\n");
    drop(slow);
    // A client that never gives back the flow-control window it is sent data in: the first
    // 64 KiB of the body come, then nothing can.
    let tcp = tokio::net::TcpStream::connect(proxy.address).await?;
    let (mut h2, connection) = h2::client::handshake(tcp).await?;
    let connection = tokio::spawn(connection);
    let request = axum::http::Request::get(proxy.url("/big")).body(())?;
    let (response, _) = h2.send_request(request, true)?;
    // Held, unread (a response dropped would cancel its stream).
    let response = response.await?;
    assert_eq!(response.status(), 200);
    // Without the bound the connection, and the upstream's, would stay open for good.
    let ended = tokio::time::timeout(Duration::from_secs(30), connection).await;
    assert!(
        ended.is_ok(),
        "the stalled h2 connection stayed open; log:\n{}",
        proxy.log_text()
    );
    drop(response);
    eventually("no client connection left", || async {
        Ok(proxy.metric_sum("sluicegate_proxy_connections").await? == 0)
    })
    .await?;
    assert!(proxy.log_text().contains("took nothing of an h2 response"));
    // Streams that are read are served as ever.
    let body = h2_client()?
        .get(proxy.url("/big"))
        .send()
        .await?
        .bytes()
        .await?;
    assert_eq!(
        body.len(),
        proxy_support::BIG_CHUNK.len() * proxy_support::BIG_CHUNKS
    );
    Ok(())
}

#[tokio::test]
async fn a_client_that_reads_nothing_of_its_response_is_closed() -> TestResult {
    use proxy_support::{BIG_CHUNK, BIG_CHUNKS};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::passing(&upstream, &["--client-send-timeout", "1s"])?;
    let whole = BIG_CHUNK.len() * BIG_CHUNKS;
    // A client that reads gets all of it.
    let body = client()
        .get(proxy.url("/big"))
        .send()
        .await?
        .bytes()
        .await?;
    assert_eq!(body.len(), whole);
    // One that asks and never reads: a small receive window, so that the proxy's writes wait
    // long before the 64 MiB could be buffered between the two.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut stalled = socket.connect(proxy.address).await?;
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    let open_connections = || proxy.metric_sum("sluicegate_proxy_connections");
    // Seen open first (it stays so for the timeout at least): the close below is its own.
    eventually("the client's connection open", || async {
        Ok(open_connections().await? == 1)
    })
    .await?;
    eventually("the client that does not read closed", || async {
        Ok(open_connections().await? == 0)
    })
    .await?;
    // What had reached its buffers is there, then the end: far from the whole response.
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stalled.read_to_end(&mut got)).await;
    assert!(got.len() < whole / 2, "{} bytes", got.len());
    // Clients that read are served as ever.
    assert_eq!(status(client().get(proxy.url("/"))).await?, 200);
    Ok(())
}
