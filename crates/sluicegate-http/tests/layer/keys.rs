//! Each key extractor, over a real server and client: who shares a budget with whom.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::{any, get};
use http::StatusCode;
use sluicegate::ManualClock;
use sluicegate_http::rate_limit::key::{
    ClientIp, Global, Header, Host, KeyExtractor, PeerIp, RequestHead, RequestMethod, RequestPath,
    Route, from_fn,
};
use sluicegate_http::rate_limit::{KeyError, MemoryBackend, RateLimitLayer};

use crate::support::{client, client_from, get as fetch, serve, statuses};

/// One request per key for the test's whole life (the manual clock never moves).
fn once_per_key<X: KeyExtractor>(key: X) -> RateLimitLayer<X, MemoryBackend<X::Key, ManualClock>> {
    RateLimitLayer::builder(key)
        .clock(ManualClock::new(0))
        .limit("fixed-window:limit=1,window=1h")
        .build()
        .expect("layer")
}

async fn ok() -> &'static str {
    "ok"
}

fn routes() -> Router {
    Router::new()
        .route("/", any(ok))
        .route("/users/{id}", get(ok))
}

async fn serve_with<X: KeyExtractor>(
    layer: RateLimitLayer<X, MemoryBackend<X::Key, ManualClock>>,
) -> SocketAddr {
    serve(routes().layer(layer)).await
}

#[tokio::test]
async fn clones_share_one_state_across_routes_and_routers() {
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(ManualClock::new(0))
        .limit("fixed-window:limit=3,window=1h")
        .build()
        .expect("layer");
    // One clone on a route of one server, another on a whole router of a second server.
    let first = serve(
        Router::new()
            .route("/a", get(ok))
            .route_layer(layer.clone()),
    )
    .await;
    let second = serve(Router::new().route("/b", get(ok)).layer(layer.clone())).await;
    let client = client();
    let mut seen = Vec::new();
    for address in [first, second, first, second] {
        let path = if address == first { "/a" } else { "/b" };
        seen.push(fetch(&client, address, path, &[]).await.0);
    }
    assert_eq!(seen, [200, 200, 200, 429]);
    assert_eq!(layer.stats().denied, 1);
}

#[tokio::test]
async fn peer_ip_gives_each_connection_address_its_budget() {
    let address = serve_with(once_per_key(PeerIp)).await;
    assert_eq!(
        statuses(&client_from("127.0.0.1"), address, "/", 2).await,
        [200, 429]
    );
    assert_eq!(
        statuses(&client_from("127.0.0.2"), address, "/", 2).await,
        [200, 429]
    );
}

#[tokio::test]
async fn x_forwarded_for_trusts_only_the_configured_proxies() {
    let key = ClientIp::x_forwarded_for()
        .trusted_proxies(["127.0.0.1/32"])
        .expect("proxies");
    let address = serve_with(once_per_key(key)).await;
    let proxy = client_from("127.0.0.1");
    let xff = |value| [("x-forwarded-for", value)];
    // Through the trusted proxy: the address it appended is the client.
    assert_eq!(
        fetch(&proxy, address, "/", &xff("203.0.113.1")).await.0,
        200
    );
    // The same client forging a left-most address: still 203.0.113.1, still limited.
    assert_eq!(
        fetch(&proxy, address, "/", &xff("6.6.6.6, 203.0.113.1"))
            .await
            .0,
        429
    );
    assert_eq!(
        fetch(&proxy, address, "/", &xff("203.0.113.1, 127.0.0.1"))
            .await
            .0,
        429
    );
    assert_eq!(
        fetch(&proxy, address, "/", &xff("203.0.113.2")).await.0,
        200
    );

    // Straight from an untrusted peer: its own address, whatever it forwards.
    let direct = client_from("127.0.0.2");
    assert_eq!(
        fetch(&direct, address, "/", &xff("198.51.100.1")).await.0,
        200
    );
    assert_eq!(
        fetch(&direct, address, "/", &xff("198.51.100.2")).await.0,
        429
    );
    assert_eq!(fetch(&direct, address, "/", &[]).await.0, 429);
}

