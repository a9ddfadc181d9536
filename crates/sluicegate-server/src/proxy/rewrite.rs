//! The fields a reverse proxy rewrites: hop-by-hop fields dropped (RFC 9110 7.6.1), and the
//! client appended to `X-Forwarded-For` and `Forwarded` (RFC 7239), or to those of them
//! [`ForwardingFields`] names.
//!
//! A request is rewritten for the upstream ([`request_for_upstream`]) before it reaches the
//! HTTP client, and a response for the client ([`response_for_client`]) as it comes back: a
//! request-to-request step the client knows nothing of. The client's address is formatted
//! once per connection, not per request, and hop-by-hop names are compared as `http`'s
//! standard headers, never built.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;

use crate::proxy::hop_by_hop::FieldScan;

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Which forwarding fields the proxy appends the client's address to. A field it does not
/// append is passed on as the client sent it, as any other field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardingFields {
    /// `X-Forwarded-For` and `Forwarded` (RFC 7239).
    #[default]
    Both,
    /// `X-Forwarded-For` alone, as nginx's `proxy_set_header X-Forwarded-For
    /// $proxy_add_x_forwarded_for`.
    XForwardedFor,
    /// `Forwarded` alone.
    Forwarded,
    /// Neither, as nginx's `proxy_pass` with no `proxy_set_header`.
    Neither,
}

impl ForwardingFields {
    fn x_forwarded_for(self) -> bool {
        matches!(
            self,
            ForwardingFields::Both | ForwardingFields::XForwardedFor
        )
    }

    fn forwarded(self) -> bool {
        matches!(self, ForwardingFields::Both | ForwardingFields::Forwarded)
    }
}

/// Appends `element` to the list field `name` of `headers`, the values that came joined into
/// one field with the proxy's element at its end.
fn append_to_list(headers: &mut HeaderMap, name: &HeaderName, element: HeaderValue) {
    let mut came = match headers.entry(name) {
        Entry::Vacant(none) => {
            none.insert(element);
            return;
        }
        Entry::Occupied(came) => came,
    };
    let mut values = came.iter();
    let mut list = BytesMut::from(values.next().map_or(&b""[..], HeaderValue::as_bytes));
    for value in values.chain([&element]) {
        list.put_slice(b", ");
        list.put_slice(value.as_bytes());
    }
    // Values joined with `, ` are a value.
    if let Ok(list) = HeaderValue::from_maybe_shared(list.freeze()) {
        came.insert(list);
    }
}

/// Appends `client` to a request's `X-Forwarded-For` and `Forwarded` fields, or to those of
/// them `appended` names. `host`: the host the request names, for `Forwarded`'s `host=`.
fn append_forwarding_fields(
    headers: &mut HeaderMap,
    client: &ForwardedClient,
    appended: ForwardingFields,
    host: Option<&HeaderValue>,
) {
    if appended.x_forwarded_for() {
        append_to_list(headers, &X_FORWARDED_FOR, client.0.address.clone());
    }
    if let Some(element) = appended
        .forwarded()
        .then(|| client.forwarded_for_host(host.map(HeaderValue::as_bytes)))
        .flatten()
    {
        append_to_list(headers, &header::FORWARDED, element);
    }
}

/// Rewrites a request's target and fields as the upstream receives them, and says whether it
/// asks the upstream to switch to WebSocket.
///
/// On the way: the target in origin form (the connection is to the upstream already) and
/// HTTP/1.1; hop-by-hop fields, those `Connection` names, and `Expect`, dropped (`Expect:
/// 100-continue` is the proxy's to answer: hyper does when the body is first read, so the
/// field would only earn an interim answer to skip; nginx drops it too); a `Host` from the
/// URI (h2 names its host there alone) or `fallback_host` (HTTP/1.0 may name none) when the
/// request has none; the connection's client appended to `X-Forwarded-For` and
/// `Forwarded`, or to those of them `appended` names.
///
/// A switch to WebSocket (RFC 6455 section 4.1: an HTTP/1.1 `GET` with `Upgrade: websocket`
/// and `Connection: upgrade`, and no body) keeps its `Upgrade` and `Connection: upgrade`
/// when `can_switch` (the client's connection can make it). Other switches (`h2c`) are not
/// asked of the upstream: a tunnel to it would carry requests no limit sees. Nor is a switch
/// with a body, which would still be on its way when the tunnel opened.
pub(crate) fn request_for_upstream(
    parts: &mut http::request::Parts,
    (client, appended): (&ForwardedClient, ForwardingFields),
    fallback_host: &HeaderValue,
    has_body: bool,
    can_switch: bool,
) -> bool {
    let headers = &mut parts.headers;
    let scan = FieldScan::of(headers, Some(&header::EXPECT));
    let upgrade = scan.upgrade.filter(|_| can_switch);
    let websocket = can_switch
        && !has_body
        && parts.method == http::Method::GET
        && parts.version == http::Version::HTTP_11
        && upgrade
            .as_ref()
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"websocket"))
        && scan.asks_upgrade;
    for name in scan.dropped {
        headers.remove(name);
    }
    // Only `Forwarded` names the host: a request that names one needs no look at it else.
    let host = if scan.has_host && !appended.forwarded() {
        None
    } else {
        let host = headers.entry(header::HOST).or_insert_with(|| {
            parts
                .uri
                .authority()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
                .unwrap_or_else(|| fallback_host.clone())
        });
        appended.forwarded().then(|| host.clone())
    };
    append_forwarding_fields(headers, client, appended, host.as_ref());
    if let Some(upgrade) = upgrade.filter(|_| websocket) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, upgrade);
    }
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        let target = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        parts.uri = http::Uri::from(target);
    }
    parts.version = http::Version::HTTP_11;
    websocket
}

