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
use tokio::time::Sleep;

/// Why a body read failed: its next bytes did not come within the timeout.
#[derive(Debug)]
pub(crate) struct BodyTimedOut(Duration);

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request body's next bytes did not come within {:?} (--client-body-timeout)",
            self.0
        )
    }
}

impl std::error::Error for BodyTimedOut {}

pin_project_lite::pin_project! {
    /// `body`, failing with [`BodyTimedOut`] once it has given nothing for `timeout`. The
    /// timer is made only when a read has to wait: a body that came with its head costs none.
    pub(crate) struct BodyWithTimeout<B> {
        #[pin]
        body: B,
        timeout: Duration,
        waiting: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> BodyWithTimeout<B> {
    pub(crate) fn new(body: B, timeout: Duration) -> BodyWithTimeout<B> {
        BodyWithTimeout {
            body,
            timeout,
            waiting: None,
        }
    }
}

impl<B> Body for BodyWithTimeout<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.body.poll_frame(cx) {
            *this.waiting = None;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let timeout = *this.timeout;
        let waiting = this
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(timeout))))),
            Poll::Pending => Poll::Pending,
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
        let mut body = BodyWithTimeout::new(StreamBody::new(stream), timeout);
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
        assert!(error.is::<BodyTimedOut>(), "{error}");
        assert_eq!(last.elapsed(), timeout);
        assert_eq!(last - started, (timeout - Duration::from_secs(1)) * 3);
        feeder.abort();
    }
}
