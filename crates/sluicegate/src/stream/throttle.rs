//! Throttle: at most one item per interval, on the leading edge, the trailing edge or both.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::{FusedStream, Stream};
use pin_project_lite::pin_project;

use super::gate::{Gate, Gated};
use crate::clock::{Clock, Micros, SystemClock, micros_ceil};

/// Which edges of an interval let an item through a [`Throttle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Edge {
    /// The first item of a burst passes at once and opens an interval; the items that arrive
    /// during it are dropped.
    Leading,
    /// The first item of a burst opens an interval; when it ends, the last item seen during
    /// it (perhaps that first one) is emitted, and the next interval starts then.
    Trailing,
    /// Both, as lodash's `throttle` by default: the first item of a burst passes at once, and
    /// the last of the ones that arrived during the interval is emitted when it ends (an item
    /// alone in its interval is emitted once, on the leading edge).
    #[default]
    Both,
}

impl Edge {
    fn leading(self) -> bool {
        matches!(self, Edge::Leading | Edge::Both)
    }

    fn trailing(self) -> bool {
        matches!(self, Edge::Trailing | Edge::Both)
    }
}

/// The throttle's decisions, a pure function of the items' times.
///
/// An interval opens when an item arrives with none open, and again whenever a held item is
/// emitted at an interval's end; so every two items it emits are at least an interval apart.
pub(super) struct ThrottleGate<T> {
    interval: Micros,
    edge: Edge,
    /// When the open interval ends (earlier items are held or dropped); an interval past its
    /// end with nothing held is simply closed, checked on the next arrival.
    window_end: Option<Micros>,
    /// The trailing edge's item: the last one seen during the open interval.
    held: Option<T>,
}

impl<T> Gate<T> for ThrottleGate<T> {
    fn arrive(&mut self, item: T, now: Micros) -> Option<T> {
        match self.window_end {
            Some(end) if now < end => {
                // Replacing any held item: the trailing edge keeps the latest.
                if self.edge.trailing() {
                    self.held = Some(item);
                }
                None
            }
            _ => {
                // The first item of a burst.
                self.window_end = Some(now.saturating_add(self.interval));
                if self.edge.leading() {
                    Some(item)
                } else {
                    self.held = Some(item);
                    None
                }
            }
        }
    }

    fn due(&self) -> Option<Micros> {
        // Only a held item needs waking for; an empty interval closes lazily.
        self.held.as_ref().and(self.window_end)
    }

    fn fire(&mut self, now: Micros) -> Option<T> {
        let item = self.held.take()?;
        // From the actual emission, not the scheduled end: a consumer that polled late must
        // still see the next item an interval later.
        self.window_end = Some(now.saturating_add(self.interval));
        Some(item)
    }

    fn end(&mut self, _now: Micros) -> Option<T> {
        // A held item waits for its interval's end even though nothing more can arrive, so the
        // interval between emissions holds to the last item.
        None
    }
}

pin_project! {
    /// A stream that passes at most one item per interval of its input: see [`Edge`] for
    /// which, and the [module documentation](super) for how time is kept.
    ///
    /// Made by [`StreamRateExt::throttle`](super::StreamRateExt::throttle) on the system
    /// clock, or by [`Throttle::with_clock`] on any [`Clock`]. When the input ends, a held
    /// trailing item is still emitted at the end of its interval, then the stream ends.
    ///
    /// ```
    /// use futures_util::{FutureExt, StreamExt, stream};
    /// use sluicegate::ManualClock;
    /// use sluicegate::stream::Throttle;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = ManualClock::new(0);
    /// let second = Duration::from_secs(1);
    /// // Three items at once: the first passes, the third waits for the interval's end.
    /// let mut events = Throttle::with_clock(stream::iter([1, 2, 3]), second, clock.clone());
    /// assert_eq!(events.next().await, Some(1));
    /// assert_eq!(events.next().now_or_never(), None);
    ///
    /// // A test moves the clock that decides and tokio's (paused) timer together.
    /// clock.advance(second);
    /// tokio::time::advance(second).await;
    /// assert_eq!(events.next().await, Some(3));
    /// assert_eq!(events.next().await, None);
    /// # }
    /// ```
    #[must_use = "streams do nothing unless polled"]
    pub struct Throttle<S: Stream, C = SystemClock> {
        #[pin]
        inner: Gated<S, C, ThrottleGate<S::Item>>,
    }
}

impl<S: Stream> Throttle<S> {
    /// Throttles `input` to one item per `interval` on the system clock, on both edges.
    pub fn new(input: S, interval: Duration) -> Self {
        Throttle::with_clock(input, interval, SystemClock::new())
    }
}

impl<S: Stream, C: Clock> Throttle<S, C> {
    /// Throttles `input` to one item per `interval` (rounded up to a microsecond) on `clock`,
    /// on both edges; tests pass a [`ManualClock`](crate::ManualClock).
    pub fn with_clock(input: S, interval: Duration, clock: C) -> Self {
        let gate = ThrottleGate {
            interval: micros_ceil(interval),
            edge: Edge::Both,
            window_end: None,
            held: None,
        };
        Throttle {
            inner: Gated::new(input, clock, gate),
        }
    }

    /// The same throttle, letting items through on `edge` instead of both. Meant to be called
    /// on a new throttle, before it is polled.
    pub fn edge(mut self, edge: Edge) -> Self {
        self.inner.gate.edge = edge;
        self
    }
}

impl<S: Stream, C: Clock> Stream for Throttle<S, C> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: Stream, C: Clock> FusedStream for Throttle<S, C> {
    fn is_terminated(&self) -> bool {
        self.inner.is_finished()
    }
}

impl<S: Stream, C> fmt::Debug for Throttle<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gate = &self.inner.gate;
        f.debug_struct("Throttle")
            .field("interval_micros", &gate.interval)
            .field("edge", &gate.edge)
            .field("window_end", &gate.window_end)
            .field("holding", &gate.held.is_some())
            .finish_non_exhaustive()
    }
}
