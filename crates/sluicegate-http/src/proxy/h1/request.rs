//! A client's request head read off the connection (httparse), and how its body is framed
//! (RFC 9112 section 6.3), as strictly as nginx reads it.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::request::Parts;
use http::{Method, Request, StatusCode, Uri, Version};

use crate::proxy::h1::io::BodyLeft;
use crate::proxy::wire::{ChunkedDecoder, Malformed, read_fields};

/// The longest request head read, in bytes.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most fields a request head may have (hyper's default).
const MAX_FIELDS: usize = 100;

/// A request head, consumed from the buffer.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) parts: Parts,
    pub(crate) body: BodyLeft,
    /// Whether the client asked for the connection to carry another request after this one.
    pub(crate) keep_alive: bool,
    /// `Expect: 100-continue` on a request with a body.
    pub(crate) expect_continue: bool,
}

/// A request the server answers itself, and closes the connection after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) reason: &'static str,
}

fn bad(reason: &'static str) -> Refusal {
    Refusal {
        status: StatusCode::BAD_REQUEST,
        reason,
    }
}

impl From<Malformed> for Refusal {
    fn from(Malformed(what): Malformed) -> Refusal {
        bad(what)
    }
}

/// Parses the request head at the front of `buf`, consuming it if whole; `None`: not a whole
/// head yet.
pub(crate) fn parse(buf: &mut BytesMut) -> Result<Option<RequestHead>, Refusal> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let too_large = Refusal {
        status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        reason: "the request head is longer than 64 KiB or has more than 100 fields",
    };
    let length = match request.parse_with_uninit_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(too_large),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(too_large),
        Err(httparse::Error::Version) => return Err(bad("not an HTTP/1.x request")),
        Err(_) => return Err(bad("a malformed request line or field")),
    };
    let method = Method::from_bytes(request.method.unwrap_or_default().as_bytes())
        .map_err(|_| bad("the method"))?;
    let version = match request.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let target = request.path.unwrap_or_default();
    let target_start = target.as_ptr() as usize - buf.as_ptr() as usize;
    let target_end = target_start + target.len();
    let (spans, fields) = read_fields(buf, request.headers)?;
    let head = buf.split_to(length).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target_start..target_end))
        .map_err(|_| bad("the request target"))?;
    let headers = spans.into_map(&head)?;

    if version == Version::HTTP_11 && fields.hosts == 0 {
        return Err(bad("an HTTP/1.1 request without Host"));
    }
    if fields.hosts > 1 {
        return Err(bad("more than one Host"));
    }
    let body = match (fields.transfer_encoding, fields.content_length) {
        (None, None | Some(0)) => BodyLeft::Ended,
        (None, Some(length)) => BodyLeft::Length(length),
        (Some(_), Some(_)) => return Err(bad("both Transfer-Encoding and Content-Length")),
        (Some(_), None) if version == Version::HTTP_10 => {
            return Err(bad("a Transfer-Encoding in an HTTP/1.0 request"));
        }
        (Some(true), None) => BodyLeft::Chunked(ChunkedDecoder::default()),
        (Some(false), None) => {
            return Err(Refusal {
                status: StatusCode::NOT_IMPLEMENTED,
                reason: "a Transfer-Encoding other than chunked",
            });
        }
    };
    let keep_alive = if version == Version::HTTP_10 {
        fields.keep_alive && !fields.close
    } else {
        !fields.close
    };
    let expect_continue =
        fields.expect_continue && version == Version::HTTP_11 && !matches!(body, BodyLeft::Ended);
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    let (parts, ()) = request.into_parts();
    Ok(Some(RequestHead {
        parts,
        body,
        keep_alive,
        expect_continue,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(wire: &[u8]) -> Result<Option<RequestHead>, Refusal> {
        parse(&mut BytesMut::from(wire))
    }

    #[test]
    fn a_head_gives_its_parts_framing_and_keep_alive() -> Result<(), Refusal> {
        let mut buf = BytesMut::from(
            &b"POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello"[..],
        );
        let head = parse(&mut buf)?.ok_or(bad("partial"))?;
        assert_eq!(head.parts.method, Method::POST);
        assert_eq!(head.parts.uri, "/a?b=c");
        assert_eq!(head.parts.headers["host"], "x");
        assert!(matches!(head.body, BodyLeft::Length(5)));
        assert!(head.keep_alive && head.expect_continue);
        assert_eq!(&buf[..], b"hello");

        let head = parse_all(
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )?
        .ok_or(bad("partial"))?;
        assert!(matches!(head.body, BodyLeft::Chunked(_)));
        assert!(!head.keep_alive);
        let head = parse_all(b"GET / HTTP/1.0\r\n\r\n")?.ok_or(bad("partial"))?;
        assert!(matches!(head.body, BodyLeft::Ended) && !head.keep_alive);
        let head = parse_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")?
            .ok_or(bad("partial"))?;
        assert!(head.keep_alive);
        assert!(parse_all(b"GET / HTTP/1.1\r\nHost: x\r\n")?.is_none());
        Ok(())
    }

    #[test]
    fn what_two_parsers_could_read_apart_is_refused() {
        for (wire, status, reason) in [
            (&b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"[..], 400, "both"),
            (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "other than chunked"),
            (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "other than chunked"),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0"),
            (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400, "disagree"),
            (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n", 400, "not a number"),
            (b"GET / HTTP/1.1\r\n\r\n", 400, "without Host"),
            (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "more than one Host"),
            (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "malformed"),
            (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 400, "HTTP/1.x"),
        ] {
            let text = String::from_utf8_lossy(wire);
            match parse_all(wire) {
                Err(refusal) => {
                    assert_eq!(refusal.status.as_u16(), status, "{text:?}");
                    assert!(refusal.reason.contains(reason), "{text:?}: {}", refusal.reason);
                }
                Ok(head) => panic!("{text:?} was read as {head:?}"),
            }
        }
    }

    #[test]
    fn a_head_too_large_is_refused_431() {
        let mut wire = b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ".to_vec();
        wire.resize(MAX_HEAD + 10, b'a');
        assert_eq!(
            parse_all(&wire)
                .map(|_| ())
                .map_err(|refusal| refusal.status.as_u16()),
            Err(431)
        );
        let mut wire = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..MAX_FIELDS {
            wire.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        wire.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_all(&wire)
                .map(|_| ())
                .map_err(|refusal| refusal.status.as_u16()),
            Err(431)
        );
    }

    proptest! {
        #[test]
        fn any_mangled_head_is_answered_without_a_panic(
            at in 0usize..90, byte in any::<u8>(), cut in 1usize..=90,
        ) {
            let mut wire = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n".to_vec();
            let at = at % wire.len();
            wire[at] = byte;
            wire.truncate(cut.min(wire.len()));
            // Any answer but a panic: a head, not yet a head, or a refusal.
            let _ = parse_all(&wire);
        }
    }
}
