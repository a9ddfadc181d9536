//! The rules made ready to serve: each route's layer around the upstream, looked up by path
//! as nginx picks a location (an exact match first, then the longest prefix).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use std::borrow::Cow;

use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version, header};
use http_body_util::Either;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use sluicegate_http::adaptive::{AdaptiveBody, AdaptiveLimit, AdaptiveLimitLayer};

use crate::plumbing::{Mode, ModeTable};
use crate::proxy::client_body::ClientBody;
use crate::proxy::forward::{Forwarder, Upstream, UpstreamBody, text, too_large};
use crate::proxy::guards;
use crate::proxy::key::{LimitKey, RouteExtractor};
use crate::proxy::limit_counters::LimitCounters;
use crate::proxy::limiter::Limiter;
use crate::proxy::metrics::{Metrics, RouteCounters};
use crate::proxy::route_decider::RouteDecider;
use crate::proxy::rules::{AdaptiveDef, PathMatch, PathRules, RouteDef, Rules};
use sluicegate_http::rate_limit::key::RequestHead;
use sluicegate_http::rate_limit::key::normal::{
    encoded_path, normal_host, normal_path, request_host,
};
use sluicegate_http::rate_limit::{
    BuildError, RateLimit, RateLimitBody, RateLimitLayer, Rejection,
};

/// A route's limits around the upstream.
pub(crate) type Limited = RateLimit<Upstream, RouteExtractor, RouteDecider>;

/// What a request is answered by.
pub(crate) enum Handler {
    Limited(Limited),
    Plain(Upstream),
    /// The switch's `closed` mode: the route's denial status, nothing decided or charged.
    Closed {
        status: StatusCode,
        counters: Arc<RouteCounters>,
    },
}

pub(crate) struct Route {
    handler: Handler,
    /// The route's adaptive concurrency limit, in front of its limits.
    adaptive: Option<AdaptiveLimitLayer>,
}

/// The routes of one version of the rules.
pub(crate) struct Table {
    routes: Vec<Route>,
    /// Paths in their normal form, in lower case when `paths.case_insensitive`.
    exact: HashMap<Box<[u8]>, usize>,
    /// Longest first.
    prefixes: Vec<(Box<[u8]>, usize)>,
    /// How paths are matched and passed on.
    paths: PathRules,
    /// Requests no route matches: passed on, counted under `unmatched`.
    unmatched: Upstream,
    /// Every limit's state, by name, for the next reload to keep.
    limiters: HashMap<String, Arc<Limiter>>,
    /// Every route's adaptive limit, by route name, for the next reload to keep.
    adaptive: HashMap<String, (AdaptiveDef, AdaptiveLimitLayer)>,
    /// Where the counters are.
    limit_counters: LimitCounters,
}

/// The metrics name of requests no route matches.
pub(crate) const UNMATCHED: &str = "(unmatched)";

