//! `stream.throttle(interval)` and `stream.debounce(quiet)` on any stream.

use std::time::Duration;

use futures_core::Stream;

use super::{Debounce, Throttle};

/// Throttle and debounce as methods of every [`Stream`], on the system clock. For another
/// clock (a [`ManualClock`](crate::ManualClock) in tests), use [`Throttle::with_clock`] and
/// [`Debounce::with_clock`].
///
/// ```
/// use futures_util::{StreamExt, stream};
/// use sluicegate::stream::{Edge, StreamRateExt};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let hour = Duration::from_secs(3600);
/// // A burst of clicks within the hour: on the leading edge only the first gets through.
/// let clicks = stream::iter(1..=5).throttle(hour).edge(Edge::Leading);
/// assert_eq!(clicks.collect::<Vec<_>>().await, [1]);
///
/// // Keystrokes, then the end of the input: the debounce emits the last one at once.
/// let typed = stream::iter(["s", "sl", "slu"]).debounce(hour);
/// assert_eq!(typed.collect::<Vec<_>>().await, ["slu"]);
/// # }
/// ```
///
/// tokio-stream's own `StreamExt` has a `throttle` too (a different one: it delays every
/// item, dropping none); with both traits in scope, call this one as
/// `StreamRateExt::throttle(stream, interval)`.
pub trait StreamRateExt: Stream + Sized {
    /// At most one item per `interval`, on both edges (lodash's default): the first item of
    /// a burst at once, and the last one of the interval when it ends. Change the edges with
    /// [`Throttle::edge`].
    fn throttle(self, interval: Duration) -> Throttle<Self> {
        Throttle::new(self, interval)
    }

    /// The latest item once no new one has arrived for `quiet`. Bound the wait of a stream
    /// that is never quiet with [`Debounce::max_wait`].
    fn debounce(self, quiet: Duration) -> Debounce<Self> {
        Debounce::new(self, quiet)
    }
}

impl<S: Stream> StreamRateExt for S {}