#[tokio::test]
async fn forwarded_and_x_real_ip() {
    let key = ClientIp::forwarded()
        .trusted_proxies(["127.0.0.1"])
        .expect("proxies");
    let address = serve_with(once_per_key(key)).await;
    let proxy = client();
    let forwarded = |value| [("forwarded", value)];
    assert_eq!(
        fetch(
            &proxy,
            address,
            "/",
            &forwarded("for=198.51.100.1;proto=http")
        )
        .await
        .0,
        200
    );
    let forged = "for=6.6.6.6, for=\"198.51.100.1:4711\"";
    assert_eq!(fetch(&proxy, address, "/", &forwarded(forged)).await.0, 429);
    // A proxy that wrote `for=unknown` where the client should be: the proxy, which vouched
    // for it, is the key.
    let unknown = forwarded("for=unknown");
    assert_eq!(fetch(&proxy, address, "/", &unknown).await.0, 200);
    assert_eq!(fetch(&proxy, address, "/", &unknown).await.0, 429);

    let key = ClientIp::x_real_ip()
        .trusted_proxies(["127.0.0.1"])
        .expect("proxies");
    let address = serve_with(once_per_key(key)).await;
    let real = |value| [("x-real-ip", value)];
    assert_eq!(
        fetch(&proxy, address, "/", &real("198.51.100.7")).await.0,
        200
    );
    assert_eq!(
        fetch(&proxy, address, "/", &real("198.51.100.7")).await.0,
        429
    );
    assert_eq!(
        fetch(&proxy, address, "/", &real("198.51.100.8")).await.0,
        200
    );
}

#[tokio::test]
async fn header_key_and_its_absence() {
    let address = serve_with(once_per_key(Header::named("x-api-key"))).await;
    let client = client();
    let key = |value| [("x-api-key", value)];
    assert_eq!(fetch(&client, address, "/", &key("a")).await.0, 200);
    assert_eq!(fetch(&client, address, "/", &key("a")).await.0, 429);
    assert_eq!(fetch(&client, address, "/", &key("b")).await.0, 200);
    let (status, _, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        "rate limit key: the request has no `x-api-key` header\n"
    );
}

#[tokio::test]
async fn method_key() {
    let address = serve_with(once_per_key(RequestMethod)).await;
    let client = client();
    let url = format!("http://{address}/");
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.expect("request").status().as_u16()
    };
    assert_eq!(status(client.get(&url)).await, 200);
    assert_eq!(status(client.get(&url)).await, 429);
    assert_eq!(status(client.post(&url)).await, 200);
    assert_eq!(status(client.delete(&url)).await, 200);
}

#[tokio::test]
async fn route_template_counts_a_route_once_and_path_each_path() {
    let client = client();
    let address = serve_with(once_per_key(Route::new())).await;
    assert_eq!(fetch(&client, address, "/users/1", &[]).await.0, 200);
    assert_eq!(
        fetch(&client, address, "/users/2", &[]).await.0,
        429,
        "same route"
    );
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);

    let address = serve_with(once_per_key(RequestPath)).await;
    assert_eq!(fetch(&client, address, "/users/1", &[]).await.0, 200);
    assert_eq!(
        fetch(&client, address, "/users/2?x=1", &[]).await.0,
        200,
        "another path"
    );
    assert_eq!(
        fetch(&client, address, "/users/2?x=2", &[]).await.0,
        429,
        "the query is no part"
    );
}

#[tokio::test]
async fn a_path_spelt_otherwise_is_the_same_path() {
    let client = client();
    let address = serve_with(once_per_key(RequestPath)).await;
    assert_eq!(fetch(&client, address, "/users/3", &[]).await.0, 200);
    for spelling in [
        "//users/3",
        "/users//3",
        "/users/%33",
        "/%75sers/3",
        "/users/x/%2e%2e/3",
    ] {
        assert_eq!(
            fetch(&client, address, spelling, &[]).await.0,
            429,
            "{spelling}"
        );
    }
    // A path above the root (400) is a unit test of `normal_path`: reqwest's URLs never
    // carry one.
}

