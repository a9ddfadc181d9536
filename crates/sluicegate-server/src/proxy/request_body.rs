//! A request body as the proxy passes it to the upstream: bounded in size, each wait for the
//! client bounded in time, and read whole first when it is short (nginx's
//! `client_max_body_size`, `client_body_timeout` and `proxy_request_buffering`).
//!
//! This is policy in front of the HTTP client, not part of it: the client (hyper's) frames
//! and writes whatever body it is given.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use parking_lot::Mutex;

use crate::plumbing::{BodyWithTimeout, TimedBodyError};

/// How the proxy takes request bodies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyBounds {
    /// The most bytes of a body passed on (none: no bound).
    pub(crate) max_size: Option<u64>,
    /// A body whose announced length is at most this (and not zero) is read whole from the
    /// client before the request goes to the upstream; one of unknown length is read first up
    /// to this, and sent with its length if it ended within it. Zero: every body is streamed
    /// as it comes.
    pub(crate) buffer_size: u64,
    /// How long the client may take to send the next bytes of its body (none: no bound).
    pub(crate) client_timeout: Option<Duration>,
}

impl BodyBounds {
    /// The bound on bodies, if `body` announces more bytes than it (`Content-Length`, in h2
    /// as in HTTP/1.1): such a request is refused before anything else, spending no budget
    /// and sending nothing to the upstream.
    pub(crate) fn refuses(&self, body: &Incoming) -> Option<u64> {
        self.max_size.filter(|&max| body.size_hint().lower() > max)
    }
}

/// Why a request body did not reach its end.
#[derive(Debug)]
pub(crate) enum BodyFailure {
    /// The client sent nothing more of it for the client body timeout.
    ClientTimeout,
    /// It grew past the bound on bodies (in bytes).
    TooLarge(u64),
    /// The client's side failed: it went away, or broke its framing.
    Client(hyper::Error),
}

/// The error a failed body gives hyper; the failure itself is kept in the [`BodyWatch`].
#[derive(Debug, thiserror::Error)]
#[error("the request body failed")]
pub(crate) struct BodyFailed;

/// What the sender of a streamed body sees of it while hyper writes it.
#[derive(Debug, Default)]
pub(crate) struct BodyWatch {
    /// Counts each piece taken from the client and handed on, and the end.
    progress: AtomicU64,
    /// The body waits for the client to send more.
    waits_on_client: AtomicBool,
    /// All of it has been handed on.
    ended: AtomicBool,
    failure: Mutex<Option<BodyFailure>>,
}

/// Where a streamed body is, as the waits of its request see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyState {
    /// A count that changes whenever bytes come from the client and are handed on.
    pub(crate) progress: u64,
    /// Whether the body can go on only when the client sends more of it.
    pub(crate) waits_on_client: bool,
}

impl BodyWatch {
    pub(crate) fn state(&self) -> BodyState {
        BodyState {
            progress: self.progress.load(Ordering::Relaxed),
            waits_on_client: self.waits_on_client.load(Ordering::Relaxed),
        }
    }

    /// Whether the whole body has been handed on.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Why the body failed, if it did.
    pub(crate) fn take_failure(&self) -> Option<BodyFailure> {
        self.failure.lock().take()
    }

    fn fail(&self, failure: BodyFailure) -> BodyFailed {
        *self.failure.lock() = Some(failure);
        BodyFailed
    }
}

/// A request body on its way to the upstream.
#[derive(Debug)]
pub(crate) enum RequestBody {
    /// No body.
    Empty,
    /// The whole body, read before the request was sent (kept, so that it can be sent again).
    Whole(Option<Bytes>),
    /// Passed on as it comes.
    Streaming(Box<Streaming>),
}

/// A body passed on as it comes from the client.
#[derive(Debug)]
pub(crate) struct Streaming {
    /// What was read of it before the request was sent.
    first: Option<Bytes>,
    /// Each wait for the client's next piece bounded by the client body timeout.
    incoming: BodyWithTimeout<Incoming>,
    max_size: Option<u64>,
    taken: u64,
    watch: Arc<BodyWatch>,
}

impl RequestBody {
    /// The same body again, if it can be sent again from its start.
    pub(crate) fn again(&self) -> Option<RequestBody> {
        match self {
            RequestBody::Empty => Some(RequestBody::Empty),
            RequestBody::Whole(whole) => Some(RequestBody::Whole(whole.clone())),
            RequestBody::Streaming(_) => None,
        }
    }

    /// What the sender sees of a streamed body.
    pub(crate) fn watch(&self) -> Option<Arc<BodyWatch>> {
        match self {
            RequestBody::Streaming(streaming) => Some(Arc::clone(&streaming.watch)),
            _ => None,
        }
    }
}

impl Streaming {
    fn take(&mut self, data: Bytes) -> Result<Bytes, BodyFailed> {
        self.taken += data.len() as u64;
        if let Some(max) = self.max_size.filter(|&max| self.taken > max) {
            return Err(self.watch.fail(BodyFailure::TooLarge(max)));
        }
        self.watch.progress.fetch_add(1, Ordering::Relaxed);
        Ok(data)
    }

