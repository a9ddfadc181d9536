//! How calls reach the Lua code: Redis Functions (`FCALL`) by default, `EVALSHA` scripts when
//! asked or when the server has no Functions; either is loaded again after a flush or a
//! restart, and both decide alike.

use std::time::Duration;

use sluicegate::Rate;
use sluicegate_redis::{RedisLimit, RedisLimiter, RedisStore, ScriptMode, StoreConfig};

use sluicegate_redis::testing::{RedisServer, calls_of, command_calls};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One limiter of each entry point: one-limit GCRA, token bucket and fixed window, and a
/// sliding log (the multi-limit entry point).
fn limiters(store: &RedisStore) -> Result<Vec<RedisLimiter>, BoxError> {
    // Per hour: three checks in a row can never straddle a window's end or see a permit come
    // back, however slow the machine (per second, a fixed window's third check was allowed
    // when the second's end fell between it and the first two).
    let rate = Rate::per_hour(2)?;
    let hour = Duration::from_secs(3600);
    Ok(vec![
        RedisLimiter::new(store.clone(), RedisLimit::gcra(rate, 2)?, "g"),
        RedisLimiter::new(store.clone(), RedisLimit::token_bucket(rate, 2)?, "t"),
        RedisLimiter::new(store.clone(), RedisLimit::fixed_window(2, hour)?, "f"),
        RedisLimiter::new(store.clone(), RedisLimit::sliding_log(2, hour)?, "s"),
    ])
}

/// Two checks of every limiter allowed, a third denied: the state was read and written.
async fn two_then_denied(limiters: &[RedisLimiter], key: &[u8]) -> Result<(), BoxError> {
    for limiter in limiters {
        assert!(limiter.check(key).await?.allowed(), "{}", limiter.name());
        assert!(limiter.check(key).await?.allowed(), "{}", limiter.name());
        assert!(!limiter.check(key).await?.allowed(), "{}", limiter.name());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_by_default_reloaded_after_a_flush() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    assert!(store.uses_functions());
    let limiters = limiters(&store)?;
    two_then_denied(&limiters, b"a").await?;
    let calls = command_calls(&store).await?;
    // Twelve decisions, and the first call, which found no function (Redis counts it too).
    assert_eq!(calls_of(&calls, "fcall"), 13, "{calls:?}");
    assert_eq!(calls_of(&calls, "evalsha"), 0, "{calls:?}");
    assert_eq!(
        calls_of(&calls, "function|load"),
        1,
        "loaded once: {calls:?}"
    );

    store
        .command::<()>(redis::cmd("FUNCTION").arg("FLUSH"))
        .await?;
    two_then_denied(&limiters, b"b").await?;
    let calls = command_calls(&store).await?;
    assert_eq!(
        calls_of(&calls, "function|load"),
        2,
        "loaded again: {calls:?}"
    );
    assert_eq!(calls_of(&calls, "fcall"), 26, "{calls:?}");
    assert_eq!(calls_of(&calls, "evalsha"), 0, "{calls:?}");
    assert!(store.uses_functions());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_are_loaded_again_on_a_restarted_server() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let store = server.store(StoreConfig::default()).await?;
    let limiters = limiters(&store)?;
    two_then_denied(&limiters, b"a").await?;
    server.restart()?;
    // The store reconnects by itself; the first calls may still see the broken connection.
    let mut last = None;
    for _ in 0..100 {
        match limiters[0].check(b"probe").await {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(last.is_none(), "never served again: {last:?}");
    two_then_denied(&limiters, b"b").await?;
    let calls = command_calls(&store).await?;
    // Redis's counters restarted too: one failed call, the probe, twelve decisions.
    assert_eq!(calls_of(&calls, "function|load"), 1, "{calls:?}");
    assert_eq!(calls_of(&calls, "fcall"), 14, "{calls:?}");
    assert_eq!(calls_of(&calls, "evalsha"), 0, "{calls:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_when_asked_reloaded_after_a_flush() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let store = server
        .store(StoreConfig {
            scripts: ScriptMode::Eval,
            ..StoreConfig::default()
        })
        .await?;
    assert!(!store.uses_functions());
    let limiters = limiters(&store)?;
    two_then_denied(&limiters, b"a").await?;
    store
        .command::<()>(redis::cmd("SCRIPT").arg("FLUSH"))
        .await?;
    two_then_denied(&limiters, b"b").await?;
    let calls = command_calls(&store).await?;
    // 24 decisions and, twice, a first call of each of the 3 scripts finding none (GCRA and
    // the token bucket share one).
    assert_eq!(calls_of(&calls, "evalsha"), 24 + 6, "{calls:?}");
    assert_eq!(
        calls_of(&calls, "script|load"),
        6,
        "3 scripts, twice: {calls:?}"
    );
    assert_eq!(calls_of(&calls, "fcall"), 0, "{calls:?}");
    assert_eq!(calls_of(&calls, "function|load"), 0, "{calls:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_functions_gets_scripts() -> Result<(), BoxError> {
    // As Redis 6 answers FCALL and FUNCTION: an unknown command.
    let server = RedisServer::start_with(vec![
        "--rename-command".into(),
        "FCALL".into(),
        String::new(),
        "--rename-command".into(),
        "FUNCTION".into(),
        String::new(),
    ])?;
    let store = server.store(StoreConfig::default()).await?;
    assert!(store.uses_functions(), "until the server says otherwise");
    let limiters = limiters(&store)?;
    two_then_denied(&limiters, b"a").await?;
    assert!(!store.uses_functions());
    let calls = command_calls(&store).await?;
    // FCALL was refused before running (not counted); then 12 decisions and 3 first calls.
    assert_eq!(calls_of(&calls, "evalsha"), 12 + 3, "{calls:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_to_load_functions_gets_scripts() -> Result<(), BoxError> {
    // FCALL exists but FUNCTION LOAD does not: the first call finds no function, loading it
    // is an unknown command.
    let server = RedisServer::start_with(vec![
        "--rename-command".into(),
        "FUNCTION".into(),
        String::new(),
    ])?;
    let store = server.store(StoreConfig::default()).await?;
    let limiters = limiters(&store)?;
    two_then_denied(&limiters, b"a").await?;
    assert!(!store.uses_functions());
    Ok(())
}
