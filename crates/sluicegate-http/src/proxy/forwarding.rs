//! The fields a reverse proxy rewrites: hop-by-hop fields dropped (RFC 9110 7.6.1), and the
//! client appended to `X-Forwarded-For` and `Forwarded` (RFC 7239).
//!
//! This runs twice per request (the request's fields, the response's), so it avoids the costs
//! that used to dominate it: the client's address is formatted once per connection, not per
//! request, and names are compared as strings, never built.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{self, Entry, HeaderName, HeaderValue};
use parking_lot::Mutex;
use smallvec::SmallVec;

/// Fields that describe one connection, not the message: never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Bit `n` set: some name of [`HOP_BY_HOP`] is `n` bytes long.
const HOP_BY_HOP_LENGTHS: u32 = {
    let mut lengths = 0;
    let mut i = 0;
    while i < HOP_BY_HOP.len() {
        lengths |= 1 << HOP_BY_HOP[i].len();
        i += 1;
    }
    lengths
};

fn is_hop_by_hop(name: &HeaderName) -> bool {
    let name = name.as_str();
    // Most fields have a length no hop-by-hop name has, and are passed over on that alone.
    name.len() < 32 && HOP_BY_HOP_LENGTHS & (1 << name.len()) != 0 && HOP_BY_HOP.contains(&name)
}

/// Whether a token of the `Connection` field needs no removal of its own: `close` is an
/// option, not a field, and hop-by-hop fields are removed anyway.
fn is_known_token(token: &[u8]) -> bool {
    token.eq_ignore_ascii_case(b"close")
        || HOP_BY_HOP
            .iter()
            .any(|name| token.eq_ignore_ascii_case(name.as_bytes()))
}

/// Removes the hop-by-hop fields, and those the `Connection` field names.
pub(crate) fn drop_hop_by_hop(headers: &mut HeaderMap) {
    // One look over the names, and a removal by name (which hashes it) only for those present:
    // most messages carry `Connection` alone of these, or none.
    let mut has_connection = false;
    let mut present: SmallVec<[HeaderName; 2]> = SmallVec::new();
    for name in headers.keys().filter(|name| is_hop_by_hop(name)) {
        if name == header::CONNECTION {
            has_connection = true;
        } else {
            present.push(name.clone());
        }
    }
    if has_connection {
        if let Entry::Occupied(connection) = headers.entry(header::CONNECTION) {
            let (_, values) = connection.remove_entry_mult();
            for value in values {
                for token in value.as_bytes().split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.is_empty() || is_known_token(token) {
                        continue;
                    }
                    if let Ok(name) = HeaderName::from_bytes(token) {
                        present.push(name);
                    }
                }
            }
        }
    }
    for name in &present {
        headers.remove(name);
    }
}

/// `value` appended to the list in every `name` field, as one field.
fn append_list(headers: &mut HeaderMap, name: &HeaderName, value: HeaderValue) {
    match headers.entry(name) {
        Entry::Vacant(entry) => {
            entry.insert(value);
        }
        Entry::Occupied(mut entry) => {
            let mut joined = BytesMut::new();
            for old in entry.iter() {
                joined.put_slice(old.as_bytes());
                joined.put_slice(b", ");
            }
            joined.put_slice(value.as_bytes());
            // Valid field values joined by ", " are a valid field value.
            if let Ok(joined) = HeaderValue::from_maybe_shared(joined.freeze()) {
                // Replaces every old value with the one list.
                entry.insert(joined);
            }
        }
    }
}

/// A connection's client as the forwarding fields name it, formatted once when the
/// connection is accepted: every request on it appends the same address.
#[derive(Debug, Clone)]
pub(crate) struct ForwardedClient(Arc<Formatted>);

#[derive(Debug)]
struct Formatted {
    /// `X-Forwarded-For`'s element: the bare address.
    address: HeaderValue,
    /// The start of `Forwarded`'s element: `for=192.0.2.1`, or `for="[2001:db8::1]"`.
    for_param: Bytes,
    /// The last `Host` seen on the connection (copied: a value hyper parsed shares its read
    /// buffer, which would then not be reused) and the `Forwarded` element made with it: the
    /// requests of a connection mostly name one host.
    last: Mutex<Option<(Box<[u8]>, HeaderValue)>>,
}

impl ForwardedClient {
    /// The client at `ip`.
    pub(crate) fn new(ip: IpAddr) -> ForwardedClient {
        let text = ip.to_string();
        let for_param = match ip {
            IpAddr::V4(_) => format!("for={text}"),
            IpAddr::V6(_) => format!("for=\"[{text}]\""),
        };
        // An address's text is a valid field value.
        let address = HeaderValue::from_maybe_shared(Bytes::from(text))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ForwardedClient(Arc::new(Formatted {
            address,
            for_param: Bytes::from(for_param),
            last: Mutex::new(None),
        }))
    }

