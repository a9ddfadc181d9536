//! A response as the client receives it: the head written out once with the framing its body
//! needs, the body's data framed as it comes.

use std::cell::RefCell;
use std::io::Write as _;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::response::Parts;
use http::{StatusCode, Version};
use http_body::SizeHint;

/// How the body written after a head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// It has none (an answer to `HEAD`, a 204, a 304).
    Empty,
    /// After this many more bytes.
    Length(u64),
    /// With the chunked coding's last chunk.
    Chunked,
    /// When the connection closes (an HTTP/1.0 client, a body of unknown length).
    UntilClose,
}

/// What the client asked for that shapes the answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    pub(crate) version: Version,
    pub(crate) to_head: bool,
}

/// Writes the status line and fields of `parts` (transfer fields of the proxy's own added:
/// framing, `Connection`, and `Date` when absent) and returns how the body is framed and
/// whether the connection stays open after it.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    parts: &Parts,
    body: &SizeHint,
    asked: Asked,
    mut keep_alive: bool,
) -> (Framing, bool) {
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut length = None;
    let mut dated = false;
    for (name, value) in &parts.headers {
        if name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            // Hop-by-hop: the proxy frames the body and says what becomes of the connection.
            continue;
        }
        if name == header::CONTENT_LENGTH {
            match value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
            {
                Some(value) if length.is_none() => length = Some(value),
                // A second or unreadable one: the body's own length decides below.
                _ => continue,
            }
        }
        dated |= name == header::DATE;
        put_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !dated {
        DATE.with_borrow_mut(|date| put_field(out, b"date", date.now().as_bytes()));
    }
    let no_body = status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || status.is_informational();
    let framing = if no_body {
        Framing::Empty
    } else if let Some(length) = length {
        Framing::Length(length)
    } else if let Some(exact) = body.exact() {
        let _ = write!(out, "content-length: {exact}\r\n");
        Framing::Length(exact)
    } else if asked.to_head {
        Framing::Empty
    } else if asked.version == Version::HTTP_11 {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Framing::Chunked
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if asked.version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    let framing = if asked.to_head {
        Framing::Empty
    } else {
        framing
    };
    (framing, keep_alive)
}

fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The body's data as it goes on the wire.
#[derive(Debug)]
pub(crate) struct Encoder {
    framing: Framing,
}

/// The body did not match the length its head announced: the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LengthMismatch;

impl Encoder {
    pub(crate) fn new(framing: Framing) -> Encoder {
        Encoder { framing }
    }

    /// Appends `data` to `out` as framed; data past an announced length is an error.
    pub(crate) fn data(&mut self, out: &mut Vec<u8>, data: &Bytes) -> Result<(), LengthMismatch> {
        match &mut self.framing {
            Framing::Empty => {}
            Framing::Length(left) => {
                if data.len() as u64 > *left {
                    return Err(LengthMismatch);
                }
                *left -= data.len() as u64;
                out.extend_from_slice(data);
            }
            Framing::Chunked => {
                if !data.is_empty() {
                    let _ = write!(out, "{:x}\r\n", data.len());
                    out.extend_from_slice(data);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Framing::UntilClose => out.extend_from_slice(data),
        }
        Ok(())
    }

    /// Appends the body's end; an announced length not reached is an error.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>) -> Result<(), LengthMismatch> {
        match self.framing {
            Framing::Length(left) if left > 0 => Err(LengthMismatch),
            Framing::Chunked => {
                out.extend_from_slice(b"0\r\n\r\n");
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

thread_local! {
    /// The `Date` of this second, formatted once per second and thread.
    static DATE: RefCell<CachedDate> = const { RefCell::new(CachedDate { second: 0, text: None }) };
}

struct CachedDate {
    second: u64,
    text: Option<HeaderValue>,
}

impl CachedDate {
    fn now(&mut self) -> &HeaderValue {
        let now = SystemTime::now();
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        if self.second != second || self.text.is_none() {
            self.second = second;
            self.text = HeaderValue::from_str(&httpdate::fmt_http_date(now)).ok();
        }
        self.text.get_or_insert(HeaderValue::from_static(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Response;

    fn head_of(
        response: Response<()>,
        body: SizeHint,
        asked: Asked,
        keep: bool,
    ) -> (String, Framing, bool) {
        let (parts, ()) = response.into_parts();
        let mut out = Vec::new();
        let (framing, keep) = write_head(&mut out, &parts, &body, asked, keep);
        (String::from_utf8_lossy(&out).into_owned(), framing, keep)
    }

    const H11: Asked = Asked {
        version: Version::HTTP_11,
        to_head: false,
    };
    const H10: Asked = Asked {
        version: Version::HTTP_10,
        to_head: false,
    };

    #[test]
    fn framing_follows_what_the_body_and_the_client_allow() {
        let (text, framing, keep) = head_of(Response::new(()), SizeHint::with_exact(3), H11, true);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("content-length: 3\r\n"));
        assert!(text.contains("date: ") && text.ends_with("\r\n\r\n"));
        assert_eq!((framing, keep), (Framing::Length(3), true));

        let (text, framing, _) = head_of(Response::new(()), SizeHint::default(), H11, true);
        assert!(text.contains("transfer-encoding: chunked\r\n"));
        assert_eq!(framing, Framing::Chunked);

        let (text, framing, keep) = head_of(Response::new(()), SizeHint::default(), H10, true);
        assert!(text.contains("connection: close\r\n") && !text.contains("chunked"));
        assert_eq!((framing, keep), (Framing::UntilClose, false));

        let (text, _, keep) = head_of(Response::new(()), SizeHint::with_exact(0), H10, true);
        assert!(text.contains("connection: keep-alive\r\n") && keep);

        let mut response = Response::new(());
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("10"));
        response.headers_mut().insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        response
            .headers_mut()
            .insert(header::DATE, HeaderValue::from_static("then"));
        let asked = Asked {
            version: Version::HTTP_11,
            to_head: true,
        };
        let (text, framing, _) = head_of(response, SizeHint::default(), asked, true);
        assert!(text.contains("content-length: 10\r\n") && !text.contains("transfer-encoding"));
        assert!(text.contains("date: then\r\n") && text.matches("date").count() == 1);
        assert_eq!(framing, Framing::Empty);

        let mut response = Response::new(());
        *response.status_mut() = StatusCode::NO_CONTENT;
        let (_, framing, _) = head_of(response, SizeHint::default(), H11, true);
        assert_eq!(framing, Framing::Empty);
    }

    #[test]
    fn a_body_is_framed_and_held_to_its_length() {
        let mut out = Vec::new();
        let mut chunked = Encoder::new(Framing::Chunked);
        assert_eq!(
            chunked.data(&mut out, &Bytes::from_static(b"hello world, hi")),
            Ok(())
        );
        assert_eq!(chunked.end(&mut out), Ok(()));
        assert_eq!(out, b"f\r\nhello world, hi\r\n0\r\n\r\n");

        let mut length = Encoder::new(Framing::Length(3));
        assert_eq!(length.data(&mut out, &Bytes::from_static(b"ab")), Ok(()));
        assert_eq!(length.end(&mut Vec::new()), Err(LengthMismatch));
        assert_eq!(
            length.data(&mut out, &Bytes::from_static(b"cd")),
            Err(LengthMismatch)
        );
    }
}
