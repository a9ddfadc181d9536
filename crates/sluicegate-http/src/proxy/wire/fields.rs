//! A parsed head's fields as a header map, and the fields that frame its body read on the way.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::proxy::wire::Malformed;

/// What the fields that frame a body say (RFC 9112 section 6.3).
#[derive(Debug, Default)]
pub(crate) struct FramingFields {
    /// Whether a Transfer-Encoding came, and whether it is one field saying `chunked` alone.
    pub(crate) transfer_encoding: Option<bool>,
    pub(crate) content_length: Option<u64>,
    /// `Connection: close` came.
    pub(crate) close: bool,
    /// `Connection: keep-alive` came.
    pub(crate) keep_alive: bool,
    /// How many `Host` fields came.
    pub(crate) hosts: u8,
    /// `Expect: 100-continue` came.
    pub(crate) expect_continue: bool,
}

impl FramingFields {
    fn read(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), Malformed> {
        if name == header::TRANSFER_ENCODING {
            let alone = self.transfer_encoding.is_none();
            self.transfer_encoding =
                Some(alone && value.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == header::CONTENT_LENGTH {
            for item in value.split(|&b| b == b',') {
                let item = item.trim_ascii();
                if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
                    return Err(Malformed("a Content-Length is not a number"));
                }
                let length = std::str::from_utf8(item)
                    .ok()
                    .and_then(|digits| digits.parse::<u64>().ok())
                    .ok_or(Malformed("a Content-Length does not fit in 64 bits"))?;
                if self.content_length.is_some_and(|other| other != length) {
                    return Err(Malformed("Content-Length fields disagree"));
                }
                self.content_length = Some(length);
            }
        } else if name == header::CONNECTION {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name == header::HOST {
            self.hosts = self.hosts.saturating_add(1);
        } else if name == header::EXPECT {
            self.expect_continue |= value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
        Ok(())
    }
}

/// Where each field's value lies in its head, read before the head is split off its buffer.
#[derive(Debug, Default)]
pub(crate) struct FieldSpans(SmallVec<[(HeaderName, usize, usize); 24]>);

/// Reads the fields httparse parsed from `head`, and what of them frames the body.
pub(crate) fn read_fields(
    head: &[u8],
    fields: &[httparse::Header<'_>],
) -> Result<(FieldSpans, FramingFields), Malformed> {
    let base = head.as_ptr() as usize;
    let mut spans = FieldSpans::default();
    let mut framing = FramingFields::default();
    for field in fields {
        let name =
            HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Malformed("a field name"))?;
        framing.read(&name, field.value)?;
        let start = field.value.as_ptr() as usize - base;
        spans.0.push((name, start, start + field.value.len()));
    }
    Ok((spans, framing))
}

impl FieldSpans {
    /// The fields as a header map, each value sharing the bytes of `head` (frozen once parsed)
    /// instead of copying them.
    pub(crate) fn into_map(mut self, head: &Bytes) -> Result<HeaderMap, Malformed> {
        let mut headers = HeaderMap::with_capacity(self.0.len());
        for (name, start, end) in self.0.drain(..) {
            let value = HeaderValue::from_maybe_shared(head.slice(start..end))
                .map_err(|_| Malformed("a field value"))?;
            headers.append(name, value);
        }
        Ok(headers)
    }
}
