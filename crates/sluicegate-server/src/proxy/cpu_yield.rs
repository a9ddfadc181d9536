//! A worker offers its CPU to the other threads waiting for one (`sched_yield`) every so many
//! requests.
//!
//! On cores shared with what it serves (the app behind a sidecar, the clients in front of
//! it), a busy worker otherwise keeps its CPU for a whole scheduler slice, up to a timer tick
//! (4 ms at the common `HZ=250`), while the threads that would read its answers and send the
//! next requests wait for that CPU: requests then wait whole ticks in socket buffers, and the
//! tail of the latency is counted in ticks. Yielding every few dozen requests interleaves the
//! worker with them finely (measured in BENCHMARKS.md: on a loaded 2-core machine the p99 of
//! denied traffic fell from 7.9 ms, two ticks, to about 1 ms, and that of allowed traffic by
//! a third). On a CPU nobody else waits for, the yield returns at once: one system call per
//! that many requests.

use std::cell::Cell;
use std::num::NonZeroU32;

thread_local! {
    /// Requests this thread has taken since it last yielded.
    static TAKEN: Cell<u32> = const { Cell::new(0) };
}

/// Counts a request this thread takes, and yields its CPU if it is the `every`-th since the
/// last yield.
#[inline]
pub(crate) fn count_request(every: NonZeroU32) {
    if TAKEN.with(|taken| due(taken, every)) {
        std::thread::yield_now();
    }
}

/// Counts one request in `taken`: whether it is the `every`-th (`taken` starts again).
#[inline]
fn due(taken: &Cell<u32>, every: NonZeroU32) -> bool {
    let count = taken.get() + 1;
    let due = count >= every.get();
    taken.set(if due { 0 } else { count });
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_request_is_due() {
        let taken = Cell::new(0);
        let every = NonZeroU32::new(3).expect("3");
        let seen: Vec<bool> = (0..7).map(|_| due(&taken, every)).collect();
        assert_eq!(seen, [false, false, true, false, false, true, false]);
        // Every request, with 1.
        assert!((0..4).all(|_| due(&taken, NonZeroU32::MIN)));
    }
}
