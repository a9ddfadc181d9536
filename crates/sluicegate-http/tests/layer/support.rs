//! Real axum servers on loopback ports, clients from chosen loopback addresses, and a response
//! body the test streams by hand.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Serves `app` on a loopback port with the peer's address in each request (axum's
/// `ConnectInfo`); the server runs until the test's runtime ends.
pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await.expect("serve");
    });
    address
}

/// Serves `app` without `ConnectInfo`: handlers never learn the peer's address.
pub(crate) async fn serve_without_peer(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    address
}

/// A client connecting from 127.0.0.1.
pub(crate) fn client() -> reqwest::Client {
    client_from("127.0.0.1")
}

/// A client whose connections come from `source` (any 127.x.y.z address works on Linux).
pub(crate) fn client_from(source: &str) -> reqwest::Client {
    let source: IpAddr = source.parse().expect("source address");
    reqwest::Client::builder()
        .local_address(source)
        .no_proxy()
        .build()
        .expect("client")
}

/// `GET http://address{path}` with `headers`: the status, headers and body.
pub(crate) async fn get(
    client: &reqwest::Client,
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = client.get(format!("http://{address}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body");
    (status, headers, body)
}

/// The statuses of `n` plain GETs.
pub(crate) async fn statuses(
    client: &reqwest::Client,
    address: SocketAddr,
    path: &str,
    n: usize,
) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(get(client, address, path, &[]).await.0);
    }
    statuses
}

/// A response body whose chunks the test sends, and which ends when the sender is dropped.
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}
