//! The fields a reverse proxy rewrites: hop-by-hop fields dropped (RFC 9110 7.6.1), and the
//! client appended to `X-Forwarded-For` and `Forwarded` (RFC 7239), or to those of them
//! [`ForwardingFields`] names.
//!
//! Both happen on the way through, never by editing a header map: a request's fields are
//! sorted as its head is written for the upstream (`upstream::request`), a response's as its
//! head is parsed (`upstream::response`). The client's address is formatted once per
//! connection, not per request, and hop-by-hop names are compared as `http`'s standard
//! headers, never built.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
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

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The hop-by-hop names `http` knows: these compare as small integers, not as strings.
static STANDARD_HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether `name` is a hop-by-hop field, never forwarded.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    STANDARD_HOP_BY_HOP.contains(name) || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// Whether a token of the `Connection` field needs no removal of its own: `close` is an
/// option, not a field, and hop-by-hop fields are removed anyway.
fn is_known_token(token: &[u8]) -> bool {
    token.eq_ignore_ascii_case(b"close")
        || HOP_BY_HOP
            .iter()
            .any(|name| token.eq_ignore_ascii_case(name.as_bytes()))
}

/// The fields the `Connection` field values `values` name, beyond the hop-by-hop ones: each
/// is hop-by-hop for this message, and dropped with them. Only names `is_field` says the
/// message has are kept, each once: a `Connection` of a hundred thousand tokens costs a look
/// per token, not a list the message's every field is then compared with.
pub(crate) fn connection_named<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
    is_field: impl Fn(&[u8]) -> bool,
) -> SmallVec<[HeaderName; 2]> {
    let mut named: SmallVec<[HeaderName; 2]> = SmallVec::new();
    for value in values {
        for token in value.split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.is_empty() || is_known_token(token) || !is_field(token) {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token) {
                if !named.contains(&name) {
                    named.push(name);
                }
            }
        }
    }
    named
}

/// Writes the field `name: came[0], came[1], ..., appended`, or nothing if there is nothing
/// to write: the values that came as one list, with the proxy's element at its end.
fn write_list(out: &mut Vec<u8>, name: &[u8], came: &[&HeaderValue], appended: Option<&[u8]>) {
    if came.is_empty() && appended.is_none() {
        return;
    }
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    let mut first = true;
    for value in came.iter().map(|v| v.as_bytes()).chain(appended) {
        if !first {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(value);
        first = false;
    }
    out.extend_from_slice(b"\r\n");
}

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

/// Writes a request's `X-Forwarded-For` and `Forwarded` fields as they go to the upstream:
/// the lists that came (`xff`, `forwarded`), with `client` appended to those `appended`
/// names. `host`: the host the request names, for `Forwarded`'s `host=`.
pub(crate) fn write_forwarding_fields(
    out: &mut Vec<u8>,
    client: &ForwardedClient,
    appended: ForwardingFields,
    xff: &[&HeaderValue],
    forwarded: &[&HeaderValue],
    host: Option<&[u8]>,
) {
    let element = appended
        .forwarded()
        .then(|| client.forwarded_for_host(host))
        .flatten();
    write_list(
        out,
        X_FORWARDED_FOR.as_str().as_bytes(),
        xff,
        appended
            .x_forwarded_for()
            .then(|| client.0.address.as_bytes()),
    );
    write_list(
        out,
        header::FORWARDED.as_str().as_bytes(),
        forwarded,
        element.as_ref().map(HeaderValue::as_bytes),
    );
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
            ip,
            address,
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
        const PROTO: &[u8] = b";proto=http";
        let host = host
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

    fn names(named: &[HeaderName]) -> Vec<&str> {
        named.iter().map(HeaderName::as_str).collect()
    }

    #[test]
    fn connection_names_fields_beyond_the_hop_by_hop_ones() {
        let any = |_: &[u8]| true;
        let values = [
            &b"keep-alive, X-Private ,close"[..],
            b"x-a,, Upgrade, x-private",
        ];
        assert_eq!(names(&connection_named(values, any)), ["x-private", "x-a"]);
        assert!(connection_named([&b"close"[..]], any).is_empty());
        // A token that is no field name is no field to drop.
        assert!(connection_named([&b"a b, (c)"[..]], any).is_empty());
        // Nor is a name the message has no field of.
        let only_x_a = |token: &[u8]| token.eq_ignore_ascii_case(b"x-a");
        assert_eq!(names(&connection_named(values, only_x_a)), ["x-a"]);
    }

    #[test]
    fn hop_by_hop_names_are_known_by_their_exact_lowercase_name() {
        for name in HOP_BY_HOP {
            assert!(is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
        for name in ["host", "accept", "x-forwarded-for", "tee", "connections"] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
    }

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
        let xff: Vec<HeaderValue> = xff.iter().map(|v| HeaderValue::from_static(v)).collect();
        let forwarded: Vec<HeaderValue> = forwarded
            .iter()
            .map(|v| HeaderValue::from_static(v))
            .collect();
        let mut out = Vec::new();
        write_forwarding_fields(
            &mut out,
            client,
            appended,
            &xff.iter().collect::<Vec<_>>(),
            &forwarded.iter().collect::<Vec<_>>(),
            host.map(str::as_bytes),
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn the_client_is_appended_to_what_came_in() {
        let client = ForwardedClient::new("127.0.0.1".parse().expect("ip"));
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
        let client = ForwardedClient::new("127.0.0.1".parse().expect("ip"));
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
        let v6 = ForwardedClient::new("::1".parse().expect("ip"));
        assert_eq!(
            fields(&v6, &[], &[], Some("a\"b")),
            "x-forwarded-for: ::1\r\nforwarded: for=\"[::1]\";proto=http\r\n"
        );
        let v4 = ForwardedClient::new("10.1.2.3".parse().expect("ip"));
        assert!(
            fields(&v4, &[], &[], Some("a\\")).ends_with("forwarded: for=10.1.2.3;proto=http\r\n")
        );
    }

    #[test]
    fn each_request_of_a_connection_names_its_own_host() {
        let client = ForwardedClient::new("192.0.2.7".parse().expect("ip"));
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
