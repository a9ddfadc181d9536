//! A client's request body as the proxy hands it on: read off an HTTP/1.1 connection by the
//! proxy's own server, or off an h2 stream by hyper's.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::proxy::h1::H1Body;

/// A client's request body.
#[derive(Debug)]
pub enum ClientBody {
    /// The request has none.
    Empty,
    /// Read by the proxy's HTTP/1.1 server from the client's connection.
    H1(H1Body),
    /// An h2 stream's, read by hyper.
    H2(Incoming),
}

/// Why a client's request body could not be read to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientBodyError {
    /// Reading from the client's connection failed.
    #[error("reading the request body failed: {0}")]
    Io(#[from] io::Error),
    /// The client closed its connection before the body's end.
    #[error("the client closed the connection before the request body's end")]
    Closed,
    /// The body's chunked coding is broken (what is wrong, in words).
    #[error("invalid request body: {0}")]
    Malformed(&'static str),
    /// The h2 stream failed.
    #[error(transparent)]
    H2(#[from] hyper::Error),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::H1(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|data| data.map(Frame::data))),
            ClientBody::H2(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(ClientBodyError::H2))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::H1(body) => body.is_end_stream(),
            ClientBody::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::H1(body) => body.size_hint(),
            ClientBody::H2(body) => body.size_hint(),
        }
    }
}
