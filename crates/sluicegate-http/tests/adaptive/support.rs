//! Loopback servers, a controller that records what it is fed, and a response body the test
//! streams by hand.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use sluicegate::Micros;
use sluicegate::adaptive::{Controller, Outcome, Sample};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Serves `app` on a loopback port until the test's runtime ends.
pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    address
}

/// A client that goes straight to loopback.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// `GET http://address{path}`: the status, headers and body.
pub(crate) async fn get(
    client: &reqwest::Client,
    address: SocketAddr,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let response = client
        .get(format!("http://{address}{path}"))
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body");
    (status, headers, body)
}

/// A controller with a fixed limit that keeps every sample it is fed.
#[derive(Clone)]
pub(crate) struct Recorder {
    limit: u32,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Recorder {
    pub(crate) fn new(limit: u32) -> Recorder {
        Recorder {
            limit,
            samples: Arc::default(),
        }
    }

    /// The outcomes fed so far, in order.
    pub(crate) fn outcomes(&self) -> Vec<Outcome> {
        self.samples().iter().map(|s| s.outcome).collect()
    }

    /// The samples fed so far, in order.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }
}

impl Controller for Recorder {
    fn on_sample(&mut self, _now: Micros, sample: Sample) -> u32 {
        self.samples.lock().expect("samples").push(sample);
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
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

/// A route handler whose response bodies the test streams: each call hands the test the
/// sender of its body.
pub(crate) fn streaming() -> (
    mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>,
    impl Fn() -> std::future::Ready<axum::body::Body> + Clone + Send + Sync + 'static,
) {
    let (senders_tx, senders) = mpsc::unbounded_channel::<mpsc::Sender<Bytes>>();
    let handler = move || {
        let (tx, rx) = mpsc::channel(1);
        senders_tx.send(tx).expect("test listening");
        std::future::ready(axum::body::Body::new(ChannelBody(rx)))
    };
    (senders, handler)
}
