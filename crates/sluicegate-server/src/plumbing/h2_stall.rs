//! An h2 response its client takes nothing of. A client that keeps its flow-control window
//! shut never lets hyper ask the response body for more, so the upstream connection streaming
//! it is held for as long as the client likes, up to 200 per client connection (hyper's
//! `max_concurrent_streams`). Over HTTP/1.1 the same client makes the socket write wait,
//! which `send_deadline` bounds; over h2 nothing waits but the stream. nginx's `send_timeout`
//! bounds both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The h2 response bodies of one client connection, and when each was last asked for more.
#[derive(Debug)]
pub(crate) struct Stalls {
    opened: Instant,
    /// Every body watched; a dropped one is pruned as the list grows.
    bodies: Mutex<Vec<Weak<LastAsked>>>,
}

/// When a response body last gave hyper something to send, in milliseconds after its
/// connection opened; [`WAITING`] while the body itself waits for more (for the upstream, whose
/// own timeout bounds that).
#[derive(Debug)]
pub(crate) struct LastAsked {
    ms: AtomicU64,
    opened: Instant,
}

/// The body has nothing to give yet: not a stall of the client's.
const WAITING: u64 = u64::MAX;

/// Milliseconds from `opened` to now: how a connection's watches (this one and the idle
/// watch) keep instants in an atomic.
pub(crate) fn ms_since(opened: Instant) -> u64 {
    u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// When the body gave something: never [`WAITING`].
fn gave_at(opened: Instant) -> u64 {
    ms_since(opened).min(WAITING - 1)
}

impl LastAsked {
    /// The body was asked for more; `gave`: it had something (or ended), so the clock runs
    /// until hyper asks again, which it does once the client has taken what it got.
    pub(crate) fn answered(&self, gave: bool) {
        let ms = if gave { gave_at(self.opened) } else { WAITING };
        self.ms.store(ms, Ordering::Relaxed);
    }
}

impl Stalls {
    pub(crate) fn new() -> Arc<Stalls> {
        Arc::new(Stalls {
            opened: Instant::now(),
            bodies: Mutex::new(Vec::new()),
        })
    }

    /// Watches a response body from now on, as if it had given something now; it is watched
    /// until the returned stamp is dropped (with the body).
    pub(crate) fn watch(&self) -> Arc<LastAsked> {
        let asked = Arc::new(LastAsked {
            ms: AtomicU64::new(gave_at(self.opened)),
            opened: self.opened,
        });
        let mut bodies = self.bodies.lock();
        // Pruned when full: amortised, a body costs one push.
        if bodies.len() == bodies.capacity() {
            bodies.retain(|body| body.strong_count() > 0);
        }
        bodies.push(Arc::downgrade(&asked));
        asked
    }

    /// Returns once some body watched has gone `timeout` without being asked for more since it
    /// last gave something.
    pub(crate) async fn stalled_for(&self, timeout: Duration) {
        loop {
            let oldest = self
                .bodies
                .lock()
                .iter()
                .filter_map(Weak::upgrade)
                .map(|body| body.ms.load(Ordering::Relaxed))
                .filter(|&ms| ms != WAITING)
                .min();
            let next_check = match oldest {
                Some(ms) => {
                    let deadline = self.opened + Duration::from_millis(ms) + timeout;
                    if Instant::now() >= deadline {
                        return;
                    }
                    deadline
                }
                None => Instant::now() + timeout,
            };
            tokio::time::sleep_until(next_check).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_not_asked_for_a_timeout_is_stalled_and_one_asked_in_time_is_not() {
        let stalls = Stalls::new();
        let timeout = Duration::from_secs(60);
        let watch = {
            let stalls = Arc::clone(&stalls);
            tokio::spawn(async move { stalls.stalled_for(timeout).await })
        };
        // Asked every 50 s, and one dropped after it ended: no stall for ten minutes.
        let asked = stalls.watch();
        drop(stalls.watch());
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            asked.answered(true);
        }
        // A body waiting ten minutes for its upstream is no stall either.
        let waiting = stalls.watch();
        waiting.answered(false);
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            asked.answered(true);
        }
        assert!(!watch.is_finished());
        // Then a body that gave something and is never asked again, once the other has ended.
        drop(asked);
        let started = Instant::now();
        waiting.answered(true);
        assert!(watch.await.is_ok());
        assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
        assert!(started.elapsed() <= timeout * 2, "{:?}", started.elapsed());
    }
}
