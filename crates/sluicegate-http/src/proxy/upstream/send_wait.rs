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

use crate::proxy::upstream::request::Outgoing;

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
    /// The body's progress when it was last looked at.
    seen: u64,
    /// When the body was first seen at that progress (when the request began, to begin with).
    since: Instant,
}

impl SendWait {
    pub(crate) fn new(timeouts: Timeouts, began: Instant) -> SendWait {
        SendWait {
            timeouts,
            seen: 0,
            since: began,
        }
    }

    /// When the wait the request is in now runs out, and whom it waits for; `None`: no bound.
    ///
    /// Looked at only when the request cannot go on (so a request that never waits reads no
    /// clock): a wait counts from the first time it was seen with the body where it is.
    fn due(&mut self, body: Option<&Outgoing>) -> Option<(Instant, Stall)> {
        let Some(body) = body else {
            return Some((self.since + self.timeouts.upstream, Stall::Upstream));
        };
        if body.progress() != self.seen {
            self.seen = body.progress();
            self.since = Instant::now();
        }
        if body.waits_on_client() {
            let timeout = self.timeouts.client_body?;
            Some((self.since + timeout, Stall::Client))
        } else {
            Some((self.since + self.timeouts.upstream, Stall::Upstream))
        }
    }
}

impl SendWait {
    /// Ready, with whom the request waited for, once the wait it is in now has run out
    /// (`timer` moved to its end); `body`: the request's body still being sent, if any and if
    /// its head has all been written.
    pub(crate) fn poll_stalled(
        &mut self,
        body: Option<&Outgoing>,
        timer: &mut Pin<Box<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<Stall> {
        let Some((due, stall)) = self.due(body) else {
            return Poll::Pending;
        };
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(stall)
    }
}
