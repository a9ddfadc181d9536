//! Counts of what the layer did, shared by every clone: what a dry run is read by. Requests
//! passed at once are not counted: that would cost every request an atomic operation on a
//! shared cache line (count them in the inner service, or with a metrics layer).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a layer did since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests passed after a shaping wait.
    pub delayed: u64,
    /// Requests rejected by a limit.
    pub denied: u64,
    /// Requests a limit would have rejected, passed because of dry run (nginx's
    /// `REJECTED_DRY_RUN`).
    pub dry_run_denied: u64,
    /// Requests whose key could not be read.
    pub missing_key: u64,
    /// Requests the backend could not decide (key cap included).
    pub backend_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) delayed: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) dry_run_denied: AtomicU64,
    pub(crate) missing_key: AtomicU64,
    pub(crate) backend_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            delayed: read(&self.delayed),
            denied: read(&self.denied),
            dry_run_denied: read(&self.dry_run_denied),
            missing_key: read(&self.missing_key),
            backend_errors: read(&self.backend_errors),
        }
    }
}
