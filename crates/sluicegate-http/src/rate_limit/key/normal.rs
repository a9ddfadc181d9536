//! A request's path and host as one resource has one spelling: what routes match and keys are
//! made of, so that `//login`, `/%6Cogin` or `HOST.example.:80` cannot step around a limit
//! that `/login` or `host.example` spent (nginx's `$uri` and `$host`).

use std::borrow::Cow;

use http::{Version, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode, percent_encode};

use crate::rate_limit::key::RequestHead;

/// Why a path has no normal form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Its `..` segments climb above the root (`/../etc`, `/a/%2e%2e/..`).
    #[error("the path climbs above the root")]
    AboveRoot,
    /// It holds a NUL byte (`%00`), which a server that reads paths as C strings would cut
    /// the path at; nginx refuses it too.
    #[error("the path holds a NUL byte")]
    Nul,
}

/// Why a request names no host that can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// More than one `Host` field: the limits could key on one and the upstream read another.
    #[error("the request has more than one Host field")]
    Repeated,
    /// An h2 request whose `Host` names another host than its `:authority`.
    #[error("the Host field and :authority name different hosts")]
    Conflicting,
    /// A host that is not a name, an IPv4 address or a bracketed IPv6 address, with an
    /// optional port: a space, a slash, a byte that is not ASCII, an empty name, a leading
    /// dot, `..`.
    #[error("the host is not a valid host name")]
    Invalid,
}

/// `path` in its normal form: every percent-encoded octet decoded (as nginx decodes its
/// `$uri`, `%2F` included), dot segments removed (RFC 3986 section 5.2.4), repeated slashes
/// merged (nginx's `merge_slashes on`), and, with `fold_case`, ASCII letters in lower case.
/// A path already normal is borrowed. A path that does not start with `/` (`*`) is left as it
/// is; one whose `..` climbs above the root, or that holds `%00`, is an error, which nginx
/// answers 400.
///
/// ```
/// use sluicegate_http::rate_limit::key::normal::normal_path;
///
/// assert_eq!(&*normal_path(b"//a/./b/../%6Cogin", false)?, b"/a/login");
/// assert_eq!(&*normal_path(b"/API/", true)?, b"/api/");
/// assert!(normal_path(b"/../etc", false).is_err());
/// # Ok::<(), sluicegate_http::rate_limit::key::normal::PathError>(())
/// ```
pub fn normal_path(path: &[u8], fold_case: bool) -> Result<Cow<'_, [u8]>, PathError> {
    if path.first() != Some(&b'/') || is_normal(path, fold_case) {
        return Ok(Cow::Borrowed(path));
    }
    // A `%` not followed by two hex digits stays as it is.
    let decoded: Cow<'_, [u8]> = percent_decode(path).into();
    if decoded.contains(&0) {
        return Err(PathError::Nul);
    }
    let mut out = Vec::with_capacity(decoded.len());
    // Where each segment kept starts in `out`, for `..` to take it back.
    let mut starts: Vec<usize> = Vec::new();
    let mut segments = decoded[1..].split(|&b| b == b'/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            b"" | b"." => {}
            b".." => {
                let start = starts.pop().ok_or(PathError::AboveRoot)?;
                out.truncate(start);
            }
            _ => {
                starts.push(out.len());
                out.push(b'/');
                out.extend_from_slice(segment);
                continue;
            }
        }
        // A path that ends in a slash, `.` or `..` names a directory: it keeps its slash.
        if last {
            out.push(b'/');
        }
    }
    if fold_case {
        out.make_ascii_lowercase();
    }
    Ok(Cow::Owned(out))
}

/// Whether `path` (which starts with `/`) is its own normal form: no `%`, no empty, `.` or
/// `..` segment but a final empty one, and no upper-case letter when case is folded.
fn is_normal(path: &[u8], fold_case: bool) -> bool {
    let mut previous = b'/';
    for (i, &b) in path.iter().enumerate().skip(1) {
        let bad = match b {
            b'%' => true,
            b'/' => previous == b'/' || ends_dot_segment(&path[..i]),
            b'A'..=b'Z' => fold_case,
            _ => false,
        };
        if bad {
            return false;
        }
        previous = b;
    }
    !ends_dot_segment(path)
}

/// Whether `path`'s last segment is `.` or `..`.
fn ends_dot_segment(path: &[u8]) -> bool {
    path.ends_with(b"/.") || path.ends_with(b"/..")
}

