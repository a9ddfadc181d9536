//! How many client connections each worker serves, and which worker serves the next one.
//!
//! A worker that accepts a connection while another serves fewer hands it to the one serving
//! fewest (the hand-over itself is `workers`'s): accepting alone is not enough, since the kernel
//! wakes every worker for a new connection and the one already running takes every connection
//! of a burst before the others are scheduled (measured: after an idle second, all 64
//! connections of a `wrk` run on one of two workers, half the requests per second of an even
//! split). nginx avoids it with `EPOLLEXCLUSIVE` and one accept per wake-up, which tokio does
//! not offer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use smallvec::SmallVec;

/// The connections each worker serves, shared by the workers and the metrics.
#[derive(Debug)]
pub(crate) struct Loads {
    /// Open connections by worker (index 0: the first worker).
    open: Box<[AtomicUsize]>,
    /// Workers that no longer take connections (their thread ended).
    gone: Box<[AtomicBool]>,
    /// No workers: one count, of the connections on the caller's runtime.
    no_workers: bool,
}

impl Loads {
    /// The counts of `workers` workers (0: of the caller's runtime).
    pub(crate) fn new(workers: usize) -> Arc<Loads> {
        let slots = workers.max(1);
        Arc::new(Loads {
            open: (0..slots).map(|_| AtomicUsize::new(0)).collect(),
            gone: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            no_workers: workers == 0,
        })
    }

    /// Open connections by worker.
    fn open(&self) -> impl Iterator<Item = usize> + '_ {
        self.open.iter().map(|n| n.load(Ordering::Relaxed))
    }

    /// Open connections by worker number as `--workers` counts them (1 to N; 0 alone when
    /// there are no workers).
    pub(crate) fn by_worker(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let first = usize::from(!self.no_workers);
        self.open().enumerate().map(move |(i, n)| (i + first, n))
    }

    /// Never chooses `worker` again (its thread has ended or is stopping).
    pub(crate) fn stop_choosing(&self, worker: usize) {
        self.gone[worker].store(true, Ordering::Relaxed);
    }

    /// Counts a new connection against `worker` until the returned guard is dropped.
    pub(crate) fn count(self: &Arc<Self>, worker: usize) -> Counted {
        self.open[worker].fetch_add(1, Ordering::Relaxed);
        Counted {
            loads: Arc::clone(self),
            worker,
        }
    }

    /// The worker that serves a connection worker `me` accepted, counted against it.
    pub(crate) fn assign(self: &Arc<Self>, me: usize) -> Counted {
        let open: SmallVec<[Option<usize>; 16]> = self
            .open
            .iter()
            .zip(&self.gone)
            .map(|(n, gone)| (!gone.load(Ordering::Relaxed)).then(|| n.load(Ordering::Relaxed)))
            .collect();
        self.count(least_loaded(&open, me))
    }
}

/// `me`, unless another worker still taking connections (`Some`) serves fewer: then the first
/// of those serving fewest.
fn least_loaded(open: &[Option<usize>], me: usize) -> usize {
    let mine = open[me].unwrap_or(usize::MAX);
    open.iter()
        .enumerate()
        .filter_map(|(worker, n)| Some((worker, (*n)?)))
        .filter(|&(_, n)| n < mine)
        .min_by_key(|&(_, n)| n)
        .map_or(me, |(worker, _)| worker)
}

/// A connection counted in its worker's load until dropped (with the connection's task, or
/// when the connection starts lingering).
#[derive(Debug)]
pub(crate) struct Counted {
    loads: Arc<Loads>,
    worker: usize,
}

impl Counted {
    /// The worker the connection is counted against.
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.loads.open[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places `n` connections all accepted by worker `me`, as a burst the first worker to wake
    /// takes whole.
    fn burst(loads: &Arc<Loads>, me: usize, n: usize) -> Vec<Counted> {
        (0..n).map(|_| loads.assign(me)).collect()
    }

    #[test]
    fn a_burst_accepted_by_one_worker_is_spread_evenly() {
        let loads = Loads::new(2);
        let held = burst(&loads, 1, 64);
        assert_eq!(loads.open().collect::<Vec<_>>(), [32, 32]);
        let loads = Loads::new(3);
        let _held3 = burst(&loads, 0, 64);
        assert_eq!(loads.open().collect::<Vec<_>>(), [22, 21, 21]);
        drop(held);
    }

    #[test]
    fn closed_connections_make_room_where_they_were() {
        let loads = Loads::new(2);
        let mut held = burst(&loads, 0, 4);
        // Worker 0's two connections close: the next two go to it even when worker 1 accepts.
        held.retain(|c| c.worker == 1);
        assert_eq!(loads.open().collect::<Vec<_>>(), [0, 2]);
        let more = burst(&loads, 1, 2);
        assert!(more.iter().all(|c| c.worker == 0));
        assert_eq!(loads.open().collect::<Vec<_>>(), [2, 2]);
    }

    #[test]
    fn a_worker_gone_is_never_chosen() {
        let loads = Loads::new(3);
        loads.stop_choosing(2);
        let held = burst(&loads, 0, 10);
        assert_eq!(loads.open().collect::<Vec<_>>(), [5, 5, 0]);
        drop(held);
        assert_eq!(loads.open().collect::<Vec<_>>(), [0, 0, 0]);
    }

    #[test]
    fn ties_keep_the_connection_where_it_was_accepted() {
        assert_eq!(least_loaded(&[Some(3), Some(3)], 1), 1);
        assert_eq!(least_loaded(&[Some(3), Some(4), Some(2)], 1), 2);
        assert_eq!(least_loaded(&[None, Some(9)], 0), 1);
    }
}