impl Table {
    /// Builds the routes of `rules`, keeping the state of every limit `previous` had with the
    /// same definition.
    pub(crate) fn build(
        rules: &Rules,
        limit_counters: &LimitCounters,
        forwarder: &Arc<Forwarder>,
        metrics: &Arc<Metrics>,
        previous: Option<&Table>,
        modes: &ModeTable,
    ) -> Result<Table, BuildError> {
        let mut limiters = HashMap::new();
        for (index, def) in rules.limits.iter().enumerate() {
            let kept = previous
                .and_then(|p| p.limiters.get(&def.name))
                .filter(|l| l.serves(def));
            let limiter = match kept {
                Some(l) => Arc::clone(l),
                None => {
                    let limiter = limit_counters.limiter(def.clone()).map_err(|source| {
                        BuildError::Limit {
                            index,
                            spec: def.spec.clone(),
                            source,
                        }
                    })?;
                    Arc::new(limiter)
                }
            };
            limiters.insert(def.name.clone(), limiter);
        }
        let mut table = Table {
            routes: Vec::new(),
            exact: HashMap::new(),
            prefixes: Vec::new(),
            paths: rules.paths,
            unmatched: Upstream {
                forwarder: Arc::clone(forwarder),
                counters: metrics.route(UNMATCHED),
            },
            limiters,
            adaptive: HashMap::new(),
            limit_counters: limit_counters.clone(),
        };
        for (index, def) in rules.routes.iter().enumerate() {
            let mode = modes.of(&def.name);
            let mut route = table.route(rules, def, forwarder, metrics, mode)?;
            if let Some(adaptive) = &def.adaptive {
                // An unchanged setting keeps its limiter, and the limit it has learnt.
                let kept = previous
                    .and_then(|p| p.adaptive.get(&def.name))
                    .filter(|(old, _)| old == adaptive)
                    .map(|(_, layer)| layer.clone());
                let layer = match kept {
                    Some(layer) => layer,
                    None => adaptive.layer().map_err(|source| BuildError::Limit {
                        index,
                        spec: format!("adaptive limit of route `{}`", def.name),
                        source,
                    })?,
                };
                // It has no dry run: it applies when the route enforces, and is kept for when
                // it does again.
                if mode == Mode::Enforce {
                    route.adaptive = Some(layer.clone());
                }
                table
                    .adaptive
                    .insert(def.name.clone(), (adaptive.clone(), layer));
            }
            table.routes.push(route);
            let fold = |pattern: &str| -> Box<[u8]> {
                match rules.paths.case_insensitive {
                    true => pattern.to_ascii_lowercase().into_bytes().into(),
                    false => pattern.as_bytes().into(),
                }
            };
            match &def.path {
                PathMatch::Exact(p) => {
                    table.exact.insert(fold(p), index);
                }
                PathMatch::Prefix(p) => table.prefixes.push((fold(p), index)),
            }
        }
        table
            .prefixes
            .sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        metrics.adaptive(
            table
                .adaptive
                .iter()
                .map(|(name, (_, layer))| (name.clone(), layer.clone()))
                .collect(),
        );
        Ok(table)
    }

    fn route(
        &self,
        rules: &Rules,
        def: &RouteDef,
        forwarder: &Arc<Forwarder>,
        metrics: &Arc<Metrics>,
        mode: Mode,
    ) -> Result<Route, BuildError> {
        let counters = metrics.route(&def.name);
        if mode == Mode::Closed {
            counters.follow(None);
            return Ok(Route {
                handler: Handler::Closed {
                    status: def.status,
                    counters,
                },
                adaptive: None,
            });
        }
        let upstream = Upstream {
            forwarder: Arc::clone(forwarder),
            counters: Arc::clone(&counters),
        };
        let limiters: Vec<Arc<Limiter>> = def
            .limits
            .iter()
            .filter_map(|name| self.limiters.get(name).cloned())
            .collect();
        if limiters.is_empty() || mode == Mode::Open {
            counters.follow(None);
            return Ok(Route {
                handler: Handler::Plain(upstream),
                adaptive: None,
            });
        }
        let keys = limiters.iter().map(|l| LimitKey {
            parts: l.def.key.clone(),
            on_missing: l.def.on_missing_key.clone(),
        });
        let extractor = RouteExtractor {
            route: def.name.as_str().into(),
            client_ip: rules.client_ip.clone(),
            keys: keys.collect(),
            fold_case: rules.paths.case_insensitive,
        };
        let decider = RouteDecider::new(limiters, &self.limit_counters);
        let mut builder = RateLimitLayer::builder(extractor)
            .peer_from_body(|body: &ClientBody| body.client.ip())
            .status(def.status)
            .dry_run(def.dry_run || mode == Mode::Shadow)
            .headers_on_allowed(def.headers_on_allowed);
        if def.conn_status != def.status {
            // nginx answers a `limit_conn` rejection with `limit_conn_status`: a denial no
            // rate limit took part in is a concurrency limit's.
            let conn_status = def.conn_status;
            builder = builder.on_rejection(move |why, mut response| {
                if let Rejection::Limited(verdict) = why {
                    let rate_denied = verdict
                        .decisions()
                        .iter()
                        .zip(verdict.limits())
                        .any(|(d, info)| !d.allowed() && !info.is_concurrency());
                    if !rate_denied {
                        *response.status_mut() = conn_status;
                    }
                }
                response
            });
        }
        let layer = builder.build_with(decider)?;
        let stats_layer = layer.clone();
        counters.follow(Some(Box::new(move || stats_layer.stats())));
        Ok(Route {
            handler: Handler::Limited(layer.layer(upstream)),
            adaptive: None,
        })
    }

    /// The index of the route serving `path` (in its normal form).
    pub(crate) fn find(&self, path: &[u8]) -> Option<usize> {
        if let Some(&i) = self.exact.get(path) {
            return Some(i);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix))
            .map(|(_, i)| *i)
    }
}

