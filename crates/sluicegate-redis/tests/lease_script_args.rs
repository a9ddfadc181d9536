//! The lease script's arguments checked before anything is read or written: a bad count, a
//! negative number or a missing lease field is an `args` fault naming the argument, not a Lua
//! runtime error.

use std::time::Duration;

use sluicegate_redis::testing::RedisServer;
use sluicegate_redis::{RedisLimit, RedisLimiter, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The lease function's name in the library the store loaded.
async fn lease_function(
    connection: &mut redis::aio::MultiplexedConnection,
) -> Result<String, BoxError> {
    let listing: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(connection)
        .await?;
    let text = format!("{listing:?}");
    let start = text.find("sluicegate_").ok_or("no sluicegate library")?;
    let name: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Ok(format!("{name}_lease"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_arguments_are_named() -> Result<(), BoxError> {
    let redis = RedisServer::start()?;
    let store = redis.store(StoreConfig::default()).await?;
    let window = RedisLimit::fixed_window(10, Duration::from_secs(3600))?;
    // A first call loads the library.
    assert!(
        RedisLimiter::new(store, window, "w")
            .check(b"k")
            .await?
            .allowed()
    );
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let lease = lease_function(&mut connection).await?;
    let cases: [(&[&str], &str); 5] = [
        (&["", "take", "4", "20000", "-1"], "lease count"),
        (&["", "take", "4", "20000", "1.5"], "lease count"),
        (&["", "take", "-4", "20000", "0"], "want"),
        (&["", "take", "4", "-20000", "0"], "life"),
        (&["", "return", "0", "20000", "1", "5"], "end"),
    ];
    for (args, named) in cases {
        let mut call = redis::cmd("FCALL");
        call.arg(&lease).arg(1).arg("k");
        call.arg(args);
        let reply: Vec<String> = call.query_async(&mut connection).await?;
        assert_eq!(
            reply.first().map(String::as_str),
            Some("ERR"),
            "{args:?}: {reply:?}"
        );
        assert_eq!(
            reply.get(1).map(String::as_str),
            Some("args"),
            "{args:?}: {reply:?}"
        );
        let detail = reply.get(2).cloned().unwrap_or_default();
        assert!(detail.contains(named), "{args:?}: {detail}");
    }
    Ok(())
}
