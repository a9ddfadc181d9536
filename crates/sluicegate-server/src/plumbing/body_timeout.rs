//! A request body whose next bytes are slow to come (nginx's `client_body_timeout`: the wait
//! between two reads, not for the whole body): without a bound, a client that sends a head
//! announcing a body and then a byte a minute holds its connection and the handler reading
//! it for as long as it likes, since a request counts as open once its head has come.

use std::fmt;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why a body read failed: its next bytes did not come within the timeout, or the body
/// itself failed.
#[derive(Debug)]
pub(crate) enum TimedBodyError<E> {
    /// Nothing more came for this long.
    TimedOut(Duration),
    /// The body's own error (the client went away, or broke its framing).
    Body(E),
}

impl<E: fmt::Display> fmt::Display for TimedBodyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimedBodyError::TimedOut(timeout) => write!(
                f,
                "the request body's next bytes did not come within {timeout:?} (--client-body-timeout)"
            ),
            TimedBodyError::Body(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for TimedBodyError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimedBodyError::TimedOut(_) => None,
            TimedBodyError::Body(error) => Some(error),
        }
    }
}

pin_project_lite::pin_project! {
    /// `body`, failing with [`TimedBodyError::TimedOut`] once it has given nothing for
    /// `timeout` (none: never). An empty piece is no progress: a client cannot hold the wait
    /// open with empty h2 `DATA` frames. The timer is made the first time a read waits: a
    /// body that came with its head costs none.
    #[derive(Debug)]
    pub(crate) struct BodyWithTimeout<B> {
        #[pin]
        body: B,
        timeout: Option<Duration>,
        timer: Option<Pin<Box<Sleep>>>,
        waits: bool,
    }
}

impl<B> BodyWithTimeout<B> {
    pub(crate) fn new(body: B, timeout: Option<Duration>) -> BodyWithTimeout<B> {
        BodyWithTimeout {
            body,
            timeout,
            timer: None,
            waits: false,
        }
    }

    /// Whether the last read waits for the client (only counted with a timeout).
    pub(crate) fn waits(&self) -> bool {
        self.waits
    }
}

impl<B: Body<Data = Bytes>> Body for BodyWithTimeout<B> {
    type Data = Bytes;
    type Error = TimedBodyError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        loop {
            match this.body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) if frame.data_ref().is_some_and(Bytes::is_empty) => {}
                Poll::Ready(next) => {
                    *this.waits = false;
                    return Poll::Ready(next.map(|next| next.map_err(TimedBodyError::Body)));
                }
                Poll::Pending => break,
            }
        }
        let Some(timeout) = *this.timeout else {
            return Poll::Pending;
        };
        if !*this.waits {
            *this.waits = true;
            let due = Instant::now() + timeout;
            match this.timer.as_mut() {
                Some(timer) => timer.as_mut().reset(due),
                None => *this.timer = Some(Box::pin(tokio::time::sleep_until(due))),
            }
        }
        match this.timer.as_mut().map(|timer| timer.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Some(Err(TimedBodyError::TimedOut(timeout)))),
            _ => Poll::Pending,
        }
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
    use http_body_util::{BodyExt as _, StreamBody};

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_coming_fails_after_the_timeout_and_not_before() {
        let timeout = Duration::from_secs(60);
        let (sender, receiver) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let mut body = BodyWithTimeout::new(StreamBody::new(stream), Some(timeout));
        let feeder = tokio::spawn(async move {
            // Each piece a little before the timeout: the wait counts from the last read.
            for _ in 0..3 {
                tokio::time::sleep(timeout - Duration::from_secs(1)).await;
                sender
                    .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await?;
            }
            // Then nothing, the body still open.
            tokio::time::sleep(timeout * 10).await;
            drop(sender);
            Ok::<_, tokio::sync::mpsc::error::SendError<_>>(())
        });
        let started = tokio::time::Instant::now();
        for _ in 0..3 {
            let frame = body.frame().await.expect("a frame").expect("not timed out");
            assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"x")));
        }
        let last = tokio::time::Instant::now();
        let error = body
            .frame()
            .await
            .expect("an error")
            .expect_err("timed out");
        assert!(
            matches!(error, TimedBodyError::TimedOut(t) if t == timeout),
            "{error}"
        );
        assert_eq!(last.elapsed(), timeout);
        assert_eq!(last - started, (timeout - Duration::from_secs(1)) * 3);
        feeder.abort();
    }
}
