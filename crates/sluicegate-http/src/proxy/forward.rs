//! Forwarding to the upstream: the request rewritten as a reverse proxy must (hop-by-hop
//! fields dropped, `X-Forwarded-For` and `Forwarded` appended), sent on a pooled keep-alive
//! connection, bodies streamed both ways; errors answered 502 / 504 with a text body.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tower_service::Service;

use crate::proxy::error::ProxyError;
use crate::proxy::metrics::{Metrics, RouteCounters};
use crate::proxy::pool::{PooledBody, Pools, SendError};

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
    pub(crate) timeout: Duration,
    pub(crate) metrics: Arc<Metrics>,
}

/// The service a route's limits wrap: forwards to the upstream, counting what it passes.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) counters: Arc<RouteCounters>,
}

impl Service<Request<Incoming>> for Upstream {
    type Response = Response<UpstreamBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        Metrics::count(&self.counters.passed);
        let forwarder = Arc::clone(&self.forwarder);
        Box::pin(async move { Ok(forwarder.forward(request).await) })
    }
}

/// Fields that describe one connection, not the message: never forwarded (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name == header::UPGRADE
}

fn drop_hop_by_hop(headers: &mut HeaderMap) {
    // Only the names present are removed: removing by name hashes it, and most messages carry
    // one of these (`Connection`) or none.
    let mut present: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name))
        .cloned()
        .collect();
    if present.is_empty() {
        return;
    }
    // Fields the `Connection` field names are hop-by-hop too.
    present.extend(
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            // `close` is an option, not a field.
            .filter(|name| !name.eq_ignore_ascii_case("close") && !name.is_empty())
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok()),
    );
    for name in &present {
        headers.remove(name);
    }
}

/// `value` appended to the list in every `name` field, as one field.
fn append_list(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    let mut joined = String::new();
    for old in headers.get_all(&name) {
        if let Ok(old) = old.to_str() {
            joined.push_str(old);
            joined.push_str(", ");
        }
    }
    if joined.is_empty() {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
        return;
    }
    joined.push_str(value);
    if let Ok(value) = HeaderValue::try_from(joined) {
        headers.insert(name, value);
    }
}

/// The `Forwarded` element for a request from `ip` (RFC 7239): `for`, `host` when it can be
/// quoted as is, `proto`.
fn forwarded_element(ip: IpAddr, host: Option<&HeaderValue>) -> String {
    use std::fmt::Write as _;
    let mut element = String::with_capacity(64);
    // Writing to a String cannot fail.
    let _ = match ip {
        IpAddr::V4(v4) => write!(element, "for={v4}"),
        IpAddr::V6(v6) => write!(element, "for=\"[{v6}]\""),
    };
    if let Some(host) = host.and_then(|h| h.to_str().ok()) {
        if host.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
            let _ = write!(element, ";host=\"{host}\"");
        }
    }
    element.push_str(";proto=http");
    element
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
    async fn forward(&self, request: Request<Incoming>) -> Response<UpstreamBody> {
        let (mut parts, body) = request.into_parts();
        let peer = parts
            .extensions
            .get::<SocketAddr>()
            .map(|a| a.ip().to_canonical());
        drop_hop_by_hop(&mut parts.headers);
        // An h2 request names its host in the URI only; HTTP/1.1 to the upstream needs `Host`.
        if !parts.headers.contains_key(header::HOST) {
            if let Some(authority) = parts.uri.authority() {
                if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                    parts.headers.insert(header::HOST, host);
                }
            }
        }
        if let Some(ip) = peer {
            let forwarded = forwarded_element(ip, parts.headers.get(header::HOST));
            let for_ip = ip.to_string();
            append_list(
                &mut parts.headers,
                HeaderName::from_static("x-forwarded-for"),
                &for_ip,
            );
            append_list(&mut parts.headers, header::FORWARDED, &forwarded);
        }
        if !parts.headers.contains_key(header::HOST) {
            // An HTTP/1.0 request may have none.
            if let Ok(host) = HeaderValue::from_str(self.target.authority.as_str()) {
                parts.headers.insert(header::HOST, host);
            }
        }
        // Origin-form: the connection is to the upstream already.
        parts.uri = parts
            .uri
            .path_and_query()
            .cloned()
            .map_or_else(|| Uri::from_static("/"), Uri::from);
        parts.version = Version::HTTP_11;
        let request = Request::from_parts(parts, body);
        match tokio::time::timeout(self.timeout, self.pools.send(request)).await {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                drop_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Either::Left(body))
            }
            Ok(Err(SendError::Connect(error))) => {
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
            Ok(Err(SendError::Upstream(error))) => {
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
            Err(_) => {
                Metrics::count(&self.metrics.upstream_timeouts);
                text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "504 Gateway Timeout: the upstream {} did not answer within {:?}\n",
                        self.target.authority, self.timeout
                    ),
                )
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        map
    }

    fn names(map: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_dropped() {
        let mut map = headers(&[
            ("host", "a"),
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("upgrade", "h2c"),
            ("accept", "*/*"),
        ]);
        drop_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["accept", "host"]);
    }

    #[test]
    fn a_message_without_hop_by_hop_fields_is_left_alone() {
        let mut map = headers(&[("host", "a"), ("x-private", "1")]);
        drop_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["host", "x-private"]);
    }

    #[test]
    fn forwarding_fields_are_appended_to_what_came_in() {
        let mut map = headers(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        append_list(
            &mut map,
            HeaderName::from_static("x-forwarded-for"),
            "127.0.0.1",
        );
        append_list(&mut map, header::FORWARDED, "for=127.0.0.1");
        assert_eq!(map["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 127.0.0.1");
        assert_eq!(map.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(map[header::FORWARDED], "for=127.0.0.1");
    }

    #[test]
    fn the_forwarded_element_quotes_v6_and_skips_a_host_it_cannot_quote() {
        let host = HeaderValue::from_static("app.example:8080");
        assert_eq!(
            forwarded_element("::1".parse().expect("ip"), Some(&host)),
            "for=\"[::1]\";host=\"app.example:8080\";proto=http"
        );
        let odd = HeaderValue::from_static("a\"b");
        assert_eq!(
            forwarded_element("10.1.2.3".parse().expect("ip"), Some(&odd)),
            "for=10.1.2.3;proto=http"
        );
    }
}