#[tokio::test]
async fn a_host_spelt_otherwise_is_the_same_host() {
    let client = client();
    let address = serve_with(once_per_key(Host)).await;
    let host = |value| [("host", value)];
    assert_eq!(fetch(&client, address, "/", &host("hk.test")).await.0, 200);
    for spelling in ["HK.TEST", "hk.test:80", "hk.test.", "Hk.Test.:8080"] {
        let status = fetch(&client, address, "/", &host(spelling)).await.0;
        assert_eq!(status, 429, "{spelling}");
    }
    assert_eq!(
        fetch(&client, address, "/", &host("other.test")).await.0,
        200
    );
    let (status, _, body) = fetch(&client, address, "/", &host("hk.test x")).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn a_client_quote_does_not_swallow_what_the_proxy_appended() {
    let key = ClientIp::x_forwarded_for()
        .trusted_proxies(["127.0.0.1/32"])
        .expect("proxies");
    let address = serve_with(once_per_key(key)).await;
    let proxy = client_from("127.0.0.1");
    let xff = |value| [("x-forwarded-for", value)];
    // As the trusted proxy writes it: what the client sent, then the client's address.
    for (sent, expected) in [
        ("\", 203.0.113.9", 200),
        ("\"6.6.6.6, 203.0.113.9", 429),
        ("unknown, 203.0.113.9", 429),
        ("203.0.113.10, \"", 200),
        ("203.0.113.11, \"", 429),
    ] {
        assert_eq!(
            fetch(&proxy, address, "/", &xff(sent)).await.0,
            expected,
            "{sent}"
        );
    }
}

#[tokio::test]
async fn a_request_no_route_matched_has_no_template() {
    // The router's fallback (a 404) runs the layer too, without a matched route: a clear 500,
    // or with `or_path` the path as the key.
    let client = client();
    for (key, expected) in [(Route::new(), [500, 500]), (Route::or_path(), [404, 429])] {
        let address = serve_with(once_per_key(key)).await;
        let (first, _, body) = fetch(&client, address, "/nowhere", &[]).await;
        let (second, _, _) = fetch(&client, address, "/nowhere", &[]).await;
        assert_eq!([first, second], expected, "{body}");
        if first == 500 {
            assert!(
                body.starts_with("rate limit key: no matched route"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn global_key_is_one_budget_for_everyone() {
    let address = serve_with(once_per_key(Global)).await;
    assert_eq!(
        fetch(&client_from("127.0.0.1"), address, "/", &[]).await.0,
        200
    );
    assert_eq!(
        fetch(&client_from("127.0.0.3"), address, "/", &[]).await.0,
        429
    );
}

#[tokio::test]
async fn tuple_keys_combine_their_parts() {
    let address = serve_with(once_per_key((PeerIp, Route::new()))).await;
    let (one, two) = (client_from("127.0.0.1"), client_from("127.0.0.4"));
    assert_eq!(fetch(&one, address, "/users/1", &[]).await.0, 200);
    assert_eq!(fetch(&one, address, "/users/9", &[]).await.0, 429);
    assert_eq!(fetch(&one, address, "/", &[]).await.0, 200, "another route");
    assert_eq!(
        fetch(&two, address, "/users/1", &[]).await.0,
        200,
        "another client"
    );
}

#[tokio::test]
async fn closure_keys() {
    let tenant = from_fn(|request: &RequestHead<'_>| {
        request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("tenant=")))
            .map(str::to_owned)
            .ok_or_else(|| KeyError::custom(StatusCode::UNAUTHORIZED, "no tenant given"))
    });
    let address = serve_with(once_per_key(tenant)).await;
    let client = client();
    assert_eq!(fetch(&client, address, "/?tenant=a", &[]).await.0, 200);
    assert_eq!(fetch(&client, address, "/?x=1&tenant=a", &[]).await.0, 429);
    assert_eq!(fetch(&client, address, "/?tenant=b", &[]).await.0, 200);
    let (status, _, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!(
        (status, body.as_str()),
        (401, "rate limit key: no tenant given\n")
    );
}

/// A request body that carries the address of the client that sent it.
struct BodyWithPeer(std::net::IpAddr);

#[tokio::test]
async fn a_peer_carried_in_the_body_is_read_from_there() {
    use tower::{Layer, Service, ServiceExt};

    let layer = RateLimitLayer::builder(PeerIp)
        .clock(ManualClock::new(0))
        .limit("fixed-window:limit=1,window=1h")
        .peer_from_body(|body: &BodyWithPeer| body.0)
        .build()
        .expect("layer");
    let inner = tower::service_fn(|_request: http::Request<BodyWithPeer>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    });
    let mut service = layer.layer(inner);
    let mut status_from = async |peer: &str| {
        let body = BodyWithPeer(peer.parse().expect("an address"));
        let request = http::Request::new(body);
        let ready = service.ready().await.expect("ready");
        ready.call(request).await.expect("an answer").status()
    };
    assert_eq!(status_from("192.0.2.1").await, StatusCode::OK);
    assert_eq!(
        status_from("192.0.2.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status_from("192.0.2.2").await, StatusCode::OK);
}
