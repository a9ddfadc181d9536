//! `--count-denied`: the service counts as envoyproxy/ratelimit does, every hit in every limit
//! the call names, even when denied; over real loopback gRPC and HTTP, in memory and on a real
//! redis-server, and as a program that refuses what it cannot count.
//!
//! Windows are a year long (aligned to multiples of 365 days since the epoch) so that no test
//! can straddle a window boundary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sluicegate_redis::FailurePolicy;
use sluicegate_redis::testing::RedisServer;
use sluicegate_rules::{LoadOptions, RuleSet};
use sluicegate_server::serve::{
    BackendOptions, Engine, EngineError, EngineOptions, Metrics, RedisSettings, RedisTarget,
};

mod loopback;

use loopback::{
    BoxError, OK, OVER_LIMIT, Service, TestResult, adds_header, wait_for_metric, write_atomically,
};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 3}
  - key: team
    rate_limit: {unit: year, requests_per_unit: 5, algorithm: gcra}
  - key: path
    value: /checkout
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: path
    value: /blocked
    rate_limit: {unit: year, requests_per_unit: 0}
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 2, algorithm: sliding-window}
"#;

/// A rule whose algorithm keeps no count of denied requests.
const SLIDING_LOG: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: year, requests_per_unit: 3, algorithm: sliding-log}\n";

fn counting(count_denied: bool) -> EngineOptions {
    EngineOptions {
        count_denied,
        ..EngineOptions::default()
    }
}

/// Where a scenario's services keep their counters: in memory, or on a redis-server started
/// for it (each service under a prefix of its own, so they share nothing but the server; a
/// failing Redis denies, so it cannot pass unnoticed).
enum Store {
    Memory,
    Redis(RedisServer),
}

impl Store {
    fn redis() -> Result<Store, BoxError> {
        Ok(Store::Redis(RedisServer::start()?))
    }

    fn options(&self, count_denied: bool, service: &str) -> EngineOptions {
        let backend = match self {
            Store::Memory => BackendOptions::Memory,
            Store::Redis(server) => BackendOptions::Redis(
                RedisSettings::new(RedisTarget::Single(server.url()))
                    .prefix(format!("{service}:"))
                    .timeout(Duration::from_secs(10))
                    .failure_policy(FailurePolicy::Closed),
            ),
        };
        EngineOptions {
            backend,
            ..counting(count_denied)
        }
    }
}

/// The overall code of each of a run of calls on one descriptor, one call per `hits`.
async fn codes(
    service: &mut Service,
    entries: &[(&str, &str)],
    hits: &[u32],
) -> Result<Vec<i32>, tonic::Status> {
    let mut codes = Vec::new();
    for &n in hits {
        codes.push(service.ask(&[entries], n).await?.overall_code);
    }
    Ok(codes)
}

#[tokio::test]
async fn denied_calls_still_count() -> TestResult {
    denied_calls_still_count_in(Store::Memory).await
}

#[tokio::test]
async fn denied_calls_still_count_on_redis() -> TestResult {
    denied_calls_still_count_in(Store::redis()?).await
}

async fn denied_calls_still_count_in(store: Store) -> TestResult {
    let mut service = Service::start(RULES, store.options(true, "counted")).await?;
    let alice = [("user", "alice")];
    assert_eq!(
        codes(&mut service, &alice, &[1, 1, 1, 1, 1]).await?,
        [OK, OK, OK, OVER_LIMIT, OVER_LIMIT]
    );
    let answer = service.ask(&[&alice], 1).await?;
    assert_eq!(answer.statuses[0].code, OVER_LIMIT);
    assert_eq!(answer.statuses[0].limit_remaining, 0);
    assert!(
        adds_header(&answer, "Retry-After"),
        "{:?}",
        answer.response_headers_to_add
    );

    // Two hits, then two more (denied: 4 > 3), then one: by default the counter is at 2 and
    // the last call passes; counting denials, it is at 4 and the call is denied.
    let bob = [("user", "bob")];
    assert_eq!(
        codes(&mut service, &bob, &[2, 2, 1]).await?,
        [OK, OVER_LIMIT, OVER_LIMIT]
    );
    let mut default = Service::start(RULES, store.options(false, "default")).await?;
    assert_eq!(
        codes(&mut default, &bob, &[2, 2, 1]).await?,
        [OK, OVER_LIMIT, OK]
    );

    // The same over JSON: one budget, a 429 when over.
    let body = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}"#;
    let url = format!("http://{}/json", service.server.http_addr);
    let response = service.http.post(url).body(body).send().await?;
    assert_eq!(response.status().as_u16(), 429);

    // A bucket algorithm counts its denials too: 5 a year, 3 + 3 (denied) + 1 (denied).
    let team = [("team", "t")];
    assert_eq!(
        codes(&mut service, &team, &[3, 3, 1]).await?,
        [OK, OVER_LIMIT, OVER_LIMIT]
    );
    assert_eq!(
        codes(&mut default, &team, &[3, 3, 1]).await?,
        [OK, OVER_LIMIT, OK]
    );
    service.server.shutdown().await?;
    default.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn every_descriptor_of_a_call_is_charged() -> TestResult {
    every_descriptor_of_a_call_is_charged_in(Store::Memory).await
}