/// Rewrites a response's fields as the client receives them: hop-by-hop fields, and those
/// `Connection` names, dropped (the client's connection is the proxy's, not the
/// upstream's), but for a switch's `Upgrade` and `Connection: upgrade`; a `Content-Length`
/// given more than once (or as a list), which hyper has checked agrees, given once.
pub(crate) fn response_for_client(headers: &mut HeaderMap, switched: bool) {
    let scan = FieldScan::of(headers, None);
    for name in scan.dropped {
        headers.remove(name);
    }
    if let Some(upgrade) = scan.upgrade.filter(|_| switched) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, upgrade);
    }
    if let Some(first) = scan.length.filter(|_| scan.length_listed) {
        let one = first
            .as_bytes()
            .split(|&b| b == b',')
            .next()
            .map(<[u8]>::trim_ascii)
            .and_then(|length| HeaderValue::from_bytes(length).ok());
        if let Some(one) = one {
            headers.insert(header::CONTENT_LENGTH, one);
        }
    }
}

/// A connection's client as the forwarding fields name it, formatted once when the
/// connection is accepted: every request on it appends the same address.
#[derive(Debug, Clone)]
pub(crate) struct ForwardedClient(Arc<Formatted>);

#[derive(Debug)]
struct Formatted {
    /// The client's address.
    ip: IpAddr,
    /// `X-Forwarded-For`'s element: the bare address.
    address: HeaderValue,
    /// `Forwarded`'s `proto=`: how the client reached the proxy.
    proto: &'static [u8],
    /// The start of `Forwarded`'s element: `for=192.0.2.1`, or `for="[2001:db8::1]"`.
    for_param: Bytes,
    /// The last `Host` seen on the connection (copied: a value hyper parsed shares its read
    /// buffer, which would then not be reused) and the `Forwarded` element made with it: the
    /// requests of a connection mostly name one host.
    last: Mutex<Option<(Box<[u8]>, HeaderValue)>>,
}

impl ForwardedClient {
    /// The client at `ip`, connected over TLS (`https`) or not (`http`).
    pub(crate) fn new(ip: IpAddr, tls: bool) -> ForwardedClient {
        let text = ip.to_string();
        let for_param = match ip {
            IpAddr::V4(_) => format!("for={text}"),
            IpAddr::V6(_) => format!("for=\"[{text}]\""),
        };
        // An address's text is a valid field value.
        let address = HeaderValue::from_maybe_shared(Bytes::from(text))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ForwardedClient(Arc::new(Formatted {
            ip,
            address,
            proto: if tls { b";proto=https" } else { b";proto=http" },
            for_param: Bytes::from(for_param),
            last: Mutex::new(None),
        }))
    }

    /// The client's address (the peer's, which the limits' `peer_ip` reads too).
    pub(crate) fn ip(&self) -> IpAddr {
        self.0.ip
    }

    /// The `Forwarded` element for `host`: the last one made if it named the same host.
    fn forwarded_for_host(&self, host: Option<&[u8]>) -> Option<HeaderValue> {
        let Some(host) = host else {
            return self.forwarded_element(None);
        };
        let mut last = self.0.last.lock();
        if let Some((seen, element)) = last.as_ref() {
            if **seen == *host {
                return Some(element.clone());
            }
        }
        let element = self.forwarded_element(Some(host))?;
        *last = Some((host.into(), element.clone()));
        Some(element)
    }

