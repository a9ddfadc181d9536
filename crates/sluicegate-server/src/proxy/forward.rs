//! Forwarding to the upstream: the request sent on a pooled keep-alive connection, rewritten
//! as a reverse proxy must on the way (hop-by-hop fields dropped, `X-Forwarded-For` and
//! `Forwarded` appended: `upstream::request`, `upstream::response`), bodies streamed both
//! ways; errors answered 502 / 504 with a text body.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use tower_service::Service;

use crate::proxy::client_body::ClientBody;
use crate::proxy::error::ProxyError;
use crate::proxy::metrics::{Metrics, RouteCounters};
use crate::proxy::upstream::{PooledBody, Pools, SendError, Timeouts, Written};

/// A response body: the upstream's, streamed, or the proxy's own short text.
pub type UpstreamBody = Either<PooledBody, Full<Bytes>>;

/// Where requests go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) authority: Authority,
}

impl Target {
    /// Reads `http://host[:port][/]`.
    pub(crate) fn parse(url: &str) -> Result<Target, ProxyError> {
        let bad = |reason: &str| ProxyError::Upstream {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(bad("only http:// upstreams are supported"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("a path or query in the upstream URL is not supported"));
        }
        Ok(Target { authority })
    }
}

/// The shared part of every route's upstream service.
pub(crate) struct Forwarder {
    pub(crate) pools: Pools,
    pub(crate) target: Target,
    pub(crate) timeouts: Timeouts,
    pub(crate) metrics: Arc<Metrics>,
}

/// The service a route's limits wrap: forwards to the upstream, counting what it passes.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) counters: Arc<RouteCounters>,
}

impl Service<Request<ClientBody>> for Upstream {
    type Response = Response<UpstreamBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ClientBody>) -> Self::Future {
        Metrics::count(&self.counters.passed);
        if request.method() == Method::CONNECT {
            // Its 2xx answer would turn the upstream connection into a tunnel.
            let answer = text(
                StatusCode::NOT_IMPLEMENTED,
                "501 Not Implemented: the proxy does not tunnel (CONNECT)\n".to_owned(),
            );
            return Box::pin(std::future::ready(Ok(answer)));
        }
        // Written now, so that the future (boxed, and copied into its box) holds the head
        // rather than the request; the forwarder's own future, with no `async` block around
        // it to be copied into.
        let written = self.forwarder.pools.write(request);
        Box::pin(Arc::clone(&self.forwarder).forward(written))
    }
}

/// A short text answer from the proxy itself.
pub(crate) fn text(status: StatusCode, body: String) -> Response<UpstreamBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl Forwarder {
    /// Sends `written` to the upstream; what keeps the upstream from answering is answered
    /// here (502, 504; 408, 413 and 400 for what keeps the client from sending its body).
    async fn forward(
        self: Arc<Self>,
        written: Written,
    ) -> Result<Response<UpstreamBody>, Infallible> {
        let response = match self.pools.send(written, self.timeouts).await {
            Ok(response) => response.map(Either::Left),
            Err(SendError::Connect(error)) => {
                Metrics::count(&self.metrics.upstream_connect_errors);
                tracing::warn!(%error, "proxy: cannot connect to the upstream");
                text(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "502 Bad Gateway: cannot connect to the upstream {}: {error}\n",
                        self.target.authority,
                    ),
                )
            }
            Err(SendError::Upstream(error)) => {
                Metrics::count(&self.metrics.upstream_other_errors);
                tracing::warn!(error = %error_chain(&error), "proxy: the upstream failed");
                text(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "502 Bad Gateway: the upstream failed: {}\n",
                        error_chain(&error)
                    ),
                )
            }
            Err(stalled @ (SendError::Timeout | SendError::BodyNotTaken)) => {
                Metrics::count(&self.metrics.upstream_timeouts);
                let what = match stalled {
                    SendError::BodyNotTaken => "took nothing more of the request body for",
                    _ => "did not answer within",
                };
                text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "504 Gateway Timeout: the upstream {} {what} {:?}\n",
                        self.target.authority, self.timeouts.upstream
                    ),
                )
            }
            Err(SendError::ClientBodyTimeout) => {
                Metrics::count(&self.metrics.client_body_timeouts);
                let waited = self.timeouts.client_body.unwrap_or_default();
                text(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "408 Request Timeout: nothing more of the request body came for {waited:?}\n"
                    ),
                )
            }
            Err(SendError::BodyTooLarge(max)) => too_large(&self.metrics, max),
            // The client is most likely gone (nginx logs 499); if it is not, it learns why.
            Err(SendError::ClientBody(error)) => {
                tracing::debug!(error = %error_chain(&error), "proxy: the request body failed");
                text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "400 Bad Request: the request body failed: {}\n",
                        error_chain(&error)
                    ),
                )
            }
        };
        Ok(response)
    }
}

/// The answer to a request whose body is longer than `max` bytes, counted.
pub(crate) fn too_large(metrics: &Metrics, max: u64) -> Response<UpstreamBody> {
    Metrics::count(&metrics.client_body_too_large);
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("413 Content Too Large: the request body is longer than {max} bytes\n"),
    )
}

/// An error and its causes, `: `-separated (hyper's own message is only the outermost).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
