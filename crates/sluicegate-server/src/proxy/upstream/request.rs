//! A request as the upstream receives it: its head written out once, its body streamed with
//! the framing the head announced.

use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Method, Version};
use http_body::Body;
use hyper::body::Incoming;
use smallvec::SmallVec;
use tokio::io::AsyncWrite;

use crate::proxy::forwarding::{
    ForwardedClient, ForwardingFields, X_FORWARDED_FOR, connection_named, is_hop_by_hop,
    write_forwarding_fields,
};
use crate::proxy::upstream::error::UpstreamError;

/// Writes the head of `parts` as the upstream receives it ([`write_fields`]) and the framing
/// of `body`, and returns the body to send after it, if it has one: one that fails once
/// more than `bounds.max_size` bytes of it came (a body whose length was announced has been
/// checked against it before any limit: `Pools::refuses`).
///
/// A body of unknown length (chunked, or h2 without `content-length`) is read first up to
/// `bounds.buffer_size` ([`Outgoing::is_framing_open`]): its framing and the blank line are
/// written by [`finish_head`] once that tells a short body from a long one.
///
/// Also returns whether the request asks to switch to WebSocket ([`Fields::websocket`]).
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    parts: &Parts,
    body: Incoming,
    forwarding: (&ForwardedClient, ForwardingFields),
    fallback_host: &str,
    bounds: BodyBounds,
) -> (Option<Outgoing>, bool) {
    let Fields {
        has_length,
        websocket,
    } = write_fields(out, parts, forwarding, fallback_host, !body.is_end_stream());
    // The server has checked a client's Content-Length against the body it frames (h1 and h2
    // alike), so a Content-Length that came with the request is passed on as it is.
    let framing = if body.is_end_stream() {
        // `Content-Length: 0`, or no body at all.
        out.extend_from_slice(b"\r\n");
        return (None, websocket);
    } else if has_length {
        Framing::Length
    } else if let Some(length) = body.size_hint().exact() {
        let _ = write!(out, "content-length: {length}\r\n");
        Framing::Length
    } else if bounds.buffer_size > 0 {
        Framing::Open
    } else {
        Framing::Chunked
    };
    if framing != Framing::Open {
        finish_fields(out, framing);
    }
    let outgoing = Outgoing {
        body,
        framing,
        pending: Bytes::new(),
        started: false,
        ended: false,
        failed: false,
        progress: 0,
        max_body_size: bounds.max_size,
        taken: 0,
        whole: None,
        length_when_empty: !matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
        ),
    };
    (Some(outgoing), websocket)
}

/// Takes `read`, what [`Written::read_first`](super::pool::Written) read of `body` before
/// its request is sent, and ends a head whose framing [`write_head`] left open now that
/// `read` tells it: a body that ended within it is sent with its length (an empty one with
/// none at all for a method that gives content no meaning), a longer one chunked, `read`
/// first. `None`: the whole body goes with the head.
pub(crate) fn finish_head(
    out: &mut Vec<u8>,
    mut body: Outgoing,
    read: ReadFirst,
) -> Option<Outgoing> {
    let open = body.framing == Framing::Open;
    match read {
        ReadFirst::Whole(whole) => {
            if open {
                if whole.is_empty() {
                    // A method whose content means something (a `POST`) says it has none,
                    // as nginx sends it; a `GET` says nothing.
                    if body.length_when_empty {
                        out.extend_from_slice(b"content-length: 0\r\n");
                    }
                    out.extend_from_slice(b"\r\n");
                    return None;
                }
                let _ = write!(out, "content-length: {}\r\n", whole.len());
                body.framing = Framing::Length;
                finish_fields(out, Framing::Length);
            }
            body.keep_whole(whole);
        }
        ReadFirst::Start(start) => {
            if open {
                body.framing = Framing::Chunked;
                finish_fields(out, Framing::Chunked);
            }
            body.resume_after(start);
        }
    }
    Some(body)
}

/// The framing field a body of unknown length needs, if any, and the blank line.
fn finish_fields(out: &mut Vec<u8>, framing: Framing) {
    if framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How a request body is framed for the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// By its `Content-Length`, announced or written once the body was read whole.
    Length,
    /// Chunked: its length is not known.
    Chunked,
    /// Not decided yet: the body is read first, up to the buffer size ([`finish_head`]).
    Open,
}

/// What was read of a body before its request is sent.
#[derive(Debug)]
pub(crate) enum ReadFirst {
    /// The whole body: it ended within what may be read first.
    Whole(Bytes),
    /// Its start: it goes on past what may be read first.
    Start(Bytes),
}

