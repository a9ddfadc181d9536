//! The layer on a plain hyper server, which inserts each connection's address itself.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::PeerIp;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

use crate::support::{client_from, statuses};

#[tokio::test]
async fn a_hyper_server_inserting_the_peer_address() {
    let layer = RateLimitLayer::builder(PeerIp)
        .limit("fixed-window:limit=2,window=1h")
        .build()
        .expect("layer");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let service = ServiceBuilder::new()
                .map_request(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert::<SocketAddr>(peer);
                    request
                })
                .layer(layer.clone())
                .service_fn(|_request: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)),
            );
        }
    });
    assert_eq!(
        statuses(&client_from("127.0.0.1"), address, "/", 3).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses(&client_from("127.0.0.5"), address, "/", 3).await,
        [200, 200, 429]
    );
}
