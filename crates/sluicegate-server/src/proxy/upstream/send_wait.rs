//! How long a request on its way to the upstream may go without progress, and whom it is then
//! waiting for.
//!
//! A request body streams through: it is bounded by the waits between its pieces, never by
//! its length, so that an upload as slow as its client's link passes however long it takes
//! (nginx bounds the same waits: `client_body_timeout` between two reads from the client,
//! `proxy_send_timeout` between two writes to the upstream, `proxy_read_timeout` for the
//! answer once the request is sent).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::proxy::upstream::request::{BodyState, Outgoing};

/// The bounds on a request's waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// How long the upstream may take to take the next bytes of the request, and to answer
    /// once it has all of it.
    pub(crate) upstream: Duration,
    /// How long the client may take to send the next bytes of its request body (none: no
    /// bound).
    pub(crate) client_body: Option<Duration>,
}

/// Who a request that went nowhere for too long was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The client, for more of its request body.
    Client,
    /// The upstream: to take more of the request, or to answer it.
    Upstream,
}

/// The current wait of one request being sent.
#[derive(Debug)]
pub(crate) struct SendWait {
    timeouts: Timeouts,
    /// The body's progress when it was last looked at (none: not yet looked at).
    seen: Option<u64>,
    /// When the body was first seen where it is (when the request began, until then).
    since: Instant,
}

impl SendWait {
    pub(crate) fn new(timeouts: Timeouts, began: Instant) -> SendWait {
        SendWait {
            timeouts,
            seen: None,
            since: began,
        }
    }

    /// When the wait the request is in now runs out, and whom it waits for (`body`: where
    /// the body is, if it has one and its head has all been written); `None`: no bound.
    ///
    /// Looked at only when the request cannot go on (so a request that never waits reads no
    /// clock): a wait counts from the first time it was seen with the body where it is. The
    /// first look at a body starts its first wait, so that the time connecting and writing
    /// the head took (before the body was asked for, and `100 Continue` sent) is not the
    /// client's.
    fn due(&mut self, body: Option<BodyState>) -> Option<(Instant, Stall)> {
        let Some(body) = body else {
            return Some((self.since + self.timeouts.upstream, Stall::Upstream));
        };
        if self.seen != Some(body.progress) {
            self.seen = Some(body.progress);
            self.since = Instant::now();
        }
        if body.waits_on_client {
            let timeout = self.timeouts.client_body?;
            Some((self.since + timeout, Stall::Client))
        } else {
            Some((self.since + self.timeouts.upstream, Stall::Upstream))
        }
    }

    /// Ready, with whom the request waited for, once the wait it is in now has run out
    /// (`timer` moved to its end); `body`: the request's body still being sent, if any and if
    /// its head has all been written.
    pub(crate) fn poll_stalled(
        &mut self,
        body: Option<&Outgoing>,
        timer: &mut Pin<Box<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<Stall> {
        let Some((due, stall)) = self.due(body.map(Outgoing::state)) else {
            return Poll::Pending;
        };
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(stall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: Duration = Duration::from_secs(60);
    const CLIENT: Duration = Duration::from_secs(10);

    fn wait() -> SendWait {
        let timeouts = Timeouts {
            upstream: UPSTREAM,
            client_body: Some(CLIENT),
        };
        SendWait::new(timeouts, Instant::now())
    }

    fn body(progress: u64, waits_on_client: bool) -> Option<BodyState> {
        Some(BodyState {
            progress,
            waits_on_client,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_body_is_bounded_from_its_start() {
        let began = Instant::now();
        let mut wait = wait();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(wait.due(None), Some((began + UPSTREAM, Stall::Upstream)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_clients_first_wait_starts_when_its_body_is_first_asked_for() {
        let mut wait = wait();
        // Connecting and writing the head took longer than the client's timeout.
        tokio::time::advance(CLIENT * 2).await;
        let asked = Instant::now();
        assert_eq!(
            wait.due(body(0, true)),
            Some((asked + CLIENT, Stall::Client))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_wait_counts_from_the_last_progress() {
        let mut wait = wait();
        let first = Instant::now();
        assert_eq!(
            wait.due(body(0, true)),
            Some((first + CLIENT, Stall::Client))
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        // Unchanged: the same wait.
        assert_eq!(
            wait.due(body(0, true)),
            Some((first + CLIENT, Stall::Client))
        );
        // A piece came and is being written: the upstream is waited for, from now.
        let piece = Instant::now();
        assert_eq!(
            wait.due(body(2, false)),
            Some((piece + UPSTREAM, Stall::Upstream))
        );
        // All written: the answer is waited for, from the end of the body.
        tokio::time::advance(Duration::from_secs(30)).await;
        let sent = Instant::now();
        assert_eq!(
            wait.due(body(3, false)),
            Some((sent + UPSTREAM, Stall::Upstream))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_client_timeout_is_no_bound_on_the_client() {
        let timeouts = Timeouts {
            upstream: UPSTREAM,
            client_body: None,
        };
        let mut wait = SendWait::new(timeouts, Instant::now());
        assert_eq!(wait.due(body(0, true)), None);
        assert!(wait.due(body(1, false)).is_some());
    }
}
