//! A request as the upstream receives it: its head written out once, its body streamed with
//! the framing the head announced.

use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header;
use http::request::Parts;
use http_body::Body;
use hyper::body::Incoming;
use tokio::io::AsyncWrite;

use crate::proxy::upstream::error::UpstreamError;

/// Writes the request line and fields (`parts` already rewritten for the upstream: origin-form
/// URI, hop-by-hop fields dropped) and the framing of `body`, and returns the body to stream
/// after it, if it has one.
pub(crate) fn write_head(out: &mut Vec<u8>, parts: &Parts, body: Incoming) -> Option<Outgoing> {
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_length = false;
    for (name, value) in &parts.headers {
        has_length |= name == header::CONTENT_LENGTH;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // The server has checked a client's Content-Length against the body it frames (h1 and h2
    // alike), so a Content-Length that came with the request is passed on as it is.
    let chunked = if body.is_end_stream() {
        // `Content-Length: 0`, or no body at all.
        out.extend_from_slice(b"\r\n");
        return None;
    } else if has_length {
        false
    } else if let Some(length) = body.size_hint().exact() {
        let _ = write!(out, "content-length: {length}\r\n");
        false
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        true
    };
    out.extend_from_slice(b"\r\n");
    Some(Outgoing {
        body,
        chunked,
        pending: Bytes::new(),
        started: false,
        ended: false,
        failed: false,
    })
}

/// A request body on its way to the upstream.
#[derive(Debug)]
pub(crate) struct Outgoing {
    body: Incoming,
    chunked: bool,
    /// Bytes taken from the body, framed, and not yet written.
    pending: Bytes,
    started: bool,
    ended: bool,
    /// Writing failed: the connection cannot take the rest.
    failed: bool,
}

impl Outgoing {
    /// Whether any of the body has been read from the client (a request whose body has not
    /// can still be sent on another connection).
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// Whether all of the body has been written.
    pub(crate) fn is_sent(&self) -> bool {
        self.ended && self.pending.is_empty() && !self.failed
    }

    /// Whether nothing more will be written: all of it was, or writing failed.
    pub(crate) fn is_done(&self) -> bool {
        self.failed || self.is_sent()
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
                continue;
            }
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
            self.started = true;
            match frame {
                Some(Ok(frame)) => {
                    // Trailers are dropped: few upstreams read them, and a client that sends
                    // them to a proxy cannot count on their passing.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            self.pending = self.frame(data);
                        }
                    }
                }
                Some(Err(error)) => return Poll::Ready(Err(UpstreamError::RequestBody(error))),
                None => {
                    self.ended = true;
                    if self.chunked {
                        self.pending = Bytes::from_static(b"0\r\n\r\n");
                    }
                }
            }
        }
    }

    fn frame(&self, data: Bytes) -> Bytes {
        if !self.chunked {
            return data;
        }
        let mut framed = BytesMut::with_capacity(data.len() + 20);
        let _ = write!((&mut framed).writer(), "{:x}\r\n", data.len());
        framed.put_slice(&data);
        framed.put_slice(b"\r\n");
        framed.freeze()
    }
}
