//! Reading a call's request message on the lean gRPC server, within bounds a client cannot
//! stretch: the messages a connection has in progress may declare [`CONNECTION_BYTES`]
//! together (one message of the largest size), and a message must be whole within the message timeout.
//!
//! Without the first bound, each of a connection's 200 streams could hold a message of up to
//! [`MAX_MESSAGE_BYTES`](crate::serve::grpc_codec::MAX_MESSAGE_BYTES) half-sent (h2 refills
//! the flow-control windows as bytes are read); without the second, a message that never ends
//! would hold its call open for good when the client sets no deadline.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;

use crate::serve::grpc_codec::{
    GrpcCode, MAX_MESSAGE_BYTES, PREFIX_BYTES, Refusal, check_partial, declared_length,
};

/// What one connection's unfinished request bodies may declare together: one message of the
/// largest size, with its prefix.
pub(crate) const CONNECTION_BYTES: usize = PREFIX_BYTES + MAX_MESSAGE_BYTES;

/// The request bytes one connection's unfinished messages declare, together: taken from when a
/// message's prefix arrives until the message is whole (or the call ends).
#[derive(Debug, Default)]
pub(crate) struct ConnectionBudget {
    declared: AtomicUsize,
}

impl ConnectionBudget {
    /// Takes `bytes` if they fit beside what the connection's other messages hold.
    fn take(&self, bytes: usize) -> Result<Taken<'_>, Refusal> {
        // One connection's calls are polled by one task: no other taker races between the two.
        let held = self.declared.load(Ordering::Relaxed);
        if held + bytes > CONNECTION_BYTES {
            return Err(Refusal::new(
                GrpcCode::ResourceExhausted,
                format!(
                    "the request messages in progress on this connection would declare {} \
                     bytes together, over the limit of {CONNECTION_BYTES}",
                    held + bytes
                ),
            ));
        }
        self.declared.fetch_add(bytes, Ordering::Relaxed);
        Ok(Taken {
            budget: self,
            bytes,
        })
    }
}

/// Bytes of a [`ConnectionBudget`], given back when dropped.
struct Taken<'a> {
    budget: &'a ConnectionBudget,
    bytes: usize,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.budget
            .declared
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Every byte of a request body, whole within `timeout` of the first wait for it. The usual
/// message is in when the call starts: the clock is read only for one that is not.
pub(crate) async fn read_message(
    body: RecvStream,
    budget: &ConnectionBudget,
    timeout: Duration,
) -> Result<Bytes, Refusal> {
    let mut read = pin!(read_body(body, budget));
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        if let Poll::Ready(read) = read.as_mut().poll(cx) {
            return Poll::Ready(read);
        }
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        timer.as_mut().poll(cx).map(|()| {
            Err(Refusal::new(
                GrpcCode::DeadlineExceeded,
                format!("the request message was not whole within {timeout:?}"),
            ))
        })
    })
    .await
}

/// Every byte of a request body: the one DATA frame as it came (the usual call), or the frames
/// joined. Refused as soon as its prefix declares a message over the limit, or more than the
/// connection's budget has left.
async fn read_body(mut body: RecvStream, budget: &ConnectionBudget) -> Result<Bytes, Refusal> {
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    let mut taken = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|error| {
            Refusal::new(
                GrpcCode::Internal,
                format!("cannot read the request: {error}"),
            )
        })?;
        let received = chunk.len();
        let so_far: &[u8] = if first.is_empty() && joined.is_none() {
            first = chunk;
            &first
        } else {
            let joined = joined.get_or_insert_with(|| BytesMut::from(&first[..]));
            joined.extend_from_slice(&chunk);
            joined
        };
        check_partial(so_far)?;
        if taken.is_none()
            && let Some(declared) = declared_length(so_far)
        {
            taken = Some(budget.take(PREFIX_BYTES + declared)?);
        }
        // Only now, with the bytes counted against the budget, may the client send more.
        let _ = body.flow_control().release_capacity(received);
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}
