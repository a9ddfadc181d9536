//! Wakers that tell a task which of its quiet futures was woken.
//!
//! A client connection's task drives one busy future (the connection, woken by every read and
//! write) beside a few quiet ones (the shutdown signal, the idle timer, the h2 stall watch)
//! that fire once in a connection's life, if ever. Polled together, as `select!` does, every
//! quiet one is polled at every wake-up of the busy one: about 2% of the proxy's instructions
//! per request. Each quiet future here gets a waker of its own that marks it woken before it
//! wakes the task, and the task polls it only then.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// One waker per quiet future (`N` of them, at most 32), each marking its own future woken.
pub(crate) struct BranchWakers<const N: usize> {
    shared: Arc<Shared>,
    wakers: [Waker; N],
}

struct Shared {
    /// Bit `i`: branch `i` was woken since the task last looked.
    woken: AtomicU32,
    /// The task to wake.
    task: AtomicWaker,
}

struct Branch {
    shared: Arc<Shared>,
    bit: u32,
}

impl Wake for Branch {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.woken.fetch_or(self.bit, Ordering::AcqRel);
        self.shared.task.wake();
    }
}

/// Which branches were woken since the task last looked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Woken(u32);

impl Woken {
    pub(crate) fn has(self, branch: usize) -> bool {
        self.0 & (1 << branch) != 0
    }
}

impl<const N: usize> BranchWakers<N> {
    /// Every branch marked woken to begin with, so that each is polled once (which is how its
    /// future learns its waker).
    pub(crate) fn new() -> BranchWakers<N> {
        const { assert!(N <= 32) };
        let shared = Arc::new(Shared {
            woken: AtomicU32::new(u32::MAX),
            task: AtomicWaker::new(),
        });
        let wakers = std::array::from_fn(|i| {
            Waker::from(Arc::new(Branch {
                shared: Arc::clone(&shared),
                bit: 1 << i,
            }))
        });
        BranchWakers { shared, wakers }
    }

    /// Takes which branches were woken since the last call, the task being polled with `cx`
    /// (the one a branch wakes from now on).
    pub(crate) fn woken(&self, cx: &Context<'_>) -> Woken {
        // Registered first: a branch woken after the swap below wakes this task again.
        self.shared.task.register(cx.waker());
        Woken(self.shared.woken.swap(0, Ordering::AcqRel))
    }

    /// Marks `branch` woken, for a new future put in its place to be polled.
    pub(crate) fn wake(&self, branch: usize) {
        self.shared.woken.fetch_or(1 << branch, Ordering::AcqRel);
    }

    /// Polls `future` as `branch`, with that branch's waker.
    pub(crate) fn poll<F: Future + ?Sized>(
        &self,
        branch: usize,
        future: Pin<&mut F>,
    ) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(&self.wakers[branch]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_branch_is_reported_woken_once_after_its_own_waker_fired() {
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&task));
        let cx = Context::from_waker(&waker);
        let wakers = BranchWakers::<3>::new();
        let first = wakers.woken(&cx);
        assert!((0..3).all(|b| first.has(b)), "every branch to begin with");
        assert!(!(0..3).any(|b| wakers.woken(&cx).has(b)), "then none");

        wakers.wakers[1].wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task is woken");
        let woken = wakers.woken(&cx);
        assert!(woken.has(1) && !woken.has(0) && !woken.has(2));
        assert!(!wakers.woken(&cx).has(1), "taken");

        wakers.wake(2);
        assert!(wakers.woken(&cx).has(2));
    }
}