/// The body of a route's response: through its limits, or passed on.
pub type RouteBody = http_body_util::Either<RateLimitBody<UpstreamBody>, UpstreamBody>;

/// The body of every proxy response: through a route's adaptive limit, or not.
pub type ProxyBody = http_body_util::Either<AdaptiveBody<RouteBody>, RouteBody>;

/// Answers `request` as `table` says: routed, and through the route's limits, at once; the
/// returned future waits for what they and the upstream answer.
///
/// Not an `async fn`: each layer of those would hold the request (272 bytes with its
/// `ClientBody`) and be copied into the next, and the future hyper keeps per request would be
/// the sum of them.
pub(crate) fn handle(table: &Arc<Table>, mut request: Request<ClientBody>) -> ProxyFuture {
    let refused = |refused: Response<UpstreamBody>| ProxyFuture::Now {
        future: std::future::ready(refused.map(|body| Either::Right(Either::Right(body)))),
    };
    let path = request.uri().path();
    let (index, rewrite) = match normal_path(path.as_bytes(), table.paths.case_insensitive) {
        Ok(normal) => {
            let index = table.find(&normal);
            let rewrite = match normal {
                Cow::Owned(_) if table.paths.forward_normal => {
                    // The normal form in the case it was sent in.
                    normal_path(path.as_bytes(), false)
                        .ok()
                        .map(Cow::into_owned)
                }
                _ => None,
            };
            (index, rewrite)
        }
        Err(error) => {
            return refused(text(
                StatusCode::BAD_REQUEST,
                format!("400 Bad Request: {error}\n"),
            ));
        }
    };
    if let Some(answer) = refused_before_limits(table, &request) {
        return refused(answer);
    }
    if let Some(Handler::Closed { status, counters }) = index.map(|i| &table.routes[i].handler) {
        Metrics::count(&counters.closed);
        return refused(text(
            *status,
            format!("{status}: this route is closed by the manual switch\n"),
        ));
    }
    absolute_form_names_the_host(&mut request);
    if let Some(normal) = rewrite {
        set_path(&mut request, &normal);
    }
    match index.and_then(|i| table.routes[i].adaptive.as_ref()) {
        None => ProxyFuture::Route {
            future: table.send_through(index, request),
        },
        Some(adaptive) => {
            let route = ByRoute {
                table: Arc::clone(table),
                index,
            };
            // `ByRoute` is always ready: no `poll_ready` to wait for.
            ProxyFuture::Adaptive {
                future: adaptive.layer(route).call(request),
            }
        }
    }
}

impl Table {
    /// `request` through the handler of route `index` (none: no route matched).
    fn send_through(&self, index: Option<usize>, request: Request<ClientBody>) -> RouteFuture {
        match index.map(|i| &self.routes[i].handler) {
            Some(Handler::Limited(service)) => RouteFuture::Limited {
                future: service.clone().call(request),
            },
            Some(Handler::Plain(upstream)) => RouteFuture::Plain {
                future: upstream.clone().call(request),
            },
            // Answered in `handle`, before any route is sent through.
            Some(Handler::Closed { .. }) | None => RouteFuture::Plain {
                future: self.unmatched.clone().call(request),
            },
        }
    }
}