    fn ended(&self) {
        self.watch.progress.fetch_add(1, Ordering::Relaxed);
        self.watch.ended.store(true, Ordering::Relaxed);
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailed>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(self.take(first).map(Frame::data)));
        }
        loop {
            let next = Pin::new(&mut self.incoming).poll_frame(cx);
            self.watch
                .waits_on_client
                .store(self.incoming.waits(), Ordering::Relaxed);
            let failure = match next {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(TimedBodyError::TimedOut(_)))) => BodyFailure::ClientTimeout,
                Poll::Ready(Some(Err(TimedBodyError::Body(error)))) => BodyFailure::Client(error),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => return Poll::Ready(Some(self.take(data).map(Frame::data))),
                    // Trailers end the body; hyper's HTTP/1.1 client sends none.
                    Err(_) => continue,
                },
            };
            return Poll::Ready(Some(Err(self.watch.fail(failure))));
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyFailed;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailed>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Whole(whole) => {
                Poll::Ready(whole.take().map(|data| Ok(Frame::data(data))))
            }
            RequestBody::Streaming(streaming) => streaming.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Whole(whole) => whole.is_none(),
            RequestBody::Streaming(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Whole(whole) => {
                SizeHint::with_exact(whole.as_ref().map_or(0, |w| w.len() as u64))
            }
            RequestBody::Streaming(streaming) => {
                let mut hint = streaming.incoming.size_hint();
                if let Some(first) = &streaming.first {
                    let first = first.len() as u64;
                    hint.set_lower(hint.lower() + first);
                    if let Some(upper) = hint.upper() {
                        hint.set_upper(upper + first);
                    }
                }
                hint
            }
        }
    }
}

/// Takes the client's body for the upstream as `bounds` say: a short one read whole first
/// (each wait for the next piece bounded by the client body timeout), so that a client that
/// sends a short body slowly holds no upstream connection while it does, the body can be sent
/// again, and it goes with its length; any other streamed, its framing made explicit in
/// `headers` where the client's gave none. `incoming` is not at its end: a request without a
/// body goes on as [`RequestBody::Empty`], which its caller passes without this future.
pub(crate) async fn take_body(
    incoming: Incoming,
    method: &Method,
    headers: &mut HeaderMap,
    bounds: BodyBounds,
) -> Result<RequestBody, BodyFailure> {
    let announced = headers.contains_key(header::CONTENT_LENGTH);
    let exact = incoming.size_hint().exact();
    let limit = match exact {
        Some(length) if length <= bounds.buffer_size => Some(length),
        Some(_) => None,
        None if bounds.buffer_size > 0 => Some(bounds.buffer_size),
        None => None,
    };
    let mut streaming = Streaming {
        first: None,
        incoming: BodyWithTimeout::new(incoming, bounds.client_timeout),
        max_size: bounds.max_size,
        taken: 0,
        watch: Arc::default(),
    };
    if let Some(limit) = limit {
        match read_up_to(&mut streaming, limit).await? {
            ReadFirst::Whole(whole) => {
                if exact.is_none() || !announced {
                    set_length(headers, method, whole.len());
                }
                return Ok(if whole.is_empty() {
                    RequestBody::Empty
                } else {
                    RequestBody::Whole(Some(whole))
                });
            }
            ReadFirst::Start(start) => {
                streaming.first = Some(start);
                streaming.taken = 0;
            }
        }
    }
    if !announced && exact.is_none() {
        // Said here: hyper would send a `GET` body of unknown length as no body at all.
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    } else if !announced {
        if let Some(length) = exact {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
    }
    Ok(RequestBody::Streaming(Box::new(streaming)))
}

/// Says the length of a body read whole: an empty one says nothing for a method that gives
/// content no meaning, as nginx sends it.
fn set_length(headers: &mut HeaderMap, method: &Method, length: usize) {
    let meaningless = matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
    );
    if length > 0 || !meaningless {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
}

/// What was read of a body before its request is sent.
enum ReadFirst {
    /// The whole body: it ended within what may be read first.
    Whole(Bytes),
    /// Its start: it goes on past what may be read first.
    Start(Bytes),
}

/// Reads `body` until it ends or more than `limit` bytes of it came.
async fn read_up_to(body: &mut Streaming, limit: u64) -> Result<ReadFirst, BodyFailure> {
    // The body is most often one piece, kept as it is; more are gathered, in room reserved
    // once a second piece comes.
    let mut one_piece: Option<Bytes> = None;
    let mut gathered = BytesMut::new();
    loop {
        let next = poll_fn(|cx| body.poll_next(cx)).await;
        let data = match next {
            None => {
                return Ok(ReadFirst::Whole(
                    one_piece.unwrap_or_else(|| gathered.freeze()),
                ));
            }
            Some(Err(BodyFailed)) => {
                let failure = body.watch.take_failure();
                return Err(failure.unwrap_or(BodyFailure::ClientTimeout));
            }
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
        };
        if one_piece.is_none() && gathered.is_empty() {
            one_piece = Some(data);
        } else {
            if let Some(first) = one_piece.take() {
                gathered.reserve(usize::try_from(limit).map_or(1 << 16, |n| n.min(1 << 16)));
                gathered.extend_from_slice(&first);
            }
            gathered.extend_from_slice(&data);
        }
        let read = one_piece.as_ref().map_or(gathered.len(), Bytes::len);
        if read as u64 > limit {
            return Ok(ReadFirst::Start(
                one_piece.unwrap_or_else(|| gathered.freeze()),
            ));
        }
    }
}

/// A copy of `request` to send again, when the upstream may see it twice: its method is
/// idempotent (RFC 9110 section 9.2.2) and its body can be sent again from its start.
pub(crate) fn copy_to_retry(request: &Request<RequestBody>) -> Option<Request<RequestBody>> {
    if !request.method().is_idempotent() {
        return None;
    }
    let body = request.body().again()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
}
