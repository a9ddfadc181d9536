//! The proxy's rule file: how a request becomes a key, which limits apply on which route.
//!
//! Read from YAML with every node's line and column kept, so that every error names
//! `file:line:column`; all errors of a file are reported together.

use std::collections::HashMap;
use std::path::Path;

use http::{HeaderName, StatusCode};
use sluicegate::AnyAlgorithm;
use sluicegate_rules::Position;
use sluicegate_rules::yaml::{self, Node, Scalar, Value};

use crate::proxy::error::{RuleFileError, RuleProblem};
use crate::proxy::key::{KeyPart, OnMissingKey};
use sluicegate_http::rate_limit::key::normal::normal_path;
use sluicegate_http::rate_limit::key::{ClientIp, ForwardingHeader};

mod adaptive;

pub use adaptive::AdaptiveDef;

/// Keys a limit holds at most unless `max_keys` says (about what nginx stores in a 10 MB
/// zone of `$binary_remote_addr` keys).
pub const DEFAULT_LIMIT_KEYS: usize = 160_000;

/// A rule file, validated.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Rules {
    /// Where the file says the counters are kept (unsaid: wherever the proxy was started to
    /// keep them).
    pub backend: Option<BackendChoice>,
    /// How `client_ip` is read.
    pub client_ip: ClientIp,
    /// How paths are matched and passed on.
    pub paths: PathRules,
    /// The limits, by name, in file order.
    pub limits: Vec<LimitDef>,
    /// The routes, in file order.
    pub routes: Vec<RouteDef>,
    /// Where `backend` and each limit's `spec` are written, for problems found once the
    /// proxy's own settings are known.
    places: Places,
}

/// How routes match paths and what path the upstream gets (`paths:` in the file). Routes
/// always match a path in its normal form
/// ([`normal_path`](sluicegate_http::rate_limit::key::normal::normal_path)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PathRules {
    /// Routes match (and `path` keys are made) without regard to ASCII case.
    pub case_insensitive: bool,
    /// The upstream gets the path in its normal form, not as the client sent it (nginx's
    /// `proxy_pass` with a URI part).
    pub forward_normal: bool,
}

#[derive(Debug, Clone, Default)]
struct Places {
    backend: Option<Position>,
    /// In the order of [`Rules::limits`].
    specs: Vec<Position>,
    /// In the order of [`Rules::routes`].
    routes: Vec<Position>,
}

/// Where the limits' counters are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendChoice {
    /// In this process (one proxy, one budget).
    Memory,
    /// In Redis, shared by every proxy started with the same `--redis` (one budget for all).
    Redis,
}

/// One limit: nginx's `limit_req_zone` / `limit_conn_zone` with its `limit_req` /
/// `limit_conn` options.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimitDef {
    /// Its name (the zone's), in the response fields and metrics.
    pub name: String,
    /// What the key is made of, in order (a tuple when several).
    pub key: Vec<KeyPart>,
    /// The algorithm, from its spec string.
    pub algorithm: AnyAlgorithm,
    /// The spec as written.
    pub spec: String,
    /// Keys held at most (nginx's zone size).
    pub max_keys: usize,
    /// What a request whose key cannot be made gets.
    pub on_missing_key: OnMissingKey,
}

/// How a route matches a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PathMatch {
    /// The path is exactly this (nginx `location = /x`), in its normal form.
    Exact(String),
    /// The path starts with this (nginx `location /x`), in its normal form; the longest
    /// prefix wins.
    Prefix(String),
}

/// One route: which requests, which limits, how they are answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RouteDef {
    /// Its name in metrics and in the `route` key part (the pattern unless named).
    pub name: String,
    /// Which paths.
    pub path: PathMatch,
    /// The names of the limits applied, decided together (all or nothing).
    pub limits: Vec<String>,
    /// The status of a request a rate limit rejects (nginx `limit_req_status`).
    pub status: StatusCode,
    /// The status of a request a concurrency limit rejects (nginx `limit_conn_status`).
    pub conn_status: StatusCode,
    /// Decide and count, but let everything through at once (nginx `limit_req_dry_run`).
    pub dry_run: bool,
    /// Whether allowed responses carry the rate limit fields too.
    pub headers_on_allowed: bool,
    /// An adaptive concurrency limit in front of the upstream (503 + `Retry-After` when
    /// full), after the route's limits.
    pub adaptive: Option<AdaptiveDef>,
}