#[tokio::test]
async fn every_descriptor_of_a_call_is_charged_on_redis() -> TestResult {
    every_descriptor_of_a_call_is_charged_in(Store::redis()?).await
}

async fn every_descriptor_of_a_call_is_charged_in(store: Store) -> TestResult {
    let mut service = Service::start(RULES, store.options(true, "counted")).await?;
    let checkout = [("path", "/checkout")];
    let answer = service.ask(&[&[("user", "carol")], &checkout], 0).await?;
    assert_eq!(answer.overall_code, OK);
    // The checkout limit is spent: the call is denied, but dave's own limit is charged.
    let answer = service.ask(&[&[("user", "dave")], &checkout], 0).await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[1].code),
        (OK, OVER_LIMIT)
    );
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    // Dave has 2 left, not 3: three hits are denied (and charged: now 4 of 3).
    assert_eq!(
        codes(&mut service, &[("user", "dave")], &[3, 1]).await?,
        [OVER_LIMIT, OVER_LIMIT]
    );
    // A limit that can never pass answers OVER_LIMIT; the call's other limits are charged.
    let answer = service
        .ask(&[&[("user", "erin")], &[("path", "/blocked")]], 0)
        .await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    // More hits than a limit holds: over the limit, and charged to the other limits only.
    let answer = service
        .ask(&[&[("user", "erin")], &[("team", "x")]], 4)
        .await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[1].code),
        (OVER_LIMIT, OK)
    );
    assert_eq!(answer.statuses[1].limit_remaining, 1);
    assert_eq!(
        codes(&mut service, &[("team", "x")], &[1, 1]).await?,
        [OK, OVER_LIMIT]
    );
    service.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn shadow_mode_still_answers_ok_and_counts() -> TestResult {
    shadow_mode_still_answers_ok_and_counts_in(Store::Memory).await
}

#[tokio::test]
async fn shadow_mode_still_answers_ok_and_counts_on_redis() -> TestResult {
    shadow_mode_still_answers_ok_and_counts_in(Store::redis()?).await
}

async fn shadow_mode_still_answers_ok_and_counts_in(store: Store) -> TestResult {
    let mut service = Service::start(RULES, store.options(true, "counted")).await?;
    let shadow = [("path", "/shadow")];
    assert_eq!(
        codes(&mut service, &shadow, &[1, 1, 1, 1]).await?,
        [OK, OK, OK, OK]
    );
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("outcome=\"shadow_over_limit\"} 2"),
        "{metrics}"
    );
    // A shadow limit is charged even when an enforcing limit of the call denies.
    let answer = service
        .ask(&[&[("path", "/checkout")], &[("user", "frank")]], 1)
        .await?;
    assert_eq!(answer.overall_code, OK);
    let answer = service
        .ask(&[&[("path", "/checkout")], &[("path", "/shadow")]], 1)
        .await?;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(answer.statuses[1].code, OK);
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("outcome=\"shadow_over_limit\"} 3"),
        "{metrics}"
    );

    // Global shadow mode: always OK, still counting.
    let mut global = Service::start(
        RULES,
        EngineOptions {
            shadow_mode: true,
            ..store.options(true, "global")
        },
    )
    .await?;
    let gina = [("user", "gina")];
    assert_eq!(codes(&mut global, &gina, &[2, 2]).await?, [OK, OK]);
    // At 4 of 3 (by default it would be at 2, and one more hit would be under the limit).
    let answer = global.ask(&[&gina], 1).await?;
    assert_eq!(answer.overall_code, OK);
    assert_eq!(answer.statuses[0].code, OVER_LIMIT);
    service.server.shutdown().await?;
    global.server.shutdown().await?;
    Ok(())
}

