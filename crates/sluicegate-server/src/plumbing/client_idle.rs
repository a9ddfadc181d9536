//! How long a client connection has had no request open: the time a client takes to send its
//! next request head (or its first), idle keep-alive included. Without a bound a client could
//! open connections, send nothing, or a byte a minute, and hold them (and a file descriptor
//! each) forever; nginx closes them after `client_header_timeout` / `keepalive_timeout`.
//!
//! One watch per connection, for HTTP/1.1 and h2 alike (h2 has no header timer in hyper),
//! instead of hyper's HTTP/1.1 header timer: that one allocated and armed a timer for every
//! request head, where this costs a request two counts and a clock read.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::plumbing::h2_stall::{LastAsked, ms_since};

/// The requests open on one client connection, shared by its requests and its idle watch.
#[derive(Debug)]
pub(crate) struct Requests {
    open: AtomicUsize,
    /// When the connection was last active, in milliseconds after `opened`: a request ended,
    /// or a write that had waited for the client went on.
    last_active_ms: AtomicU64,
    /// Whether a write waits for the client (the tail of a response, often).
    write_waits: AtomicBool,
    opened: Instant,
}

impl Requests {
    pub(crate) fn new() -> Arc<Requests> {
        Arc::new(Requests {
            open: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(0),
            write_waits: AtomicBool::new(false),
            opened: Instant::now(),
        })
    }

    /// Counts a request open until the returned guard is dropped (with its response body).
    pub(crate) fn open(self: &Arc<Self>) -> OpenRequest {
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenRequest(Arc::clone(self))
    }

    /// Returns once no request has been open for `timeout`, counted from `since` at the
    /// earliest (the connection's opening, or when it was told to close).
    pub(crate) async fn idle_for(&self, since: Instant, timeout: Duration) {
        let mut check = since + timeout;
        loop {
            tokio::time::sleep_until(check).await;
            if self.open.load(Ordering::Acquire) > 0 || self.write_waits.load(Ordering::Acquire) {
                check = Instant::now() + timeout;
                continue;
            }
            let last_active =
                self.opened + Duration::from_millis(self.last_active_ms.load(Ordering::Acquire));
            let idle_since = last_active.max(since);
            if Instant::now() >= idle_since + timeout {
                return;
            }
            check = idle_since + timeout;
        }
    }

    /// A write to the client waits (`true`), or went on after waiting (`false`, the
    /// connection active now).
    pub(crate) fn write_waits(&self, waits: bool) {
        if !waits {
            self.last_active_ms
                .fetch_max(ms_since(self.opened), Ordering::Release);
        }
        self.write_waits.store(waits, Ordering::Release);
    }

    /// When the connection opened.
    pub(crate) fn opened(&self) -> Instant {
        self.opened
    }
}

/// One open request; its drop ends it.
#[derive(Debug)]
pub(crate) struct OpenRequest(Arc<Requests>);

impl Drop for OpenRequest {
    fn drop(&mut self) {
        let requests = &self.0;
        // Stamped before the count falls: a watch that sees none open sees this end too.
        requests
            .last_active_ms
            .fetch_max(ms_since(requests.opened), Ordering::Release);
        requests.open.fetch_sub(1, Ordering::Release);
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request open until it ends or is dropped, and (h2)
    /// tells its stall watch what each ask for more gave.
    pub(crate) struct OpenBody<B> {
        #[pin]
        body: B,
        open: Option<OpenRequest>,
        asked: Option<Arc<LastAsked>>,
    }
}

impl<B> OpenBody<B> {
    pub(crate) fn new(body: B, open: OpenRequest, asked: Option<Arc<LastAsked>>) -> OpenBody<B> {
        OpenBody {
            body,
            open: Some(open),
            asked,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for OpenBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if let Some(asked) = this.asked {
            asked.answered(frame.is_ready());
        }
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.open.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_request_end_and_never_while_one_is_open() {
        let requests = Requests::new();
        let timeout = Duration::from_secs(60);
        // No request at all: idle a timeout after the connection opened.
        requests.idle_for(requests.opened(), timeout).await;
        assert_eq!(requests.opened.elapsed(), timeout);

        let open = requests.open();
        let watch = {
            let requests = Arc::clone(&requests);
            tokio::spawn(async move { requests.idle_for(requests.opened(), timeout).await })
        };
        // Held five timeouts: never idle meanwhile.
        tokio::time::sleep(timeout * 5).await;
        assert!(!watch.is_finished());
        let ended = Instant::now();
        drop(open);
        assert!(watch.await.is_ok());
        assert!(ended.elapsed() >= timeout, "{:?}", ended.elapsed());
        assert!(ended.elapsed() < timeout * 2, "{:?}", ended.elapsed());
        // Counted from a later start (a connection told to close) when the last end is older.
        let told = Instant::now();
        requests.idle_for(told, timeout).await;
        assert_eq!(told.elapsed(), timeout);
    }
}
