//! A check of a key that is not in Redis (most keys, when there are many: each expires once
//! its state no longer matters) reads and writes it in one call, `SET NX GET`, while most of
//! the last checks found their key missing; its answers are those of a GET and a SET, and a
//! key that is there, sound or corrupt, is left as it was.

use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::Now;
use sluicegate::{Decision, Rate};
use sluicegate_redis::testing::{RedisServer, calls_of, command_calls};
use sluicegate_redis::{RedisLimit, RedisLimitError, RedisLimiter, RedisStore, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every check at one explicit time: the state a check finds is the last one's alone.
const AT: u64 = 1_700_000_000_000_000;

async fn check(limiter: &RedisLimiter, key: &str) -> Result<Decision, RedisLimitError> {
    let request = limiter.request(key.as_bytes());
    let mut multi = limiter
        .store()
        .decide_all(&[request], Op::Check, Now::At(AT))
        .await?;
    Ok(multi.decisions.pop().expect("one limit, one decision"))
}

/// Three checks of each of `keys` in three rounds, round by round: the decisions of each
/// round, and how many calls of Redis commands (`GET` and `SET`) it made.
async fn rounds(
    limiter: &RedisLimiter,
    keys: &[String],
) -> Result<Vec<(Vec<Decision>, u64)>, BoxError> {
    let store = limiter.store();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let before = command_calls(store).await?;
        let mut round = Vec::new();
        for key in keys {
            round.push(check(limiter, key).await?);
        }
        let after = command_calls(store).await?;
        let calls = ["get", "set"]
            .iter()
            .map(|command| calls_of(&after, command) - calls_of(&before, command))
            .sum();
        rounds.push((round, calls));
    }
    Ok(rounds)
}

async fn raw(store: &RedisStore, key: &str) -> Result<Option<String>, BoxError> {
    Ok(store.command(redis::cmd("GET").arg(key)).await?)
}

/// A store on a server of its own: the library just loaded there reads a first key with GET.
async fn store(server: &RedisServer) -> Result<RedisStore, BoxError> {
    server
        .store(StoreConfig {
            prefix: "c:".into(),
            // The keys live in real time; the checks are at one explicit time.
            expiry_grace: Duration::from_secs(3600),
            ..StoreConfig::default()
        })
        .await
}

#[test]
fn a_missing_key_is_read_and_written_by_one_call() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let limits = [
            ("gcra", RedisLimit::gcra(Rate::per_second(10)?, 2)?),
            (
                "fixed window",
                RedisLimit::fixed_window(2, Duration::from_secs(1))?,
            ),
        ];
        let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        for (name, limit) in limits {
            let server = RedisServer::start()?;
            let limiter = RedisLimiter::new(store(&server).await?, limit, "l");
            let rounds = rounds(&limiter, &keys).await?;
            let [
                (fresh, fresh_calls),
                (second, second_calls),
                (third, third_calls),
            ] = &rounds[..]
            else {
                unreachable!("three rounds")
            };
            // Missing keys, read by GET (the first) or SET NX GET (the others, after a miss):
            // one answer.
            assert!(
                fresh.iter().all(|d| d == &fresh[0] && d.allowed()),
                "{fresh:?}"
            );
            // The first missing key read, then written; each other one written by its read.
            assert_eq!(*fresh_calls, 2 + 19, "{name}");
            // Keys there, read by SET NX GET (while misses are the most recent) or GET (once
            // finds are): one answer, and each admitted check written once.
            assert!(
                second.iter().all(|d| d == &second[0] && d.allowed()),
                "{second:?}"
            );
            assert_eq!(second[0].remaining(), 0);
            assert_eq!(*second_calls, 20 + 20, "{name}");
            assert!(
                third.iter().all(|d| d == &third[0] && !d.allowed()),
                "{third:?}"
            );
            assert_eq!(*third_calls, 20, "{name}");
            // Each key lives until its state no longer matters, plus the grace, whichever
            // read found it and whichever write wrote it last (a fixed window's second write
            // keeps the time to live its first set): the window's end (`AT` starts one), or
            // the TAT, which is two intervals on.
            let grace_ms = 3_600_000;
            let lives_ms = if name == "gcra" { 200 } else { 1_000 };
            for key in &keys {
                let ttl: i64 = limiter
                    .store()
                    .command(redis::cmd("PTTL").arg(format!("c:{{{key}}}l")))
                    .await?;
                assert!(
                    ttl > grace_ms + lives_ms - 60_000 && ttl <= grace_ms + lives_ms,
                    "{name} {key}: {ttl} ms"
                );
            }
        }
        Ok(())
    })
}

#[test]
fn a_key_no_check_can_read_is_named_and_left_as_it_was() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = store(&server).await?;
        let limiters = [
            RedisLimiter::new(
                store.clone(),
                RedisLimit::gcra(Rate::per_second(10)?, 2)?,
                "g",
            ),
            RedisLimiter::new(
                store.clone(),
                RedisLimit::fixed_window(2, Duration::from_secs(1))?,
                "f",
            ),
        ];
        store
            .command::<()>(redis::cmd("SET").arg("c:{bad}g").arg("not a time"))
            .await?;
        store
            .command::<()>(redis::cmd("RPUSH").arg("c:{list}f").arg("a list"))
            .await?;
        // Misses first, so that the next reads are SET NX GETs.
        for i in 0..8 {
            assert!(check(&limiters[0], &format!("m{i}")).await?.allowed());
        }
        let before = command_calls(&store).await?;
        for (limiter, key, name) in [
            (&limiters[0], "bad", "c:{bad}g"),
            (&limiters[1], "list", "c:{list}f"),
        ] {
            match check(limiter, key).await {
                Err(RedisLimitError::CorruptState(detail)) => {
                    assert!(detail.contains(name), "{detail}");
                }
                other => panic!("{key}: {other:?}"),
            }
        }
        let after = command_calls(&store).await?;
        assert!(
            calls_of(&after, "set") > calls_of(&before, "set"),
            "read by SET NX GET"
        );
        assert_eq!(
            raw(&store, "c:{bad}g").await?.as_deref(),
            Some("not a time")
        );
        let kind: String = store.command(redis::cmd("TYPE").arg("c:{list}f")).await?;
        assert_eq!(kind, "list");
        Ok(())
    })
}