/// The families and label sets `/metrics` shows, without their values.
fn shape(metrics: &str) -> Vec<String> {
    let mut lines: Vec<String> = metrics
        .lines()
        .filter(|line| !line.starts_with('#') || line.starts_with("# TYPE"))
        .map(|line| {
            line.rsplit_once(' ')
                .map_or(line, |(name, _)| name)
                .to_owned()
        })
        .filter(|line| !line.contains("_bucket{") && !line.contains("le="))
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[tokio::test]
async fn metrics_keep_their_shape() -> TestResult {
    let mut counted = Service::start(RULES, counting(true)).await?;
    let mut default = Service::start(RULES, counting(false)).await?;
    for service in [&mut counted, &mut default] {
        codes(service, &[("user", "hal")], &[3, 1]).await?;
        codes(service, &[("path", "/shadow")], &[2, 1]).await?;
        codes(service, &[("path", "/blocked")], &[1]).await?;
        codes(service, &[("nothing", "here")], &[1]).await?;
    }
    let (a, b) = (
        counted.get("/metrics").await?,
        default.get("/metrics").await?,
    );
    assert_eq!(shape(&a), shape(&b), "{a}\n---\n{b}");
    assert!(a.contains("outcome=\"over_limit\""), "{a}");
    counted.server.shutdown().await?;
    default.server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_reload_to_an_algorithm_that_cannot_count_keeps_the_old_rules() -> TestResult {
    let mut service = Service::start(RULES, counting(true)).await?;
    assert_eq!(
        codes(&mut service, &[("user", "ivy")], &[3, 1]).await?,
        [OK, OVER_LIMIT]
    );
    write_atomically(&service.dir.path().join("rules.yaml"), SLIDING_LOG)?;
    wait_for_metric(
        &service,
        "sluicegate_config_loads_total{kind=\"failure\"} 1",
    )
    .await?;
    let metrics = service.get("/metrics").await?;
    assert!(
        metrics.contains("sluicegate_config_loads_total{kind=\"success\"} 1"),
        "only the start counts as a success: {metrics}"
    );
    let config = service.get("/rlconfig").await?;
    assert!(!config.contains("sliding-log"), "{config}");
    assert!(config.contains("shop.team"), "{config}");
    // The old rules and their counters stay: ivy is still over, at 4 of 3.
    assert_eq!(
        codes(&mut service, &[("user", "ivy")], &[1]).await?,
        [OVER_LIMIT]
    );
    service.server.shutdown().await?;
    Ok(())
}

#[test]
fn the_engine_names_the_rule_it_cannot_count() -> TestResult {
    let file = std::path::PathBuf::from("rules/shop.yaml");
    let rules = RuleSet::from_sources(&[(file, SLIDING_LOG.to_owned())], &LoadOptions::default())?;
    let refused = Engine::new(rules.clone(), counting(true), Metrics::new().into())
        .expect_err("sliding-log cannot count denials");
    assert!(
        matches!(
            refused,
            EngineError::CannotCountDenied {
                algorithm: "sliding-log",
                ..
            }
        ),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.starts_with("rules/shop.yaml:3:5: shop.user: algorithm sliding-log"),
        "{message}"
    );
    assert!(Engine::new(rules, counting(false), Metrics::new().into()).is_ok());
    Ok(())
}

/// Runs `sluicegate serve ARGS` (with `envs`) to its exit, which must come: it is refused at
/// start. Returns the exit code and the standard error.
fn serve_refused(
    rules: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(Option<i32>, String), BoxError> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .arg("serve")
        .arg("--config")
        .arg(rules)
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    // Bounded (a refusal takes milliseconds; a service that started would never exit).
    for _ in 0..600 {
        if child.try_wait()?.is_some() {
            let output = child.wait_with_output()?;
            return Ok((
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill()?;
    child.wait()?;
    Err(format!("serve {args:?} started instead of refusing").into())
}

#[test]
fn the_program_refuses_what_it_cannot_count() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (missing_code, _) = serve_refused(&dir.path().join("missing.yaml"), &[], &[])?;
    assert_ne!(missing_code, Some(0));

    let log = dir.path().join("log.yaml");
    std::fs::write(&log, SLIDING_LOG)?;
    let (code, stderr) = serve_refused(&log, &["--count-denied"], &[])?;
    assert_eq!(code, missing_code, "{stderr}");
    assert!(
        stderr.contains("log.yaml:3:5: shop.user: algorithm sliding-log cannot count denied"),
        "{stderr}"
    );
    Ok(())
}
