//! Keys read from the request line and headers, a constant, and closures.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use crate::rate_limit::key::RequestHead;
use http::{HeaderName, HeaderValue};

use crate::rate_limit::error::KeyError;
use crate::rate_limit::key::KeyExtractor;
use crate::rate_limit::key::normal::{normal_host, normal_path, request_host};

/// One budget for every request: a global limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract(&self, _request: &RequestHead<'_>) -> Result<(), KeyError> {
        Ok(())
    }
}

/// A header's value (an API key, a tenant); a request without it is a
/// [`KeyError::MissingHeader`] (400 by default). Of a header sent several times, the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// The value of header `name`.
    pub fn new(name: HeaderName) -> Header {
        Header { name }
    }

    /// The value of header `name`, given as a static string (`"x-api-key"`), which must be a
    /// valid lower-case header name (see [`HeaderName::from_static`]).
    pub fn named(name: &'static str) -> Header {
        Header::new(HeaderName::from_static(name))
    }
}

impl KeyExtractor for Header {
    type Key = HeaderValue;

    fn extract(&self, request: &RequestHead<'_>) -> Result<HeaderValue, KeyError> {
        request
            .headers()
            .get(&self.name)
            .cloned()
            .ok_or_else(|| KeyError::MissingHeader {
                name: self.name.clone(),
            })
    }
}

/// The request's method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestMethod;

impl KeyExtractor for RequestMethod {
    type Key = http::Method;

    fn extract(&self, request: &RequestHead<'_>) -> Result<http::Method, KeyError> {
        Ok(request.method().clone())
    }
}

/// The request's path, without the query, in its normal form (see
/// [`normal_path`](crate::rate_limit::key::normal::normal_path): `//a`, `/./a` and `/%61` are
/// all `/a`), so that no spelling of a path steps around its limit; a path whose `..` climbs
/// above the root, or that holds `%00`, is a [`KeyError::BadPath`] (400). Bytes that are not
/// UTF-8 once decoded are kept as U+FFFD. Every distinct path is a key: for a route with
/// parameters (`/users/{id}`) prefer [`Route`], which counts the route once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestPath;

impl KeyExtractor for RequestPath {
    type Key = Box<str>;

    fn extract(&self, request: &RequestHead<'_>) -> Result<Box<str>, KeyError> {
        normal_path_key(request)
    }
}

fn normal_path_key(request: &RequestHead<'_>) -> Result<Box<str>, KeyError> {
    let path = request.uri().path();
    match normal_path(path.as_bytes(), false) {
        Ok(Cow::Borrowed(_)) => Ok(path.into()),
        Ok(Cow::Owned(normal)) => Ok(String::from_utf8_lossy(&normal).into()),
        Err(reason) => Err(KeyError::bad_path(path, reason)),
    }
}

/// The host the request names, in its normal form (nginx's `$host`: lower case, without port
/// or trailing dot; see [`normal_host`](crate::rate_limit::key::normal::normal_host)), read
/// from an absolute-form request line first, then h2's `:authority`, then `Host` (see
/// [`request_host`](crate::rate_limit::key::normal::request_host)). A host that is not one,
/// or two `Host` fields, is a [`KeyError::BadHost`] (400); a request that names none (HTTP/1.0)
/// a [`KeyError::MissingHeader`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Host;

impl KeyExtractor for Host {
    type Key = Box<str>;

    fn extract(&self, request: &RequestHead<'_>) -> Result<Box<str>, KeyError> {
        let host = request_host(request)?.ok_or(KeyError::MissingHeader {
            name: http::header::HOST,
        })?;
        // A normal host is ASCII.
        Ok(String::from_utf8_lossy(&normal_host(host)?).into())
    }
}

/// The route template axum matched (`/users/{id}`), from its `MatchedPath` extension: present
/// when the layer is added with `Router::layer` or `Router::route_layer`. Without one (around
/// the router, or a request no route matched), [`KeyError::NoMatchedPath`], or, with
/// [`or_path`](Route::or_path), the request's path in its normal form, as [`RequestPath`] reads it.
///
/// Without the `axum` feature there is no template: only `or_path` gives a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Route {
    or_path: bool,
}

impl Route {
    /// The matched route template, or an error without one.
    pub fn new() -> Route {
        Route { or_path: false }
    }

    /// The matched route template, or the path when no route matched (a fallback's 404s).
    pub fn or_path() -> Route {
        Route { or_path: true }
    }
}

/// The key [`Route`] reads: a route template (sharing axum's string, no copy) or a path.
#[derive(Debug, Clone)]
pub struct RouteKey(RouteText);

#[derive(Debug, Clone)]
enum RouteText {
    #[cfg(feature = "axum")]
    Template(axum::extract::MatchedPath),
    Path(Box<str>),
}

impl RouteKey {
    /// The template or path.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            #[cfg(feature = "axum")]
            RouteText::Template(matched) => matched.as_str(),
            RouteText::Path(path) => path,
        }
    }
}

impl PartialEq for RouteKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RouteKey {}

impl Hash for RouteKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl KeyExtractor for Route {
    type Key = RouteKey;

    fn extract(&self, request: &RequestHead<'_>) -> Result<RouteKey, KeyError> {
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions().get::<axum::extract::MatchedPath>() {
            return Ok(RouteKey(RouteText::Template(matched.clone())));
        }
        if self.or_path {
            Ok(RouteKey(RouteText::Path(normal_path_key(request)?)))
        } else {
            Err(KeyError::NoMatchedPath)
        }
    }
}

/// A key computed by a closure; see [`from_fn`].
#[derive(Clone)]
pub struct FromFn<F> {
    f: F,
}

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromFn").finish_non_exhaustive()
    }
}

/// A key computed by `f` from the request's head, for anything the other extractors do not
/// read (a JWT's subject, a query parameter). Return [`KeyError::custom`] when the key is
/// missing.
///
/// ```
/// use http::StatusCode;
/// use sluicegate_http::rate_limit::KeyError;
/// use sluicegate_http::rate_limit::key::{RequestHead, from_fn};
///
/// // The `tenant` query parameter.
/// let tenant = from_fn(|request: &RequestHead<'_>| {
///     request
///         .uri()
///         .query()
///         .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("tenant=")))
///         .map(str::to_owned)
///         .ok_or_else(|| KeyError::custom(StatusCode::BAD_REQUEST, "no `tenant` parameter"))
/// });
/// ```
pub fn from_fn<F, K>(f: F) -> FromFn<F>
where
    F: Fn(&RequestHead<'_>) -> Result<K, KeyError> + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    FromFn { f }
}

impl<F, K> KeyExtractor for FromFn<F>
where
    F: Fn(&RequestHead<'_>) -> Result<K, KeyError> + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, request: &RequestHead<'_>) -> Result<K, KeyError> {
        (self.f)(request)
    }
}