    /// The `Forwarded` element: `for`, `host` when it can be quoted as is, `proto`.
    fn forwarded_element(&self, host: Option<&[u8]>) -> Option<HeaderValue> {
        let host = host
            // A quote or a backslash would end or escape the quoted string early.
            .filter(|h| {
                h.iter()
                    .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            });
        let host_len = host.map_or(0, |h| h.len() + 8);
        let mut element =
            BytesMut::with_capacity(self.0.for_param.len() + host_len + self.0.proto.len());
        element.put_slice(&self.0.for_param);
        if let Some(host) = host {
            element.put_slice(b";host=\"");
            element.put_slice(host);
            element.put_u8(b'"');
        }
        element.put_slice(self.0.proto);
        HeaderValue::from_maybe_shared(element.freeze()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(
        client: &ForwardedClient,
        xff: &[&'static str],
        forwarded: &[&'static str],
        host: Option<&str>,
    ) -> String {
        fields_appended(ForwardingFields::Both, client, xff, forwarded, host)
    }

    fn fields_appended(
        appended: ForwardingFields,
        client: &ForwardedClient,
        xff: &[&'static str],
        forwarded: &[&'static str],
        host: Option<&str>,
    ) -> String {
        let mut headers = HeaderMap::new();
        for value in xff {
            headers.append(&X_FORWARDED_FOR, HeaderValue::from_static(value));
        }
        for value in forwarded {
            headers.append(header::FORWARDED, HeaderValue::from_static(value));
        }
        let host = host.map(|host| HeaderValue::from_str(host).expect("a host"));
        append_forwarding_fields(&mut headers, client, appended, host.as_ref());
        let mut out = String::new();
        for name in [&X_FORWARDED_FOR, &header::FORWARDED] {
            for value in headers.get_all(name) {
                let value = value.to_str().expect("text");
                out.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        out
    }

    #[test]
    fn the_client_is_appended_to_what_came_in() {
        let client = ForwardedClient::new("127.0.0.1".parse().expect("ip"), false);
        assert_eq!(
            fields(
                &client,
                &["10.0.0.1", "10.0.0.2"],
                &["for=10.0.0.1"],
                Some("app.example:8080")
            ),
            "x-forwarded-for: 10.0.0.1, 10.0.0.2, 127.0.0.1\r\n\
             forwarded: for=10.0.0.1, for=127.0.0.1;host=\"app.example:8080\";proto=http\r\n"
        );
        // None came: the client's alone.
        assert_eq!(
            fields(&client, &[], &[], None),
            "x-forwarded-for: 127.0.0.1\r\nforwarded: for=127.0.0.1;proto=http\r\n"
        );
    }

    #[test]
    fn only_the_chosen_fields_get_the_client_and_the_others_pass_as_they_came() {
        let client = ForwardedClient::new("127.0.0.1".parse().expect("ip"), false);
        let came =
            |appended| fields_appended(appended, &client, &["10.0.0.1"], &["for=10.0.0.1"], None);
        assert_eq!(
            came(ForwardingFields::XForwardedFor),
            "x-forwarded-for: 10.0.0.1, 127.0.0.1\r\nforwarded: for=10.0.0.1\r\n"
        );
        assert_eq!(
            came(ForwardingFields::Forwarded),
            "x-forwarded-for: 10.0.0.1\r\nforwarded: for=10.0.0.1, for=127.0.0.1;proto=http\r\n"
        );
        assert_eq!(
            came(ForwardingFields::Neither),
            "x-forwarded-for: 10.0.0.1\r\nforwarded: for=10.0.0.1\r\n"
        );
        let none_came = |appended| fields_appended(appended, &client, &[], &[], None);
        assert_eq!(
            none_came(ForwardingFields::XForwardedFor),
            "x-forwarded-for: 127.0.0.1\r\n"
        );
        assert_eq!(none_came(ForwardingFields::Neither), "");
    }

    #[test]
    fn a_v6_client_is_quoted_and_a_host_that_cannot_be_is_left_out() {
        let v6 = ForwardedClient::new("::1".parse().expect("ip"), false);
        assert_eq!(
            fields(&v6, &[], &[], Some("a\"b")),
            "x-forwarded-for: ::1\r\nforwarded: for=\"[::1]\";proto=http\r\n"
        );
        let v4 = ForwardedClient::new("10.1.2.3".parse().expect("ip"), false);
        assert!(
            fields(&v4, &[], &[], Some("a\\")).ends_with("forwarded: for=10.1.2.3;proto=http\r\n")
        );
    }

    #[test]
    fn each_request_of_a_connection_names_its_own_host() {
        let client = ForwardedClient::new("192.0.2.7".parse().expect("ip"), false);
        for host in ["a.example", "a.example", "b.example", "a.example"] {
            assert!(fields(&client, &[], &[], Some(host)).ends_with(&format!(
                "forwarded: for=192.0.2.7;host=\"{host}\";proto=http\r\n"
            )));
        }
        assert!(
            fields(&client, &[], &[], None).ends_with("forwarded: for=192.0.2.7;proto=http\r\n")
        );
    }
}
