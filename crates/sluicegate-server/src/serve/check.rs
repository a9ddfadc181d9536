//! What a call is decided against: one [`Check`] per limit a descriptor names, and the answers
//! the decider gives back. A leaf module: the engine plans checks, the decider reads them, and
//! neither needs the other.

use std::num::NonZeroU64;

use sluicegate::Decision;
use smallvec::SmallVec;

use crate::serve::protocol::CurrentLimit;

/// How a descriptor's limits take part in the call's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Decides the call: all enforcing limits are charged together, or none.
    Enforce,
    /// `quota_mode`: over its limit, it fails the call only if every quota-mode descriptor of
    /// the call is over too; those that allow are charged with the enforcing limits.
    Quota,
    /// `shadow_mode`: decided on its own after the others (charged if they allowed), never
    /// failing the call.
    Shadow,
    /// `hits_addend: 0`: peeked, never charged, never failing the call.
    CheckOnly,
}

/// One limit a call is checked against, `L` its store's form of the limit.
#[derive(Debug)]
pub(crate) struct Check<L> {
    /// The descriptor's position in the call.
    pub(crate) descriptor: usize,
    /// How answers report the limit.
    pub(crate) report: CurrentLimit,
    /// The limit in the store (`None`: nothing ever passes, and no store is asked).
    pub(crate) limit: Option<L>,
    /// The counter key.
    pub(crate) key: String,
    /// The hits asked for (one for a check-only descriptor, which is peeked).
    pub(crate) permits: NonZeroU64,
    pub(crate) role: Role,
}

/// Each check of a call with its decision (`None`: can never pass); inline for a few.
pub(crate) type Decided<'a, L> = SmallVec<[(&'a Check<L>, Option<Decision>); 2]>;
