//! `GET /admin/stats` of both applications, read from the built binary over loopback, against
//! the shape the README documents ("Live page and manual switch"): every field it names and no
//! other, each of its documented type, in memory and on a real redis-server. Scripts read this
//! JSON, so a field renamed, moved or retyped in either application fails here.

mod proxy_support;
mod serve_process;

use std::net::SocketAddr;

use serde_json::{Value, json};
use sluicegate_redis::testing::RedisServer;

use proxy_support::{BoxError, ProxyProcess, Upstream};
use serve_process::ServeProcess;

type TestResult = Result<(), BoxError>;

/// Each JSON value replaced by its type's name; an array by the distinct shapes of its
/// elements, so that a series of 300 numbers reads `["number"]`.
fn shape(value: &Value) -> Value {
    match value {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = Vec::new();
            for item in items.iter().map(shape) {
                if !shapes.contains(&item) {
                    shapes.push(item);
                }
            }
            Value::Array(shapes)
        }
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, value)| (name.clone(), shape(value)))
                .collect(),
        ),
    }
}

/// The documented shape. `backend` is the store's; what an application does not keep
/// (the proxy's latency and key count) is `null`, its most limited keys an empty list.
fn documented(backend: Value, kept: &str, top_limited: Value) -> Value {
    json!({
        "now": "number",
        "window_seconds": "number",
        "modes": {"*": "string"},
        "backend": backend,
        "latency_micros": {"p50": kept, "p90": kept, "p99": kept, "p999": kept},
        "keys": {"live": kept, "max": kept},
        "rules": [{
            "id": "string",
            "domain": "string",
            "file": "string",
            "line": "number",
            "column": "number",
            "mode": "string",
            "shadow_mode": "bool",
            "end_second": "number",
            "allowed": ["number"],
            "denied": ["number"],
            "shadow_denied": ["number"],
            "near_limit": ["number"],
            "top_limited": top_limited,
        }],
    })
}

fn in_memory() -> Value {
    json!({
        "store": "string",
        "errors": "number",
        "reloads": {"success": "number", "failure": "number"},
    })
}

fn on_redis() -> Value {
    json!({
        "store": "string",
        "redis_up": "bool",
        "failure_policy": "string",
        "errors": "number",
        "reloads": {"success": "number", "failure": "number"},
        "over_limit_cache": {"capacity": "number", "entries": "number", "hits": "number"},
        "leasing": {
            "on": "bool", "leases": "number", "local_grants": "number",
            "permits_returned": "number", "permits_expired_unused": "number",
            "permits_held": "number"
        },
    })
}

/// Every field name of a shape, nested ones included.
fn field_names(shape: &Value, names: &mut Vec<String>) {
    match shape {
        Value::Object(fields) => {
            for (name, value) in fields {
                names.push(name.clone());
                field_names(value, names);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| field_names(item, names)),
        _ => {}
    }
}

/// The shapes this test holds name no field the README's description leaves out: the test
/// and the documentation describe one contract.
#[test]
fn the_shapes_checked_are_the_documented_ones() -> TestResult {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))?;
    let start = readme
        .find("`GET /admin/stats` answers one JSON object")
        .ok_or("the README no longer describes /admin/stats")?;
    let paragraph = &readme[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let mut names = Vec::new();
    let item = json!([{"key": "string", "count": "number"}]);
    field_names(&documented(on_redis(), "number", item), &mut names);
    field_names(&in_memory(), &mut names);
    for name in names.iter().filter(|name| name.as_str() != "*") {
        assert!(
            mentions(paragraph, name),
            "{name} is not documented in:\n{paragraph}"
        );
    }
    Ok(())
}

/// Whether `text` has `word` as a whole word (`p99` is not `p999`).
fn mentions(text: &str, word: &str) -> bool {
    let part_of_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(part_of_word) && !after.is_some_and(part_of_word)
    })
}

