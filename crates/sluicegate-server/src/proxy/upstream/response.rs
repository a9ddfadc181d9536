//! A response head read off the connection (httparse), and how its body is framed
//! (RFC 9112 section 6.3).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Version};
use smallvec::SmallVec;

use crate::proxy::forwarding::{connection_named, is_hop_by_hop};
use crate::proxy::upstream::error::UpstreamError;

/// The longest response head read, in bytes.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most fields a response head may have.
const MAX_FIELDS: usize = 128;

/// How a response's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// It has none (a response to `HEAD`, a 204, a 304).
    Empty,
    /// After this many bytes.
    Length(u64),
    /// With the chunked coding's last chunk.
    Chunked,
    /// When the upstream closes the connection.
    UntilClose,
}

/// What a request asked of its response, which decides how the response is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A response, with the body its fields frame.
    Response,
    /// A response without body whatever its fields say (`HEAD`).
    HeadOnly,
    /// A switch to WebSocket: a `101` ends the exchange, and the connection becomes a tunnel
    /// (any other response is read as [`Asked::Response`]).
    WebSocket,
}

/// A final response's head.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) response: Response<()>,
    pub(crate) framing: Framing,
    /// Whether the connection may carry another request once this response has ended.
    pub(crate) keep_alive: bool,
    /// The upstream switched to WebSocket (`101`): the connection is a tunnel now, its
    /// `Upgrade` field kept and `Connection: upgrade` added for the client.
    pub(crate) switched: bool,
}

/// What the front of the read buffer held.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A final response's head, consumed from the buffer.
    Final(Head),
    /// An interim (1xx) response, consumed and dropped: the final one follows.
    Interim,
    /// Not a whole head yet.
    Partial,
}

fn invalid(what: &'static str) -> UpstreamError {
    UpstreamError::InvalidResponse(what)
}

/// Parses the response head at the front of `buf`, consuming it if whole, for a request that
/// `asked` it.
pub(crate) fn parse(buf: &mut BytesMut, asked: Asked) -> Result<Parsed, UpstreamError> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut fields,
    );
    let length = match parsed {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(UpstreamError::HeadTooLarge(MAX_HEAD));
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(invalid("more than 128 fields")),
        Err(_) => return Err(invalid("the head is not HTTP/1.x")),
    };
    let code = response.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|_| invalid("the status code"))?;
    let switched = status == StatusCode::SWITCHING_PROTOCOLS;
    if switched && asked != Asked::WebSocket {
        return Err(UpstreamError::SwitchingProtocols);
    }
    if status.is_informational() && !switched {
        let _ = buf.split_to(length);
        return Ok(Parsed::Interim);
    }
    let version = match response.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    // The fields' names and values are offsets into the head, which is frozen once parsed so
    // that each value shares its bytes instead of copying them. The fields that frame the body
    // are read on the way, so that none is looked up again.
    // Hop-by-hop fields are read (those that frame the body) and left out, and so are those
    // `Connection` names: the client's connection is the proxy's, not the upstream's.
    let base = buf.as_ptr() as usize;
    let mut spans: SmallVec<[(HeaderName, usize, usize); 24]> = SmallVec::new();
    let mut framing_fields = FramingFields::default();
    let mut connection: SmallVec<[&[u8]; 1]> = SmallVec::new();
    // A switch's `Upgrade`: whether it switches to the WebSocket asked for.
    let mut upgrade = None;
    for field in response.headers.iter() {
        let name =
            HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| invalid("a field name"))?;
        framing_fields.read(&name, field.value)?;
        if is_hop_by_hop(&name) {
            if name == header::CONNECTION {
                connection.push(field.value);
            } else if switched && name == header::UPGRADE {
                upgrade = Some(field.value.trim_ascii().eq_ignore_ascii_case(b"websocket"));
            }
            continue;
        }
        let start = field.value.as_ptr() as usize - base;
        spans.push((name, start, start + field.value.len()));
    }
    let named = connection_named(connection, |token| {
        spans
            .iter()
            .any(|(name, ..)| name.as_str().as_bytes().eq_ignore_ascii_case(token))
    });
    let head: Bytes = buf.split_to(length).freeze();
    let mut headers = HeaderMap::with_capacity(spans.len());
    for (name, start, end) in spans.drain(..) {
        if named.contains(&name) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(head.slice(start..end))
            .map_err(|_| invalid("a field value"))?;
        headers.append(name, value);
    }
    let (framing, keep_alive) = if switched {
        // Only the switch the request asked for: a tunnel to anything else could carry
        // requests no limit sees.
        match upgrade {
            Some(true) => {}
            Some(false) => {
                return Err(invalid(
                    "a switch to another protocol than the WebSocket asked for",
                ));
            }
            None => return Err(invalid("a switch (101) that names no protocol")),
        }
        // A 1xx has no body to frame.
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        (Framing::Empty, false)
    } else {
        let framing = framing_fields.framing(status, version, asked == Asked::HeadOnly)?;
        if let (true, Some(length)) = (framing_fields.listed, framing_fields.content_length) {
            // One value for the client (RFC 9110 section 8.6 lets a recipient replace a list of
            // one value repeated by the value): a list is a shape other parsers read apart,
            // and hyper's server would refuse to send two fields.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        framing
    };
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    Ok(Parsed::Final(Head {
        response,
        framing,
        keep_alive,
        switched,
    }))
}

