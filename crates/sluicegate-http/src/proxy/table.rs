//! The rules made ready to serve: each route's layer around the upstream, looked up by path
//! as nginx picks a location (an exact match first, then the longest prefix).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode, Version, header};
use http_body_util::Either;
use hyper::body::Incoming;
use tower_layer::Layer;
use tower_service::Service;

use crate::adaptive::{AdaptiveBody, AdaptiveLimitLayer};

use crate::proxy::backend::RouteBackend;
use crate::proxy::backing::Backing;
use crate::proxy::forward::{Forwarder, Upstream, UpstreamBody, text};
use crate::proxy::key::RouteExtractor;
use crate::proxy::limiter::Limiter;
use crate::proxy::metrics::Metrics;
use crate::proxy::rules::{AdaptiveDef, RouteDef, Rules};
use crate::rate_limit::{BuildError, RateLimit, RateLimitBody, RateLimitLayer, Rejection};

/// A route's limits around the upstream.
pub(crate) type Limited = RateLimit<Upstream, RouteExtractor, RouteBackend>;

/// What a request is answered by.
pub(crate) enum Handler {
    Limited(Limited),
    Plain(Upstream),
}

pub(crate) struct Route {
    handler: Handler,
    /// The route's adaptive concurrency limit, in front of its limits.
    adaptive: Option<AdaptiveLimitLayer>,
}

/// The routes of one version of the rules.
pub(crate) struct Table {
    routes: Vec<Route>,
    exact: HashMap<String, usize>,
    /// Longest first.
    prefixes: Vec<(String, usize)>,
    /// Requests no route matches: passed on, counted under `unmatched`.
    unmatched: Upstream,
    /// Every limit's state, by name, for the next reload to keep.
    limiters: HashMap<String, Arc<Limiter>>,
    /// Every route's adaptive limit, by route name, for the next reload to keep.
    adaptive: HashMap<String, (AdaptiveDef, AdaptiveLimitLayer)>,
    /// Where the counters are.
    backing: Backing,
}

/// The metrics name of requests no route matches.
pub(crate) const UNMATCHED: &str = "(unmatched)";

