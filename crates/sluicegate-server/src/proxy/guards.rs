//! nginx's default guards on a request's fields, applied as the request enters: before any
//! limit reads it, and so before the upstream does.

use http::HeaderMap;
use http::header::HeaderName;
use smallvec::SmallVec;

/// Drops every field whose name holds an underscore (`X_Forwarded_For`), as nginx does by
/// default (`underscores_in_headers off` with `ignore_invalid_headers on`).
///
/// Many upstreams read fields by CGI-style names (`HTTP_X_FORWARDED_FOR`), in which `-` and
/// `_` both become `_`: a twin the limits never read (they key on `x-forwarded-for`) could
/// then stand in, upstream, for the field they did read, or be merged with it.
pub(crate) fn drop_underscored(headers: &mut HeaderMap) {
    // Scanned first: the common request, with no such name, allocates nothing and is left
    // as it is.
    if !headers.keys().any(underscored) {
        return;
    }
    let names: SmallVec<[HeaderName; 2]> =
        headers.keys().filter(|n| underscored(n)).cloned().collect();
    for name in &names {
        // Every field of that name, not only the first.
        headers.remove(name);
    }
}

fn underscored(name: &HeaderName) -> bool {
    name.as_str().as_bytes().contains(&b'_')
}

/// Whether a request's `Transfer-Encoding` names a coding besides `chunked`, which the proxy
/// does not implement (nginx answers it 501): hyper takes `gzip, chunked` by its chunks, and
/// the upstream would get the coded bytes with nothing saying they are coded, the field being
/// hop-by-hop. `chunked` alone, once, is the only coding passed.
pub(crate) fn has_unknown_coding(headers: &HeaderMap) -> bool {
    let mut codings = headers.get_all(http::header::TRANSFER_ENCODING).iter();
    let Some(first) = codings.next() else {
        return false;
    };
    codings.next().is_some()
        || !first
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"chunked")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for &(name, value) in fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).expect("a valid name"),
                value.parse().expect("a valid value"),
            );
        }
        headers
    }

    #[test]
    fn every_field_named_with_an_underscore_goes_and_the_rest_stay() {
        let mut fields = headers(&[
            ("host", "app"),
            ("x_forwarded_for", "6.6.6.6"),
            ("x-forwarded-for", "1.2.3.4"),
            ("X_Api_Key", "a"),
            ("x_forwarded_for", "7.7.7.7"),
            ("x-kept", "1"),
            ("x-kept", "2"),
        ]);
        drop_underscored(&mut fields);
        // Compared name by name (the order of different names carries nothing), each name's
        // values in order.
        let kept = headers(&[
            ("host", "app"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-kept", "1"),
            ("x-kept", "2"),
        ]);
        assert_eq!(fields, kept);
    }

    #[test]
    fn a_request_without_one_is_left_as_it_is() {
        let mut fields = headers(&[("host", "app"), ("x-forwarded-for", "1.2.3.4")]);
        let before = fields.clone();
        drop_underscored(&mut fields);
        assert_eq!(fields, before);
        let mut none = HeaderMap::new();
        drop_underscored(&mut none);
        assert!(none.is_empty());
    }
}
