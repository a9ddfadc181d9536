//! One client connection served over HTTP/1.1: each request's head read, the request handed to
//! the proxy's handler on this task, its response written, until either side closes.
//!
//! Hyper's server did this through a dispatcher generic enough for any service and body; a
//! proxy needs one shape of it, and the request costs about half as many instructions.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body::{Body, SizeHint};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::proxy::client_body::ClientBody;
use crate::proxy::h1::io::{BodyLeft, ClientIo, H1Body, SharedIo};
use crate::proxy::h1::request::{self, Refusal, RequestHead};
use crate::proxy::h1::response::{self, Asked, Encoder, Framing};

/// How much of a response is gathered before it is written, when more of it is ready.
const WRITE_AT: usize = 64 * 1024;
/// How long, and how much, a closing connection reads and drops of what the client still
/// sends.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// Serves `stream` (`read`: what has been read from it already) until the client closes it,
/// `closing` is cancelled (a request in flight is answered first), or no request head
/// arrives within `idle_timeout`.
pub(crate) async fn serve<F, Fut, B>(
    stream: TcpStream,
    read: BytesMut,
    mut handle: F,
    closing: CancellationToken,
    idle_timeout: Duration,
) where
    F: FnMut(Request<ClientBody>) -> Fut,
    Fut: Future<Output = Response<B>>,
    B: Body<Data = Bytes>,
{
    let io: SharedIo = Arc::new(Mutex::new(ClientIo::new(stream, read)));
    let mut closed = pin!(closing.clone().cancelled_owned());
    let mut timer = pin!(tokio::time::sleep(idle_timeout));
    let mut out = Vec::with_capacity(1024);
    // The client may still be sending what the proxy will not read.
    let mut unread = false;
    loop {
        let head = match next_head(&io, closed.as_mut(), timer.as_mut(), idle_timeout).await {
            Ok(head) => head,
            Err(Some(refusal)) => {
                let _ = refuse(&io, &mut out, refusal).await;
                unread = true;
                break;
            }
            Err(None) => break,
        };
        let RequestHead {
            parts,
            body,
            keep_alive,
            expect_continue,
        } = head;
        let asked = Asked {
            version: parts.version,
            to_head: parts.method == Method::HEAD,
        };
        let body = {
            let mut client = io.lock();
            client.body = body;
            if expect_continue {
                client.expect_continue();
            }
            match client.body {
                BodyLeft::Ended => ClientBody::Empty,
                _ => ClientBody::H1(H1Body::new(Arc::clone(&io))),
            }
        };
        // A request whose body the proxy may still read is not watched: two readers of one
        // socket would each take the other's wake-up.
        let watch = matches!(body, ClientBody::Empty);
        let answer = handle(Request::from_parts(parts, body));
        let mut answer = pin!(answer);
        let answered = poll_fn(|cx| match answer.as_mut().poll(cx) {
            Poll::Ready(response) => Poll::Ready(Some(response)),
            // The client went away: dropping the answer drops its permits and upstream request.
            Poll::Pending if watch => poll_client_gone(&io, cx).map(|()| None),
            Poll::Pending => Poll::Pending,
        })
        .await;
        let Some(response) = answered else {
            break;
        };
        let mut keep_alive = keep_alive && !closing.is_cancelled();
        {
            let mut client = io.lock();
            client.continue_left = 0;
            // A body still held (the rest of an upload a fast answer left) is read by its
            // holder; one nobody reads is skipped if the buffer holds all of it.
            if !matches!(client.body, BodyLeft::Ended) {
                if Arc::strong_count(&io) > 1 {
                    keep_alive = false;
                } else if !client.discard_buffered_body() {
                    keep_alive = false;
                    unread = true;
                }
            }
        }
        let (parts, body) = response.into_parts();
        let (framing, keep_alive) =
            response::write_head(&mut out, &parts, &body.size_hint(), asked, keep_alive);
        let written = write_body(&io, &mut out, framing, body, Arc::strong_count(&io) == 1).await;
        if written.is_err() || !keep_alive {
            break;
        }
    }
    let _ = poll_fn(|cx| io.lock().poll_shutdown(cx)).await;
    if unread {
        linger(&io).await;
    }
}

