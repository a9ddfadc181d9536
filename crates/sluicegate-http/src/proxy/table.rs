//! The rules made ready to serve: each route's layer around the upstream, looked up by path
//! as nginx picks a location (an exact match first, then the longest prefix).

use std::collections::HashMap;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tower_layer::Layer;

use crate::proxy::backend::{Limiter, RouteBackend};
use crate::proxy::forward::{Forwarder, Upstream, UpstreamBody};
use crate::proxy::key::RouteExtractor;
use crate::proxy::metrics::Metrics;
use crate::proxy::rules::{RouteDef, Rules};
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
}

/// The metrics name of requests no route matches.
pub(crate) const UNMATCHED: &str = "(unmatched)";

impl Table {
    /// Builds the routes of `rules`, keeping the state of every limit `previous` had with the
    /// same definition.
    pub(crate) fn build(
        rules: &Rules,
        forwarder: &Arc<Forwarder>,
        metrics: &Arc<Metrics>,
        previous: Option<&Table>,
    ) -> Result<Table, BuildError> {
        let mut limiters = HashMap::new();
        for def in &rules.limits {
            let kept = previous
                .and_then(|p| p.limiters.get(&def.name))
                .filter(|l| l.serves(def));
            let limiter = match kept {
                Some(l) => Arc::clone(l),
                None => Arc::new(Limiter::new(def.clone())),
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
        };
        for (index, def) in rules.routes.iter().enumerate() {
            let route = table.route(rules, def, forwarder, metrics)?;
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
            });
        }
        let extractor = RouteExtractor {
            route: def.name.as_str().into(),
            client_ip: rules.client_ip.clone(),
            keys: limiters.iter().map(|l| l.def.key.clone()).collect(),
        };
        let backend = RouteBackend::new(limiters);
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
        })
    }

    /// The handler of a request for `path`.
    pub(crate) fn find(&self, path: &str) -> Option<&Handler> {
        if let Some(&i) = self.exact.get(path) {
            return Some(&self.routes[i].handler);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, i)| &self.routes[*i].handler)
    }
}

/// The body of every proxy response.
pub type ProxyBody = http_body_util::Either<RateLimitBody<UpstreamBody>, UpstreamBody>;

/// Answers `request` as `table` says.
pub(crate) async fn handle(table: Arc<Table>, request: Request<Incoming>) -> Response<ProxyBody> {
    use tower_service::Service;
    let handler = match table.find(request.uri().path()) {
        Some(Handler::Limited(service)) => Ok(service.clone()),
        Some(Handler::Plain(upstream)) => Err(upstream.clone()),
        None => Err(table.unmatched.clone()),
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
