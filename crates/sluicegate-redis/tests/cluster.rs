//! A real 3-master Redis Cluster: keys of one request share a slot, decisions match memory,
//! and several limits on one key are decided in one call.

mod common;

use std::num::NonZeroU64;

use sluicegate::{Algorithm, Gcra, Op, Rate, TokenBucket};
use sluicegate_redis::{Now, RedisLimit, RedisLimitError, RedisLimiter, StoreConfig};

use common::RedisCluster;

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
            let expected = [
                memory_gcra.decide(&mut peek_tat, now, one, Op::Peek)?,
                memory_bucket.decide(&mut peek_level, now, one, Op::Peek)?,
            ];
            if expected.iter().all(|d| d.allowed) {
                memory_gcra.decide(&mut tat, now, one, Op::Check)?;
                memory_bucket.decide(&mut level, now, one, Op::Check)?;
            }
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