/// `path` as a request line may carry it: every byte that is not allowed in a path segment
/// or is `%` percent-encoded again, so that a normal path whose decoded bytes include a
/// space or `?` is passed on meaning what it meant.
pub fn encoded_path(path: &[u8]) -> Cow<'_, [u8]> {
    match Cow::from(percent_encode(path, NOT_IN_A_PATH)) {
        Cow::Borrowed(_) => Cow::Borrowed(path),
        Cow::Owned(encoded) => Cow::Owned(encoded.into_bytes()),
    }
}

/// Every byte a path segment may not carry as it is (RFC 3986 `pchar` and `/` may), and `%`.
const NOT_IN_A_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@')
    .remove(b'/');

/// The host the request names (nginx's `$host` before its normal form): the authority of an
/// absolute-form request line, which wins over `Host` (RFC 9112 section 3.2.2); an h2
/// request's `:authority`, which a `Host` may repeat but not contradict; otherwise `Host`.
/// `None` when the request names none (HTTP/1.0).
pub fn request_host<'a>(request: &RequestHead<'a>) -> Result<Option<&'a [u8]>, HostError> {
    let mut fields = request.headers().get_all(header::HOST).iter();
    let field = match (fields.next(), fields.next()) {
        (Some(_), Some(_)) => return Err(HostError::Repeated),
        (field, _) => field.map(|f| f.as_bytes()),
    };
    let Some(authority) = request.uri().authority() else {
        return Ok(field);
    };
    let authority = authority.as_str().as_bytes();
    if request.version() == Version::HTTP_2
        && let Some(field) = field
        && normal_host(field)? != normal_host(authority)?
    {
        return Err(HostError::Conflicting);
    }
    Ok(Some(authority))
}

/// `host` in its normal form (nginx's `$host`): in lower case, without its port or a trailing
/// dot; borrowed when it is already so. A host that is not a registered name, an IPv4 address
/// or a bracketed IPv6 literal with an optional port is an error, which nginx answers 400.
///
/// ```
/// use sluicegate_http::rate_limit::key::normal::normal_host;
///
/// assert_eq!(&*normal_host(b"API.Example.COM.:8443")?, b"api.example.com");
/// assert_eq!(&*normal_host(b"[2001:DB8::1]:80")?, b"[2001:db8::1]");
/// assert!(normal_host(b"example.com x").is_err());
/// # Ok::<(), sluicegate_http::rate_limit::key::normal::HostError>(())
/// ```
pub fn normal_host(host: &[u8]) -> Result<Cow<'_, [u8]>, HostError> {
    let name_end = match host.first() {
        Some(b'[') => {
            let close = host
                .iter()
                .position(|&b| b == b']')
                .ok_or(HostError::Invalid)?;
            let literal = &host[1..close];
            if literal.is_empty()
                || !literal
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
            {
                return Err(HostError::Invalid);
            }
            close + 1
        }
        _ => host.iter().position(|&b| b == b':').unwrap_or(host.len()),
    };
    let (name, port) = host.split_at(name_end);
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !port_ok {
        return Err(HostError::Invalid);
    }
    let name = name.strip_suffix(b".").unwrap_or(name);
    let upper = if name.first() == Some(&b'[') {
        name.iter().any(u8::is_ascii_uppercase)
    } else {
        reg_name_has_upper(name).ok_or(HostError::Invalid)?
    };
    Ok(match upper {
        true => Cow::Owned(name.to_ascii_lowercase()),
        false => Cow::Borrowed(name),
    })
}

/// The bytes of a registered name (RFC 3986's `reg-name`): unreserved, sub-delims and `%`.
const REG_NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || matches!(
                b,
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b','
            )
            || matches!(b, b';' | b'=' | b'%');
        byte += 1;
    }
    table
};

/// Whether `name`, a registered name, has a letter in upper case; `None` if it is no name:
/// empty, a byte outside `reg-name`, or an empty label (a leading dot, or two in a row). One
/// pass over the bytes, each looked up in a table: every request's host goes through it.
fn reg_name_has_upper(name: &[u8]) -> Option<bool> {
    let (mut upper, mut after_dot) = (false, true);
    for &b in name {
        let dot = b == b'.';
        if !REG_NAME_BYTES[usize::from(b)] || (dot && after_dot) {
            return None;
        }
        after_dot = dot;
        upper |= b.is_ascii_uppercase();
    }
    (!name.is_empty()).then_some(upper)
}

#[cfg(test)]
mod tests;
