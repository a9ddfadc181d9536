//! One connection to the upstream, or one stream of a shared h2 connection: hyper's sending
//! half, the task that drives an HTTP/1.1 connection, and a timer reused by every request it
//! carries.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{TrySendError, http1, http2};
use tokio::task::AbortHandle;
use tokio::time::{Instant, Sleep};

use crate::proxy::request_body::RequestBody;

/// hyper's sending half of a connection.
#[derive(Debug)]
pub(crate) enum Sender {
    /// An HTTP/1.1 connection: one request at a time.
    Http1(http1::SendRequest<RequestBody>),
    /// An h2 connection, shared by the requests of one worker.
    H2(http2::SendRequest<RequestBody>),
}

/// The answer to a request sent, or the request itself when it never left.
pub(crate) type Sent = Result<Response<Incoming>, TrySendError<Request<RequestBody>>>;

/// A connection to the upstream.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sender: Sender,
    /// The task driving an HTTP/1.1 connection: aborted to close it at once. An h2
    /// connection is shared, and a request's end is its stream's alone.
    task: Option<AbortHandle>,
    /// The bound on the current wait (a request's, or its response body's), made once per
    /// connection rather than once per request.
    pub(crate) timer: Pin<Box<Sleep>>,
}

impl Conn {
    pub(crate) fn new(sender: Sender, task: Option<AbortHandle>) -> Conn {
        Conn {
            sender,
            task,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        }
    }

    /// Another stream of this h2 connection; `None` for an HTTP/1.1 one.
    pub(crate) fn another_stream(&self) -> Option<Conn> {
        match &self.sender {
            Sender::H2(sender) => Some(Conn::new(Sender::H2(sender.clone()), None)),
            Sender::Http1(_) => None,
        }
    }

    /// Whether requests on it go by h2.
    pub(crate) fn is_h2(&self) -> bool {
        matches!(self.sender, Sender::H2(_))
    }

    /// Closes an HTTP/1.1 connection whatever it is doing: the upstream sees it close, and
    /// it never carries another request. An h2 stream ends with its request and response.
    pub(crate) fn close(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }

    /// Whether the connection has closed (or will, once hyper has seen it).
    pub(crate) fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::Http1(sender) => sender.is_closed(),
            Sender::H2(sender) => sender.is_closed(),
        }
    }

    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        match &mut self.sender {
            Sender::Http1(sender) => sender.poll_ready(cx),
            Sender::H2(sender) => sender.poll_ready(cx),
        }
    }
}