pin_project! {
    /// The proxy's answer to a request on its way ([`handle`]): ready, or through a route.
    #[project = ProxyFutureProj]
    pub(crate) enum ProxyFuture {
        /// Answered by the proxy itself.
        Now { #[pin] future: std::future::Ready<Response<ProxyBody>> },
        /// Through a route's limits, or none.
        Route { #[pin] future: RouteFuture },
        /// Through a route's adaptive limit, then its limits.
        Adaptive { #[pin] future: <AdaptiveLimit<ByRoute> as Service<Request<ClientBody>>>::Future },
    }
}

impl Future for ProxyFuture {
    type Output = Response<ProxyBody>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<ProxyBody>> {
        match self.project() {
            ProxyFutureProj::Now { future } => future.poll(cx),
            ProxyFutureProj::Route { future } => {
                future.poll(cx).map(|response| response.map(Either::Right))
            }
            ProxyFutureProj::Adaptive { future } => {
                future.poll(cx).map(|answered| match answered {
                    Ok(response) => response.map(Either::Left),
                    Err(never) => match never {},
                })
            }
        }
    }
}

pin_project! {
    /// A route's answer to a request on its way: through its limits, or passed on.
    #[project = RouteFutureProj]
    pub(crate) enum RouteFuture {
        Limited { #[pin] future: <Limited as Service<Request<ClientBody>>>::Future },
        Plain { #[pin] future: <Upstream as Service<Request<ClientBody>>>::Future },
    }
}

impl Future for RouteFuture {
    type Output = Response<RouteBody>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<RouteBody>> {
        let answered = match self.project() {
            RouteFutureProj::Limited { future } => {
                ready!(future.poll(cx)).map(|response| response.map(Either::Left))
            }
            RouteFutureProj::Plain { future } => {
                ready!(future.poll(cx)).map(|response| response.map(Either::Right))
            }
        };
        match answered {
            Ok(response) => Poll::Ready(response),
            Err(never) => match never {},
        }
    }
}

/// The answer to a request refused before any limit sees it, so that it spends no budget: one
/// no server may take (400, [`host_is_wrong`]), or one whose body announces more bytes than
/// the proxy takes (413, as nginx's `client_max_body_size`).
fn refused_before_limits(
    table: &Table,
    request: &Request<ClientBody>,
) -> Option<Response<UpstreamBody>> {
    if let Some(wrong) = host_is_wrong(request) {
        let body = format!("400 Bad Request: {wrong}\n");
        return Some(text(StatusCode::BAD_REQUEST, body));
    }
    if guards::has_unknown_coding(request.headers()) {
        let body = "501 Not Implemented: a Transfer-Encoding other than chunked alone\n";
        return Some(text(StatusCode::NOT_IMPLEMENTED, body.to_owned()));
    }
    let forwarder = &table.unmatched.forwarder;
    let max = forwarder.bodies.refuses(&request.body().body)?;
    Some(too_large(&forwarder.metrics, max))
}

/// What is wrong with the request's host, if anything (RFC 9112 section 3.2, as nginx reads
/// it): never more than one `Host` field, for the limits could key on one and the upstream
/// read another; one in every HTTP/1.1 request, its target in absolute form or not (h2 names
/// its host in `:authority`, HTTP/1.0 may name none); and the host named must be one
/// ([`normal_host`]), and an h2 request's `Host` the same as its `:authority`.
fn host_is_wrong<B>(request: &Request<B>) -> Option<String> {
    let named =
        request_host(&RequestHead::of(request)).and_then(|host| host.map(normal_host).transpose());
    match named {
        Err(wrong) => Some(wrong.to_string()),
        Ok(None) if request.version() == Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host field".to_owned())
        }
        Ok(_) => None,
    }
}

/// An HTTP/1 request in absolute form (`GET http://a.example/x`) is for the host its request
/// line names, whatever its `Host` says (RFC 9112 section 3.2.2): the upstream gets that host.
fn absolute_form_names_the_host<B>(request: &mut Request<B>) {
    if request.version() >= Version::HTTP_2 {
        return;
    }
    let Some(authority) = request.uri().authority() else {
        return;
    };
    if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
        request.headers_mut().insert(header::HOST, host);
    }
}

/// Sets the request's path to `normal` (percent-encoded again where it must be), keeping its
/// query.
fn set_path<B>(request: &mut Request<B>, normal: &[u8]) {
    let mut target = encoded_path(normal).into_owned();
    if let Some(query) = request.uri().query() {
        target.push(b'?');
        target.extend_from_slice(query.as_bytes());
    }
    let mut parts = request.uri().clone().into_parts();
    if let Ok(path) = PathAndQuery::try_from(target) {
        parts.path_and_query = Some(path);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

pin_project! {
    /// A future's answer as a service's, which never fails.
    pub(crate) struct Answered<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Answered<F> {
    type Output = Result<F::Output, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().future.poll(cx).map(Ok)
    }
}

/// The route a request goes to, as a service the adaptive layer can wrap.
#[derive(Clone)]
struct ByRoute {
    table: Arc<Table>,
    index: Option<usize>,
}

impl Service<Request<ClientBody>> for ByRoute {
    type Response = Response<RouteBody>;
    type Error = Infallible;
    type Future = Answered<RouteFuture>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ClientBody>) -> Self::Future {
        Answered {
            future: self.table.send_through(self.index, request),
        }
    }
}