/// Reads and drops what the client still sends, for a little while, after the proxy's side is
/// shut: a socket closed with unread data is reset, and the reset can destroy the answer
/// before the client reads it (nginx's `lingering_close`).
async fn linger(io: &SharedIo) {
    let drained = async {
        let mut left = LINGER_BYTES;
        while left > 0 {
            let read = poll_fn(|cx| {
                let mut client = io.lock();
                client.read.clear();
                client.poll_fill(cx)
            })
            .await;
            match read {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drained).await;
}

/// Reads until the buffer holds a whole request head; `Err(None)`: the connection ends
/// without an answer (closed, timed out, the proxy closing), `Err(Some)`: with one.
async fn next_head(
    io: &SharedIo,
    mut closed: Pin<&mut tokio_util::sync::WaitForCancellationFutureOwned>,
    mut timer: Pin<&mut tokio::time::Sleep>,
    idle_timeout: Duration,
) -> Result<RequestHead, Option<Refusal>> {
    let mut deadline = None;
    loop {
        if let Some(head) = request::parse(&mut io.lock().read).map_err(Some)? {
            return Ok(head);
        }
        let read = poll_fn(|cx| {
            if let Poll::Ready(read) = io.lock().poll_fill(cx) {
                return Poll::Ready(read.ok());
            }
            if closed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            // The timer is moved only when it fires before the wait's own deadline, so that
            // a request costs one clock read and no timer update.
            let due = *deadline.get_or_insert_with(|| Instant::now() + idle_timeout);
            while timer.as_mut().poll(cx).is_ready() {
                if Instant::now() >= due {
                    return Poll::Ready(None);
                }
                timer.as_mut().reset(due);
            }
            Poll::Pending
        })
        .await;
        match read {
            Some(0) | None => return Err(None),
            Some(_) => {}
        }
    }
}

/// Writes the head in `out` and `body` after it, framed; an error: the connection cannot
/// carry another response (the client went away, or the body failed or broke its length).
async fn write_body<B: Body<Data = Bytes>>(
    io: &SharedIo,
    out: &mut Vec<u8>,
    framing: Framing,
    body: B,
    watch: bool,
) -> io::Result<()> {
    if framing == Framing::Empty {
        return write_out(io, out).await;
    }
    let mut encoder = Encoder::new(framing);
    let mut body = pin!(body);
    loop {
        let step = poll_fn(|cx| {
            loop {
                match body.as_mut().poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            if encoder.data(out, &data).is_err() {
                                return Poll::Ready(Step::Broken);
                            }
                        }
                        if out.len() >= WRITE_AT {
                            return Poll::Ready(Step::Write);
                        }
                    }
                    Poll::Ready(Some(Err(_))) => return Poll::Ready(Step::Broken),
                    Poll::Ready(None) => return Poll::Ready(Step::End),
                    // What is gathered goes out while the body waits.
                    // While the body waits, a client that goes away ends it (and the
                    // permits it holds).
                    Poll::Pending if out.is_empty() && watch => {
                        return poll_client_gone(io, cx).map(|()| Step::Broken);
                    }
                    Poll::Pending if out.is_empty() => return Poll::Pending,
                    Poll::Pending => return Poll::Ready(Step::Write),
                }
            }
        })
        .await;
        match step {
            Step::Write => write_out(io, out).await?,
            Step::End => {
                let ended = encoder.end(out);
                write_out(io, out).await?;
                return ended.map_err(|_| broken());
            }
            Step::Broken => {
                // What came before the break is the client's; the close tells it the rest
                // will not come.
                let _ = write_out(io, out).await;
                return Err(broken());
            }
        }
    }
}

/// Ready once the client has closed its connection or it failed; what it sends meanwhile (a
/// pipelined request) is kept in the buffer, up to the longest head.
fn poll_client_gone(io: &SharedIo, cx: &mut Context<'_>) -> Poll<()> {
    let mut client = io.lock();
    while client.read.len() < request::MAX_HEAD {
        match client.poll_fill(cx) {
            Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(()),
            Poll::Ready(Ok(_)) => {}
            Poll::Pending => return Poll::Pending,
        }
    }
    Poll::Pending
}

enum Step {
    Write,
    End,
    Broken,
}

fn broken() -> io::Error {
    io::Error::other("the response body failed or did not match its length")
}

/// Writes all of `out` and clears it.
async fn write_out(io: &SharedIo, out: &mut Vec<u8>) -> io::Result<()> {
    let mut written = 0;
    poll_fn(|cx| {
        let mut client = io.lock();
        while written < out.len() {
            let n = ready!(client.poll_write(cx, &out[written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero)));
            }
            written += n;
        }
        Poll::Ready(Ok(()))
    })
    .await?;
    out.clear();
    Ok(())
}

/// Answers a request the server cannot read, with a text body saying why.
async fn refuse(io: &SharedIo, out: &mut Vec<u8>, refusal: Refusal) -> io::Result<()> {
    let text = format!(
        "{} {}: {}\n",
        refusal.status.as_u16(),
        refusal.status.canonical_reason().unwrap_or(""),
        refusal.reason
    );
    let mut response = Response::new(());
    *response.status_mut() = refusal.status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let (parts, ()) = response.into_parts();
    let asked = Asked {
        version: http::Version::HTTP_11,
        to_head: false,
    };
    let size = SizeHint::with_exact(text.len() as u64);
    let _ = response::write_head(out, &parts, &size, asked, false);
    out.extend_from_slice(text.as_bytes());
    write_out(io, out).await
}
