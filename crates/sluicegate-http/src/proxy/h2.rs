//! Telling h2 (prior knowledge) from HTTP/1.1 by a connection's first bytes, and serving h2
//! with hyper.

use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::proxy::client_body::ClientBody;

/// What every h2 connection opens with (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads the connection's first bytes until they are h2's preface (`true`) or cannot become
/// it; what was read is in `read` either way. An error: the client closed or failed first.
pub(crate) async fn opens_with_preface(
    stream: &mut TcpStream,
    read: &mut BytesMut,
) -> io::Result<bool> {
    loop {
        let seen = read.len().min(PREFACE.len());
        if read[..seen] != PREFACE[..seen] {
            return Ok(false);
        }
        if seen == PREFACE.len() {
            return Ok(true);
        }
        if stream.read_buf(read).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// Serves an h2 connection (`read`: its first bytes, already read) until it ends, or
/// `closing` is cancelled and its streams in flight have been answered.
pub(crate) async fn serve<F, Fut, B>(
    stream: TcpStream,
    read: BytesMut,
    handle: F,
    closing: CancellationToken,
) where
    F: Fn(Request<ClientBody>) -> Fut + Send + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let answer = handle(request.map(ClientBody::H2));
        async move { Ok::<_, std::convert::Infallible>(answer.await) }
    });
    let io = TokioIo::new(Rewound {
        first: read.freeze(),
        stream,
    });
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(io, service);
    let mut connection = pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = closing.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// A connection whose first bytes were read to tell its protocol, read again first.
struct Rewound {
    first: Bytes,
    stream: TcpStream,
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.first.is_empty() {
            let take = self.first.len().min(buf.remaining());
            buf.put_slice(&self.first[..take]);
            self.first.advance(take);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
