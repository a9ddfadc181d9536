//! Debounce: the latest item, once the input has been quiet for a while.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::{FusedStream, Stream};
use pin_project_lite::pin_project;

use super::gate::{Gate, Gated};
use crate::clock::{Clock, Micros, SystemClock, micros_ceil};

/// The debounce's decisions, a pure function of the items' times.
pub(super) struct DebounceGate<T> {
    quiet: Micros,
    /// The longest a burst may hold its latest item back, from the burst's first item.
    max_wait: Option<Micros>,
    held: Option<T>,
    /// When the held item arrived.
    last: Micros,
    /// When the first item since the last emission arrived: `max_wait` counts from it.
    first: Micros,
}

impl<T> Gate<T> for DebounceGate<T> {
    fn arrive(&mut self, item: T, now: Micros) -> Option<T> {
        if self.held.is_none() {
            self.first = now;
        }
        self.last = now;
        self.held = Some(item);
        None
    }

    fn due(&self) -> Option<Micros> {
        self.held.as_ref()?;
        let quiet_end = self.last.saturating_add(self.quiet);
        Some(match self.max_wait {
            Some(max_wait) => quiet_end.min(self.first.saturating_add(max_wait)),
            None => quiet_end,
        })
    }

    fn fire(&mut self, _now: Micros) -> Option<T> {
        self.held.take()
    }

    fn end(&mut self, _now: Micros) -> Option<T> {
        // Nothing can arrive any more, so the input is as quiet as it will ever be: waiting
        // out `quiet` would only delay the last item (RxJS's `debounceTime` also emits it
        // at once on completion).
        self.held.take()
    }
}

pin_project! {
    /// A stream that emits the latest item of its input once no new item has arrived for a
    /// quiet period, or, with [`Debounce::max_wait`], at the latest that long after the first
    /// item of a burst. See the [module documentation](super) for how time is kept.
    ///
    /// Made by [`StreamRateExt::debounce`](super::StreamRateExt::debounce) on the system
    /// clock, or by [`Debounce::with_clock`] on any [`Clock`]. When the input ends, a held
    /// item is emitted at once, then the stream ends.
    ///
    /// ```
    /// use futures_util::{FutureExt, StreamExt, stream};
    /// use sluicegate::ManualClock;
    /// use sluicegate::stream::Debounce;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = ManualClock::new(0);
    /// let quiet = Duration::from_millis(300);
    /// // Keystrokes that arrive together, then nothing: "abc" after 300 ms of quiet.
    /// let input = stream::iter(["a", "ab", "abc"]).chain(stream::pending());
    /// let mut search = Debounce::with_clock(input, quiet, clock.clone());
    /// assert_eq!(search.next().now_or_never(), None);
    ///
    /// // A test moves the clock that decides and tokio's (paused) timer together.
    /// clock.advance(quiet);
    /// tokio::time::advance(quiet).await;
    /// assert_eq!(search.next().await, Some("abc"));
    /// # }
    /// ```
    #[must_use = "streams do nothing unless polled"]
    pub struct Debounce<S: Stream, C = SystemClock> {
        #[pin]
        inner: Gated<S, C, DebounceGate<S::Item>>,
    }
}

impl<S: Stream> Debounce<S> {
    /// Debounces `input` on the system clock: its latest item once it has been quiet for
    /// `quiet`.
    pub fn new(input: S, quiet: Duration) -> Self {
        Debounce::with_clock(input, quiet, SystemClock::new())
    }
}

impl<S: Stream, C: Clock> Debounce<S, C> {
    /// Debounces `input` on `clock`: its latest item once it has been quiet for `quiet`
    /// (rounded up to a microsecond); tests pass a [`ManualClock`](crate::ManualClock).
    pub fn with_clock(input: S, quiet: Duration, clock: C) -> Self {
        let gate = DebounceGate {
            quiet: micros_ceil(quiet),
            max_wait: None,
            held: None,
            last: 0,
            first: 0,
        };
        Debounce {
            inner: Gated::new(input, clock, gate),
        }
    }

    /// The same debounce, emitting at most `max_wait` after the first item of a burst even
    /// if the input is never quiet, as lodash's `maxWait`. As there, a `max_wait` shorter
    /// than the quiet period counts as the quiet period. Meant to be called on a new
    /// debounce, before it is polled.
    ///
    /// ```
    /// use futures_util::{FutureExt, StreamExt, stream};
    /// use sluicegate::ManualClock;
    /// use sluicegate::stream::Debounce;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = ManualClock::new(0);
    /// let (quiet, max_wait) = (Duration::from_millis(100), Duration::from_millis(250));
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// let input = stream::poll_fn(move |cx| rx.poll_recv(cx));
    /// let mut saves = Debounce::with_clock(input, quiet, clock.clone()).max_wait(max_wait);
    ///
    /// // An edit every 50 ms is never quiet for 100 ms; max_wait emits the latest at 250 ms.
    /// for edit in 0..5 {
    ///     tx.send(edit).unwrap();
    ///     assert_eq!(saves.next().now_or_never(), None);
    ///     clock.advance(Duration::from_millis(50));
    ///     tokio::time::advance(Duration::from_millis(50)).await;
    /// }
    /// assert_eq!(saves.next().await, Some(4));
    /// # }
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        let gate = &mut self.inner.gate;
        gate.max_wait = Some(micros_ceil(max_wait).max(gate.quiet));
        self
    }
}

impl<S: Stream, C: Clock> Stream for Debounce<S, C> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: Stream, C: Clock> FusedStream for Debounce<S, C> {
    fn is_terminated(&self) -> bool {
        self.inner.is_finished()
    }
}

impl<S: Stream, C> fmt::Debug for Debounce<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gate = &self.inner.gate;
        f.debug_struct("Debounce")
            .field("quiet_micros", &gate.quiet)
            .field("max_wait_micros", &gate.max_wait)
            .field("holding", &gate.held.is_some())
            .finish_non_exhaustive()
    }
}
