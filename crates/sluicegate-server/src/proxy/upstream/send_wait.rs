//! How long a request on its way to the upstream may go without progress.
//!
//! A request body streams through: it is bounded by the waits between its pieces, never by
//! its length, so that an upload as slow as its client's link passes however long it takes
//! (nginx bounds the same waits: `client_body_timeout` between two reads from the client,
//! `proxy_send_timeout` between two writes to the upstream, `proxy_read_timeout` for the
//! answer once the request is sent). The waits for the client are the body's own
//! (`request_body`); those for the upstream are counted here.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::proxy::request_body::BodyState;

/// The current wait of one request being sent.
#[derive(Debug)]
pub(crate) struct SendWait {
    /// How long the upstream may take to take the next bytes of the request, and to answer
    /// once it has all of it.
    upstream: Duration,
    /// The body's progress when it was last looked at (none: not yet looked at).
    seen: Option<u64>,
    /// When the body was first seen where it is (when the request began, until then).
    since: Instant,
}

impl SendWait {
    pub(crate) fn new(upstream: Duration, began: Instant) -> SendWait {
        SendWait {
            upstream,
            seen: None,
            since: began,
        }
    }

    /// When the wait for the upstream the request is in now runs out (`body`: where its
    /// streamed body is, if it has one); `None`: the request waits for its client.
    ///
    /// Looked at only when the request cannot go on (so a request that never waits reads no
    /// clock): a wait counts from the first time it was seen with the body where it is.
    fn due(&mut self, body: Option<BodyState>) -> Option<Instant> {
        let Some(body) = body else {
            return Some(self.since + self.upstream);
        };
        if self.seen != Some(body.progress) {
            self.seen = Some(body.progress);
            self.since = Instant::now();
        }
        (!body.waits_on_client).then_some(self.since + self.upstream)
    }

    /// Ready once the wait for the upstream the request is in now has run out (`timer` moved
    /// to its end).
    pub(crate) fn poll_stalled(
        &mut self,
        body: Option<BodyState>,
        timer: &mut Pin<Box<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let Some(due) = self.due(body) else {
            return Poll::Pending;
        };
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        timer.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: Duration = Duration::from_secs(60);

    fn body(progress: u64, waits_on_client: bool) -> Option<BodyState> {
        Some(BodyState {
            progress,
            waits_on_client,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_body_is_bounded_from_its_start() {
        let began = Instant::now();
        let mut wait = SendWait::new(UPSTREAM, began);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(wait.due(None), Some(began + UPSTREAM));
    }

    #[tokio::test(start_paused = true)]
    async fn each_wait_counts_from_the_last_progress() {
        let mut wait = SendWait::new(UPSTREAM, Instant::now());
        tokio::time::advance(Duration::from_secs(3)).await;
        // Waiting for the client: the body's own bound.
        assert_eq!(wait.due(body(0, true)), None);
        // A piece came and is being written: the upstream is waited for, from now.
        tokio::time::advance(Duration::from_secs(3)).await;
        let piece = Instant::now();
        assert_eq!(wait.due(body(2, false)), Some(piece + UPSTREAM));
        // Unchanged: the same wait.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(wait.due(body(2, false)), Some(piece + UPSTREAM));
        // All written: the answer is waited for, from the end of the body.
        tokio::time::advance(Duration::from_secs(30)).await;
        let sent = Instant::now();
        assert_eq!(wait.due(body(3, false)), Some(sent + UPSTREAM));
    }
}