impl Table {
    /// Builds the routes of `rules`, keeping the state of every limit `previous` had with the
    /// same definition.
    pub(crate) fn build(
        rules: &Rules,
        backing: &Backing,
        forwarder: &Arc<Forwarder>,
        metrics: &Arc<Metrics>,
        previous: Option<&Table>,
    ) -> Result<Table, BuildError> {
        let mut limiters = HashMap::new();
        for (index, def) in rules.limits.iter().enumerate() {
            let kept = previous
                .and_then(|p| p.limiters.get(&def.name))
                .filter(|l| l.serves(def));
            let limiter = match kept {
                Some(l) => Arc::clone(l),
                None => {
                    let limiter =
                        backing
                            .limiter(def.clone())
                            .map_err(|source| BuildError::Limit {
                                index,
                                spec: def.spec.clone(),
                                source,
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
            unmatched: Upstream {
                forwarder: Arc::clone(forwarder),
                counters: metrics.route(UNMATCHED),
            },
            limiters,
            adaptive: HashMap::new(),
            backing: backing.clone(),
        };
        for (index, def) in rules.routes.iter().enumerate() {
            let mut route = table.route(rules, def, forwarder, metrics)?;
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
                route.adaptive = Some(layer.clone());
                table
                    .adaptive
                    .insert(def.name.clone(), (adaptive.clone(), layer));
            }
            table.routes.push(route);
            match &def.path {
                crate::proxy::rules::PathMatch::Exact(p) => {
                    table.exact.insert(p.clone(), index);
                }
                crate::proxy::rules::PathMatch::Prefix(p) => {
                    table.prefixes.push((p.clone(), index));
                }
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
    ) -> Result<Route, BuildError> {
        let counters = metrics.route(&def.name);
        let upstream = Upstream {
            forwarder: Arc::clone(forwarder),
            counters: Arc::clone(&counters),
        };
        let limiters: Vec<Arc<Limiter>> = def
            .limits
            .iter()
            .filter_map(|name| self.limiters.get(name).cloned())
            .collect();
        if limiters.is_empty() {
            counters.follow(None);
            return Ok(Route {
                handler: Handler::Plain(upstream),
                adaptive: None,
            });
        }
        let extractor = RouteExtractor {
            route: def.name.as_str().into(),
            client_ip: rules.client_ip.clone(),
            keys: limiters.iter().map(|l| l.def.key.clone()).collect(),
        };
        let backend = RouteBackend::new(limiters, &self.backing);
        let mut builder = RateLimitLayer::builder(extractor)
            .status(def.status)
            .dry_run(def.dry_run)
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
        let layer = builder.build_with(backend)?;
        let stats_layer = layer.clone();
        counters.follow(Some(Box::new(move || stats_layer.stats())));
        Ok(Route {
            handler: Handler::Limited(layer.layer(upstream)),
            adaptive: None,
        })
    }

    /// The index of the route serving `path`.
    pub(crate) fn find(&self, path: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(path) {
            return Some(i);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, i)| *i)
    }
}

/// The body of a route's response: through its limits, or passed on.
pub type RouteBody = http_body_util::Either<RateLimitBody<UpstreamBody>, UpstreamBody>;

/// The body of every proxy response: through a route's adaptive limit, or not.
pub type ProxyBody = http_body_util::Either<AdaptiveBody<RouteBody>, RouteBody>;

/// Answers `request` as `table` says.
pub(crate) async fn handle(table: Arc<Table>, request: Request<Incoming>) -> Response<ProxyBody> {
    if let Some(wrong) = host_is_wrong(&request) {
        // Before any limit: a request no server may take spends no budget.
        let body = format!("400 Bad Request: {wrong}\n");
        return text(StatusCode::BAD_REQUEST, body).map(|body| Either::Right(Either::Right(body)));
    }
    let index = table.find(request.uri().path());
    let adaptive = index.and_then(|i| table.routes[i].adaptive.clone());
    let route = ByRoute { table, index };
    match adaptive {
        None => route
            .answer(request)
            .await
            .map(http_body_util::Either::Right),
        Some(layer) => {
            // `ByRoute` is always ready: no `poll_ready` to wait for.
            match layer.layer(route).call(request).await {
                Ok(response) => response.map(http_body_util::Either::Left),
                Err(never) => match never {},
            }
        }
    }
}

/// What is wrong with the request's `Host`, if anything (RFC 9112 section 3.2, as nginx
/// reads it): never more than one field, for the limits keyed on the first and the upstream
/// could read another; and one in every HTTP/1.1 request, its target in absolute form or not
/// (h2 names its host in `:authority`, HTTP/1.0 may name none).
fn host_is_wrong(request: &Request<Incoming>) -> Option<&'static str> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("the request has more than one Host field"),
        (None, _) if request.version() == Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host field")
        }
        _ => None,
    }
}

/// The route a request goes to, as a service the adaptive layer can wrap.
#[derive(Clone)]
struct ByRoute {
    table: Arc<Table>,
    index: Option<usize>,
}

impl ByRoute {
    async fn answer(self, request: Request<Incoming>) -> Response<RouteBody> {
        let handler = match self.index.map(|i| &self.table.routes[i].handler) {
            Some(Handler::Limited(service)) => Ok(service.clone()),
            Some(Handler::Plain(upstream)) => Err(upstream.clone()),
            None => Err(self.table.unmatched.clone()),
        };
        match handler {
            Ok(mut service) => match service.call(request).await {
                Ok(response) => response.map(http_body_util::Either::Left),
                Err(never) => match never {},
            },
            Err(mut upstream) => match upstream.call(request).await {
                Ok(response) => response.map(http_body_util::Either::Right),
                Err(never) => match never {},
            },
        }
    }
}

impl Service<Request<Incoming>> for ByRoute {
    type Response = Response<RouteBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RouteBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let route = self.clone();
        Box::pin(async move { Ok(route.answer(request).await) })
    }
}
