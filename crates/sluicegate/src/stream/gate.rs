//! The poll loop shared by throttle and debounce: pull items, let a [`Gate`] decide on the
//! clock's reading, and sleep on tokio's timer until the gate's next due time.
//!
//! The gates are pure state machines of explicit time, as the crate's algorithms are; only
//! this loop reads the clock and touches the timer, so the two adapters cannot drift apart in
//! how they order arrivals, deadlines and the end of the input.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::clock::{Clock, Micros};

/// Steps one poll takes at most before yielding: an always-ready input whose items a gate
/// drops (a leading-only throttle) would otherwise hold the thread for a whole interval, or
/// forever on a clock that does not move by itself.
const STEPS_PER_POLL: usize = 32;

/// What decides, item by item, what a rate adapter lets through. Times are the clock's.
pub(super) trait Gate<T> {
    /// `item` was pulled from the input at `now`: returns what to emit at once, if anything.
    /// The loop calls [`Gate::fire`] first whenever [`Gate::due`] is at or before `now`.
    fn arrive(&mut self, item: T, now: Micros) -> Option<T>;

    /// When the held item is due (`None` when nothing is held).
    fn due(&self) -> Option<Micros>;

    /// The due time has come (`now >= due`): the held item to emit.
    fn fire(&mut self, now: Micros) -> Option<T>;

    /// The input ended at `now`: an item to emit at once, if anything; an item still held
    /// after this is emitted at its due time.
    fn end(&mut self, now: Micros) -> Option<T>;
}

pin_project! {
    /// An input stream behind a gate: the engine of [`super::Throttle`] and
    /// [`super::Debounce`].
    pub(super) struct Gated<S, C, G> {
        #[pin]
        input: S,
        clock: C,
        pub(super) gate: G,
        // Boxed so the adapters are `Unpin` whenever the input is, and made only when first
        // needed, since making one needs a tokio runtime.
        timer: Option<Pin<Box<Sleep>>>,
        // The due time the timer is set for; `None` once it has fired or before it is set.
        armed_for: Option<Micros>,
        input_ended: bool,
        finished: bool,
    }
}

impl<S, C, G> Gated<S, C, G> {
    pub(super) fn new(input: S, clock: C, gate: G) -> Self {
        Gated {
            input,
            clock,
            gate,
            timer: None,
            armed_for: None,
            input_ended: false,
            finished: false,
        }
    }

    pub(super) fn is_finished(&self) -> bool {
        self.finished
    }
}

impl<S, C, G> Gated<S, C, G>
where
    S: Stream,
    C: Clock,
    G: Gate<S::Item>,
{
    pub(super) fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let mut this = self.project();
        if *this.finished {
            return Poll::Ready(None);
        }
        for _ in 0..STEPS_PER_POLL {
            // Read afresh on every step: an item's time is when it is pulled.
            let now = this.clock.now();
            // Deadlines before arrivals: a held item whose time has come is emitted before an
            // item pulled now can replace it (a consumer that polls late must not lose it).
            if this.gate.due().is_some_and(|due| due <= now) {
                match this.gate.fire(now) {
                    Some(item) => return Poll::Ready(Some(item)),
                    None => continue,
                }
            }
            if !*this.input_ended {
                match this.input.as_mut().poll_next(cx) {
                    Poll::Ready(Some(item)) => match this.gate.arrive(item, now) {
                        Some(out) => return Poll::Ready(Some(out)),
                        None => continue,
                    },
                    Poll::Ready(None) => {
                        *this.input_ended = true;
                        match this.gate.end(now) {
                            Some(out) => return Poll::Ready(Some(out)),
                            None => continue,
                        }
                    }
                    // The input has our waker: an arrival wakes us, and so must the timer.
                    Poll::Pending => {}
                }
            }
            let Some(due) = this.gate.due() else {
                if *this.input_ended {
                    *this.finished = true;
                    return Poll::Ready(None);
                }
                return Poll::Pending;
            };
            if *this.armed_for != Some(due) {
                // The timer only wakes us; whether the item is due is the clock's call, so a
                // manual clock decides even though tokio's timer does the waiting.
                let wait = Duration::from_micros(due.saturating_sub(now));
                match (this.timer.as_mut(), Instant::now().checked_add(wait)) {
                    (Some(timer), Some(deadline)) => timer.as_mut().reset(deadline),
                    // `sleep` copes with a wait past the end of `Instant`.
                    _ => *this.timer = Some(Box::pin(tokio::time::sleep(wait))),
                }
                *this.armed_for = Some(due);
            }
            let fired = match this.timer.as_mut() {
                Some(timer) => timer.as_mut().poll(cx).is_ready(),
                None => false,
            };
            if !fired {
                return Poll::Pending;
            }
            // Fired: look at the clock again; if it is still short of the due time (a real
            // clock a hair behind tokio's, a manual clock not moved yet), the timer is set
            // again for what is left.
            *this.armed_for = None;
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    pub(super) fn size_hint(&self) -> (usize, Option<usize>) {
        if self.finished {
            return (0, Some(0));
        }
        // A held item is emitted sooner or later (a later one may take its place), and the
        // gate may drop any number of the rest.
        let held = usize::from(self.gate.due().is_some());
        if self.input_ended {
            return (held, Some(held));
        }
        let (_, upper) = self.input.size_hint();
        (held, upper.and_then(|upper| upper.checked_add(held)))
    }
}