/// What the fields that frame a body say.
#[derive(Debug, Default)]
struct FramingFields {
    /// Whether a Transfer-Encoding came, and whether it is one field saying `chunked` alone.
    transfer_encoding: Option<bool>,
    content_length: Option<u64>,
    /// Whether the length came more than once (a list, or several fields), all equal.
    listed: bool,
    close: bool,
    keep_alive: bool,
}

impl FramingFields {
    fn read(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), UpstreamError> {
        if name == header::TRANSFER_ENCODING {
            let alone = self.transfer_encoding.is_none();
            self.transfer_encoding =
                Some(alone && value.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == header::CONTENT_LENGTH {
            for item in value.split(|&b| b == b',') {
                let item = item.trim_ascii();
                if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
                    return Err(invalid("a Content-Length is not a number"));
                }
                let length = std::str::from_utf8(item)
                    .ok()
                    .and_then(|digits| digits.parse::<u64>().ok())
                    .ok_or(invalid("a Content-Length does not fit in 64 bits"))?;
                if let Some(other) = self.content_length {
                    if other != length {
                        return Err(invalid("Content-Length fields disagree"));
                    }
                    self.listed = true;
                }
                self.content_length = Some(length);
            }
        } else if name == header::CONNECTION {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        Ok(())
    }

    /// How the body ends, and whether the connection may carry another request after it.
    ///
    /// Stricter than RFC 9112 section 6.3 where it lets a proxy guess, as nginx is: a body
    /// framed by both fields (a request-smuggling shape), a coding other than chunked (which
    /// the client would get without the field that names it) and a Transfer-Encoding in an
    /// HTTP/1.0 response are refused.
    fn framing(
        &self,
        status: StatusCode,
        version: Version,
        to_head: bool,
    ) -> Result<(Framing, bool), UpstreamError> {
        let kept = if version == Version::HTTP_10 {
            self.keep_alive
        } else {
            !self.close
        };
        if to_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            return Ok((Framing::Empty, kept));
        }
        match (self.transfer_encoding, self.content_length) {
            (None, Some(length)) => Ok((Framing::Length(length), kept)),
            (None, None) => Ok((Framing::UntilClose, false)),
            (Some(_), Some(_)) => Err(invalid("both Transfer-Encoding and Content-Length")),
            (Some(_), None) if version == Version::HTTP_10 => {
                Err(invalid("a Transfer-Encoding in an HTTP/1.0 response"))
            }
            (Some(true), None) => Ok((Framing::Chunked, kept)),
            (Some(false), None) => Err(invalid("a Transfer-Encoding other than chunked")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A valid head with one byte changed, or cut short: the shapes a parser meets from a
    /// broken or hostile upstream, near enough to valid to reach every branch.
    fn mangled_head() -> impl Strategy<Value = Vec<u8>> {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 12, 12\r\nConnection: keep-alive, close\r\n\r\n".to_vec();
        let len = wire.len();
        (0..len, any::<u8>(), 0..=len).prop_map(move |(at, byte, cut)| {
            let mut mangled = wire.clone();
            mangled[at] = byte;
            mangled.truncate(cut.max(1));
            mangled
        })
    }

    proptest! {
        #[test]
        fn any_bytes_parse_to_an_answer_not_a_panic(
            wire in prop_oneof![proptest::collection::vec(any::<u8>(), 0..300), mangled_head()],
            asked in prop_oneof![Just(Asked::Response), Just(Asked::HeadOnly), Just(Asked::WebSocket)],
        ) {
            let mut buf = BytesMut::from(&wire[..]);
            let before = buf.len();
            // After an error the connection is dropped, whatever the buffer holds.
            match parse(&mut buf, asked) {
                Ok(Parsed::Partial) => prop_assert_eq!(buf.len(), before),
                Ok(Parsed::Final(_) | Parsed::Interim) => prop_assert!(buf.len() < before),
                Err(_) => {}
            }
        }
    }

    fn final_head(wire: &[u8], to_head: bool) -> Result<(Head, BytesMut), UpstreamError> {
        let asked = if to_head {
            Asked::HeadOnly
        } else {
            Asked::Response
        };
        answer_to(wire, asked)
    }

    fn answer_to(wire: &[u8], asked: Asked) -> Result<(Head, BytesMut), UpstreamError> {
        let mut buf = BytesMut::from(wire);
        loop {
            match parse(&mut buf, asked)? {
                Parsed::Final(head) => return Ok((head, buf)),
                Parsed::Interim => {}
                Parsed::Partial => return Err(UpstreamError::Closed),
            }
        }
    }

    #[test]
    fn a_head_is_consumed_and_its_fields_kept() -> Result<(), UpstreamError> {
        let (head, rest) = final_head(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello",
            false,
        )?;
        assert_eq!(head.response.status(), StatusCode::CREATED);
        let values: Vec<_> = head.response.headers().get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
        assert_eq!((head.framing, head.keep_alive), (Framing::Length(5), true));
        assert_eq!(&rest[..], b"hello");
        Ok(())
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_read_then_left_out()
    -> Result<(), UpstreamError> {
        let (head, _) = final_head(
            b"HTTP/1.1 200 OK\r\nConnection: close, X-Private\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\nX-Kept: 2\r\n\r\n",
            false,
        )?;
        // Read: they frame the body and end the connection.
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, false));
        let names: Vec<&str> = head.response.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
        Ok(())
    }

    #[test]
    fn framing_follows_rfc_9112() -> Result<(), UpstreamError> {
        let cases: [(&[u8], bool, Framing, bool); 6] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
                true,
                Framing::Empty,
                true,
            ),
            (
                b"HTTP/1.1 204 No Content\r\n\r\n",
                false,
                Framing::Empty,
                true,
            ),
            (
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                false,
                Framing::Empty,
                true,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n",
                false,
                Framing::Chunked,
                true,
            ),
            (
                b"HTTP/1.1 200 OK\r\n\r\n",
                false,
                Framing::UntilClose,
                false,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\nConnection: close\r\n\r\n",
                false,
                Framing::Length(4),
                false,
            ),
        ];
        for (wire, to_head, framing, keep_alive) in cases {
            let (head, _) = final_head(wire, to_head)?;
            let text = String::from_utf8_lossy(wire);
            assert_eq!(
                (head.framing, head.keep_alive),
                (framing, keep_alive),
                "{text}"
            );
        }
        Ok(())
    }

    #[test]
    fn a_length_given_more_than_once_reaches_the_client_as_one_value() -> Result<(), UpstreamError>
    {
        let lists: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5,5 , 5\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 05, 5\r\n\r\nhello",
        ];
        for wire in lists {
            let text = String::from_utf8_lossy(wire);
            let (head, rest) = final_head(wire, false)?;
            assert_eq!(head.framing, Framing::Length(5), "{text}");
            let lengths: Vec<_> = head
                .response
                .headers()
                .get_all(header::CONTENT_LENGTH)
                .iter()
                .collect();
            assert_eq!(lengths, ["5"], "{text}");
            assert_eq!(&rest[..], b"hello", "{text}");
        }
        // To a HEAD too, where the length frames nothing but is still the client's to read.
        let (head, _) = final_head(b"HTTP/1.1 200 OK\r\nContent-Length: 9, 9\r\n\r\n", true)?;
        assert_eq!(head.framing, Framing::Empty);
        assert_eq!(head.response.headers()[header::CONTENT_LENGTH], "9");
        // A single value is passed on as it came.
        let (head, _) = final_head(b"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n", false)?;
        assert_eq!(head.framing, Framing::Length(7));
        assert_eq!(head.response.headers()[header::CONTENT_LENGTH], "007");
        Ok(())
    }

