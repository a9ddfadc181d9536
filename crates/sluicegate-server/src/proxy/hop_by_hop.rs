//! Fields that describe one connection, not the message (RFC 9110 section 7.6.1): the
//! hop-by-hop ones, and those a `Connection` field names. A reverse proxy never forwards them.
//!
//! [`FieldScan`] finds them, and the few other fields the proxy's rewrites read, in one pass
//! over a message's fields: each lookup of a `HeaderMap` hashes a name and probes, and the
//! rewrites of every request and response used to make five or six.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// Fields that describe one connection, not the message: never forwarded.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
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

/// Whether `name` is a hop-by-hop field, never forwarded.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    // One match on the name's text: its length is compared first, so that most names are
    // told apart by it alone.
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
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

/// What one pass over a message's fields finds.
#[derive(Debug, Default)]
pub(crate) struct FieldScan {
    /// The hop-by-hop fields, those `Connection` names, and the one [`FieldScan::of`] was
    /// also asked to drop: each once.
    pub(crate) dropped: SmallVec<[HeaderName; 4]>,
    /// The first `Upgrade` value.
    pub(crate) upgrade: Option<HeaderValue>,
    /// Whether a `Connection` value holds the `upgrade` option.
    pub(crate) asks_upgrade: bool,
    /// Whether a `Host` field came (and is not dropped).
    pub(crate) has_host: bool,
    /// The first `Content-Length` value (none if it is dropped).
    pub(crate) length: Option<HeaderValue>,
    /// Whether `Content-Length` came more than once, or as a list.
    pub(crate) length_listed: bool,
}

impl FieldScan {
    /// Looks at each of `headers` once; `also` names a field to drop with the hop-by-hop ones.
    pub(crate) fn of(headers: &HeaderMap, also: Option<&HeaderName>) -> FieldScan {
        let mut scan = FieldScan::default();
        let mut connection: SmallVec<[&[u8]; 2]> = SmallVec::new();
        // A field's values come one after another: a name is the last one dropped, or new.
        for (name, value) in headers {
            if name == header::CONTENT_LENGTH {
                scan.length_listed |= scan.length.is_some() || value.as_bytes().contains(&b',');
                scan.length.get_or_insert_with(|| value.clone());
                continue;
            }
            if name == header::HOST {
                scan.has_host = true;
                continue;
            }
            if !is_hop_by_hop(name) && also != Some(name) {
                continue;
            }
            if name == header::CONNECTION {
                connection.push(value.as_bytes());
            } else if name == header::UPGRADE && scan.upgrade.is_none() {
                scan.upgrade = Some(value.clone());
            }
            if scan.dropped.last() != Some(name) {
                scan.dropped.push(name.clone());
            }
        }
        if connection.is_empty() {
            return scan;
        }
        scan.asks_upgrade = connection.iter().any(|value| {
            value
                .split(|&b| b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
        });
        let is_field = |token: &[u8]| {
            std::str::from_utf8(token).is_ok_and(|token| headers.contains_key(token))
        };
        for name in connection_named(connection, is_field) {
            // A field `Connection` names is dropped: not one that stays to be read.
            if name == header::HOST {
                scan.has_host = false;
            } else if name == header::CONTENT_LENGTH {
                (scan.length, scan.length_listed) = (None, false);
            }
            if !scan.dropped.contains(&name) {
                scan.dropped.push(name);
            }
        }
        scan
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

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn one_pass_finds_each_field_to_drop_once_and_the_fields_read() {
        let message = headers(&[
            ("host", "a.example"),
            ("connection", "keep-alive, X-Private"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "websocket"),
            ("connection", "Upgrade, expect"),
            ("x-private", "1"),
            ("upgrade", "h2c"),
            ("expect", "100-continue"),
            ("content-length", "5"),
            ("accept", "*/*"),
        ]);
        let scan = FieldScan::of(&message, Some(&header::EXPECT));
        assert_eq!(
            names(&scan.dropped),
            ["connection", "keep-alive", "upgrade", "expect", "x-private"]
        );
        assert_eq!(scan.upgrade, Some(HeaderValue::from_static("websocket")));
        assert!(scan.asks_upgrade && scan.has_host && !scan.length_listed);
        assert_eq!(scan.length, Some(HeaderValue::from_static("5")));

        let plain = FieldScan::of(&headers(&[("content-length", "5, 5")]), None);
        assert!(plain.dropped.is_empty() && !plain.has_host && !plain.asks_upgrade);
        assert!(plain.length_listed);
        let twice = headers(&[("content-length", "5"), ("content-length", "5")]);
        assert!(FieldScan::of(&twice, None).length_listed);
        // A `Connection` naming a field the message has not: nothing more to drop.
        let unnamed = FieldScan::of(&headers(&[("connection", "x-absent, close")]), None);
        assert_eq!(names(&unnamed.dropped), ["connection"]);
        // Fields it names are dropped, not read.
        let named = headers(&[
            ("host", "a.example"),
            ("content-length", "5, 5"),
            ("connection", "Host, content-length"),
        ]);
        let named = FieldScan::of(&named, None);
        assert_eq!(
            names(&named.dropped),
            ["connection", "host", "content-length"]
        );
        assert!(!named.has_host && named.length.is_none() && !named.length_listed);
    }
}
