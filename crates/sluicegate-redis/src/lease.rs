//! Concurrency permits held in Redis as leases that expire, so a crashed holder cannot leak.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use sluicegate::Micros;

/// Permits of a concurrency limit held until released, renewed, or expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) keys: [Vec<u8>; 2],
    /// The lease's id, unique across processes.
    pub id: String,
    /// Permits held.
    pub permits: u64,
    /// When the lease expires unless renewed (microseconds since the Unix epoch, on the clock
    /// the decision used).
    pub expires_at: Micros,
}

/// What is done to a lease its holder has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    /// Given back.
    Release,
    /// Extended for another lease from now.
    Renew,
}

impl LeaseOp {
    /// The op as the concurrency script reads it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LeaseOp::Release => "release",
            LeaseOp::Renew => "renew",
        }
    }
}

/// 128 random bits (std's per-process random hash keys) plus a counter: unique without a
/// random number crate.
pub(crate) fn new_lease_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let a = RandomState::new().hash_one(count);
    let b = RandomState::new().hash_one(std::process::id());
    format!("{a:016x}{b:016x}{count:x}")
}