    #[test]
    fn http_1_0_keeps_the_connection_only_when_asked() -> Result<(), UpstreamError> {
        let (head, _) = final_head(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false)?;
        assert!(!head.keep_alive);
        let (head, _) = final_head(
            b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: Keep-Alive\r\n\r\n",
            false,
        )?;
        assert!(head.keep_alive);
        Ok(())
    }

    #[test]
    fn bad_heads_are_errors_that_say_what() {
        let cases: [(&[u8], &str); 10] = [
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", "both"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "other than chunked"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "other than chunked"),
            (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
                "disagree",
            ),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "disagree"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n",
                "not a number",
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
                "switched protocols",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                "64 bits",
            ),
        ];
        for (wire, says) in cases {
            let error = final_head(wire, false).map(|_| ()).err();
            let text = error.map(|error| error.to_string()).unwrap_or_default();
            assert!(
                text.contains(says),
                "{}: {text}",
                String::from_utf8_lossy(wire)
            );
        }
        let mut endless = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
        endless.resize(MAX_HEAD, b'a');
        assert!(matches!(
            parse(&mut endless, Asked::Response),
            Err(UpstreamError::HeadTooLarge(_))
        ));
    }

    #[test]
    fn a_switch_to_websocket_ends_the_exchange_and_says_so_to_the_client()
    -> Result<(), UpstreamError> {
        let wire = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi";
        let (head, rest) = answer_to(wire, Asked::WebSocket)?;
        assert!(head.switched);
        assert!(!head.keep_alive);
        assert_eq!(head.framing, Framing::Empty);
        let headers = head.response.headers();
        assert_eq!(headers["upgrade"], "websocket");
        assert_eq!(headers["connection"], "upgrade");
        assert!(headers.contains_key("sec-websocket-accept"));
        // The tunnel's first bytes, sent with the head, stay for the client.
        assert_eq!(&rest[..], b"\x81\x02hi");
        // A request that asked for a switch may get an ordinary answer.
        let (refused, _) = answer_to(
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            Asked::WebSocket,
        )?;
        assert!(!refused.switched);
        assert_eq!(refused.framing, Framing::Length(0));
        // A switch to another protocol, or to none named, is refused: a tunnel the client did
        // not ask for could carry requests no limit sees.
        for wire in [
            &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"[..],
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
        ] {
            let error = answer_to(wire, Asked::WebSocket).map(|_| ()).err();
            assert!(
                matches!(error, Some(UpstreamError::InvalidResponse(_))),
                "{error:?}"
            );
        }
        // A length on a 101 is not passed on (a 1xx has no body).
        let (head, _) = answer_to(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n",
            Asked::WebSocket,
        )?;
        assert!(!head.response.headers().contains_key("content-length"));
        Ok(())
    }
}
