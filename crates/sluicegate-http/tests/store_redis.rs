//! The layer over the backend seam: two layers (two processes, as far as Redis can tell) share
//! one budget through a real Redis, and when Redis is gone the failure policy answers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sluicegate::store::MemoryStore;
use sluicegate::{AnyAlgorithm, Gcra, KeyedLimiter, Rate};
use sluicegate_http::rate_limit::key::Global;
use sluicegate_http::rate_limit::{LimitInfo, RateLimitLayer};
use sluicegate_redis::testing::RedisServer;
use sluicegate_redis::{
    FailSafe, FailSafeLimit, FailurePolicy, NamedLimit, RedisLimit, StoreConfig,
};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Long enough for a loaded machine's Redis, short enough that a stopped one is noticed soon.
const TIMEOUT: Duration = Duration::from_millis(500);

/// A server answering `GET /` behind a layer deciding in `server`'s Redis: 3 requests an
/// hour in all (a GCRA: no window edge to fall on mid-test), `open` when Redis fails.
async fn serve_over(server: &RedisServer) -> Result<SocketAddr, BoxError> {
    let config = StoreConfig {
        timeout: TIMEOUT,
        ..StoreConfig::default()
    };
    let store = server.store(config).await?;
    let rate = Rate::per_hour(3)?;
    let safe = FailSafe::new(
        Arc::new(store),
        MemoryStore::new(),
        FailurePolicy::Open,
        TIMEOUT,
    );
    let limit = FailSafeLimit {
        primary: Arc::new(NamedLimit {
            limit: RedisLimit::gcra(rate, 3)?,
            name: "shared".into(),
        }),
        local: Arc::new(KeyedLimiter::new(AnyAlgorithm::from(Gcra::new(rate, 3)?))),
    };
    let info = LimitInfo::rate("shared", 3, Duration::from_secs(3600));
    let layer =
        RateLimitLayer::builder(Global).build_with_store(Arc::new(safe), [(info, limit)])?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

async fn status(client: &reqwest::Client, address: SocketAddr) -> Result<u16, BoxError> {
    let response = client.get(format!("http://{address}/")).send().await?;
    Ok(response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layers_share_one_budget_and_the_policy_answers_without_redis() -> Result<(), BoxError>
{
    let mut server = RedisServer::start()?;
    let (a, b) = (serve_over(&server).await?, serve_over(&server).await?);
    let client = reqwest::Client::builder().no_proxy().build()?;

    let mut seen = Vec::new();
    for address in [a, a, b, b, a] {
        seen.push(status(&client, address).await?);
    }
    // Three in all, whichever layer they came through; then both deny.
    assert_eq!(seen, [200, 200, 200, 429, 429]);

    server.stop();
    // Redis is gone: `open` lets requests through, on both.
    assert_eq!(status(&client, a).await?, 200);
    assert_eq!(status(&client, b).await?, 200);
    Ok(())
}

/// A server whose `GET /held` answers at once but ends its body only when `finish` is
/// notified, behind a concurrency limit of one in `server`'s Redis (each permit leased for
/// `lease`; `local` when Redis fails), and `GET /` plain, behind the same limit.
async fn serve_concurrency_over(
    server: &RedisServer,
    finish: Arc<tokio::sync::Notify>,
    lease: Duration,
) -> Result<SocketAddr, BoxError> {
    let config = StoreConfig {
        timeout: TIMEOUT,
        ..StoreConfig::default()
    };
    let store = server.store(config).await?;
    let safe = FailSafe::new(
        Arc::new(store),
        MemoryStore::new(),
        FailurePolicy::Local,
        TIMEOUT,
    );
    let limit = FailSafeLimit {
        primary: Arc::new(NamedLimit {
            limit: RedisLimit::concurrency(1, lease)?,
            name: "in_flight".into(),
        }),
        local: Arc::new(KeyedLimiter::new(AnyAlgorithm::from(
            sluicegate::Concurrency::new(1)?,
        ))),
    };
    let info = LimitInfo::concurrency("in_flight", 1);
    let layer =
        RateLimitLayer::builder(Global).build_with_store(Arc::new(safe), [(info, limit)])?;
    let held = move || {
        let finish = Arc::clone(&finish);
        async move {
            let (body, chunks) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                finish.notified().await;
                let done = axum::body::Bytes::from_static(b"done");
                let _ = body.send(Ok::<_, std::convert::Infallible>(done)).await;
            });
            axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(chunks))
        }
    };
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/held", get(held))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

/// Holds the one permit with a `/held` response from `a`, checks that `b` (another layer on
/// the same store) refuses a request, ends the body, and waits (polling, up to 10 s) for `b`
/// to let one through.
async fn permit_comes_back_when_the_body_ends(
    client: &reqwest::Client,
    a: SocketAddr,
    b: SocketAddr,
    finish: &tokio::sync::Notify,
) -> Result<(), BoxError> {
    let held = client.get(format!("http://{a}/held")).send().await?;
    assert_eq!(held.status(), 200);
    assert_eq!(status(client, b).await?, 429, "the one permit is held");
    finish.notify_one();
    assert_eq!(held.text().await?, "done");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if status(client, b).await? == 200 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the permit never came back".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_permit_in_redis_comes_back_when_the_body_ends() -> Result<(), BoxError> {
    let mut server = RedisServer::start()?;
    let finish = Arc::new(tokio::sync::Notify::new());
    // A lease far longer than the test: only a release can free the permit.
    let lease = Duration::from_secs(3600);
    let a = serve_concurrency_over(&server, Arc::clone(&finish), lease).await?;
    let b = serve_concurrency_over(&server, Arc::clone(&finish), lease).await?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    // In Redis, shared by both layers: the lease (an hour) is given back, not left to run out.
    permit_comes_back_when_the_body_ends(&client, a, b, &finish).await?;

    // Redis gone, `local`: each layer takes and gives back its own permit in memory.
    server.stop();
    permit_comes_back_when_the_body_ends(&client, a, a, &finish).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_longer_than_its_lease_keeps_its_permit() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let finish = Arc::new(tokio::sync::Notify::new());
    // Renewed every two thirds of a second by the layer holding it: a renewal would have to
    // wait more than a second and a third to be late.
    let lease = Duration::from_secs(2);
    let a = serve_concurrency_over(&server, Arc::clone(&finish), lease).await?;
    let b = serve_concurrency_over(&server, Arc::clone(&finish), lease).await?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    let held = client.get(format!("http://{a}/held")).send().await?;
    assert_eq!(held.status(), 200);
    // Two leases and a half: a permit nobody renewed would have run out twice.
    tokio::time::sleep(lease * 5 / 2).await;
    assert_eq!(
        status(&client, b).await?,
        429,
        "the permit of a response still open is held past its lease"
    );
    // Ended: given back.
    finish.notify_one();
    assert_eq!(held.text().await?, "done");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while status(&client, b).await? != 200 {
        if tokio::time::Instant::now() > deadline {
            return Err("the permit never came back".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
