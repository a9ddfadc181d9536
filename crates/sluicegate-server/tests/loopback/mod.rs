//! A `sluicegate serve` on loopback ports, with a real gRPC client and a real HTTP client:
//! the harness of the service's tests in memory, on Redis and with `--count-denied`.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluicegate::{ManualClock, Micros};
use sluicegate_redis::FailurePolicy;
use sluicegate_redis::testing::RedisServer;
use sluicegate_server::serve::{
    BackendOptions, EngineOptions, RedisSettings, RedisTarget, RunningServer, ServerConfig,
    ServiceClock, start,
};
use tonic::transport::Channel;

/// Any error of a test.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A test's outcome.
pub type TestResult = Result<(), BoxError>;

/// The overall and per-descriptor codes of Envoy's answer.
pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;

/// A bound on one call, against a hang: generous, so a loaded machine never trips it. Answers
/// are asserted, never elapsed times.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// The time every service under test starts at: 2026-01-01T00:00:00.25Z, a quarter second
/// into a fresh second, minute, hour and day. The services run on a manual clock from there,
/// so no test depends on where a real second or minute boundary falls.
pub const START: Micros = 1_767_225_600_250_000;

/// A running service and its clients; the rules directory lives as long as it does.
pub struct Service {
    pub server: RunningServer,
    /// The service's clock: moves only when a test moves it.
    pub clock: ManualClock,
    pub grpc: RateLimitServiceClient<Channel>,
    pub http: reqwest::Client,
    pub dir: tempfile::TempDir,
}

impl Service {
    /// Serves `rules`, written as `rules.yaml` in a fresh directory, with `engine`.
    pub async fn start(rules: &str, engine: EngineOptions) -> Result<Service, BoxError> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("rules.yaml"), rules)?;
        Self::start_in(dir, engine).await
    }

    /// Serves the rules in `dir` with `engine` on a manual clock at [`START`], reloading them
    /// every 20ms.
    pub async fn start_in(
        dir: tempfile::TempDir,
        mut engine: EngineOptions,
    ) -> Result<Service, BoxError> {
        let (service_clock, clock) = ServiceClock::manual(START);
        engine.clock = service_clock;
        let server = start(ServerConfig {
            engine,
            reload_interval: Duration::from_millis(20),
            ..ServerConfig::on_free_loopback_ports(dir.path())
        })
        .await?;
        let grpc = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr)).await?;
        Ok(Service {
            server,
            clock,
            grpc,
            http: reqwest::Client::new(),
            dir,
        })
    }

    /// The URL of `path` on the HTTP listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.http_addr)
    }

    /// One gRPC call in the domain `shop`; a call that hangs is an error.
    pub async fn ask(
        &mut self,
        descriptors: &[&[(&str, &str)]],
        hits: u32,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.send(request(descriptors, hits)).await
    }

    /// One gRPC call; a call that hangs is an error.
    pub async fn send(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let call = self.grpc.should_rate_limit(request);
        match tokio::time::timeout(CALL_BOUND, call).await {
            Ok(answer) => Ok(answer?.into_inner()),
            Err(_) => Err(tonic::Status::deadline_exceeded("the call hung")),
        }
    }

    /// The overall code of one call.
    pub async fn code(&mut self, descriptors: &[&[(&str, &str)]]) -> Result<i32, tonic::Status> {
        Ok(self.ask(descriptors, 0).await?.overall_code)
    }

    /// `POST /json` with `body`: the status, the headers and the body of the answer.
    pub async fn post_json(
        &self,
        body: &str,
    ) -> Result<(u16, reqwest::header::HeaderMap, String), reqwest::Error> {
        let response = self
            .http
            .post(self.url("/json"))
            .body(body.to_owned())
            .send()
            .await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Ok((status, headers, response.text().await?))
    }

    /// The URL of `path` on the admin listener.
    pub fn admin_url(&self, path: &str) -> Result<String, BoxError> {
        let address = self.server.admin_addr.ok_or("no admin listener")?;
        Ok(format!("http://{address}{path}"))
    }

    /// `PUT /admin/mode` setting `rule` to `mode`: the status and the body.
    pub async fn set_mode(&self, rule: &str, mode: &str) -> Result<(u16, String), BoxError> {
        let body = serde_json::json!({"rule": rule, "mode": mode}).to_string();
        let response = self
            .http
            .put(self.admin_url("/admin/mode")?)
            .body(body)
            .send()
            .await?;
        Ok((response.status().as_u16(), response.text().await?))
    }

    /// The body of `GET path`.
    pub async fn get(&self, path: &str) -> Result<String, reqwest::Error> {
        self.http.get(self.url(path)).send().await?.text().await
    }
}

/// Whether Envoy is told to add the header `key` to the answer.
pub fn adds_header(answer: &RateLimitResponse, key: &str) -> bool {
    answer.response_headers_to_add.iter().any(|h| h.key == key)
}

/// A request in the domain `shop`.
pub fn request(descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shop".into(),
        descriptors: descriptors
            .iter()
            .map(|entries| descriptor(entries))
            .collect(),
        hits_addend: hits,
    }
}

/// A descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// Waits (bounded: the reload loop polls every 20ms; up to 10s on a loaded machine) until
/// `/rlconfig` shows `needle`; returns the rules it showed.
pub async fn wait_for_rules(service: &Service, needle: &str) -> Result<String, BoxError> {
    for _ in 0..500 {
        let config = service.get("/rlconfig").await?;
        if config.contains(needle) {
            return Ok(config);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("rules never showed {needle:?}").into())
}

/// Waits (bounded, as [`wait_for_rules`]) until `/metrics` shows `needle`.
pub async fn wait_for_metric(service: &Service, needle: &str) -> TestResult {
    for _ in 0..500 {
        if service.get("/metrics").await?.contains(needle) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("metrics never showed {needle:?}").into())
}

/// Replaces `file` with `text` in one rename, so the reload loop never reads half a file.
/// The value of `series` (a name without labels) in `/metrics` text, if present.
pub fn metric_value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

pub fn write_atomically(file: &std::path::Path, text: &str) -> std::io::Result<()> {
    let temp = file.with_extension("tmp");
    std::fs::write(&temp, text)?;
    std::fs::rename(temp, file)
}

/// The same rules served twice: in memory, and on a real redis-server (kept alive by the
/// returned guard; `closed` policy, a generous timeout).
pub async fn in_memory_and_on_redis(
    rules: &str,
) -> Result<Vec<(Service, Option<RedisServer>)>, BoxError> {
    let memory = Service::start(rules, EngineOptions::default()).await?;
    let redis = RedisServer::start()?;
    let on_redis = EngineOptions {
        backend: BackendOptions::Redis(
            RedisSettings::new(RedisTarget::Single(redis.url()))
                .prefix("sluicegate:")
                .timeout(Duration::from_secs(5))
                .failure_policy(FailurePolicy::Closed),
        ),
        ..EngineOptions::default()
    };
    let shared = Service::start(rules, on_redis).await?;
    Ok(vec![(memory, None), (shared, Some(redis))])
}

/// Which store a service of [`in_memory_and_on_redis`] uses, for assertion messages.
pub fn store_name(redis: &Option<RedisServer>) -> &'static str {
    if redis.is_some() { "redis" } else { "memory" }
}