/// What [`write_fields`] saw on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    /// A `Content-Length` was among the fields.
    has_length: bool,
    /// The request asks to switch to WebSocket (RFC 6455 section 4.1: an HTTP/1.1 `GET` with
    /// `Upgrade: websocket` and `Connection: upgrade`, and no body): its `Upgrade` and
    /// `Connection: upgrade` were written. Other switches (`h2c`) are not asked of the
    /// upstream: a tunnel to it would carry requests no limit sees. Nor is a switch with a
    /// body, which would still be on its way when the tunnel opened.
    websocket: bool,
}

/// Writes the request line and fields of `parts` as the upstream receives them, all but the
/// body's framing and the blank line.
///
/// On the way: the target in origin form (the path and query alone, whatever the URI holds:
/// the connection is to the upstream already); hop-by-hop fields, those `Connection` names,
/// and `Expect`, left out; a `Host` from the URI (h2 names its host there alone) or `fallback_host`
/// (HTTP/1.0 may name none) when the request has no `Host`; the connection's client
/// appended to `X-Forwarded-For` and `Forwarded`, or those of them `forwarding` names.
/// `has_body`: the request has a body (not an empty one).
fn write_fields(
    out: &mut Vec<u8>,
    parts: &Parts,
    (client, appended): (&ForwardedClient, ForwardingFields),
    fallback_host: &str,
    has_body: bool,
) -> Fields {
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let named = connection_named(
        parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .map(HeaderValue::as_bytes),
        |token| std::str::from_utf8(token).is_ok_and(|token| parts.headers.contains_key(token)),
    );
    let mut has_length = false;
    let mut host = None;
    let mut xff: SmallVec<[&HeaderValue; 2]> = SmallVec::new();
    let mut forwarded: SmallVec<[&HeaderValue; 2]> = SmallVec::new();
    let mut upgrade = None;
    let mut connection_upgrade = false;
    for (name, value) in &parts.headers {
        // `Expect: 100-continue` is the proxy's to answer (hyper does, when the body is first
        // read), not the upstream's: the body goes on without waiting for the upstream's
        // `100`, so the field would only earn an interim answer to skip. nginx drops it too.
        if is_hop_by_hop(name) || named.contains(name) || name == header::EXPECT {
            if name == header::UPGRADE {
                upgrade = Some(value);
            } else if name == header::CONNECTION {
                connection_upgrade |= value
                    .as_bytes()
                    .split(|&b| b == b',')
                    .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
            }
            continue;
        }
        if name == header::HOST {
            host.get_or_insert(value.as_bytes());
        } else if name == X_FORWARDED_FOR {
            xff.push(value);
            continue;
        } else if name == header::FORWARDED {
            forwarded.push(value);
            continue;
        }
        has_length |= name == header::CONTENT_LENGTH;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let named_host = host.or_else(|| parts.uri.authority().map(|a| a.as_str().as_bytes()));
    if host.is_none() {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(named_host.unwrap_or(fallback_host.as_bytes()));
        out.extend_from_slice(b"\r\n");
    }
    write_forwarding_fields(out, client, appended, &xff, &forwarded, named_host);
    let websocket = connection_upgrade
        && !has_body
        && parts.method == Method::GET
        && parts.version == Version::HTTP_11
        && upgrade.is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if let Some(upgrade) = upgrade.filter(|_| websocket) {
        out.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
        out.extend_from_slice(upgrade.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    Fields {
        has_length,
        websocket,
    }
}

/// How the proxy takes request bodies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyBounds {
    /// The most bytes of a body passed on (none: no bound).
    pub(crate) max_size: Option<u64>,
    /// A body whose announced length is at most this (and not zero) is read whole from the
    /// client before the request goes to the upstream ([`Outgoing::keep_whole`]); one of
    /// unknown length is read first up to this, and sent with its length if it ended within
    /// it ([`finish_head`]). Zero: every body is streamed as it comes.
    pub(crate) buffer_size: u64,
}

/// Where a request body being sent is, as its waits see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyState {
    /// A count that changes whenever bytes come from the client or go to the upstream.
    pub(crate) progress: u64,
    /// Whether the body can go on only when the client sends more of it.
    pub(crate) waits_on_client: bool,
}

/// A request body on its way to the upstream.
#[derive(Debug)]
pub(crate) struct Outgoing {
    body: Incoming,
    framing: Framing,
    /// Bytes taken from the body, framed, and not yet written.
    pending: Bytes,
    started: bool,
    ended: bool,
    /// Writing failed: the connection cannot take the rest.
    failed: bool,
    /// Counts every piece of data taken from the client (not an empty frame, nor trailers:
    /// bytes of the body) and every write to the upstream, and the body's end, for the waits
    /// between them ([`SendWait`](super::send_wait::SendWait)).
    progress: u64,
    /// How many bytes of the body the proxy takes (none: no bound).
    max_body_size: Option<u64>,
    /// How many bytes of the body came so far.
    taken: u64,
    /// The whole body, read before the request was sent, kept so that it can be sent again.
    whole: Option<Bytes>,
    /// Whether the request's method gives content a meaning, so that a body of unknown
    /// length found empty is sent as `Content-Length: 0` rather than without framing.
    length_when_empty: bool,
}

impl Outgoing {
    /// The body's length, if the client announced it (`Content-Length`) and none of it has
    /// been read.
    pub(crate) fn announced_length(&self) -> Option<u64> {
        self.body.size_hint().exact().filter(|_| !self.started)
    }

    /// Makes the body ready to be sent again from its start, on another connection, if it can
    /// be: none of it was read from the client yet, or all of it was and is kept.
    pub(crate) fn rewind(&mut self) -> bool {
        match &self.whole {
            Some(whole) => {
                self.pending = whole.clone();
                self.failed = false;
                true
            }
            None => !self.started,
        }
    }

    /// Whether the body's framing waits for it to be read first ([`finish_head`]).
    pub(crate) fn is_framing_open(&self) -> bool {
        self.framing == Framing::Open
    }

    /// Takes `whole`, every byte of the body (read with [`Outgoing::poll_next_data`] to its
    /// end), to be sent as it is: its length is in the head, so it is not chunked.
    fn keep_whole(&mut self, whole: Bytes) {
        self.pending = whole.clone();
        self.whole = Some(whole);
        self.ended = true;
    }

    /// Takes `start`, the bytes read so far with [`Outgoing::poll_next_data`], to be sent
    /// first, then the rest as it comes.
    fn resume_after(&mut self, start: Bytes) {
        self.pending = self.frame(start);
    }

    /// Whether all of the body has been written.
    pub(crate) fn is_sent(&self) -> bool {
        self.ended && self.pending.is_empty() && !self.failed
    }

    /// Where the body is, as the waits between its pieces see it.
    pub(crate) fn state(&self) -> BodyState {
        BodyState {
            progress: self.progress,
            waits_on_client: !self.failed && !self.ended && self.pending.is_empty(),
        }
    }

    /// Whether nothing more will be written: all of it was, or writing failed.
    pub(crate) fn is_done(&self) -> bool {
        self.failed || self.is_sent()
    }

    /// The next bytes of the body from the client (none: it has ended), counted against the
    /// bound on bodies.
    pub(crate) fn poll_next_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, UpstreamError>> {
        loop {
            let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
            self.started = true;
            match frame {
                None => return Poll::Ready(Ok(None)),
                Some(Err(error)) => return Poll::Ready(Err(UpstreamError::RequestBody(error))),
                Some(Ok(frame)) => {
                    // Trailers are dropped: few upstreams read them, and a client that sends
                    // them to a proxy cannot count on their passing.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            self.take(data.len())?;
                            return Poll::Ready(Ok(Some(data)));
                        }
                    }
                }
            }
        }
    }

    /// Writes as much of the body as the client has sent and the connection takes; ready once
    /// all of it is written. After an error, nothing more is written.
    pub(crate) fn poll_send<W: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), UpstreamError>> {
        if self.failed {
            return Poll::Ready(Err(UpstreamError::Closed));
        }
        let sent = self.poll_send_more(stream, cx);
        if let Poll::Ready(Err(_)) = sent {
            self.failed = true;
        }
        sent
    }

    fn poll_send_more<W: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), UpstreamError>> {
        loop {
            if !self.pending.is_empty() {
                let written = ready!(Pin::new(&mut *stream).poll_write(cx, &self.pending))?;
                if written == 0 {
                    return Poll::Ready(Err(UpstreamError::Closed));
                }
                self.pending.advance(written);
                self.progress += 1;
                continue;
            }
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(self.poll_next_data(cx))? {
                Some(data) => {
                    self.progress += 1;
                    self.pending = self.frame(data);
                }
                None => {
                    self.progress += 1;
                    self.ended = true;
                    if self.framing == Framing::Chunked {
                        self.pending = Bytes::from_static(b"0\r\n\r\n");
                    }
                }
            }
        }
    }

    /// Counts `length` more bytes of the body, against the bound on bodies.
    fn take(&mut self, length: usize) -> Result<(), UpstreamError> {
        self.taken = self.taken.saturating_add(length as u64);
        match self.max_body_size {
            Some(max) if self.taken > max => Err(UpstreamError::RequestBodyTooLarge(max)),
            _ => Ok(()),
        }
    }

    fn frame(&self, data: Bytes) -> Bytes {
        if self.framing != Framing::Chunked || data.is_empty() {
            return data;
        }
        let mut framed = BytesMut::with_capacity(data.len() + 20);
        let _ = write!((&mut framed).writer(), "{:x}\r\n", data.len());
        framed.put_slice(&data);
        framed.put_slice(b"\r\n");
        framed.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head `request` is written as, with the client 192.0.2.1 (and no body).
    fn written(request: http::request::Builder) -> (String, Fields) {
        written_with(request, false)
    }

    /// The head `request` is written as, with the client 192.0.2.1, `has_body` saying whether
    /// a body follows.
    fn written_with(request: http::request::Builder, has_body: bool) -> (String, Fields) {
        let (parts, ()) = request.body(()).expect("request").into_parts();
        let client = ForwardedClient::new("192.0.2.1".parse().expect("ip"));
        let mut out = Vec::new();
        let forwarding = (&client, ForwardingFields::Both);
        let fields = write_fields(&mut out, &parts, forwarding, "upstream:8080", has_body);
        (String::from_utf8_lossy(&out).into_owned(), fields)
    }

    #[test]
    fn hop_by_hop_fields_those_connection_names_and_expect_are_left_out() {
        let (head, fields) = written(
            http::Request::post("http://app.example/a?b=1")
                .header("host", "app.example")
                .header("connection", "keep-alive, X-Private ,close")
                .header("keep-alive", "timeout=5")
                .header("x-private", "1")
                .header("upgrade", "h2c")
                .header("te", "trailers")
                .header("transfer-encoding", "chunked")
                .header("accept", "*/*")
                .header("expect", "100-continue")
                .header("content-length", "3"),
        );
        assert_eq!(
            head,
            "POST /a?b=1 HTTP/1.1\r\nhost: app.example\r\naccept: */*\r\ncontent-length: 3\r\n\
             x-forwarded-for: 192.0.2.1\r\n\
             forwarded: for=192.0.2.1;host=\"app.example\";proto=http\r\n"
        );
        assert!(fields.has_length && !fields.websocket);
    }

    #[test]
    fn the_forwarding_lists_that_came_are_extended_as_one_field_each() {
        let (head, fields) = written(
            http::Request::get("/")
                .header("host", "a")
                .header("x-forwarded-for", "10.0.0.1")
                .header("forwarded", "for=10.0.0.1")
                .header("x-forwarded-for", "10.0.0.2"),
        );
        assert_eq!(
            head,
            "GET / HTTP/1.1\r\nhost: a\r\nx-forwarded-for: 10.0.0.1, 10.0.0.2, 192.0.2.1\r\n\
             forwarded: for=10.0.0.1, for=192.0.2.1;host=\"a\";proto=http\r\n"
        );
        assert!(!fields.has_length);
    }

    #[test]
    fn a_request_without_host_gets_the_uris_or_the_upstreams() {
        // h2: the host is in the URI alone, and `Forwarded` names it.
        let (head, _) = written(http::Request::get("http://h2.example:8443/x"));
        assert!(
            head.starts_with("GET /x HTTP/1.1\r\nhost: h2.example:8443\r\n"),
            "{head}"
        );
        assert!(head.contains(";host=\"h2.example:8443\";"), "{head}");
        // HTTP/1.0 without `Host`: the upstream's, and `Forwarded` names none.
        let (head, _) = written(http::Request::get("/x").version(http::Version::HTTP_10));
        assert!(
            head.starts_with("GET /x HTTP/1.1\r\nhost: upstream:8080\r\n"),
            "{head}"
        );
        assert!(
            head.ends_with("forwarded: for=192.0.2.1;proto=http\r\n"),
            "{head}"
        );
    }

    #[test]
    fn a_switch_to_websocket_is_asked_of_the_upstream_and_no_other() {
        let asking = || {
            http::Request::get("/chat")
                .header("host", "a")
                .header("connection", "keep-alive, Upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        };
        let (head, fields) = written(asking());
        assert!(fields.websocket);
        assert!(
            head.ends_with("connection: upgrade\r\nupgrade: websocket\r\n"),
            "{head}"
        );
        assert!(head.contains("sec-websocket-key: "), "{head}");
        // Not without `Connection: upgrade`, not h2c, not a POST, not HTTP/1.0.
        let not_asked = [
            http::Request::get("/").header("upgrade", "websocket"),
            http::Request::get("/")
                .header("connection", "upgrade")
                .header("upgrade", "h2c"),
            asking().method("POST"),
            asking().version(http::Version::HTTP_10),
        ];
        for request in not_asked {
            let (head, fields) = written(request);
            assert!(!fields.websocket, "{head}");
            assert!(!head.contains("upgrade"), "{head}");
        }
        // Not with a body: it goes on as a plain request.
        let (head, fields) = written_with(asking().header("content-length", "5"), true);
        assert!(!fields.websocket && fields.has_length, "{head}");
        assert!(!head.contains("upgrade"), "{head}");
    }
}
