//! A scripted axum server and a paced hyper-util client.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluicegate::Clock;
use sluicegate_http::pace::{Pace, PaceError, PaceLayer};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// One scripted answer: a status and headers (made when the request arrives).
pub(crate) type Answer = Box<dyn Fn() -> (StatusCode, Vec<(&'static str, String)>) + Send + Sync>;

/// What the server saw, and what it answers next (200 once the script is done).
#[derive(Default)]
pub(crate) struct Script {
    pub(crate) arrivals: Mutex<Vec<Instant>>,
    pub(crate) answers: Mutex<VecDeque<Answer>>,
}

impl Script {
    /// The tokio times requests arrived at.
    pub(crate) fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().expect("lock").clone()
    }
}

async fn answer(State(script): State<Arc<Script>>) -> Response {
    script.arrivals.lock().expect("lock").push(Instant::now());
    let next = script.answers.lock().expect("lock").pop_front();
    let Some(next) = next else {
        return "ok".into_response();
    };
    let (status, headers) = next();
    let mut response = (status, "scripted").into_response();
    for (name, value) in headers {
        response.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::try_from(value).expect("header value"),
        );
    }
    response
}

/// A server answering with `answers`, then 200s: its address and its script.
pub(crate) async fn server(answers: Vec<Answer>) -> (SocketAddr, Arc<Script>) {
    let script = Arc::new(Script::default());
    script.answers.lock().expect("lock").extend(answers);
    let app = Router::new()
        .route("/", get(answer))
        .with_state(Arc::clone(&script));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, script)
}

/// The hyper-util client, paced by `layer`.
pub(crate) type Paced<C> = Pace<Client<HttpConnector, Empty<Bytes>>, C>;

pub(crate) fn paced<C: Clock + 'static>(layer: &PaceLayer<C>) -> Paced<C> {
    // No pool timer: no idle timeout that tokio's paused clock could jump to.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    layer.layer(client)
}

/// A GET of `/` on `address` through `service`: the status, or the pacing error.
pub(crate) async fn call<C: Clock + 'static>(
    service: &mut Paced<C>,
    address: SocketAddr,
) -> Result<StatusCode, PaceError<hyper_util::client::legacy::Error>> {
    let request = Request::get(format!("http://{address}/"))
        .body(Empty::new())
        .expect("request");
    let response = service.ready().await?.call(request).await?;
    let status = response.status();
    // Read to the end, so the connection goes back to the pool.
    response.into_body().collect().await.expect("body");
    Ok(status)
}