    /// Appends this client to the `X-Forwarded-For` and `Forwarded` lists of a request whose
    /// fields are `headers` (after its `Host` is set).
    pub(crate) fn append_to(&self, headers: &mut HeaderMap) {
        let forwarded = self.forwarded_for_host(headers.get(header::HOST));
        append_list(headers, &X_FORWARDED_FOR, self.0.address.clone());
        if let Some(forwarded) = forwarded {
            append_list(headers, &header::FORWARDED, forwarded);
        }
    }

    /// The `Forwarded` element for `host`: the last one made if it named the same host.
    fn forwarded_for_host(&self, host: Option<&HeaderValue>) -> Option<HeaderValue> {
        let Some(host) = host else {
            return self.forwarded_element(None);
        };
        let mut last = self.0.last.lock();
        if let Some((seen, element)) = last.as_ref() {
            if **seen == *host.as_bytes() {
                return Some(element.clone());
            }
        }
        let element = self.forwarded_element(Some(host))?;
        *last = Some((host.as_bytes().into(), element.clone()));
        Some(element)
    }

    /// The `Forwarded` element: `for`, `host` when it can be quoted as is, `proto`.
    fn forwarded_element(&self, host: Option<&HeaderValue>) -> Option<HeaderValue> {
        const PROTO: &[u8] = b";proto=http";
        let host = host
            .map(HeaderValue::as_bytes)
            // A quote or a backslash would end or escape the quoted string early.
            .filter(|h| {
                h.iter()
                    .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            });
        let host_len = host.map_or(0, |h| h.len() + 8);
        let mut element = BytesMut::with_capacity(self.0.for_param.len() + host_len + PROTO.len());
        element.put_slice(&self.0.for_param);
        if let Some(host) = host {
            element.put_slice(b";host=\"");
            element.put_slice(host);
            element.put_u8(b'"');
        }
        element.put_slice(PROTO);
        HeaderValue::from_maybe_shared(element.freeze()).ok()
    }
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
            ("connection", "keep-alive, X-Private ,close"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("upgrade", "h2c"),
            ("te", "trailers"),
            ("accept", "*/*"),
        ]);
        drop_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["accept", "host"]);
    }

    #[test]
    fn every_connection_field_is_read_and_dropped() {
        let mut map = headers(&[
            ("connection", "keep-alive"),
            ("connection", "x-a"),
            ("x-a", "1"),
            ("x-b", "2"),
        ]);
        drop_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["x-b"]);
    }

    #[test]
    fn a_message_without_hop_by_hop_fields_is_left_alone() {
        let mut map = headers(&[("host", "a"), ("x-private", "1")]);
        drop_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["host", "x-private"]);
    }

    #[test]
    fn the_client_is_appended_to_what_came_in() {
        let mut map = headers(&[
            ("host", "app.example:8080"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        ForwardedClient::new("127.0.0.1".parse().expect("ip")).append_to(&mut map);
        assert_eq!(map["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 127.0.0.1");
        assert_eq!(map.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(
            map[header::FORWARDED],
            "for=127.0.0.1;host=\"app.example:8080\";proto=http"
        );
        ForwardedClient::new("10.9.9.9".parse().expect("ip")).append_to(&mut map);
        assert_eq!(
            map[header::FORWARDED],
            "for=127.0.0.1;host=\"app.example:8080\";proto=http, \
             for=10.9.9.9;host=\"app.example:8080\";proto=http"
        );
    }

    #[test]
    fn a_v6_client_is_quoted_and_a_host_that_cannot_be_is_left_out() {
        let mut map = headers(&[("host", "a\"b")]);
        ForwardedClient::new("::1".parse().expect("ip")).append_to(&mut map);
        assert_eq!(map["x-forwarded-for"], "::1");
        assert_eq!(map[header::FORWARDED], "for=\"[::1]\";proto=http");
        let mut map = headers(&[("host", "a\\")]);
        ForwardedClient::new("10.1.2.3".parse().expect("ip")).append_to(&mut map);
        assert_eq!(map[header::FORWARDED], "for=10.1.2.3;proto=http");
    }

    #[test]
    fn each_request_of_a_connection_names_its_own_host() {
        let client = ForwardedClient::new("192.0.2.7".parse().expect("ip"));
        for host in ["a.example", "a.example", "b.example", "a.example"] {
            let mut map = headers(&[("host", host)]);
            client.append_to(&mut map);
            assert_eq!(
                map[header::FORWARDED],
                format!("for=192.0.2.7;host=\"{host}\";proto=http").as_str()
            );
        }
        let mut map = headers(&[]);
        client.append_to(&mut map);
        assert_eq!(map[header::FORWARDED], "for=192.0.2.7;proto=http");
    }
}
