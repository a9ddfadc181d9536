//! `sluicegate proxy --redis`: several proxies in front of one upstream keep one budget in a
//! real `redis-server`; Redis stopped, restarted, or down at start under each failure policy;
//! rule files that cannot be kept in Redis refused at their place.

mod proxy_support;

use proxy_support::{BoxError, ProxyProcess, Upstream, eventually, start_refused};
use sluicegate_redis::testing::RedisServer;

type TestResult = Result<(), BoxError>;

/// Three requests per user (`x-user`) an hour, and a concurrency limit the proxy keeps.
const RULES: &str = r#"
backend: redis
limits:
  per_user: { key: { header: x-user }, spec: "gcra:rate=3/h,burst=3" }
  in_flight: { key: global, spec: "concurrency:limit=100" }
routes:
  - { prefix: /, limits: [per_user, in_flight] }
"#;

fn on_redis<'a>(redis: &'a str, policy: &'a str) -> [&'a str; 4] {
    ["--redis", redis, "--failure-policy", policy]
}

async fn status(proxy: &ProxyProcess, user: &str) -> Result<u16, BoxError> {
    let response = reqwest::Client::new()
        .get(proxy.url("/"))
        .header("x-user", user)
        .send()
        .await?;
    Ok(response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_on_one_redis_share_one_budget() -> TestResult {
    let redis = RedisServer::start()?;
    let upstream = Upstream::start().await?;
    let one = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&redis.url(), "closed"))?;
    let two = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&redis.url(), "closed"))?;
    // Alice's three requests, through either proxy, are one budget.
    assert_eq!(status(&one, "alice").await?, 200);
    assert_eq!(status(&two, "alice").await?, 200);
    assert_eq!(status(&one, "alice").await?, 200);
    assert_eq!(status(&two, "alice").await?, 429);
    assert_eq!(status(&one, "alice").await?, 429);
    // Bob's is his own.
    assert_eq!(status(&two, "bob").await?, 200);
    // The counters are in Redis, under the limit's name.
    let store = redis
        .store(sluicegate_redis::StoreConfig::default())
        .await?;
    let keys: Vec<String> = store.command(redis::cmd("KEYS").arg("*")).await?;
    // The key's parts end with a NUL byte.
    assert!(
        keys.iter()
            .any(|k| k.starts_with("sluicegate:{alice\0}per_user")),
        "{keys:?}"
    );
    // The concurrency limit stays in each proxy: nothing of it in Redis.
    assert!(!keys.iter().any(|k| k.contains("in_flight")), "{keys:?}");
    assert_eq!(
        one.metric_sum("sluicegate_proxy_backend_errors_total")
            .await?,
        0
    );
    assert!(
        !one.log_text().contains("redis failed"),
        "{}",
        one.log_text()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_over_limit_cache_a_user_over_the_limit_is_answered_in_the_proxy() -> TestResult {
    let redis = RedisServer::start()?;
    let upstream = Upstream::start().await?;
    let url = redis.url();
    let mut args = on_redis(&url, "closed").to_vec();
    args.extend(["--redis-over-limit-cache", "100"]);
    let proxy = ProxyProcess::start(&upstream.url(), RULES, &args)?;
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(status(&proxy, "alice").await?);
    }
    assert_eq!(seen, [200, 200, 200, 429, 429, 429, 429]);
    // The first denial came from Redis; the next three from the cache, which holds one.
    let hits = "sluicegate_proxy_redis_over_limit_cache_hits_total";
    assert_eq!(proxy.metric_sum(hits).await?, 3);
    let entries = "sluicegate_proxy_redis_over_limit_cache_entries";
    assert_eq!(proxy.metric_sum(entries).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_in_redis_gives_back_the_proxys_concurrency_permit() -> TestResult {
    let redis = RedisServer::start()?;
    let upstream = Upstream::start().await?;
    let rules = RULES.replace("concurrency:limit=100", "concurrency:limit=1");
    let proxy = ProxyProcess::start(&upstream.url(), &rules, &on_redis(&redis.url(), "closed"))?;
    // Without `x-user` only the concurrency limit counts: a probe that costs Redis nothing.
    let permit_free = || async {
        let response = reqwest::Client::new().get(proxy.url("/")).send().await?;
        Ok(response.status().as_u16() == 200)
    };
    for _ in 0..3 {
        eventually("carol passes", || async {
            Ok(status(&proxy, "carol").await? == 200)
        })
        .await?;
    }
    // Carol is denied in Redis after the proxy took its one permit: the permit comes back.
    for _ in 0..3 {
        eventually("the permit is free", permit_free).await?;
        assert_eq!(status(&proxy, "carol").await?, 429);
    }
    eventually("the permit is free after the denials", permit_free).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_then_restarted_under_each_policy() -> TestResult {
    let mut redis = RedisServer::start()?;
    let upstream = Upstream::start().await?;
    let url = redis.url();
    let open = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&url, "open"))?;
    let closed = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&url, "closed"))?;
    let local = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&url, "local"))?;
    for _ in 0..3 {
        assert_eq!(status(&open, "frank").await?, 200);
    }
    assert_eq!(status(&closed, "frank").await?, 429);
    assert_eq!(status(&local, "frank").await?, 429);

    redis.stop();
    // open lets a spent budget through; closed denies a fresh one; local counts in its own
    // memory, from a fresh budget.
    assert_eq!(status(&open, "frank").await?, 200);
    assert_eq!(status(&closed, "hank").await?, 429);
    for _ in 0..3 {
        assert_eq!(status(&local, "frank").await?, 200);
    }
    assert_eq!(status(&local, "frank").await?, 429);
    // Past the breaker (three failures in a row), the same answers, without asking Redis.
    for _ in 0..4 {
        assert_eq!(status(&open, "frank").await?, 200);
        assert_eq!(status(&closed, "hank").await?, 429);
    }
    for proxy in [&open, &closed, &local] {
        let errors = proxy
            .metric_sum("sluicegate_proxy_backend_errors_total")
            .await?;
        assert!(errors > 0);
        // Past the breaker, answers without asking Redis, counted apart.
        assert!(
            proxy
                .metric(r#"sluicegate_proxy_backend_errors_total{kind="down"}"#)
                .await?
                > 0
        );
        // Warnings are throttled: fewer lines than failures.
        let warnings = proxy.log_text().matches("redis failed").count() as u64;
        assert!(
            (1..errors).contains(&warnings),
            "{warnings} warnings for {errors} failures:\n{}",
            proxy.log_text()
        );
    }

    // Redis is back, empty: the proxies count in it again, without a restart.
    redis.restart()?;
    eventually("closed answers from redis again", || async {
        Ok(status(&closed, "hank").await? == 200)
    })
    .await?;
    eventually("local answers from redis again", || async {
        Ok(status(&local, "frank").await? == 200)
    })
    .await?;
    // Open answers 200 whether or not it reaches Redis: it is back when it denies a budget
    // spent in Redis by another proxy (it once answered the 200 below without counting).
    for _ in 0..3 {
        assert_eq!(status(&closed, "ivan").await?, 200);
    }
    eventually("open answers from redis again", || async {
        Ok(status(&open, "ivan").await? == 429)
    })
    .await?;
    // Frank has had one of three in the new Redis (local's); two more, then none.
    assert_eq!(status(&closed, "frank").await?, 200);
    assert_eq!(status(&open, "frank").await?, 200);
    assert_eq!(status(&closed, "frank").await?, 429);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_started_while_redis_is_down_serves_by_its_policy_then_connects() -> TestResult {
    let mut redis = RedisServer::start()?;
    redis.stop();
    let upstream = Upstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), RULES, &on_redis(&redis.url(), "closed"))?;
    assert_eq!(status(&proxy, "ida").await?, 429);
    assert!(proxy.log_text().contains("redis unreachable at start"));
    redis.restart()?;
    eventually("the proxy connects once redis is up", || async {
        Ok(status(&proxy, "ida").await? == 200)
    })
    .await?;
    Ok(())
}

#[test]
fn rules_redis_cannot_keep_are_refused_at_their_place() -> TestResult {
    let dir = tempfile::tempdir()?;
    // The file says Redis; the proxy was not given one.
    let stderr = start_refused(dir.path(), RULES, &[])?;
    assert!(
        stderr.contains("rules.yaml:2:10: `backend: redis`, but this proxy keeps its counters"),
        "{stderr}"
    );
    // Guava's smooth limiters have no Redis script.
    let smooth = "limits:\n  s: { key: global, spec: \"smooth-bursty:rate=2\" }\nroutes:\n  - { prefix: /, limits: [s] }\n";
    // Refused before any connection is tried: port 1 has no Redis.
    let stderr = start_refused(dir.path(), smooth, &["--redis", "redis://127.0.0.1:1"])?;
    assert!(
        stderr.contains("rules.yaml:2:27: `smooth-bursty:rate=2` cannot be kept in Redis"),
        "{stderr}"
    );
    Ok(())
}