impl Rules {
    /// Reads and validates the rule file at `path`.
    pub fn load(path: &Path) -> Result<Rules, RuleFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| RuleFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Rules::parse(path, &text)
    }

    /// Validates `text`, the contents of the file `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Rules, RuleFileError> {
        let mut reader = Reader {
            problems: Vec::new(),
        };
        let rules = match yaml::parse(text) {
            Ok(Some(root)) => reader.rules(&root),
            Ok(None) => {
                reader.fail(Position { line: 1, column: 1 }, "the rule file is empty");
                None
            }
            Err(error) => {
                reader.fail(error.pos, format!("YAML syntax: {}", error.message));
                None
            }
        };
        match rules {
            Some(rules) if reader.problems.is_empty() => Ok(rules),
            _ => Err(RuleFileError::Invalid {
                path: path.to_owned(),
                problems: reader.problems,
            }),
        }
    }
}

impl Rules {
    /// Where route `index` is written (the file's start for one not read from a file).
    pub(crate) fn route_position(&self, index: usize) -> Position {
        self.places
            .routes
            .get(index)
            .copied()
            .unwrap_or(Position { line: 1, column: 1 })
    }

    /// Checks the rules against where this proxy keeps its counters (`redis`: shared in
    /// Redis), from the file at `path`: the file's `backend`, if it says one, must be that;
    /// with Redis, `refuse` names what Redis cannot hold of a limit. Every problem is reported
    /// at its place.
    pub fn check_backend(
        &self,
        path: &Path,
        redis: bool,
        mut refuse: impl FnMut(&LimitDef) -> Option<String>,
    ) -> Result<(), RuleFileError> {
        let mut problems = Vec::new();
        let here = self
            .places
            .backend
            .unwrap_or(Position { line: 1, column: 1 });
        match (&self.backend, redis) {
            (Some(BackendChoice::Redis), false) => problems.push(RuleProblem {
                pos: here,
                message: "`backend: redis`, but this proxy keeps its counters in memory: start \
                          it with --redis URL (or --redis-cluster NODES) to share them"
                    .into(),
            }),
            (Some(BackendChoice::Memory), true) => problems.push(RuleProblem {
                pos: here,
                message: "`backend: memory`, but this proxy was started with Redis: say \
                          `backend: redis`, or leave `backend` out"
                    .into(),
            }),
            _ => {}
        }
        if redis {
            for (limit, pos) in self.limits.iter().zip(&self.places.specs) {
                if let Some(message) = refuse(limit) {
                    problems.push(RuleProblem { pos: *pos, message });
                }
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(RuleFileError::Invalid {
                path: path.to_owned(),
                problems,
            }),
        }
    }
}

struct Reader {
    problems: Vec<RuleProblem>,
}

fn str_of(node: &Node) -> Option<&str> {
    match &node.value {
        Value::Scalar(Scalar::Str(s)) => Some(s),
        Value::Scalar(_) => Some(&node.text),
        _ => None,
    }
}

fn map_of(node: &Node) -> Option<&[(Node, Node)]> {
    match &node.value {
        Value::Map(entries) => Some(entries),
        _ => None,
    }
}

impl Reader {
    fn fail(&mut self, pos: Position, message: impl Into<String>) {
        self.problems.push(RuleProblem {
            pos,
            message: message.into(),
        });
    }

    /// The entries of a map, or a problem; keys not in `known` are problems too.
    fn entries<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        known: &[&str],
    ) -> Option<Vec<(&'n str, &'n Node)>> {
        let Some(entries) = map_of(node) else {
            self.fail(
                node.pos,
                format!("{what} must be a map, not {}", node.describe()),
            );
            return None;
        };
        let mut out = Vec::new();
        for (key, value) in entries {
            let name = str_of(key).unwrap_or("");
            if !known.contains(&name) {
                self.fail(
                    key.pos,
                    format!(
                        "unknown key `{name}` in {what} (known: {})",
                        known.join(", ")
                    ),
                );
                continue;
            }
            if out.iter().any(|(n, _)| *n == name) {
                self.fail(key.pos, format!("`{name}` given twice in {what}"));
                continue;
            }
            out.push((name, value));
        }
        Some(out)
    }

