//! Forwarding to the upstream: the request rewritten as a reverse proxy must
//! (`rewrite::request_for_upstream`), its body taken within the proxy's bounds
//! (`request_body`), sent by the HTTP client (`upstream`), and its response rewritten for the
//! client (`rewrite::response_for_client`); what keeps the upstream from answering is
//! answered here with a text body (502, 504; 408, 413 and 400 for what keeps the client from
//! sending its body).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use tower_service::Service;

use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use crate::proxy::client_body::ClientBody;
use crate::proxy::error::ProxyError;
use crate::proxy::metrics::{Metrics, RouteCounters};
use crate::proxy::request_body::{BodyBounds, BodyFailure, RequestBody, take_body};
use crate::proxy::rewrite::{ForwardingFields, request_for_upstream, response_for_client};
use crate::proxy::upstream::{PooledBody, SendError, UpstreamClient};

/// A response body: the upstream's, streamed, or the proxy's own short text.
pub type UpstreamBody = Either<PooledBody, Full<Bytes>>;

/// Where requests go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) authority: Authority,
    /// `https://`: the upstream is reached over TLS.
    pub(crate) tls: bool,
}

impl Target {
    /// Reads `http://host[:port][/]` or `https://host[:port][/]`.
    pub(crate) fn parse(url: &str) -> Result<Target, ProxyError> {
        let bad = |reason: &str| ProxyError::Upstream {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let tls = match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP => false,
            Some(scheme) if *scheme == Scheme::HTTPS => true,
            _ => return Err(bad("only http:// and https:// upstreams are supported")),
        };
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("a path or query in the upstream URL is not supported"));
        }
        Ok(Target { authority, tls })
    }
}

/// The shared part of every route's upstream service.
pub(crate) struct Forwarder {
    pub(crate) client: UpstreamClient,
    pub(crate) target: Target,
    /// How long the upstream may take to take the next bytes of a request, to answer once it
    /// has all of it, and to send the next bytes of its answer.
    pub(crate) upstream_timeout: Duration,
    /// How request bodies are taken.
    pub(crate) bodies: BodyBounds,
    /// The forwarding fields the client is appended to.
    pub(crate) forwarding: ForwardingFields,
    /// The upstream's authority as the URL gave it: the `Host` of a request that names none.
    pub(crate) fallback_host: HeaderValue,
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
        let (parts, body, client_switch) = self.forwarder.rewrite(request);
        Box::pin(Arc::clone(&self.forwarder).forward(parts, body, client_switch))
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
    /// `request`'s head rewritten for the upstream, its body, and the client's side of the
    /// switch to WebSocket it asks for, if the upstream is asked it.
    ///
    /// The head is boxed: it goes through several futures on its way to hyper's, and moves as
    /// a pointer; each of them would otherwise hold a copy, and the forwarding future would be
    /// too large for the allocator's fast path.
    fn rewrite(&self, request: Request<ClientBody>) -> (Box<Parts>, Incoming, Option<OnUpgrade>) {
        let (mut parts, ClientBody { body, client }) = request.into_parts();
        // Without the client's side of a switch, a switch is not asked of the upstream.
        let client_switch = parts.extensions.remove::<OnUpgrade>();
        let websocket = request_for_upstream(
            &mut parts,
            (&client, self.forwarding),
            &self.fallback_host,
            !http_body::Body::is_end_stream(&body),
            client_switch.is_some(),
        );
        (Box::new(parts), body, client_switch.filter(|_| websocket))
    }

    /// Passes the request (`parts` rewritten, and `body`) to the upstream and its answer
    /// back, or answers why not.
    async fn forward(
        self: Arc<Self>,
        mut parts: Box<Parts>,
        body: Incoming,
        client_switch: Option<OnUpgrade>,
    ) -> Result<Response<UpstreamBody>, Infallible> {
        let body = if http_body::Body::is_end_stream(&body) {
            // `Content-Length: 0` (passed on as it came), or no body at all.
            RequestBody::Empty
        } else {
            // Boxed, as the head is: most requests have no body to take.
            let taken = take_body(body, &parts.method, &mut parts.headers, self.bodies);
            match Box::pin(taken).await {
                Ok(body) => body,
                Err(failure) => return Ok(self.body_failed(failure)),
            }
        };
        let request = Box::new(Request::from_parts(*parts, body));
        let sent = self
            .client
            .send(request, client_switch, self.upstream_timeout)
            .await;
        Ok(match sent {
            Ok(mut response) => {
                let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
                response_for_client(response.headers_mut(), switched);
                response.map(Either::Left)
            }
            Err(error) => self.not_answered(error),
        })
    }

    /// The answer to a request the upstream did not answer.
    fn not_answered(&self, error: SendError) -> Response<UpstreamBody> {
        match error {
            SendError::Connect(error) => {
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
            SendError::Upstream(error) => self.upstream_failed(&error_chain(&error)),
            SendError::Switched => {
                self.upstream_failed("it switched protocols for a request that asked for no switch")
            }
            SendError::AmbiguousFraming(why) => self.upstream_failed(why),
            stalled @ (SendError::Timeout | SendError::BodyNotTaken) => {
                Metrics::count(&self.metrics.upstream_timeouts);
                let what = match stalled {
                    SendError::BodyNotTaken => "took nothing more of the request body for",
                    _ => "did not answer within",
                };
                text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "504 Gateway Timeout: the upstream {} {what} {:?}\n",
                        self.target.authority, self.upstream_timeout
                    ),
                )
            }
            SendError::Body(failure) => self.body_failed(failure),
        }
    }

    fn upstream_failed(&self, why: &str) -> Response<UpstreamBody> {
        Metrics::count(&self.metrics.upstream_other_errors);
        tracing::warn!(error = why, "proxy: the upstream failed");
        text(
            StatusCode::BAD_GATEWAY,
            format!("502 Bad Gateway: the upstream failed: {why}\n"),
        )
    }

    /// The answer to a request whose body did not come whole.
    fn body_failed(&self, failure: BodyFailure) -> Response<UpstreamBody> {
        match failure {
            BodyFailure::ClientTimeout => {
                Metrics::count(&self.metrics.client_body_timeouts);
                let waited = self.bodies.client_timeout.unwrap_or_default();
                text(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "408 Request Timeout: nothing more of the request body came for {waited:?}\n"
                    ),
                )
            }
            BodyFailure::TooLarge(max) => too_large(&self.metrics, max),
            // The client is most likely gone (nginx logs 499); if it is not, it learns why.
            BodyFailure::Client(error) => {
                tracing::debug!(error = %error_chain(&error), "proxy: the request body failed");
                text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "400 Bad Request: the request body failed: {}\n",
                        error_chain(&error)
                    ),
                )
            }
        }
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
