//! A real 3-master Redis Cluster: keys of one request share a slot, decisions match memory,
//! and several limits on one key are decided in one call.

use std::num::NonZeroU64;

use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Algorithm, Gcra, Rate, TokenBucket};
use sluicegate_redis::{RedisLimit, RedisLimitError, RedisLimiter, ScriptMode, StoreConfig};

use sluicegate_redis::testing::RedisCluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decides_like_memory_for_keys_on_every_node() -> Result<(), BoxError> {
    let cluster = RedisCluster::start()?;
    let store = cluster.store(StoreConfig::default()).await?;
    let rate = Rate::per_second(7)?;
    let gcra = RedisLimiter::new(store.clone(), RedisLimit::gcra(rate, 3)?, "g");
    let bucket = RedisLimiter::new(store.clone(), RedisLimit::token_bucket(rate, 3)?, "t");
    let (memory_gcra, memory_bucket) = (Gcra::new(rate, 3)?, TokenBucket::new(rate, 3)?);
    let one = NonZeroU64::MIN;
    let mut slots = std::collections::HashSet::new();
    // Enough users to land on all three masters.
    for user in 0..30u32 {
        let key = format!("user-{user}");
        let (mut tat, mut level) = (memory_gcra.initial_state(0), memory_bucket.initial_state(0));
        let mut now = 1_763_000_000_000_000 + u64::from(user);
        for step in 0..6u64 {
            now += step * 50_000;
            let requests = [gcra.request(key.as_bytes()), bucket.request(key.as_bytes())];
            let multi = store.decide_all(&requests, Op::Check, Now::At(now)).await?;
            let mut peek_tat = tat;
            let mut peek_level = level;
            let peeks = [
                memory_gcra.decide(&mut peek_tat, now, one, Op::Peek)?,
                memory_bucket.decide(&mut peek_level, now, one, Op::Peek)?,
            ];
            // All allowed: both charged, reporting what they left; otherwise neither, and
            // both report what they have now, as their peeks do.
            let expected = if peeks.iter().all(|d| d.allowed()) {
                [
                    memory_gcra.decide(&mut tat, now, one, Op::Check)?,
                    memory_bucket.decide(&mut level, now, one, Op::Check)?,
                ]
            } else {
                peeks
            };
            assert_eq!(multi.decisions, expected, "user {user} step {step}");
        }
        let slot: i64 = store
            .command(
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(format!("x{{{key}}}")),
            )
            .await?;
        // `redis-cli --cluster create` splits the slots 0-5460, 5461-10922, 10923-16383.
        slots.insert(match slot {
            ..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        });
    }
    assert_eq!(slots.len(), 3, "keys landed on every master");

    // One limit alone has entry points of its own: on every master, through Functions (each
    // master loads the library) and through EVALSHA scripts.
    for scripts in [ScriptMode::Auto, ScriptMode::Eval] {
        let store = cluster
            .store(StoreConfig {
                scripts,
                ..StoreConfig::default()
            })
            .await?;
        assert_eq!(store.uses_functions(), scripts == ScriptMode::Auto);
        let name = format!("one-{scripts:?}");
        let gcra = RedisLimiter::new(store.clone(), RedisLimit::gcra(rate, 3)?, name);
        for user in 0..30u32 {
            let key = format!("user-{user}");
            let mut tat = memory_gcra.initial_state(0);
            let mut now = 1_763_000_000_000_000 + u64::from(user);
            for step in 0..6u64 {
                now += step * 50_000;
                let got = gcra
                    .decide(key.as_bytes(), one, Op::Check, Now::At(now))
                    .await?;
                let expected = memory_gcra.decide(&mut tat, now, one, Op::Check)?;
                assert_eq!(got, expected, "{scripts:?} user {user} step {step}");
            }
        }
        assert_eq!(store.uses_functions(), scripts == ScriptMode::Auto);
    }

    // Keys of one request in different slots: a clear error, nothing decided.
    let requests = [gcra.request(b"user-1"), bucket.request(b"user-2")];
    let err = store
        .decide_all(&requests, Op::Check, Now::At(1_763_000_000_000_000))
        .await
        .err();
    assert!(
        matches!(err, Some(RedisLimitError::Unsupported(_))),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_serves_again_without_a_new_store() -> Result<(), BoxError> {
    let mut cluster = RedisCluster::start()?;
    let timeout = std::time::Duration::from_millis(500);
    let store = cluster
        .store(StoreConfig {
            timeout,
            ..StoreConfig::default()
        })
        .await?;
    let limiter = RedisLimiter::new(
        store.clone(),
        RedisLimit::gcra(Rate::per_second(100)?, 10)?,
        "r",
    );
    assert!(limiter.check(b"k").await?.allowed());

    // Every master down in turn would be slow; take down the one holding the key's slot.
    let slot: i64 = store
        .command(redis::cmd("CLUSTER").arg("KEYSLOT").arg("{k}"))
        .await?;
    let node = match slot {
        ..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    };
    cluster.nodes[node].stop();
    for _ in 0..3 {
        let result = tokio::time::timeout(timeout * 20, limiter.check(b"k")).await?;
        let err = result.err().ok_or("a call to a stopped master succeeded")?;
        assert!(err.is_backend_failure(), "{err:?}");
    }
    // It comes back with its nodes.conf, so with its slots.
    cluster.nodes[node].restart()?;
    let mut last = None;
    for _ in 0..200 {
        match tokio::time::timeout(timeout * 20, limiter.check(b"k")).await? {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        last.is_none(),
        "the cluster never served the key again: {last:?}"
    );
    // The restarted master lost the library and was given it again.
    assert!(store.uses_functions());
    let output = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &cluster.nodes[node].port.to_string(),
            "FUNCTION",
            "LIST",
        ])
        .output()?;
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(listed.contains("sluicegate_"), "{listed}");
    Ok(())
}
