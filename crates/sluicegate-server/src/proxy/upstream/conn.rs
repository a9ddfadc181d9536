//! One connection to the upstream: hyper's sending half, the task that drives the
//! connection, and a timer reused by every request it carries.

use std::pin::Pin;

use hyper::client::conn::http1::SendRequest;
use tokio::task::AbortHandle;
use tokio::time::{Instant, Sleep};

use crate::proxy::request_body::RequestBody;

/// A connection to the upstream.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sender: SendRequest<RequestBody>,
    /// The task driving the connection: aborted to close it at once.
    task: AbortHandle,
    /// The bound on the current wait (a request's, or its response body's), made once per
    /// connection rather than once per request.
    pub(crate) timer: Pin<Box<Sleep>>,
}

impl Conn {
    pub(crate) fn new(sender: SendRequest<RequestBody>, task: AbortHandle) -> Conn {
        Conn {
            sender,
            task,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        }
    }

    /// Closes the connection whatever it is doing: the upstream sees it close, and it never
    /// carries another request.
    pub(crate) fn close(self) {
        self.task.abort();
    }

    /// Whether the connection has closed (or will, once hyper has seen it).
    pub(crate) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}
