//! `concurrency` (nginx `limit_conn`): the permit lives as long as the response body.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use sluicegate::store::MemoryStore;
use sluicegate::{AnyAlgorithm, KeyedLimiter, ManualClock};
use sluicegate_http::rate_limit::key::{Global, PeerIp};
use sluicegate_http::rate_limit::{HoldPermits, LimitInfo, MemoryBackend, RateLimitLayer};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

use crate::support::{ChannelBody, client, get as fetch, serve};

#[tokio::test]
async fn the_permit_is_held_until_the_body_ends_and_released_when_a_client_goes_away() {
    let layer = RateLimitLayer::builder(PeerIp)
        .limit("concurrency:limit=1")
        .build()
        .expect("layer");
    let (senders_tx, mut senders) = mpsc::unbounded_channel::<mpsc::Sender<Bytes>>();
    let senders_tx = Arc::new(Mutex::new(senders_tx));
    let stream = move || {
        let senders_tx = Arc::clone(&senders_tx);
        async move {
            let (tx, rx) = mpsc::channel(1);
            senders_tx
                .lock()
                .expect("lock")
                .send(tx)
                .expect("test listening");
            Body::new(ChannelBody(rx))
        }
    };
    let app = Router::new()
        .route("/stream", get(stream))
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let address = serve(app).await;
    let client = client();

    // The first response's head arrives; its body is still open: the permit is held.
    let mut first = client
        .get(format!("http://{address}/stream"))
        .send()
        .await
        .expect("first");
    assert_eq!(first.status(), 200);
    let body = senders.recv().await.expect("first body");
    let (status, headers, text) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"concurrency\";q=1;qu=\"concurrent-requests\""
    );
    assert_eq!(headers["ratelimit"], "\"concurrency\";r=0");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        text,
        "too many requests in flight: concurrency limit \"concurrency\" reached\n"
    );

    // Still held while data flows.
    body.send(Bytes::from_static(b"part")).await.expect("send");
    assert_eq!(
        first.chunk().await.expect("chunk").as_deref(),
        Some(&b"part"[..])
    );
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 429);

    // The body ends: released before the client can see the end.
    drop(body);
    assert_eq!(first.chunk().await.expect("end"), None);
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);

    // A client that goes away mid-body: the server drops the body, and the permit with it.
    let second = client
        .get(format!("http://{address}/stream"))
        .send()
        .await
        .expect("second");
    let body = senders.recv().await.expect("second body");
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 429);
    drop(second);
    // Sending fails once the server has dropped the body (the permit is dropped before it).
    let mut sends = 0;
    while body.send(Bytes::from_static(b"more")).await.is_ok() {
        sends += 1;
        assert!(sends < 10_000, "the server never dropped the body");
        tokio::task::yield_now().await;
    }
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);
    assert_eq!(layer.backend().states_held(), 0, "no permit left held");
}

#[tokio::test]
async fn permits_are_released_at_the_end_of_the_body_or_when_it_is_dropped() {
    let inner = tower::service_fn(|_request: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"data"))))
    });
    let mut service = global_concurrency(2).layer(inner);
    let mut call = async || call_once(&mut service).await;
    let first = call().await;
    let second = call().await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    assert_eq!(call().await.status(), 429);

    // Read to its last frame, the body still alive: released there (the body says it has
    // ended, and servers poll it no further), not at its drop.
    let mut body = first.into_body();
    let frame = body.frame().await.expect("a frame").expect("data");
    assert_eq!(
        frame.into_data().expect("data"),
        Bytes::from_static(b"data")
    );
    let third = call().await;
    assert_eq!(third.status(), 200, "released with the last frame");
    assert_eq!(call().await.status(), 429);
    assert!(body.frame().await.is_none(), "the end");
    drop(body);

    // Dropped unread: released.
    drop(second);
    drop(third);
    assert_eq!(call().await.status(), 200);
    assert_eq!(call().await.status(), 200);
}

#[tokio::test]
async fn a_store_gets_its_permits_back_when_the_body_is_dropped() {
    let inner = tower::service_fn(|_request: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"data"))))
    });
    let algorithm: AnyAlgorithm = "concurrency:limit=1".parse().expect("spec");
    let info = LimitInfo::of("in_flight", &algorithm);
    let store: Arc<MemoryStore> = Arc::new(MemoryStore::new());
    let layer = RateLimitLayer::builder(Global)
        .build_with_store(store, [(info, Arc::new(KeyedLimiter::new(algorithm)))])
        .expect("layer");
    let mut service = layer.layer(inner);
    let first = call_once(&mut service).await;
    assert_eq!(first.status(), 200);
    assert_eq!(call_once(&mut service).await.status(), 429);
    drop(first);
    // The store's release is a task of the runtime: it runs at the next yield.
    tokio::task::yield_now().await;
    assert_eq!(call_once(&mut service).await.status(), 200);
}

#[tokio::test]
async fn an_upgraded_exchange_holds_its_permit_until_its_holder_is_dropped() {
    let holders: Arc<Mutex<Vec<HoldPermits>>> = Arc::default();
    let kept = Arc::clone(&holders);
    // Each response is a `101` whose upgraded connection (here, the holder kept in `kept`)
    // outlives its empty body.
    let inner = tower::service_fn(move |_request: Request<()>| {
        let kept = Arc::clone(&kept);
        async move {
            let held = HoldPermits::new();
            kept.lock().expect("lock").push(held.clone());
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            response.extensions_mut().insert(held);
            Ok::<_, Infallible>(response)
        }
    });
    let mut service = global_concurrency(1).layer(inner);
    let mut call = async || call_once(&mut service).await.status();
    assert_eq!(call().await, StatusCode::SWITCHING_PROTOCOLS);
    // The response and its body are gone; the upgraded connection is not: still held.
    assert_eq!(call().await, StatusCode::TOO_MANY_REQUESTS);
    holders.lock().expect("lock").clear();
    assert_eq!(call().await, StatusCode::SWITCHING_PROTOCOLS);
}

/// A layer with one `concurrency` limit of `limit` for every request, on a manual clock.
fn global_concurrency(limit: u32) -> RateLimitLayer<Global, MemoryBackend<(), ManualClock>> {
    RateLimitLayer::builder(Global)
        .clock(ManualClock::new(0))
        .limit(format!("concurrency:limit={limit}").as_str())
        .build()
        .expect("layer")
}

/// `service` called once with an empty request, once it is ready.
async fn call_once<S, B>(service: &mut S) -> Response<B>
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    service
        .ready()
        .await
        .expect("ready")
        .call(Request::new(()))
        .await
        .expect("infallible")
}
