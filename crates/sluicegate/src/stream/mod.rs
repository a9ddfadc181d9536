//! Throttle and debounce for streams of events: the client-side pair to the server-side
//! limits in the rest of the crate (feature `stream`).
//!
//! - [`Throttle`] (`stream.throttle(interval)`): at most one item per interval. On the
//!   [`Edge::Leading`] edge the first item of a burst passes at once and the rest of its
//!   interval is dropped; on the [`Edge::Trailing`] edge the last item seen during the
//!   interval is emitted when it ends; [`Edge::Both`] (the default, as lodash's) does both.
//!   Any two items it emits are at least `interval` apart.
//! - [`Debounce`] (`stream.debounce(quiet)`): the latest item, once no new one has arrived
//!   for `quiet`; with [`Debounce::max_wait`] (lodash's `maxWait`) also at the latest that
//!   long after the first item of a burst, so a stream that is never quiet still emits.
//!
//! Both only ever drop items, never reorder them, and hold at most one.
//!
//! ```
//! use futures_util::{StreamExt, stream};
//! use sluicegate::stream::StreamRateExt;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let saves = stream::iter(["draft 1", "draft 2", "final"]).debounce(Duration::from_secs(1));
//! assert_eq!(saves.collect::<Vec<_>>().await, ["final"]);
//! # }
//! ```
//!
//! # When the input ends
//!
//! A debounce emits its held item at once: the input is as quiet as it will ever be, and
//! waiting out the quiet period would only delay the last item (as RxJS's `debounceTime`).
//! A throttle emits a held trailing item at the end of its interval, as if the input had
//! gone on: its promise is the spacing between items, and the last item keeps it (as RxJS's
//! `throttleTime`). Then the stream ends. An item's time is when the adapter pulls it, which
//! is whenever the adapter is polled, so a consumer that stops polling delays arrivals too.
//!
//! # Time: the crate's clock decides, tokio's timer wakes
//!
//! Every decision (is the interval over, has the input been quiet long enough) compares the
//! adapter's [`Clock`](crate::Clock) reading with a due time, on each poll. Tokio's timer
//! only wakes the task at the due time; when it fires, the clock is read again, and a clock
//! still short of the due time sets the timer for what is left. So:
//!
//! - With the [`SystemClock`](crate::SystemClock) (the extension trait's), the task sleeps on
//!   tokio's timer, which needs a tokio runtime with time enabled.
//! - With a [`ManualClock`](crate::ManualClock) (the `with_clock` constructors), a test is
//!   exact: in a runtime with tokio's time paused (`#[tokio::test(start_paused = true)]`), it
//!   moves both clocks by the same amount, the manual one for the decisions and tokio's for
//!   the wake-ups. A poll after the move sees the new time; a task waiting on the adapter is
//!   woken by tokio's timer when the due time comes. (Moving only tokio's time wakes the task,
//!   which finds the manual clock unmoved and waits again; that is why both must move.)
//!
//! ```
//! use sluicegate::ManualClock;
//! use std::time::Duration;
//!
//! /// Moves the clock that decides and the timer that wakes, together.
//! async fn step(clock: &ManualClock, by: Duration) {
//!     clock.advance(by);
//!     tokio::time::advance(by).await;
//! }
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! # step(&ManualClock::new(0), Duration::from_millis(1)).await;
//! # }
//! ```
//!
//! [`Throttle`] and [`Debounce`] show whole examples.

mod debounce;
mod ext;
mod gate;
mod throttle;

pub use debounce::Debounce;
pub use ext::StreamRateExt;
pub use throttle::{Edge, Throttle};