    fn string(&mut self, node: &Node, what: &str) -> Option<String> {
        match &node.value {
            Value::Scalar(Scalar::Null) | Value::Seq(_) | Value::Map(_) => {
                self.fail(
                    node.pos,
                    format!("{what} must be a string, not {}", node.describe()),
                );
                None
            }
            _ => str_of(node).map(str::to_owned),
        }
    }

    fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.value {
            Value::Scalar(Scalar::Bool(b)) => Some(b),
            _ => {
                self.fail(
                    node.pos,
                    format!("{what} must be true or false, not {}", node.describe()),
                );
                None
            }
        }
    }

    fn status(&mut self, node: &Node, what: &str) -> Option<StatusCode> {
        let code = match node.value {
            Value::Scalar(Scalar::Int(i)) => u16::try_from(i).ok(),
            _ => None,
        };
        // nginx accepts 400 to 599 for its `limit_req_status` / `limit_conn_status`.
        match code.and_then(|c| StatusCode::from_u16(c).ok()) {
            Some(status) if (400..600).contains(&status.as_u16()) => Some(status),
            _ => {
                self.fail(
                    node.pos,
                    format!(
                        "{what} must be a status from 400 to 599, not {}",
                        node.describe()
                    ),
                );
                None
            }
        }
    }

    fn rules(&mut self, root: &Node) -> Option<Rules> {
        let known = ["backend", "client_ip", "paths", "limits", "routes"];
        let entries = self.entries(root, "the rule file", &known)?;
        let mut backend = None;
        let mut places = Places::default();
        let mut client_ip = ClientIp::x_forwarded_for();
        let mut paths = PathRules::default();
        let mut limits = Vec::new();
        // Every limit name given, valid or not: a route naming an invalid one is not told
        // that it does not exist.
        let mut named = Vec::new();
        let mut routes = Vec::new();
        let mut routes_at = root.pos;
        for (name, value) in entries {
            match name {
                "backend" => {
                    places.backend = Some(value.pos);
                    match self.string(value, "`backend`").as_deref() {
                        Some("memory") => backend = Some(BackendChoice::Memory),
                        Some("redis") => backend = Some(BackendChoice::Redis),
                        Some(other) => self.fail(
                            value.pos,
                            format!("unknown backend `{other}` (known: memory, redis)"),
                        ),
                        None => {}
                    }
                }
                "client_ip" => {
                    if let Some(c) = self.client_ip(value) {
                        client_ip = c;
                    }
                }
                "paths" => paths = self.paths(value).unwrap_or_default(),
                "limits" => (limits, named, places.specs) = self.limits(value),
                "routes" => {
                    routes_at = value.pos;
                    routes = self.routes(value);
                }
                _ => {}
            }
        }
        // Every limit a route names must exist.
        for (route, node, _) in &routes {
            let route: &RouteDef = route;
            for (limit, pos) in route.limits.iter().zip(node) {
                if !named.contains(limit) {
                    self.fail(
                        *pos,
                        format!("route `{}` names no limit `{limit}`", route.name),
                    );
                }
            }
        }
        places.routes = routes.iter().map(|(_, _, at)| *at).collect();
        let routes: Vec<RouteDef> = routes.into_iter().map(|(r, _, _)| r).collect();
        if routes.is_empty() && self.problems.is_empty() {
            self.fail(
                routes_at,
                "no `routes`: say which paths the limits apply to",
            );
        }
        Some(Rules {
            backend,
            client_ip,
            paths,
            limits,
            routes,
            places,
        })
    }

    fn client_ip(&mut self, node: &Node) -> Option<ClientIp> {
        let entries = self.entries(node, "`client_ip`", &["header", "trusted_proxies"])?;
        let mut source = ForwardingHeader::XForwardedFor;
        let mut trusted: Vec<String> = Vec::new();
        let mut at = node.pos;
        for (name, value) in entries {
            match name {
                "header" => {
                    let text = self.string(value, "`client_ip.header`")?;
                    match text.parse::<ForwardingHeader>() {
                        Ok(header) => source = header,
                        Err(error) => self.fail(value.pos, format!("`client_ip.header`: {error}")),
                    }
                }
                "trusted_proxies" => {
                    at = value.pos;
                    let Value::Seq(items) = &value.value else {
                        self.fail(value.pos, "`trusted_proxies` must be a list of CIDR blocks");
                        continue;
                    };
                    for item in items {
                        if let Some(text) = self.string(item, "a trusted proxy") {
                            if ClientIp::x_forwarded_for()
                                .trusted_proxies([text.as_str()])
                                .is_err()
                            {
                                self.fail(
                                    item.pos,
                                    format!("`{text}` is not an IP address or CIDR block"),
                                );
                            }
                            trusted.push(text);
                        }
                    }
                }
                _ => {}
            }
        }
        match ClientIp::new(source).trusted_proxies(&trusted) {
            Ok(c) => Some(c),
            Err(error) => {
                self.fail(at, error.to_string());
                None
            }
        }
    }

    fn paths(&mut self, node: &Node) -> Option<PathRules> {
        let entries = self.entries(node, "`paths`", &["case_insensitive", "forward"])?;
        let mut paths = PathRules::default();
        for (name, value) in entries {
            match name {
                "case_insensitive" => {
                    paths.case_insensitive = self.boolean(value, "`paths.case_insensitive`")?;
                }
                "forward" => match self.string(value, "`paths.forward`")?.as_str() {
                    "as_sent" => paths.forward_normal = false,
                    "normalised" => paths.forward_normal = true,
                    other => self.fail(
                        value.pos,
                        format!("`paths.forward` is `{other}`: one of as_sent, normalised"),
                    ),
                },
                _ => {}
            }
        }
        Some(paths)
    }

    /// `on_missing_key`: `skip`, `deny` or `{ key: TEXT }`.
    fn on_missing_key(&mut self, node: &Node) -> Option<OnMissingKey> {
        const KNOWN: &str = "one of skip, deny, { key: TEXT }";
        if let Some(given) = map_of(node) {
            let entries = self.entries(node, "`on_missing_key`", &["key"])?;
            let [(_, value)] = entries[..] else {
                // Keys given but unknown are reported already.
                if given.is_empty() {
                    self.fail(node.pos, format!("`on_missing_key` is {KNOWN}"));
                }
                return None;
            };
            return Some(OnMissingKey::Key(
                self.string(value, "`on_missing_key.key`")?,
            ));
        }
        match self.string(node, "`on_missing_key`")?.as_str() {
            "skip" => Some(OnMissingKey::Skip),
            "deny" => Some(OnMissingKey::Deny),
            other => {
                self.fail(node.pos, format!("`on_missing_key` is `{other}`: {KNOWN}"));
                None
            }
        }
    }

    /// The valid limits, every name given, and where each valid limit's spec is.
    fn limits(&mut self, node: &Node) -> (Vec<LimitDef>, Vec<String>, Vec<Position>) {
        let Some(entries) = map_of(node) else {
            self.fail(node.pos, "`limits` must be a map of limit names to limits");
            return (Vec::new(), Vec::new(), Vec::new());
        };
        let mut out: Vec<LimitDef> = Vec::new();
        let mut named = Vec::new();
        let mut specs = Vec::new();
        for (key, value) in entries {
            let Some(name) = self.string(key, "a limit's name") else {
                continue;
            };
            if named.contains(&name) {
                self.fail(key.pos, format!("limit `{name}` defined twice"));
                continue;
            }
            named.push(name.clone());
            if let Some((limit, spec_at)) = self.limit(name, value) {
                out.push(limit);
                specs.push(spec_at);
            }
        }
        (out, named, specs)
    }

    fn limit(&mut self, name: String, node: &Node) -> Option<(LimitDef, Position)> {
        let what = format!("limit `{name}`");
        let known = ["key", "spec", "max_keys", "on_missing_key"];
        let entries = self.entries(node, &what, &known)?;
        let (mut key, mut spec, mut max_keys) = (None, None, DEFAULT_LIMIT_KEYS);
        let mut on_missing_key = OnMissingKey::default();
        let mut spec_at = node.pos;
        let mut given = (false, false);
        for (field, value) in entries {
            match field {
                "key" => {
                    given.0 = true;
                    key = self.key(value);
                }
                "spec" => {
                    given.1 = true;
                    spec_at = value.pos;
                    let text = self.string(value, "`spec`")?;
                    match text.parse::<AnyAlgorithm>() {
                        Ok(algorithm) => spec = Some((text, algorithm)),
                        Err(error) => self.fail(value.pos, format!("spec `{text}`: {error}")),
                    }
                }
                "on_missing_key" => {
                    on_missing_key = self.on_missing_key(value).unwrap_or_default();
                }
                "max_keys" => match value.value {
                    Value::Scalar(Scalar::Int(n)) if n > 0 => {
                        max_keys = usize::try_from(n).unwrap_or(usize::MAX);
                    }
                    _ => self.fail(
                        value.pos,
                        format!(
                            "`max_keys` must be a positive integer, not {}",
                            value.describe()
                        ),
                    ),
                },
                _ => {}
            }
        }
        // A field given but wrong is reported where it is; only a missing one here.
        if !given.1 {
            self.fail(
                node.pos,
                format!("{what} has no `spec` (e.g. `leaky-queue:rate=10/s`)"),
            );
        }
        if !given.0 {
            self.fail(
                node.pos,
                format!("{what} has no `key` (e.g. `key: client_ip`)"),
            );
        }
        let ((spec, algorithm), key) = (spec?, key?);
        let limit = LimitDef {
            name,
            key,
            algorithm,
            spec,
            max_keys,
            on_missing_key,
        };
        Some((limit, spec_at))
    }

    /// A key: one part, or a list of parts (a tuple).
    fn key(&mut self, node: &Node) -> Option<Vec<KeyPart>> {
        let parts: Vec<Option<KeyPart>> = match &node.value {
            Value::Seq(items) if items.is_empty() => {
                self.fail(
                    node.pos,
                    "`key` is an empty list: use `global` for one budget",
                );
                return None;
            }
            Value::Seq(items) => items.iter().map(|item| self.key_part(item)).collect(),
            _ => vec![self.key_part(node)],
        };
        parts.into_iter().collect()
    }

    fn key_part(&mut self, node: &Node) -> Option<KeyPart> {
        const PARTS: &str = "client_ip, peer_ip, method, path, route, host, global, \
                             {header: NAME}, {constant: TEXT}";
        if let Some(entries) = map_of(node) {
            let [(key, value)] = entries else {
                self.fail(node.pos, format!("a key part is one of {PARTS}"));
                return None;
            };
            let text = self.string(value, "the key part's value")?;
            return match str_of(key) {
                Some("header") => match HeaderName::from_bytes(text.as_bytes()) {
                    Ok(name) => Some(KeyPart::Header(name)),
                    Err(_) => {
                        self.fail(value.pos, format!("`{text}` is not a header name"));
                        None
                    }
                },
                Some("constant") => Some(KeyPart::Constant(text)),
                _ => {
                    self.fail(key.pos, format!("a key part is one of {PARTS}"));
                    None
                }
            };
        }
        let part = match str_of(node) {
            Some("client_ip") => KeyPart::ClientIp,
            Some("peer_ip") => KeyPart::PeerIp,
            Some("method") => KeyPart::Method,
            Some("path") => KeyPart::Path,
            Some("route") => KeyPart::Route,
            Some("host") => KeyPart::Host,
            Some("global") => KeyPart::Constant(String::new()),
            _ => {
                self.fail(
                    node.pos,
                    format!("unknown key part {}: one of {PARTS}", node.describe()),
                );
                return None;
            }
        };
        Some(part)
    }

    /// The routes, each with the positions of the limit names it gives.
    fn routes(&mut self, node: &Node) -> Vec<(RouteDef, Vec<Position>, Position)> {
        let Value::Seq(items) = &node.value else {
            self.fail(node.pos, "`routes` must be a list");
            return Vec::new();
        };
        let mut out: Vec<(RouteDef, Vec<Position>, Position)> = Vec::new();
        let mut seen: HashMap<PathMatch, Position> = HashMap::new();
        for item in items {
            if let Some((route, positions)) = self.route(item) {
                if let Some(first) = seen.insert(route.path.clone(), item.pos) {
                    self.fail(item.pos, format!("the same path as the route at {first}"));
                }
                out.push((route, positions, item.pos));
            }
        }
        out
    }

    fn route(&mut self, node: &Node) -> Option<(RouteDef, Vec<Position>)> {
        let known = [
            "name",
            "prefix",
            "exact",
            "limits",
            "status",
            "conn_status",
            "dry_run",
            "headers_on_allowed",
            "adaptive",
        ];
        let entries = self.entries(node, "a route", &known)?;
        let mut route = RouteDef {
            name: String::new(),
            path: PathMatch::Prefix(String::new()),
            limits: Vec::new(),
            status: StatusCode::TOO_MANY_REQUESTS,
            conn_status: StatusCode::TOO_MANY_REQUESTS,
            dry_run: false,
            headers_on_allowed: false,
            adaptive: None,
        };
        let mut path = None;
        let mut positions = Vec::new();
        for (field, value) in entries {
            match field {
                "name" => route.name = self.string(value, "`name`")?,
                "prefix" | "exact" => {
                    let written = self.string(value, "the route's path")?;
                    let text = match normal_path(written.as_bytes(), false) {
                        _ if !written.starts_with('/') => {
                            self.fail(
                                value.pos,
                                format!("the path `{written}` must start with `/`"),
                            );
                            written
                        }
                        Ok(normal) => match String::from_utf8(normal.into_owned()) {
                            Ok(normal) => normal,
                            Err(_) => {
                                self.fail(
                                    value.pos,
                                    format!("the path `{written}` is not UTF-8 once decoded"),
                                );
                                written
                            }
                        },
                        Err(error) => {
                            self.fail(value.pos, format!("the path `{written}`: {error}"));
                            written
                        }
                    };
                    if path.is_some() {
                        self.fail(
                            value.pos,
                            "a route has one `prefix` or one `exact`, not both",
                        );
                    }
                    path = Some(if field == "exact" {
                        PathMatch::Exact(text)
                    } else {
                        PathMatch::Prefix(text)
                    });
                }
                "limits" => {
                    let names: Vec<&Node> = match &value.value {
                        Value::Seq(items) => items.iter().collect(),
                        _ => vec![value],
                    };
                    for name in names {
                        if let Some(text) = self.string(name, "a limit's name") {
                            route.limits.push(text);
                            positions.push(name.pos);
                        }
                    }
                }
                // A wrong value is reported and the default kept, so that the rest of the
                // route is still checked.
                "status" => {
                    route.status = self.status(value, "`status`").unwrap_or(route.status);
                }
                "conn_status" => {
                    route.conn_status = self
                        .status(value, "`conn_status`")
                        .unwrap_or(route.conn_status);
                }
                "dry_run" => route.dry_run = self.boolean(value, "`dry_run`").unwrap_or(false),
                "headers_on_allowed" => {
                    route.headers_on_allowed =
                        self.boolean(value, "`headers_on_allowed`").unwrap_or(false);
                }
                "adaptive" => route.adaptive = self.adaptive(value),
                _ => {}
            }
        }
        let Some(path) = path else {
            self.fail(node.pos, "a route needs `prefix: /path` or `exact: /path`");
            return None;
        };
        if route.name.is_empty() {
            route.name = match &path {
                PathMatch::Exact(p) => format!("={p}"),
                PathMatch::Prefix(p) => p.clone(),
            };
        }
        route.path = path;
        Some((route, positions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> String {
        match Rules::parse(Path::new("r.yaml"), text) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn the_backend_said_must_be_the_proxys() -> Result<(), RuleFileError> {
        let path = Path::new("r.yaml");
        let check = |text: &str, redis: bool| -> Result<String, RuleFileError> {
            let rules = Rules::parse(path, text)?;
            let refuse = |l: &LimitDef| l.spec.starts_with("smooth").then(|| "no".to_owned());
            Ok(match rules.check_backend(path, redis, refuse) {
                Ok(()) => "ok".to_owned(),
                Err(error) => error.to_string(),
            })
        };
        let limits = "limits:\n  a: { key: global, spec: \"smooth-bursty:rate=2\" }\n";
        let routes = "routes: [{ prefix: /, limits: [a] }]\n";
        let redis_file = format!("backend: redis\n{limits}{routes}");
        assert!(check(&redis_file, false)?.starts_with("r.yaml:1:10: `backend: redis`, but"));
        assert_eq!(check(&redis_file, true)?, "r.yaml:3:27: no");
        let memory_file = format!("backend: memory\n{limits}{routes}");
        assert_eq!(check(&memory_file, false)?, "ok");
        assert!(check(&memory_file, true)?.starts_with("r.yaml:1:10: `backend: memory`, but"));
        assert_eq!(check(&format!("{limits}{routes}"), false)?, "ok");
        Ok(())
    }

    #[test]
    fn every_example_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proxy");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&dir).expect("examples/proxy") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                if let Err(error) = Rules::load(&path) {
                    panic!("{error}");
                }
                loaded += 1;
            }
        }
        assert!(loaded >= 4, "{loaded} rule files in {}", dir.display());
    }

    #[test]
    fn errors_name_line_and_column() {
        let text = "limits:\n  a: { key: [peer_ip, nope], spec: \"gcra:rate=1/x\" }\n  b: { spec: \"concurrency:limit=1\" }\nroutes:\n  - { prefix: x, limits: [a, c], status: 200 }\n";
        let text = problems(text);
        let expected = [
            "r.yaml:2:23: unknown key part the string 'nope'",
            "r.yaml:2:36: spec `gcra:rate=1/x`",
            "r.yaml:3:8: limit `b` has no `key`",
            "r.yaml:5:15: the path `x` must start with `/`",
            "r.yaml:5:30: route `x` names no limit `c`",
            "r.yaml:5:42: `status` must be a status from 400 to 599",
        ];
        for line in expected {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
        // `a` is defined, if wrongly: no route is told it does not exist.
        assert!(!text.contains("no limit `a`"), "{text}");
    }

    #[test]
    fn paths_and_missing_keys_are_read() {
        let text = "paths: { case_insensitive: true, forward: normalised }\nlimits:\n  a: { key: { header: x-k }, spec: \"gcra:rate=1/s\", on_missing_key: deny }\n  b: { key: host, spec: \"gcra:rate=1/s\", on_missing_key: { key: none } }\nroutes:\n  - { exact: //x/./y/../z, limits: [a, b] }\n  - { prefix: /%61pi/ }\n";
        let rules = Rules::parse(Path::new("r.yaml"), text).expect("valid");
        assert!(rules.paths.case_insensitive && rules.paths.forward_normal);
        assert_eq!(rules.limits[0].on_missing_key, OnMissingKey::Deny);
        assert_eq!(
            rules.limits[1].on_missing_key,
            OnMissingKey::Key("none".into())
        );
        assert_eq!(rules.routes[0].path, PathMatch::Exact("/x/z".into()));
        assert_eq!(rules.routes[1].path, PathMatch::Prefix("/api/".into()));
        assert_eq!(rules.routes[0].name, "=/x/z");

        let text = "paths: { forward: raw, case_insensitive: 1 }\nlimits:\n  a: { key: global, spec: \"gcra:rate=1/s\", on_missing_key: allow }\n  b: { key: global, spec: \"gcra:rate=1/s\", on_missing_key: { value: x } }\nroutes:\n  - { prefix: /../x }\n  - { prefix: /x, name: one }\n  - { prefix: //x, name: two }\n";
        let text = problems(text);
        let expected = [
            "r.yaml:1:19: `paths.forward` is `raw`: one of as_sent, normalised",
            "r.yaml:1:42: `paths.case_insensitive` must be true or false",
            "r.yaml:3:60: `on_missing_key` is `allow`: one of skip, deny, { key: TEXT }",
            "r.yaml:4:62: unknown key `value` in `on_missing_key`",
            "r.yaml:6:15: the path `/../x`: the path climbs above the root",
            "r.yaml:8:7: the same path as the route at 7:7",
        ];
        for line in expected {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }

    #[test]
    fn routes_and_limits_are_read() {
        let text = "client_ip: { header: forwarded, trusted_proxies: [10.0.0.0/8] }\nlimits:\n  a: { key: [{ header: x-k }, method, { constant: c }], spec: \"leaky-queue:rate=2/s,burst=3,nodelay\", max_keys: 10 }\nroutes:\n  - { exact: /x, limits: a, status: 503, conn_status: 503, dry_run: true }\n  - { prefix: / }\n";
        let rules = Rules::parse(Path::new("r.yaml"), text).expect("valid");
        assert_eq!(rules.limits[0].max_keys, 10);
        assert_eq!(rules.limits[0].key.len(), 3);
        assert_eq!(rules.routes[0].name, "=/x");
        assert_eq!(rules.routes[0].limits, ["a"]);
        assert!(rules.routes[0].dry_run);
        assert_eq!(rules.routes[1].path, PathMatch::Prefix("/".into()));
        assert!(problems("").contains("r.yaml:1:1: the rule file is empty"));
        assert!(problems("routes: [").contains("YAML syntax"));
        assert!(
            problems("backend: disk\nroutes: [{prefix: /}]")
                .contains("r.yaml:1:10: unknown backend `disk` (known: memory, redis)")
        );
        assert!(
            problems("client_ip: { header: x-client }\nroutes: [{prefix: /}]").contains(
                "r.yaml:1:22: `client_ip.header`: `x-client` is not a forwarding header: one of \
                 x-forwarded-for, forwarded, x-real-ip"
            )
        );
    }
}
