//! The addresses a forwarding field holds, read from the right one element at a time, as
//! bytes: what the proxies nearest the service appended is read first, and nothing a client
//! wrote further left can change how it is read.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The elements of `lines` (every line of one field, in the order received), right to left:
/// the lines from the last, each split at every comma. Quotes are not honoured across
/// elements, so a client's open quote cannot swallow what the proxies appended after it.
/// Empty elements (`a,,b`, a trailing comma) are skipped, as nginx skips them.
pub(super) fn elements_from_right<'a, I>(lines: I) -> impl Iterator<Item = &'a [u8]>
where
    I: DoubleEndedIterator<Item = &'a [u8]>,
{
    lines
        .rev()
        .flat_map(|line| line.rsplit(|&b| b == b','))
        .map(trim_ows)
        .filter(|element| !element.is_empty())
}

/// `bytes` without the spaces and tabs around it.
pub(super) fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:80`, the port possibly obfuscated (`:_a1`, RFC 7239
/// section 6.3). Anything else (`unknown`, an obfuscated node `_hidden`, a byte that is not
/// ASCII) is `None`. IPv4-mapped IPv6 addresses are the IPv4 address they map.
pub(super) fn parse_address(bytes: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(bytes).ok()?;
    let ip = if let Ok(ip) = text.parse::<IpAddr>() {
        ip
    } else if let Some(bracketed) = text.strip_prefix('[') {
        let (inside, after) = bracketed.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        IpAddr::V6(inside.parse().ok()?)
    } else if let Ok(socket) = text.parse::<SocketAddr>() {
        socket.ip()
    } else {
        let (host, port) = text.rsplit_once(':')?;
        if !is_port(port) {
            return None;
        }
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(ip.to_canonical())
}

/// A port: digits that fit in 16 bits, or an obfuscated one (`_` then letters, digits, `.`,
/// `_`, `-`).
fn is_port(text: &str) -> bool {
    match text.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => {
            !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit())
                && text.parse::<u16>().is_ok()
        }
    }
}

/// The `for=` value of one `Forwarded` element (RFC 7239 section 4), without its quotes, if
/// the element is well formed: `pair *( ";" pair )`, each pair `token=value` with a token or
/// a quoted string closed within the element, and `for` given once. A malformed element, or
/// one that names no `for`, is `None`: the walk stops there rather than guess which of its
/// parts a trusted proxy wrote.
pub(super) fn forwarded_for(element: &[u8]) -> Option<&[u8]> {
    let mut found = None;
    let mut rest = element;
    loop {
        rest = trim_ows(rest);
        let name_end = rest
            .iter()
            .position(|b| !is_tchar(*b))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_end);
        let after = after.strip_prefix(b"=")?;
        if name.is_empty() {
            return None;
        }
        let (value, after) = split_value(after)?;
        if name.eq_ignore_ascii_case(b"for") {
            if found.is_some() || value.is_empty() {
                return None;
            }
            found = Some(value);
        }
        match trim_ows(after) {
            [] => return found,
            [b';', next @ ..] => rest = next,
            _ => return None,
        }
    }
}

/// A pair's value at the start of `text` (a token, or a quoted string given without its
/// quotes and escapes left in), and what follows it. A token may hold `:`, `[` and `]`:
/// proxies that leave an address with a port unquoted are common, and reading it does not
/// let anything cross into the next element.
fn split_value(text: &[u8]) -> Option<(&[u8], &[u8])> {
    let Some(quoted) = text.strip_prefix(b"\"") else {
        let in_token = |b: &u8| is_tchar(*b) || matches!(b, b':' | b'[' | b']');
        let end = text.iter().position(|b| !in_token(b)).unwrap_or(text.len());
        return Some(text.split_at(end));
    };
    let mut escaped = false;
    for (i, &b) in quoted.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some((&quoted[..i], &quoted[i + 1..])),
            // Control characters are not `qdtext`.
            0x00..=0x08 | 0x0a..=0x1f | 0x7f => return None,
            _ => {}
        }
    }
    None
}

/// A `tchar` of RFC 9110 section 5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("ip"))
    }

    #[test]
    fn addresses_as_proxies_write_them() {
        assert_eq!(parse_address(b"192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(parse_address(b"192.0.2.1:8080"), ip("192.0.2.1"));
        assert_eq!(parse_address(b"192.0.2.1:_p"), ip("192.0.2.1"));
        assert_eq!(parse_address(b"2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(parse_address(b"[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(parse_address(b"[2001:db8::1]:4711"), ip("2001:db8::1"));
        assert_eq!(parse_address(b"[2001:db8::1]:_x"), ip("2001:db8::1"));
        assert_eq!(parse_address(b"::ffff:192.0.2.5"), ip("192.0.2.5"));
        for bad in [
            &b"unknown"[..],
            b"_hidden",
            b"\xff",
            b"\"",
            b"192.0.2.1:",
            b"192.0.2.1:99999",
            b"[2001:db8::1",
            b"[192.0.2.1]",
            b"[2001:db8::1]x",
            b"192.0.2.1 192.0.2.2",
            b"",
        ] {
            assert_eq!(parse_address(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn elements_are_read_from_the_right_without_quotes() {
        let lines: [&[u8]; 2] = [b"\"a, b\", c", b" d,,e ,"];
        let got: Vec<&[u8]> = elements_from_right(lines.iter().copied()).collect();
        assert_eq!(got, [&b"e"[..], b"d", b"c", b"b\"", b"\"a"]);
    }

    #[test]
    fn forwarded_elements() {
        assert_eq!(forwarded_for(b"for=192.0.2.1"), Some(&b"192.0.2.1"[..]));
        assert_eq!(
            forwarded_for(b"proto=https; For=\"[2001:db8::1]:80\";by=_x"),
            Some(&b"[2001:db8::1]:80"[..])
        );
        assert_eq!(forwarded_for(b"for=\"a;b\";host=x"), Some(&b"a;b"[..]));
        for bad in [
            &b"for=127.0.2.27;x=\""[..],
            b"for=\"127.0.2.28",
            b"for=\"x\\\"",
            b"for=1.1.1.1;for=2.2.2.2",
            b"proto=http",
            b"for=",
            b"for 1.1.1.1",
            b"=1",
            b"for=1.1.1.1 x",
            b"for=\"1.1.1.1\"x",
        ] {
            assert_eq!(forwarded_for(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
