//! The same request schedule sent to Debian's nginx (`limit_req` without burst, with burst,
//! burst + nodelay, burst + delay=, and `limit_conn`) and to `sluicegate proxy` with the
//! equivalent rules (examples/proxy/ has them side by side), both in front of the same
//! upstream: every request must get the same outcome, pass, delay or reject.
//!
//! The rate is 2 r/s (a token every 500 ms). Requests of a group are sent 20 ms apart, and
//! groups far apart, so every decision has a wide margin: a delay is at least 400 ms where one
//! is due and none otherwise (classified against 250 ms, half a token), and no request comes
//! within 100 ms of the instant its decision would flip.
//!
//! Within one group the order of arrival is the scheduler's choice, not the server's (each
//! request opens its own connection, and on a busy machine the second of two requests 20 ms
//! apart can land first), so a group's outcomes are compared as a multiset.

mod proxy_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proxy_support::{BoxError, Nginx, ProxyProcess, Upstream};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Pass,
    Delay,
    Reject,
}

/// Half a token at 2 r/s.
const HALF_TOKEN: Duration = Duration::from_millis(250);

/// A request at `at` (from the schedule's start) for `path`, sent together with the other
/// steps of the same `group_ms` (the group's start).
struct Step {
    at_ms: u64,
    group_ms: u64,
    path: &'static str,
}

/// `outcomes` with each group's sorted, so that two servers (or a server and the expectation)
/// compare equal when they differ only in which request of a group came first.
fn per_group_multiset(steps: &[Step], outcomes: &[Outcome]) -> Vec<Outcome> {
    assert_eq!(steps.len(), outcomes.len(), "one outcome per step");
    let mut normalized = outcomes.to_vec();
    let mut start = 0;
    while start < steps.len() {
        let group = steps[start].group_ms;
        let end = start
            + steps[start..]
                .iter()
                .take_while(|step| step.group_ms == group)
                .count();
        normalized[start..end].sort_unstable();
        start = end;
    }
    normalized
}

fn group(start_ms: u64, count: u64, path: &'static str) -> Vec<Step> {
    (0..count)
        .map(|i| Step {
            at_ms: start_ms + 20 * i,
            group_ms: start_ms,
            path,
        })
        .collect()
}

/// Sends `steps` to `address` on schedule, each on its own connection-pooled request, and
/// classifies each answer.
async fn run(address: SocketAddr, steps: &[Step]) -> Result<Vec<Outcome>, BoxError> {
    let client = reqwest::Client::new();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for step in steps {
        let due = start + Duration::from_millis(step.at_ms);
        tokio::time::sleep_until(due.into()).await;
        let request = client.get(format!("http://{address}{}", step.path));
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let response = request.send().await?;
            let status = response.status().as_u16();
            response.bytes().await?;
            let elapsed = sent.elapsed();
            Ok::<_, BoxError>(match status {
                200 if elapsed > HALF_TOKEN => Outcome::Delay,
                200 => Outcome::Pass,
                503 => Outcome::Reject,
                other => return Err(format!("unexpected status {other}").into()),
            })
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await??);
    }
    Ok(outcomes)
}