/// The checks common to both applications beyond the shape: the documented values.
fn check_values(stats: &Value, store: &str) {
    assert_eq!(stats["window_seconds"], 300, "{stats}");
    assert_eq!(stats["backend"]["store"], store, "{stats}");
    assert_eq!(stats["modes"]["*"], "enforce", "{stats}");
    for rule in stats["rules"].as_array().into_iter().flatten() {
        for series in ["allowed", "denied", "shadow_denied", "near_limit"] {
            assert_eq!(rule[series].as_array().map(Vec::len), Some(300), "{rule}");
        }
    }
}

async fn get_stats(admin: SocketAddr) -> Result<Value, BoxError> {
    let body = reqwest::get(format!("http://{admin}/admin/stats"))
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    Ok(serde_json::from_slice(&body)?)
}

const SERVE_RULES: &str = "
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// One hit for `user` on the service at `http`, over `POST /json`; the HTTP status.
async fn hit(http: SocketAddr, user: &str) -> Result<u16, BoxError> {
    let body = json!({
        "domain": "shop",
        "descriptors": [{"entries": [{"key": "user", "value": user}]}],
    });
    let response = reqwest::Client::new()
        .post(format!("http://{http}/json"))
        .body(body.to_string())
        .send()
        .await?;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn serve_answers_the_documented_shape_in_memory_and_on_redis() -> TestResult {
    let redis = RedisServer::start()?;
    let redis_url = redis.url();
    let on_redis_args = ["--redis", &redis_url, "--failure-policy", "closed"];
    for (extra, backend, store) in [
        (&[][..], in_memory(), "memory"),
        (&on_redis_args[..], on_redis(), "redis"),
    ] {
        let serve = ServeProcess::start(SERVE_RULES, extra)?;
        // One allowed, one denied: a latency, a live key and a most limited key to show.
        assert_eq!(hit(serve.http, "ann").await?, 200, "{store}");
        assert_eq!(hit(serve.http, "ann").await?, 429, "{store}");
        let stats = get_stats(serve.admin).await?;
        let item = json!([{"key": "string", "count": "number"}]);
        assert_eq!(
            shape(&stats),
            documented(backend, "number", item),
            "{store}: {stats}"
        );
        check_values(&stats, store);
        assert_eq!(stats["rules"][0]["id"], "shop.user", "{stats}");
        assert_eq!(stats["rules"][0]["top_limited"][0]["count"], 1, "{stats}");
        if store == "redis" {
            assert_eq!(stats["backend"]["failure_policy"], "closed", "{stats}");
        }
    }
    Ok(())
}

const PROXY_RULES: &str = "
limits:
  hourly: { key: global, spec: \"gcra:rate=1/h,burst=1\" }
routes:
  - { name: api, prefix: /api/, limits: [hourly], status: 429 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_answers_the_documented_shape_in_memory_and_on_redis() -> TestResult {
    let upstream = Upstream::start().await?;
    let redis = RedisServer::start()?;
    let redis_url = redis.url();
    let on_redis_args = ["--redis", &redis_url, "--failure-policy", "closed"];
    let on_redis_rules = format!("backend: redis\n{PROXY_RULES}");
    for (rules, extra, backend, store) in [
        (PROXY_RULES, &[][..], in_memory(), "memory"),
        (
            on_redis_rules.as_str(),
            &on_redis_args[..],
            on_redis(),
            "redis",
        ),
    ] {
        let proxy = ProxyProcess::start(&upstream.url(), rules, extra)?;
        for expected in [200, 429] {
            let status = reqwest::get(proxy.url("/api/")).await?.status().as_u16();
            assert_eq!(status, expected, "{store}");
        }
        let stats = get_stats(proxy.admin).await?;
        assert_eq!(
            shape(&stats),
            documented(backend, "null", json!([])),
            "{store}: {stats}"
        );
        check_values(&stats, store);
        assert_eq!(stats["rules"][0]["id"], "api", "{stats}");
        assert_eq!(stats["rules"][0]["domain"], "proxy", "{stats}");
    }
    Ok(())
}
