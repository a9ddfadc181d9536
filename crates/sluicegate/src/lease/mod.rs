//! Permit leasing, pure: a store that shares a limit among processes (Redis) hands a process a
//! batch of permits in one call, and the process grants them itself, one request at a time,
//! without giving up the limit.
//!
//! - **What fits**: a lease of `k` is taken with the request that asks for it, at `now`: the
//!   request is decided as always, and if allowed, `k` more permits are taken only if they fit
//!   at `now` too (at most the decision's `remaining`).
//! - **How it is charged**: as granted at the lease's last microsecond `end - 1`, the latest
//!   it may be used, so no algorithm forgets a leased permit before one used then would be
//!   forgotten. The windows (fixed, sliding) have no such time: a lease ends with the window
//!   or slot that counts it (`end` at most its end), and is counted there at once. The buckets
//!   (GCRA, token bucket, leaky meter) are charged as granted at `end - 1`: the TAT becomes
//!   `max(TAT, end - 1) + k` intervals. So that this never puts the debt seen from `now` past
//!   the tolerance (every other caller would be denied until the lease's end), a bucket's
//!   lease of `k` ends within `tolerance - k` intervals, and holds at most what leaves it
//!   usable for `min(life, tolerance / 2)` ([`lease_permits`], [`lease_end`]).
//! - **Why the limit holds**: every permit is charged no later than it is used, and fitted at
//!   `now`, no later than it is used either; so the grants as used, replayed through the
//!   algorithm in time order, are each allowed (the property the tests check).
//! - **Giving back**: unused permits are uncounted where that is exact: a window still in
//!   force, a slot still kept. Otherwise they are spent, and come back by time alone, as a
//!   dead process's do. A bucket takes nothing back: a later lease with a later end lifts the
//!   TAT to its own charge time and absorbs an earlier lease's charge, so the debt above a
//!   lease's charge time may be another lease's, and uncounting it would over-admit.
//! - **Which algorithms** ([`lease_kind`]): fixed window, sliding window (both modes), GCRA,
//!   token bucket, leaky bucket (meter). Not the sliding log: it dates a grant at its newest
//!   entry when that is later than now, and counts back from there, so a lease's entry dated
//!   ahead would make every other caller's check forget grants still in the window. Not the
//!   leaky queue (each grant's wait depends on the order of every request), concurrency
//!   (permits are held, not spent) nor Guava's smooth limiters (no shared store runs them).
//! - **How big** ([`LeaseSizing`]): by the key's recent local rate; a cold key leases nothing.

mod size;
mod terms;
#[cfg(test)]
mod tests;

pub use size::{LeaseSizing, LocalRate};
pub use terms::{
    LeaseKind, LeaseTerms, Leased, charge_lease, give_back, lease_end, lease_kind, lease_permits,
    take_lease,
};