const NGINX: &str = r#"
limit_req_zone $binary_remote_addr zone=noburst:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=burst:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=nodelay:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=delay:1m rate=2r/s;
limit_conn_zone $binary_remote_addr zone=conn:1m;
upstream app { server UPSTREAM; keepalive 16; }
server {
    listen LISTEN;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /noburst/ { limit_req zone=noburst; proxy_pass http://app; }
    location /burst/ { limit_req zone=burst burst=2; proxy_pass http://app; }
    location /nodelay/ { limit_req zone=nodelay burst=3 nodelay; proxy_pass http://app; }
    location /delay/ { limit_req zone=delay burst=4 delay=2; proxy_pass http://app; }
    location /conn/ { limit_conn conn 1; proxy_pass http://app; }
}
"#;

const SLUICEGATE: &str = r#"
limits:
  noburst: { key: peer_ip, spec: "leaky-queue:rate=2/s" }
  burst: { key: peer_ip, spec: "leaky-queue:rate=2/s,burst=2" }
  nodelay: { key: peer_ip, spec: "leaky-queue:rate=2/s,burst=3,nodelay" }
  delay: { key: peer_ip, spec: "leaky-queue:rate=2/s,burst=4,delay=2" }
  conn: { key: peer_ip, spec: "concurrency:limit=1" }
routes:
  - { prefix: /noburst/, limits: [noburst], status: 503 }
  - { prefix: /burst/, limits: [burst], status: 503 }
  - { prefix: /nodelay/, limits: [nodelay], status: 503 }
  - { prefix: /delay/, limits: [delay], status: 503 }
  - { prefix: /conn/, limits: [conn], conn_status: 503 }
"#;

/// Each scenario's schedule and the outcomes nginx's documentation implies (checked too, so
/// that two servers agreeing on something unexpected is caught).
fn scenarios() -> Vec<(&'static str, Vec<Step>, Vec<Outcome>)> {
    use Outcome::{Delay, Pass, Reject};
    let mut out = Vec::new();
    // No burst: one request per token; 100 ms after a pass is too soon, 750 ms is not.
    let mut steps = group(0, 3, "/noburst/");
    steps.extend(group(140, 1, "/noburst/"));
    steps.extend(group(750, 1, "/noburst/"));
    steps.extend(group(850, 1, "/noburst/"));
    steps.extend(group(1600, 1, "/noburst/"));
    out.push((
        "limit_req (no burst)",
        steps,
        vec![Pass, Reject, Reject, Reject, Pass, Reject, Pass],
    ));
    // burst=2: the first passes, two wait their turn, the fourth is rejected; after the
    // queue drained (1.5 s + a token), the same again.
    let mut steps = group(0, 4, "/burst/");
    steps.extend(group(2500, 4, "/burst/"));
    out.push((
        "limit_req burst=2",
        steps,
        vec![Pass, Delay, Delay, Reject, Pass, Delay, Delay, Reject],
    ));
    // burst=3 nodelay: four at once, the fifth rejected; 750 ms later one more fits.
    let mut steps = group(0, 5, "/nodelay/");
    steps.extend(group(830, 1, "/nodelay/"));
    out.push((
        "limit_req burst=3 nodelay",
        steps,
        vec![Pass, Pass, Pass, Pass, Reject, Pass],
    ));
    // burst=4 delay=2: three at once, two delayed, the sixth rejected.
    out.push((
        "limit_req burst=4 delay=2",
        group(0, 6, "/delay/"),
        vec![Pass, Pass, Pass, Delay, Delay, Reject],
    ));
    // limit_conn 1: a request held 1.5 s by the upstream takes the only slot; one sent
    // meanwhile is rejected; one sent after it ended passes.
    let conn = vec![
        Step {
            at_ms: 0,
            group_ms: 0,
            path: "/conn/held?hold_ms=1500",
        },
        Step {
            at_ms: 500,
            group_ms: 500,
            path: "/conn/meanwhile",
        },
        Step {
            at_ms: 2500,
            group_ms: 2500,
            path: "/conn/after",
        },
    ];
    out.push(("limit_conn 1", conn, vec![Delay, Reject, Pass]));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sluicegate_proxy_decides_as_nginx_limit_req_and_limit_conn() -> Result<(), BoxError> {
    let upstream = Upstream::start().await?;
    let nginx = Nginx::start(&NGINX.replace("UPSTREAM", &upstream.address.to_string()))?;
    let proxy = ProxyProcess::start(&upstream.url(), SLUICEGATE, &[])?;

    // Every scenario on both servers at once: their zones and limits are all separate.
    let mut runs = Vec::new();
    for (name, steps, expected) in scenarios() {
        let steps = std::sync::Arc::new(steps);
        for (server, address) in [("nginx", nginx.address), ("sluicegate", proxy.address)] {
            let steps_run = std::sync::Arc::clone(&steps);
            let handle = tokio::spawn(async move { run(address, &steps_run).await });
            runs.push((
                name,
                server,
                std::sync::Arc::clone(&steps),
                expected.clone(),
                handle,
            ));
        }
    }
    let mut failures = Vec::new();
    let mut by_scenario: std::collections::HashMap<&str, Vec<Outcome>> = Default::default();
    for (name, server, steps, expected, handle) in runs {
        let arrived = handle.await??;
        let outcomes = per_group_multiset(&steps, &arrived);
        if outcomes != per_group_multiset(&steps, &expected) {
            failures.push(format!(
                "{name} on {server}: {arrived:?}, expected {expected:?}"
            ));
        }
        if let Some(other) = by_scenario.insert(name, outcomes.clone()) {
            if other != outcomes {
                failures.push(format!(
                    "{name}: nginx {other:?} vs sluicegate {outcomes:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nnginx errors:\n{}",
        failures.join("\n"),
        nginx.errors()
    );
    Ok(())
}
